#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of a stranger's bytes, on the
# STABLE toolchain: libFuzzer (the libfuzzer-sys crate builds it with the C++
# compiler) driven by SanitizerCoverage instrumentation from stable codegen
# flags (-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-*; only the
# sanitizers need nightly). Nothing to install beyond the toolchain and
# g++. See docs/fuzzing.md.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#       Builds the targets (cached in $FUZZ_TARGET_DIR, by default
#       ${CARGO_TARGET_DIR:-target}/fuzz), runs
#       each for SECONDS_PER_TARGET (default 20) on a COPY of the committed
#       corpus fuzz/corpus/<target>/, one per core at a time (FUZZ_JOBS), and
#       prints per target the seconds ran, executions, coverage (cov = edges,
#       ft = features) and corpus size. Exits 1 if any target crashed (a panic = an oracle
#       failed), timed out or ran out of memory; the input is left under the
#       artifacts path it prints.
#   scripts/fuzz.sh --merge [SECONDS_PER_TARGET] [TARGET...]
#       Developers: the same runs, then minimises the committed corpus plus
#       what the run found back into fuzz/corpus/: libFuzzer's
#       -set_cover_merge=1 -use_counters=0, a small set of inputs that keeps
#       every edge covered (hit counts are left for the fuzzer to find
#       again; that makes the corpus ~10x smaller). With 0 seconds, only
#       minimises the committed corpus.
#   scripts/fuzz.sh --list
#
# Environment: FUZZ_TARGET_DIR (the build cache, default
# ${CARGO_TARGET_DIR:-target}/fuzz; CI points it outside the clone so that
# it survives between runs), FUZZ_RSS_LIMIT_MB (default 2048), FUZZ_TIMEOUT
# (seconds per input, default 10), FUZZ_JOBS (targets run at once, default
# the number of cores), FUZZ_ARTIFACTS (crash inputs, default
# $FUZZ_TARGET_DIR/artifacts).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"

# name:max_len. max_len is just above each parser's own limit, so inputs
# over it are tried (4096-byte messages, the 8192-byte HTTP head).
TARGETS=(
    ws_decode:4200
    http_head:9000
    gateway:4400
    upgrade:2048
    rest:2048
    ingest_stream:2048
    ingest_record:4096
    redact:2048
    kafka_value:1024
)

merge=0
case "${1:-}" in
--list)
    for t in "${TARGETS[@]}"; do echo "${t%%:*}"; done
    exit 0
    ;;
--merge)
    merge=1
    shift
    ;;
esac
SECS="${1:-20}"
[[ "$SECS" =~ ^[0-9]+$ ]] || { echo "usage: $0 [--merge] [SECONDS_PER_TARGET] [TARGET...]" >&2; exit 2; }
((SECS > 0 || merge)) || { echo "error: 0 seconds only with --merge" >&2; exit 2; }
shift || true
want=("$@")

