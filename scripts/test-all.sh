#!/usr/bin/env bash
# The README's test command: EVERY test, for real, on a fresh machine.
#
#   scripts/test-all.sh            # what CI runs (.ci/run execs exactly this)
#
# It installs or builds what the tests need and is missing, starts the
# services, runs the whole suite including the tests that plain `cargo test`
# shows as ignored for want of a service, runs the fuzz targets for a bounded
# time, and stops what it started, by PID. Exit status: non-zero if anything
# failed (every step still runs and reports).
#
#   1. a Python venv with discord.py and hikari (tests/py/requirements.txt),
#      OUTSIDE the clone under $CACHE/venv                -> GATEWAYD_PYTHON
#   1b. discord.js 14, Eris 0.18 (with pako, its pure-JS inflater), discordeno 21
#      (@discordeno/bot, with fzstd for zstd-stream) and axe-core
#      (tests/js/package-lock.json, npm ci) OUTSIDE the clone
#      under $CACHE/js                                     -> GATEWAYD_NODE_MODULES
#   2. PostgreSQL (Debian's package, apt-get if missing; a throwaway cluster
#      in a temp dir, loopback only)                      -> GATEWAYD_TEST_DATABASE_URL
#   3. Redis (Debian's redis-server, apt-get if missing; loopback, no
#      persistence, a temp dir)                            -> GATEWAYD_TEST_REDIS_URL
#      tests/rest_redis.rs starts and kills its own from the same binary
#      (tests/service_tls.rs one with --tls-port: Debian's is built with TLS)
#                                                          -> GATEWAYD_TEST_REDIS_SERVER
#   4. Tansu, a Kafka-protocol broker (built from crates.io once per machine
#      into $CACHE: ~15-30 min the first time; in-memory storage)
#                                                          -> GATEWAYD_TEST_KAFKA_BROKERS
#      The fault drills (tests/drills.rs) start, stop, freeze and kill their
#      own PostgreSQL and Tansu from the same binaries  -> GATEWAYD_TEST_PG_BIN,
#      GATEWAYD_TEST_TANSU (tests/service_tls.rs: a PostgreSQL with ssl on)
#   5. chromium and chromedriver (Debian's chromium, chromium-driver;
#      apt-get if missing) for the developer portal's browser test
#                                       -> GATEWAYD_CHROMIUM, GATEWAYD_CHROMEDRIVER
#   5b. the ops kit: promtool (Debian's prometheus package) on the alert rules
#      and their tests, the dashboard's metric names      (scripts/check-ops.sh)
#   6. cargo fmt --check and cargo clippy -D warnings (workspace and fuzz/),
#      cargo build --workspace --all-targets, then
#      cargo test --workspace --no-fail-fast -- --include-ignored, skipping
#      only the measurements that are run by hand (HEAVY below)
#   7. every fuzz target for FUZZ_SECONDS each               (scripts/fuzz.sh)
#
# Needs root the first time (apt-get, the PostgreSQL system user); later runs
# reuse the cache. Disk: about 8 GiB free in the clone's filesystem (a
# warning says so first when there is less). Settings: GATEWAYD_CI_CACHE
# (default /var/cache/gatewayd-ci), GATEWAYD_CI_MIN_FREE_GIB (8),
# GATEWAYD_BASE_PYTHON (python3), FUZZ_SECONDS (20), GATEWAYD_TEST_ARGS (extra
# arguments for the test binaries, e.g. a name filter).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"

CACHE="${GATEWAYD_CI_CACHE:-/var/cache/gatewayd-ci}"
export GATEWAYD_CI_CACHE="$CACHE"
VENV="$CACHE/venv"
REQUIREMENTS="$ROOT/tests/py/requirements.txt"
BASE_PYTHON="${GATEWAYD_BASE_PYTHON:-python3}"
FUZZ_SECONDS="${FUZZ_SECONDS:-20}"

# Measurements that are #[ignore]d because they are run by hand (minutes
# each, tens of thousands of sockets), not because a service is missing.
HEAVY=(hold_40000_sessions compression_figures memory_per_compressed_session interaction_figures portal_cost_figures cluster_cost_figures)

T0=$SECONDS
log() { printf '\n== [%4ds] %s\n' "$((SECONDS - T0))" "$*"; }

# One build per clone: incremental caches are never reused by a fresh clone,
# so CI does not write them (with them and full debug info for every
# dependency, target/debug was 13 GiB; without, 4.8 GiB; with line tables
# only and compressed debug sections, Cargo.toml and .cargo/config.toml,
# 3.1 GiB).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

