#!/usr/bin/env bash
# Checks the ops kit in deploy/ without building or starting a node:
#
#   scripts/check-ops.sh [--admin HOST:PORT]
#
#   1. promtool check rules  deploy/prometheus/gatewayd-alerts.yml
#   2. promtool test rules   deploy/prometheus/gatewayd-alerts.test.yml
#      (every alert fires on the case built for it, and stays quiet next to it)
#   3. the Grafana dashboard is valid JSON (python3 -m json.tool)
#   4. every metric name the alerts and the dashboard use (gatewayd_*,
#      process_*; `up` and the blackbox exporter's probe_success are not
#      gatewayd's) is a family in deploy/metric-families.txt, a histogram's
#      _bucket/_sum/_count, and rate()/increase() are only taken of counters
#      and histogram series. tests/ops_kit.rs checks that list (and the
#      labels the queries select) against a real node's /metrics.
#      With --admin HOST:PORT (a running node's admin_addr) the names are
#      checked against that node's /metrics instead.
#   5. deploy/gatewayd.toml is valid TOML (that its keys exist is checked by
#      tests/ops_kit.rs, which starts a node with it)
#   6. systemd-analyze verify deploy/systemd/gatewayd.service, where
#      systemd-analyze exists (skipped otherwise)
#
# promtool comes from Debian's `prometheus` package: when it is missing the
# script installs it with apt-get (root only; otherwise it stops with the
# command to run). A fresh install must not start a Prometheus server here
# (it would also take 9090, gatewayd's default admin port): unless the
# machine already has a /usr/sbin/policy-rc.d, one that refuses service
# starts is in place for the install only. The package's prometheus.service
# stays installed but stopped (`systemctl disable prometheus` keeps it so
# after a reboot).
#
# Bounded: the install 10 min at most, each check 2 min. Prints each check
# and its result; exits 1 if any failed (2 on a usage error).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEPLOY="$ROOT/deploy"
ALERTS="$DEPLOY/prometheus/gatewayd-alerts.yml"
ALERT_TESTS="$DEPLOY/prometheus/gatewayd-alerts.test.yml"
DASHBOARD="$DEPLOY/grafana/gatewayd-dashboard.json"
FAMILIES="$DEPLOY/metric-families.txt"
CONFIG="$DEPLOY/gatewayd.toml"
UNIT="$DEPLOY/systemd/gatewayd.service"
STEP_TIMEOUT=120
INSTALL_TIMEOUT=600

