#!/usr/bin/env bash
# Side-by-side macro benchmark (issue 6) and gatewayd scaling run.
#
#   scripts/side-by-side.sh [side|scaling|memory|ab|capacity|floor|all]   (default: all)
#
# side:    the same `loadgen measure fanout` workloads against a fresh release gatewayd
#          and a fresh bench/conventional gateway (tokio + tokio-tungstenite,
#          a task per connection, a broadcast channel, serde_json), one after
#          the other in this run; prints deliveries per node CPU-second,
#          p50/p99, RSS of both and the ratios.
# ab:      two builds of gatewayd, interleaved: A_GATEWAYD and B_GATEWAYD
#          (paths of gatewayd binaries, e.g. the build before a change and
#          after it) run the same workloads alternately, REPS rounds, the
#          order of the pair reversed every other round (A B, B A, ...) so a
#          drift of the machine falls on both; prints each run and the medians
#          of deliveries per node CPU-second and p99, and B/A.
# capacity: for each gateway, in the same run, the highest offered deliveries/s
#          (sessions x rate, 600 B) it sustains for SECS with p99 <= CAP_P99_MS and
#          nothing missing, by doubling then bisection over the rate; prints both
#          capacities, their ratio, and (capacity.tsv) every probe with node and
#          loadgen CPU.
# scaling: gatewayd alone at 1k, 10k, 40k sessions: per-session RSS, identify
#          CPU and idle CPU (`loadgen measure idle`), then per-delivery CPU and
#          latency at a constant ~100,000 deliveries/s (`loadgen measure fanout`);
#          and the marginal memory of an idle session at each size: MARGIN_ADD
#          more sessions [a tenth, at least 1,000] join, RSS growth / joined.
# memory:  only scaling's idle phase and marginal step (memory.tsv).
# floor:   gatewayd's node CPU per delivery at FLOOR_WORKLOAD against
#          sendpath-bench's single-frame floor for the same sends, interleaved
#          REPS rounds in one run; prints both medians and the ratio.
#
# Environment (defaults in brackets):
#   OUT        output directory            [/tmp/side-by-side-<UTC time>]
#   NO_BUILD=1 use the binaries in target/release as they are
#   BIN_FROM   take gatewayd, conventional-gateway and loadgen from this
#              directory instead (implies NO_BUILD=1), e.g. an earlier $OUT/bin
#   SECS       seconds of events per run   [20]
#   PAYLOAD    bytes of `d` per event      [600]
#   REPS       repetitions of each side-by-side pair [1]
#   WORKLOADS  "sessions:events_per_s[:payload_bytes] ..." ["1000:100 5000:20"]
#              (a workload without a payload uses PAYLOAD)
#   SCALE      "sessions ..."              ["1000 10000 40000"]
#   SCALE_DELIVERIES  deliveries/s offered in the scaling fan-out [100000]
#   CAP_SESSIONS      (capacity) session counts ["1000 5000"]; one loadgen process
#                     holds them all (20,000 fit in its two rings here), but the
#                     conventional gateway needs a file descriptor per session
#                     (RLIMIT_NOFILE 20,000 here): at most ~19,900 (19,200 with SERVERS=400)
#   CAP_P99_MS        (capacity) the latency target [50]
#   CAP_START_RATE, CAP_MAX_RATE  (capacity) events/s per session: first probe,
#                     ceiling [10, 640]
#   CAP_NODES         (capacity) which gateways ["gatewayd conventional"]
#   CAP_STEP_PCT      (capacity) bisect until the last pass and first fail are
#                     within this % [10]
#   SERVERS    servers of the fan-out workload [1]. 1: today's registry, one
#              server with 16 apps ($OUT/tokens16, $OUT/data), every event to
#              every session. S > 1: S servers and S apps, app i installed only in
#              server i (MESSAGE_CONTENT approved, permissions 3072), in their own
#              registry ($OUT/data-s<S>, tokens $OUT/tokens-s<S>, seed
#              $OUT/registry-s<S>.seed); session k uses token k % S, so the
#              sessions spread evenly, and every `loadgen measure fanout` gets
#              `--servers S`: `rate` events/s to EACH server, round-robin, so a
#              session still receives `rate` events/s (offered deliveries/s =
#              sessions x rate) but one event reaches only sessions/S of them.
#              conventional-gateway gets the S tokens and `--servers S` (one
#              broadcast channel per server). Provisioning is 3 registry CLI calls
#              per server (no batch form; ~40 ms a server here, ~16 s for 400).
#   FLOOR_WORKLOAD    (floor) "sessions:rate[:payload]" ["1000:20:600"]
#   FLOOR_ROUNDS      (floor) sendpath-bench rounds per run [200]; BIN_FROM must
#                     then also hold sendpath-bench
#   FLOOR_PACE=1      (floor) sendpath-bench's rounds at the workload's pace
#                     (`--pace-ms 1000/rate`: 50 ms at 20/s, each socket sent to
#                     once per 50 ms as the node does) instead of back to back
#                     (every socket then hot in cache: the lowest the kernel
#                     gets). The output says which
#   PIN=1      (floor, capacity) place the node as the floor places its
#              sender: the node on CPU 0 (`taskset -c 0`; gatewayd with
#              --workers 1, all its threads, ingest and chat included, on that
#              CPU; the conventional gateway's tokio runtime then has one
#              worker thread) and loadgen on CPU 1 (`taskset -c 1`), as
#              sendpath-bench pins its sender to CPU 0 and its receiver to CPU 1.
#              Without it the node's workers and loadgen's threads share both
#              CPUs (the default). Needs 2 CPUs and taskset
#   BURST      events per burst [1]: `loadgen measure fanout --burst K`, K events
#              back to back to one server at one scheduled time, then the
#              next (same average rate); a session then has K events queued
#              at once (how much they coalesce: frames_per_send in the outputs)
#   SERIES=0   no time series: by default every `loadgen measure fanout` run
#              writes DIR/series.tsv (per second: offered and read deliveries,
#              missing, p50/p99/max, node CPU), DIR/sessions.tsv (each session's
#              p99 and max) and DIR/report.html beside its output DIR.txt, and
#              capacity names the seconds where the first failing rate's p99
#              broke CAP_P99_MS (SERIES=0: for a loadgen from before the flag)
#   AB_PERF=1  (ab) sample each node with `perf record -e cpu-clock` (a software
#              clock: VMs often have no hardware counters) while it runs, and
#              write $OUT/ab-perf.txt: per build, the share of node CPU samples
#              in gatewayd's own code, the kernel and libc, and its top symbols
#
# Loopback only; ports 26080-26190 (below the ephemeral range). Sessions past
# 10,000 are spread over several `loadgen measure` processes (one process's
# io_uring fixed tables are capped by RLIMIT_NOFILE, 20,000 here) bound to
# 127.0.0.2, .3, ... as source addresses.
set -euo pipefail

