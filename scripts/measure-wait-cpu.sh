#!/usr/bin/env bash
# How much CPU a rank uses while it waits on a stalled peer (issue 31,
# docs/reliability.md "Waiting ranks"): `mpirun -n 2 stateflow train` runs,
# rank 1 is stopped (SIGSTOP) two seconds in, and rank 0's CPU time is read
# from /proc over the next `seconds` (it waits for rank 1 the whole time);
# then the job is killed. Prints one line: rank 0's CPU share while waiting.
#
#   scripts/measure-wait-cpu.sh [build-dir] [seconds]   # default: build 5
set -u
build=${1:-build}
seconds=${2:-5}
stateflow=$(cd "$build" && pwd)/stateflow
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
tick=$(getconf CLK_TCK)
cpu() { awk '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " "); print f[12] + f[13] }' "/proc/$1/stat"; }
setsid mpirun "${root[@]}" --quiet --oversubscribe -n 2 "$stateflow" train --steps 1000000 \
  -T 128 --watchdog $((seconds + 30)) >/dev/null 2>&1 &
launcher=$!
sleep 2
ranks=($(pgrep -f -P "$launcher" "stateflow train" | sort -n))
if [ "${#ranks[@]}" -ne 2 ]; then
  echo "measure-wait-cpu: expected 2 ranks under mpirun $launcher, found ${#ranks[@]}" >&2
  kill -9 -- -"$launcher" 2>/dev/null
  exit 1
fi
# Which pid is rank 1: Open MPI sets OMPI_COMM_WORLD_RANK in each rank's environment.
r0=${ranks[0]} r1=${ranks[1]}
if tr '\0' '\n' < "/proc/$r0/environ" | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then r0=${ranks[1]} r1=${ranks[0]}; fi
kill -STOP "$r1"
sleep 0.5
before=$(cpu "$r0")
sleep "$seconds"
after=$(cpu "$r0")
kill -9 -- -"$launcher" 2>/dev/null
kill -9 "$r0" "$r1" 2>/dev/null
wait "$launcher" 2>/dev/null
awk -v b="$before" -v a="$after" -v t="$tick" -v s="$seconds" \
  'BEGIN { printf "rank 0 waiting %s s on a stopped rank 1: %.2f CPU s, %.1f %% of a core\n", s, (a - b) / t, 100 * (a - b) / t / s }'
