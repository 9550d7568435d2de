#!/usr/bin/env bash
# The crash-consistency drill of issue 31 (docs/reliability.md, "Crash
# drill"): a training run that checkpoints after every step is killed with
# SIGKILL at random moments -- starting up, loading its checkpoint, in a
# step, writing a checkpoint -- and resumed from its directory each time,
# until it has done all its steps; then its final checkpoint (every stage's
# parameters, AdamW moments and step counter) must be byte-identical to an
# uninterrupted run's. One resume that continued from anything but the exact
# state would make the final state differ.
#
#   bash scripts/crash-drill.sh [build-dir] [kills] [ranks]   # default: build 100 2
#   SF_DRILL_SEED=7 bash scripts/crash-drill.sh build 20 1    # one process, no mpirun
#
# Each kill is SIGKILL to the whole job (mpirun and its ranks, or the one
# process), after a random delay of 0.05 to 1.5 s from its start. Prints one
# line per segment and a summary; exit 0 when every resume succeeded and the
# final checkpoint matches, 1 otherwise.
set -u
build=${1:-build}
kills=${2:-100}
ranks=${3:-2}
stateflow=$(cd "$build" && pwd)/stateflow
work=$(mktemp -d "${TMPDIR:-/tmp}/stateflow-crash-XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RANDOM=${SF_DRILL_SEED:-1}
# Steps enough for `kills` kills at the delays below (a step and its
# checkpoint take about 10 to 30 ms here).
steps=${SF_DRILL_STEPS:-$((kills * 25))}
args=(train --dtype float64 -T 64 -M 2 -N 2 --steps "$steps" --threads 1 --watchdog 30
      --checkpoint-every 1)
launch=()
[ "$ranks" -gt 1 ] && launch=(mpirun --quiet --oversubscribe -n "$ranks")

echo "crash-drill: $kills kills, $steps steps, $ranks rank(s), seed ${SF_DRILL_SEED:-1}," \
     "commit $(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown)"
start=$(date +%s)
"${launch[@]}" "$stateflow" "${args[@]}" --checkpoint "$work/ref" > "$work/ref.out" 2>&1 ||
  { echo "crash-drill: the uninterrupted run failed:"; tail -5 "$work/ref.out"; exit 1; }
echo "crash-drill: uninterrupted run: $(( $(date +%s) - start )) s"

ck="$work/ck"
done_kills=0 segment=0 failures=0
while :; do
  segment=$((segment + 1))
  resume=()
  [ -f "$ck/MANIFEST" ] && resume=(--resume "$ck")
  before=$(sed -n 's/^step //p' "$ck/MANIFEST" 2>/dev/null || echo none)
  setsid "${launch[@]}" "$stateflow" "${args[@]}" --checkpoint "$ck" "${resume[@]}" \
    > "$work/seg.out" 2>&1 &
  job=$!
  if [ "$done_kills" -lt "$kills" ]; then
    delay=$(awk -v r=$RANDOM 'BEGIN { printf "%.3f", 0.05 + 1.45 * r / 32767 }')
    sleep "$delay"
    if kill -0 "$job" 2>/dev/null; then
      # The ranks (Open MPI puts them in process groups of their own) and
      # mpirun at once: every process whose command line names the directory.
      pkill -9 -f -- "--checkpoint $ck" 2>/dev/null
      kill -9 -- -"$job" 2>/dev/null
      wait "$job" 2>/dev/null
      done_kills=$((done_kills + 1))
      after=$(sed -n 's/^step //p' "$ck/MANIFEST" 2>/dev/null || echo none)
      resumed=$(grep -o 'resumed from step [0-9]*' "$work/seg.out" | head -1)
      echo "segment $segment: killed after ${delay} s; manifest step $before -> $after${resumed:+; $resumed}"
      grep -q '^stateflow' "$work/seg.out" && { echo "  unexpected error:"; grep '^stateflow' "$work/seg.out" | head -3; failures=$((failures + 1)); }
      continue
    fi
  fi
  wait "$job"
  code=$?
  echo "segment $segment: ran to the end (exit $code); $(grep -o 'resumed from step [0-9]*' "$work/seg.out" | head -1)"
  if [ $code -ne 0 ]; then
    echo "  the run failed:"; tail -5 "$work/seg.out"; failures=$((failures + 1))
  fi
  break
done

same=0 files=0
for f in "$work"/ref/stage-*.ckpt "$work"/ref/MANIFEST; do
  files=$((files + 1))
  cmp -s "$f" "$ck/$(basename "$f")" && same=$((same + 1))
done
extra=$(ls "$ck" | grep -v -e '^MANIFEST$' -e "step-$steps.ckpt\$" | wc -l)
echo "crash-drill: $done_kills kills in $segment segments, $failures failures;" \
     "final checkpoint: $same of $files files byte-identical to the uninterrupted run's," \
     "$extra other files left; $(( $(date +%s) - start )) s in all"
[ "$failures" -eq 0 ] && [ "$same" -eq "$files" ] && [ "$extra" -eq 0 ]