MODE=${1:-all}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/side-by-side-$(date -u +%Y%m%d-%H%M%S)}
SECS=${SECS:-20}
PAYLOAD=${PAYLOAD:-600}
REPS=${REPS:-1}
WORKLOADS=${WORKLOADS:-"1000:100 5000:20"}
SCALE=${SCALE:-"1000 10000 40000"}
SCALE_DELIVERIES=${SCALE_DELIVERIES:-100000}
CAP_SESSIONS=${CAP_SESSIONS:-"1000 5000"}
CAP_P99_MS=${CAP_P99_MS:-50}
CAP_START_RATE=${CAP_START_RATE:-10}
CAP_MAX_RATE=${CAP_MAX_RATE:-640}
CAP_STEP_PCT=${CAP_STEP_PCT:-10}
CHUNK=10000   # sessions per loadgen measure process

GW_PORT=26080 GW_INGEST=26081 GW_ADMIN=26090
CV_PORT=26180 CV_INGEST=26181 CV_ADMIN=26190

mkdir -p "$OUT/bin"
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

if [ -n "${BIN_FROM:-}" ]; then
  NO_BUILD=1
fi
if [ "${NO_BUILD:-0}" != 1 ]; then
  log "building (nice)"
  (cd "$ROOT" && nice cargo build --release -p conventional-gateway -p loadgen && \
     nice cargo build --release --bin gatewayd) >&2
fi
# Copies, so that a concurrent rebuild cannot swap a binary mid-run.
BINS="gatewayd conventional-gateway loadgen"
if [ -n "${BIN_FROM:-}" ]; then
  for b in $BINS; do
    [ -x "$BIN_FROM/$b" ] || { log "BIN_FROM=$BIN_FROM has no $b (a bin directory from before loadgen measure replaced examples/measure? build one: NO_BUILD=0)"; exit 2; }
  done
  [ "$BIN_FROM/gatewayd" -ef "$OUT/bin/gatewayd" ] || \
    for b in $BINS; do cp "$BIN_FROM/$b" "$OUT/bin/"; done
else
  TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
  for b in $BINS; do cp "$TARGET/release/$b" "$OUT/bin/"; done
fi
# sendpath-bench (the floor) only where a mode needs it.
if [ "$MODE" = floor ]; then
  if [ -n "${BIN_FROM:-}" ]; then SP_FROM=$BIN_FROM/sendpath-bench; else SP_FROM=${CARGO_TARGET_DIR:-$ROOT/target}/release/sendpath-bench; fi
  if [ ! -x "$SP_FROM" ] && [ -z "${BIN_FROM:-}" ]; then
    (cd "$ROOT" && nice cargo build --release -p sendpath-bench) >&2
  fi
  [ -x "$SP_FROM" ] || { log "no sendpath-bench at $SP_FROM (cargo build --release -p sendpath-bench)"; exit 2; }
  [ "$SP_FROM" -ef "$OUT/bin/sendpath-bench" ] || cp "$SP_FROM" "$OUT/bin/"
fi
md5sum "$OUT/bin/"* > "$OUT/bin.md5"
GW=$OUT/bin/gatewayd CV=$OUT/bin/conventional-gateway LG=$OUT/bin/loadgen SP=$OUT/bin/sendpath-bench
(cd "$ROOT" && { git rev-parse HEAD; git status --short; }) > "$OUT/tree.txt" 2>/dev/null || true

# ---------------------------------------------------------------- provisioning

SERVERS=${SERVERS:-1}
case $SERVERS in ''|*[!0-9]*|0) echo "SERVERS must be a positive integer" >&2; exit 2 ;; esac
if [ "$SERVERS" = 1 ]; then
  D=$OUT/data TOKENS=$OUT/tokens16 SEED=$OUT/registry.seed
  SERVERS_ARGS=() SFX=
else
  D=$OUT/data-s$SERVERS TOKENS=$OUT/tokens-s$SERVERS SEED=$OUT/registry-s$SERVERS.seed
  SERVERS_ARGS=(--servers "$SERVERS") SFX=-s$SERVERS
fi
# BURST=K: the producer sends K events back to back to one server, then the next.
BURST_ARGS=()
case ${BURST:-1} in ''|*[!0-9]*|0) echo "BURST must be a positive integer" >&2; exit 2 ;; esac
if [ "${BURST:-1}" != 1 ]; then BURST_ARGS=(--burst "$BURST"); SFX=$SFX-b$BURST; fi
# ab: the registry is made by build A (the older one, as a rule) and
# restored before every run, so a B that migrates the schema forward
# leaves A a registry it can open.
PGW=$GW
if [ "$MODE" = ab ] && [ -n "${A_GATEWAYD:-}" ]; then PGW=$A_GATEWAYD; fi
if [ ! -s "$TOKENS" ] && [ "$SERVERS" != 1 ]; then
  log "provisioning a registry: $SERVERS servers, one app in each (MESSAGE_CONTENT approved), permissions 3072"
  rm -rf "$D"; mkdir -p "$D"
  : > "$TOKENS.part"
  for i in $(seq 1 "$SERVERS"); do
    SID=$("$PGW" registry --data-dir "$D" add-server --name "bench-s$i" | sed -n 's/^server_id=//p')
    o=$("$PGW" registry --data-dir "$D" add-app --name "bench-s$i" --privileged-intents 32768)
    app=$(echo "$o" | sed -n 's/^application_id=//p')
    echo "$o" | sed -n 's/^token=//p' >> "$TOKENS.part"
    "$PGW" registry --data-dir "$D" install --app "$app" --server "$SID" --permissions 3072 >/dev/null
  done
  mv "$TOKENS.part" "$TOKENS"
  cp "$D/registry.sqlite" "$SEED"
  log "provisioned $(wc -l < "$TOKENS") apps in $SERVERS servers"
fi
if [ ! -s "$TOKENS" ]; then
  log "provisioning a registry: 1 server, 16 apps (MESSAGE_CONTENT approved), permissions 3072"
  rm -rf "$D"; mkdir -p "$D"
  SID=$("$PGW" registry --data-dir "$D" add-server --name bench | sed -n 's/^server_id=//p')
  : > "$TOKENS"
  for i in $(seq 1 16); do
    o=$("$PGW" registry --data-dir "$D" add-app --name "bench$i" --privileged-intents 32768)
    app=$(echo "$o" | sed -n 's/^application_id=//p')
    echo "$o" | sed -n 's/^token=//p' >> "$TOKENS"
    "$PGW" registry --data-dir "$D" install --app "$app" --server "$SID" --permissions 3072 >/dev/null
  done
  cp "$D/registry.sqlite" "$SEED"
