#!/usr/bin/env bash
# A throwaway Redis for the shared rate-limit counter tests: Debian's
# redis-server, loopback only, no persistence, its files in a temp dir.
# Used by scripts/test-all.sh (SERVICES); tests/rest_redis.rs starts and
# kills its own from the binary this prints (GATEWAYD_TEST_REDIS_SERVER).
#
#   install          install redis-server from Debian if missing (as root;
#                    the package's own service is kept from starting and
#                    disabled); prints the binary's path (quick when present)
#   free-port [P]    first loopback port >= P (default 16379) nobody listens on
#   run DIR PORT     exec the server in the foreground: the caller's PID *is*
#                    the server (stop it with SIGTERM)
#   wait-ready PORT SECONDS [PID]   until it answers PING (fails at once if PID exits)
set -euo pipefail

die() {
    echo "redis-test-server: $*" >&2
    exit 1
}
# shellcheck source=service-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/service-lib.sh"

cmd_install() {
    local bin
    bin="$(command -v redis-server || true)"
    if [[ -z "$bin" ]]; then
        [[ "$(id -u)" == 0 ]] || die "redis-server is not installed; run as root or: apt-get install redis-server"
        echo "installing redis-server from Debian" >&2
        # No server of its own on 6379, and not enabled either.
        apt_install_no_start redis-server
        if command -v systemctl >/dev/null 2>&1; then
            systemctl disable --now redis-server >/dev/null 2>&1 || true
        fi
        command -v update-rc.d >/dev/null 2>&1 && update-rc.d redis-server disable >/dev/null 2>&1 || true
        bin="$(command -v redis-server || true)"
        [[ -n "$bin" ]] || die "installed, but no redis-server on PATH"
    fi
    echo "$bin"
}

cmd_free_port() { free_port_from "${1:-16379}"; }

cmd_run() {
    local dir="${1:?run DIR PORT}" port="${2:?run DIR PORT}" bin
    bin="$(command -v redis-server || true)"
    [[ -n "$bin" ]] || die "redis-server is not installed (run: $0 install)"
    # Test settings: loopback only, nothing written to disk.
    exec "$bin" --bind 127.0.0.1 --port "$port" --dir "$dir" \
        --save '' --appendonly no --daemonize no --loglevel warning
}

cmd_wait_ready() { # PORT SECONDS [PID]
    local port="$1" secs="$2" pid="${3:-}" deadline reply
    deadline=$((SECONDS + secs))
    while true; do
        reply="$( (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf 'PING\r\n' >&3 &&
            timeout 1 head -c 7 <&3) 2>/dev/null || true)"
        [[ "$reply" == "+PONG"* ]] && return 0
        [[ -z "$pid" ]] || kill -0 "$pid" 2>/dev/null || die "server (pid $pid) exited"
        ((SECONDS < deadline)) || die "not ready after ${secs}s"
        sleep 0.1
    done
}

case "${1:-}" in
install) cmd_install ;;
free-port) cmd_free_port "${@:2}" ;;
run) cmd_run "${@:2}" ;;
wait-ready) cmd_wait_ready "${@:2}" ;;
*)
    sed -n '2,14p' "$0" >&2
    exit 2
    ;;
esac
