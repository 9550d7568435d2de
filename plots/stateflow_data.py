"""Reading what the `stateflow` CLI writes, for the plots.

What it is for: turning a trace (`stateflow simulate --trace`), a report
(`stateflow simulate --json`), a sweep CSV (`stateflow sweep --csv`) or a
validation report (`stateflow validate --json`) into small plain records that a plot can draw without parsing anything itself.
What it is not: a plotting module (it never imports matplotlib), nor a
validator of schedules (a trace is drawn as written).

    trace = load_trace("out/default-trace.json")   # DataError on bad input
    for proc in trace.processes: print(proc.label, proc.step_time)

Every problem with an input raises DataError whose message is one line that
names the file (and line or event) and the problem; the CLI prints it and
exits with code 2.

Units: trace times are microseconds in the file and seconds here (the
uniform cost model's "units" are written as seconds); memory is in bytes.
"""

import csv
import json
import math
import re
from dataclasses import dataclass, field

# The buffer classes of the memory ledger, bottom to top of a stacked plot:
# the step-long ones first, then the ones that come and go.
BUFFER_CLASSES = ("weights", "gradients", "optimizer_state", "activations",
                  "boundary_states", "kv_buffers", "logits", "workspace")

# The columns of `stateflow sweep --csv`, in order.
SWEEP_COLUMNS = ("scenario", "model", "policy", "seq_len", "global_batch",
                 "microbatches", "pipeline_size", "tensor_size", "data_size",
                 "chunks", "alpha", "recompute", "step_time_s",
                 "tokens_per_s", "bubble_fraction", "peak_memory_bytes",
                 "capacity_bytes", "oom", "peak_stage", "peak_class", "best")
_SWEEP_INTS = ("seq_len", "global_batch", "microbatches", "pipeline_size",
               "tensor_size", "data_size", "chunks", "peak_stage", "st_tile",
               "virtual_stages")
_SWEEP_FLOATS = ("alpha", "step_time_s", "tokens_per_s", "bubble_fraction",
                 "peak_memory_bytes", "capacity_bytes", "usable_bytes")
_SWEEP_FLAGS = ("oom", "best", "st_overlap")
# Columns newer sweeps add after "best"; read when present: the system the
# run's schedule ran in and the OOM threshold (capacity less the reserve),
# the state-transition settings, and v (model stages per stage).
SWEEP_OPTIONAL_COLUMNS = ("system", "usable_bytes", "st_overlap", "st_tile",
                          "virtual_stages")

_US_PER_S = 1e6
# An action's one text form (schedule/action.h): "<stage><pass><microbatch>.<chunk>".
_ACTION_TEXT = re.compile(r"^([0-9]+)([FBW])([0-9]+)\.([0-9]+)$")
_POLICY_NAMES = {"1f1b": "1F1B", "gpipe": "GPipe", "stateflow": "StateFlow"}


class DataError(Exception):
    """A bad input file; str(error) is the one-line message for the user."""


@dataclass(frozen=True)
class Action:
    """One action of the schedule: pass F/B/W of (microbatch, chunk) on stage."""
    stage: int
    pass_: str
    microbatch: int
    chunk: int

    def __str__(self):
        return "%d%s%d.%d" % (self.stage, self.pass_, self.microbatch,
                              self.chunk)


@dataclass(frozen=True)
class Slice:
    """One action on one stage: pass F/B/W of (microbatch, chunk), of model
    stage `model_stage` (the stage itself without virtual stages; with v of
    them, the one of the stage's model stages the action names)."""
    pass_: str
    microbatch: int
    chunk: int
    start: float       # s from the start of the step
    duration: float    # s
    model_stage: int = None

    @property
    def end(self):
        return self.start + self.duration