fi

# ---------------------------------------------------------------- nodes

NODE_PID=
wait_port() { # host port
  for _ in $(seq 1 300); do
    (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0
    sleep 0.1
  done
  log "nothing listening on $1:$2"; return 1
}
# --no-demo: no demo at all (the 16 bench apps and their server are this
# script's own; nothing needs the demo bot).
# GW_WRAP, CV_WRAP: a command each node runs under (taskset for PIN=1);
# GW_EXTRA: more flags for gatewayd. LG_WRAP: the same for loadgen's fan-out
# in the floor and capacity modes.
GW_WRAP=() CV_WRAP=() GW_EXTRA=() LG_WRAP=()
if [ "${PIN:-0}" = 1 ]; then
  command -v taskset >/dev/null || { log "PIN=1 needs taskset (util-linux)"; exit 2; }
  [ "$(nproc --all)" -ge 2 ] || { log "PIN=1 needs 2 CPUs"; exit 2; }
  GW_WRAP=(taskset -c 0) CV_WRAP=(taskset -c 0) GW_EXTRA=(--workers 1) LG_WRAP=(taskset -c 1)
  log "PIN=1: the node on CPU 0 (gatewayd with one worker), loadgen on CPU 1"
fi
start_gatewayd() {
  "${GW_WRAP[@]}" "$GW" run --data-dir "$D" --gateway-addr 127.0.0.1:$GW_PORT --admin-addr 127.0.0.1:$GW_ADMIN \
    --ingest-addr 127.0.0.1:$GW_INGEST --no-demo --identify-limits off --admission-per-second 0 "${GW_EXTRA[@]}" \
    > "$OUT/gatewayd.log" 2>&1 &
  NODE_PID=$!
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$GW_ADMIN/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  wait_port 127.0.0.1 $GW_PORT; sleep 1
}
start_conventional() {
  "${CV_WRAP[@]}" "$CV" --gateway-addr 127.0.0.1:$CV_PORT --ingest-addr 127.0.0.1:$CV_INGEST \
    --admin-addr 127.0.0.1:$CV_ADMIN --tokens-file "$TOKENS" "${SERVERS_ARGS[@]}" > "$OUT/conventional.log" 2>&1 &
  NODE_PID=$!
  wait_port 127.0.0.1 $CV_PORT; sleep 1
}
stop_node() {
  [ -n "$NODE_PID" ] || return 0
  kill -INT "$NODE_PID" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$NODE_PID" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$NODE_PID" 2>/dev/null || true
  wait "$NODE_PID" 2>/dev/null || true
  NODE_PID=
  sleep 2   # let TIME_WAIT and the loopback settle a little
}
HOLDERS=()
stop_holders() {
  for p in "${HOLDERS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${HOLDERS[@]}"; do wait "$p" 2>/dev/null || true; done
  HOLDERS=()
}
cleanup() { stop_holders; stop_node; }
trap cleanup EXIT

cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); split($0, f, " "); printf "%.2f", (f[12] + f[13]) / hz }' "/proc/$1/stat"; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
load1() { cut -d' ' -f1 /proc/loadavg; }

# `--series-dir DIR` for a `loadgen measure fanout` whose output is DIR.txt
# (series.tsv, sessions.tsv, report.html there), unless SERIES=0 (a loadgen
# from before the flag).
series_args() { # dir [p99 target ms]
  [ "${SERIES:-1}" = 0 ] && return 0
  printf -- '--series-dir %s' "$1"
  [ -z "${2:-}" ] || printf -- ' --p99-target-ms %s' "$2"
}

# Picks figures out of a `loadgen measure fanout` output file: one tab-separated line.
summarise_fanout() { # file
  awk '
    /^load_before/ { load = $2 }
    /^all_ready/ { ready = $2 }
    /^expected_deliveries/ { expd = $2 }
    /^received_deliveries / { recv = $2; miss = $4 }
    /^node_deliveries_delta/ { nd = $2 }
    /^gaps/ { gaps = $2 }
    /^sessions_lost_during_run/ { lost = $2 }
    /^node_cpu_secs/ { cpu = $2; over = $4 }
    /^client_cpu_secs/ { ccpu = $2 }
    /^ksoftirqd_cpu_secs/ { ksoft = $2 }
    /^latency_ms/ { p50 = $3; p90 = $5; p99 = $7; p999 = $9; mx = $11 }
    /^node_rss_kb/ { rss0 = $3; rss1 = $5; rss2 = $7; rss3 = $9 }
    END {
      if (cpu == "" || cpu == 0) cpu = "nan";
      if (ksoft == "") ksoft = 0;
      printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\n",
        ready, expd, recv, miss, gaps, lost, nd, cpu, over, nd / cpu, recv / cpu, p50, p99, p999, mx, rss0, rss1, rss3, load, ksoft, recv / (cpu + ksoft)
    }' "$1"
}

# ---------------------------------------------------------------- side by side

