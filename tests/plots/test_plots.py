"""Tests of plots/: the readers against inputs built here, each picture
rendered to a valid PNG, and bad inputs refused with one line and exit 2.

Run: MPLBACKEND=Agg /usr/bin/python3 -m unittest discover -s tests/plots -v
With SF_BINARY_DIR set to a build directory holding `stateflow`, a real
`stateflow simulate --trace --json` run is drawn and cross-checked too.

The synthetic schedule (GPipe-like, every forward then every backward) has
closed forms the tests derive their expectations from: with U = M*N units
per stage of forward time f and backward time b, stage r runs forward unit j
at (r + j) f and backward unit j at (U + P - 1) f + (P - 1 - r + j) b, so
the step takes (U + P - 1)(f + b) and the bubble fraction is
1 - U (f + b) / ((U + P - 1)(f + b)).
"""

import contextlib
import csv
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("SF_SOURCE_DIR",
                            os.path.dirname(os.path.dirname(HERE)))
PLOTS_DIR = os.path.join(SOURCE_DIR, "plots")
CLI = os.path.join(PLOTS_DIR, "stateflow_plots.py")
sys.path.insert(0, PLOTS_DIR)
os.environ.setdefault("MPLBACKEND", "Agg")

import stateflow_data as data   # noqa: E402
import stateflow_plots          # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MIN_PNG_BYTES = 10 * 1024
US = 1e6                       # trace times are microseconds
STATIC_BYTES = 3 << 30         # weights + gradients + optimizer state
ACT_BYTES = 1 << 28            # stored activations of one unit


def png_size(path):
    """(width, height, bytes) of a PNG; fails the caller if it is not one."""
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != PNG_SIGNATURE or head[12:16] != b"IHDR":
        raise AssertionError("%s is not a PNG" % path)
    width, height = struct.unpack(">II", head[16:24])
    return width, height, os.path.getsize(path)


# ------------------------------------------------------- synthetic inputs ---

def gpipe_times(P, M, N, f, b):
    """{stage: [(pass, mb, chunk, start, dur)]} of the schedule above."""
    units = [(a, i) for a in range(M) for i in range(N)]
    U = len(units)
    out = {}
    for r in range(P):
        fwd = [("F", a, i, (r + j) * f, f) for j, (a, i) in enumerate(units)]
        bwd = [("B", a, i, (U + P - 1) * f + (P - 1 - r + j) * b, b)
               for j, (a, i) in enumerate(reversed(units))]
        out[r] = fwd + bwd
    return out


def trace_events(pid, name, P, M, N, f, b):
    """The events `stateflow simulate --trace` writes for one executor:
    names, slices and memory counters (activations held from a forward's
    end to its backward's end)."""
    ev = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
           "args": {"name": name}}]
    for r, slices in gpipe_times(P, M, N, f, b).items():
        ev.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": r,
                   "args": {"name": "stage %d" % r}})
        held = 0
        ev.append(counter(pid, r, 0.0, held))
        for pass_, a, i, start, dur in slices:
            ev.append({"name": str(data.Action(r, pass_, a, i)), "cat": pass_,
                       "ph": "X", "ts": start * US, "dur": dur * US,
                       "pid": pid, "tid": r})
            held += ACT_BYTES if pass_ == "F" else -ACT_BYTES
            ev.append(counter(pid, r, start + dur, held))
    return ev


def counter(pid, stage, t, activations):
    return {"name": "memory stage %d" % stage, "ph": "C", "ts": t * US,
            "pid": pid, "tid": stage,
            "args": {"weights": STATIC_BYTES / 3,
                     "gradients": STATIC_BYTES / 3,
                     "optimizer_state": STATIC_BYTES / 3,
                     "activations": activations, "workspace": 0}}


def write_trace(path, P, M, N, f=1.0, b=2.0):
    """pid 0: "stateflow" at N chunks (unit times f/N, b/N); pid 1: "1f1b"
    at one chunk. Returns the path."""
    ev = (trace_events(0, "simulate stateflow N=%d" % N, P, M, N, f / N,
                       b / N)
          + trace_events(1, "simulate 1f1b N=1", P, M, 1, f, b))
    with open(path, "w") as out:
        json.dump({"traceEvents": ev, "displayTimeUnit": "ms"}, out)
    return path


