#!/usr/bin/env python3
"""The Python API's sweep beside the command line's, on the paper grid.

For each scenarios/paper/*.textproto: `stateflow sweep --scenario F --json`
(one process per file, its CPU time from wait4) and `stateflow.sweep(
stateflow.load_scenario(F))` in this process (time.process_time), alternating
CLI and Python per file, --repeat times; prints configurations per CPU
second for each and their ratio (issue 30's target: Python within 1.5x).

    PYTHONPATH=build/python python3 bench/python_sweep_speed.py --binary build/stateflow
"""
import argparse
import glob
import os
import subprocess
import time

import stateflow as sf


def cli_cpu(binary, path):
    proc = subprocess.Popen([binary, "sweep", "--scenario", path, "--json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit("%s sweep --scenario %s failed" % (binary, path))
    return usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="build/stateflow")
    parser.add_argument("--scenarios", default="scenarios/paper")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    files = sorted(glob.glob(os.path.join(args.scenarios, "*.textproto")))
    cli_total = py_total = 0.0
    configs = 0
    for rep in range(args.repeat):
        for path in files:
            cli_total += cli_cpu(args.binary, path)
            t0 = time.process_time()
            rows = sf.sweep(sf.load_scenario(path))
            py_total += time.process_time() - t0
            if rep == 0:
                configs += len(rows)
    runs = configs * args.repeat
    print("%d files, %d configurations, %d repetitions" % (len(files), configs, args.repeat))
    print("command line: %.2f CPU s, %.0f configurations per CPU second" % (
        cli_total, runs / cli_total))
    print("Python API:   %.2f CPU s, %.0f configurations per CPU second" % (
        py_total, runs / py_total))
    print("Python / command line CPU time: %.3f" % (py_total / cli_total))


if __name__ == "__main__":
    main()