ADMIN=""
while [[ $# -gt 0 ]]; do
    case "$1" in
    --admin)
        [[ $# -ge 2 ]] || { echo "check-ops: --admin needs HOST:PORT" >&2; exit 2; }
        ADMIN="$2"
        shift 2
        ;;
    -h | --help)
        sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "check-ops: unknown argument: $1 (see --help)" >&2
        exit 2
        ;;
    esac
done

PASSED=0
FAILED=0
FAILURES=()
TMP=$(mktemp -d)
cleanup_policy=""
cleanup() {
    [[ -n "$cleanup_policy" ]] && rm -f "$cleanup_policy"
    rm -rf "$TMP"
}
trap cleanup EXIT

# check NAME CMD...: run CMD (bounded), print its output indented and the result.
check() {
    local name="$1"
    shift
    printf '\n== %s\n' "$name"
    local rc=0
    timeout "$STEP_TIMEOUT" "$@" >"$TMP/out" 2>&1 || rc=$?
    sed 's/^/   /' "$TMP/out"
    if [[ $rc -eq 0 ]]; then
        echo "   -> OK"
        PASSED=$((PASSED + 1))
    else
        [[ $rc -eq 124 ]] && echo "   (timed out after ${STEP_TIMEOUT}s)"
        echo "   -> FAILED (exit $rc)"
        FAILED=$((FAILED + 1))
        FAILURES+=("$name")
    fi
}

# ---------------------------------------------------------------- promtool
install_promtool() {
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        echo "check-ops: promtool is not installed. It comes with Debian's prometheus package:" >&2
        echo "    sudo apt-get install -y --no-install-recommends prometheus" >&2
        echo "(or put any promtool 2.x on PATH) and run this again." >&2
        exit 1
    fi
    echo "== installing promtool (Debian package prometheus, no recommends)"
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        # Refuse service starts during this install only (invoke-rc.d and
        # deb-systemd-invoke both ask this script; 101 = action forbidden).
        printf '#!/bin/sh\n# check-ops.sh: no service starts while installing promtool\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 0755 /usr/sbin/policy-rc.d
        cleanup_policy=/usr/sbin/policy-rc.d
    fi
    local apt=(timeout "$INSTALL_TIMEOUT" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus)
    if ! "${apt[@]}" >"$TMP/apt.log" 2>&1; then
        # A machine that never ran apt-get update has no package lists.
        timeout "$INSTALL_TIMEOUT" apt-get update -q >>"$TMP/apt.log" 2>&1 || true
        "${apt[@]}" >>"$TMP/apt.log" 2>&1 || {
            tail -20 "$TMP/apt.log" >&2
            echo "check-ops: apt-get install prometheus failed (log above)" >&2
            exit 1
        }
    fi
    if [[ -n "$cleanup_policy" ]]; then
        rm -f "$cleanup_policy"
        cleanup_policy=""
    fi
    command -v promtool >/dev/null 2>&1 || {
        echo "check-ops: the prometheus package installed no promtool on PATH" >&2
        exit 1
    }
}

command -v promtool >/dev/null 2>&1 || install_promtool
command -v python3 >/dev/null 2>&1 || {
    echo "check-ops: python3 is needed (JSON, TOML and the metric names)" >&2
    exit 1
}
echo "check-ops: $(promtool --version 2>&1 | head -1); $(python3 --version)"

# ---------------------------------------------------------------- checks
# promtool resolves rule_files relative to the test file.
check "promtool check rules ${ALERTS#"$ROOT"/}" promtool check rules "$ALERTS"
check "promtool test rules ${ALERT_TESTS#"$ROOT"/}" promtool test rules "$ALERT_TESTS"
# shellcheck disable=SC2016 # $1 is the inner shell's argument
check "dashboard JSON (python3 -m json.tool ${DASHBOARD#"$ROOT"/})" \
    sh -c 'python3 -m json.tool "$1" >/dev/null && echo "valid JSON"' sh "$DASHBOARD"

if [[ -n "$ADMIN" ]]; then
    curl_metrics() { curl -fsS --max-time 5 "http://$ADMIN/metrics"; }
    curl_metrics >"$TMP/metrics" || {
        echo "check-ops: cannot GET http://$ADMIN/metrics (is --admin the node's admin_addr?)" >&2
        exit 1
    }
    # name type, from the live node's TYPE lines
    awk '$1 == "#" && $2 == "TYPE" {print $3, $4}' "$TMP/metrics" >"$TMP/families"
    NAMES_FROM="$TMP/families"
    NAMES_DESC="the /metrics of $ADMIN"
else
    NAMES_FROM="$FAMILIES"
    NAMES_DESC="${FAMILIES#"$ROOT"/}"
fi

# The same name scan as tests/ops_kit.rs: gatewayd_[a-z0-9_]+ and
# process_[a-z0-9_]+ standing alone, in the alert file's text and in every
# string of the dashboard (decoded JSON).
check "metric names of the alerts and the dashboard exist in $NAMES_DESC" \
    python3 - "$NAMES_FROM" "$ALERTS" "$DASHBOARD" <<'PY'
import json, re, sys

families_file, alerts, dashboard = sys.argv[1:4]
families = {}
for n, line in enumerate(open(families_file), 1):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    parts = line.split()
    if len(parts) != 2:
        sys.exit(f"{families_file}:{n}: expected `name type`: {line!r}")
    families[parts[0]] = parts[1]

series = {}  # series name -> family type
for name, kind in families.items():
    if kind == "histogram":
        for suffix in ("_bucket", "_sum", "_count"):
            series[name + suffix] = kind
    series[name] = kind

def strings(v):
    if isinstance(v, str):
        yield v
    elif isinstance(v, list):
        for x in v:
            yield from strings(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from strings(x)

texts = {
    alerts: open(alerts).read(),
    dashboard: "\n".join(strings(json.load(open(dashboard)))),
}
NAME = re.compile(r"(?<![A-Za-z0-9_:])((?:gatewayd|process)_[a-z0-9_]+)")
problems = []
for path, text in texts.items():
    short = path.split("/deploy/", 1)[-1]
    found = set()
    for m in NAME.finditer(text):
        name = m.group(1)
        found.add(name)
        kind = series.get(name)
        if kind is None:
            problems.append(f"{short}: {name} is not a family gatewayd exports")
            continue
        rated = re.search(r"\b(?:rate|increase|irate)\(\s*$", text[: m.start()])
        # A histogram's _bucket/_sum/_count are counters; its bare name is no series.
        if rated and not (kind == "counter" or (kind == "histogram" and name not in families)):
            problems.append(f"{short}: rate()/increase() of {name}, a {kind}")
    print(f"{short}: {len(found)} metric names")
print(f"checked against {len(families)} families")
for p in dict.fromkeys(problems):  # each problem once, in order
    print("  " + p)
sys.exit(1 if problems else 0)
PY

check "deploy/gatewayd.toml is valid TOML" \
    python3 -c 'import sys, tomllib; c = tomllib.load(open(sys.argv[1], "rb")); print("sections:", ", ".join(k for k, v in c.items() if isinstance(v, dict)))' "$CONFIG"

if command -v systemd-analyze >/dev/null 2>&1; then
    # verify wants the ExecStart binary to exist: check a copy that runs /bin/true.
    sed 's|^ExecStart=/usr/local/bin/gatewayd |ExecStart=/bin/true |' "$UNIT" >"$TMP/gatewayd.service"
    # shellcheck disable=SC2016 # $1 is the inner shell's argument
    check "systemd-analyze verify ${UNIT#"$ROOT"/} ($(systemd-analyze --version | head -1))" \
        sh -c 'systemd-analyze verify --man=no "$1" && echo "no errors"' sh "$TMP/gatewayd.service"
else
    printf '\n== systemd-analyze verify: skipped (no systemd-analyze here)\n'
fi

printf '\n'
if [[ $FAILED -gt 0 ]]; then
    echo "check-ops: failed: ${FAILURES[*]}"
fi
echo "check-ops: $PASSED passed, $FAILED failed"
[[ $FAILED -eq 0 ]]