# Disk: the build (3.1 GiB), the fuzz build cache and the services' and
# tests' temp dirs need about MIN_FREE_GIB in the clone's filesystem. Below
# that, say so first: the failure comes minutes later as "No space left on
# device".
MIN_FREE_GIB="${GATEWAYD_CI_MIN_FREE_GIB:-8}"
free_gib="$(df -Pk "$ROOT" | awk 'NR == 2 { printf "%d", $4 / 1048576 }')"
echo "disk: ${free_gib} GiB free under $ROOT (the run needs about ${MIN_FREE_GIB} GiB)"
if ((free_gib < MIN_FREE_GIB)); then
    echo "warning: only ${free_gib} GiB free under $ROOT; a build or a test may fail with" \
        "'No space left on device'. Free space (old clones' target/ dirs are the usual cause)" \
        "or set GATEWAYD_CI_MIN_FREE_GIB to silence this." >&2
fi

# ---------------------------------------------------------------- Python venv
log "python venv: $VENV"
mkdir -p "$CACHE"
if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    # Missing or broken (e.g. the base interpreter moved): rebuild from scratch.
    rm -rf "$VENV"
    "$BASE_PYTHON" -m venv "$VENV" || {
        echo "error: '$BASE_PYTHON -m venv' failed; this machine needs CPython 3 with venv/ensurepip" >&2
        exit 1
    }
fi
# Reinstall only when requirements.txt changed since the last successful
# install, or the installed set no longer imports.
want_hash="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"
stamp="$VENV/.gatewayd-requirements.sha256"
if [[ "$(cat "$stamp" 2>/dev/null || true)" != "$want_hash" ]] ||
    ! "$VENV/bin/python" -c 'import discord, hikari, aiohttp, yarl' >/dev/null 2>&1; then
    echo "installing $REQUIREMENTS"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$REQUIREMENTS"
    echo "$want_hash" >"$stamp"
else
    echo "requirements already satisfied"
fi
export GATEWAYD_PYTHON="$VENV/bin/python"
export PYTHONDONTWRITEBYTECODE=1

