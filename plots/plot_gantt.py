"""The schedule as a Gantt chart, one panel per executor (paper's Figure 1).

What it is for: drawing each process of a trace as per-stage timelines, the
baselines above the schedule under study ((a) 1F1B, (b) StateFlow), on one
time axis, so that bubbles and the shorter step are seen at a glance.
What it is not: a trace viewer (open the trace in ui.perfetto.dev for that).

    trace = stateflow_data.load_trace("out/figure1-trace.json")
    plot_gantt.draw(trace, "out/figure1-gantt.png", time_unit="units")

Forward boxes are blue, backward red-orange (weight-gradient green); the
intensity is the chunk's position along the sequence (light = first chunk).
With virtual stages (a stage holding v model stages: interleaved, zbv) a
box's hatching is which of its stage's model stages it runs, in layer order:
none for the first, then diagonal lines, the other diagonal, crosses, dots
(repeating past five).
A box is labelled "M1C3" (microbatch 1, chunk 3; "M1" when N = 1) only when
the label fits inside it, so dense schedules stay legible.
"""

from matplotlib.legend_handler import HandlerTuple
from matplotlib.patches import Patch

import plot_style as style
from stateflow_data import format_time

_FIG_WIDTH_IN = 16.0
_LEFT, _RIGHT = 0.065, 0.985        # axes span, fraction of figure width
_ROW_IN = 0.42                      # height of one stage row
_PANEL_EXTRA_IN = 0.62              # title and gap above each panel
_TOP_IN, _BOTTOM_IN = 1.05, 0.55    # suptitle + legend; time axis
_BAR = 0.78                         # box height, fraction of a row
_PT_PER_IN = 72.0
_HATCHES = ("", "///", "\\\\\\", "xxx", "...")  # a stage's 1st, 2nd, ... model stage


def draw(trace, out, time_unit="s", dpi=110, context=""):
    """Writes the Gantt chart of every process of `trace` to `out`;
    `context` (e.g. the scenario) is written at the top right."""
    style.setup()
    procs = trace.drawing_order()
    t_max = max(p.step_time for p in procs)
    fig, axes = _figure(procs)
    pt_per_s = _FIG_WIDTH_IN * (_RIGHT - _LEFT) * _PT_PER_IN / (t_max * 1.01)
    baseline = procs[0] if len(procs) > 1 else None
    for index, (ax, proc) in enumerate(zip(axes, procs)):
        ax.set_xlim(0, t_max * 1.01)
        _draw_process(ax, proc, pt_per_s)
        ax.set_title(_panel_title(index, proc, time_unit), loc="left")
        if proc is procs[-1] and baseline is not None:
            _mark_speedup(ax, proc, baseline)
    axes[-1].set_xlabel("time (%s)" % time_unit)
    style.title(fig, _LEFT, _RIGHT, _title(procs), context)
    _legend(fig, procs)
    style.save(fig, out, dpi)


def _figure(procs):
    rows = [max(len(p.stages), 1) for p in procs]
    panel_in = [r * _ROW_IN + _PANEL_EXTRA_IN for r in rows]
    height = sum(panel_in) + _TOP_IN + _BOTTOM_IN
    fig, axes = style.plt.subplots(
        len(procs), 1, sharex=True, squeeze=False,
        figsize=(_FIG_WIDTH_IN, height),
        gridspec_kw={"height_ratios": rows,
                     "hspace": _PANEL_EXTRA_IN / (sum(panel_in) / len(rows))})
    fig.subplots_adjust(left=_LEFT, right=_RIGHT, top=1 - _TOP_IN / height,
                        bottom=_BOTTOM_IN / height)
    return fig, list(axes[:, 0])


def _draw_process(ax, proc, pt_per_s):
    stages = sorted(proc.stages)
    row_pt = _ROW_IN * _PT_PER_IN
    for row, stage in enumerate(stages):
        ax.broken_barh([(0, proc.step_time)], (row - _BAR / 2, _BAR),
                       facecolors=style.IDLE_COLOR, linewidth=0)
        _draw_stage(ax, row, proc.stages[stage], proc.chunks, pt_per_s,
                    row_pt * _BAR)
    ax.set_yticks(range(len(stages)))
    ax.set_yticklabels(["stage %d" % s for s in stages])
    ax.set_ylim(len(stages) - 0.5, -0.5)
    ax.tick_params(axis="y", length=0)
    ax.spines["left"].set_visible(False)
    ax.axvline(proc.step_time, color=style.INK, linewidth=1.0,
               linestyle=(0, (4, 2)))


def model_stage_index(slices):
    """For each slice of one stage's track, which of the stage's model
    stages it runs: 0 for the first in layer order, 1 for the next, ..."""
    order = sorted({s.model_stage for s in slices if s.model_stage is not None})
    return [order.index(s.model_stage) if s.model_stage is not None else 0
            for s in slices]