side() {
  local tsv=$OUT/side.tsv
  printf "node\tsessions\trate\tpayload\trep\tready\texpected\treceived\tmissing\tgaps\tlost\tnode_deliveries\tnode_cpu_s\twindow_s\tdeliv_per_cpu_s\trecv_per_cpu_s\tp50_ms\tp99_ms\tp999_ms\tmax_ms\trss_start_kb\trss_ready_kb\trss_end_kb\tload1\tksoftirqd_s\trecv_per_cpu_s_with_ksoftirqd\n" > "$tsv"
  for rep in $(seq 1 "$REPS"); do
    for w in $WORKLOADS; do
      local n r p
      IFS=: read -r n r p <<< "$w"
      p=${p:-$PAYLOAD}
      for node in gatewayd conventional; do
        local f=$OUT/side-$node-$n-r$r-p$p-rep$rep$SFX.txt
        if [ $node = gatewayd ]; then start_gatewayd; A=$GW_PORT I=$GW_INGEST AD=$GW_ADMIN
        else start_conventional; A=$CV_PORT I=$CV_INGEST AD=$CV_ADMIN; fi
        log "side: $node $n sessions x $r events/s x ${SECS}s, payload $p B, $SERVERS server(s) (pid $NODE_PID, load $(load1))"
        echo "+ loadgen measure fanout --addr 127.0.0.1:$A --ingest 127.0.0.1:$I --tokens-file $(basename "$TOKENS") --sessions $n --rate $r --seconds $SECS --payload $p --node-pid PID --admin 127.0.0.1:$AD${SERVERS_ARGS[*]:+ ${SERVERS_ARGS[*]}}${BURST_ARGS[*]:+ ${BURST_ARGS[*]}}" > "$f"
        "$LG" measure fanout --addr 127.0.0.1:$A --ingest 127.0.0.1:$I --tokens-file "$TOKENS" \
          --sessions "$n" --rate "$r" --seconds "$SECS" --payload "$p" "${SERVERS_ARGS[@]}" "${BURST_ARGS[@]}" \
          $(series_args "${f%.txt}") \
          --node-pid "$NODE_PID" --admin 127.0.0.1:$AD >> "$f" 2>&1 || log "loadgen measure failed, see $f"
        [ $node = conventional ] && curl -s "http://127.0.0.1:$CV_ADMIN/metrics" | grep -v '^#' >> "$f" || true
        stop_node
        printf "%s\t%s\t%s\t%s\t%s\t%s\n" "$node" "$n" "$r" "$p" "$rep" "$(summarise_fanout "$f")" >> "$tsv"
      done
    done
  done
  echo
  echo "== side by side ($OUT/side.tsv, $SERVERS server(s)) =="
  column -t -s $'\t' "$tsv"
  echo
  echo "== ratios, gatewayd / conventional, same run =="
  awk -F'\t' 'NR > 1 {
      k = $2 "x" $3 " " $4 "B rep" $5
      if ($1 == "gatewayd") { g[k] = $0; order[++n] = k } else c[k] = $0
    }
    END {
      printf "%-22s %10s %10s %6s %6s %8s %8s %8s %8s %9s %9s %7s %7s %9s %9s\n", "workload", "gw del/cpu", "cv del/cpu", "ratio", "+ksirq", "gw p50", "cv p50", "gw p99", "cv p99", "gw miss", "cv miss", "gw MB", "cv MB", "gw KB/ses", "cv KB/ses"
      for (i = 1; i <= n; i++) {
        k = order[i]; split(g[k], G, "\t"); split(c[k], C, "\t")
        # 16 = received per node CPU-second (client-counted, same for both);
        # MB = RSS with every session READY; KB/s = RSS growth per session;
        # +ksirq = the ratio with ksoftirqd time (26) added to each node CPU.
        printf "%-22s %10.0f %10.0f %6.2f %6.2f %8s %8s %8s %8s %9s %9s %7.1f %7.1f %9.1f %9.1f\n", k, G[16], C[16], (C[16] > 0 ? G[16] / C[16] : 0), (C[26] > 0 ? G[26] / C[26] : 0), G[17], C[17], G[18], C[18], G[9], C[9], G[22] / 1024, C[22] / 1024, (G[22] - G[21]) / G[2], (C[22] - C[21]) / C[2]
      }
    }' "$tsv" | tee "$OUT/side-ratios.txt"
}

# ---------------------------------------------------------------- scaling

# Starts loadgen measure idle holders for $1 sessions in chunks of CHUNK, source
# addresses from 127.0.0.$2 on, holding for $3 s; output files prefixed $4.
start_holders() {
  local left=$1 ip=$2 hold=$3 pre=$4 k=0
  while [ "$left" -gt 0 ]; do
    local c=$(( left < CHUNK ? left : CHUNK ))
    "$LG" measure idle --addr 127.0.0.1:$GW_PORT --token-file "$TOKENS" --sessions "$c" \
      --node-pid "$NODE_PID" --admin 127.0.0.1:$GW_ADMIN --bind-base "127.0.0.$ip" \
      --settle-secs 1 --hold-secs "$hold" --timeout-secs 300 > "$pre-$k.txt" 2>&1 &
    HOLDERS+=($!)
    left=$(( left - c )); ip=$(( ip + 1 )); k=$(( k + 1 ))
  done
}
wait_holders_ready() { # prefix count
  for _ in $(seq 1 3000); do
    local r
    r=$(cat "$1"-*.txt 2>/dev/null | grep -c '^all_ready' || true)
    [ "$r" -ge "$2" ] && return 0
    sleep 0.1
  done
  log "holders not ready in time"; return 1
}

# Marginal memory of an idle session at $1 held sessions: MARGIN_ADD more
# sessions join the $3 ready ones (from the next source address after the $2
# holder processes'), and the growth of the node's RSS is divided by how many
# became ready. Past ~9,000 sessions per worker the event arena (READY and
# GUILD_CREATE copies, 64 MiB per worker, allocated at start and touched as
# it fills) has wrapped, so from there the slope is the sessions' own state.
# Appends to memory.tsv; prints the breakdown of the node's mappings too.
marginal() { # n procs ready rss_ready_kb
  local n=$1 procs=$2 ready=$3 rss1=$4 add
  add=${MARGIN_ADD:-$(( n / 10 > 1000 ? n / 10 : 1000 ))}
  [ -s "$OUT/memory.tsv" ] || printf "sessions\tready\trss_ready_kb\tadded\tadded_ready\trss_after_kb\tanon_ready_kb\tanon_after_kb\tmarginal_rss_B\tmarginal_anon_B\n" > "$OUT/memory.tsv"
  local anon1 anon2 rss2 ready2
  anon1=$(awk '/^Anonymous:/ { print $2 }' "/proc/$NODE_PID/smaps_rollup")
  rm -f "$OUT/scale-$n-more"-*.txt
  start_holders "$add" $(( 2 + procs )) 60 "$OUT/scale-$n-more"
  wait_holders_ready "$OUT/scale-$n-more" $(( (add + CHUNK - 1) / CHUNK ))
  sleep 3
  rss2=$(rss_kb "$NODE_PID")
  anon2=$(awk '/^Anonymous:/ { print $2 }' "/proc/$NODE_PID/smaps_rollup")
  ready2=$(cat "$OUT/scale-$n-more"-*.txt | awk '/^all_ready/ { s += $2 } END { print s + 0 }')
  cp "/proc/$NODE_PID/smaps_rollup" "$OUT/scale-$n-smaps-rollup.txt" 2>/dev/null || true
  printf "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.0f\t%.0f\n" "$n" "$ready" "$rss1" "$add" "$ready2" "$rss2" "$anon1" "$anon2" \
    "$(awk -v a="$rss1" -v b="$rss2" -v r="$ready2" 'BEGIN { print (r > 0 ? (b - a) * 1024 / r : 0) }')" \
    "$(awk -v a="$anon1" -v b="$anon2" -v r="$ready2" 'BEGIN { print (r > 0 ? (b - a) * 1024 / r : 0) }')" >> "$OUT/memory.tsv"
  log "memory: $n held, +$ready2 ready: RSS $rss1 -> $rss2 kB, marginal $(tail -n 1 "$OUT/memory.tsv" | cut -f9) B per session"
}

