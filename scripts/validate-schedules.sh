#!/usr/bin/env bash
# validate on the CPU over the schedule zoo (issue 27, docs/validation.md
# "Schedules with virtual stages and a split backward"): the scenario
# scenarios/validate-schedules.textproto (the tiny GDN with eight blocks,
# M = 8, T = 1024, N = 4, float32) at P = 2 and 4, StateFlow-1F1B,
# interleaved (v = 2), ZB-H1 and ZBV (v = 2, a V) in one validate run per P,
# `rounds` rounds. Prints a Markdown table: predicted and measured step time
# (the median run), the error, the replay of the run's own action times, the
# speed-up over StateFlow-1F1B predicted and measured, and the worst
# per-stage peak-memory error.
#
#   scripts/validate-schedules.sh [build-dir] [rounds]   # default: build 3
set -eu
build=${1:-build}
rounds=${2:-3}
stateflow=$(cd "$build" && pwd)/stateflow
here=$(cd "$(dirname "$0")/.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "| P | policy | v | predicted step | measured step (median of $rounds) | error | the run's own times replayed | vs StateFlow, predicted | vs StateFlow, measured | peak memory error (worst stage) |"
echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for p in 2 4; do
  "$stateflow" validate --scenario "$here/scenarios/validate-schedules.textproto" -P "$p" \
    --policies stateflow,interleaved,zb-h1,zbv --virtual-stages-list 2 --rounds "$rounds" \
    --steps 5 --json |
    python3 -c '
import json, sys
p = sys.argv[1]
runs = json.load(sys.stdin)["runs"]
ms = lambda s: "%.1f ms" % (1e3 * s)
base = [r for r in runs if r["policy"] == "stateflow"][0]
for r in runs:
    print("| %s | `%s` | %d | %s | %s | %+.1f %% | %+.1f %% | %.3f | %.3f | %.2f %% |" % (
        p, r["policy"], r["virtual_stages"], ms(r["predicted_step_time_s"]),
        ms(r["measured_step_time_s"]), 100 * r["step_time_rel_error"],
        100 * r.get("replay_step_time_rel_error", 0),
        base["predicted_step_time_s"] / r["predicted_step_time_s"],
        base["measured_step_time_s"] / r["measured_step_time_s"],
        100 * abs(r.get("peak_memory_rel_error", 0))))' "$p"
done
