#!/usr/bin/env python3
"""The paper grid's tables of docs/cost-model.md, section 6, from `stateflow sweep`.

    scripts/paper-grid.py BUILD/stateflow table        # the GBS 8 table and the all-GBS one
    scripts/paper-grid.py BUILD/stateflow sensitivity  # each free parameter at -20 % and +20 %
    scripts/paper-grid.py BUILD/stateflow systems      # GBS 8 peaks in megatron-core and ms-swift

Every scenario of scenarios/paper/ is swept (its own ranges of T, global
batch, N and alpha, both policies) and each cell (model, T, GBS) shows the
best feasible configuration of each policy (the sweep's choice), or, if none
fits, the smallest peak with "OOM". Throughput ratio = StateFlow / 1F1B
tokens/s; peak ratio = 1F1B peak / StateFlow peak (of the configurations
shown).

`sensitivity` reruns the grid with `--vary NAME=0.8` and `--vary NAME=1.2`
for each parameter and reports, over the GBS 8 cells, how the headline
outputs move: the throughput ratio and the peak ratio (median and extreme
relative change over the cells where both policies fit), and the cells whose
OOM verdict (of either policy) flips.

`systems` sweeps the grid twice, every schedule in `--system megatron-core`
and then in `--system ms-swift` (each with its framework's defaults for what
the scenario's `framework` block leaves unset), and shows each GBS 8 cell's
peak of both policies in both systems. Run from the repository root.
"""
import csv
import glob
import os
import statistics
import subprocess
import sys
import tempfile

GIB = 1024.0 ** 3
SIZES = ["3b", "15b", "32b"]
ARCHS = ["gdn", "gdn-hybrid", "mamba3", "mamba3-hybrid"]
PARAMETERS = [
    "kernel_costs.compute_scale",
    "kernel_costs.all_reduce_scale",
    "efficiency.peak",
    "efficiency.knee_tokens",
    "device.memory_bandwidth_bytes_per_s",
    "pipeline_link.bandwidth_bytes_per_s",
    "pipeline_link.latency_s",
    "intra_node_link.bandwidth_bytes_per_s",
    "inter_node_link.bandwidth_bytes_per_s",
    "inter_node_link.latency_s",
    "memory_reserve",
]


def sweep(stateflow, scenario, extra):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sweep.csv")
        subprocess.run([stateflow, "sweep", "--scenario", scenario, "--csv", path] + extra,
                       check=True, stdout=subprocess.DEVNULL)
        with open(path) as f:
            return list(csv.DictReader(f))


def cells(stateflow, extra=()):
    """{(model, T, GBS): {policy: (best row or None, smallest-peak row)}}."""
    out = {}
    scenarios = sorted(glob.glob("scenarios/paper/*.textproto"))
    if not scenarios:
        # Run from the repository root: with no scenarios the tables would
        # be empty, and a check of them would pass having checked nothing.
        sys.exit(f"paper-grid.py: no scenarios/paper/*.textproto under {os.getcwd()} "
                 "(run it from the repository root)")
    for scenario in scenarios:
        for row in sweep(stateflow, scenario, list(extra)):
            key = (row["model"], int(float(row["seq_len"])), int(row["global_batch"]))
            policy = row["policy"]
            best, smallest = out.setdefault(key, {}).get(policy, (None, None))
            if row["best"] == "1":
                best = row
            if smallest is None or float(row["peak_memory_bytes"]) < float(smallest["peak_memory_bytes"]):
                smallest = row
            out[key][policy] = (best, smallest)
    return out


def order(key):
    model, t, gbs = key
    size = model.rsplit("-", 1)[1]
    arch = model.rsplit("-", 1)[0]
    return (SIZES.index(size), ARCHS.index(arch), t, gbs)


def shown(cell, policy):
    best, smallest = cell[policy]
    return best if best is not None else smallest


def headline(cell):
    """(throughput ratio or None, peak ratio, 1F1B fits, StateFlow fits,
    StateFlow tokens/s or None)."""
    base, sf = shown(cell, "1f1b"), shown(cell, "stateflow")
    base_fits, sf_fits = cell["1f1b"][0] is not None, cell["stateflow"][0] is not None
    tput = (float(sf["tokens_per_s"]) / float(base["tokens_per_s"])
            if base_fits and sf_fits else None)
    peak = float(base["peak_memory_bytes"]) / float(sf["peak_memory_bytes"])
    return tput, peak, base_fits, sf_fits, float(sf["tokens_per_s"]) if sf_fits else None


