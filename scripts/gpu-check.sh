#!/usr/bin/env bash
# The first thing to run on a machine with one or more GPUs: builds the CUDA
# backend, runs the GPU tests, checks exactness end to end on the GPU, and
# profiles and validates a tiny model there. Every check says what it
# compares and the tolerance it holds to; the script stops at the first
# failure with a non-zero exit.
#
#   bash scripts/gpu-check.sh            # build-cuda/, every GPU visible
#   GPUS=2 bash scripts/gpu-check.sh     # P = 2 over NCCL needs 2 GPUs
#   bash scripts/gpu-check.sh --bin gpu-kit/bin --text FILE --out DIR
#       prebuilt binaries (scripts/gpu-kit.sh run): no build, no ctest (the
#       kit runs the GPU tests itself); the profiled table goes to DIR
#   ... --device host-grid               # the same checks without a GPU (the
#       kit's dry run: "GPU" is then the host-grid device)
#
# Tolerances (float64 runs; the GPU's reduction orders differ from the CPU's):
#   GPU tests (ctest -L gpu): each kernel vs the host-grid device, float64
#     < 1e-11 relative, float32 < 1e-4.
#   chunked vs unchunked on the GPU (N = 4 vs N = 1): losses < 1e-9 relative.
#   P = 2 ranks vs one process: losses < 1e-9 relative: over NCCL with 2
#     GPUs, and through host memory over MPI (--device-link host) always.
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

bin= dev=cuda out=. text=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --device) dev=$2; shift 2 ;;
    --text) text=(--text "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "gpu-check: unknown argument '$1' (--bin DIR, --device cuda|host-grid, --text FILE, --out DIR)" >&2
       exit 2 ;;
  esac
done

gpus=0
if [ "$dev" = cuda ]; then
  if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-check: no GPU visible (nvidia-smi -L failed); nothing to check" >&2
    exit 2
  fi
  gpus=${GPUS:-$(nvidia-smi -L | wc -l)}
  echo "gpu-check: $(nvidia-smi -L | head -1) ... ($gpus GPUs)"
else
  echo "gpu-check: on the $dev device (no GPU: a dry run of the same checks)"
fi

if [ -z "$bin" ]; then
  dir=build-cuda
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DSF_CUDA=ON >/dev/null
  cmake --build "$dir" -j "$(nproc)"
  sf="$dir/stateflow-cuda"  # the program with the CUDA backend
  echo "== GPU tests (every kernel vs the host-grid device)"
  (cd "$dir" && ctest -L gpu --output-on-failure)
else
  sf="$bin/stateflow-cuda"
fi
# Every registered family's tiny presets (gdn-tiny, gdn-hybrid-tiny, ...).
mapfile -t tiny < <("$sf" presets | awk '$1 ~ /-tiny$/ {print $1}')

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
run=(train --model gdn-tiny --dtype float64 --steps 5 --json "${text[@]}")

echo "== exactness on the GPU ($dev)"
gpu=$("$sf" "${run[@]}" --device "$dev" | losses)
cpu=$("$sf" "${run[@]}" --device cpu | losses)
same "GPU vs CPU" 1e-9 "$gpu" "$cpu"
for model in "${tiny[@]}"; do
  m3=(train --model "$model" --dtype float64 --steps 5 --json "${text[@]}")
  same "GPU vs CPU, $model" 1e-9 "$("$sf" "${m3[@]}" --device "$dev" | losses)" \
    "$("$sf" "${m3[@]}" --device cpu | losses)"
done
if [ "$dev" = cuda ]; then  # on host-grid this would compare host-grid with itself
  for model in "${tiny[@]}"; do
    b16=(train --model "$model" --dtype bf16 --steps 5 --json "${text[@]}")
    same "bf16 GPU vs host-grid, $model" 1e-2 "$("$sf" "${b16[@]}" --device cuda | losses)" \
      "$("$sf" "${b16[@]}" --device host-grid | losses)"
  done
fi
one=$("$sf" "${run[@]}" --device "$dev" -N 1 | losses)
four=$("$sf" "${run[@]}" --device "$dev" -N 4 | losses)
same "N = 4 vs N = 1 on the GPU" 1e-9 "$four" "$one"
solo=$("$sf" "${run[@]}" --device "$dev" -P 2 | losses)
staged=$(mpirun -n 2 --oversubscribe "$sf" "${run[@]}" --device "$dev" -P 2 --device-link host |
         losses)
same "P = 2 ranks (through host memory) vs one process" 1e-9 "$staged" "$solo"
if [ "$gpus" -ge 2 ]; then
  two=$(mpirun -n 2 "$sf" "${run[@]}" --device cuda -P 2 --device-link nccl | losses)
  same "P = 2 ranks (NCCL) vs one process" 1e-9 "$two" "$solo"
else
  echo "P = 2 ranks over NCCL: skipped (fewer than 2 GPUs)"
fi

echo "== profile and replay on the GPU ($dev)"
"$sf" profile --model gdn-tiny --device "$dev" --out "$out/gpu-check-costs.textproto"
"$sf" simulate --scenario scenarios/tiny-train.textproto --costs "$out/gpu-check-costs.textproto"
echo "gpu-check: passed; the profiled table is $out/gpu-check-costs.textproto"
