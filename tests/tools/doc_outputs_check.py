#!/usr/bin/env python3
"""Reruns every `$ stateflow ...` block of a doc that shows its output and
fails when the output has changed: a figure in docs/ that no longer holds is
a defect (DEVELOPERS.md), and the simulator's outputs are deterministic.

A block is a line `$ stateflow ARGS` inside a fenced code block and the lines
after it up to the next `$ ` line or the fence. It is rerun when it shows
output and is one line (no trailing backslash, no `...` placeholder). What
may differ between runs is normalised on both sides: wall-clock figures
("in 0.101 s"). A block that reads a file the doc has the reader write by
hand (`--plan broken.txt`) is skipped when that file does not exist.

Commands run in a scratch directory where `scenarios/` and `models/` are
the source tree's, so files they write (traces, CSVs) go nowhere near it.

  doc_outputs_check.py --doc docs/usage.md --stateflow build/stateflow --source .
  doc_outputs_check.py ... --update    # write the outputs of now into the doc
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

# Wall-clock figures: "657 configurations in 0.101 s", "simulated in 0.277 s".
TIMING = re.compile(r"\bin \d+(\.\d+)? s\b")
# Options whose value is a file the command reads.
INPUT_FLAGS = ("--plan", "--runs", "--costs", "--scenario", "--cluster")


def normalise(lines):
    return [TIMING.sub("in <t> s", line) for line in lines]


def blocks(text):
    """(line number, command, expected output lines) of each `$ stateflow` block."""
    lines = text.split("\n")
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            in_fence = not in_fence
            i += 1
            continue
        if in_fence and line.startswith("$ stateflow"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("$ ") and not lines[j].startswith("```"):
                j += 1
            want = lines[i + 1:j]
            while want and want[-1] == "":
                want.pop()
            yield i + 1, line[2:], want
            i = j
            continue
        i += 1


def missing_input(command, cwd):
    """The first input file the command names that does not exist, or None."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for k, word in enumerate(words[:-1]):
        value = words[k + 1]
        looks_like_path = "/" in value or "." in value  # not a preset name (h100)
        if word in INPUT_FLAGS and looks_like_path and not os.path.exists(os.path.join(cwd, value)):
            return value
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--doc", required=True)
    ap.add_argument("--stateflow", required=True, help="the stateflow binary")
    ap.add_argument("--source", required=True, help="the source tree (scenarios/, models/)")
    ap.add_argument("--update", action="store_true",
                    help="replace each changed block's output in the doc with what it prints now "
                         "(after a change that moves them on purpose; read the diff)")
    args = ap.parse_args()
    text = open(args.doc, encoding="utf-8").read()
    exe = os.path.abspath(args.stateflow)
    checked = skipped = 0
    failures = []
    updates = []  # (line number of the command, old output lines, new output lines)
    with tempfile.TemporaryDirectory() as cwd:
        for name in ("scenarios", "models"):
            os.symlink(os.path.join(os.path.abspath(args.source), name), os.path.join(cwd, name))
        os.mkdir(os.path.join(cwd, "out"))
        for line_no, command, want in blocks(text):
            if not want or command.endswith("\\") or "..." in command:
                skipped += 1
                continue
            missing = missing_input(command, cwd)
            if missing:
                print(f"skip {args.doc}:{line_no}: {missing} is written by hand in the doc")
                skipped += 1
                continue
            run = exe + command[len("stateflow"):]
            out = subprocess.run(run, shell=True, cwd=cwd, capture_output=True, text=True,
                                 timeout=300)
            got = (out.stdout + out.stderr).rstrip("\n").split("\n")
            checked += 1
            if normalise(got) != normalise(want):
                diff = next(((a, b) for a, b in zip(normalise(want), normalise(got)) if a != b),
                            (f"{len(want)} lines", f"{len(got)} lines"))
                failures.append(f"{args.doc}:{line_no}: `{command}` prints something else now\n"
                                f"  doc: {diff[0]}\n  now: {diff[1]}")
                updates.append((line_no, want, got))
    for f in failures:
        print(f)
    if args.update and updates:
        lines = text.split("\n")
        for line_no, want, got in reversed(updates):  # bottom up: earlier numbers stay
            assert lines[line_no:line_no + len(want)] == want
            lines[line_no:line_no + len(want)] = got
        with open(args.doc, "w", encoding="utf-8") as f:
            f.write("\n".join(lines))
        print(f"{len(updates)} blocks updated in {args.doc}")
        return 0
    print(f"{checked} blocks rerun, {skipped} skipped, {len(failures)} changed")
    if checked == 0:
        print("no block was rerun: the doc or this script's block rule has changed")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
