#!/usr/bin/env bash
# Measures `stateflow train` end to end with P = 2 MPI ranks on this machine:
# tokens/s and peak memory per stage for 1f1b (N = 1) and stateflow with
# N in {2, 4, 8}, for M in {2, 4, 8}, beside the paper's formulas
#   speedup      (M + P - 1) / (M + (P - 1)/N)
#   memory ratio min(M, P - r) A_r / (min(MN, N + P - r - 1) (A_r/N + B_r))
# where A_r (stored activations of one whole microbatch on stage r) and B_r
# (boundary states per in-flight chunk) are taken from the runs themselves.
# Prints a Markdown table (docs/performance.md, "End to end on CPU").
#
#   scripts/measure-train.sh [build-dir] [seq-len] [steps] [repeats]
#   scripts/measure-train.sh build 1024 4 3
#
# Each configuration runs `repeats` times; the table shows the median
# tokens/s (the step time is the mean over the steps after the first).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
seq_len=${2:-1024}
steps=${3:-4}
repeats=${4:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for M in 2 4 8; do
  for N in 1 2 4 8; do
    policy=stateflow
    [ "$N" = 1 ] && policy=1f1b
    for rep in $(seq "$repeats"); do
      timeout 600 mpirun -n 2 --oversubscribe "$build/stateflow" train --policy "$policy" \
        -N "$N" -M "$M" -T "$seq_len" --steps "$steps" --json > "$out/M$M-N$N-$rep.json"
    done
    echo "measured M=$M N=$N" >&2
  done
done

/usr/bin/python3 - "$out" "$repeats" <<'EOF'
import json, statistics, sys

out, repeats = sys.argv[1], int(sys.argv[2])
P = 2

def load(M, N):
    runs = [json.load(open(f"{out}/M{M}-N{N}-{k}.json")) for k in range(1, repeats + 1)]
    runs.sort(key=lambda r: r["tokens_per_s"])
    return runs[len(runs) // 2]  # the median run by tokens/s

def at_peak(stage, cls):
    return next(b["bytes"] for b in stage["peak_by_class"] if b["buffer_class"] == cls)

def kib(x):
    return f"{x / 1024:.0f}"

print("| M | N | policy | step ms | tokens/s | speedup | paper speedup | busy ms s0 / s1 | "
      "peak KiB s0 / s1 | act+bnd KiB s0 / s1 | memory ratio s0 / s1 | paper ratio s0 / s1 |")
print("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for M in (2, 4, 8):
    base = load(M, 1)
    # A_r: one whole microbatch's stored activations on stage r (1F1B holds min(M, P - r)).
    A = [at_peak(base["stages"][r], "activations") / min(M, P - r) for r in range(P)]
    base_held = [at_peak(s, "activations") + at_peak(s, "boundary_states") for s in base["stages"]]
    for N in (1, 2, 4, 8):
        rep = base if N == 1 else load(M, N)
        speedup = rep["tokens_per_s"] / base["tokens_per_s"]
        paper_speedup = (M + P - 1) / (M + (P - 1) / N)
        held = [at_peak(s, "activations") + at_peak(s, "boundary_states") for s in rep["stages"]]
        ratios, paper = [], []
        for r in range(P):
            chunks = min(M * N, N + P - r - 1) if N > 1 else min(M, P - r)
            B = at_peak(rep["stages"][r], "boundary_states") / chunks if N > 1 else 0.0
            ratios.append(base_held[r] / held[r])
            paper.append(min(M, P - r) * A[r] / (chunks * (A[r] / N + B)) if N > 1 else 1.0)
        st = rep["stages"]
        print(f"| {M} | {N} | {rep['policy']} | {rep['step_time_s'] * 1e3:.0f} | "
              f"{rep['tokens_per_s']:.0f} | {speedup:.2f} | {paper_speedup:.2f} | "
              f"{st[0]['busy_s'] * 1e3:.0f} / {st[1]['busy_s'] * 1e3:.0f} | "
              f"{kib(st[0]['peak_memory_bytes'])} / {kib(st[1]['peak_memory_bytes'])} | "
              f"{kib(held[0])} / {kib(held[1])} | {ratios[0]:.2f} / {ratios[1]:.2f} | "
              f"{paper[0]:.2f} / {paper[1]:.2f} |")
EOF
