#!/usr/bin/env bash
# Data- and tensor-parallel scaling on this machine's CPU (issue 26,
# docs/backend.md "Data parallelism", "Tensor parallelism"): gdn-small, one
# pipeline stage, a global batch of `batch` sequences of T tokens, trained as
# DP 1 (one process, every core's threads), as DP 2 (mpirun -n 2, each rank
# half the batch and half the threads), plain and with the distributed
# optimizer, and as TP 2 (mpirun -n 2, each rank half of every layer's heads,
# MLP columns and vocabulary, the whole batch, half the threads), alternated
# `rounds` times in one run. Prints each configuration's median tokens/s over the
# rounds (each round's value is train's own: the mean of its steps after
# the first) and the ratio to DP 1 on every core (and DP 1 on one thread,
# the per-core rate DP 2's two ranks each have).
#
#   scripts/measure-dp-scaling.sh [build-dir] [rounds] [steps]   # default: build 3 6
set -eu
build=${1:-build}
rounds=${2:-3}
steps=${3:-6}
stateflow=$(cd "$build" && pwd)/stateflow
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
cores=$(nproc)
batch=8
common=(train --model gdn-small -P 1 -T 512 -N 4 --steps "$steps" --json)
tok() { python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])'; }
declare -A runs
for r in $(seq "$rounds"); do
  runs[dp1]+="$("$stateflow" "${common[@]}" -M "$batch" --threads "$cores" | tok) "
  runs[dp1t1]+="$("$stateflow" "${common[@]}" -M "$batch" --threads 1 | tok) "
  runs[dp2]+="$(mpirun "${root[@]}" --quiet -n 2 "$stateflow" "${common[@]}" -M $((batch / 2)) \
    --data-parallel 2 --threads $((cores / 2 > 0 ? cores / 2 : 1)) | tok) "
  runs[dp2z]+="$(mpirun "${root[@]}" --quiet -n 2 "$stateflow" "${common[@]}" -M $((batch / 2)) \
    --data-parallel 2 --distributed-optimizer on --threads $((cores / 2 > 0 ? cores / 2 : 1)) | tok) "
  runs[tp2]+="$(mpirun "${root[@]}" --quiet -n 2 "$stateflow" "${common[@]}" -M "$batch" \
    --tensor-parallel 2 --threads $((cores / 2 > 0 ? cores / 2 : 1)) | tok) "
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
base=$(echo "${runs[dp1]}" | median)
echo "gdn-small, P = 1, T = 512, N = 4, global batch $batch sequences, $cores cores, median of $rounds rounds of $steps steps"
for k in dp1 dp1t1 dp2 dp2z tp2; do
  m=$(echo "${runs[$k]}" | median)
  case $k in
    dp1) what="DP 1 (1 process, $cores threads)";;
    dp1t1) what="DP 1 (1 process, 1 thread)";;
    dp2) what="DP 2 (mpirun -n 2, M = $((batch / 2)) each)";;
    dp2z) what="DP 2, distributed optimizer";;
    tp2) what="TP 2 (mpirun -n 2, M = $batch, half of each layer)";;
  esac
  awk -v w="$what" -v m="$m" -v b="$base" -v all="${runs[$k]}" \
    'BEGIN { printf "%-44s %10.0f tok/s  x%.2f   (rounds: %s)\n", w, m, m / b, all }'
done
