#!/usr/bin/env bash
# The softmax-attention, Mamba-3 and KDA kernels (bench/attention_kernel_bench.cc,
# bench/mamba3_kernel_bench.cc, bench/kda_kernel_bench.cc: forward and
# backward, float32, one kernel thread) at a tiny and a paper-shaped head
# configuration, each benchmark binary measuring Eigen's GEMM 1024 in the
# same run; prints a Markdown table of GFLOP/s (medians of the repetitions)
# with each rate as a share of that GEMM rate (docs/performance.md,
# "Attention, Mamba-3 and KDA kernels"). The KDA binary also times the GDN
# core on the same inputs (a scalar decay per head): its rows say how much
# longer KDA's per-channel decay takes (time KDA / time GDN).
#
#   scripts/measure-family-kernels.sh [build-dir] [repetitions]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
repetitions=${2:-5}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for b in attention mamba3 kda; do
  # The per-shape rates only (not the thread or ST-tile studies).
  OMP_NUM_THREADS=1 "$build/bench/bench_${b}_kernel" --benchmark_repetitions="$repetitions" \
    --benchmark_filter='^(Gemm|[A-Za-z0-9]+(Forward|Backward))/' \
    --benchmark_report_aggregates_only=true --benchmark_out="$out/$b.json" \
    --benchmark_out_format=json > /dev/null 2>&1
done
/usr/bin/python3 - "$out/attention.json" "$out/mamba3.json" "$out/kda.json" <<'PY'
import json, sys
print("| kernel | shape | forward GFLOP/s | % of GEMM | backward GFLOP/s | % of GEMM |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
ratios = []
for path in sys.argv[1:]:
    runs = [b for b in json.load(open(path))["benchmarks"] if b.get("aggregate_name") == "median"]
    rate = {b["run_name"]: b["GFLOP/s"] for b in runs if "GFLOP/s" in b}
    cpu = {b["run_name"]: b["cpu_time"] for b in runs}
    gemm = rate["Gemm/1024"]
    kind = "attention" if "attention" in path else "mamba3" if "mamba3" in path else "kda"
    pres = {"attention": ["Attn"], "mamba3": ["Mamba3"], "kda": ["Kda", "Gdn"]}[kind]
    shapes = sorted({n.split("/", 1)[1] for n in rate if n.startswith(pres[0] + "Forward/")},
                    key=lambda s: [int(x.split(":")[1]) if ":" in x else 0 for x in s.split("/")])
    for pre in pres:
        for shape in shapes:
            f, b = rate[f"{pre}Forward/{shape}"], rate[f"{pre}Backward/{shape}"]
            name = pre.lower() if kind == "kda" else kind
            print(f"| {name} | {shape} | {f:.1f} | {100 * f / gemm:.0f} % | {b:.1f} | {100 * b / gemm:.0f} % |")
    if kind == "kda":
        for shape in shapes:
            ratios.append((shape, cpu[f"KdaForward/{shape}"] / cpu[f"GdnForward/{shape}"],
                           cpu[f"KdaBackward/{shape}"] / cpu[f"GdnBackward/{shape}"]))
    print(f"| {kind} run's GEMM 1024 | | {gemm:.1f} | | | |")
if ratios:
    print()
    print("| shape | KDA / GDN time, forward | KDA / GDN time, backward |")
    print("| --- | ---: | ---: |")
    for shape, f, b in ratios:
        print(f"| {shape} | {f:.2f} | {b:.2f} |")
PY
