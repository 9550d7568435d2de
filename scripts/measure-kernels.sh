#!/usr/bin/env bash
# Native against portable: bench/gdn_kernel_bench.cc (Eigen's float32 GEMM
# and the GDN core forward/backward, one kernel thread) from the native build
# (SF_NATIVE=ON, the default: -march=native) and from a portable one
# (-DSF_NATIVE=OFF: SSE2 only), one after the other, as a Markdown table of
# GFLOP/s (medians of the repetitions) with each GDN rate as a share of the
# same build's GEMM 1024 rate (docs/performance.md, "GDN kernel").
#
#   scripts/measure-kernels.sh [native-build-dir] [portable-build-dir] [repetitions]
#   scripts/measure-kernels.sh build build-portable 5
#
# The portable directory needs only the benchmark target:
#   cmake -S . -B build-portable -DCMAKE_BUILD_TYPE=Release -DSF_NATIVE=OFF -DSF_BUILD_TESTS=OFF
#   cmake --build build-portable -j2 --target bench_gdn_kernel
set -euo pipefail
cd "$(dirname "$0")/.."
native=${1:-build}
portable=${2:-build-portable}
repetitions=${3:-5}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for b in "$native" "$portable"; do
  "$b/bench/bench_gdn_kernel" --benchmark_repetitions="$repetitions" \
    --benchmark_report_aggregates_only=true --benchmark_out="$out/$(basename "$b").json" \
    --benchmark_out_format=json > /dev/null 2>&1
done

/usr/bin/python3 - "$out/$(basename "$native").json" "$out/$(basename "$portable").json" <<'EOF'
import json, sys

def medians(path):
    runs = json.load(open(path))["benchmarks"]
    return {r["run_name"]: r["GFLOP/s"] for r in runs if r.get("aggregate_name") == "median"}

native, portable = medians(sys.argv[1]), medians(sys.argv[2])
gemm_n, gemm_p = native["Gemm/1024"], portable["Gemm/1024"]
print("| benchmark (float32, 1 thread) | native GFLOP/s | portable GFLOP/s | native / portable "
      "| native % of native GEMM 1024 | portable % of portable GEMM 1024 |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for name in native:
    n, p = native[name], portable[name]
    print(f"| {name} | {n:.1f} | {p:.1f} | {n / p:.2f} | {100 * n / gemm_n:.0f} | {100 * p / gemm_p:.0f} |")
EOF
