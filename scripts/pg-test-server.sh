#!/usr/bin/env bash
# A throwaway PostgreSQL server for the registry tests: Debian's package,
# a fresh cluster in a temp dir, loopback only, trust auth, no fsync.
# Used by scripts/test-all.sh (SERVICES), the fault drills (tests/drills.rs)
# and developers:
#
#   scripts/pg-test-server.sh start [DIR]   # background server; prints the
#                                           # export line and the stop command
#   scripts/pg-test-server.sh stop DIR      # fast shutdown by PID, removes DIR
#
# Building blocks (what scripts/test-all.sh uses, so its EXIT trap owns the PID):
#   install          install postgresql from Debian if initdb is missing;
#                    prints the server's bin dir (idempotent, quick when present)
#   init DIR         initdb a fresh cluster in DIR/data, sockets in DIR/sock
#   free-port [P]    first loopback port >= P (default 54329) nobody listens on
#   run DIR PORT [kill-safe]
#                    exec the server in the foreground: the caller's PID *is*
#                    the postmaster (stop it with SIGINT, "fast shutdown");
#                    kill-safe: commits survive a kill -9 of the server
#   url PORT [DB]    the URL for GATEWAYD_TEST_DATABASE_URL
#
# As root (CI), initdb and postgres refuse to run; they run as the system
# user $PG_USER (created on first use) via setpriv, which execs, so the PID
# is still the server's.
set -euo pipefail

PG_USER="${GATEWAYD_PG_USER:-gatewayd-pg}" # the OS user running the server
PG_ROLE="gatewayd"                         # the database superuser
PG_DB="${GATEWAYD_PG_DB:-gatewayd_test}"

die() {
    echo "pg-test-server: $*" >&2
    exit 1
}
# shellcheck source=service-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/service-lib.sh"

