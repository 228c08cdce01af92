#!/usr/bin/env bash
# REST benchmark (issue 13): `POST /channels/{id}/messages` through the whole
# edge (route, token cache, limiter, body validation, permission check, the
# chat service's commit into the event stream, the answer with its headers)
# at several concurrencies, with wrk (Debian's `wrk`), on one release node.
#
#   scripts/rest-bench.sh            # CONNS="1 4 16 64 256" SECS=10
#
# Prints, per concurrency: requests/s, p50/p99/max latency (wrk's
# --latency), non-2xx responses, and node CPU per request (utime+stime of
# the node process over the run, from /proc). The limits are lifted
# (--rest-limit-scale, --rest-global-per-second) so the limiter is measured
# doing its work, not refusing: every request is counted in its windows.
# Loopback only; one node on ports chosen by the kernel.
#
# Environment: OUT (output dir), SECS (seconds per run, 10), CONNS,
# THREADS (wrk threads, 1: the node has the other core), GW (gatewayd binary,
# target/release/gatewayd; NO_BUILD=1 uses it as it is), CHANNELS (channels the requests spread over, 16:
# windows per channel are what a real bot fleet spreads over), PERF=1 (sample
# the node with `perf record -e cpu-clock` during each run and write
# perf-cC.txt: the share of node CPU per thread and the top symbols).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/rest-bench-$(date -u +%Y%m%dT%H%M%SZ)}
SECS=${SECS:-10}
CONNS=${CONNS:-"1 4 16 64 256"}
THREADS=${THREADS:-1}
GW=${GW:-target/release/gatewayd}
CHANNELS=${CHANNELS:-16}
command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)" >&2; exit 2; }
[ "${NO_BUILD:-0}" = 1 ] || cargo build --release --bin gatewayd
mkdir -p "$OUT"
D=$OUT/data
rm -rf "$D"

reg() { "$GW" registry --data-dir "$D" "$@"; }
kv() { sed -n "s/^$1=//p"; }
APP_OUT=$(reg add-app --name rest-bench)
TOKEN=$(kv token <<< "$APP_OUT")
APP=$(kv application_id <<< "$APP_OUT")
SRV_OUT=$(reg add-server --name rest-bench)
SERVER=$(kv server_id <<< "$SRV_OUT")
CHS=("$(kv channel_id <<< "$SRV_OUT")")
for i in $(seq 2 "$CHANNELS"); do
  CHS+=("$(reg add-channel --server "$SERVER" --name "c$i" | kv channel_id)")
done
reg install --app "$APP" --server "$SERVER" >/dev/null

# Builds older than the portal (e.g. 4a4afed, where the edge landed) have no
# --portal-addr: pass it only to a binary that knows it, so an A/B against
# them runs (scripts/rest-ab.sh).
PORTAL=()
"$GW" run --help 2>/dev/null | grep -q -- '--portal-addr' && PORTAL=(--portal-addr 127.0.0.1:0)
"$GW" run --data-dir "$D" --gateway-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 --ingest-addr 127.0.0.1:0 "${PORTAL[@]}" \
  --no-demo --rest-limit-scale 1000000 --rest-global-per-second 100000000 > "$OUT/gatewayd.log" 2>&1 &
NODE=$!
trap 'kill -INT $NODE 2>/dev/null || true; wait $NODE 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do [ -s "$D/gatewayd.addrs" ] && break; sleep 0.1; done
ADDR=$(sed -n 's/^gateway=//p' "$D/gatewayd.addrs")
ADMIN=$(sed -n 's/^admin=//p' "$D/gatewayd.addrs")
for _ in $(seq 1 100); do curl -sf "http://$ADMIN/readyz" >/dev/null && break; sleep 0.1; done

# One wrk connection per channel in turn: request i goes to channel i mod N.
cat > "$OUT/post.lua" <<EOF
local chans = { $(printf '"%s",' "${CHS[@]}") }
local n = 0
wrk.method = "POST"
wrk.headers["Authorization"] = "Bot $TOKEN"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"content":"benchmark message with a little text in it, about the size of a chat line"}'
request = function()
  n = n + 1
  return wrk.format(nil, "/api/v10/channels/" .. chans[(n % #chans) + 1] .. "/messages")
end
EOF
# Warm the token cache and the connection path.
curl -sf -X POST -H "Authorization: Bot $TOKEN" -H "Content-Type: application/json" \
  -d '{"content":"warm"}' "http://$ADDR/api/v10/channels/${CHS[0]}/messages" > /dev/null

cpu() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); split($0, f, " "); printf "%.2f", (f[12] + f[13]) / hz }' "/proc/$NODE/stat"; }
printf "conns\treq_per_s\tp50_ms\tp99_ms\tmax_ms\tnon2xx\tnode_cpu_s\tcpu_us_per_req\tload1\n" > "$OUT/rest.tsv"
for c in $CONNS; do
  t=$THREADS; [ "$c" -lt "$t" ] && t=$c
  c0=$(cpu)
  PERF_PID=
  if [ "${PERF:-0}" = 1 ]; then
    perf record -q -e cpu-clock -F 1999 -p "$NODE" -o "$OUT/perf-c$c.data" -- sleep "$SECS" 2>/dev/null &
    PERF_PID=$!
  fi
  wrk -t"$t" -c"$c" -d"${SECS}s" --latency -s "$OUT/post.lua" "http://$ADDR" > "$OUT/wrk-c$c.txt" 2>&1
  c1=$(cpu)
  if [ -n "$PERF_PID" ]; then
    wait "$PERF_PID" || true
    { echo "== node CPU samples per thread"; perf report -q -i "$OUT/perf-c$c.data" --no-children --sort comm 2>/dev/null | head -20
      echo "== top symbols"; perf report -q -i "$OUT/perf-c$c.data" --no-children --sort dso,sym 2>/dev/null | head -40
      echo "== per thread and symbol"; perf report -q -i "$OUT/perf-c$c.data" --no-children --sort comm,sym 2>/dev/null | head -60
    } > "$OUT/perf-c$c.txt"
    rm -f "$OUT/perf-c$c.data"
  fi
  awk -v c="$c" -v c0="$c0" -v c1="$c1" -v load="$(cut -d' ' -f1 /proc/loadavg)" '
    function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
    /^ +50%/ { p50 = ms($2) } /^ +99%/ { p99 = ms($2) }
    /Latency/ && !max { max = ms($4) }
    /Requests\/sec/ { rps = $2 }
    /requests in/ { total = $1 }
    /Non-2xx/ { non = $NF }
    END { cpu = c1 - c0; printf "%s\t%.0f\t%.3f\t%.3f\t%.3f\t%d\t%.2f\t%.2f\t%s\n", c, rps, p50, p99, max, non, cpu, (total > 0 ? cpu * 1e6 / total : 0), load }' \
    "$OUT/wrk-c$c.txt" >> "$OUT/rest.tsv"
done
curl -s "http://$ADMIN/metrics" | grep -E '^gatewayd_rest_responses_total|^gatewayd_chat_' > "$OUT/metrics.txt" || true
column -t -s $'\t' "$OUT/rest.tsv"
echo "raw output in $OUT"
