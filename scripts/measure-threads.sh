#!/usr/bin/env bash
# Measures threads within a rank against ranks: `stateflow train` on
# gdn-small at T = 2048 tokens per sequence (M = 4 microbatches, StateFlow
# with N = 4 chunks, float32) as
#   1 rank  x 1 thread   (P = 1, --threads 1)
#   1 rank  x 2 threads  (P = 1, --threads 2)
#   2 ranks x 1 thread   (mpirun -n 2, P = 2, --threads 1)
# and prints a Markdown table of tokens/s (docs/performance.md, "Threads
# within a rank") with each configuration's rate over the first one's.
#
#   scripts/measure-threads.sh [build-dir] [steps] [repeats]
#   scripts/measure-threads.sh build 3 3
#
# Each configuration runs `repeats` times, repeats being the outer loop so
# that a change of load on a shared machine touches every configuration
# alike; the table shows the run with the highest tokens/s (the mean over
# the steps after the first), since other work only ever slows a run down.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-3}
repeats=${3:-3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

common=(--model gdn-small -T 2048 -M 4 -N 4 --policy stateflow --dtype float32
        --steps "$steps" --json)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for rep in $(seq "$repeats"); do
  timeout 900 "$build/stateflow" train "${common[@]}" -P 1 --threads 1 > "$out/r1t1-$rep.json"
  timeout 900 "$build/stateflow" train "${common[@]}" -P 1 --threads 2 > "$out/r1t2-$rep.json"
  timeout 900 mpirun -n 2 --bind-to core "$build/stateflow" train "${common[@]}" -P 2 --threads 1 \
    > "$out/r2t1-$rep.json"
  echo "repeat $rep of $repeats done ($(uptime | sed 's/.*load/load/'))" >&2
done

/usr/bin/python3 - "$out" "$repeats" <<'EOF'
import json, sys

out, repeats = sys.argv[1], int(sys.argv[2])
configs = [("r1t1", "1 rank x 1 thread (P = 1)"),
           ("r1t2", "1 rank x 2 threads (P = 1)"),
           ("r2t1", "2 ranks x 1 thread (mpirun -n 2, P = 2)")]
best = {}
for key, _ in configs:
    runs = [json.load(open(f"{out}/{key}-{k}.json")) for k in range(1, repeats + 1)]
    best[key] = max(runs, key=lambda r: r["tokens_per_s"])
base = best["r1t1"]["tokens_per_s"]
print("| configuration | threads per rank | tokens/s | step (ms) | over 1 x 1 |")
print("| --- | ---: | ---: | ---: | ---: |")
for key, name in configs:
    r = best[key]
    print(f"| {name} | {r['provenance']['threads']} | {r['tokens_per_s']:.0f} | "
          f"{1000 * r['step_time_s']:.0f} | {r['tokens_per_s'] / base:.2f} |")
print(f"\ncommit {best['r1t1']['provenance']['git_commit']}, best of {repeats}")
EOF
