#!/usr/bin/env python3
"""Reading a profile's cost table and replaying it.

`stateflow profile` measured gdn-tiny's per-chunk costs on one H100
(scenarios/measured/h100-2026-11-27/, the GPU kit's run): print what the
table holds, then simulate the tiny training scenario on those costs beside
the analytic model's prediction, for a few chunk counts the table covers.

    PYTHONPATH=build/python python3 examples/replay_costs.py
"""
import argparse
import os

import stateflow as sf

ROOT = os.path.join(os.path.dirname(__file__), "..")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="unused (the tests pass one)")
    parser.add_argument("--costs", default=os.path.join(
        ROOT, "scenarios", "measured", "h100-2026-11-27", "costs-gdn-tiny.textproto"))
    args = parser.parse_args()

    table = sf.load_cost_table(args.costs)
    print("cost table: model %s, dtype %s, device %s" % (
        table["model"]["name"], table["dtype"], table.get("device", "?")))
    samples = table["samples"]
    for entry in samples[:8]:
        print("  %-10s %-8s %7d tokens (prefix %6d): median %.3g s over %d repetitions" % (
            entry["layer_kind"], entry["pass"], entry["tokens"], entry["prefix"],
            entry["median_s"], entry["repetitions"]))
    print("  ... %d samples in all" % len(samples))

    s = sf.load_scenario(os.path.join(ROOT, "scenarios", "tiny-train.textproto")).with_(
        model=table["model"]["name"])
    replayed = sf.simulate(s, costs=args.costs, baselines=False)
    analytic = sf.simulate(s, baselines=False)
    print("P=%d M=%d N=%d T=%d:" % (s.P, s.M, s.N, s.T))
    print("  replayed (measured costs): step %.3f ms, bubble %.3f" % (
        replayed.step_time_s * 1e3, replayed.bubble_fraction))
    print("  analytic (%s preset):  step %.3f ms, bubble %.3f" % (
        s.cluster, analytic.step_time_s * 1e3, analytic.bubble_fraction))


if __name__ == "__main__":
    main()