# memory: only the idle phase of scaling and the marginal step after it.
memory() {
  for n in $SCALE; do
    start_gatewayd
    local procs rss1 ready
    procs=$(( (n + CHUNK - 1) / CHUNK ))
    log "memory: $n sessions in $procs loadgen measure processes (load $(load1))"
    rm -f "$OUT/scale-$n-idle"-*.txt
    start_holders "$n" 2 120 "$OUT/scale-$n-idle"
    wait_holders_ready "$OUT/scale-$n-idle" "$procs"
    sleep 3
    rss1=$(rss_kb "$NODE_PID")
    ready=$(cat "$OUT/scale-$n-idle"-*.txt | awk '/^all_ready/ { s += $2 } END { print s + 0 }')
    marginal "$n" "$procs" "$ready" "$rss1"
    stop_holders; stop_node
  done
  echo
  echo "== marginal memory per idle session ($OUT/memory.tsv) =="
  column -t -s $'\t' "$OUT/memory.tsv" | tee "$OUT/memory-table.txt"
}

scaling() {
  local tsv=$OUT/scaling.tsv
  printf "sessions\tready\tidentify_s\trss_fresh_kb\trss_ready_kb\trss_per_session_B\tidentify_cpu_ms_per_1k\tidle_cpu_pct_per_10k\trate\tfan_ready\tnode_deliveries\tnode_cpu_s\tus_cpu_per_delivery\tdeliv_per_cpu_s\tmissing\tgaps\tp50_ms\tp99_ms\tload1\n" > "$tsv"
  for n in $SCALE; do
    # Phase A: idle cost per session.
    start_gatewayd
    local rss0 cpu0 t0 t1 cpu1 rss1 cpu2 procs
    rss0=$(rss_kb "$NODE_PID"); cpu0=$(cpu_s "$NODE_PID"); t0=$(date +%s.%N)
    procs=$(( (n + CHUNK - 1) / CHUNK ))
    log "scaling idle: $n sessions in $procs loadgen measure processes (load $(load1))"
    rm -f "$OUT/scale-$n-idle"-*.txt
    start_holders "$n" 2 120 "$OUT/scale-$n-idle"
    wait_holders_ready "$OUT/scale-$n-idle" "$procs"
    t1=$(date +%s.%N)
    sleep 3
    cpu1=$(cpu_s "$NODE_PID"); rss1=$(rss_kb "$NODE_PID")
    sleep 10
    cpu2=$(cpu_s "$NODE_PID")
    local ready
    ready=$(cat "$OUT/scale-$n-idle"-*.txt | awk '/^all_ready/ { s += $2 } END { print s + 0 }')
    marginal "$n" "$procs" "$ready" "$rss1"
    stop_holders; stop_node
    # Phase B: fan-out at a constant delivery rate; sessions past CHUNK are idle holders.
    local rate fan hold
    rate=$(awk -v d="$SCALE_DELIVERIES" -v n="$n" 'BEGIN { printf "%g", d / n }')
    fan=$(( n < CHUNK ? n : CHUNK ))
    start_gatewayd
    rm -f "$OUT/scale-$n-hold"-*.txt
    if [ $(( n - fan )) -gt 0 ]; then
      start_holders $(( n - fan )) 3 600 "$OUT/scale-$n-hold"
      wait_holders_ready "$OUT/scale-$n-hold" $(( (n - fan + CHUNK - 1) / CHUNK ))
    fi
    local f=$OUT/scale-$n-fanout.txt
    log "scaling fanout: $n sessions ($fan in the measuring process) x $rate events/s (load $(load1))"
    echo "+ loadgen measure fanout --addr 127.0.0.1:$GW_PORT --ingest 127.0.0.1:$GW_INGEST --tokens-file $(basename "$TOKENS") --sessions $fan --rate $rate --seconds $SECS --payload $PAYLOAD --node-pid PID --admin 127.0.0.1:$GW_ADMIN --bind-base 127.0.0.2${SERVERS_ARGS[*]:+ ${SERVERS_ARGS[*]}}${BURST_ARGS[*]:+ ${BURST_ARGS[*]}} (+ $(( n - fan )) idle sessions held by loadgen measure idle)" > "$f"
    "$LG" measure fanout --addr 127.0.0.1:$GW_PORT --ingest 127.0.0.1:$GW_INGEST --tokens-file "$TOKENS" \
      --sessions "$fan" --rate "$rate" --seconds "$SECS" --payload "$PAYLOAD" "${SERVERS_ARGS[@]}" "${BURST_ARGS[@]}" \
      --node-pid "$NODE_PID" --admin 127.0.0.1:$GW_ADMIN --bind-base 127.0.0.2 >> "$f" 2>&1 \
      || log "loadgen measure failed, see $f"
    stop_holders; stop_node
    summarise_fanout "$f" | awk -F'\t' -v n="$n" -v ready="$ready" -v t0="$t0" -v t1="$t1" \
      -v rss0="$rss0" -v rss1="$rss1" -v cpu0="$cpu0" -v cpu1="$cpu1" -v cpu2="$cpu2" -v rate="$rate" '{
        # $7 node deliveries, $8 node cpu s, $4 missing, $5 gaps, $12 p50, $13 p99, $19 load
        printf "%d\t%d\t%.1f\t%d\t%d\t%.0f\t%.1f\t%.2f\t%s\t%s\t%s\t%s\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t%s\n",
          n, ready, t1 - t0, rss0, rss1, (rss1 - rss0) * 1024 / ready, (cpu1 - cpu0) * 1e6 / ready,
          (cpu2 - cpu1) / 10 * 100 * 10000 / ready, rate, $1, $7, $8, ($7 > 0 ? $8 * 1e6 / $7 : 0),
          $10, $4, $5, $12, $13, $19
      }' >> "$tsv"
  done
  echo
  echo "== gatewayd scaling ($OUT/scaling.tsv) =="
  column -t -s $'\t' "$tsv" | tee "$OUT/scaling-table.txt"
  echo
  echo "== marginal memory per idle session ($OUT/memory.tsv) =="
  column -t -s $'\t' "$OUT/memory.tsv" | tee "$OUT/memory-table.txt"
}

# ---------------------------------------------------------------- A/B of two gatewayd builds

