#!/usr/bin/python3
"""Pictures of StateFlow runs: Gantt, sweep, memory, predicted vs measured.

What it is for: the one command line of plots/, turning what `stateflow`
writes (a trace, a report, a sweep CSV, a validation report) into PNG (or
SVG, PDF) files.
What it is not: a simulator; it draws files and computes nothing the files
do not hold beyond sums and maxima.

    /usr/bin/python3 plots/stateflow_plots.py gantt --trace t.json --out g.png
    /usr/bin/python3 plots/stateflow_plots.py sweep --csv s.csv --out s.png

Bad input (a missing file, a file that is not a trace, a CSV without the
sweep columns, a bad option) prints one line naming the file or option and
the problem on stderr, and exits with code 2.
"""

import argparse
import os
import sys

import stateflow_data as data
from stateflow_data import DataError

_PROG = "stateflow_plots"
_FORMATS = ("png", "svg", "pdf")

_EXAMPLES = """examples:
  stateflow simulate --trace out/trace.json
  %(py)s gantt --trace out/trace.json --out out/gantt.png
      1F1B above StateFlow, one row per stage, boxes labelled M<a>C<i>
  stateflow simulate -P 4 -M 5 -N 4 --cost-model uniform --trace out/f1.json
  %(py)s gantt --trace out/f1.json --out out/figure1.png --time-unit units
      the paper's Figure 1 (uniform cost model: times in units)
  %(py)s memory --trace out/trace.json --out out/memory.png \\
      --capacity-bytes 85899345920
      each stage's memory by buffer class, both schedules side by side
  %(py)s memory --trace out/trace.json --process stateflow --out m.png
  stateflow sweep --csv out/sweep.csv
  %(py)s sweep --csv out/sweep.csv --out out/sweep.png --seq-len 64K
      throughput and peak memory against N and alpha, OOM hatched
  stateflow validate --json > out/validate.json
  %(py)s validate --report out/validate.json --out out/validate.png
      predicted versus measured step time and peak memory per stage
""" % {"py": "stateflow_plots.py"}


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error and exit code 2."""

    def error(self, message):
        sys.stderr.write("%s: error: %s (see --help)\n" % (self.prog,
                                                            message))
        sys.exit(2)


def _tokens(text):
    """"65536", "64K", "1M" -> 65536, 65536, 1048576 (for --seq-len)."""
    scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale > 1 else text
    try:
        value = int(digits) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(
            "%r is not a token count (e.g. 65536 or 64K)" % text) from None
    if value <= 0:
        raise argparse.ArgumentTypeError("%r is not positive" % text)
    return value


def _nonnegative(text):
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError("%r is not a number >= 0" % text)
    return value


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError("%r is not a positive integer"
                                         % text)
    return value


def _common(sub, name, help_text, input_flag, input_help):
    p = sub.add_parser(name, help=help_text, description=help_text,
                       epilog=_EXAMPLES,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(input_flag, required=True, metavar="FILE",
                   help=input_help)
    p.add_argument("--out", required=True, metavar="FILE",
                   help="picture to write (.png, .svg or .pdf)")
    p.add_argument("--dpi", type=_positive_int, default=110,
                   help="resolution of a PNG (default 110)")
    return p


_TRACE_HELP = "trace from `stateflow simulate --trace`"
_REPORT_HELP = ("report from `stateflow simulate --json` (time unit, "
                "capacity and scenario are taken from it)")
_UNIT_HELP = ("time unit of the trace: s, or units for --cost-model uniform "
              "(default s)")


def _parser():
    parser = _Parser(prog=_PROG, description=__doc__.split("\n")[0],
                     epilog=_EXAMPLES,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="command",
                                parser_class=_Parser)
    sub.required = True
    _gantt_options(sub)
    _sweep_options(sub)
    _memory_options(sub)
    _validate_options(sub)
    return parser


def _gantt_options(sub):
    g = _common(sub, "gantt", "per-stage timelines of each schedule, "
                "baselines above the schedule under study", "--trace",
                _TRACE_HELP)
    g.add_argument("--report", metavar="FILE", help=_REPORT_HELP)
    g.add_argument("--time-unit", help=_UNIT_HELP)


def _sweep_options(sub):
    s = _common(sub, "sweep", "throughput bars and peak-memory lines "
                "against N and alpha", "--csv",
                "CSV from `stateflow sweep --csv`")
    s.add_argument("--seq-len", type=_tokens, help="only this T (64K, ...)")
    s.add_argument("--global-batch", type=_positive_int,
                   help="only this global batch")
    s.add_argument("--model", help="only this model")
    s.add_argument("--scenario", help="only this scenario")
    s.add_argument("--policy", default="stateflow",
                   help="schedule under study (default stateflow)")
    s.add_argument("--baseline", default="1f1b",
                   help="reference schedule (default 1f1b)")
    s.add_argument("--alpha", type=_nonnegative,
                   help="alpha of the against-N panel (default: the best's)")
    s.add_argument("--chunks", type=_positive_int,
                   help="N of the against-alpha panel (default: the best's)")


def _memory_options(sub):
    m = _common(sub, "memory", "each stage's memory over the step, stacked "
                "by buffer class", "--trace", _TRACE_HELP)
    m.add_argument("--process", metavar="NAME",
                   help="only this process (e.g. stateflow, 1f1b); "
                   "default: all, side by side")
    m.add_argument("--capacity-bytes", type=_nonnegative,
                   help="device capacity to draw as a dashed line")
    m.add_argument("--report", metavar="FILE", help=_REPORT_HELP)
    m.add_argument("--time-unit", help=_UNIT_HELP)


def _validate_options(sub):
    _common(sub, "validate", "predicted versus measured step time and peak "
            "memory of each validated configuration", "--report",
            "report from `stateflow validate --json`")


def _check_out(path):
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in _FORMATS:
        raise DataError("%s: unknown picture format '.%s' (use %s)"
                        % (path, ext, ", ".join("." + f for f in _FORMATS)))
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise DataError("%s: folder %s does not exist" % (path, folder))


def _from_report(args):
    """(time unit, capacity bytes, context line) from the options and
    --report."""
    report = data.load_report(args.report) if args.report else {}
    unit = args.time_unit or report.get("time_unit") or "s"
    capacity = getattr(args, "capacity_bytes", None)
    if capacity is None:
        capacity = report.get("capacity_bytes", 0.0)
    return unit, capacity, _context(report)


def _context(report):
    """"scenario gdn-3b-64k-pp8: gdn-3b, T=64K, P=8 TP=1, ..." or ""."""
    if not report:
        return ""
    return "scenario %s: %s, T=%s, P=%s TP=%s, recompute %s, %s costs" % (
        report.get("scenario", "?"), report.get("model", "?"),
        data.format_tokens(int(report["seq_len"])),
        report.get("pipeline_size", "?"), report.get("tensor_size", "?"),
        report.get("recompute", "?"), report.get("cost_model", "?"))


def _gantt(args):
    trace = data.load_trace(args.trace)
    if max(p.step_time for p in trace.processes) <= 0:
        raise DataError("%s: every slice has zero duration" % args.trace)
    unit, _, context = _from_report(args)
    import plot_gantt
    plot_gantt.draw(trace, args.out, time_unit=unit, dpi=args.dpi,
                    context=context)


def _sweep(args):
    rows = data.load_sweep(args.csv)
    filters = {"seq_len": args.seq_len, "global_batch": args.global_batch,
               "model": args.model, "scenario": args.scenario}
    cells = data.sweep_cells(args.csv, rows, args.policy, args.baseline,
                             filters)
    import plot_sweep
    plot_sweep.draw(cells, args.out, data.display_policy(args.policy),
                    data.display_policy(args.baseline), args.alpha,
                    args.chunks, dpi=args.dpi)


def _memory(args):
    trace = data.load_trace(args.trace)
    procs = [trace.find(args.process)] if args.process \
        else trace.drawing_order()
    procs = [p for p in procs if p.memory]
    if not procs:
        raise DataError("%s: no memory counters (ph \"C\" named \"memory "
                        "stage r\")%s" % (args.trace, " for process '%s'"
                                          % args.process if args.process
                                          else ""))
    unit, capacity, context = _from_report(args)
    import plot_memory
    plot_memory.draw(procs, args.out, capacity_bytes=capacity,
                     time_unit=unit, dpi=args.dpi, context=context)


def _validate(args):
    report = data.load_validation(args.report)
    import plot_validate
    plot_validate.draw(report, args.out, dpi=args.dpi)


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        _check_out(args.out)
        {"gantt": _gantt, "sweep": _sweep, "memory": _memory,
         "validate": _validate}[args.command](args)
    except DataError as e:
        sys.stderr.write("%s %s: error: %s\n" % (_PROG, args.command, e))
        return 2
    except OSError as e:
        sys.stderr.write("%s %s: error: %s: %s\n" % (
            _PROG, args.command, e.filename or args.out, e.strerror))
        return 2
    print("wrote %s" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