@dataclass
class Process:
    """One executor's step in a trace: a schedule, its stages, its memory.

    memory[stage] is a list of (time_s, {buffer_class: bytes}) samples in time
    order; each value holds from its time until the next sample.
    """
    pid: int
    name: str
    stages: dict = field(default_factory=dict)   # stage -> [Slice] by start
    memory: dict = field(default_factory=dict)   # stage -> [(t_s, {cls: B})]

    @property
    def policy(self):
        """The policy word of the name ("stateflow"), or the name itself."""
        words = self.name.split()
        if len(words) >= 2 and words[0] in ("simulate", "train", "run"):
            return words[1]
        return words[0] if words else "pid %d" % self.pid

    @property
    def chunks(self):
        """N: distinct chunk indices over every slice (1 for 1F1B)."""
        return len({s.chunk for ss in self.stages.values() for s in ss}) or 1

    @property
    def microbatches(self):
        return len({s.microbatch for ss in self.stages.values() for s in ss})

    @property
    def label(self):
        """A display name: "StateFlow N=8", "1F1B"."""
        words = self.name.split()
        rest = words[2:] if self.policy != words[0] else words[1:]
        rest = [w for w in rest if w != "N=1"]
        return " ".join([display_policy(self.policy)] + rest)

    @property
    def step_time(self):
        """s: the end of the last slice of any stage."""
        return max((ss[-1].end for ss in self.stages.values() if ss),
                   default=0.0)

    def busy_time(self, stage):
        return sum(s.duration for s in self.stages.get(stage, []))

    def bubble_fraction(self):
        """Idle share of stages x step time (the report's definition)."""
        total = len(self.stages) * self.step_time
        busy = sum(self.busy_time(r) for r in self.stages)
        return 1.0 - busy / total if total > 0 else 0.0


@dataclass
class Trace:
    path: str
    processes: list    # [Process], schedule under study (pid 0) first

    def drawing_order(self):
        """Baselines first (pid 1, 2, ...), the schedule under study last,
        as in the paper's Figure 1 ((a) 1F1B above (b) StateFlow)."""
        return sorted(self.processes, key=lambda p: (p.pid == 0, p.pid))

    def find(self, name):
        """The process whose name, policy or label is `name` (any case)."""
        want = name.lower()
        for p in self.processes:
            if want in (p.name.lower(), p.policy.lower(), p.label.lower()):
                return p
        have = ", ".join("'%s'" % p.name for p in self.processes)
        raise DataError("%s: no process '%s' (have: %s)"
                        % (self.path, name, have))


def display_policy(policy):
    return _POLICY_NAMES.get(policy.lower(), policy)


def parse_action(text):
    """"2F0.3" -> Action(2, "F", 0, 3); anything else -> None.

    The grammar of the C++ ParseAction (schedule/action.h): a stage number,
    a pass letter F, B or W, a microbatch number, '.', a chunk number; no
    spaces. str(action) gives the text back.
    """
    m = _ACTION_TEXT.match(text)
    if not m:
        return None
    return Action(int(m.group(1)), m.group(2), int(m.group(3)),
                  int(m.group(4)))


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise DataError("%s: no such file" % path) from None
    except IsADirectoryError:
        raise DataError("%s: is a directory, not a file" % path) from None
    except UnicodeDecodeError:
        raise DataError("%s: not JSON (not UTF-8 text)" % path) from None
    except json.JSONDecodeError as e:
        raise DataError("%s: not JSON (line %d column %d: %s)"
                        % (path, e.lineno, e.colno, e.msg)) from None
    except OSError as e:
        raise DataError("%s: %s" % (path, e.strerror)) from None


def _number(path, index, event, key):
    value = event.get(key, 0)
    try:
        value = float(value)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise DataError("%s: event %d: '%s' is %r, not a time in us"
                        % (path, index, key, event.get(key)))
    return value


def _trace_events(path):
    doc = _read_json(path)
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise DataError("%s: not a trace: no \"traceEvents\" list" % path)
    return events


def _process(processes, event):
    pid = int(event.get("pid", 0))
    if pid not in processes:
        processes[pid] = Process(pid=pid, name="pid %d" % pid)
    return processes[pid]


