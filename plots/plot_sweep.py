"""Throughput and peak memory against N and alpha (the sensitivity figures).

What it is for: one row of panels per cell of a sweep (model, layout,
sequence length, global batch): throughput bars and a peak-memory line
against the chunk count N at the best configuration's alpha, and, when the
sweep has several alphas, against alpha at the best configuration's N. OOM
configurations are hatched and labelled, the best one starred, the device
capacity dashed, the baseline (1F1B) a grey reference line.
What it is not: the picker of the best configuration (the CSV's "best"
column says which one; see SweepCell.best for the fallback).

    cells = stateflow_data.sweep_cells(path, stateflow_data.load_sweep(path))
    plot_sweep.draw(cells, "out/sweep.png")
"""

from matplotlib.lines import Line2D
from matplotlib.patches import Patch

import plot_style as style
from stateflow_data import display_policy, gib

_PANEL_IN = (6.6, 3.1)
_LEFT_IN, _RIGHT_IN, _TOP_IN, _BOTTOM_IN = 0.8, 0.85, 1.15, 0.2
_BAR_COLOR = "#3b75af"
_MEMORY_COLOR = "#7b3f98"
_OOM_COLOR = "#c0392b"


def draw(cells, out, policy_label="StateFlow", baseline_label="1F1B",
         fixed_alpha=None, fixed_chunks=None, dpi=110):
    """Writes the sensitivity panels of every cell to `out`."""
    style.setup()
    n_cols = 2 if any(len(c.alpha_values()) > 1 for c in cells) else 1
    legend_cols = 6 if n_cols == 2 else 3
    fig, axes = _figure(len(cells), n_cols, 6 // legend_cols)
    for row, cell in enumerate(cells):
        best = cell.best()
        alpha = best["alpha"] if fixed_alpha is None else fixed_alpha
        chunks = best["chunks"] if fixed_chunks is None else fixed_chunks
        _panel(axes[row][0], cell, cell.vs_chunks(alpha), "chunks", best,
               "N (chunks per microbatch)", "alpha = %g" % alpha)
        if n_cols == 2:
            _panel(axes[row][1], cell, cell.vs_alpha(chunks), "alpha", best,
                   "alpha (0 equal, 1 FLOP-balanced)", "N = %d" % chunks)
        _row_label(axes[row][0], cell)
    _legend(fig, policy_label, baseline_label, legend_cols)
    width = fig.get_figwidth()
    style.title(fig, _LEFT_IN / width, 1 - _RIGHT_IN / width,
                "%s sensitivity to N%s" % (
                    policy_label, " and alpha" if n_cols == 2 else ""),
                _scenarios(cells))
    style.save(fig, out, dpi)


def _figure(n_rows, n_cols, legend_rows):
    width = _LEFT_IN + _RIGHT_IN + n_cols * _PANEL_IN[0]
    top_in = _TOP_IN + 0.22 * (legend_rows - 1)
    height = top_in + _BOTTOM_IN + n_rows * _PANEL_IN[1]
    fig, axes = style.plt.subplots(n_rows, n_cols, squeeze=False,
                                   figsize=(width, height))
    fig.subplots_adjust(left=_LEFT_IN / width, right=1 - _RIGHT_IN / width,
                        top=1 - top_in / height, bottom=_BOTTOM_IN / height
                        + 0.45 / height, hspace=0.55, wspace=0.38)
    return fig, axes


def _panel(ax, cell, rows, column, best, xlabel, fixed):
    xs = list(range(len(rows)))
    ticks = ["%d" % r[column] if column == "chunks" else "%g" % r[column]
             for r in rows]
    _bars(ax, xs, rows, best)
    ax.set_xticks(xs)
    ax.set_xticklabels(ticks)
    ax.set_xlabel("%s   (%s)" % (xlabel, fixed))
    ax.set_ylabel("throughput (K tokens/s)")
    _baseline(ax, cell.baseline)
    top = max([r["tokens_per_s"] for r in rows] + [_baseline_tps(cell)])
    ax.set_ylim(0, 1.28 * top / 1e3)
    pad = max(0.0, (4 - len(rows)) / 2)   # a lone bar stays bar-sized
    ax.set_xlim(-0.6 - pad, len(rows) - 0.4 + pad)
    _memory(ax.twinx(), xs, rows, cell)


def _bars(ax, xs, rows, best):
    for x, r in zip(xs, rows):
        kt = r["tokens_per_s"] / 1e3
        if r["oom"]:
            ax.bar(x, kt, width=0.7, facecolor="white", hatch="////",
                   edgecolor=_OOM_COLOR, linewidth=0.8)
            ax.text(x, kt / 2, "OOM", ha="center", va="center", fontsize=8,
                    color=_OOM_COLOR, fontweight="bold", rotation=90,
                    bbox=dict(facecolor="white", edgecolor="none", pad=1))
        else:
            ax.bar(x, kt, width=0.7, color=_BAR_COLOR)
        if r is best and not r["oom"]:
            ax.plot([x], [kt], marker="*", markersize=13, color="#f1c40f",
                    markeredgecolor=style.INK, markeredgewidth=0.6,
                    linestyle="none")
            ax.annotate("best", (x, kt), xytext=(0, 9 if not r["oom"]
                                                 else 12),
                        textcoords="offset points", ha="center", fontsize=8)


def _baseline_tps(cell):
    b = cell.baseline
    return b["tokens_per_s"] if b is not None and not b["oom"] else 0.0


def _baseline(ax, base):
    if base is None:
        return
    if base["oom"]:
        ax.text(0.01, 0.97, "%s: OOM (%.1f GiB)" % (
            display_policy(base["policy"]), gib(base["peak_memory_bytes"])),
            transform=ax.transAxes, ha="left", va="top", fontsize=8,
            color=_OOM_COLOR)
        return
    kt = base["tokens_per_s"] / 1e3
    ax.axhline(kt, color=style.BASELINE_COLOR, linestyle="-.", linewidth=1.1)
    ax.text(0.01, kt, "%s %.1f K tok/s, %.1f GiB" % (
        display_policy(base["policy"]), kt, gib(base["peak_memory_bytes"])),
        transform=ax.get_yaxis_transform(), ha="left", va="center",
        fontsize=8, color=style.BASELINE_COLOR, zorder=5,
        bbox=dict(facecolor="white", edgecolor="none", pad=1.5))


def _memory(ax, xs, rows, cell):
    mem = [gib(r["peak_memory_bytes"]) for r in rows]
    ax.plot(xs, mem, color=_MEMORY_COLOR, marker="o", markersize=4,
            linewidth=1.4)
    for x, r, m in zip(xs, rows, mem):
        if r["oom"]:
            ax.plot([x], [m], marker="X", markersize=7, color=_OOM_COLOR,
                    linestyle="none")
    # The OOM threshold: the usable bytes (capacity less the device's
    # reserve) when the CSV has them, else the capacity.
    capacity = max(r.get("usable_bytes", r["capacity_bytes"]) for r in rows)
    if capacity > 0:
        ax.axhline(gib(capacity), color=style.CAPACITY_COLOR,
                   linestyle="--", linewidth=1.0)
    ax.set_ylim(0, 1.15 * max(mem + [gib(capacity)]))
    ax.set_ylabel("peak memory (GiB)", color=_MEMORY_COLOR)
    ax.tick_params(axis="y", colors=_MEMORY_COLOR)
    ax.spines["right"].set_visible(True)
    ax.spines["right"].set_color(_MEMORY_COLOR)


def _scenarios(cells):
    names = sorted({c.key["scenario"] for c in cells})
    return "scenario " + ", ".join(names) if len(names) <= 2 else ""


def _row_label(ax, cell):
    fits = "" if not cell.best()["oom"] else "    no configuration fits"
    ax.set_title(cell.label() + fits, loc="left", fontsize=10,
                 fontweight="bold", pad=8)


def _legend(fig, policy_label, baseline_label, ncol):
    handles = [
        Patch(color=_BAR_COLOR),
        Patch(facecolor="white", hatch="////", edgecolor=_OOM_COLOR),
        Line2D([], [], marker="*", markersize=11, color="#f1c40f",
               markeredgecolor=style.INK, linestyle="none"),
        Line2D([], [], color=_MEMORY_COLOR, marker="o", markersize=4),
        Line2D([], [], color=style.CAPACITY_COLOR, linestyle="--"),
        Line2D([], [], color=style.BASELINE_COLOR, linestyle="-."),
    ]
    labels = ["%s throughput" % policy_label, "out of memory (OOM)",
              "best that fits", "peak memory", "usable memory (OOM above)",
              "%s throughput" % baseline_label]
    fig.legend(handles, labels, loc="upper left", ncol=ncol,
               bbox_to_anchor=(_LEFT_IN / fig.get_figwidth() - 0.01,
                               1 - 0.42 / fig.get_figheight()), fontsize=9)
