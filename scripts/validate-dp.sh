#!/usr/bin/env bash
# validate on the CPU at PP x DP grids (issue 26, docs/validation.md
# "Data parallelism"): the default scenario (gdn-tiny, M = 4 per replica,
# T = 256, StateFlow N = 4, float32) as P 1 and P 2, each at DP 1, DP 2 and
# DP 2 with the distributed optimizer, `rounds` rounds each. Prints a
# Markdown table: ranks, predicted and measured step time (median run), the
# error, the replay of the run's own action times, and the worst per-stage
# peak-memory error.
#
#   scripts/validate-dp.sh [build-dir] [rounds]   # default: build 3
set -eu
build=${1:-build}
rounds=${2:-3}
stateflow=$(cd "$build" && pwd)/stateflow
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "| P | DP | distributed optimizer | ranks | predicted step | measured step (median of $rounds) | error | replaying the run's own action times | peak memory error (worst stage) |"
echo "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for p in 1 2; do
  for mode in "1 off" "2 off" "2 on"; do
    set -- $mode
    dp=$1 dist=$2
    "$stateflow" validate -P "$p" --data-parallel "$dp" --distributed-optimizer "$dist" \
      --rounds "$rounds" --steps 5 --json |
      python3 -c '
import json, sys
p, dp, dist = sys.argv[1:4]
r = json.load(sys.stdin)["runs"][0]
ms = lambda s: "%.1f ms" % (1e3 * s)
print("| %s | %s | %s | %d | %s | %s | %+.1f %% | %+.1f %% | %.2f %% |" % (
    p, dp, dist, int(p) * int(dp), ms(r["predicted_step_time_s"]), ms(r["measured_step_time_s"]),
    100 * r["step_time_rel_error"], 100 * r.get("replay_step_time_rel_error", 0),
    100 * abs(r.get("peak_memory_rel_error", 0))))' "$p" "$dp" "$dist"
  done
done