def _add_event(path, index, event, processes):
    if not isinstance(event, dict):
        raise DataError("%s: event %d is not an object" % (path, index))
    ph, name = event.get("ph"), str(event.get("name", ""))
    if ph == "M" and name == "process_name":
        # The last name given to a pid wins, as in Perfetto.
        _process(processes, event).name = str(event.get("args", {})
                                              .get("name", ""))
    elif ph == "X":
        action = parse_action(name)
        if action is None:
            return   # not a schedule action (e.g. a backend's own slice)
        ts = _number(path, index, event, "ts") / _US_PER_S
        dur = _number(path, index, event, "dur") / _US_PER_S
        stage = int(event.get("tid", 0))
        # With virtual stages ("v=2" in the process name) a stage's track
        # holds its model stages' actions, which name their model stage.
        virtual = re.search(r"\bv=([0-9]+)\b", _process(processes, event).name)
        if action.stage != stage and virtual is None:
            raise DataError("%s: event %d: action %s on the track of stage %d"
                            % (path, index, name, stage))
        _process(processes, event).stages.setdefault(stage, []).append(
            Slice(action.pass_, action.microbatch, action.chunk, ts, dur,
                  action.stage))
    elif ph == "C" and name.startswith("memory stage"):
        _add_counter(path, index, event, processes)


def _add_counter(path, index, event, processes):
    args = event.get("args")
    if not isinstance(args, dict):
        raise DataError("%s: event %d: memory counter without args"
                        % (path, index))
    sample = {}
    for cls, value in args.items():
        try:
            sample[cls] = float(value)
        except (TypeError, ValueError):
            raise DataError("%s: event %d: memory '%s' is %r, not bytes"
                            % (path, index, cls, value)) from None
    ts = _number(path, index, event, "ts") / _US_PER_S
    stage = int(event.get("tid", 0))
    _process(processes, event).memory.setdefault(stage, []).append(
        (ts, sample))


def load_trace(path):
    """The processes of a Chrome trace written by `stateflow`.

    REQUIRES nothing of the file; raises DataError when it is missing, not
    JSON, not a trace, or has no schedule slices at all.
    """
    processes = {}
    for index, event in enumerate(_trace_events(path)):
        _add_event(path, index, event, processes)
    for p in processes.values():
        for slices in p.stages.values():
            slices.sort(key=lambda s: (s.start, s.end))
        for samples in p.memory.values():
            samples.sort(key=lambda s: s[0])   # stable: same-ts order kept
    kept = [p for p in processes.values() if p.stages or p.memory]
    if not any(p.stages for p in kept):
        raise DataError("%s: no schedule slices (ph \"X\" named like "
                        "\"0F0.0\")" % path)
    return Trace(path=path, processes=sorted(kept, key=lambda p: p.pid))


def memory_steps(samples):
    """[(t, {cls: B})] -> (times, {cls: [B]}), one entry per distinct time.

    Samples at the same time collapse to the last one (it is the value that
    holds afterwards); classes missing from a sample count as 0 bytes.
    """
    times, rows = [], []
    for t, sample in samples:
        if times and t == times[-1]:
            rows[-1] = sample
        else:
            times.append(t)
            rows.append(sample)
    classes = list(BUFFER_CLASSES) + sorted(
        {c for r in rows for c in r} - set(BUFFER_CLASSES))
    return times, {c: [r.get(c, 0.0) for r in rows] for c in classes}


def memory_peak(samples):
    """(time_s, total_bytes) of the largest total over the samples."""
    times, by_class = memory_steps(samples)
    totals = [sum(v[i] for v in by_class.values()) for i in range(len(times))]
    if not totals:
        return 0.0, 0.0
    i = max(range(len(totals)), key=lambda k: totals[k])
    return times[i], totals[i]


