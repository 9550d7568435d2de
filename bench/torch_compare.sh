#!/usr/bin/env bash
# The backend against PyTorch on the same model, weights, tokens and thread
# count (docs/performance.md, "The backend against PyTorch"): gdn-small,
# P = 1, M = 1, T = 2048, N = 1, float32, one thread each; tokens/s of a whole
# training step (forward, backward, AdamW) by CPU time (median of 3
# alternating rounds of 4 steps, the first step of a run left out: on a
# shared machine CPU time is what a single-threaded step takes on an idle
# core), and by the fastest wall-clock step beside it.
#
# Debian's torch calls whatever libblas.so.3 the system provides: the
# reference BLAS unless an optimised one is installed. The script measures
# torch with the system's BLAS and, when OpenBLAS is found (installed, or its
# library directory given as SF_OPENBLAS_DIR, e.g. from
# `apt-get download libopenblas0-pthread && dpkg-deb -x ...`), again with
# OpenBLAS, the fair anchor.
#
#   bash bench/torch_compare.sh            # uses build/stateflow
#   bash bench/torch_compare.sh build-native
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
args=(speed --binary "$build/stateflow" --model gdn-small -T 2048 -M 1 -N 1 --steps 4 --rounds 3 --threads 1)

echo "== torch with the system BLAS"
/usr/bin/python3 bench/torch_reference.py "${args[@]}"

openblas=${SF_OPENBLAS_DIR:-/usr/lib/x86_64-linux-gnu/openblas-pthread}
if [ -e "$openblas/libblas.so.3" ]; then
  echo "== torch with OpenBLAS ($openblas)"
  LD_LIBRARY_PATH="$openblas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    /usr/bin/python3 bench/torch_reference.py "${args[@]}"
else
  echo "== no OpenBLAS at $openblas (set SF_OPENBLAS_DIR); torch measured with the system BLAS only"
fi
