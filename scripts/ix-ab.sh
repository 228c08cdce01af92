#!/usr/bin/env bash
# Interleaved A/B of the interactions bench (tests/interactions_bench.rs,
# docs/bench/interactions.md): one bench binary, the node binary it starts
# (target/release/gatewayd, its CARGO_BIN_EXE) swapped per run, the order
# reversed every other round. A hand-run measurement, not part of CI.
#
#   cargo test --release --test interactions_bench --no-run
#   REPS=4 scripts/ix-ab.sh target/release/deps/interactions_bench-<hash> A_NODE B_NODE
#
# A_NODE/B_NODE: gatewayd binaries (or wrappers that exec one: an old build
# whose flags differ). REPS rounds (default 3), IX_RATE (1000), IX_SECS (10),
# OUT (a TSV; default ix-ab.tsv). target/release/gatewayd is put back after.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH=${1:?bench binary}
A=${2:?A node binary}
B=${3:?B node binary}
REPS=${REPS:-3}
OUT=${OUT:-ix-ab.tsv}
NODE=target/release/gatewayd
SAVED=$(mktemp)
cp "$NODE" "$SAVED"
trap 'cp -f "$SAVED" "$NODE"; rm -f "$SAVED"' EXIT
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
printf "round\tbuild\tcpu_us\tp50_ms\tp99_ms\tanswered\tmisses\n" >"$OUT"
for r in $(seq 1 "$REPS"); do
    if ((r % 2)); then order="A B"; else order="B A"; fi
    for w in $order; do
        if [[ $w == A ]]; then bin=$A; else bin=$B; fi
        cp -f "$bin" "$NODE"
        line=$(IX_RATE=${IX_RATE:-1000} IX_SECS=${IX_SECS:-10} "$BENCH" --ignored --nocapture 2>/dev/null | grep '^INTERACTIONS')
        p50=$(sed -n 's/.*platform_share_ms p50=\([0-9.]*\).*/\1/p' <<<"$line")
        p99=$(sed -n 's/.*platform_share_ms p50=[0-9.]* p99=\([0-9.]*\).*/\1/p' <<<"$line")
        printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$r" "$w" "$(field cpu_us_per_interaction "$line")" \
            "$p50" "$p99" "$(field ' answered' "$line")" "$(field misses "$line")" | tee -a "$OUT"
    done
done
