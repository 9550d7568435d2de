#!/usr/bin/env bash
# Configures and builds StateFlow into build/ (Release), or into build-asan/
# (address and undefined-behaviour sanitizers) with `--sanitize`; every
# target, or only the targets named after the options:
#
#   scripts/build.sh                  # everything (the tests' build)
#   scripts/build.sh stateflow        # the command line alone (main.sh)
#   scripts/build.sh --sanitize
set -euo pipefail
cd "$(dirname "$0")/.."

dir=build
args=(-DCMAKE_BUILD_TYPE=Release)
sanitize=0
if [ "${1:-}" = "--sanitize" ]; then
  sanitize=1
  shift
fi
targets=()
for t in "$@"; do targets+=(--target "$t"); done
if [ "$sanitize" = 1 ]; then
  dir=build-asan
  # -O1 with line tables only: sanitizer reports keep file:line, the build
  # stays quick.
  # Portable (no -march=native): the sanitizers look for memory and
  # undefined-behaviour errors, which do not depend on the vector width, and
  # the portable build compiles faster (docs/backend.md, "Known issues", on
  # what a native sanitizer build once found).
  args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
        -DSF_SANITIZE=ON -DSF_NATIVE=OFF -DSF_BUILD_BENCHMARKS=OFF
        # The CUDA build is compiled once, in build/ (nvcc's host code is not
        # sanitized, and there is no GPU here to run it).
        -DSF_CUDA=OFF
        # The Python module is built once, in build/ (a sanitized module cannot
        # load into the unsanitized interpreter).
        -DSF_PYTHON=OFF)
  # Compiled by clang when it is there (scripts/install-deps.sh installs it):
  # the same sanitizers, in about two thirds of GCC's time for this build
  # (its -O0 test code in under half; docs/performance.md, "Build and test
  # time (CI)"), with LLVM's OpenMP runtime.
  if command -v clang++ > /dev/null; then
    args+=(-DCMAKE_CXX_COMPILER=clang++)
    # A build-asan/ configured with another compiler is configured afresh.
    if [ -f "$dir/CMakeCache.txt" ] &&
       ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$dir/CMakeCache.txt"; then
      rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
    fi
  fi
fi
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$dir" "${args[@]}" >/dev/null
cmake --build "$dir" -j "$jobs" "${targets[@]}"