def length(t):
    return "%dK" % (t // 1024)


def table(grid, gbs_filter):
    lines = ["| model | T | GBS | 1F1B K tok/s | 1F1B peak GiB | StateFlow K tok/s | "
             "StateFlow peak GiB | N, alpha | throughput ratio | peak ratio (1F1B / StateFlow) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key in sorted(grid, key=order):
        model, t, gbs = key
        if gbs_filter is not None and gbs != gbs_filter:
            continue
        cell = grid[key]
        cols = [model, length(t), str(gbs)]
        for policy in ("1f1b", "stateflow"):
            best, smallest = cell[policy]
            if best is None:
                cols += ["OOM", "OOM (%.1f)" % (float(smallest["peak_memory_bytes"]) / GIB)]
            else:
                cols += ["%.1f" % (float(best["tokens_per_s"]) / 1000),
                         "%.1f" % (float(best["peak_memory_bytes"]) / GIB)]
        sf = shown(cell, "stateflow")
        cols.append("%s, %g" % (sf["chunks"], float(sf["alpha"])))
        tput, peak = headline(cell)[:2]
        cols.append("-" if tput is None else "%.2fx" % tput)
        cols.append("%.2fx" % peak)
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines)


def change(values):
    if not values:
        return "-"
    return "%+.1f %% (%+.1f to %+.1f)" % (100 * statistics.median(values), 100 * min(values),
                                          100 * max(values))


def sensitivity(stateflow):
    base = {k: headline(v) for k, v in cells(stateflow).items() if k[2] == 8}
    lines = ["| parameter | factor | throughput ratio: median change (range) | "
             "peak ratio: median change (range) | OOM verdicts that flip | "
             "StateFlow tokens/s: median change |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name in PARAMETERS:
        for factor in (0.8, 1.2):
            varied = {k: headline(v) for k, v in
                      cells(stateflow, ["--vary", "%s=%g" % (name, factor)]).items() if k[2] == 8}
            tput, peak, flips, absolute = [], [], [], []
            for key in sorted(base, key=order):
                b, v = base[key], varied[key]
                if b[0] is not None and v[0] is not None:
                    tput.append(v[0] / b[0] - 1)
                peak.append(v[1] / b[1] - 1)
                if b[4] is not None and v[4] is not None:
                    absolute.append(v[4] / b[4] - 1)
                for i, policy in ((2, "1F1B"), (3, "StateFlow")):
                    if b[i] != v[i]:
                        flips.append("%s %s %s %s" % (key[0], length(key[1]), policy,
                                                      "fits" if v[i] else "OOM"))
            lines.append("| %s | %g | %s | %s | %s | %+.1f %% |" % (
                name, factor, change(tput), change(peak),
                "none" if not flips else "; ".join(flips),
                100 * statistics.median(absolute) if absolute else 0))
    return "\n".join(lines)


def systems(stateflow):
    grids = {name: cells(stateflow, ["--system", name]) for name in ("megatron-core", "ms-swift")}
    lines = ["| model | T | 1F1B peak GiB, megatron-core | 1F1B, ms-swift | "
             "StateFlow peak GiB, megatron-core | StateFlow, ms-swift |",
             "| --- | --- | --- | --- | --- | --- |"]

    def peak(cell, policy):
        best, smallest = cell[policy]
        row = best if best is not None else smallest
        text = "%.1f" % (float(row["peak_memory_bytes"]) / GIB)
        return text if best is not None else "OOM (%s)" % text

    for key in sorted(grids["megatron-core"], key=order):
        model, t, gbs = key
        if gbs != 8:
            continue
        cols = [model, length(t)]
        for policy in ("1f1b", "stateflow"):
            cols += [peak(grids[name][key], policy) for name in ("megatron-core", "ms-swift")]
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines)


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("table", "sensitivity", "systems"):
        sys.exit(__doc__)
    stateflow = os.path.abspath(sys.argv[1])
    if sys.argv[2] == "table":
        grid = cells(stateflow)
        print(table(grid, 8))
        print()
        print(table(grid, None))
    elif sys.argv[2] == "systems":
        print(systems(stateflow))
    else:
        print(sensitivity(stateflow))


if __name__ == "__main__":
    main()
