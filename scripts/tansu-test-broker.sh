#!/usr/bin/env bash
# A throwaway Kafka-protocol broker for the Kafka ingest tests: Tansu
# (crates.io `tansu`, a Kafka-compatible broker in Rust), in-memory storage by
# default, loopback only. Used by scripts/test-all.sh (SERVICES), by the
# fault drills (tests/drills.rs: durable storage, so a broker killed with
# kill -9 keeps what it acknowledged), and by developers:
#
#   scripts/tansu-test-broker.sh start [DIR]  # background broker; prints the
#                                             # export line and the stop command
#   scripts/tansu-test-broker.sh stop DIR     # stop by PID, remove DIR
#
# Building blocks (what scripts/test-all.sh uses, so its EXIT trap owns the PID):
#   install          build tansu once into the cache if missing (cargo install,
#                    ~15-30 min on 2 cores, serialised with flock); prints the
#                    binary's path (quick when present)
#   free-port [P]    first loopback port >= P (default 19092) nobody listens on
#   run DIR PORT [STORAGE [ADVERTISED]]
#                    exec the broker in the foreground in DIR: the caller's PID
#                    *is* the broker (stop it with SIGTERM). STORAGE: the
#                    storage engine URL, default memory://tansu/ (nothing
#                    kept); sqlite://tansu.db keeps topics, records and
#                    committed offsets in DIR/tansu.db. ADVERTISED: the
#                    host:port clients are told to reach it at (default
#                    127.0.0.1:PORT); tests/kafka_tls.rs gives its TLS front's,
#                    as Tansu 0.6 takes --cert/--key but serves plaintext
#   wait-ready PORT SECONDS [PID]
#                    until a Kafka-protocol request (list topics) succeeds
#
# The binary lives under ${GATEWAYD_CI_CACHE:-/var/cache/gatewayd-ci}/tansu-0.6.0-libsql
# (or $GATEWAYD_TANSU, a tansu binary to use as is). The memory engine keeps
# nothing: every start is an empty cluster.
set -euo pipefail

TANSU_VERSION=0.6.0
# dynostore: the memory:// (and s3://) engine; libsql: the sqlite:// engine
# (a file: durable across kill -9; libsql-ffi compiles its bundled C with cc,
# no cmake). Not postgres:// (its schema ships only in Tansu's repository, not
# on crates.io) and not turso:// (0.6.0's DDL does not parse with turso
# 0.1.5: "unexpected token"). No lake house.
TANSU_FEATURES=dynostore,libsql
CACHE="${GATEWAYD_CI_CACHE:-/var/cache/gatewayd-ci}"
TANSU_ROOT="$CACHE/tansu-$TANSU_VERSION-libsql"

die() {
    echo "tansu-test-broker: $*" >&2
    exit 1
}
# shellcheck source=service-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/service-lib.sh"

tansu_bin() {
    if [[ -n "${GATEWAYD_TANSU:-}" ]]; then
        echo "$GATEWAYD_TANSU"
    else
        echo "$TANSU_ROOT/bin/tansu"
    fi
}

cmd_install() {
    local bin
    bin="$(tansu_bin)"
    if [[ ! -x "$bin" ]]; then
        [[ -z "${GATEWAYD_TANSU:-}" ]] || die "GATEWAYD_TANSU=$GATEWAYD_TANSU is not executable"
        mkdir -p "$CACHE"
        # One build per machine even when two runs start together: the second
        # waits for the lock, then finds the binary.
        (
            flock 9
            if [[ ! -x "$bin" ]]; then
                echo "building tansu $TANSU_VERSION into $TANSU_ROOT (once per machine, ~15-30 min on 2 cores)" >&2
                local t0=$SECONDS
                cargo install tansu --version "$TANSU_VERSION" --no-default-features \
                    --features "$TANSU_FEATURES" --root "$TANSU_ROOT" --locked >&2
                echo "built tansu in $((SECONDS - t0)) s" >&2
            fi
        ) 9>"$CACHE/tansu-$TANSU_VERSION.lock"
        [[ -x "$bin" ]] || die "cargo install finished but $bin is missing"
    fi
    echo "$bin"
}

cmd_free_port() { free_port_from "${1:-19092}"; }

cmd_run() {
    local dir="${1:?run DIR PORT [STORAGE]}" port="${2:?run DIR PORT [STORAGE]}" bin
    local storage="${3:-memory://tansu/}" advertised="${4:-127.0.0.1:$2}"
    bin="$(tansu_bin)"
    [[ -x "$bin" ]] || die "tansu is not installed (run: $0 install)"
    mkdir -p "$dir"
    # In DIR: tansu reads a .env from its working directory (and parents);
    # settings it would take from the environment are given explicitly or
    # removed, so the caller's environment cannot redirect it.
    cd "$dir"
    exec env -u SCHEMA_REGISTRY -u OTEL_EXPORTER_OTLP_ENDPOINT -u STORAGE_ENGINE \
        -u LISTENER_URL -u ADVERTISED_LISTENER_URL -u CLUSTER_ID \
        "$bin" broker \
        --cluster-id gatewayd-test \
        --listener-url "tcp://127.0.0.1:$port" \
        --advertised-listener-url "tcp://$advertised" \
        --storage-engine "$storage"
}

cmd_wait_ready() { # PORT SECONDS [PID]
    local port="${1:?wait-ready PORT SECONDS [PID]}" secs="${2:?wait-ready PORT SECONDS [PID]}" pid="${3:-}" bin deadline
    bin="$(tansu_bin)"
    deadline=$((SECONDS + secs))
    # A real Kafka-protocol round trip (Metadata), not just an open port.
    until timeout 5 "$bin" topic list --broker "tcp://127.0.0.1:$port" >/dev/null 2>&1; do
        [[ -z "$pid" ]] || kill -0 "$pid" 2>/dev/null || die "broker (pid $pid) exited"
        ((SECONDS < deadline)) || die "not ready after ${secs}s"
        sleep 0.2
    done
}

cmd_start() {
    local dir="${1:-}" port pid
    [[ -n "$dir" ]] || dir="$(mktemp -d -t gatewayd-tansu.XXXXXX)"
    mkdir -p "$dir"
    cmd_install >/dev/null
    port="$(cmd_free_port 19092)"
    nohup "$0" run "$dir" "$port" >"$dir/broker.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$dir/broker.pid"
    cmd_wait_ready "$port" 60 "$pid" || {
        cat "$dir/broker.log" >&2
        exit 1
    }
    echo "# Tansu test broker: pid $pid, port $port, dir $dir (log: $dir/broker.log)"
    echo "export GATEWAYD_TEST_KAFKA_BROKERS=127.0.0.1:$port"
    echo "# stop: $0 stop $dir"
}

cmd_stop() {
    local dir="${1:?stop DIR}" pid
    [[ -f "$dir/broker.pid" ]] || die "no broker started in $dir"
    pid="$(cat "$dir/broker.pid")"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    rm -rf "$dir"
    echo "stopped pid $pid"
}

case "${1:-}" in
install) cmd_install ;;
free-port) cmd_free_port "${@:2}" ;;
run) cmd_run "${@:2}" ;;
wait-ready) cmd_wait_ready "${@:2}" ;;
start) cmd_start "${@:2}" ;;
stop) cmd_stop "${@:2}" ;;
*)
    sed -n '2,24p' "$0" >&2
    exit 2
    ;;
esac