def sweep_rows(seq_lens=(65536, 262144), chunks=(2, 4, 8, 16),
               alphas=(0.0, 0.5, 1.0), capacity=80 << 30, mark_best=True):
    """Rows of a sweep CSV from a toy model: throughput peaks at N = 10 and
    rises with alpha, memory falls with N and rises with alpha and T (at
    256K some configurations and 1F1B exceed 80 GiB); the best row of each
    cell is the fastest that fits."""
    rows = []
    for T in seq_lens:
        cell = [toy_row("1f1b", T, 1, 0.0, capacity)]
        study = [toy_row("stateflow", T, n, a, capacity)
                 for n in chunks for a in alphas]
        fits = [r for r in study if r["oom"] == 0]
        if mark_best and fits:
            max(fits, key=lambda r: r["tokens_per_s"])["best"] = 1
        rows += cell + study
    return rows


def toy_row(policy, T, n, alpha, capacity):
    tps = 1e4 * (1 + 0.1 * n - 0.005 * n * n + 0.05 * alpha) * 65536 / T
    mem = (16 + 40 / n + 12 * alpha) * (T / 65536) ** 0.5 * (1 << 30)
    return {"scenario": "toy", "model": "gdn-3b", "policy": policy,
            "seq_len": T, "global_batch": 8, "microbatches": 8,
            "pipeline_size": 8, "tensor_size": 1, "data_size": 1,
            "chunks": n, "alpha": alpha, "recompute": "full",
            "step_time_s": 8 * T / tps, "tokens_per_s": tps,
            "bubble_fraction": 0.2, "peak_memory_bytes": mem,
            "capacity_bytes": capacity, "oom": int(mem > capacity),
            "peak_stage": 0, "peak_class": "activations", "best": 0}


