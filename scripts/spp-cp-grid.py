#!/usr/bin/env python3
"""SPP, context parallelism or both: the planner's answer per cell of the paper grid.

    scripts/spp-cp-grid.py BUILD/stateflow [--quick]

For each model of scenarios/paper/ (3B, 15B, 32B; GDN, Mamba-3 and their
hybrids) at each of its sequence lengths, global batch 8, on the paper's
device count for that size (the scenario's P x TP: 8, 16 and 32 A100s,
`a100-80gb-nvlink`), system stateflow, full recompute, `stateflow capacity`
searches every split P x TP x CP x DP of those devices three ways:

  SPP   CP 1, policies 1f1b and stateflow (N = 1 is "neither")
  CP    CP in {2, 4, 8}, policy 1f1b (whole sequences, N = 1)
  both  CP in {2, 4, 8}, policy stateflow (N > 1 chunks, each split over CP)

and the cell's answer is the fastest feasible of the three (OOM everywhere:
"none fits"), with the distributed optimizer off and on. Every number is a
prediction of the analytic model (docs/cost-model.md), not a measurement.
Prints a Markdown table. Run from the repository root.
"""
import glob
import json
import os
import subprocess
import sys

SIZES = ["3b", "15b", "32b"]
ARCHS = ["gdn", "gdn-hybrid", "mamba3", "mamba3-hybrid"]
WAYS = [("SPP", "1", "1f1b,stateflow"), ("CP", "2,4,8", "1f1b"), ("both", "2,4,8", "stateflow")]


def scenario_fields(path):
    text = open(path).read()
    def grab(name):
        i = text.index(name + ":")
        return int(text[i + len(name) + 1:].split()[0])
    lengths = text[text.index("seq_len: [") + 10:].split("]")[0]
    return (grab("pipeline_size") * grab("tensor_size"),
            [int(t) for t in lengths.split(",")])


def best(stateflow, path, seq_len, devices, cps, policies, distributed):
    cmd = [stateflow, "capacity", "--scenario", path, "-T", str(seq_len), "--global-batch", "8",
           "--devices", str(devices), "--system", "stateflow", "--context-parallel-list", cps,
           "--policies", policies, "--distributed-optimizer", distributed, "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("spp-cp-grid: " + " ".join(cmd) + ": " + out.stderr.strip())
    report = json.loads(out.stdout)
    for c in report.get("candidates", []):
        if c.get("verdict") == "feasible":
            return c
    return None


def label(way, c):
    b = c["best"]
    split = "P%d TP%d DP%d" % (c["pipeline_size"], c["tensor_size"], c.get("data_size", 1))
    cp = c.get("context_size", 1) or 1
    if cp > 1:
        split += " CP%d" % cp
    n = b.get("chunks", 1)
    return "%s N%d" % (split, n)


def main():
    stateflow = sys.argv[1]
    quick = "--quick" in sys.argv
    print("| model | T | dist. opt. | SPP (CP 1) | CP (N 1) | both | planner's answer |")
    print("| --- | ---: | --- | --- | --- | --- | --- |")
    for size in SIZES:
        for arch in ARCHS:
            path = "scenarios/paper/%s-%s.textproto" % (arch, size)
            devices, lengths = scenario_fields(path)
            if quick:
                lengths = lengths[-1:]
            for seq_len in lengths:
                for distributed in ["off", "on"]:
                    cells, results = [], {}
                    for way, cps, policies in WAYS:
                        c = best(stateflow, path, seq_len, devices, cps, policies, distributed)
                        if c is None:
                            cells.append("OOM")
                            continue
                        tps = c["best"]["tokens_per_s"]
                        n = c["best"].get("chunks", 1)
                        name = way
                        if way == "SPP" and n == 1:
                            name = "neither"
                        results[name] = tps
                        cells.append("%.2f K tok/s (%s)" % (tps / 1e3, label(way, c)))
                    if results:
                        winner = max(results, key=results.get)
                        ranked = sorted(results.values(), reverse=True)
                        margin = ("" if len(ranked) < 2 else
                                  ", +%.0f %% over the next" % (100 * (ranked[0] / ranked[1] - 1)))
                        answer = "**%s**%s" % (winner, margin)
                    else:
                        answer = "none fits"
                    print("| %s-%s (%d GPUs) | %dK | %s | %s | %s | %s | %s |" %
                          (arch, size, devices, seq_len // 1024, distributed, cells[0], cells[1],
                           cells[2], answer))
                    sys.stdout.flush()


if __name__ == "__main__":
    main()
