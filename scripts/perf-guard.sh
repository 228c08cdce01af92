#!/usr/bin/env bash
# The hot paths' regression guard (issue 27): build BASE and HEAD, run an
# interleaved A/B of both on the event path and on the REST edge, and fail
# when HEAD is worse than BASE by more than this run's own noise.
#
#   scripts/perf-guard.sh [BASE]      # BASE: any commit-ish
#
# BASE defaults to the merge-base of HEAD with the newest release tag (v*),
# or, with no tag, HEAD's parent. HEAD is the committed HEAD: uncommitted
# changes are NOT measured (the script says so when there are some).
#
# What runs (both builds alternate, the order of the pair reversed every
# other round, REPS rounds; A = BASE, B = HEAD):
#   - event path: `scripts/side-by-side.sh ab`, 1000 sessions x 20 events/s x
#     600 B for SECS_EVENTS seconds: deliveries per node CPU-second, p99;
#   - REST edge: `scripts/rest-ab.sh` at 64 connections for SECS_REST
#     seconds: requests/s, node CPU per request, p99.
#
# How it decides. Per figure, the medians of each build's runs and each
# build's relative spread, (max - min) / median. The noise of a figure is
# the larger of the two spreads, at least FLOOR (0.02). HEAD is WORSE on a
# figure when B/A of the medians is past 1 -/+ noise in the bad direction
# (lower deliveries/CPU-s or requests/s; higher CPU/request). p99 latencies
# are reported, not judged: on two shared cores they move with the load
# generator's scheduling more than with the node. Exit 0: no figure worse;
# 1: some figure worse (the table says which); 2: it could not measure.
#
# It is a hand-run measurement (about 15 minutes plus the builds), never part
# of .ci/run: run it on every change that touches src/worker, src/delivery,
# src/api, src/chat, net/ or ringbuf/ (docs/measurements.md), on a quiet
# machine, and leave its output (guard.txt) with the change in docs/bench/.
#
# Environment: OUT (/tmp/perf-guard-<UTC time>), REPS (3), SECS_EVENTS (20),
# SECS_REST (10), FLOOR (0.02), GUARD_DIR (/var/tmp/gatewayd-perf-guard:
# the two worktrees and their target dirs, kept between runs so a rebuild is
# incremental).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
die() { echo "perf-guard: $*" >&2; exit 2; }

REPS=${REPS:-3}
SECS_EVENTS=${SECS_EVENTS:-20}
SECS_REST=${SECS_REST:-10}
FLOOR=${FLOOR:-0.02}
GUARD_DIR=${GUARD_DIR:-/var/tmp/gatewayd-perf-guard}
OUT=${OUT:-/tmp/perf-guard-$(date -u +%Y%m%dT%H%M%SZ)}
command -v wrk >/dev/null || die "needs wrk (apt-get install wrk) for the REST half"

