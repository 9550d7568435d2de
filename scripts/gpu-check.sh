#!/usr/bin/env bash
# The first thing to run on a machine with one or more GPUs: builds the CUDA
# backend, runs the GPU tests, checks exactness end to end on the GPU, and
# profiles and validates a tiny model there. Every check says what it
# compares and the tolerance it holds to; the script stops at the first
# failure with a non-zero exit.
#
#   bash scripts/gpu-check.sh            # build-cuda/, every GPU visible
#   GPUS=2 bash scripts/gpu-check.sh     # the P = 2 checks need 2 GPUs
#
# Tolerances (float64 runs; the GPU's reduction orders differ from the CPU's):
#   GPU tests (ctest -L gpu): each kernel vs the host-grid device, float64
#     < 1e-11 relative, float32 < 1e-4.
#   chunked vs unchunked on the GPU (N = 4 vs N = 1): losses < 1e-9 relative.
#   P = 2 ranks (NCCL) vs one process: losses < 1e-9 relative.
#   GPU vs CPU, the same run (every family's tiny presets, as
#     `stateflow presets` lists them): losses < 1e-9 relative.
#   bf16 on the GPU vs bf16 on the host-grid device (every tiny family, the
#     same arithmetic with cuBLAS's products in another order): losses
#     < 1e-2 relative (bf16's precision; host-grid's bf16 tracks float32 to
#     about that, docs/backend.md).
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no GPU visible (nvidia-smi -L failed); nothing to check" >&2
  exit 2
fi
gpus=${GPUS:-$(nvidia-smi -L | wc -l)}
echo "gpu-check: $(nvidia-smi -L | head -1) ... ($gpus GPUs)"

dir=build-cuda
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DSF_CUDA=ON >/dev/null
cmake --build "$dir" -j "$(nproc)"
sf="$dir/stateflow-cuda"  # the program with the CUDA backend
# Every registered family's tiny presets (gdn-tiny, gdn-hybrid-tiny, ...).
mapfile -t tiny < <("$sf" presets | awk '$1 ~ /-tiny$/ {print $1}')

echo "== GPU tests (every kernel vs the host-grid device)"
(cd "$dir" && ctest -L gpu --output-on-failure)

losses() {  # the JSON report's losses, one line
  python3 -c 'import json,sys; print(" ".join(repr(x) for x in json.load(sys.stdin)["losses"]))'
}
same() {  # name, tolerance, losses A, losses B
  python3 - "$@" <<'PY'
import sys
name, tol, a, b = sys.argv[1], float(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
assert len(a) == len(b) and a, f"{name}: {len(a)} vs {len(b)} losses"
worst = max(abs(float(x) - float(y)) / max(abs(float(y)), 1e-300) for x, y in zip(a, b))
print(f"{name}: worst relative difference {worst:.2e} (tolerance {tol:.0e})")
sys.exit(0 if worst < tol else 1)
PY
}
run=(train --model gdn-tiny --dtype float64 --steps 5 --json)

echo "== exactness on the GPU"
gpu=$("$sf" "${run[@]}" --device cuda | losses)
cpu=$("$sf" "${run[@]}" --device cpu | losses)
same "GPU vs CPU" 1e-9 "$gpu" "$cpu"
for model in "${tiny[@]}"; do
  m3=(train --model "$model" --dtype float64 --steps 5 --json)
  same "GPU vs CPU, $model" 1e-9 "$("$sf" "${m3[@]}" --device cuda | losses)" \
    "$("$sf" "${m3[@]}" --device cpu | losses)"
done
for model in "${tiny[@]}"; do
  b16=(train --model "$model" --dtype bf16 --steps 5 --json)
  same "bf16 GPU vs host-grid, $model" 1e-2 "$("$sf" "${b16[@]}" --device cuda | losses)" \
    "$("$sf" "${b16[@]}" --device host-grid | losses)"
done
one=$("$sf" "${run[@]}" --device cuda -N 1 | losses)
four=$("$sf" "${run[@]}" --device cuda -N 4 | losses)
same "N = 4 vs N = 1 on the GPU" 1e-9 "$four" "$one"
if [ "$gpus" -ge 2 ]; then
  two=$(mpirun -n 2 "$sf" "${run[@]}" --device cuda -P 2 | losses)
  solo=$("$sf" "${run[@]}" --device cuda -P 2 | losses)
  same "P = 2 ranks (NCCL) vs one process" 1e-9 "$two" "$solo"
else
  echo "P = 2 ranks: skipped (one GPU)"
fi

echo "== profile and validate on the GPU"
"$sf" profile --model gdn-tiny --device cuda --out gpu-check-costs.textproto
"$sf" simulate --model gdn-tiny --costs gpu-check-costs.textproto
echo "gpu-check: passed; the profiled table is gpu-check-costs.textproto"
