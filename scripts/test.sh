#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test: first the Release
# build, then the sanitizer build (address + undefined). Set SF_SKIP_SANITIZE=1
# to run only the first.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bash scripts/install-deps.sh

bash scripts/build.sh
(cd build && ctest --output-on-failure -j 2)

if [ "${SF_SKIP_SANITIZE:-0}" != "1" ]; then
  bash scripts/build.sh --sanitize
  # Open MPI's own allocations are not ours: leak checks off, everything else on.
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  (cd build-asan && ctest --output-on-failure -j 2 -LE slow)
fi
