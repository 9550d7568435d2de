"""Each stage's memory over one step, stacked by buffer class.

What it is for: seeing what fills a device and when: the step-long weights,
gradients and optimizer state at the bottom, then stored activations,
boundary states, K/V buffers, logits and workspace as they come and go; one
small panel per stage (rows) and per process (columns), on shared axes, with
each panel's peak marked and the device capacity as a dashed line.
What it is not: the ledger itself (the trace's counters are drawn as
written: each sample holds until the next one).

    trace = stateflow_data.load_trace("out/default-trace.json")
    plot_memory.draw(trace.drawing_order(), "out/memory.png", 80 << 30)
"""

from matplotlib.patches import Patch
from matplotlib.lines import Line2D

import plot_style as style
from stateflow_data import gib, memory_peak, memory_steps

_COL_IN, _ROW_IN = 6.4, 1.25          # one panel
_LEFT_IN, _RIGHT_IN = 0.95, 0.25
_TOP_IN, _BOTTOM_IN = 1.2, 0.55


def draw(processes, out, capacity_bytes=0.0, time_unit="s", dpi=110,
         context=""):
    """Writes the memory panels of `processes` (columns) to `out`;
    `context` (e.g. the scenario) is written at the top right."""
    style.setup()
    stages = sorted({r for p in processes for r in p.memory})
    fig, axes = _figure(len(stages), len(processes))
    classes = _used_classes(processes)
    for col, proc in enumerate(processes):
        axes[0][col].set_title(_column_title(proc), loc="left")
        for row, stage in enumerate(stages):
            _draw_stage(axes[row][col], proc.memory.get(stage, []), classes,
                        proc.step_time)
            axes[row][0].set_ylabel("stage %d\nGiB" % stage)
    if capacity_bytes > 0:
        for ax in fig.axes:
            ax.axhline(gib(capacity_bytes), color=style.CAPACITY_COLOR,
                       linestyle="--", linewidth=1.0)
    top = _y_limit(processes, capacity_bytes)
    for ax in fig.axes:
        ax.set_ylim(0, top)
        ax.grid(axis="y", color="#dddddd", linewidth=0.5)
    for ax in axes[-1]:
        ax.set_xlabel("time (%s)" % time_unit)
    _legend(fig, classes, capacity_bytes)
    width = fig.get_figwidth()
    style.title(fig, _LEFT_IN / width, 1 - _RIGHT_IN / width,
                "Memory per stage over one step, by buffer class", context)
    style.save(fig, out, dpi)


def _figure(n_rows, n_cols):
    width = _LEFT_IN + _RIGHT_IN + n_cols * _COL_IN
    height = _TOP_IN + _BOTTOM_IN + n_rows * _ROW_IN
    fig, axes = style.plt.subplots(n_rows, n_cols, sharex=True, sharey=True,
                                   squeeze=False, figsize=(width, height))
    fig.subplots_adjust(left=_LEFT_IN / width, right=1 - _RIGHT_IN / width,
                        top=1 - _TOP_IN / height, bottom=_BOTTOM_IN / height,
                        hspace=0.18, wspace=0.06)
    return fig, axes


def _used_classes(processes):
    """Buffer classes that hold any bytes anywhere, in stacking order."""
    used = []
    for proc in processes:
        for samples in proc.memory.values():
            _, by_class = memory_steps(samples)
            used += [c for c, v in by_class.items()
                     if c not in used and any(x > 0 for x in v)]
    order = list(style.CLASS_COLORS)
    return sorted(used, key=lambda c: order.index(c) if c in order else 99)


def _draw_stage(ax, samples, classes, step_time):
    if not samples:
        ax.text(0.5, 0.5, "no memory samples", transform=ax.transAxes,
                ha="center", va="center", color="#888888")
        return
    times, by_class = memory_steps(samples)
    if step_time > times[-1]:   # the last sample holds to the step's end
        times.append(step_time)
        by_class = {c: v + v[-1:] for c, v in by_class.items()}
    bottom = [0.0] * len(times)
    for cls in classes:
        top = [b + gib(v) for b, v in zip(bottom, by_class.get(cls, [0.0]
                                                             * len(times)))]
        ax.fill_between(times, bottom, top, step="post", linewidth=0,
                        color=style.CLASS_COLORS.get(cls, "#999999"))
        bottom = top
    peak_t, peak_b = memory_peak(samples)
    ax.plot([peak_t], [gib(peak_b)], marker="v", color=style.INK,
            markersize=5, linestyle="none")
    ax.annotate("peak %.1f GiB" % gib(peak_b), (peak_t, gib(peak_b)),
                xytext=(4, 3), textcoords="offset points", fontsize=8,
                color=style.INK)


def _y_limit(processes, capacity_bytes):
    peak = max((memory_peak(s)[1] for p in processes
                for s in p.memory.values()), default=0.0)
    return 1.22 * max(gib(peak), gib(capacity_bytes), 1e-9)


def _column_title(proc):
    peaks = [memory_peak(s) for s in proc.memory.values()]
    worst = max(range(len(peaks)), key=lambda i: peaks[i][1])
    stage = sorted(proc.memory)[worst]
    return "%s    peak %.2f GiB on stage %d" % (
        proc.label, gib(peaks[worst][1]), stage)


def _legend(fig, classes, capacity_bytes):
    handles = [Patch(color=style.CLASS_COLORS.get(c, "#999999"))
               for c in reversed(classes)]
    labels = [style.CLASS_LABELS.get(c, c) for c in reversed(classes)]
    if capacity_bytes > 0:
        handles.append(Line2D([], [], color=style.CAPACITY_COLOR,
                              linestyle="--"))
        labels.append("capacity %.0f GiB" % gib(capacity_bytes))
    fig.legend(handles, labels, loc="upper left", ncol=min(len(labels), 9),
               bbox_to_anchor=(_LEFT_IN / fig.get_figwidth() - 0.01,
                               1 - 0.42 / fig.get_figheight()),
               fontsize=9, handlelength=1.4, columnspacing=1.4)