def load_report(path):
    """A Report (`stateflow simulate --json`) as a dict with numbers parsed.

    Protobuf's JSON writes 64-bit integers as strings; the fields the plots
    read ("capacity_bytes", "step_time_s", ...) come back as floats.
    """
    doc = _read_json(path)
    if not isinstance(doc, dict) or "policy" not in doc:
        raise DataError("%s: not a report: no \"policy\" field" % path)
    for key in ("capacity_bytes", "step_time_s", "tokens_per_s",
                "peak_memory_bytes", "seq_len"):
        try:
            doc[key] = float(doc.get(key, 0) or 0)
        except (TypeError, ValueError):
            raise DataError("%s: field %s is %r, not a number"
                            % (path, key, doc.get(key))) from None
    return doc


def _sweep_value(path, line, column, text):
    try:
        if column in _SWEEP_INTS:
            return int(text)
        if column in _SWEEP_FLOATS:
            value = float(text)
            if math.isnan(value):
                raise ValueError
            return value
        if column in _SWEEP_FLAGS:
            if text not in ("0", "1"):
                raise ValueError
            return text == "1"
    except ValueError:
        kind = {c: "an integer" for c in _SWEEP_INTS}
        kind.update({c: "a number" for c in _SWEEP_FLOATS})
        kind.update({c: "0 or 1" for c in _SWEEP_FLAGS})
        raise DataError("%s line %d: column %s: %r is not %s"
                        % (path, line, column, text, kind[column])) from None
    return text


