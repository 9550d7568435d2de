"""StateFlow from Python: the planner and the schedule core.

The same libraries as the ``stateflow`` command line, compiled into
``stateflow._stateflow`` (pybind11): scenarios, the discrete-event simulator,
sweeps, capacity plans, calibration, and plans -- including plans made by an
issue policy written in Python and run by the schedule core's greedy
executor.

Example::

    import stateflow as sf
    s = sf.scenario(model="gdn-3b", cluster="a100-80gb-nvlink", P=8, M=8, N=8, T=65536)
    r = sf.simulate(s)
    print(r.step_time_s, r.throughput_tokens_per_s, r.bubble_fraction, max(r.peak_bytes))
    for row in sf.sweep(s, chunks=[2, 4, 8], alpha=[0, 0.5, 1]):
        print(row["chunks"], row["alpha"], row["tokens_per_s"])

Every error is one of this module's exceptions with the command line's
one-line message: InputError (also a ValueError) for bad input, PlanError
(an InputError) for a plan or policy that breaks the precedence rules,
StateflowError (their base) for the rest. ``.detail`` holds the lines the
command line prints after the message (a plan's grid), often empty.
"""

from __future__ import annotations

import csv
import io
import json
import os
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from ._stateflow import (  # noqa: F401  (re-exported)
    InputError,
    Plan,
    PlanError,
    Report,
    Scenario,
    StateflowError,
    make_plan,
    plan_from_policy,
    policies,
    presets,
    validate_plan,
)
from . import _stateflow as _core

__all__ = [
    "CalibrationResult", "InputError", "Plan", "PlanError", "Report", "Scenario",
    "StateflowError", "SweepResult", "calibrate", "capacity", "load_cost_table",
    "load_scenario", "make_plan", "plan_from_policy", "policies", "presets", "scenario",
    "simulate", "sweep", "validate_plan",
]


def load_scenario(path_or_text: Union[str, os.PathLike]) -> Scenario:
    """A scenario from a ``.textproto`` file, or from scenario text itself.

    Presets are merged, defaults filled and every field checked, as
    ``stateflow simulate --scenario FILE`` does.
    """
    return _core._load_scenario(os.fspath(path_or_text))


def scenario(path: Optional[Union[str, os.PathLike]] = None, **fields: Any) -> Scenario:
    """A scenario from the embedded default (or the file ``path``), with fields.

    Keywords (each the command line's flag of the same meaning): ``model``,
    ``cluster`` (a preset name or a ClusterSpec file), ``policy``, ``P``
    (``stages``), ``M`` (``microbatches``), ``N`` (``chunks``), ``B``
    (``microbatch_size``), ``T`` (``seq_len``), ``TP`` (``tensor_parallel``),
    ``DP`` (``data_parallel``), ``CP`` (``context_parallel``), ``alpha``,
    ``distributed_optimizer`` (bool), ``overlap_grad_reduce`` (bool),
    ``virtual_stages`` (v, with ``policy="interleaved"`` or
    ``"zb-interleaved"``, whose default is 2; ``"zbv"`` has 2),
    ``recompute``, ``system``,
    ``cost_model``, ``st_overlap`` (bool), ``st_tile``, ``compute_units``,
    ``max_actions``, ``vary`` ({parameter: factor}). A ``policy`` drops the
    scenario's baselines, as ``--policy`` does.
    """
    if path is not None:
        return load_scenario(path).with_(**fields) if fields else load_scenario(path)
    return _core._scenario(**fields)


def _report(reports: list) -> Report:
    primary = reports[0]
    primary.comparisons = reports[1:]
    return primary


def _report_to_dict(self: Report) -> dict:
    """The Report as a dict (its JSON, every field)."""
    return json.loads(self.to_json())


Report.to_dict = _report_to_dict


def simulate(scenario: Scenario, plan: Optional[Plan] = None,
             costs: Optional[Union[str, os.PathLike]] = None,
             baselines: bool = True) -> Report:
    """Simulates the scenario's schedule (or ``plan``, validated first).

    ``costs``: a CostTable file measured by ``stateflow profile``, replayed
    instead of the cost model. The returned Report's ``comparisons`` are the
    scenario's baselines (none with a plan, or with ``baselines=False``).
    """
    return _report(_core._simulate(scenario, plan,
                                   None if costs is None else os.fspath(costs), baselines))


class SweepResult(list):
    """The sweep's runs, one dict per configuration (a list), with its notes.

    Each record: policy, seq_len, global_batch, microbatches, chunks, alpha,
    recompute, system, st_overlap, st_tile, virtual_stages, step_time_s, tokens_per_s,
    bubble_fraction, peak_memory_bytes, oom, peak_stage, peak_class, best
    (the best feasible run of its cell), reused, num_tasks.
    """

    def __init__(self, records: Iterable[dict], notes: Sequence[str], report_json: str):
        super().__init__(records)
        self.notes = list(notes)
        self._json = report_json

    def best(self) -> list:
        """The best feasible run of each cell (policy x length x batch)."""
        return [r for r in self if r["best"]]

    def to_json(self) -> str:
        """The SweepReport as ``stateflow sweep --json`` prints it."""
        return self._json

    def to_frame(self):
        """A pandas DataFrame of the records (pandas must be installed)."""
        try:
            import pandas
        except ImportError as e:  # pragma: no cover - depends on the machine
            raise ImportError("SweepResult.to_frame needs pandas; the records are a list of "
                              "dicts without it") from e
        return pandas.DataFrame(list(self))