if [ $# -ge 1 ]; then
  BASE=$(git rev-parse --verify "$1^{commit}") || die "BASE '$1' is not a commit"
else
  TAG=$(git describe --tags --abbrev=0 --match 'v*' HEAD 2>/dev/null || true)
  if [ -n "$TAG" ]; then
    BASE=$(git merge-base HEAD "$TAG")
  else
    BASE=$(git rev-parse HEAD~1)
  fi
fi
HEAD_SHA=$(git rev-parse HEAD)
[ "$BASE" != "$HEAD_SHA" ] || die "BASE is HEAD ($HEAD_SHA): nothing to compare"
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  log "warning: uncommitted changes are not measured (HEAD is $HEAD_SHA as committed)"
fi
mkdir -p "$OUT" "$GUARD_DIR"
log "A (BASE) = $(git log -1 --format='%h %s' "$BASE" | cut -c1-80)"
log "B (HEAD) = $(git log -1 --format='%h %s' "$HEAD_SHA" | cut -c1-80)"

# One worktree per side, checked out detached at the commit, each with its
# own target dir (kept: the next run rebuilds incrementally).
build() { # side commit -> prints the bin dir
  local side=$1 commit=$2 wt=$GUARD_DIR/wt-$1
  if [ ! -e "$wt/.git" ]; then
    git worktree prune
    git worktree add -f --detach "$wt" "$commit" >/dev/null 2>&1 || die "git worktree add $wt failed"
  fi
  git -C "$wt" checkout -q --detach -f "$commit" || die "checkout $commit in $wt failed"
  log "building $side at $(git -C "$wt" rev-parse --short HEAD) in $wt (nice)"
  (cd "$wt" && CARGO_TARGET_DIR=$GUARD_DIR/target-$side nice cargo build -q --release -p gatewayd \
      -p loadgen -p conventional-gateway) >&2 || die "build of $side ($commit) failed"
  echo "$GUARD_DIR/target-$side/release"
}
A_BIN=$(build base "$BASE")
B_BIN=$(build head "$HEAD_SHA")
mkdir -p "$OUT/bin"
for b in gatewayd loadgen conventional-gateway; do cp "$B_BIN/$b" "$OUT/bin/$b"; done
cp "$A_BIN/gatewayd" "$OUT/bin/gatewayd-base"

log "event path: side-by-side ab, $REPS rounds"
A_GATEWAYD=$OUT/bin/gatewayd-base B_GATEWAYD=$OUT/bin/gatewayd BIN_FROM=$OUT/bin \
  REPS=$REPS SECS=$SECS_EVENTS WORKLOADS="1000:20:600" OUT=$OUT/events \
  bash scripts/side-by-side.sh ab > "$OUT/events.log" 2>&1 || die "the event-path A/B failed: $OUT/events.log"
log "REST edge: rest-ab at 64 connections, $REPS rounds"
A_GATEWAYD=$OUT/bin/gatewayd-base B_GATEWAYD=$OUT/bin/gatewayd \
  REPS=$REPS CONNS=64 SECS=$SECS_REST OUT=$OUT/rest \
  bash scripts/rest-ab.sh > "$OUT/rest.log" 2>&1 || die "the REST A/B failed: $OUT/rest.log"

python3 - "$OUT/events/ab.tsv" "$OUT/rest/ab.tsv" "$FLOOR" "$BASE" "$HEAD_SHA" "$REPS" > "$OUT/guard.txt" <<'PY' || true
import csv, statistics, sys
events, rest, floor, base, head, reps = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
def load(p):
    return list(csv.DictReader(open(p), delimiter="\t"))
def vals(rows, b, col):
    return [float(r[col]) for r in rows if r["build"] == b and r[col] not in ("", None)]
# (section, label, rows, column, higher_is_better or None when only reported)
ev, rs = load(events), load(rest)
figures = [
    ("events 1000x20/s x600B", "deliveries per node CPU-s", ev, "deliv_per_cpu_s", True),
    ("events 1000x20/s x600B", "p99 ms", ev, "p99_ms", None),
    ("REST 64 conns", "requests/s", rs, "req_per_s", True),
    ("REST 64 conns", "node CPU us/request", rs, "cpu_us_per_req", False),
    ("REST 64 conns", "p99 ms", rs, "p99_ms", None),
]
print(f"perf-guard: A = BASE {base[:12]}, B = HEAD {head[:12]}, {reps} interleaved rounds")
print(f"rule: worse when B/A of the medians is past 1 -/+ noise in the bad direction; noise = max(spread A, spread B, {floor}), spread = (max-min)/median")
print()
print(f"{'path':24} {'figure':26} {'A median (min-max)':>26} {'B median (min-max)':>26} {'B/A':>6} {'noise':>6}  verdict")
worse, missing = [], []
for sec, label, rows, col, up in figures:
    a, b = vals(rows, "A", col), vals(rows, "B", col)
    if not a or not b:
        print(f"{sec:24} {label:26} no runs"); missing.append(f"{sec}: {label}"); continue
    ma, mb = statistics.median(a), statistics.median(b)
    sa = (max(a) - min(a)) / ma if ma else 0
    sb = (max(b) - min(b)) / mb if mb else 0
    noise = max(sa, sb, floor)
    r = mb / ma if ma else 0
    if up is None:
        verdict = "reported"
    elif (up and r < 1 - noise) or (not up and r > 1 + noise):
        verdict = "WORSE"; worse.append(f"{sec}: {label} B/A {r:.3f} beyond noise {noise:.3f}")
    elif (up and r > 1 + noise) or (not up and r < 1 - noise):
        verdict = "better"
    else:
        verdict = "within noise"
    fa = f"{ma:,.1f} ({min(a):,.1f}-{max(a):,.1f})"
    fb = f"{mb:,.1f} ({min(b):,.1f}-{max(b):,.1f})"
    print(f"{sec:24} {label:26} {fa:>26} {fb:>26} {r:6.3f} {noise:6.3f}  {verdict}")
print()
if missing:
    print("verdict: could not measure: " + "; ".join(missing))
    sys.exit(2)
print("verdict: " + ("HEAD is WORSE: " + "; ".join(worse) if worse else "no figure worse than the noise"))
sys.exit(1 if worse else 0)
PY
cat "$OUT/guard.txt"
log "raw output in $OUT"
grep -q '^verdict: no figure worse' "$OUT/guard.txt" && exit 0
grep -q '^verdict: HEAD is WORSE' "$OUT/guard.txt" && exit 1
exit 2
