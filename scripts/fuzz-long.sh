#!/usr/bin/env bash
# The long fuzz run of issue 14 (docs/reliability.md, "The fuzzer"): the
# fuzzer of tests/tools/fuzz_test.cc with far more inputs than CI gives it.
# In-process kinds (scenarios, plans, cost tables, cluster files) get
# SF_FUZZ_INPUTS each (default 1,000,000), calibration CSVs a fifth of it
# (a fit simulates every run up to 20 times); the kinds that start the binary, a
# process per input, get fewer (flags of the simulator commands: 5,000; flags
# of train, validate, profile and presets, which start MPI work: 2,000).
# Each kind runs niced, under /usr/bin/time, and prints its outcome line
# (inputs, ok / exit 0, error with a message / exit 2 with one line,
# anything else, seconds), its wall and CPU time and peak memory.
#
#   bash scripts/fuzz-long.sh [build-dir]          # default build/
#   SF_FUZZ_INPUTS=100000 SF_FUZZ_SEED=2 bash scripts/fuzz-long.sh
#   SF_FUZZ_KINDS='Scen Plans' bash scripts/fuzz-long.sh   # only some kinds
#
# Exit code 0 when every kind found nothing, 1 otherwise (the failing
# inputs are in the log, <build-dir>/fuzz-long.log).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
binary="$build/tests/tools/sf_tests_fuzz"
if [ ! -x "$binary" ]; then
  echo "fuzz-long: $binary missing: cmake --build $build --target sf_tests_fuzz stateflow" >&2
  exit 2
fi
export SF_FUZZ_INPUTS=${SF_FUZZ_INPUTS:-1000000}
export SF_FUZZ_FLAG_INPUTS=${SF_FUZZ_FLAG_INPUTS:-5000}
export SF_FUZZ_MPI_FLAG_INPUTS=${SF_FUZZ_MPI_FLAG_INPUTS:-2000}
export SF_FUZZ_SEED=${SF_FUZZ_SEED:-1}
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
log="$build/fuzz-long.log"
: > "$log"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "fuzz-long: commit $commit, seed $SF_FUZZ_SEED, $SF_FUZZ_INPUTS per in-process kind," \
     "$SF_FUZZ_FLAG_INPUTS simulator flag inputs, $SF_FUZZ_MPI_FLAG_INPUTS MPI-command flag inputs;" \
     "$(nproc --all) cores, load $(cut -d' ' -f1 /proc/loadavg)" | tee -a "$log"

status=0
for kind in ${SF_FUZZ_KINDS:-Scenarios Plans CostTables ClusterFiles CalibrationCsvs Flags MpiCommandFlags}; do
  filter="Fuzz.${kind}*"
  [ "$kind" = Flags ] && filter='Fuzz.FlagsEnd*'
  out=$(nice -n 10 /usr/bin/time -f 'time: %e s wall, %U s user, %M KiB peak' \
        "$binary" --gtest_filter="$filter" 2>&1)
  code=$?
  echo "$out" >> "$log"
  echo "$out" | grep -E '^fuzz |^time:|^  [a-z]+: [0-9]+ inputs'
  if [ $code -ne 0 ] || ! echo "$out" | grep -q '^fuzz '; then
    echo "fuzz-long: $kind FAILED (exit $code; see $log)"
    status=1
  fi
done
echo "fuzz-long: done, exit $status (log: $log)"
exit $status
