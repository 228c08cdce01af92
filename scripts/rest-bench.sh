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
# PLACEMENT (cross | same | any, below), WORKERS (the node's, nproc),
# APPS (applications, each its own wrk process; 1), NODE_ARGS (more
# `gatewayd run` flags, e.g. --rest-redis-url to share the limits),
# THREADS (wrk threads, 1: the node has the other core), GW (gatewayd binary,
# target/release/gatewayd; NO_BUILD=1 uses it as it is), CHANNELS (channels the requests spread over, 16:
# windows per channel are what a real bot fleet spreads over), PERF=1 (sample
# the node with `perf record -e cpu-clock` during each run and write
# perf-cC.txt: the share of node CPU per thread and the top symbols),
# PIPELINE (requests each connection writes at once, 1: HTTP/1.1 pipelining,
# which the edge answers in order; a deeper pipeline makes wrk's CPU per
# request small, so that on a two-core machine the node can have most of
# both cores: how `--workers 1` against `--workers 2` is measured; the
# latency columns are then per batch of PIPELINE requests).
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
# Where a server is committed against where its application's token is
# served (api::owner_of, api::commit_worker): PLACEMENT=cross (default; what
# (N-1)/N of a fleet's pairs are at N workers: the request hops to the
# server's worker and back), same (served and committed on one worker), or
# any (the first server made, as before issue 27: a coin toss per run that
# made single runs bimodal).
PLACEMENT=${PLACEMENT:-cross}
NWORKERS=${WORKERS:-$(nproc)}
# APPS applications, each with its own token, server and CHANNELS
# channels, each driven by its own wrk process with CONNS/APPS connections
# (wrk sends one token). With APPS > 1, application i is one the node
# serves on worker i % WORKERS: the load is spread over the workers as a
# fleet's is (one application's requests are one worker's, by design).
APPS=${APPS:-1}
mix() { python3 -c "import sys; print(((int(sys.argv[1]) * 0x9E3779B97F4A7C15 % 2**64) >> 32) % int(sys.argv[2]))" "$1" "$NWORKERS"; }
TOKENS=(); CHLIST=()
for a in $(seq 0 $((APPS - 1))); do
  for _ in $(seq 1 64); do
    APP_OUT=$(reg add-app --name "rest-bench-$a")
    APP=$(kv application_id <<< "$APP_OUT")
    [ "$APPS" = 1 ] || [ "$NWORKERS" -le 1 ] || [ "$(mix "$APP")" = $((a % NWORKERS)) ] && break
  done
  TOKENS+=("$(kv token <<< "$APP_OUT")")
  for _ in $(seq 1 64); do
    SRV_OUT=$(reg add-server --name "rest-bench-$a")
    SERVER=$(kv server_id <<< "$SRV_OUT")
    [ "$PLACEMENT" = any ] || [ "$NWORKERS" -le 1 ] && break
    same=0; [ "$(mix "$APP")" = "$(mix "$SERVER")" ] && same=1
    { [ "$PLACEMENT" = same ] && [ $same = 1 ]; } && break
    { [ "$PLACEMENT" = cross ] && [ $same = 0 ]; } && break
  done
  CHS=("$(kv channel_id <<< "$SRV_OUT")")
  for i in $(seq 2 "$CHANNELS"); do
    CHS+=("$(reg add-channel --server "$SERVER" --name "c$i" | kv channel_id)")
  done
  CHLIST+=("$(printf '"%s",' "${CHS[@]}")")
  FIRST+=("${CHS[0]}")
  reg install --app "$APP" --server "$SERVER" >/dev/null
done

# Builds older than the portal (e.g. 4a4afed, where the edge landed) have no
# --portal-addr: pass it only to a binary that knows it, so an A/B against
# them runs (scripts/rest-ab.sh).
PORTAL=()
"$GW" run --help 2>/dev/null | grep -q -- '--portal-addr' && PORTAL=(--portal-addr 127.0.0.1:0)
# --no-demo: no demo (the bench's apps and servers are its own). Older builds
# that rest-ab.sh runs know the flag too: there it stops only the traffic.
"$GW" run --data-dir "$D" --gateway-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 --ingest-addr 127.0.0.1:0 "${PORTAL[@]}" \
  --workers "$NWORKERS" --no-demo --rest-limit-scale 1000000 --rest-global-per-second 100000000 ${NODE_ARGS:-} > "$OUT/gatewayd.log" 2>&1 &
