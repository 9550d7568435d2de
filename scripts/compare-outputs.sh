#!/usr/bin/env bash
# Behaviour check for refactors: runs two builds of `stateflow` on the same
# inputs and diffs what they print. Usage:
#
#   scripts/compare-outputs.sh OLD_BINARY NEW_BINARY [--quick]
#
# Compared byte for byte: `simulate` (table and JSON) on the default and
# every paper scenario, `sweep` (CSV and JSON) on the default and every paper
# scenario, `plan-dump`, the capacity plan (JSON), `train --json` (float64
# and float32, P = 1, and P = 2 under mpirun when mpirun is present) and
# `validate --json` with a given cost table. Before the diff, the fields that
# measure this machine rather than the program are dropped from JSON
# (provenance, elapsed_s, and, for train and validate, every time and rate);
# losses, memory, plans and every simulated number stay in. --quick leaves
# out the paper scenarios' sweeps (the slowest part). Exits 1 on the first
# difference, printing it. The simulator's outputs are the same bits in the
# native and the portable build (-ffp-contract=off, CMakeLists.txt); the
# backend's float32 kernels are not (vector width, fused multiply-adds), so
# compare two builds of the same kind when train float32 is to agree.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 OLD_BINARY NEW_BINARY [--quick]" >&2
  exit 2
fi
old=$(realpath "$1") new=$(realpath "$2") quick=${3:-}
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3

# Drops the measured fields of a JSON document on stdin ($1: "sim" keeps
# every number but provenance and elapsed time; "run" also drops times and
# rates, which are this machine's).
normalize() {
  "$py" -c '
import json, sys
mode = sys.argv[1]
measured = ("_s", "_per_s", "bubble_fraction", "error", "load_average", "step_times_s")
def keep(key):
    if key in ("provenance", "elapsed_s", "notes"):
        return False
    if mode == "run" and (key.endswith(measured) or "time" in key or "busy" in key
                          or "bubble" in key or "error" in key
                          or key in ("range", "rounds")):
        return False
    return True
def clean(v):
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items() if keep(k)}
    if isinstance(v, list):
        return [clean(x) for x in v]
    return v
text = sys.stdin.read()
try:
    print(json.dumps(clean(json.loads(text)), indent=1, sort_keys=True))
except ValueError:
    print(text, end="")
' "$1"
}

cases=0
check() {  # check NAME MODE ARGS...: runs both binaries, compares
  local name=$1 mode=$2
  shift 2
  local a="$work/old.$cases" b="$work/new.$cases"
  local rc_a=0 rc_b=0
  # @FILE@ in the arguments: an output file of the command, compared instead
  # of what it prints.
  "$old" "${@//@FILE@/$a.file}" >"$a.raw" 2>"$a.err" || rc_a=$?
  "$new" "${@//@FILE@/$b.file}" >"$b.raw" 2>"$b.err" || rc_b=$?
  if [ "$mode" = file ]; then cp "$a.file" "$a"; cp "$b.file" "$b"
  elif [ "$mode" = text ]; then cp "$a.raw" "$a"; cp "$b.raw" "$b"; else
    normalize "$mode" <"$a.raw" >"$a"; normalize "$mode" <"$b.raw" >"$b"; fi
  cases=$((cases + 1))
  if [ "$rc_a" != "$rc_b" ] || ! cmp -s "$a" "$b"; then
    echo "DIFFERENT: $name (exit $rc_a vs $rc_b)"
    diff "$a" "$b" | head -20
    head -3 "$a.err" "$b.err"
    exit 1
  fi
  echo "same: $name"
}

check "simulate (default, table)" text simulate
check "simulate (default, json)" sim simulate --json
check "simulate --chunks 16 --recompute full" sim simulate --json --chunks 16 --recompute full
check "plan-dump (default)" text plan-dump
check "sweep (default, csv)" file sweep --csv @FILE@
check "sweep (default, json)" sim sweep --json
for f in scenarios/paper/*.textproto; do
  check "simulate $f" sim simulate --scenario "$f" --json
  if [ "$quick" != --quick ]; then check "sweep $f" sim sweep --scenario "$f" --json; fi
done
# The capacity planner was `plan` before it was `capacity`.
capacity_old=plan capacity_new=plan
"$old" capacity --help >/dev/null 2>&1 && capacity_old=capacity
"$new" capacity --help >/dev/null 2>&1 && capacity_new=capacity
a="$work/old.capacity" b="$work/new.capacity"
"$old" "$capacity_old" --json --top 5 | normalize sim >"$a"
"$new" "$capacity_new" --json --top 5 | normalize sim >"$b"
if ! cmp -s "$a" "$b"; then echo "DIFFERENT: capacity plan"; diff "$a" "$b" | head; exit 1; fi
echo "same: capacity plan (default, json)"
cases=$((cases + 1))
check "bad input" text simulate --chunks 0
check "train float64 P=1" run train --json --steps 3 --dtype float64 -P 1
check "train float32 P=1 N=4" run train --json --steps 3 -P 1 -N 4
if command -v mpirun >/dev/null; then
  mpirun_args=(mpirun --oversubscribe -n 2)
  a="$work/old.mpi" b="$work/new.mpi"
  "${mpirun_args[@]}" "$old" train --json --steps 3 --dtype float64 -P 2 -N 4 | normalize run >"$a"
  "${mpirun_args[@]}" "$new" train --json --steps 3 --dtype float64 -P 2 -N 4 | normalize run >"$b"
  if ! cmp -s "$a" "$b"; then echo "DIFFERENT: train P=2 under mpirun"; diff "$a" "$b" | head; exit 1; fi
  echo "same: train float64 P=2 N=4 (mpirun)"
  cases=$((cases + 1))
fi
if [ "$quick" != --quick ] && command -v mpirun >/dev/null; then
  # validate replays one cost table (profiled once, by the new build) in
  # both builds: the predictions and the measured memory must agree.
  "$new" profile --repetitions 2 --warmup 1 --link in-process --out "$work/costs.textproto" >/dev/null
  check "validate --costs (json)" run validate --costs "$work/costs.textproto" --steps 2 \
    --chunks-list 1,4 --recompute-list none,full --json
fi
echo "all $cases cases the same"