bindir() { # newest /usr/lib/postgresql/*/bin with initdb and postgres
    local d best=""
    for d in /usr/lib/postgresql/*/bin; do
        [[ -x "$d/initdb" && -x "$d/postgres" ]] && best="$d"
    done
    # The glob sorts lexically; pick the highest major numerically.
    if [[ -n "$best" ]]; then
        for d in /usr/lib/postgresql/*/bin; do
            [[ -x "$d/initdb" && -x "$d/postgres" ]] || continue
            local a="${d#/usr/lib/postgresql/}" b="${best#/usr/lib/postgresql/}"
            ((${a%%/*} > ${b%%/*})) && best="$d"
        done
    fi
    echo "$best"
}

cmd_install() {
    local bin
    bin="$(bindir)"
    if [[ -z "$bin" ]]; then
        [[ "$(id -u)" == 0 ]] || die "PostgreSQL is not installed; run as root or: apt-get install postgresql"
        echo "installing PostgreSQL from Debian" >&2
        # Its cluster "main" is created but stays stopped.
        apt_install_no_start postgresql
        bin="$(bindir)"
        [[ -n "$bin" ]] || die "installed, but no /usr/lib/postgresql/*/bin/initdb"
    fi
    echo "$bin"
}

as_server_user() { # CMD... : run (exec) as the server's OS user when root
    if [[ "$(id -u)" == 0 ]]; then
        if command -v setpriv >/dev/null; then
            exec setpriv --reuid="$PG_USER" --regid="$PG_USER" --clear-groups -- "$@"
        fi
        exec runuser -u "$PG_USER" -- "$@"
    fi
    exec "$@"
}

cmd_init() {
    local dir="${1:?init DIR}" bin
    bin="$(cmd_install)"
    if [[ "$(id -u)" == 0 ]] && ! id -u "$PG_USER" >/dev/null 2>&1; then
        useradd --system --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin "$PG_USER"
    fi
    mkdir -p "$dir/data" "$dir/sock"
    if [[ "$(id -u)" == 0 ]]; then
        chown -R "$PG_USER:" "$dir"
    fi
    chmod 700 "$dir/data"
    (as_server_user "$bin/initdb" -D "$dir/data" -U "$PG_ROLE" --auth=trust \
        --encoding=UTF8 --locale=C --no-sync --no-instructions >"$dir/initdb.log" 2>&1) ||
        {
            cat "$dir/initdb.log" >&2
            die "initdb failed"
        }
}

cmd_free_port() { free_port_from "${1:-54329}"; }

cmd_run() {
    local dir="${1:?run DIR PORT [kill-safe]}" port="${2:?run DIR PORT [kill-safe]}" bin sync=off
    bin="$(bindir)"
    [[ -n "$bin" ]] || die "PostgreSQL is not installed (run: $0 install)"
    # `kill-safe`: every commit is in the WAL (written to the kernel, not
    # fsynced) before it is acknowledged, so a kill -9 of the server loses
    # no committed row (the fault drills kill it); the default acknowledges
    # first and can lose the last ~0.6 s of commits to a kill.
    [[ "${3:-}" == kill-safe ]] && sync=on
    # Test settings: loopback only, nothing durable against a machine
    # crash (the data is throwaway), room for parallel test threads.
    as_server_user "$bin/postgres" -D "$dir/data" -k "$dir/sock" -p "$port" \
        -c listen_addresses=127.0.0.1 \
        -c fsync=off -c synchronous_commit="$sync" -c full_page_writes=off \
        -c max_connections=200 \
        -c log_min_messages=warning -c log_min_error_statement=panic
}

cmd_url() {
    echo "postgres://$PG_ROLE@127.0.0.1:${1:?url PORT [DB]}/${2:-$PG_DB}"
}

cmd_create_db() { # PORT [DB]
    local bin
    bin="$(bindir)"
    "$bin/psql" -h 127.0.0.1 -p "${1:?create-db PORT}" -U "$PG_ROLE" -d postgres -qAtX \
        -c "CREATE DATABASE ${2:-$PG_DB}"
}

cmd_wait_ready() { # PORT SECONDS [PID]
    local port="$1" secs="$2" pid="${3:-}" bin deadline
    bin="$(bindir)"
    deadline=$((SECONDS + secs))
    until "$bin/pg_isready" -q -h 127.0.0.1 -p "$port"; do
        [[ -z "$pid" ]] || kill -0 "$pid" 2>/dev/null || die "server (pid $pid) exited"
        ((SECONDS < deadline)) || die "not ready after ${secs}s"
        sleep 0.2
    done
}

cmd_start() {
    local dir="${1:-}" port pid
    [[ -n "$dir" ]] || dir="$(mktemp -d -t gatewayd-pg.XXXXXX)"
    cmd_init "$dir"
    port="$(cmd_free_port 54329)"
    nohup "$0" run "$dir" "$port" >"$dir/server.log" 2>&1 </dev/null &
    pid=$!
    cmd_wait_ready "$port" 60 "$pid" || {
        cat "$dir/server.log" >&2
        exit 1
    }
    cmd_create_db "$port"
    echo "# PostgreSQL test server: pid $pid, port $port, dir $dir (log: $dir/server.log)"
    echo "export GATEWAYD_TEST_DATABASE_URL=$(cmd_url "$port")"
    echo "# stop: $0 stop $dir"
}

cmd_stop() {
    local dir="${1:?stop DIR}" pid
    [[ -f "$dir/data/postmaster.pid" ]] || die "no server running in $dir"
    pid="$(head -n1 "$dir/data/postmaster.pid")"
    kill -INT "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$pid" 2>/dev/null && die "pid $pid still running"
    rm -rf "$dir"
    echo "stopped pid $pid"
}

case "${1:-}" in
install) cmd_install ;;
init) cmd_init "${@:2}" ;;
free-port) cmd_free_port "${@:2}" ;;
run) cmd_run "${@:2}" ;;
url) cmd_url "${@:2}" ;;
create-db) cmd_create_db "${@:2}" ;;
wait-ready) cmd_wait_ready "${@:2}" ;;
start) cmd_start "${@:2}" ;;
stop) cmd_stop "${@:2}" ;;
*)
    sed -n '2,25p' "$0" >&2
    exit 2
    ;;
esac
