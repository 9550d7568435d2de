"""Tests of the `validate` picture: the reader of `stateflow validate --json`
against a report built here, the figure rendered to a valid PNG under the
size docs/ allow, and bad reports refused with one line and exit 2.

The synthetic report has known errors: configuration k's prediction is its
measurement times (1 + e_k), with e_k chosen here, so the reader's errors
must come back as e_k.

Run: MPLBACKEND=Agg /usr/bin/python3 -m unittest discover -s tests/plots -v
"""

import json
import os
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

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_DOC_PNG_BYTES = 300 * 1024   # docs/img/ pictures stay below this

# (M, N, recompute, step-time error, peak-memory error of stage 1)
CONFIGS = [(2, 1, "none", 0.03, 0.0), (2, 4, "full", -0.08, 0.01),
           (4, 2, "none", 0.12, -0.015), (8, 8, "full", -0.01, 0.0)]
MEASURED_STEP_S = 0.05
MEASURED_PEAK = 4 << 20


def run_entry(m, n, mode, step_error, memory_error):
    measured = MEASURED_STEP_S * m
    stages = []
    for r, e in ((0, 0.0), (1, memory_error)):
        stages.append({
            "stage": r, "predicted_busy_s": 0.8 * measured,
            "measured_busy_s": 0.7 * measured,
            "predicted_peak_memory_bytes": MEASURED_PEAK * (1 + e),
            "measured_peak_memory_bytes": MEASURED_PEAK})
    return {"policy": "stateflow", "pipeline_size": 2, "microbatches": m,
            "chunks": n, "alpha": 0, "seq_len": 256, "recompute": mode,
            "predicted_step_time_s": measured * (1 + step_error),
            "measured_step_time_s": measured, "stages": stages}


def report(configs=CONFIGS):
    return {"scenario": "tiny-train", "model": "gdn-tiny",
            "dtype": "float32", "costs": "profiled",
            "runs": [run_entry(*c) for c in configs]}


class ValidateTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="sf_validate_")
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, name, doc):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(doc if isinstance(doc, str) else json.dumps(doc))
        return path

    def test_reader_gives_back_the_errors(self):
        v = data.load_validation(self.write("v.json", report()))
        self.assertEqual(len(v.runs), len(CONFIGS))
        for run, (m, n, mode, step_error, memory_error) in zip(v.runs,
                                                              CONFIGS):
            self.assertEqual((run.microbatches, run.chunks, run.recompute),
                             (m, n, mode))
            self.assertAlmostEqual(run.step_error, step_error, places=12)
            self.assertAlmostEqual(run.stages[1].peak_error, memory_error,
                                   places=12)
            self.assertEqual(run.stages[0].peak_error, 0.0)
            self.assertEqual(run.label, "StateFlow N=%d M=%d %s"
                             % (n, m, mode))
        self.assertIn("4 configurations", v.context())

    def test_picture_is_a_png_small_enough_for_docs(self):
        out = os.path.join(self.dir, "v.png")
        proc = subprocess.run([sys.executable, CLI, "validate", "--report",
                               self.write("v.json", report()), "--out", out],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(out, "rb") as f:
            self.assertEqual(f.read(8), PNG_SIGNATURE)
        self.assertLess(os.path.getsize(out), MAX_DOC_PNG_BYTES)
        one = os.path.join(self.dir, "one.png")
        proc = subprocess.run([sys.executable, CLI, "validate", "--report",
                               self.write("one.json", report(CONFIGS[:1])),
                               "--out", one],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)

    def refuse(self, doc, names):
        path = self.write("bad.json", doc)
        proc = subprocess.run([sys.executable, CLI, "validate", "--report",
                               path, "--out",
                               os.path.join(self.dir, "bad.png")],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 2, proc.stderr)
        self.assertEqual(proc.stdout, "")
        lines = proc.stderr.splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn(names, lines[0])

    def test_bad_reports(self):
        self.refuse('{"policy": "stateflow"}', "not a validation report")
        self.refuse(dict(report(), runs=[]), "has no runs")
        zero = report()
        zero["runs"][1]["measured_step_time_s"] = 0
        self.refuse(zero, "runs[1].measured_step_time_s is 0")
        negative = report()
        negative["runs"][0]["stages"][1]["measured_peak_memory_bytes"] = -1
        self.refuse(negative,
                    "runs[0].stages[1].measured_peak_memory_bytes is -1")
        no_stages = report()
        no_stages["runs"][2]["stages"] = []
        self.refuse(no_stages, "runs[2] has no stages")
        self.refuse("{", "not JSON")


if __name__ == "__main__":
    unittest.main()