# Per build, summed over its runs: node CPU samples (cpu-clock, 997 Hz) in
# gatewayd's own code, libc and the kernel per 1,000 deliveries; io_uring
# submissions and io_uring_enter calls per delivery; then gatewayd's top
# symbols. The samples cover the whole measure (connect, identify, events).
ab_perf_summary() {
  local tsv=$1 build f
  echo "== AB_PERF: where each build's node CPU went (perf record -e cpu-clock -F 997; perf stat tracepoints) =="
  printf "%-6s %5s %12s %10s %10s %10s %10s %12s %12s\n" build runs deliveries "own/1k" "libc/1k" "kernel/1k" "all/1k" "sqe/deliv" "enter/deliv"
  for build in A B; do
    local deliv runs own=0 libc=0 kern=0 sqe=0 enter=0 c
    deliv=$(awk -F'\t' -v b="$build" 'NR > 1 && $1 == b { s += $12 } END { print s + 0 }' "$tsv")
    runs=$(awk -F'\t' -v b="$build" 'NR > 1 && $1 == b { n++ } END { print n + 0 }' "$tsv")
    for f in "$OUT"/perf-"$build"-rep*.data; do
      [ -e "$f" ] || continue
      while read -r c dso; do
        case $dso in
          gatewayd-*) own=$((own + c)) ;;
          libc*) libc=$((libc + c)) ;;
          '[kernel.kallsyms]') kern=$((kern + c)) ;;
        esac
      done < <(perf report -n -i "$f" --sort dso --stdio 2>/dev/null | awk '!/^#/ && NF >= 3 { print $2, $3 }')
      c=$(awk -F, '$3 == "io_uring:io_uring_submit_req" { print $1 }' "${f%.data}.stat"); sqe=$((sqe + ${c:-0}))
      c=$(awk -F, '$3 == "syscalls:sys_enter_io_uring_enter" { print $1 }' "${f%.data}.stat"); enter=$((enter + ${c:-0}))
    done
    awk -v b="$build" -v r="$runs" -v d="$deliv" -v o="$own" -v l="$libc" -v k="$kern" -v s="$sqe" -v e="$enter" 'BEGIN {
      if (d == 0) d = 1
      printf "%-6s %5d %12d %10.3f %10.3f %10.3f %10.3f %12.4f %12.4f\n", b, r, d, o * 1000 / d, l * 1000 / d, k * 1000 / d, (o + l + k) * 1000 / d, s / d, e / d }'
  done
  for build in A B; do
    echo
    echo "-- build $build: top symbols of gatewayd's own code (share of all node samples, all runs) --"
    local files=("$OUT"/perf-"$build"-rep*.data)
    for f in "${files[@]}"; do
      perf report -n -i "$f" --sort dso,sym --stdio 2>/dev/null | awk '!/^#/ && $3 ~ /^gatewayd-/ { $1 = ""; $3 = ""; $4 = ""; c = $2; $2 = ""; sub(/^ +/, ""); print c "\t" $0 }'
    done | awk -F'\t' '{ n[$2] += $1; t += $1 } END { for (k in n) printf "%8d  %s\n", n[k], k }' | sort -rn | head -15
  done
}

ab() {
  : "${A_GATEWAYD:?ab needs A_GATEWAYD (a gatewayd binary) and B_GATEWAYD}"
  : "${B_GATEWAYD:?ab needs B_GATEWAYD (a gatewayd binary)}"
  cp "$A_GATEWAYD" "$OUT/bin/gatewayd-A"; cp "$B_GATEWAYD" "$OUT/bin/gatewayd-B"
  md5sum "$OUT/bin/gatewayd-A" "$OUT/bin/gatewayd-B" >> "$OUT/bin.md5"
  local tsv=$OUT/ab.tsv keep=$GW
  printf "build\tsessions\trate\tpayload\trep\tready\texpected\treceived\tmissing\tgaps\tlost\tnode_deliveries\tnode_cpu_s\twindow_s\tdeliv_per_cpu_s\trecv_per_cpu_s\tp50_ms\tp99_ms\tp999_ms\tmax_ms\trss_start_kb\trss_ready_kb\trss_end_kb\tload1\tksoftirqd_s\trecv_per_cpu_s_with_ksoftirqd\n" > "$tsv"
  for rep in $(seq 1 "$REPS"); do
    local order="A B"
    [ $((rep % 2)) = 0 ] && order="B A"
    for w in $WORKLOADS; do
      local n r p
      IFS=: read -r n r p <<< "$w"
      p=${p:-$PAYLOAD}
      for build in $order; do
        GW=$OUT/bin/gatewayd-$build
        local f=$OUT/ab-$build-$n-r$r-p$p-rep$rep.txt
        if [ -s "$SEED" ]; then
          rm -f "$D"/registry.sqlite*; cp "$SEED" "$D/registry.sqlite"
        fi
        start_gatewayd
        log "ab: build $build, $n sessions x $r events/s x ${SECS}s, payload $p B (pid $NODE_PID, load $(load1))"
        local perf_pid=
        if [ "${AB_PERF:-0}" = 1 ]; then
          perf record -q -e cpu-clock -F 997 -p "$NODE_PID" -o "$OUT/perf-$build-rep$rep-$n.data" >/dev/null 2>&1 &
          perf_pid="$! "
          perf stat -x, -e io_uring:io_uring_submit_req,syscalls:sys_enter_io_uring_enter -p "$NODE_PID" \
            -o "$OUT/perf-$build-rep$rep-$n.stat" >/dev/null 2>&1 &
          perf_pid+=$!
        fi
        "$LG" measure fanout --addr 127.0.0.1:$GW_PORT --ingest 127.0.0.1:$GW_INGEST --tokens-file "$TOKENS" \
          --sessions "$n" --rate "$r" --seconds "$SECS" --payload "$p" "${SERVERS_ARGS[@]}" "${BURST_ARGS[@]}" \
          $(series_args "${f%.txt}") \
          --node-pid "$NODE_PID" --admin 127.0.0.1:$GW_ADMIN > "$f" 2>&1 || log "loadgen measure failed, see $f"
        if [ -n "$perf_pid" ]; then
          kill -INT $perf_pid 2>/dev/null || true
          for q in $perf_pid; do wait "$q" 2>/dev/null || true; done
        fi
        stop_node
        printf "%s\t%s\t%s\t%s\t%s\t%s\n" "$build" "$n" "$r" "$p" "$rep" "$(summarise_fanout "$f")" >> "$tsv"
      done
    done
  done
  GW=$keep
  [ "${AB_PERF:-0}" = 1 ] && ab_perf_summary "$tsv" | tee "$OUT/ab-perf.txt"
  echo
  echo "== A/B runs ($tsv) =="
  column -t -s $'\t' "$tsv"
  echo
  echo "== medians per workload (deliveries per node CPU-second, p99 ms), B/A =="
  awk -F'\t' 'NR > 1 { k = $2 "x" $3 " " $4 "B"; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
      i = ++c[$1, k]; d[$1, k, i] = $15; q[$1, k, i] = $18 }
    function med(arr, b, k, m,   i, j, t, v) {
      for (i = 1; i <= m; i++) v[i] = arr[b, k, i]
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
      return (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
    }
    END {
      printf "%-18s %4s %12s %12s %7s %9s %9s %7s\n", "workload", "runs", "A del/cpu", "B del/cpu", "B/A", "A p99", "B p99", "B/A"
      for (x = 1; x <= n; x++) { k = order[x]; m = c["A", k]
        da = med(d, "A", k, m); db = med(d, "B", k, c["B", k]); qa = med(q, "A", k, m); qb = med(q, "B", k, c["B", k])
        printf "%-18s %4d %12.0f %12.0f %7.3f %9.2f %9.2f %7.3f\n", k, m, da, db, (da > 0 ? db / da : 0), qa, qb, (qa > 0 ? qb / qa : 0) }
    }' "$tsv" | tee "$OUT/ab-medians.txt"
}

