#!/usr/bin/env python3
"""A `stateflow validate --json` report as a `stateflow calibrate --runs` CSV.

Each ValidationRun becomes one row: its configuration (policy, P, M, N, T,
alpha, recompute), its measured step time (the median of the measured steps)
and the largest measured peak of its stages (the backend's tracking
allocator: allocated bytes). `--stat min` takes the fastest round's step
time instead of the median (on a shared machine, the least disturbed). `--holdout K` marks every K-th run (the 2nd,
(K+1)-th, ...: K >= 2) as `holdout`, so that calibrate fits the others and
predicts those. `--holdout-above T` marks every run longer than T tokens
instead (fit on the short, predict the long).

    stateflow validate --json ... > v.json
    scripts/validate-to-runs.py v.json --holdout 3 > runs.csv
    stateflow calibrate --runs runs.csv --scenario scenarios/tiny-train.textproto
"""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", help="ValidationReport JSON (stateflow validate --json)")
    ap.add_argument("--holdout", type=int, default=0,
                    help="mark every K-th run as held out (K >= 2; 0: none)")
    ap.add_argument("--holdout-above", type=int, default=0,
                    help="mark every run of more than this many tokens (T) as held out "
                         "(0: none)")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="step time: the median over rounds of each round's median step "
                         "(measured_step_time_s), or the smallest round's "
                         "(measured_step_time_min_s: the least disturbed by other load)")
    args = ap.parse_args()
    if args.holdout == 1 or args.holdout < 0:
        sys.exit("validate-to-runs.py: --holdout must be 0 or >= 2")
    with open(args.report) as f:
        report = json.load(f)
    out = sys.stdout
    out.write("# from %s: model %s, dtype %s, host %s, commit %s, %s\n" % (
        os.path.basename(args.report), report.get("model", ""), report.get("dtype", ""),
        report.get("provenance", {}).get("host", ""),
        report.get("provenance", {}).get("git_commit", ""),
        report.get("provenance", {}).get("timestamp", "")))
    out.write("# step_time_s: %s (scripts/validate-to-runs.py --stat %s)\n" % (
        "the fastest round's median step" if args.stat == "min"
        else "the median over rounds of each round's median step", args.stat))
    for note in report.get("notes", []):
        if note.startswith("machine load"):
            out.write("# %s\n" % note)
    out.write("name,policy,P,M,N,T,alpha,recompute,step_time_s,peak_bytes,set\n")
    for i, run in enumerate(report["runs"]):
        peak = max((s.get("measured_peak_memory_bytes", 0) for s in run.get("stages", [])),
                   default=0)
        held = (args.holdout >= 2 and i % args.holdout == 1) or \
            (args.holdout_above > 0 and run["seq_len"] > args.holdout_above)
        out.write("%s,%s,%d,%d,%d,%d,%g,%s,%.9g,%s,%s\n" % (
            "run%d" % i, run["policy"], run["pipeline_size"], run["microbatches"],
            run["chunks"], int(run["seq_len"]), run.get("alpha", 0),
            run.get("recompute", "none") or "none",
            run["measured_step_time_min_s" if args.stat == "min" else "measured_step_time_s"],
            ("%.0f" % peak) if peak > 0 else "", "holdout" if held else "fit"))


if __name__ == "__main__":
    main()