def write_csv(path, rows, columns=data.SWEEP_COLUMNS):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, columns, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def run_cli(*args):
    """In-process run of the CLI: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = stateflow_plots.main([str(a) for a in args])
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


class TempDirTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="sf_plots_")
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def assert_png(self, path, min_width=100, min_height=100):
        width, height, size = png_size(path)
        self.assertGreaterEqual(width, min_width, path)
        self.assertGreaterEqual(height, min_height, path)
        self.assertGreater(size, MIN_PNG_BYTES, path)
        return width, height


# -------------------------------------------------------------- readers ---

class TraceReaderTest(TempDirTest):
    P, M, N, F, B = 3, 2, 4, 1.0, 2.0

    def load(self):
        return data.load_trace(write_trace(self.path("t.json"), self.P,
                                           self.M, self.N, self.F, self.B))

    def test_processes_in_figure_order_with_labels(self):
        procs = self.load().drawing_order()
        self.assertEqual([p.pid for p in procs], [1, 0])
        self.assertEqual([p.label for p in procs],
                         ["1F1B", "StateFlow N=%d" % self.N])
        self.assertEqual([p.chunks for p in procs], [1, self.N])
        self.assertEqual([p.microbatches for p in procs], [self.M, self.M])

    def test_step_time_and_bubbles_match_closed_form(self):
        for proc in self.load().processes:
            n = proc.chunks
            units = self.M * n
            f, b = self.F / n, self.B / n
            step = (units + self.P - 1) * (f + b)
            self.assertAlmostEqual(proc.step_time, step, places=9)
            self.assertAlmostEqual(proc.bubble_fraction(),
                                   1 - units * (f + b) / step, places=9)
            self.assertEqual(sum(len(s) for s in proc.stages.values()),
                             2 * self.P * units)

    def test_memory_peak_is_every_forward_held(self):
        proc = [p for p in self.load().processes if p.pid == 0][0]
        units = self.M * self.N
        for r, samples in proc.memory.items():
            t, peak = data.memory_peak(samples)
            self.assertAlmostEqual(peak, STATIC_BYTES + units * ACT_BYTES)
            # the last forward of stage r ends at (r + units) f
            self.assertAlmostEqual(t, (r + units) * self.F / self.N)

    def test_samples_at_one_time_keep_the_last(self):
        times, by_class = data.memory_steps(
            [(0.0, {"activations": 5.0}), (0.0, {"activations": 7.0}),
             (1.0, {"workspace": 2.0})])
        self.assertEqual(times, [0.0, 1.0])
        self.assertEqual(by_class["activations"], [7.0, 0.0])
        self.assertEqual(by_class["workspace"], [0.0, 2.0])

    def test_action_text_form(self):
        self.assertEqual(data.parse_action("2F0.3"), data.Action(2, "F", 0, 3))
        self.assertEqual(data.parse_action("0W10.0"),
                         data.Action(0, "W", 10, 0))
        for stage, pass_, a, i in ((0, "B", 1, 0), (12, "F", 345, 6789)):
            action = data.Action(stage, pass_, a, i)
            self.assertEqual(str(action), "%d%s%d.%d" % (stage, pass_, a, i))
            self.assertEqual(data.parse_action(str(action)), action)
        for bad in ("F m1 c2", "2X0.3", "2F0", "2F0.", "F0.3", "2F0.3x",
                    " 2F0.3", "2F0.-3", "optimizer", ""):
            self.assertIsNone(data.parse_action(bad), bad)

    def test_action_on_another_stage_track(self):
        bad = self.path("t.json")
        with open(bad, "w", encoding="utf-8") as f:
            f.write('{"traceEvents": [{"ph": "X", "tid": 0, '
                    '"name": "1F0.0", "ts": 0, "dur": 1}]}')
        with self.assertRaises(data.DataError) as e:
            data.load_trace(bad)
        self.assertIn("action 1F0.0 on the track of stage 0", str(e.exception))

    def test_find_process_by_policy_or_name(self):
        trace = self.load()
        self.assertEqual(trace.find("1F1B").pid, 1)
        self.assertEqual(trace.find("simulate stateflow N=4").pid, 0)
        with self.assertRaises(data.DataError) as e:
            trace.find("gpipe")
        self.assertIn("'simulate 1f1b N=1'", str(e.exception))


class SweepCellTest(TempDirTest):
    def test_optional_system_and_usable_columns_are_read(self):
        rows = sweep_rows(alphas=(0.0,))
        for r in rows:
            r["system"] = "megatron-core"
            r["usable_bytes"] = 75 << 30
            r["st_overlap"] = 1
            r["st_tile"] = 32
            r["virtual_stages"] = 2
        path = write_csv(self.path("optional.csv"), rows,
                         columns=data.SWEEP_COLUMNS + data.SWEEP_OPTIONAL_COLUMNS)
        back = data.load_sweep(path)
        self.assertEqual(back[0]["system"], "megatron-core")
        self.assertEqual(back[0]["usable_bytes"], float(75 << 30))
        self.assertIs(back[0]["st_overlap"], True)
        self.assertEqual(back[0]["st_tile"], 32)
        self.assertEqual(back[0]["virtual_stages"], 2)
        # Older CSVs without them still load, without the keys.
        old = data.load_sweep(write_csv(self.path("old.csv"), rows))
        self.assertNotIn("usable_bytes", old[0])

    def test_best_is_the_fastest_that_fits(self):
        rows = sweep_rows(mark_best=False)   # fallback: no "best" column set
        for cell in data.sweep_cells("s.csv", rows):
            fits = [r for r in cell.study if not r["oom"]]
            want = max(fits, key=lambda r: r["tokens_per_s"])
            self.assertIs(cell.best(), want)
            self.assertFalse(cell.best()["oom"])

    def test_marked_best_wins_and_series_are_sorted(self):
        rows = sweep_rows()
        slow = min((r for r in rows if r["policy"] == "stateflow"),
                   key=lambda r: r["tokens_per_s"])
        for r in rows:
            r["best"] = int(r is slow)
        cell = [c for c in data.sweep_cells("s.csv", rows)
                if slow in c.study][0]
        self.assertIs(cell.best(), slow)
        ns = [r["chunks"] for r in cell.vs_chunks(slow["alpha"])]
        self.assertEqual(ns, sorted({r["chunks"] for r in cell.study}))
        alphas = [r["alpha"] for r in cell.vs_alpha(slow["chunks"])]
        self.assertEqual(alphas, sorted({r["alpha"] for r in cell.study}))

    def test_cells_filters_and_baseline(self):
        rows = sweep_rows()
        cells = data.sweep_cells("s.csv", rows)
        self.assertEqual([c.key["seq_len"] for c in cells], [65536, 262144])
        for c in cells:
            self.assertEqual(c.baseline["policy"], "1f1b")
            self.assertEqual(c.baseline["seq_len"], c.key["seq_len"])
        only = data.sweep_cells("s.csv", rows, filters={"seq_len": 262144})
        self.assertEqual(len(only), 1)
        with self.assertRaises(data.DataError) as e:
            data.sweep_cells("s.csv", rows, filters={"seq_len": 1024})
        self.assertIn("seq_len 65536, 262144", str(e.exception))

    def test_csv_round_trip_types(self):
        rows = sweep_rows()
        back = data.load_sweep(write_csv(self.path("s.csv"), rows))
        self.assertEqual(len(back), len(rows))
        self.assertIsInstance(back[0]["chunks"], int)
        self.assertIsInstance(back[0]["oom"], bool)
        self.assertEqual([r["oom"] for r in back],
                         [bool(r["oom"]) for r in rows])
        self.assertEqual(data.format_tokens(65536), "64K")
        self.assertEqual(data.format_tokens(1 << 20), "1M")


class LabelFitTest(unittest.TestCase):
    def test_label_only_when_it_fits(self):
        import plot_gantt
        import plot_style
        s = data.Slice("F", 1, 3, 0.0, 1.0)
        one_line = plot_style.text_width_pt("M1C3", 7.5)
        self.assertEqual(plot_gantt.fit_label(s, 4, one_line + 2, 30),
                         ("M1C3", 7.5))
        two_line = plot_style.text_width_pt("M1", 6.5)
        text, _ = plot_gantt.fit_label(s, 4, two_line + 2, 30)
        self.assertEqual(text, "M1\nC3")
        self.assertIsNone(plot_gantt.fit_label(s, 4, 3, 30))
        self.assertIsNone(plot_gantt.fit_label(s, 4, one_line + 2, 4))
        self.assertEqual(plot_gantt.fit_label(s, 1, 100, 30)[0], "M1")


# ------------------------------------------------------------- pictures ---

class PictureTest(TempDirTest):
    def test_gantt(self):
        trace = write_trace(self.path("t.json"), 4, 5, 4)
        code, out, err = run_cli("gantt", "--trace", trace, "--out",
                                 self.path("g.png"), "--time-unit", "units")
        self.assertEqual((code, err), (0, ""))
        self.assertIn("g.png", out)
        self.assert_png(self.path("g.png"))

    def test_gantt_dpi_sets_pixels(self):
        import plot_gantt
        trace = write_trace(self.path("t.json"), 2, 2, 2)
        for dpi in (60, 120):
            out = self.path("g%d.png" % dpi)
            self.assertEqual(run_cli("gantt", "--trace", trace, "--out", out,
                                     "--dpi", dpi)[0], 0)
            width, _, _ = png_size(out)
            self.assertEqual(width, round(plot_gantt._FIG_WIDTH_IN * dpi))

    def test_memory_both_and_one_process(self):
        trace = write_trace(self.path("t.json"), 3, 2, 4)
        both, one = self.path("m2.png"), self.path("m1.png")
        self.assertEqual(run_cli("memory", "--trace", trace, "--out", both,
                                 "--capacity-bytes", 8 << 30)[0], 0)
        self.assertEqual(run_cli("memory", "--trace", trace, "--out", one,
                                 "--process", "stateflow")[0], 0)
        w2, h2 = self.assert_png(both)
        w1, h1 = self.assert_png(one)
        self.assertGreater(w2, w1)   # two columns are wider than one
        self.assertEqual(h2, h1)     # same stages, same rows

    def test_sweep_against_n_and_alpha(self):
        csv_path = write_csv(self.path("s.csv"), sweep_rows())
        out = self.path("s.png")
        self.assertEqual(run_cli("sweep", "--csv", csv_path, "--out", out)[0],
                         0)
        _, tall = self.assert_png(out)
        one = self.path("s1.png")
        self.assertEqual(run_cli("sweep", "--csv", csv_path, "--out", one,
                                 "--seq-len", "64K", "--global-batch",
                                 8)[0], 0)
        _, short = self.assert_png(one)
        self.assertGreater(tall, short)   # two cells, two rows of panels

    def test_sweep_single_alpha_and_all_oom(self):
        rows = sweep_rows(alphas=(0.0,), capacity=1 << 30)
        self.assertTrue(all(r["oom"] for r in rows))
        csv_path = write_csv(self.path("s.csv"), rows)
        out = self.path("s.png")
        self.assertEqual(run_cli("sweep", "--csv", csv_path, "--out", out)[0],
                         0)
        self.assert_png(out)


@unittest.skipUnless(os.path.isfile(os.path.join(
    os.environ.get("SF_BINARY_DIR", "/nonexistent"), "stateflow")),
    "SF_BINARY_DIR does not hold a stateflow binary")
class RealTraceTest(TempDirTest):
    def test_simulated_trace_draws_and_matches_the_report(self):
        binary = os.path.join(os.environ["SF_BINARY_DIR"], "stateflow")
        trace = self.path("t.json")
        report = self.path("r.json")
        args = [binary, "simulate", "-P", "3", "-M", "3", "-N", "2",
                "--cost-model", "uniform"]
        subprocess.run(args + ["--trace", trace], check=True,
                       stdout=subprocess.DEVNULL)
        with open(report, "w") as f:
            subprocess.run(args + ["--json"], check=True, stdout=f)
        rep = data.load_report(report)
        loaded = data.load_trace(trace)
        for r in [rep] + rep.get("comparisons", []):
            proc = loaded.find(r["policy"])
            self.assertAlmostEqual(proc.step_time, float(r["step_time_s"]),
                                   places=6)
            self.assertAlmostEqual(proc.bubble_fraction(),
                                   float(r["bubble_fraction"]), places=6)
            self.assertEqual(proc.chunks, int(r["chunks"]))
        for cmd in ("gantt", "memory"):
            out = self.path(cmd + ".png")
            code, _, err = run_cli(cmd, "--trace", trace, "--report", report,
                                   "--out", out)
            self.assertEqual((code, err), (0, ""))
            self.assert_png(out)

    def test_virtual_stages_are_hatched_by_model_stage(self):
        # zbv: stage r runs model stages r and 2P - 1 - r; interleaved v=3:
        # r, r + P, r + 2P. Each box's hatching is its model stage's place.
        import plot_gantt
        binary = os.path.join(os.environ["SF_BINARY_DIR"], "stateflow")
        for flags, v in ((["--policy", "zbv"], 2),
                         (["--policy", "interleaved", "--virtual-stages", "3"], 3)):
            trace = self.path("v.json")
            subprocess.run([binary, "simulate", "--model", "gdn-small", "-P", "2",
                            "-M", "4", "-N", "2", "--cost-model", "uniform",
                            "--trace", trace] + flags, check=True,
                           stdout=subprocess.DEVNULL)
            proc = data.load_trace(trace).drawing_order()[-1]
            for stage, slices in proc.stages.items():
                index = plot_gantt.model_stage_index(slices)
                self.assertEqual(sorted(set(index)), list(range(v)))
                for s, k in zip(slices, index):
                    want = ((stage, 3 - stage)[k] if v == 2
                            else stage + 2 * k)
                    self.assertEqual(s.model_stage, want, (flags, stage, s))
            out = self.path("v.png")
            code, _, err = run_cli("gantt", "--trace", trace, "--out", out)
            self.assertEqual((code, err), (0, ""))
            self.assert_png(out)

    def test_real_sweep_csv_when_sweep_exists(self):
        binary = os.path.join(os.environ["SF_BINARY_DIR"], "stateflow")
        probe = subprocess.run([binary, "sweep", "--help"],
                               capture_output=True)
        if probe.returncode != 0:
            self.skipTest("this stateflow has no sweep command yet")
        csv_path = self.path("s.csv")
        subprocess.run([binary, "sweep", "--csv", csv_path], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = data.load_sweep(csv_path)
        for cell in data.sweep_cells(csv_path, rows):
            marked = [r for r in cell.study if r["best"]]
            if marked:
                self.assertIs(cell.best(), marked[0])
        out = self.path("s.png")
        self.assertEqual(run_cli("sweep", "--csv", csv_path, "--out", out)[0],
                         0)
        self.assert_png(out)


# ----------------------------------------------------------- bad inputs ---

class BadInputTest(TempDirTest):
    """Each bad input: exit 2, one line on stderr naming the file, nothing
    on stdout, no traceback. Run as a real process to see all of that."""

    def refuse(self, args, names):
        proc = subprocess.run([sys.executable, CLI] + [str(a) for a in args],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertEqual(proc.stdout, "")
        lines = proc.stderr.splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn(names, lines[0])
        self.assertNotIn("Traceback", proc.stderr)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def test_missing_file(self):
        missing = self.path("nope.json")
        self.refuse(["gantt", "--trace", missing, "--out",
                     self.path("g.png")], missing + ": no such file")

    def test_not_json(self):
        bad = self.write("t.json", "0F0.0\n")
        self.refuse(["memory", "--trace", bad, "--out", self.path("m.png")],
                    bad + ": not JSON")

    def test_not_a_trace(self):
        bad = self.write("t.json", '{"policy": "stateflow"}')
        self.refuse(["gantt", "--trace", bad, "--out", self.path("g.png")],
                    bad + ": not a trace")

    def test_trace_without_slices(self):
        bad = self.write("t.json", '{"traceEvents": [{"ph": "X", '
                         '"name": "idle", "ts": 0, "dur": 1}]}')
        self.refuse(["gantt", "--trace", bad, "--out", self.path("g.png")],
                    bad + ": no schedule slices")

    def test_bad_slice_time(self):
        bad = self.write("t.json", '{"traceEvents": [{"ph": "X", '
                         '"name": "0F0.0", "ts": "soon", "dur": 1}]}')
        self.refuse(["gantt", "--trace", bad, "--out", self.path("g.png")],
                    bad + ": event 0: 'ts'")

    def test_csv_without_columns(self):
        bad = write_csv(self.path("s.csv"), sweep_rows(),
                        [c for c in data.SWEEP_COLUMNS if c != "alpha"])
        self.refuse(["sweep", "--csv", bad, "--out", self.path("s.png")],
                    bad + ": not a sweep CSV: 1 of its")

    def test_csv_bad_value_names_line_and_column(self):
        rows = sweep_rows()
        rows[2]["tokens_per_s"] = "fast"
        bad = write_csv(self.path("s.csv"), rows)
        self.refuse(["sweep", "--csv", bad, "--out", self.path("s.png")],
                    bad + " line 4: column tokens_per_s")

    def test_unknown_process(self):
        trace = write_trace(self.path("t.json"), 2, 2, 2)
        self.refuse(["memory", "--trace", trace, "--process", "gpipe",
                     "--out", self.path("m.png")], "no process 'gpipe'")

    def test_output_folder_missing(self):
        trace = write_trace(self.path("t.json"), 2, 2, 2)
        out = self.path("no/such/g.png")
        self.refuse(["gantt", "--trace", trace, "--out", out],
                    out + ": folder")

    def test_bad_option(self):
        self.refuse(["sweep", "--csv", "s.csv", "--out", "s.png",
                     "--seq-len", "long"], "--seq-len")


if __name__ == "__main__":
    unittest.main()
