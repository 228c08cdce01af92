#!/usr/bin/env bash
# What crash recovery's summaries, checkpoints and journal cost the steady
# path (issue 15): `loadgen scenario steady` on a Kafka-fed clustered node,
# with `[recovery]` on (B) and without the section (A: Kafka ingest alone,
# the same build), interleaved in one run: REPS rounds, the order of the
# pair reversed every other round (A B, B A, ...) so a drift of the machine
# falls on both. Prints each run's node CPU per delivery and the medians,
# and B/A.
#
#   scripts/recovery-ab.sh
#
# Environment (defaults in brackets):
#   OUT       output directory                       [/tmp/recovery-ab-<UTC time>]
#   BIN       directory with gatewayd and loadgen    [target/release]
#   REPS      rounds                                 [3]
#   SESSIONS  bot sessions                           [20000]
#   RATE      events per second                      [5000]
#   SECS      measured seconds per run               [30]
#   PG_PORT   an already running test PostgreSQL (scripts/pg-test-server.sh);
#             empty: one is started under $OUT and stopped at the end
#
# Needs what `steady --recovery resume` needs: redis-server and Tansu
# (GATEWAYD_TEST_TANSU, as scripts/test-all.sh installs them). Loopback only.
# Every run is bounded by loadgen's --timeout-secs.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/recovery-ab-$(date -u +%Y%m%d-%H%M%S)}
BIN=${BIN:-$ROOT/target/release}
REPS=${REPS:-3}
SESSIONS=${SESSIONS:-20000}
RATE=${RATE:-5000}
SECS=${SECS:-30}
PG=$ROOT/scripts/pg-test-server.sh
mkdir -p "$OUT"
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

for b in gatewayd loadgen; do
    [[ -x "$BIN/$b" ]] || { echo "recovery-ab: $BIN/$b missing (cargo build --release -p gatewayd -p loadgen)" >&2; exit 2; }
done

STOP_PG=""
if [[ -z "${PG_PORT:-}" ]]; then
    eval "$(bash "$PG" start "$OUT/pg")"
    STOP_PG=1
    PG_PORT=$(sed -E 's#.*:([0-9]+)/.*#\1#' <<<"$GATEWAYD_TEST_DATABASE_URL")
fi
cleanup() { [[ -z "$STOP_PG" ]] || bash "$PG" stop "$OUT/pg" >/dev/null 2>&1 || true; }
trap cleanup EXIT

# One run: $1 = A or B, $2 = round.
run() {
    local side=$1 k=$2 db="recab_${1,,}_$2_$$" dir="$OUT/$1-$2"
    bash "$PG" create-db "$PG_PORT" "$db"
    local cfg=()
    [[ $side == A ]] && cfg=(--recovery-config '')
    log "round $k: $side ($([[ $side == A ]] && echo 'Kafka ingest alone' || echo 'with [recovery]'))"
    "$BIN/loadgen" scenario steady --gatewayd "$BIN/gatewayd" \
        --registry-url "$(bash "$PG" url "$PG_PORT" "$db")" \
        --recovery resume "${cfg[@]}" \
        --sessions "$SESSIONS" --rate "$RATE" --seconds "$SECS" --warmup 5 \
        --timeout-secs 900 --out "$dir" >"$dir.log" 2>&1 || true
    local v
    v=$(python3 - "$dir/result.json" <<'EOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception:
    print("nan nan"); sys.exit()
f = {x["name"]: x["value"] for x in r["figures"] if not x["group"]}
# The A/B's figure needs complete, correct delivery; the latency claims are
# the listener path's (Kafka through Tansu adds its own batching) and are
# reported, not required.
need = [c for c in r["claims"] if not c["name"].startswith("delivery latency")]
ok = all(c["passed"] for c in need)
lat = all(c["passed"] for c in r["claims"])
print(f.get("deliveries per gatewayd CPU-second", float("nan")),
      ("complete" if ok else "INCOMPLETE") + ("" if lat else ",latency-claims-failed"))
EOF
)
    echo "$side $k $v" >>"$OUT/runs.txt"
    log "  $side: $v deliveries per node CPU-second"
}

: >"$OUT/runs.txt"
for ((k = 1; k <= REPS; k++)); do
    if ((k % 2)); then run A "$k"; run B "$k"; else run B "$k"; run A "$k"; fi
done

python3 - "$OUT/runs.txt" <<'EOF' | tee "$OUT/ab.txt"
import statistics, sys
runs = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {"A": [], "B": []}
pairs = {}
for side, k, v, ok in runs:
    print(f"round {k} {side}: {float(v):,.0f} deliveries per node CPU-second ({ok})")
    if ok.startswith("complete"):
        by[side].append(float(v))
        pairs.setdefault(k, {})[side] = float(v)
for k, p in sorted(pairs.items()):
    if len(p) == 2:
        print(f"round {k}: node CPU per delivery B/A {p['A'] / p['B']:.3f}")
if by["A"] and by["B"]:
    a, b = statistics.median(by["A"]), statistics.median(by["B"])
    print(f"median A (Kafka ingest, no [recovery]): {a:,.0f}")
    print(f"median B (with [recovery]):             {b:,.0f}")
    print(f"B/A deliveries per CPU-second: {b / a:.3f} (node CPU per delivery B/A: {a / b:.3f})")
else:
    print("not every side has a complete run: no ratio")
EOF