def sweep(scenario: Scenario, costs: Optional[Union[str, os.PathLike]] = None,
          **ranges: Any) -> SweepResult:
    """Every configuration of the ranges simulated, the best per cell marked.

    Ranges (a value or a list; a range given replaces the scenario's sweep
    block's, one not given keeps it): ``policies``, ``seq_len``,
    ``global_batch`` or ``microbatches``, ``chunks``, ``alpha``,
    ``st_overlap``, ``st_tile``, ``virtual_stages`` (v for policies
    ``"interleaved"`` and ``"zb-interleaved"``; the others run at their own). Runs the command line's sweep
    (``stateflow sweep``) in one call.
    """
    records, notes, report_json = _core._sweep(
        scenario, None if costs is None else os.fspath(costs), **ranges)
    return SweepResult(records, notes, report_json)


def capacity(scenario: Scenario, devices: Optional[int] = None,
             seq_len: Optional[int] = None, global_batch: Optional[int] = None,
             context_parallel: Sequence[int] = (),
             costs: Optional[Union[str, os.PathLike]] = None, **ranges: Any) -> dict:
    """Every split of ``devices`` into P x TP x DP (x CP), the fastest that fits.

    Defaults: the scenario's devices (P x TP x DP), length and global
    batch. ``ranges`` (``chunks``, ``alpha``, ``policies``) are tried per
    split. Returns the CapacityPlanReport as a dict (``stateflow capacity
    --json``): ``candidates`` best first, each with its split, best run and
    the reason an illegal one was rejected.
    """
    return json.loads(_core._capacity(scenario, devices, seq_len, global_batch,
                                      list(context_parallel),
                                      None if costs is None else os.fspath(costs), **ranges))


class CalibrationResult:
    """A calibration: ``report`` (dict, ``stateflow calibrate --json``),
    ``preset_text`` (the fitted cluster, a file ``cluster=`` accepts) and
    ``scenario`` (the base scenario on the fitted cluster)."""

    def __init__(self, report: dict, preset_text: str, scenario: Scenario):
        self.report = report
        self.preset_text = preset_text
        self.scenario = scenario

    @property
    def parameters(self) -> dict:
        """{name: fitted value} of every parameter the fit reports."""
        return {p["name"]: p["fitted"] for p in self.report["parameters"]}

    def write_preset(self, path: Union[str, os.PathLike]) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.preset_text)

    def __repr__(self) -> str:
        return ("CalibrationResult(rms_log_error %.4f -> %.4f, %d runs)"
                % (self.report["initial_rms_log_error"], self.report["rms_log_error"],
                   len(self.report["runs"])))


_CSV_COLUMNS = ("name", "policy", "P", "M", "N", "T", "alpha", "B", "tp", "dp", "recompute",
                "system", "step_time_s", "peak_bytes", "used_bytes", "set")


def _runs_csv(runs: Sequence[Mapping[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns = [c for c in _CSV_COLUMNS if any(c in r for r in runs)]
    unknown = sorted({k for r in runs for k in r} - set(_CSV_COLUMNS))
    if unknown:
        raise InputError("calibrate: unknown run field '%s' (known: %s)"
                         % (unknown[0], ", ".join(_CSV_COLUMNS)))
    writer.writerow(columns)
    for r in runs:
        writer.writerow(["" if r.get(c) is None else r.get(c) for c in columns])
    return out.getvalue()


def calibrate(runs: Union[str, os.PathLike, Sequence[Mapping[str, Any]]],
              scenario: Optional[Scenario] = None, fit: Union[str, Sequence[str], None] = None,
              prior_weight: float = 1e-4, max_iterations: int = 100,
              dtype: Optional[str] = None) -> CalibrationResult:
    """Fits the analytic model's free parameters to measured runs.

    ``runs``: a CSV file, CSV text, or a list of dicts with the CSV's columns
    (name, policy, P, M, N, T, alpha, B, tp, dp, recompute, system,
    step_time_s, peak_bytes, used_bytes, set). ``scenario``: the base (default:
    the embedded default scenario). As ``stateflow calibrate``.
    """
    base = scenario if scenario is not None else _core._scenario()
    if isinstance(runs, (list, tuple)):
        text, source = _runs_csv(runs), "<runs>"
    else:
        path = os.fspath(runs)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                text, source = f.read(), path
        elif "\n" in path:
            text, source = path, "<runs>"
        else:
            raise InputError("calibrate: runs '%s' is neither a file, CSV text nor a list" % path)
    fit_list = fit if isinstance(fit, str) or fit is None else ",".join(fit)
    report_json, preset_text, fitted = _core._calibrate(
        base, text, source, fit_list or "", float(prior_weight), int(max_iterations), dtype or "")
    return CalibrationResult(json.loads(report_json), preset_text, fitted)


def load_cost_table(path: Union[str, os.PathLike]) -> dict:
    """A CostTable measured by ``stateflow profile``, as a dict: its model,
    dtype, links and per-layer, per-chunk forward and backward times."""
    return json.loads(_core._load_cost_table(os.fspath(path)))
