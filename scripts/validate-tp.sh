#!/usr/bin/env bash
# validate on the CPU at TP x PP grids (issue 26, docs/validation.md "Tensor
# parallelism"): the default scenario (gdn-tiny, M = 4, T = 256, StateFlow
# N = 4, float32) at P 1 and P 2, each at TP 1 and TP 2, `rounds` rounds
# each. Each configuration is profiled in as many processes as its ranks
# (one tensor rank's share of every layer, its sums left out), predicted with
# the sums charged on the measured link, and run under mpirun -n P x TP.
# Prints a Markdown table: ranks, predicted and measured step time (median
# run), the error, the replay of the run's own action times, and the worst
# per-stage peak-memory error.
#
#   scripts/validate-tp.sh [build-dir] [rounds]   # default: build 3
set -eu
build=${1:-build}
rounds=${2:-3}
stateflow=$(cd "$build" && pwd)/stateflow
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "| P | TP | ranks | predicted step | measured step (median of $rounds) | error | replaying the run's own action times | peak memory error (worst stage) |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for p in 1 2; do
  for tp in 1 2; do
    "$stateflow" validate -P "$p" --tensor-parallel "$tp" --rounds "$rounds" --steps 5 --json |
      python3 -c '
import json, sys
p, tp = sys.argv[1:3]
r = json.load(sys.stdin)["runs"][0]
ms = lambda s: "%.1f ms" % (1e3 * s)
print("| %s | %s | %d | %s | %s | %+.1f %% | %+.1f %% | %.2f %% |" % (
    p, tp, int(p) * int(tp), ms(r["predicted_step_time_s"]), ms(r["measured_step_time_s"]),
    100 * r["step_time_rel_error"], 100 * r.get("replay_step_time_rel_error", 0),
    100 * abs(r.get("peak_memory_rel_error", 0))))' "$p" "$tp"
  done
done
