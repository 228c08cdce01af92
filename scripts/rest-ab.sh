#!/usr/bin/env bash
# Interleaved A/B of the REST edge: two gatewayd binaries through
# scripts/rest-bench.sh, alternately, REPS rounds, the order of the pair
# reversed every other round (A B, B A, ...) so a drift of the machine falls
# on both. Prints every run and, per concurrency, the median requests/s,
# p99 and node CPU per request of each build with their spread (min-max),
# and B/A of the medians.
#
#   A_GATEWAYD=/path/a B_GATEWAYD=/path/b scripts/rest-ab.sh
#
# Environment: A_GATEWAYD, B_GATEWAYD (required), REPS (3), CONNS ("1 64"),
# SECS (10), OUT (/tmp/rest-ab-<UTC time>); the rest as rest-bench.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${A_GATEWAYD:?A_GATEWAYD: the build before (a gatewayd binary)}"
: "${B_GATEWAYD:?B_GATEWAYD: the build after}"
REPS=${REPS:-3}
export CONNS=${CONNS:-"1 64"} SECS=${SECS:-10} NO_BUILD=1
OUT=${OUT:-/tmp/rest-ab-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT/bin"
# Copies, so that a rebuild cannot swap a binary mid-run.
cp "$A_GATEWAYD" "$OUT/bin/gatewayd-A"
cp "$B_GATEWAYD" "$OUT/bin/gatewayd-B"
md5sum "$OUT/bin/gatewayd-A" "$OUT/bin/gatewayd-B" > "$OUT/bin.md5"
printf "build\trep\tconns\treq_per_s\tp50_ms\tp99_ms\tmax_ms\tnon2xx\tnode_cpu_s\tcpu_us_per_req\tload1\n" > "$OUT/ab.tsv"
for rep in $(seq 1 "$REPS"); do
  order="A B"
  [ $((rep % 2)) = 0 ] && order="B A"
  for b in $order; do
    echo "[$(date -u +%H:%M:%S)] round $rep: build $b (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    GW=$OUT/bin/gatewayd-$b OUT=$OUT/$b-rep$rep bash scripts/rest-bench.sh > /dev/null
    tail -n +2 "$OUT/$b-rep$rep/rest.tsv" | sed "s/^/$b\t$rep\t/" >> "$OUT/ab.tsv"
  done
done
column -t -s $'\t' "$OUT/ab.tsv"
echo
python3 - "$OUT/ab.tsv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
conns = sorted({int(r["conns"]) for r in rows})
def col(b, c, k):
    return [float(r[k]) for r in rows if r["build"] == b and int(r["conns"]) == c]
print("conns  figure           A median (min-max)        B median (min-max)        B/A")
for c in conns:
    for k, name in [("req_per_s", "requests/s"), ("p99_ms", "p99 ms"), ("cpu_us_per_req", "CPU us/request")]:
        a, b = col("A", c, k), col("B", c, k)
        ma, mb = statistics.median(a), statistics.median(b)
        fmt = lambda v: f"{v:,.0f}" if k == "req_per_s" else f"{v:.3f}" if k == "p99_ms" else f"{v:.1f}"
        print(f"{c:<6} {name:<16} {fmt(ma):>9} ({fmt(min(a))}-{fmt(max(a))})".ljust(52)
              + f"{fmt(mb):>9} ({fmt(min(b))}-{fmt(max(b))})".ljust(26) + f"{mb / ma:.3f}")
PY
echo "raw output in $OUT"
