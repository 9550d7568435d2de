#!/usr/bin/env python3
"""Prints a `stateflow validate --json` report as the Markdown table of
docs/validation.md: one row per configuration (N, alpha, recompute), the
predicted and measured step time, the runs' range, the error, the replay of
the run's own times, the bubble and the peak-memory error, then a summary
line; with --memory, each stage's predicted and measured peak bytes instead.

    /usr/bin/python3 scripts/validate-table.py docs/data/validate-gdn-hybrid-tiny.json
    /usr/bin/python3 scripts/validate-table.py --memory docs/data/validate-gdn-hybrid-tiny.json
"""
import json
import statistics
import sys


def pct(x):
    return f"{100 * x:+.1f} %"


def memory(path):
    r = json.load(open(path))
    print("| N | alpha | recompute | " + " | ".join(
        f"stage {s['stage']} predicted / measured bytes" for s in r["runs"][0]["stages"]) + " |")
    print("| ---: | ---: | --- |" + " ---: |" * len(r["runs"][0]["stages"]))
    for run in r["runs"]:
        cells = [f"{s['predicted_peak_memory_bytes']:.0f} / {s['measured_peak_memory_bytes']:.0f}"
                 for s in run["stages"]]
        print(f"| {run['chunks']} | {run.get('alpha', 0):g} | {run['recompute']} | " +
              " | ".join(cells) + " |")


def main(path):
    r = json.load(open(path))
    print(f"| M | N | alpha | recompute | predicted ms | measured ms (median of rounds) | "
          f"runs' range ms | error | own-times replay error | bubble predicted / measured | "
          f"peak memory error (worst stage) |")
    print("| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for run in r["runs"]:
        worst_mem = max(abs(s.get("peak_memory_rel_error", 0)) for s in run["stages"])
        print(f"| {run['microbatches']} | {run['chunks']} | {run.get('alpha', 0):g} | "
              f"{run['recompute']} | {1e3 * run['predicted_step_time_s']:.1f} | "
              f"{1e3 * run['measured_step_time_s']:.1f} | "
              f"{1e3 * run['measured_step_time_min_s']:.1f} .. "
              f"{1e3 * run['measured_step_time_max_s']:.1f} | "
              f"{pct(run['step_time_rel_error'])} | "
              f"{pct(run.get('replay_step_time_rel_error', 0))} | "
              f"{run['predicted_bubble_fraction']:.3f} / {run['measured_bubble_fraction']:.3f} | "
              f"{100 * worst_mem:.2f} % |")
    errors = [abs(run["step_time_rel_error"]) for run in r["runs"]]
    within5 = sum(e <= 0.05 for e in errors)
    print()
    print(f"{r['model']}: {len(errors)} configurations; step time |error| median "
          f"{100 * r['median_abs_step_time_rel_error']:.1f} %, worst "
          f"{100 * r['max_abs_step_time_rel_error']:.1f} %, {within5} within 5 %; own-times "
          f"replay median {100 * r['median_abs_replay_step_time_rel_error']:.1f} %, worst "
          f"{100 * r['max_abs_replay_step_time_rel_error']:.1f} %; peak memory worst "
          f"{100 * r['max_abs_peak_memory_rel_error']:.2f} %")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--memory":
        memory(sys.argv[2])
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        sys.exit("usage: validate-table.py [--memory] REPORT.json")
