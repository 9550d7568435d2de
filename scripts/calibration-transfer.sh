#!/usr/bin/env bash
# The calibration-transfer table of docs/validation.md (issue 28): measured
# runs of the CPU backend for two model sizes, gdn-tiny (4 blocks, hidden
# 64) and gdn-small (6 blocks, hidden 128), P = 2, M = 4, float32, 1F1B and
# StateFlow at N = 1, 4, 16 and T = 512, 1024, 2048 (stateflow validate,
# `rounds` rounds, the fastest round's median step); then calibrate's
#   - length transfer: fit on gdn-tiny's runs of T <= 1024, predict its T 2048;
#   - model transfer: fit on all of gdn-tiny's runs, predict gdn-small's
#     (calibrate --fit none with the fitted preset);
# each beside the CPU preset as given (before); then the same with this
# CPU's measured kernel costs in the cluster (stateflow profile
# --kernel-costs at both models' shapes and chunk lengths): the GEMM rates
# by shape alone (OUT/cpu-gemm.textproto), and with the recurrence core's
# rates (OUT/cpu-kernels.textproto); each fitted with every parameter the
# runs determine and with the tables held as measured (--fit
# efficiency.peak,efficiency.knee_tokens). Prints the
# reports' tables and writes the CSVs and presets into OUT.
#
#   scripts/calibration-transfer.sh [build-dir] [rounds] [out-dir]   # build 3 calibration-out
set -eu
build=${1:-build}
rounds=${2:-3}
out=${3:-calibration-out}
stateflow=$(cd "$build" && pwd)/stateflow
here=$(cd "$(dirname "$0")/.." && pwd)
scenario=$here/scenarios/tiny-train.textproto
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$out"
for model in gdn-tiny gdn-small; do
  if [ ! -s "$out/$model.json" ]; then
    "$stateflow" validate --scenario "$scenario" --model "$model" --policies 1f1b,stateflow \
      --chunks-list 1,4,16 --seq-len-list 512,1024,2048 --rounds "$rounds" --steps 6 \
      --json >"$out/$model.json"
  fi
done
python3 "$here/scripts/validate-to-runs.py" "$out/gdn-tiny.json" --stat min >"$out/gdn-tiny-runs.csv"
python3 "$here/scripts/validate-to-runs.py" "$out/gdn-tiny.json" --stat min --holdout-above 1024 \
  >"$out/gdn-tiny-short-runs.csv"
python3 "$here/scripts/validate-to-runs.py" "$out/gdn-small.json" --stat min >"$out/gdn-small-runs.csv"
echo "== length transfer: fit on gdn-tiny's T <= 1024, predict T 2048"
"$stateflow" calibrate --runs "$out/gdn-tiny-short-runs.csv" --scenario "$scenario" \
  --dtype float32 --out "$out/cpu-tiny-short.textproto"
echo "== fit on all of gdn-tiny's runs"
"$stateflow" calibrate --runs "$out/gdn-tiny-runs.csv" --scenario "$scenario" --dtype float32 \
  --out "$out/cpu-tiny.textproto"
echo "== model transfer, before: gdn-small's runs predicted by the CPU preset as given"
"$stateflow" calibrate --runs "$out/gdn-small-runs.csv" --scenario "$scenario" --model gdn-small \
  --dtype float32 --fit none
echo "== model transfer, after: gdn-small's runs predicted by the preset fitted on gdn-tiny"
"$stateflow" calibrate --runs "$out/gdn-small-runs.csv" --scenario "$scenario" --model gdn-small \
  --dtype float32 --cluster "$out/cpu-tiny.textproto" --fit none
for table in gemm kernels; do
  components=gemm
  [ "$table" = kernels ] && components=gemm,recurrence
  echo "== this CPU's kernel costs ($components), at both models' shapes"
  "$stateflow" profile --scenario "$scenario" --chunks-list 1,4,16 --seq-len-list 512,1024,2048 \
    --kernel-models gdn-small --kernel-components "$components" --kernel-costs "$out/cpu-$table.textproto"
  c=$out/cpu-$table.textproto
  echo "== with the $table table: length transfer, fit on gdn-tiny's T <= 1024, predict T 2048"
  "$stateflow" calibrate --runs "$out/gdn-tiny-short-runs.csv" --scenario "$scenario" \
    --dtype float32 --cluster "$c" --out "$out/cpu-$table-tiny-short.textproto"
  echo "== with the $table table: fit on all of gdn-tiny's runs"
  "$stateflow" calibrate --runs "$out/gdn-tiny-runs.csv" --scenario "$scenario" --dtype float32 \
    --cluster "$c" --out "$out/cpu-$table-tiny.textproto"
  echo "== with the $table table held as measured: fit on all of gdn-tiny's runs"
  "$stateflow" calibrate --runs "$out/gdn-tiny-runs.csv" --scenario "$scenario" --dtype float32 \
    --cluster "$c" --fit efficiency.peak,efficiency.knee_tokens \
    --out "$out/cpu-$table-held-tiny.textproto"
  echo "== with the $table table: gdn-small's runs predicted by the preset fitted on gdn-tiny"
  "$stateflow" calibrate --runs "$out/gdn-small-runs.csv" --scenario "$scenario" --model gdn-small \
    --dtype float32 --cluster "$out/cpu-$table-tiny.textproto" --fit none
  echo "== with the $table table held as measured: gdn-small's runs predicted"
  "$stateflow" calibrate --runs "$out/gdn-small-runs.csv" --scenario "$scenario" --model gdn-small \
    --dtype float32 --cluster "$out/cpu-$table-held-tiny.textproto" --fit none
done
