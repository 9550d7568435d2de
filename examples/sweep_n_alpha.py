#!/usr/bin/env python3
"""A sweep over N and alpha from Python, plotted with matplotlib.

The paper's 3B Gated DeltaNet hybrid (3 GDN : 1 attention) at 64K tokens on
8 A100s (PP 8), StateFlow over N in {2, 4, 8, 16} and alpha in {0, 0.5, 1},
1F1B beside it: tokens/s and peak memory against N, one line per alpha.

    PYTHONPATH=build/python python3 examples/sweep_n_alpha.py --out out/
"""
import argparse
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import stateflow as sf  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out", help="folder for sweep-n-alpha.png")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    s = sf.load_scenario(os.path.join(os.path.dirname(__file__), "..", "scenarios", "paper",
                                      "gdn-hybrid-3b.textproto"))
    rows = sf.sweep(s, seq_len=65536, global_batch=8, chunks=[2, 4, 8, 16], alpha=[0, 0.5, 1],
                    policies=["1f1b", "stateflow"])
    baseline = next(r for r in rows if r["policy"] == "1f1b")
    best = rows.best()

    fig, (tput, mem) = plt.subplots(1, 2, figsize=(10, 4))
    for alpha in (0, 0.5, 1):
        line = [r for r in rows if r["policy"] == "stateflow" and r["alpha"] == alpha]
        tput.plot([r["chunks"] for r in line], [r["tokens_per_s"] for r in line], "o-",
                  label="StateFlow alpha=%g" % alpha)
        mem.plot([r["chunks"] for r in line], [r["peak_memory_bytes"] / 2**30 for r in line],
                 "o-", label="StateFlow alpha=%g" % alpha)
    tput.axhline(baseline["tokens_per_s"], color="gray", ls="--", label="1F1B")
    mem.axhline(baseline["peak_memory_bytes"] / 2**30, color="gray", ls="--", label="1F1B")
    tput.set(xscale="log", xlabel="N (chunks)", ylabel="tokens/s (predicted)")
    mem.set(xscale="log", xlabel="N (chunks)", ylabel="peak memory, GiB (predicted)")
    tput.legend()
    fig.suptitle("%s, T=64K, GBS 8, PP 8 on A100s (analytic predictions)" % s.model)
    fig.tight_layout()
    path = os.path.join(args.out, "sweep-n-alpha.png")
    fig.savefig(path, dpi=100)

    print("%d configurations; 1F1B %.0f tokens/s" % (len(rows), baseline["tokens_per_s"]))
    for r in best:
        print("best %-9s N=%-2d alpha=%-4g %.0f tokens/s, peak %.1f GiB" % (
            r["policy"], r["chunks"], r["alpha"], r["tokens_per_s"],
            r["peak_memory_bytes"] / 2**30))
    print("wrote", path)


if __name__ == "__main__":
    main()