def load_sweep(path):
    """The rows of a sweep CSV as dicts of typed values, in file order."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            missing = [c for c in SWEEP_COLUMNS if c not in header]
            if missing:
                shown = ", ".join(missing[:4]) + (", ..." if len(missing) > 4
                                                  else "")
                raise DataError("%s: not a sweep CSV: %d of its %d columns "
                                "missing (%s)" % (path, len(missing),
                                                  len(SWEEP_COLUMNS), shown))
            rows = [_sweep_row(path, reader.line_num, r) for r in reader]
    except FileNotFoundError:
        raise DataError("%s: no such file" % path) from None
    except IsADirectoryError:
        raise DataError("%s: is a directory, not a file" % path) from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise DataError("%s: not a CSV file (%s)" % (path, e)) from None
    if not rows:
        raise DataError("%s: no rows after the header" % path)
    return rows


def _sweep_row(path, line, raw):
    if None in raw or any(raw[c] is None for c in SWEEP_COLUMNS):
        raise DataError("%s line %d: expected %d fields"
                        % (path, line, len(SWEEP_COLUMNS)))
    columns = SWEEP_COLUMNS + tuple(c for c in SWEEP_OPTIONAL_COLUMNS
                                    if raw.get(c) is not None)
    return {c: _sweep_value(path, line, c, raw[c].strip()) for c in columns}


def gib(nbytes):
    return nbytes / float(1 << 30)


def format_time(seconds, unit):
    """17.25, "units" -> "17.25 units"; 9.45484, "s" -> "9.455 s"."""
    return "%.4g %s" % (seconds, unit)


# ------------------------------------------------------------ sweep cells ---

# Rows with equal values in these columns are one cell of the paper's result
# table (a model at one parallel layout, sequence length and global batch);
# within a cell the sweep varies the policy, N and alpha.
CELL_COLUMNS = ("scenario", "model", "pipeline_size", "tensor_size",
                "data_size", "recompute", "seq_len", "global_batch",
                "microbatches")


def _alpha_key(alpha):
    return round(alpha, 6)


@dataclass
class SweepCell:
    """One cell of a sweep: the schedule under study and its baseline."""
    key: dict          # CELL_COLUMNS -> value
    study: list        # rows of the policy under study
    baseline: object   # the baseline's row (best feasible), or None

    def best(self):
        """The row marked best; else the fastest that fits; else the one
        closest to fitting (smallest peak memory)."""
        marked = [r for r in self.study if r["best"]]
        feasible = [r for r in self.study if not r["oom"]]
        if marked or feasible:
            return max(marked or feasible, key=lambda r: r["tokens_per_s"])
        return min(self.study, key=lambda r: r["peak_memory_bytes"])

    def chunk_values(self):
        return sorted({r["chunks"] for r in self.study})

    def alpha_values(self):
        return sorted({_alpha_key(r["alpha"]) for r in self.study})

    def vs_chunks(self, alpha):
        """Rows at this alpha, one per N, by increasing N."""
        rows = [r for r in self.study
                if _alpha_key(r["alpha"]) == _alpha_key(alpha)]
        return _one_per(rows, lambda r: r["chunks"])

    def vs_alpha(self, chunks):
        """Rows at this N, one per alpha, by increasing alpha."""
        rows = [r for r in self.study if r["chunks"] == chunks]
        return _one_per(rows, lambda r: _alpha_key(r["alpha"]))

    def label(self):
        k = self.key
        return "%s, T=%s, global batch %d (M=%d), P=%d TP=%d%s" % (
            k["model"], format_tokens(k["seq_len"]), k["global_batch"],
            k["microbatches"], k["pipeline_size"], k["tensor_size"],
            ", DP=%d" % k["data_size"] if k["data_size"] > 1 else "")


def _one_per(rows, key):
    """The fastest row for each key value, sorted by key (duplicates can
    come from columns outside the cell, e.g. a repeated run)."""
    best = {}
    for r in rows:
        k = key(r)
        if k not in best or r["tokens_per_s"] > best[k]["tokens_per_s"]:
            best[k] = r
    return [best[k] for k in sorted(best)]


def sweep_cells(path, rows, policy="stateflow", baseline="1f1b",
                filters=None):
    """The cells of a sweep that have `policy` rows and match `filters`
    ({column: value}), in file order; DataError when none is left."""
    filters = {c: v for c, v in (filters or {}).items() if v is not None}
    kept = [r for r in rows
            if all(_matches(r[c], v) for c, v in filters.items())]
    cells = {}
    for r in kept:
        key = tuple(r[c] for c in CELL_COLUMNS)
        cells.setdefault(key, []).append(r)
    out = [_cell(key, members, policy, baseline)
           for key, members in cells.items()]
    out = [c for c in out if c.study]
    if not out:
        raise DataError("%s: %s" % (path, _why_empty(rows, policy, filters)))
    return out


def _why_empty(rows, policy, filters):
    policies = sorted({r["policy"] for r in rows})
    if policy not in policies:
        return "no '%s' rows (policies in the file: %s)" % (
            policy, ", ".join(policies))
    ours = [r for r in rows if r["policy"] == policy]
    have = "; ".join("%s %s" % (c, ", ".join(
        str(v) for v in sorted({r[c] for r in ours}))) for c in filters)
    wanted = ", ".join("%s=%s" % kv for kv in filters.items())
    return "no '%s' rows with %s (the file has %s)" % (policy, wanted, have)


def _matches(value, wanted):
    if isinstance(value, float):
        return _alpha_key(value) == _alpha_key(float(wanted))
    return str(value) == str(wanted)


def _cell(key, members, policy, baseline):
    base = [r for r in members if r["policy"] == baseline]
    base_row = None
    if base:
        fits = [r for r in base if not r["oom"]]
        base_row = max(fits or base, key=lambda r: r["tokens_per_s"])
    return SweepCell(key=dict(zip(CELL_COLUMNS, key)),
                     study=[r for r in members if r["policy"] == policy],
                     baseline=base_row)


def format_tokens(n):
    """65536 -> "64K", 1048576 -> "1M", 1000 -> "1000"."""
    for size, suffix in ((1 << 20, "M"), (1 << 10, "K")):
        if n >= size and n % size == 0:
            return "%d%s" % (n // size, suffix)
    return str(n)


# ------------------------------------------------------------- validation ---

@dataclass(frozen=True)
class ValidationStage:
    """One stage of a validated configuration: predicted beside measured."""
    stage: int
    predicted_busy: float       # s
    measured_busy: float        # s
    predicted_peak: float       # bytes
    measured_peak: float        # bytes

    @property
    def peak_error(self):
        """(predicted - measured) / measured."""
        return _rel_error(self.predicted_peak, self.measured_peak)


@dataclass(frozen=True)
class ValidationRun:
    """One configuration of `stateflow validate --json`."""
    policy: str
    microbatches: int
    chunks: int
    recompute: str
    seq_len: int
    predicted_step: float       # s
    measured_step: float        # s
    stages: tuple               # (ValidationStage,)
    # The fastest and slowest of the configuration's runs (validate --rounds;
    # both the measured step with one run).
    measured_min: float = 0.0   # s
    measured_max: float = 0.0   # s
    # The simulator with the median run's own action times, and that run's
    # step time (0 when the report predates them).
    replayed_step: float = 0.0  # s
    replayed_run_step: float = 0.0  # s

    @property
    def step_error(self):
        return _rel_error(self.predicted_step, self.measured_step)

    @property
    def replay_error(self):
        """None when the report has no replay of the run's own costs."""
        if not (self.replayed_step > 0 and self.replayed_run_step > 0):
            return None
        return _rel_error(self.replayed_step, self.replayed_run_step)

    @property
    def label(self):
        """"StateFlow N=4 M=8 full"."""
        return "%s N=%d M=%d %s" % (display_policy(self.policy), self.chunks,
                                    self.microbatches, self.recompute)


