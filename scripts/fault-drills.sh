#!/usr/bin/env bash
# Fault drills for issue 14 (docs/reliability.md, "Fault drills"): a two-rank
# `mpirun -n 2 stateflow train` is hit with SIGKILL, SIGSTOP or SIGTERM, sent
# to rank 0, rank 1 or mpirun, during a step (no checkpoints) or while it
# checkpoints after every step; the script records what the job printed
# (its stderr's first and last lines), its exit code and how long until
# every process of the job was gone. After a drill with checkpoints it
# resumes from the directory to check the last complete checkpoint is
# usable.
#
#   scripts/fault-drills.sh [build-dir]    # default: build
#   SF_DRILLS=stops scripts/fault-drills.sh # only the stop-and-continue drills
#   SF_DRILLS=signals scripts/fault-drills.sh  # only the signal drills
# Prints one table row per drill (Markdown). Each drill waits at most 60 s,
# then kills what is left (reported as "still running").
set -u
build=${1:-build}
stateflow=$(cd "$build" && pwd)/stateflow
work=$(mktemp -d "${TMPDIR:-/tmp}/stateflow-drills-XXXXXX")
trap 'rm -rf "$work"' EXIT
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
now() { date +%s.%N; }
# Each job runs in a session of its own (setsid): a stopped mpirun in this
# script's process group would make the kernel send SIGHUP to the whole
# group, this script included, when the group is orphaned (a script started
# in the background).
# A process that has exited but not been reaped (a zombie: its parent, say
# a stopped mpirun, has not waited for it yet) holds nothing and counts as gone.
alive() {
  for p in "$@"; do
    local state
    state=$(ps -o stat= -p "$p" 2>/dev/null | cut -c1)
    [ -n "$state" ] && [ "$state" != Z ] && return 0
  done
  return 1
}

drill() {  # target signal phase
  local target=$1 sig=$2 phase=$3 dir="$work/ck-$1-$2-$3" log="$work/log-$1-$2-$3"
  mkdir -p "$work/pids-$target-$sig-$phase"
  local ck=()
  [ "$phase" = checkpoint ] && ck=(--checkpoint "$dir" --checkpoint-every 1)
  SF_TRAIN_PID_DIR="$work/pids-$target-$sig-$phase" \
    setsid mpirun "${root[@]}" --oversubscribe -n 2 "$stateflow" train --steps 100000 -T 128 \
      --watchdog 5 "${ck[@]}" > "$log.out" 2> "$log.err" &
  local job=$!
  local pids="$work/pids-$target-$sig-$phase"
  for _ in $(seq 200); do
    [ -f "$pids/rank0.pid" ] && [ -f "$pids/rank1.pid" ] && break
    sleep 0.05
  done
  local r0 r1
  r0=$(cat "$pids/rank0.pid" 2>/dev/null || echo 0)
  r1=$(cat "$pids/rank1.pid" 2>/dev/null || echo 0)
  sleep 2  # a few steps (and checkpoints) in
  local victim
  case $target in rank0) victim=$r0 ;; rank1) victim=$r1 ;; mpirun) victim=$job ;; esac
  local t0
  t0=$(now)
  kill "-$sig" "$victim"
  local gone="still running after 60 s"
  if [ "$target$sig" = mpirunSTOP ]; then
    # The ranks end by themselves after the watchdog; mpirun stays stopped
    # until continued, then ends at once.
    gone="ranks still running after 60 s"
    while [ "$(echo "$(now) - $t0 < 60" | bc)" = 1 ]; do
      if ! alive "$r0" "$r1"; then
        gone=$(printf 'ranks %.1f s' "$(echo "$(now) - $t0" | bc)")
        break
      fi
      sleep 0.05
    done
    kill -CONT "$job"
    local t1
    t1=$(now)
    while alive "$job" && [ "$(echo "$(now) - $t1 < 30" | bc)" = 1 ]; do sleep 0.05; done
    alive "$job" || gone="$gone, mpirun $(printf '%.1f' "$(echo "$(now) - $t1" | bc)") s after SIGCONT"
  else
    while [ "$(echo "$(now) - $t0 < 60" | bc)" = 1 ]; do
      if ! alive "$job" "$r0" "$r1"; then
        gone=$(printf '%.1f s' "$(echo "$(now) - $t0" | bc)")
        break
      fi
      sleep 0.05
    done
  fi
  kill -9 "$job" "$r0" "$r1" 2>/dev/null
  wait "$job" 2>/dev/null
  local rc=$?
  local first last
  # Open MPI frames its messages with lines of dashes: skip those.
  local lines
  lines=$(grep -v -e '^\s*$' -e '^-----' "$log.err")
  first=$(grep -m1 -E 'stateflow( train)?: ' <<< "$lines" | cut -c1-200)
  [ -z "$first" ] && first=$(head -1 <<< "$lines" | cut -c1-200)
  last=$(tail -1 <<< "$lines" | cut -c1-200)
  local resume="-"
  if [ "$phase" = checkpoint ]; then
    if [ -f "$dir/MANIFEST" ]; then
      local step
      step=$(awk '$1 == "step" {print $2}' "$dir/MANIFEST")
      if "$stateflow" train -T 128 --resume "$dir" --steps $((step + 1)) > /dev/null 2> "$log.resume"; then
        resume="resumed from step $step"
      else
        resume="resume FAILED: $(head -1 "$log.resume")"
      fi
    else
      resume="no checkpoint yet"
    fi
  fi
  echo "| $target | SIG$sig | $phase | $gone | $rc | ${first//|/\\|} | ${last//|/\\|} | $resume |"
}

