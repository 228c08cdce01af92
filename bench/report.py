#!/usr/bin/env python3
"""Print the results table of the last `cargo bench -p gatewayd-bench` run as
Markdown, from criterion's saved estimates (target/criterion/*/new/).

Usage: python3 bench/report.py [CRITERION_DIR]   (default: target/criterion)

Per benchmark: the median time of one iteration (criterion's median of the
per-sample means), the time per element when an iteration handles several
(a batch of 32 entries, 1000 recipients, 64 records), and the derived
rate: elements per second, or bytes per second for byte throughputs.
"""
import json
import pathlib
import sys

ORDER = ["frame_header", "ws_decode", "ring", "entitlement", "ingest"]


def fmt_time(ns: float) -> str:
    if ns < 1_000:
        return f"{ns:.1f} ns"
    if ns < 1_000_000:
        return f"{ns / 1_000:.2f} µs"
    return f"{ns / 1_000_000:.2f} ms"


def fmt_rate(per_s: float, unit: str) -> str:
    for div, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if per_s >= div:
            return f"{per_s / div:.2f} {prefix}{unit}/s"
    return f"{per_s:.0f} {unit}/s"


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/criterion")
    rows = []
    for bench in root.glob("**/new/benchmark.json"):
        meta = json.loads(bench.read_text())
        est = json.loads((bench.parent / "estimates.json").read_text())
        group = meta["group_id"]
        if group not in ORDER:
            continue  # some other crate's benchmark
        name = meta["function_id"] or ""
        if meta.get("value_str"):
            name += "/" + meta["value_str"]
        median = est["median"]["point_estimate"]
        lo = est["median"]["confidence_interval"]["lower_bound"]
        hi = est["median"]["confidence_interval"]["upper_bound"]
        tp = meta.get("throughput") or {}
        if "Bytes" in tp:
            n, unit = tp["Bytes"], "B"
            per = "—"
            rate = fmt_rate(n * 1e9 / median, "B") + f" ({1e9 / median / 1e6:.2f} M frames/s)"
        else:
            n, unit = tp.get("Elements", 1), "op"
            per = fmt_time(median / n) if n > 1 else "—"
            rate = fmt_rate(n * 1e9 / median, "op")
        size = f"{n} {unit}" if unit == "B" else str(n)
        order = (ORDER.index(group), (bench.parent / "estimates.json").stat().st_mtime)
        rows.append((order, group, name, median, lo, hi, size, per, rate))
    if not rows:
        print(f"no criterion results under {root}", file=sys.stderr)
        return 1
    rows.sort(key=lambda r: r[0])  # by group, then in the order they ran
    print("| group | benchmark | median / iter (95% CI) | per iter | median / element | rate |")
    print("|---|---|---|---|---|---|")
    for _, group, name, median, lo, hi, n, per, rate in rows:
        ci = f"{fmt_time(median)} ({fmt_time(lo)} – {fmt_time(hi)})"
        print(f"| {group} | `{name}` | {ci} | {n} | {per} | {rate} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