NODE=$!
trap 'kill -INT $NODE 2>/dev/null || true; wait $NODE 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do [ -s "$D/gatewayd.addrs" ] && break; sleep 0.1; done
ADDR=$(sed -n 's/^gateway=//p' "$D/gatewayd.addrs")
ADMIN=$(sed -n 's/^admin=//p' "$D/gatewayd.addrs")
for _ in $(seq 1 100); do curl -sf "http://$ADMIN/readyz" >/dev/null && break; sleep 0.1; done

# One wrk connection per channel in turn: request i goes to channel i mod N.
for a in $(seq 0 $((APPS - 1))); do
  cat > "$OUT/post-$a.lua" <<EOF
local chans = { ${CHLIST[$a]} }
local n = 0
wrk.method = "POST"
wrk.headers["Authorization"] = "Bot ${TOKENS[$a]}"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"content":"benchmark message with a little text in it, about the size of a chat line"}'
local depth = ${PIPELINE:-1}
request = function()
  local r = {}
  for i = 1, depth do
    n = n + 1
    r[i] = wrk.format(nil, "/api/v10/channels/" .. chans[(n % #chans) + 1] .. "/messages")
  end
  return table.concat(r)
end
EOF
  # Warm the token cache and the connection path.
  curl -sf -X POST -H "Authorization: Bot ${TOKENS[$a]}" -H "Content-Type: application/json" \
    -d '{"content":"warm"}' "http://$ADDR/api/v10/channels/${FIRST[$a]}/messages" > /dev/null
done

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
  if [ "$APPS" = 1 ]; then
    wrk -t"$t" -c"$c" -d"${SECS}s" --latency -s "$OUT/post-0.lua" "http://$ADDR" > "$OUT/wrk-c$c.txt" 2>&1
  else
    WRKS=()
    for a in $(seq 0 $((APPS - 1))); do
      wrk -t1 -c"$(( (c + APPS - 1) / APPS ))" -d"${SECS}s" --latency -s "$OUT/post-$a.lua" "http://$ADDR" > "$OUT/wrk-c$c-a$a.txt" 2>&1 &
      WRKS+=($!)
    done
    wait "${WRKS[@]}"
    # One summary as wrk prints it: requests and non-2xx summed; p50, p99
    # and max the worst of the processes (each saw its own connections).
    cat "$OUT"/wrk-c$c-a*.txt > "$OUT/wrk-c$c-all.txt"
    awk '
      function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /s$/) return v * 1000; return v }
      /^ +50%/ { if (ms($2) > p50) p50 = ms($2) } /^ +99%/ { if (ms($2) > p99) p99 = ms($2) }
      $1 == "Latency" { if (ms($4) > max) max = ms($4) }
      /Requests\/sec/ { rps += $2 }
      /requests in/ { total += $1 }
      /Non-2xx/ { non += $NF }
      END { printf "    Latency 0 0 %.3fms\n     50%% %.3fms\n     99%% %.3fms\n%d requests in\nRequests/sec: %.2f\n", max, p50, p99, total, rps;
            if (non) printf "  Non-2xx or 3xx responses: %d\n", non }' "$OUT/wrk-c$c-all.txt" > "$OUT/wrk-c$c.txt"
  fi
  c1=$(cpu)
  if [ -n "$PERF_PID" ]; then
    wait "$PERF_PID" || true
    { echo "== node CPU samples per thread"; perf report -q -i "$OUT/perf-c$c.data" --no-children --sort comm 2>/dev/null | head -20
      echo "== top symbols"; perf report -q -i "$OUT/perf-c$c.data" --no-children --sort dso,sym 2>/dev/null | head -40
      echo "== per thread and symbol"; perf report -q -i "$OUT/perf-c$c.data" --no-children --sort comm,sym 2>/dev/null | head -60
    } > "$OUT/perf-c$c.txt" || true  # head closing the pipe is not a failure
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
