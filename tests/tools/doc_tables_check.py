#!/usr/bin/env python3
"""Runs a program that prints Markdown tables and fails unless every table
row it prints (a line starting with `|`, separator rows aside) stands in the
doc verbatim: a figure in docs/ that no longer holds is a defect
(DEVELOPERS.md), and the programs checked this way (the simulator's
predictions) are deterministic.

  doc_tables_check.py --doc docs/cost-model.md -- build/bench/st_overlap_prediction
  doc_tables_check.py --doc docs/performance.md --from "step" -- build/bench/st_overlap_prediction
"""
import argparse
import re
import subprocess
import sys

SEPARATOR = re.compile(r"^\|[-:| ]+\|$")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--doc", required=True)
    parser.add_argument("--from", dest="start", default=None,
                        help="check only the rows printed after the first line holding this")
    parser.add_argument("command", nargs="+", help="the program and its arguments, after --")
    args = parser.parse_args()
    try:
        with open(args.doc, encoding="utf-8") as f:
            doc_lines = {line.rstrip("\n") for line in f}
    except OSError as e:
        print(f"doc_tables_check: {args.doc}: {e.strerror}", file=sys.stderr)
        return 2
    run = subprocess.run(args.command, capture_output=True, text=True)
    if run.returncode != 0:
        print(f"doc_tables_check: `{' '.join(args.command)}` exited {run.returncode}: "
              f"{run.stderr.strip()}", file=sys.stderr)
        return 1
    lines = run.stdout.split("\n")
    if args.start is not None:
        at = next((i for i, line in enumerate(lines) if args.start in line), None)
        if at is None:
            print(f"doc_tables_check: no line of the output holds '{args.start}'", file=sys.stderr)
            return 1
        lines = lines[at + 1:]
    rows = [line for line in lines if line.startswith("|") and not SEPARATOR.match(line)]
    # A table's header (the row above its separator) alone checks no figure.
    headers = {line for line, after in zip(lines, lines[1:] + [""]) if SEPARATOR.match(after)}
    if not [row for row in rows if row not in headers]:
        print(f"doc_tables_check: `{' '.join(args.command)}` printed no table row "
              "below a header", file=sys.stderr)
        return 1
    missing = [row for row in rows if row not in doc_lines]
    for row in missing:
        print(f"{args.doc} lacks a row the program prints now:\n  {row}")
    print(f"{len(rows)} rows checked, {len(missing)} missing from {args.doc}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
