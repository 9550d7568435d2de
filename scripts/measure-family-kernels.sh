#!/usr/bin/env bash
# The softmax-attention and Mamba-3 kernels (bench/attention_kernel_bench.cc,
# bench/mamba3_kernel_bench.cc: forward and backward, float32, one kernel
# thread) at a tiny and a paper-shaped head configuration, each benchmark
# binary measuring Eigen's GEMM 1024 in the same run; prints a Markdown table
# of GFLOP/s (medians of the repetitions) with each rate as a share of that
# GEMM rate (docs/performance.md, "Attention and Mamba-3 kernels").
#
#   scripts/measure-family-kernels.sh [build-dir] [repetitions]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
repetitions=${2:-5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for b in attention mamba3; do
  OMP_NUM_THREADS=1 "$build/bench/bench_${b}_kernel" --benchmark_repetitions="$repetitions" \
    --benchmark_report_aggregates_only=true --benchmark_out="$out/$b.json" \
    --benchmark_out_format=json > /dev/null 2>&1
done
/usr/bin/python3 - "$out/attention.json" "$out/mamba3.json" <<'PY'
import json, sys
print("| kernel | shape | forward GFLOP/s | % of GEMM | backward GFLOP/s | % of GEMM |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
for path in sys.argv[1:]:
    runs = [b for b in json.load(open(path))["benchmarks"] if b.get("aggregate_name") == "median"]
    rate = {b["run_name"]: b["GFLOP/s"] for b in runs if "GFLOP/s" in b}
    gemm = rate["Gemm/1024"]
    shapes = sorted({n.split("/", 1)[1] for n in rate if not n.startswith("Gemm")},
                    key=lambda s: [int(x.split(":")[1]) if ":" in x else 0 for x in s.split("/")])
    kind = "attention" if "attention" in path else "mamba3"
    pre = "Attn" if kind == "attention" else "Mamba3"
    for shape in shapes:
        f, b = rate[f"{pre}Forward/{shape}"], rate[f"{pre}Backward/{shape}"]
        print(f"| {kind} | {shape} | {f:.1f} | {100 * f / gemm:.0f} % | {b:.1f} | {100 * b / gemm:.0f} % |")
    print(f"| {kind} run's GEMM 1024 | | {gemm:.1f} | | | |")
PY