# ---------------------------------------------------------------- capacity

# One probe: $node at $n sessions x $r events/s; prints "pass|fail" and
# appends its line to capacity.tsv. Pass: every delivery received, no
# gap, no session lost, p99 <= CAP_P99_MS.
capacity_probe() { # node n r probe
  local node=$1 n=$2 r=$3 k=$4 A I AD
  local f=$OUT/cap-$node-$n-r$r-$k$SFX.txt
  if [ "$node" = gatewayd ]; then start_gatewayd; A=$GW_PORT I=$GW_INGEST AD=$GW_ADMIN
  else start_conventional; A=$CV_PORT I=$CV_INGEST AD=$CV_ADMIN; fi
  "${LG_WRAP[@]}" "$LG" measure fanout --addr 127.0.0.1:$A --ingest 127.0.0.1:$I --tokens-file "$TOKENS" \
    --sessions "$n" --rate "$r" --seconds "$SECS" --payload "$PAYLOAD" "${SERVERS_ARGS[@]}" "${BURST_ARGS[@]}" \
    $(series_args "${f%.txt}" "$CAP_P99_MS") \
    --node-pid "$NODE_PID" --admin 127.0.0.1:$AD > "$f" 2>&1 || log "loadgen measure failed, see $f"
  stop_node
  local line verdict client
  line=$(summarise_fanout "$f")
  client=$(awk '/^client_cpu_secs/ { print $2 }' "$f")
  verdict=$(echo "$line" | awk -F'\t' -v cap="$CAP_P99_MS" -v n="$n" '{
      ok = ($1 == n && $3 + 0 > 0 && $4 + 0 == 0 && $5 + 0 == 0 && $6 + 0 == 0 && $13 + 0 <= cap)
      print (ok ? "pass" : "fail") }')
  printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$node" "$n" "$r" "$((n * r))" "$verdict" "${client:-nan}" "$line" >> "$OUT/capacity.tsv"
  log "capacity: $node $n x $r/s = $((n * r)) deliveries/s: $verdict (p99 $(echo "$line" | cut -f13) ms, missing $(echo "$line" | cut -f4), node CPU $(echo "$line" | cut -f8) s, client CPU ${client:-?} s)"
  echo "$verdict"
}