def _draw_stage(ax, row, slices, n_chunks, pt_per_s, bar_pt):
    colors = [style.pass_color(s.pass_, s.chunk, n_chunks) for s in slices]
    narrowest_pt = min(s.duration for s in slices) * pt_per_s
    edge = 0.6 if narrowest_pt >= 4 else 0.0
    index = model_stage_index(slices)
    for k in sorted(set(index)):
        mine = [j for j, i in enumerate(index) if i == k]
        ax.broken_barh([(slices[j].start, slices[j].duration) for j in mine],
                       (row - _BAR / 2, _BAR),
                       facecolors=[colors[j] for j in mine],
                       edgecolor="white", linewidth=edge,
                       hatch=_HATCHES[k % len(_HATCHES)] or None)
    for s, color in zip(slices, colors):
        fitted = fit_label(s, n_chunks, s.duration * pt_per_s, bar_pt)
        if fitted is not None:
            text, size = fitted
            ax.text(s.start + s.duration / 2, row, text, ha="center",
                    va="center", fontsize=size, color=style.text_color(color),
                    linespacing=0.95)


def fit_label(s, n_chunks, width_pt, height_pt):
    """(text, font size) of the label of slice `s` in a box of that size,
    or None when no label fits: "M1C3" on one line, else "M1" over "C3"."""
    mb = "M%d" % s.microbatch
    if n_chunks <= 1:
        candidates = [(mb, 7.5), (mb, 6.0)]
    else:
        chunk = "C%d" % s.chunk
        candidates = [(mb + chunk, 7.5), (mb + chunk, 6.5),
                      (mb + "\n" + chunk, 6.5), (mb + "\n" + chunk, 6.0)]
    for text, size in candidates:
        lines = text.split("\n")
        wide = max(style.text_width_pt(line, size) for line in lines)
        tall = len(lines) * size * 1.15
        if wide + 1.5 <= width_pt and tall <= height_pt:
            return text, size
    return None


def _panel_title(index, proc, unit):
    return "(%s) %s    step time %s    bubbles %.1f %%" % (
        "abcdefghijklmnopqrstuvwxyz"[index % 26], proc.label,
        format_time(proc.step_time, unit), 100 * proc.bubble_fraction())


def _mark_speedup(ax, proc, baseline):
    """Shades the time the schedule under study saves over the baseline."""
    if baseline.step_time <= proc.step_time:
        return
    ax.axvspan(proc.step_time, baseline.step_time, color="#2e8b57",
               alpha=0.10, linewidth=0)
    speedup = baseline.step_time / proc.step_time
    ax.text((proc.step_time + baseline.step_time) / 2,
            (len(proc.stages) - 1) / 2,
            "%.2f\u00d7 shorter step\nthan %s" % (speedup, baseline.label),
            ha="center", va="center", fontsize=10, color="#1f6b43",
            fontweight="bold")


def _title(procs):
    stages = max(len(p.stages) for p in procs)
    mbs = max(p.microbatches for p in procs)
    names = " vs ".join(p.label for p in procs)
    return "%s: %d stages, %d microbatches" % (names, stages, mbs)


def _legend(fig, procs):
    n = max(p.chunks for p in procs)
    passes = sorted({s.pass_ for p in procs for ss in p.stages.values()
                     for s in ss}, key="FBW".index)
    words = {"F": "forward", "B": "backward", "W": "weight gradient"}
    handles, labels = [], []
    for pass_ in passes:
        ramp = tuple(Patch(facecolor=style.pass_color(pass_, c, n))
                     for c in range(n))
        handles.append(ramp)
        labels.append("%s (chunk 0 \u2192 %d)" % (words[pass_], n - 1)
                      if n > 1 else words[pass_])
    handles.append(Patch(facecolor=style.IDLE_COLOR))
    labels.append("idle (bubble)")
    v = max(max(model_stage_index(ss), default=0) + 1
            for p in procs for ss in p.stages.values())
    for k in range(min(v, len(_HATCHES)) if v > 1 else 0):
        handles.append(Patch(facecolor="#9a9a9a", edgecolor="white",
                             hatch=_HATCHES[k] or None))
        labels.append("model stage %d of a stage%s"
                      % (k + 1, " (and %d, ...)" % (k + 1 + len(_HATCHES))
                         if v > k + len(_HATCHES) else ""))
    fig.legend(handles, labels, loc="upper right", ncol=len(handles),
               bbox_to_anchor=(_RIGHT, 1 - 0.5 / fig.get_figheight()),
               handler_map={tuple: HandlerTuple(ndivide=None, pad=0)},
               handlelength=max(2.0, 0.5 * n), fontsize=9)