# ---------------------------------------------------------------- discord.js
# tests/js/package-lock.json installed OUTSIDE the clone under $CACHE/js with
# the machine's Node.js (npm ci, no install scripts); again only when the
# lock changed or the install no longer loads.
JS_DIR="$CACHE/js"
log "discord.js + Eris + discordeno: $JS_DIR"
mkdir -p "$JS_DIR"
js_hash="$(cat "$ROOT/tests/js/package.json" "$ROOT/tests/js/package-lock.json" | sha256sum | cut -d' ' -f1)"
js_stamp="$JS_DIR/.gatewayd-lock.sha256"
if [[ "$(cat "$js_stamp" 2>/dev/null || true)" != "$js_hash" ]] ||
    ! NODE_PATH="$JS_DIR/node_modules" node -e 'require("discord.js"); require("eris"); require("pako"); require("@discordeno/bot"); require.resolve("fzstd"); require.resolve("axe-core")' >/dev/null 2>&1; then
    cp "$ROOT/tests/js/package.json" "$ROOT/tests/js/package-lock.json" "$JS_DIR/"
    (cd "$JS_DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
    echo "$js_hash" >"$js_stamp"
else
    echo "discord.js, Eris and discordeno already installed"
fi
export GATEWAYD_NODE_MODULES="$JS_DIR/node_modules"

# ---------------------------------------------------------------- versions
log "tool versions"
uname -srm
rustc --version
cargo --version
"$GATEWAYD_PYTHON" -c 'import discord, hikari, aiohttp, sys; print("python", sys.version.split()[0], "/ discord.py", discord.__version__, "/ hikari", hikari.__version__, "/ aiohttp", aiohttp.__version__)'
js_version() { node -p 'JSON.parse(require("fs").readFileSync(process.argv[1])).version' "$GATEWAYD_NODE_MODULES/$1/package.json"; }
echo "node $(node --version) / discord.js $(js_version discord.js) / eris $(js_version eris) / pako $(js_version pako) / @discordeno/bot $(js_version @discordeno/bot) / fzstd $(js_version fzstd)"
if command -v cmake >/dev/null 2>&1; then
    echo "cmake: $(command -v cmake) (not needed by the build)"
else
    echo "cmake: absent (not needed)"
fi

# ---------------------------------------------------------------- SERVICES
# Started in the background, one PID each in SERVICE_PIDS; the EXIT trap
# stops exactly those PIDs (never by name), each with its own stop signal,
# then removes the temp dirs in SERVICE_DIRS. Data under fresh temp dirs,
# loopback only, a bounded readiness wait each.
SERVICE_PIDS=()
SERVICE_NAMES=()
SERVICE_SIGNALS=()
SERVICE_DIRS=()

start_service() { # NAME CMD... : start CMD in the background, logs in $SERVICE_LOG_DIR/NAME.log
    # Stopped with SIGTERM, or with $STOP_SIGNAL if set for this call.
    local name="$1"
    shift
    "$@" >"$SERVICE_LOG_DIR/$name.log" 2>&1 &
    SERVICE_PIDS+=("$!")
    SERVICE_NAMES+=("$name")
    SERVICE_SIGNALS+=("${STOP_SIGNAL:-TERM}")
    echo "started $name (pid $!)"
}

run_service() { # NAME SCRIPT DIR PORT SECS : `SCRIPT run DIR PORT`, ready within SECS
    # (and still ours: fails at once if the server exited, e.g. because
    # another one took the port first), else its log and exit 1.
    local name="$1" script="$2" dir="$3" port="$4" secs="$5"
    start_service "$name" bash "$script" run "$dir" "$port"
    bash "$script" wait-ready "$port" "$secs" "${SERVICE_PIDS[-1]}" || {
        echo "error: $name not ready; its log:" >&2
        cat "$SERVICE_LOG_DIR/$name.log" >&2
        exit 1
    }
}

stop_services() {
    local i pid
    for ((i = ${#SERVICE_PIDS[@]} - 1; i >= 0; i--)); do
        pid="${SERVICE_PIDS[$i]}"
        if kill -0 "$pid" 2>/dev/null; then
            echo "stopping ${SERVICE_NAMES[$i]} (pid $pid, SIG${SERVICE_SIGNALS[$i]})"
            kill "-${SERVICE_SIGNALS[$i]}" "$pid" 2>/dev/null || true
            for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
            kill -KILL "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
    done
    for ((i = 0; i < ${#SERVICE_DIRS[@]}; i++)); do rm -rf "${SERVICE_DIRS[$i]}"; done
    rm -rf "$SERVICE_LOG_DIR"
}

SERVICE_LOG_DIR="$(mktemp -d -t gatewayd-test-services.XXXXXX)"
trap stop_services EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# PostgreSQL: Debian's package (installed if missing: apt-get, ~1 min), a
# fresh cluster (initdb ~1 s), trust auth, fsync off; as root it runs as the
# system user gatewayd-pg. `pg-test-server.sh run` execs the server, so the
# PID recorded is the postmaster's; SIGINT is its fast shutdown.
log "postgresql"
pg_t0=$SECONDS
PG_SCRIPT="$ROOT/scripts/pg-test-server.sh"
PG_BIN="$(bash "$PG_SCRIPT" install)"
"$PG_BIN/postgres" --version
export GATEWAYD_TEST_PG_BIN="$PG_BIN"
PG_DIR="$(mktemp -d -t gatewayd-test-pg.XXXXXX)"
SERVICE_DIRS+=("$PG_DIR")
bash "$PG_SCRIPT" init "$PG_DIR"
PG_PORT="$(bash "$PG_SCRIPT" free-port 54329)"
STOP_SIGNAL=INT run_service postgres "$PG_SCRIPT" "$PG_DIR" "$PG_PORT" 60
bash "$PG_SCRIPT" create-db "$PG_PORT"
export GATEWAYD_TEST_DATABASE_URL
GATEWAYD_TEST_DATABASE_URL="$(bash "$PG_SCRIPT" url "$PG_PORT")"
echo "GATEWAYD_TEST_DATABASE_URL=$GATEWAYD_TEST_DATABASE_URL (ready in $((SECONDS - pg_t0)) s)"

# Redis: Debian's package (installed if missing: apt-get; its own service is
# kept from starting and disabled), one server on a free loopback port, no
# persistence. `redis-test-server.sh run` execs the server: the PID is its own.
log "redis"
redis_t0=$SECONDS
REDIS_SCRIPT="$ROOT/scripts/redis-test-server.sh"
REDIS_BIN="$(bash "$REDIS_SCRIPT" install)"
"$REDIS_BIN" --version
export GATEWAYD_TEST_REDIS_SERVER="$REDIS_BIN"
REDIS_DIR="$(mktemp -d -t gatewayd-test-redis.XXXXXX)"
SERVICE_DIRS+=("$REDIS_DIR")
REDIS_PORT="$(bash "$REDIS_SCRIPT" free-port 16379)"
run_service redis "$REDIS_SCRIPT" "$REDIS_DIR" "$REDIS_PORT" 30
export GATEWAYD_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
echo "GATEWAYD_TEST_REDIS_URL=$GATEWAYD_TEST_REDIS_URL (ready in $((SECONDS - redis_t0)) s)"

# Tansu: built once per machine into the cache (see tansu-test-broker.sh),
# in-memory storage (an empty cluster per run); the tests create their own
# topics. `tansu-test-broker.sh run` execs the broker: the PID is its own.
log "tansu (Kafka-protocol broker)"
tansu_t0=$SECONDS
TANSU_SCRIPT="$ROOT/scripts/tansu-test-broker.sh"
TANSU_BIN="$(bash "$TANSU_SCRIPT" install)"
"$TANSU_BIN" --version
export GATEWAYD_TEST_TANSU="$TANSU_BIN"
TANSU_DIR="$(mktemp -d -t gatewayd-test-tansu.XXXXXX)"
SERVICE_DIRS+=("$TANSU_DIR")
TANSU_PORT="$(bash "$TANSU_SCRIPT" free-port 19092)"
run_service tansu "$TANSU_SCRIPT" "$TANSU_DIR" "$TANSU_PORT" 60
export GATEWAYD_TEST_KAFKA_BROKERS="127.0.0.1:$TANSU_PORT"
echo "GATEWAYD_TEST_KAFKA_BROKERS=$GATEWAYD_TEST_KAFKA_BROKERS (ready in $((SECONDS - tansu_t0)) s)"

# Chromium and its WebDriver: Debian's packages (installed if missing,
# without starting anything). tests/portal_browser.rs starts its own
# chromedriver on a free port and stops it by PID.
log "chromium + chromedriver"
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    die() { echo "error: $*" >&2; exit 1; }
    # shellcheck source=service-lib.sh
    . "$ROOT/scripts/service-lib.sh"
    apt_install_no_start chromium
    apt_install_no_start chromium-driver
fi
export GATEWAYD_CHROMIUM GATEWAYD_CHROMEDRIVER
GATEWAYD_CHROMIUM="$(command -v chromium)"
GATEWAYD_CHROMEDRIVER="$(command -v chromedriver)"
chromium --version 2>/dev/null || true
chromedriver --version

# OpenSSL's headers for librdkafka's TLS (rdkafka-sys feature `ssl`: TLS to
# the Kafka brokers). A fresh machine of this kind has them; installed if not.
log "libssl-dev + pkg-config (librdkafka's TLS)"
if ! pkg-config --exists openssl 2>/dev/null; then
    die() { echo "error: $*" >&2; exit 1; }
    # shellcheck source=service-lib.sh
    . "$ROOT/scripts/service-lib.sh"
    command -v pkg-config >/dev/null 2>&1 || apt_install_no_start pkg-config
    apt_install_no_start libssl-dev
fi
pkg-config --modversion openssl

status=0
failed=()

# ---------------------------------------------------------------- ops kit
log "ops kit (scripts/check-ops.sh)"
bash "$ROOT/scripts/check-ops.sh" || { status=1; failed+=("check-ops"); }

# ---------------------------------------------------------------- lints
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# Formatting and clippy (-D warnings: the workspace lints in Cargo.toml,
# e.g. every unsafe block with its SAFETY comment), the fuzz crate too.
log "cargo fmt --check; cargo clippy --workspace --all-targets -- -D warnings"
{ cargo fmt --all -- --check && cargo fmt --manifest-path fuzz/Cargo.toml -- --check; } ||
    { status=1; failed+=("fmt"); }
cargo clippy --workspace --all-targets -- -D warnings || { status=1; failed+=("clippy"); }

# ---------------------------------------------------------------- build + test
log "cargo build --workspace --all-targets"
cargo build --workspace --all-targets

skips=()
for t in "${HEAVY[@]}"; do skips+=(--skip "$t"); done
# --no-fail-fast: report every failing test binary, not just the first.
log "cargo test --workspace --no-fail-fast -- --include-ignored ${skips[*]} ${GATEWAYD_TEST_ARGS:-}"
# shellcheck disable=SC2086 # GATEWAYD_TEST_ARGS is a list of words
cargo test --workspace --no-fail-fast -- --include-ignored "${skips[@]}" ${GATEWAYD_TEST_ARGS:-} ||
    { status=1; failed+=("cargo test"); }

# ---------------------------------------------------------------- fuzzing
# Every target for FUZZ_SECONDS on a copy of the committed corpus; the
# instrumented build is cached outside the clone (~3 min the first time).
log "fuzz targets, ${FUZZ_SECONDS} s each (scripts/fuzz.sh)"
FUZZ_TARGET_DIR="${FUZZ_TARGET_DIR:-$CACHE/fuzz-target}" bash "$ROOT/scripts/fuzz.sh" "$FUZZ_SECONDS" ||
    { status=1; failed+=("fuzz"); }

log "done: exit $status${failed[*]:+ (failed: ${failed[*]})}"
exit "$status"
