#!/usr/bin/env bash
# Configures and builds StateFlow into build/ (Release), or into build-asan/
# (address and undefined-behaviour sanitizers) with `--sanitize`.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=build
args=(-DCMAKE_BUILD_TYPE=Release)
if [ "${1:-}" = "--sanitize" ]; then
  dir=build-asan
  # -O1 with line tables only: sanitizer reports keep file:line, the build
  # stays quick.
  args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
        -DSF_SANITIZE=ON -DSF_BUILD_BENCHMARKS=OFF)
fi
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$dir" "${args[@]}" >/dev/null
cmake --build "$dir" -j "$jobs"