@dataclass
class Validation:
    path: str
    scenario: str
    model: str
    dtype: str
    runs: list                  # [ValidationRun], in file order

    def context(self):
        """"scenario tiny-train: gdn-tiny, float32, 24 configurations"."""
        return "scenario %s: %s, %s, %d configuration%s" % (
            self.scenario, self.model, self.dtype, len(self.runs),
            "" if len(self.runs) == 1 else "s")


def _rel_error(predicted, measured):
    return (predicted - measured) / measured if measured else 0.0


def _positive(path, where, value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise DataError("%s: %s is %r, not a number >= 0"
                        % (path, where, value))
    return number


def _validation_stage(path, where, doc):
    get = lambda key: _positive(path, "%s.%s" % (where, key), doc.get(key, 0))
    return ValidationStage(
        stage=int(get("stage")),
        predicted_busy=get("predicted_busy_s"),
        measured_busy=get("measured_busy_s"),
        predicted_peak=get("predicted_peak_memory_bytes"),
        measured_peak=get("measured_peak_memory_bytes"))


def _validation_run(path, index, doc):
    where = "runs[%d]" % index
    if not isinstance(doc, dict):
        raise DataError("%s: %s is not an object" % (path, where))
    get = lambda key: _positive(path, "%s.%s" % (where, key), doc.get(key, 0))
    stages = doc.get("stages", [])
    if not isinstance(stages, list) or not stages:
        raise DataError("%s: %s has no stages" % (path, where))
    if not get("measured_step_time_s") > 0:
        raise DataError("%s: %s.measured_step_time_s is 0" % (path, where))
    return ValidationRun(
        policy=str(doc.get("policy", "?")),
        microbatches=int(get("microbatches")), chunks=int(get("chunks")),
        recompute=str(doc.get("recompute", "none")),
        seq_len=int(get("seq_len")),
        predicted_step=get("predicted_step_time_s"),
        measured_step=get("measured_step_time_s"),
        measured_min=get("measured_step_time_min_s") or get("measured_step_time_s"),
        measured_max=get("measured_step_time_max_s") or get("measured_step_time_s"),
        replayed_step=get("replayed_step_time_s"),
        replayed_run_step=get("replayed_run_step_time_s"),
        stages=tuple(_validation_stage(path, "%s.stages[%d]" % (where, k), s)
                     for k, s in enumerate(stages)))


def load_validation(path):
    """The runs of a ValidationReport (`stateflow validate --json`)."""
    doc = _read_json(path)
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list):
        raise DataError("%s: not a validation report: no \"runs\" list"
                        % path)
    if not runs:
        raise DataError("%s: the validation report has no runs" % path)
    return Validation(path=path, scenario=str(doc.get("scenario", "?")),
                      model=str(doc.get("model", "?")),
                      dtype=str(doc.get("dtype", "?")),
                      runs=[_validation_run(path, k, r)
                            for k, r in enumerate(runs)])