# Stops and continues (docs/reliability.md, "A stopped job, a stopped
# mpirun"): the whole job stopped longer than the watchdog and continued;
# Ctrl-Z (SIGTSTP to mpirun, which Open MPI forwards to its ranks) and fg;
# mpirun alone stopped shorter than the watchdog and continued; mpirun alone
# stopped and left stopped. Each row: what the job did after the stop, the
# steps it made in the 5 s after the continue (rank 0 prints one per step),
# and the lines it printed.
steps() { grep -c '^step' "$1" 2>/dev/null || true; }
# CPU seconds the two ranks used so far (utime + stime, /proc/<pid>/stat).
cpu() {
  local ticks=0 t
  for p in "$@"; do
    t=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)
    ticks=$((ticks + t))
  done
  echo "scale=1; $ticks / $(getconf CLK_TCK)" | bc
}
stop_drill() {  # name
  local name=$1 log="$work/stop-$1" pids="$work/stop-pids-$1"
  mkdir -p "$pids"
  SF_TRAIN_PID_DIR="$pids" setsid mpirun "${root[@]}" --oversubscribe -n 2 "$stateflow" train \
    --steps 100000 -T 128 --watchdog 5 > "$log.out" 2> "$log.err" &
  local job=$!
  for _ in $(seq 200); do
    [ -f "$pids/rank0.pid" ] && [ -f "$pids/rank1.pid" ] && break
    sleep 0.05
  done
  local r0 r1
  r0=$(cat "$pids/rank0.pid" 2>/dev/null || echo 0)
  r1=$(cat "$pids/rank1.pid" 2>/dev/null || echo 0)
  sleep 2
  local outcome t0 cpu0 cpu_stopped="-"
  cpu0=$(cpu "$r0" "$r1")
  case $name in
    job-stopped-10s)
      kill -STOP "$job" "$r0" "$r1"; sleep 10; cpu_stopped=$(echo "$(cpu "$r0" "$r1") - $cpu0" | bc)
      kill -CONT "$r0" "$r1" "$job" ;;
    ctrl-z-10s)
      kill -TSTP "$job"; sleep 10; cpu_stopped=$(echo "$(cpu "$r0" "$r1") - $cpu0" | bc)
      kill -CONT "$job" ;;
    mpirun-stopped-3s)
      kill -STOP "$job"; sleep 3; cpu_stopped=$(echo "$(cpu "$r0" "$r1") - $cpu0" | bc)
      kill -CONT "$job" ;;
    mpirun-stopped)
      kill -STOP "$job"
      t0=$(now)
      local ranks_gone="ranks still running after 60 s"
      while [ "$(echo "$(now) - $t0 < 60" | bc)" = 1 ]; do
        if ! alive "$r0" "$r1"; then
          ranks_gone=$(printf 'ranks gone after %.1f s' "$(echo "$(now) - $t0" | bc)")
          break
        fi
        sleep 0.05
      done
      local state
      state=$(ps -o stat= -p "$job" | tr -d ' ')
      kill -CONT "$job"
      t0=$(now)
      local job_gone="mpirun still running 30 s after SIGCONT"
      while [ "$(echo "$(now) - $t0 < 30" | bc)" = 1 ]; do
        if ! alive "$job"; then
          job_gone=$(printf 'mpirun (state %s until then) gone %.1f s after SIGCONT' "$state" "$(echo "$(now) - $t0" | bc)")
          break
        fi
        sleep 0.05
      done
      outcome="$ranks_gone; $job_gone" ;;
  esac
  local before=0 after=0
  if [ -z "${outcome:-}" ]; then
    before=$(steps "$log.out"); sleep 5; after=$(steps "$log.out")
    if alive "$job" "$r0" "$r1"; then
      outcome="continued"
    else
      outcome="ended"
    fi
  fi
  kill -9 "$job" "$r0" "$r1" 2>/dev/null
  wait "$job" 2>/dev/null
  local rc=$?
  local lines first
  lines=$(grep -v -e '^\s*$' -e '^-----' -e '^mpirun: Forwarding signal' "$log.err")
  first=$(grep -m1 'stateflow' <<< "$lines" | cut -c1-220)
  [ -z "$first" ] && first=$(head -1 <<< "$lines" | cut -c1-220)
  echo "| $name | $cpu_stopped | $outcome | $((after - before)) | $rc | ${first//|/\\|} |"
}

if [ "${SF_DRILLS:-all}" != signals ]; then
  echo "| stop | CPU s of both ranks while stopped | what the job did | steps in the 5 s after SIGCONT | exit | first line on stderr |"
  echo "| --- | ---: | --- | ---: | ---: | --- |"
  for name in job-stopped-10s ctrl-z-10s mpirun-stopped-3s mpirun-stopped; do
    stop_drill "$name"
  done
  echo
fi
[ "${SF_DRILLS:-all}" = stops ] && exit 0

echo "| target | signal | during | all gone after | exit | first line on stderr | last line | checkpoint |"
echo "| --- | --- | --- | ---: | ---: | --- | --- | --- |"
for phase in step checkpoint; do
  for target in rank0 rank1 mpirun; do
    for sig in KILL STOP TERM; do
      drill "$target" "$sig" "$phase"
    done
  done
done
