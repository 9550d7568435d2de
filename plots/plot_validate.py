"""Predicted versus measured: how well the simulator, replaying costs
measured on this machine, predicts real runs of the backend.

What it is for: one figure of a `stateflow validate --json` report: (a) each
configuration's predicted step time against the measured one, on the
diagonal when the prediction is exact, with the 10 % band and, when the
report has several runs per configuration, the range of their step times as
a horizontal bar; (b) each configuration's step-time error as a bar, and as
a cross the error of the simulator fed with that run's own action times
(the schedule model's error without the costs'); (c) each stage's predicted
peak memory against the measured one, with the 2 % band.
What it is not: the comparison itself (the report holds every number) nor a
statistics tool (no fits, no confidence intervals).

    report = stateflow_data.load_validation("out/validate.json")
    plot_validate.draw(report, "out/validate.png")
"""

import statistics

import plot_style as style

_N_COLORS = ("#3b75af", "#e9a23b", "#2a9d8f", "#d1605e", "#8e5ea2",
             "#6b7b8c")
_MODE_MARKERS = {"none": "o", "full": "^"}
_STAGE_MARKERS = ("o", "s", "D", "v", "P", "X")
_WIDTH_IN, _HEIGHT_IN = 13.0, 4.6
_MIB = float(1 << 20)


def draw(report, out, dpi=110):
    """Writes the three panels of `report` (a stateflow_data.Validation)."""
    style.setup()
    fig, axes = style.plt.subplots(
        1, 3, figsize=(_WIDTH_IN, _HEIGHT_IN),
        gridspec_kw={"width_ratios": [1.0, 1.35, 1.0]})
    fig.subplots_adjust(left=0.06, right=0.975, top=0.80, bottom=0.25,
                        wspace=0.32)
    chunk_values = sorted({r.chunks for r in report.runs})
    _step_panel(axes[0], report.runs, chunk_values)
    _error_panel(axes[1], report.runs, chunk_values)
    _memory_panel(axes[2], report.runs)
    style.title(fig, 0.06, 0.975, "Simulator with measured costs versus "
                "real runs", report.context())
    style.save(fig, out, dpi)


def _color(chunks, chunk_values):
    return _N_COLORS[chunk_values.index(chunks) % len(_N_COLORS)]


def _diagonal(ax, values, band, label):
    """y = x over `values` with a shaded +-band (a fraction)."""
    lo, hi = min(values) * 0.9, max(values) * 1.1
    xs = [lo, hi]
    ax.fill_between(xs, [x * (1 - band) for x in xs],
                    [x * (1 + band) for x in xs], color="#eeeeee",
                    linewidth=0, label=label)
    ax.plot(xs, xs, color=style.BASELINE_COLOR, linewidth=0.8)
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)


def _step_panel(ax, runs, chunk_values):
    measured = [r.measured_step * 1e3 for r in runs]
    predicted = [r.predicted_step * 1e3 for r in runs]
    _diagonal(ax, measured + predicted, 0.10, "within 10 %")
    for run, m, p in zip(runs, measured, predicted):
        if run.measured_max > run.measured_min:
            ax.plot([run.measured_min * 1e3, run.measured_max * 1e3], [p, p],
                    color=_color(run.chunks, chunk_values), linewidth=0.7,
                    alpha=0.5)
        ax.plot([m], [p], linestyle="none",
                marker=_MODE_MARKERS.get(run.recompute, "s"),
                color=_color(run.chunks, chunk_values),
                markersize=4 + run.microbatches ** 0.5 * 1.5, alpha=0.85)
    ax.set_xlabel("measured step time (ms)")
    ax.set_ylabel("predicted step time (ms)")
    ax.set_title("(a) step time", loc="left")
    handles = [style.plt.Line2D([], [], linestyle="none", marker="o",
                                color=_color(n, chunk_values),
                                label="N=%d" % n) for n in chunk_values]
    handles += [style.plt.Line2D([], [], linestyle="none", marker=m,
                                 color=style.INK, label="recompute " + mode)
                for mode, m in _MODE_MARKERS.items()
                if any(r.recompute == mode for r in runs)]
    ax.legend(handles=handles, loc="upper left", fontsize=8,
              handletextpad=0.3, labelspacing=0.3)
    ax.text(0.98, 0.03, "marker size: M; bar: range of the runs\n"
            "grey: within 10 %",
            transform=ax.transAxes, ha="right", va="bottom", fontsize=7,
            color="#666666")


def _error_panel(ax, runs, chunk_values):
    errors = [100 * r.step_error for r in runs]
    xs = range(len(runs))
    ax.axhspan(-10, 10, color="#f3f3f3", linewidth=0)
    ax.axhspan(-5, 5, color="#e4e4e4", linewidth=0)
    ax.axhline(0, color=style.BASELINE_COLOR, linewidth=0.8)
    ax.bar(xs, errors, width=0.7,
           color=[_color(r.chunks, chunk_values) for r in runs])
    for x, run, e in zip(xs, runs, errors):
        if run.recompute == "full":
            ax.plot([x], [e], marker="^", color=style.INK, markersize=3,
                    linestyle="none")
    replays = [r.replay_error for r in runs]
    if all(e is not None for e in replays):
        ax.plot(list(xs), [100 * e for e in replays], marker="x",
                color=style.INK, markersize=5, linestyle="none")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(["M=%d N=%d" % (r.microbatches, r.chunks)
                        for r in runs], rotation=90, fontsize=7)
    ax.set_xlim(-0.6, len(runs) - 0.4)
    bound = max(12.0, 1.15 * max(abs(e) for e in errors))
    ax.set_ylim(-bound, bound)
    ax.set_ylabel("step time error (%)\n(predicted - measured) / measured")
    title = ("(b) step time error: median |e| %.1f %%, worst %.1f %%"
             % (statistics.median(abs(e) for e in errors),
                max(abs(e) for e in errors)))
    legend = "bands: 5 % and 10 %;  ^ recompute full"
    if all(e is not None for e in replays):
        title += ("\n    x with the run's own action times: median %.1f %%, "
                  "worst %.1f %%"
                  % (statistics.median(abs(100 * e) for e in replays),
                     max(abs(100 * e) for e in replays)))
        legend += ";  x the run's own times"
    ax.set_title(title, loc="left")
    ax.text(0.99, 0.97, legend,
            transform=ax.transAxes, ha="right", va="top", fontsize=7,
            color="#666666")


def _memory_panel(ax, runs):
    pairs = [(s.measured_peak / _MIB, s.predicted_peak / _MIB, s.stage)
             for r in runs for s in r.stages]
    _diagonal(ax, [p[0] for p in pairs] + [p[1] for p in pairs], 0.02,
              "within 2 %")
    stages = sorted({p[2] for p in pairs})
    for stage in stages:
        mine = [p for p in pairs if p[2] == stage]
        ax.plot([p[0] for p in mine], [p[1] for p in mine], linestyle="none",
                marker=_STAGE_MARKERS[stage % len(_STAGE_MARKERS)],
                markerfacecolor="none", color=_N_COLORS[stage % 6],
                markersize=6, label="stage %d" % stage)
    worst = max(abs(s.peak_error) for r in runs for s in r.stages)
    ax.set_xlabel("measured peak memory (MiB)")
    ax.set_ylabel("predicted peak memory (MiB)")
    ax.set_title("(c) peak memory: worst |e| %.2f %%" % (100 * worst),
                 loc="left")
    ax.legend(loc="upper left", fontsize=8)
