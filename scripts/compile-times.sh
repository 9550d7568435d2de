#!/usr/bin/env bash
# Where the build's time goes: configures a fresh build directory with a
# compiler launcher that records each object's wall time, builds it with every
# core, and prints the slowest objects and the CPU seconds per target
# (docs/performance.md, "Build and test time").
#
#   bash scripts/compile-times.sh                       # Release, into build-times/
#   bash scripts/compile-times.sh build-times-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
#     "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DSF_SANITIZE=ON -DSF_NATIVE=OFF \
#     -DSF_BUILD_BENCHMARKS=OFF -DSF_CUDA=OFF          # the sanitizer build's flags
#
# The times are wall seconds of each compiler run while the build runs as
# many at once as there are cores: on a shared machine they move by 10-30 %.
set -euo pipefail

if [ "${1:-}" = "--launch" ]; then  # the launcher: --launch LOG compiler args...
  log=$2
  shift 2
  start=$(date +%s.%N)
  status=0
  "$@" || status=$?
  out=""
  for ((i = 1; i <= $#; i++)); do
    if [ "${!i}" = "-o" ]; then j=$((i + 1)); out=${!j}; fi
  done
  echo "$(date +%s.%N) $start $out" >>"$log"
  exit $status
fi

cd "$(dirname "$0")/.."
dir=${1:-build-times}
[ $# -gt 0 ] && shift
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(-DCMAKE_BUILD_TYPE=Release)
if [ -e "$dir" ]; then
  echo "compile-times.sh: $dir exists; the times are of a fresh build, give a new directory" >&2
  exit 2
fi
log=$(realpath -m "$dir/compile-times.log")
launcher="$(pwd)/scripts/compile-times.sh;--launch;$log"
cmake -S . -B "$dir" "${args[@]}" "-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher" \
  "-DCMAKE_CUDA_COMPILER_LAUNCHER=$launcher" >/dev/null
: >"$log"
start=$(date +%s)
cmake --build "$dir" -j "$(nproc)" >"$dir/build.log"
echo "build: $(($(date +%s) - start)) s wall on $(nproc) cores"
awk '{printf "%.1f %s\n", $1 - $2, $3}' "$log" | sort -rn >"$dir/compile-times.txt"
echo "slowest objects (s):"
head -25 "$dir/compile-times.txt"
echo "per target (s, objects):"
awk '{n = split($2, p, "/"); t = p[n - 1]; for (k = n - 1; k > 0; --k) if (p[k] ~ /\.dir$/) { t = p[k]; break }
      s[t] += $1; c[t]++; all += $1}
     END {for (t in s) printf "%8.1f %4d %s\n", s[t], c[t], t; printf "%8.1f %4d all\n", all, NR}' \
  "$dir/compile-times.txt" | sort -rn