# capacity: for each gateway and each of CAP_SESSIONS, the highest rate
# (events/s per session, so sessions x rate deliveries/s offered) it
# sustains for SECS with p99 <= CAP_P99_MS and nothing missing. Doubling
# from CAP_START_RATE until a probe fails (or CAP_MAX_RATE), then bisecting
# between the last pass and the first fail until they are within
# CAP_STEP_PCT % of each other: one probe per rate, each on a fresh node
# (a failed probe's backlog must not tax the next).
capacity() {
  local tsv=$OUT/capacity.tsv
  printf "node\tsessions\trate\toffered_per_s\tverdict\tclient_cpu_s\tready\texpected\treceived\tmissing\tgaps\tlost\tnode_deliveries\tnode_cpu_s\twindow_s\tdeliv_per_cpu_s\trecv_per_cpu_s\tp50_ms\tp99_ms\tp999_ms\tmax_ms\trss_start_kb\trss_ready_kb\trss_end_kb\tload1\tksoftirqd_s\trecv_per_cpu_s_with_ksoftirqd\n" > "$tsv"
  local best=$OUT/capacity-best.tsv
  printf "sessions\tnode\tbest_rate\tbest_offered_per_s\tfirst_fail_rate\tprobes\tfirst_fail_p99_seconds\n" > "$best"
  for n in $CAP_SESSIONS; do
    for node in ${CAP_NODES:-gatewayd conventional}; do
      local lo=0 hi=0 r=$CAP_START_RATE k=0 v hik=0
      while :; do
        k=$((k + 1)); v=$(capacity_probe "$node" "$n" "$r" "$k" | tail -n 1)
        if [ "$v" = pass ]; then lo=$r; else hi=$r; hik=$k; break; fi
        [ "$r" -ge "$CAP_MAX_RATE" ] && break
        r=$(( r * 2 > CAP_MAX_RATE ? CAP_MAX_RATE : r * 2 ))
      done
      while [ "$hi" -gt 0 ] && [ $(( (hi - lo) * 100 )) -gt $(( CAP_STEP_PCT * (lo > 0 ? lo : 1) )) ] && [ $((hi - lo)) -gt 1 ]; do
        r=$(( (lo + hi) / 2 ))
        k=$((k + 1)); v=$(capacity_probe "$node" "$n" "$r" "$k" | tail -n 1)
        if [ "$v" = pass ]; then lo=$r; else hi=$r; hik=$k; fi
      done
      # The first failing rate: the seconds whose p99 broke the target
      # (from its probe's series, `loadgen measure fanout --series-dir`).
      local broke=""
      if [ "$hik" -gt 0 ]; then
        broke=$(awk '/^series_p99_over_target_secs/ { $1 = ""; sub(/^ /, ""); print }' \
          "$OUT/cap-$node-$n-r$hi-$hik$SFX.txt" 2>/dev/null)
      fi
      printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$n" "$node" "$lo" "$((n * lo))" "${hi/#0/none}" "$k" "${broke:--}" >> "$best"
    done
  done
  echo
  echo "== capacity at p99 <= $CAP_P99_MS ms, nothing missing, ${SECS} s, $SERVERS server(s) ($best) =="
  awk -F'\t' 'NR > 1 { cap[$1, $2] = $4; fail[$1, $2] = $5; if (!($1 in seen)) { seen[$1] = 1; order[++n] = $1 } }
    END {
      printf "%-9s %18s %18s %7s\n", "sessions", "gatewayd deliv/s", "conventional", "ratio"
      for (i = 1; i <= n; i++) { s = order[i]; g = cap[s, "gatewayd"]; c = cap[s, "conventional"]
        printf "%-9s %18s %18s %7s\n", s, g, c, (c > 0 ? sprintf("%.2f", g / c) : "-") }
    }' "$best" | tee "$OUT/capacity.txt"
  echo "== the first failing rate of each: the seconds whose p99 broke the target =="
  awk -F'\t' 'NR > 1 { printf "%s %s sessions, %s/s: %s\n", $2, $1, $5, $7 }' "$best" | tee -a "$OUT/capacity.txt"
}

# ---------------------------------------------------------------- floor

# floor: gatewayd's node CPU per delivery against the kernel's floor for the
# same sends, in one run. REPS rounds; each runs, in an order reversed every
# other round, (a) gatewayd at FLOOR_WORKLOAD for SECS (node CPU / node
# deliveries) and (b) sendpath-bench at the same sessions and payload, one
# frame per IORING_OP_SENDMSG, the node's way (`sendmsg-batch k=1`: the
# sending thread's CPU per frame, FLOOR_ROUNDS rounds). Prints both medians
# and their ratio, per round and overall.
#
# What the two figures count differs in one way that matters: the loopback
# receive softirq of the client's socket (TCP receive, the receiver's
# wakeup) runs in the sender's context, so it is in both; but the floor's
# receiver is a thread pinned to the other CPU draining with epoll (as
# tokio, asyncio and libuv clients do), while loadgen receives with
# io_uring multishot receives on both CPUs. docs/bench/side-by-side.md,
# "The event path against the floor", says what that costs.
floor() {
  local tsv=$OUT/floor.tsv n r p
  IFS=: read -r n r p <<< "${FLOOR_WORKLOAD:-1000:20:600}"
  p=${p:-$PAYLOAD}
  printf "rep\twhat\tsessions\trate\tpayload\tnode_deliveries\tnode_cpu_s\tns_per_delivery\tp99_ms\tmissing\tframes_per_send\tfloor_ns_per_frame\tfloor_ns_per_frame_with_ksoftirqd\tload1\n" > "$tsv"
  for rep in $(seq 1 "$REPS"); do
    local order="node floor"
    [ $((rep % 2)) = 0 ] && order="floor node"
    for what in $order; do
      if [ "$what" = node ]; then
        local f=$OUT/floor-node-rep$rep.txt
        start_gatewayd
        log "floor: gatewayd $n x $r/s x ${SECS}s, $p B (load $(load1))"
        "${LG_WRAP[@]}" "$LG" measure fanout --addr 127.0.0.1:$GW_PORT --ingest 127.0.0.1:$GW_INGEST --tokens-file "$TOKENS" \
          --sessions "$n" --rate "$r" --seconds "$SECS" --payload "$p" "${SERVERS_ARGS[@]}" "${BURST_ARGS[@]}" \
          $(series_args "${f%.txt}") \
          --node-pid "$NODE_PID" --admin 127.0.0.1:$GW_ADMIN > "$f" 2>&1 || log "loadgen measure failed, see $f"
        stop_node
        local line fps
        line=$(summarise_fanout "$f")
        fps=$(awk '/^node_sends/ { print $6 }' "$f")
        echo "$line" | awk -F'\t' -v rep="$rep" -v n="$n" -v r="$r" -v p="$p" -v fps="${fps:-nan}" '{
          printf "%s\tnode\t%s\t%s\t%s\t%s\t%s\t%.0f\t%s\t%s\t%s\t\t\t%s\n", rep, n, r, p, $7, $8, ($7 > 0 ? $8 * 1e9 / $7 : 0), $13, $4, fps, $19 }' >> "$tsv"
      else
        local f=$OUT/floor-sendpath-rep$rep.txt
        local pace=()
        [ "${FLOOR_PACE:-0}" = 1 ] && pace=(--pace-ms $((1000 / r)))
        log "floor: sendpath-bench --conns $n --sizes $p --frames 1 --rounds ${FLOOR_ROUNDS:-200} ${pace[*]} (load $(load1))"
        "$SP" --conns "$n" --rounds "${FLOOR_ROUNDS:-200}" --sizes "$p" --frames 1 --only "sendmsg-batch k=1" "${pace[@]}" > "$f" 2>&1 \
          || log "sendpath-bench failed, see $f"
        awk -F'|' -v rep="$rep" -v n="$n" -v r="$r" -v p="$p" -v load="$(load1)" '
          $2 ~ /^ *sendmsg-batch *$/ && $3 ~ /^ *default *$/ && $4 ~ /^ *1 *$/ {
            gsub(/ /, "", $6); gsub(/ /, "", $9)
            printf "%s\tfloor\t%s\t%s\t%s\t\t\t\t\t\t\t%s\t%s\t%s\n", rep, n, r, p, $6, $9, load; exit }' "$f" >> "$tsv"
      fi
    done
  done
  echo
  echo "== the event path against the floor ($tsv) =="
  column -t -s $'\t' "$tsv"
  awk -F'\t' 'NR > 1 && $2 == "node" { d[++a] = $8 } NR > 1 && $2 == "floor" { f[++b] = $12; k[b] = $13 }
    function med(v, m,   i, j, t) {
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }
      return (m % 2) ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2 }
    END {
      if (a == 0 || b == 0) { print "no figures"; exit 1 }
      dm = med(d, a); fm = med(f, b); km = med(k, b)
      printf "\nnode CPU per delivery (median of %d): %.0f ns\nfloor per frame (median of %d): %.0f ns (%.0f ns with ksoftirqd)\nratio node / floor: %.2f\n", a, dm, b, fm, km, dm / fm
    }' "$tsv" | tee "$OUT/floor.txt"
}

log "output in $OUT (load $(cat /proc/loadavg))"
case "$MODE" in
  side) side ;;
  scaling) scaling ;;
  memory) memory ;;
  ab) ab ;;
  capacity) capacity ;;
  floor) floor ;;
  all) side; scaling ;;
  *) echo "usage: $0 [side|scaling|memory|ab|capacity|floor|all]" >&2; exit 2 ;;
esac
log "done; raw outputs in $OUT"