selected=()
for t in "${TARGETS[@]}"; do
    name="${t%%:*}"
    if ((${#want[@]} == 0)) || [[ " ${want[*]} " == *" $name "* ]]; then
        selected+=("$t")
    fi
done
if ((${#selected[@]} == 0)); then
    echo "error: no such target in: ${want[*]} (see --list)" >&2
    exit 2
fi

command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || {
    echo "error: libFuzzer is built from C++: install g++" >&2
    exit 1
}

TARGET_DIR="${FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/fuzz}"
TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"
BIN_DIR="$TARGET_DIR/$TRIPLE/release"
ARTIFACTS="${FUZZ_ARTIFACTS:-$TARGET_DIR/artifacts}"
RSS="${FUZZ_RSS_LIMIT_MB:-2048}"
TIMEOUT="${FUZZ_TIMEOUT:-10}"

# The flags cargo-fuzz passes with `-s none`, all of them stable: edge
# coverage as inline 8-bit counters with a PC table, comparison tracing
# (libFuzzer learns magic values), stack depth, no branch folding; and
# --cfg fuzzing. --target makes them apply to the targets and not to build
# scripts.
RUSTFLAGS_FUZZ="--cfg fuzzing -Cpasses=sancov-module \
-Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
-Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares \
-Cllvm-args=-sanitizer-coverage-stack-depth \
-Cllvm-args=-simplifycfg-branch-fold-threshold=0"

echo "== building fuzz targets ($(rustc --version); into $TARGET_DIR)"
t0=$SECONDS
bins=()
for t in "${selected[@]}"; do bins+=(--bin "${t%%:*}"); done
CARGO_TARGET_DIR="$TARGET_DIR" RUSTFLAGS="$RUSTFLAGS_FUZZ" \
    cargo build --manifest-path "$ROOT/fuzz/Cargo.toml" --release --target "$TRIPLE" "${bins[@]}"
echo "built in $((SECONDS - t0)) s"

WORK="$(mktemp -d -t gatewayd-fuzz.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

# One target per core at a time (FUZZ_JOBS, default nproc): each still gets
# SECS of its own; a target's report is printed when it ends.
JOBS="${FUZZ_JOBS:-$(nproc)}"
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || { echo "error: FUZZ_JOBS must be a positive number" >&2; exit 2; }

fuzz_one() { # NAME:MAX_LEN -> $WORK/NAME.{out,row,failed}
    local name="${1%%:*}" max_len="${1#*:}"
    local corpus="$ROOT/fuzz/corpus/$name" run="$WORK/$name"
    mkdir -p "$run/corpus" "$ARTIFACTS/$name"
    [[ -d "$corpus" ]] && cp -R "$corpus/." "$run/corpus/"
    local seeds
    seeds=$(find "$run/corpus" -type f | wc -l)
    echo
    echo "== $name: ${SECS}s, max_len $max_len, $seeds corpus inputs"
    local start=$SECONDS status=0
    # 0 s (--merge only): just replay the corpus (-runs=0) before minimising.
    local limit=(-max_total_time="$SECS")
    ((SECS > 0)) || limit=(-runs=0)
    "$BIN_DIR/$name" \
        "${limit[@]}" -rss_limit_mb="$RSS" -timeout="$TIMEOUT" \
        -max_len="$max_len" -print_final_stats=1 \
        -artifact_prefix="$ARTIFACTS/$name/" \
        "$run/corpus" >"$run/log" 2>&1 || status=$?
    local ran=$((SECONDS - start)) execs rate last cov ft files size row
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$run/log" | tail -n1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$run/log" | tail -n1)
    last=$(grep -E '^#[0-9]+' "$run/log" | tail -n1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    files=$(find "$run/corpus" -type f | wc -l)
    size=$(find "$run/corpus" -type f -printf '%s\n' | awk '{s += $1} END {printf "%d", s / 1024}')
    row="$(printf '%-14s %5ss %11s %9s/s %6s %6s %6s %7sK %s' "$name" "$ran" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$files" "$size" "$([[ $status == 0 ]] && echo ok || echo FAILED)")"
    echo "$row" >"$WORK/$name.row"
    echo "$row"
    if ((status != 0)); then
        touch "$WORK/$name.failed"
        echo "!! $name failed (exit $status); the report:"
        grep -v -E '^#[0-9]+|^INFO:|^stat::' "$run/log" | tail -n 60
        local written
        written=$(sed -n 's/.*Test unit written to \(.*\)/\1/p' "$run/log")
        echo "!! input: ${written:-none written (see the report above)}"
        echo "!! reproduce: $BIN_DIR/$name ${written:-<input>}"
        cp "$run/log" "$ARTIFACTS/$name/last-failure.log"
    elif ((merge)); then
        local fresh="$WORK/$name.merged"
        mkdir -p "$fresh"
        "$BIN_DIR/$name" -set_cover_merge=1 -use_counters=0 -max_len="$max_len" -rss_limit_mb="$RSS" -timeout="$TIMEOUT" \
            "$fresh" "$corpus" "$run/corpus" >"$run/merge.log" 2>&1
        rm -rf "$corpus"
        mkdir -p "$corpus"
        cp -R "$fresh/." "$corpus/"
        echo "merged: fuzz/corpus/$name now $(find "$corpus" -type f | wc -l) inputs, $(find "$corpus" -type f -printf '%s\n' | awk '{s += $1} END {printf "%d", s / 1024}')K"
    fi
}

total0=$SECONDS
running=0
for t in "${selected[@]}"; do
    if ((running >= JOBS)); then
        wait -n || true
        running=$((running - 1))
    fi
    # Its output in one piece when it ends, not interleaved with the others'.
    (fuzz_one "$t" >"$WORK/${t%%:*}.out" 2>&1; cat "$WORK/${t%%:*}.out") &
    running=$((running + 1))
done
wait

failed=()
rows=()
for t in "${selected[@]}"; do
    name="${t%%:*}"
    rows+=("$(cat "$WORK/$name.row" 2>/dev/null || printf '%-14s (no report: the run itself failed)' "$name")")
    if [[ -e "$WORK/$name.failed" || ! -e "$WORK/$name.row" ]]; then failed+=("$name"); fi
done

echo
echo "== summary ($((SECONDS - total0)) s fuzzing, ${#selected[@]} targets)"
printf '%-14s %6s %11s %11s %6s %6s %6s %8s %s\n' target ran execs rate cov ft corpus size result
printf '%s\n' "${rows[@]}"
if ((${#failed[@]})); then
    echo "FAILED: ${failed[*]} (inputs under $ARTIFACTS/)"
fi
echo "fuzz: $((${#selected[@]} - ${#failed[@]})) passed, ${#failed[@]} failed"
((${#failed[@]} == 0))
