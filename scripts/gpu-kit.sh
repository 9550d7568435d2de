#!/usr/bin/env bash
# The GPU kit (issue 29): everything a lent GPU machine lacks, in one folder,
# and the run that uses it there.
#
#   bash scripts/gpu-kit.sh build [BUILD_DIR [KIT_DIR]]   # here: builds, packs gpu-kit/
#   SF_KIT_PREBUILT=1 bash scripts/gpu-kit.sh build ...   # packs, builds nothing
#   bash gpu-kit/scripts/gpu-kit.sh run OUTDIR    # there: from the folder alone
#   bash gpu-kit/scripts/gpu-kit.sh run --dry-run OUTDIR   # here, host-grid
#
# build: builds stateflow-cuda and the GPU tests in BUILD_DIR (default build/,
#   configured with SF_CUDA on, as the README's commands configure it) and
#   packs into gpu-kit/ (git-ignored): the stripped binaries; the shared
#   libraries they and Open MPI need beyond the C/C++ runtime (glibc,
#   libstdc++, libgcc_s) and the CUDA toolkit's cuBLAS and NCCL (which the
#   GPU machine has; libcudart is carried, it is small); Open MPI's mpirun
#   with its plugins and help files, and PMIx's, relocated through
#   OPAL_PREFIX and PMIX_LIBDIR; the scenarios, the training text and
#   the scripts of the run. Its last line is the folder's path and size.
#
# run OUTDIR: on the GPU machine (no Debian packages, no network), in well
#   under 8 minutes, every step logged and timed into OUTDIR, a failed step
#   recorded and the next one run:
#     1. the GPU tests (kernels vs host-grid; training vs the CPU, chunked vs
#        unchunked, bf16, two ranks on one GPU through host memory), JUnit XML;
#     2. scripts/gpu-check.sh on the kit's binaries (exactness end to end);
#     3. one- and two-rank training on the GPU (their reports, JSON);
#     4. profile --device cuda of the tiny models;
#     5. validate --device cuda at P = 1 (replayed prediction vs measured);
#     6. the GPU's ceilings (scripts/gpu_ceilings.py: copy bandwidth, GEMM
#        rate) and the kernel table (scripts/gpu_kernel_table.py: cuBLAS GEMMs at the
#        paper layers' shapes and PyTorch's causal SDPA through PyTorch, our
#        cores from the profiled phases); the frameworks' output layer and
#        loss replayed at T = 64K with its peak memory beside the simulator's
#        (scripts/gpu_head_memory.py); this device's kernel-cost tables as
#        cluster files (profile --kernel-costs: the paper models' GEMMs in
#        bf16 and float32, the tiny models' GEMMs and recurrence cores);
#     7. profile --device cuda of one layer of each paper family at the
#        paper's shortest chunk, each bounded in time, and their cores' table;
#   SF_KIT_STEPS="tests check train profiles validate kernels layers" picks
#   groups (default all); SF_KIT_PROFILE_BUDGET the seconds of step 7,
#   SF_KIT_LAYERS="gdn-15b:131072:32 ..." its layers (MODEL:T:N, in order),
#   SF_KIT_LAYER_LIMIT the seconds of each (default 120; its log has every
#   timing step's wall time: profile --verbose);
#   and OUTDIR/summary.md last.
# run --dry-run OUTDIR: the same steps from the same folder with the
#   host-grid device and small sizes, under `env -i` with only the kit's
#   library path (plus the CUDA toolkit's for cuBLAS/NCCL) and every
#   program's loader log checked: a library loaded from outside the kit and
#   the allowed system set fails the run, naming it. tests/tools runs it.
set -uo pipefail

system_lib() {  # libraries the GPU machine has: the C/C++ runtime and CUDA's
  case "$1" in
    linux-vdso.so.*|ld-linux-x86-64.so.*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*) return 0 ;;
    librt.so.*|libutil.so.*|libresolv.so.*|libstdc++.so.*|libgcc_s.so.*) return 0 ;;
    libcuda.so.*|libcublas.so.*|libcublasLt.so.*|libnccl.so.*|libnvidia-*) return 0 ;;
  esac
  return 1
}

build() {
  local src build_dir kit
  src=$(cd "$(dirname "$0")/.." && pwd)
  build_dir=${1:-$src/build}
  kit=${2:-$src/gpu-kit}
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    cmake -S "$src" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
  fi
  if ! grep -q '^SF_HAVE_CUDA:INTERNAL=ON' "$build_dir/CMakeCache.txt" &&
     [ ! -f "$build_dir/stateflow-cuda" ]; then
    echo "gpu-kit build: $build_dir has no CUDA backend (SF_CUDA found no nvcc/NCCL?)" >&2
  fi
  # SF_KIT_PREBUILT=1: pack what BUILD_DIR already holds, building nothing
  # (the CTest, which runs after the build and beside other tests that use
  # the same binaries).
  if [ "${SF_KIT_PREBUILT:-0}" != 1 ]; then
    cmake --build "$build_dir" -j "$(nproc)" --target stateflow-cuda sf_tests_cuda_grid_ops \
      sf_tests_cuda_train >/dev/null || { echo "gpu-kit build: the build failed" >&2; exit 1; }
  fi
  local cuda_tests=$build_dir/tests/backend/cuda
  for f in "$build_dir/stateflow-cuda" "$cuda_tests/sf_tests_cuda_grid_ops" \
           "$cuda_tests/sf_tests_cuda_train"; do
    [ -x "$f" ] || { echo "gpu-kit build: $f was not built" >&2; exit 1; }
  done
  rm -rf "$kit"
  mkdir -p "$kit"/{bin,lib,scripts,text}
  cp "$build_dir/stateflow-cuda" "$cuda_tests/sf_tests_cuda_grid_ops" \
     "$cuda_tests/sf_tests_cuda_train" "$kit/bin/"
  # Open MPI 4's launcher (mpirun is orterun) and daemon, relocated: with
  # OPAL_PREFIX=$kit/ompi it finds its plugins and help files under the kit.
  local ompi_lib=/usr/lib/x86_64-linux-gnu/openmpi/lib
  cp /usr/bin/orterun "$kit/bin/mpirun"
  cp /usr/bin/orted "$kit/bin/orted"
  mkdir -p "$kit/ompi/lib/x86_64-linux-gnu/openmpi/lib" "$kit/ompi/share"
  cp -r "$ompi_lib/openmpi3" "$kit/ompi/lib/x86_64-linux-gnu/openmpi/lib/"
  # Plugins the kit's runs never load (Java, OpenSHMEM, network fabrics a
  # one-node run does not use) stay behind, and with them their libraries.
  rm -f "$kit"/ompi/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_{btl_openib,btl_usnic,btl_ofi,mtl_ofi,mtl_psm,mtl_psm2,pml_ucx,osc_ucx,spml_ucx,atomic_ucx,sshmem_ucx,btl_uct,spml,sshmem,atomic,scoll,memheap}*.so
  cp -r /usr/share/openmpi "$kit/ompi/share/"
  # PMIx (Open MPI's external one), relocated by PMIX_INSTALL_PREFIX.
  local pmix=/usr/lib/x86_64-linux-gnu/pmix2
  mkdir -p "$kit/pmix2/lib"
  cp -r "$pmix/lib/pmix" "$kit/pmix2/lib/"
  [ -d "$pmix/share" ] && cp -r "$pmix/share" "$kit/pmix2/"
  # Debian's PMIx names its plugin folder in this file; the kit's is the
  # relocated default (PMIX_INSTALL_PREFIX/lib/pmix).
  sed -i '/^mca_base_component_path/d' "$kit/pmix2/share/pmix-mca-params.conf" 2>/dev/null
  # Every ELF's libraries, resolved here, beyond the GPU machine's own.
  local elf lib name path
  while IFS= read -r elf; do
    while read -r name _ path _; do
      [ -n "$path" ] && [ "$path" != "not" ] || continue
      system_lib "$name" && continue
      [ -f "$kit/lib/$name" ] || cp -L "$path" "$kit/lib/$name"
    done < <(ldd "$elf" 2>/dev/null | awk '$2 == "=>" {print $1, $2, $3}')
  done < <(find "$kit/bin" "$kit/ompi" "$kit/pmix2" -type f \( -name '*.so*' -o -perm -u+x \) |
           while read -r f; do [ "$(head -c 4 "$f" | tail -c 3)" = ELF ] && echo "$f"; done)
  # libpmix itself sits beside its plugins' prefix.
  [ -f "$kit/lib/libpmix.so.2" ] || cp -L "$pmix/lib/libpmix.so.2" "$kit/lib/"
  find "$kit/bin" "$kit/lib" -type f -exec strip --strip-unneeded {} + 2>/dev/null
  # The run's inputs.
  cp -r "$src/scenarios" "$kit/scenarios"
  cp /usr/share/common-licenses/GPL-3 "$kit/text/GPL-3"
  cp "$src/scripts/gpu-kit.sh" "$src/scripts/gpu-check.sh" "$src/scripts/gpu_kernel_table.py" \
     "$src/scripts/gpu_ceilings.py" "$src/scripts/gpu_head_memory.py" "$kit/scripts/"
  {
    echo "commit: $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
      [ -n "$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null)" ] && echo -dirty)"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(ldd --version | head -1)"
    echo "nvcc: $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | tail -2 | head -1)"
    echo "GPU code: sm_$(sed -n 's/^SF_CUDA_ARCHITECTURES_USED:INTERNAL=//p' "$build_dir/CMakeCache.txt")"
  } > "$kit/VERSION"
  echo "$kit"
  du -sh "$kit" | cut -f1
}

# ---------------------------------------------------------------------------
# run

log() { echo "[gpu-kit $(date +%H:%M:%S)] $*" | tee -a "$OUT/run.log"; }

# want GROUP: whether SF_KIT_STEPS (space-separated groups: tests check
# train profiles layers validate kernels; default all) includes GROUP.
want() { [ -z "${SF_KIT_STEPS:-}" ] || [[ " $SF_KIT_STEPS " == *" $1 "* ]]; }

# step NAME TIMEOUT_S CMD...: runs CMD with its output in OUT/NAME.log,
# records pass/fail/time in the summary; never stops the run.
step() {
  local name=$1 limit=$2; shift 2
  local t0 rc t1
  t0=$(date +%s.%N)
  timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local secs
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  local verdict=passed
  [ $rc -eq 0 ] || verdict="FAILED (exit $rc$([ $rc -eq 124 ] && echo ", timed out at ${limit} s"))"
  echo "| $name | $verdict | $secs |" >> "$OUT/steps.md"
  log "$name: $verdict in $secs s"
  [ $rc -eq 0 ] || tail -5 "$OUT/$name.log" | sed 's/^/    /' | tee -a "$OUT/run.log"
  return 0
}

cuda_lib_dirs() {  # where the GPU machine keeps cuBLAS and NCCL
  local dirs=() d lib found
  local candidates=("${CUDA_HOME:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64 /usr/local/cuda/lib
                    /usr/local/cuda/targets/x86_64-linux/lib)
  for d in /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib \
           /usr/local/lib/python3*/dist-packages/nvidia/*/lib \
           /usr/lib/python3/dist-packages/nvidia/*/lib; do
    [ -d "$d" ] && candidates+=("$d")
  done
  for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    found=
    for d in "${candidates[@]}"; do
      if [ -e "$d/$lib" ]; then found=$d; break; fi
    done
    if [ -n "$found" ] && [[ " ${dirs[*]:-} " != *" $found "* ]]; then dirs+=("$found"); fi
  done
  (IFS=:; echo "${dirs[*]:-}")
}

# The loader's logs of every program of the dry run: each library must come
# from the kit, the allowed system set, or the CUDA toolkit.
check_loader_logs() {
  local bad=0 f prog lib
  for f in "$OUT"/ld/ld.*; do
    [ -f "$f" ] || continue
    prog=$(sed -n 's/.*initialize program: //p' "$f" | head -1)
    case "$prog" in
      *stateflow-cuda*|*sf_tests_cuda*|*mpirun*|*orted*) ;;
      *) continue ;;
    esac
    while read -r lib; do
      case "$lib" in
        "$KIT"/*) continue ;;
      esac
      system_lib "$(basename "$lib")" && continue
      case "$lib" in /usr/local/cuda*) continue ;; esac
      echo "gpu-kit dry run: $prog loaded $lib, from outside the kit" | tee -a "$OUT/run.log"
      bad=1
    done < <(sed -n 's/.*calling init: //p' "$f" | sort -u)
  done
  return $bad
}

run() {
  local dry=0
  if [ "${1:-}" = "--dry-run" ]; then dry=1; shift; fi
  [ $# -eq 1 ] || { echo "usage: gpu-kit.sh run [--dry-run] OUTDIR" >&2; exit 2; }
  KIT=$(cd "$(dirname "$0")/.." && pwd)
  [ -x "$KIT/bin/stateflow-cuda" ] || {
    echo "gpu-kit run: $KIT/bin/stateflow-cuda missing: run this from the kit folder" >&2; exit 2; }
  mkdir -p "$1" || exit 2
  OUT=$(cd "$1" && pwd)
  export KIT OUT
  if [ $dry -eq 1 ] && [ -z "${SF_KIT_INNER:-}" ]; then
    # Only the kit's libraries (and the CUDA toolkit's, which the GPU
    # machine has): a clean environment, every loader logged.
    mkdir -p "$OUT/ld"
    exec env -i HOME="${HOME:-/tmp}" PATH="$KIT/bin:/usr/bin:/bin" SF_KIT_INNER=1 \
      SF_KIT_STEPS="${SF_KIT_STEPS:-}" SF_KIT_PROFILE_BUDGET="${SF_KIT_PROFILE_BUDGET:-170}" \
      LD_LIBRARY_PATH="$KIT/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib" \
      bash "$KIT/scripts/gpu-kit.sh" run --dry-run "$OUT"
  fi
  export PATH="$KIT/bin:$PATH"
  if [ $dry -eq 0 ]; then
    local cuda
    cuda=$(cuda_lib_dirs)
    export LD_LIBRARY_PATH="$KIT/lib${cuda:+:$cuda}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  # Debian's PMIx has absolute install paths: its prefix alone does not move them.
  export OPAL_PREFIX="$KIT/ompi" PMIX_INSTALL_PREFIX="$KIT/pmix2" PMIX_LIBDIR="$KIT/pmix2/lib"
  export PMIX_DATADIR="$KIT/pmix2/share" PMIX_SYSCONFDIR="$KIT/pmix2/share"
  export HWLOC_PLUGINS_PATH="$KIT/hwloc-plugins"  # none: hwloc's own topology discovery
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mca_base_component_show_load_errors=0
  export SF_BINARY_DIR="$KIT/bin" SF_MPIEXEC="$KIT/bin/mpirun"
  rm -f "$OUT/steps.md" "$OUT/run.log"
  local dev=cuda
  [ $dry -eq 1 ] && dev=host-grid
  local sf="$KIT/bin/stateflow-cuda" text="--text $KIT/text/GPL-3"
  local wrap=()
  [ $dry -eq 1 ] && wrap=(env LD_DEBUG=libs LD_DEBUG_OUTPUT="$OUT/ld/ld")
  local t_start
  t_start=$(date +%s)
  log "kit $(head -1 "$KIT/VERSION"), device $dev, out $OUT"
  {
    echo "kit: $(tr '\n' ';' < "$KIT/VERSION")"
    echo "host: $(uname -srm), $(nproc) cores"
    if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
    else
      echo "no GPU visible (nvidia-smi)"
    fi
    echo "LD_LIBRARY_PATH: ${LD_LIBRARY_PATH:-}"
  } 2>&1 | sed "s|$KIT|<kit>|g" > "$OUT/env.txt"

  # 1. The GPU tests (without a GPU each case reports SKIPPED).
  want tests && step gpu-tests-grid-ops 180 "${wrap[@]}" "$KIT/bin/sf_tests_cuda_grid_ops" \
    --gtest_output="xml:$OUT/gpu-tests-grid-ops.xml"
  want tests && step gpu-tests-train 240 "${wrap[@]}" "$KIT/bin/sf_tests_cuda_train" \
    --gtest_output="xml:$OUT/gpu-tests-train.xml"
  # The XML names each test's source by the build machine's path: keep the
  # repository-relative part, so that the files can be committed as they are.
  sed -i -E 's#(file="|message="|CDATA\[|^)/[^"<>:]*/tests/#\1tests/#g' "$OUT"/gpu-tests-*.xml 2>/dev/null

  # 2. gpu-check.sh on the kit's binaries.
  want check && step gpu-check 240 "${wrap[@]}" bash "$KIT/scripts/gpu-check.sh" --bin "$KIT/bin" \
    --device "$dev" --text "$KIT/text/GPL-3" --out "$OUT"

  # 3. One and two ranks training on the one GPU (the two through MPI and
  # host memory: NCCL needs a GPU per rank).
  local T=4096 model=gdn-small
  [ $dry -eq 1 ] && T=256
  want train && step train-1rank 120 "${wrap[@]}" "$sf" train --model "$model" --device "$dev" -T $T -M 4 -N 4 \
    --steps 6 $text --json --trace "$OUT/train-1rank-trace.json"
  cp "$OUT/train-1rank.log" "$OUT/train-1rank.json" 2>/dev/null
  want train && step train-2rank 120 "${wrap[@]}" mpirun -n 2 "$sf" train --model "$model" --device "$dev" \
    --device-link host -P 2 -T $T -M 4 -N 4 --steps 6 $text --json
  cp "$OUT/train-2rank.log" "$OUT/train-2rank.json" 2>/dev/null

  # 4. Profiles of the tiny models (seconds each).
  local tiny
  for tiny in gdn-tiny mamba3-tiny kda-tiny gdn-hybrid-tiny; do
    want profiles || continue
    step "profile-$tiny" 60 "${wrap[@]}" "$sf" profile --model "$tiny" --device "$dev" \
      --repetitions 5 --warmup 2 --out "$OUT/costs-$tiny.textproto"
  done

  # 5. validate at P = 1: the replayed prediction beside the measured step
  # (its runs read the training text from the scenario).
  want validate && sed "s|^train {|train {\n  text_path: \"$KIT/text/GPL-3\"|" "$KIT/scenarios/tiny-train.textproto" \
    > "$OUT/validate-scenario.textproto"
  want validate && step validate-p1 150 "${wrap[@]}" "$sf" validate --scenario "$OUT/validate-scenario.textproto" \
    --device "$dev" -P 1 -M 4 -N 4 --model gdn-small -T "$T" --steps 4 --repetitions 5 --json \
    --costs-out "$OUT/costs-validate.textproto"
  cp "$OUT/validate-p1.log" "$OUT/validate-p1.json" 2>/dev/null

  # 6. The kernel table: PyTorch's cuBLAS GEMMs at the paper layers' shapes
  # (from the presets' ModelSpecs, so they need no profile) and its causal
  # SDPA at the paper's lengths; our cores from the tiny profiles' phases.
  local py=python3 m specs=()
  [ -x /opt/torch/.venv/bin/python3 ] && py=/opt/torch/.venv/bin/python3
  local paper=(gdn-15b mamba3-15b kda-hybrid-15b gdn-3b gdn-32b)
  [ $dry -eq 1 ] && paper=(gdn-small)
  for m in "${paper[@]}"; do
    "$sf" presets --model "$m" > "$OUT/spec-$m.textproto" && specs+=("$OUT/spec-$m.textproto")
  done
  local small=()
  [ $dry -eq 1 ] && small=(--small --gemm-lengths 128 --torch-device cpu --reps 3)
  # The GPU's two ceilings (copy bandwidth, GEMM rate), measured here.
  [ $dry -eq 0 ] && want kernels && step ceilings 90 "$py" "$KIT/scripts/gpu_ceilings.py" --out "$OUT"
  want kernels && step kernel-table 240 "$py" "$KIT/scripts/gpu_kernel_table.py" --out "$OUT" \
    "${small[@]}" --sdpa-lengths 4096,8192,16384,32768 "${specs[@]}" "$OUT"/costs-*.textproto
  # This device's kernel-cost tables as cluster files for --cluster (issue
  # 28): the linear kernel (cuBLAS) in bf16 and float32 at every GEMM of
  # the paper models at T = 64K in N = 8 and 16 chunks (TP 1); and the
  # tiny models' GEMMs and recurrence cores (GDN, Mamba-3) at their lengths.
  # (float32, about ten times slower per FLOP: the 3B and 15B GDN at N = 8 only.)
  local kc_bf16=(-T 65536 --chunks-list 8,16 --model gdn-3b --kernel-models gdn-15b,gdn-32b,mamba3-15b,mamba3-32b)
  local kc_f32=(-T 65536 --chunks-list 8 --model gdn-3b --kernel-models gdn-15b)
  [ $dry -eq 1 ] && kc_bf16=(-T 1024 --chunks-list 4,8 --model gdn-small) && kc_f32=("${kc_bf16[@]}")
  want kernels && step kernel-costs-bf16 90 "${wrap[@]}" "$sf" profile --device "$dev" --dtype bf16 \
    "${kc_bf16[@]}" --kernel-components gemm --repetitions 5 --warmup 2 \
    --kernel-costs "$OUT/cluster-gemm-bf16.textproto"
  want kernels && step kernel-costs-float32 90 "${wrap[@]}" "$sf" profile --device "$dev" \
    --dtype float32 "${kc_f32[@]}" --kernel-components gemm --repetitions 5 --warmup 2 \
    --kernel-costs "$OUT/cluster-gemm-float32.textproto"
  want kernels && step kernel-costs-tiny 90 "${wrap[@]}" "$sf" profile --device "$dev" --dtype float32 \
    --model gdn-tiny --kernel-models mamba3-tiny,gdn-small --chunks-list 1,4,16 \
    --repetitions 5 --warmup 2 --kernel-costs "$OUT/cluster-kernels-tiny-float32.textproto"
  # The frameworks' output layer and loss at T = 64K, V = 50,304 (the 3B's
  # h): torch.cuda.max_memory_allocated beside the simulator's table
  # (issue 28 item 3); the dry run checks the replay's arithmetic only.
  local head_args=(--tokens 65536 --vocab 50304 --hidden 2560)
  [ $dry -eq 1 ] && head_args=(--small --device cpu)
  want kernels && step head-memory 60 "$py" "$KIT/scripts/gpu_head_memory.py" --out "$OUT" \
    "${head_args[@]}"

  # 7. One layer of each paper family at the paper's shortest chunk: T =
  # 128K in N = 32 chunks (s = 4K), P = 1, full (TP 1) layers, float32, one
  # repetition after one warm-up, each bounded in time (the grid kernels
  # are not all tiled: issue 29, item 5). On the first lent H100
  # (2026-11-27) a 15B GDN layer did not finish in 80 s and Mamba-3's
  # workspace ran out of memory; on the H200 (2026-11-28) gdn-3b took 87 s
  # and gdn-15b over 150 s, half of it building the modules on one host
  # thread (since drawn on every core). They come last so that they cannot
  # crowd out the rest.
  local job jobs=("gdn-3b 131072 32" "gdn-15b 131072 32" "mamba3-15b 131072 32"
                  "kda-hybrid-15b 131072 32" "gdn-32b 131072 32")
  [ $dry -eq 1 ] && jobs=("gdn-tiny 512 4" "kda-hybrid-tiny 512 4")
  # SF_KIT_LAYERS="MODEL:T:N ...": other layers, in this order.
  if [ -n "${SF_KIT_LAYERS:-}" ]; then
    jobs=()
    for job in $SF_KIT_LAYERS; do jobs+=("${job//:/ }"); done
  fi
  local tl nl budget=${SF_KIT_PROFILE_BUDGET:-170}
  local p_start
  p_start=$(date +%s)
  for job in "${jobs[@]}"; do
    want layers || continue
    read -r m tl nl <<< "$job"
    if [ $(( $(date +%s) - p_start )) -ge "$budget" ]; then
      echo "| layer-$m | skipped (the profiles' ${budget} s were spent) | 0 |" >> "$OUT/steps.md"
      continue
    fi
    step "layer-$m" "${SF_KIT_LAYER_LIMIT:-120}" "${wrap[@]}" "$sf" profile --model "$m" \
      --device "$dev" -P 1 -M 1 -T "$tl" --chunks-list "$nl" --repetitions 1 --warmup 1 \
      --link in-process --verbose --out "$OUT/layer-$m.textproto"
  done
  if want layers && compgen -G "$OUT/layer-*.textproto" >/dev/null; then
    step kernel-table-layers 60 "$py" "$KIT/scripts/gpu_kernel_table.py" --out "$OUT" \
      --no-torch --name kernel-table-layers "$OUT"/layer-*.textproto
  fi

  if [ $dry -eq 1 ]; then
    step loader-logs 60 bash "$KIT/scripts/gpu-kit.sh" check_loader_logs
    rm -rf "$OUT/ld"
  fi
  {
    echo "# gpu-kit run ($dev), $(date -u +%Y-%m-%dT%H:%M:%SZ), $(( $(date +%s) - t_start )) s"
    echo
    sed 's/^/    /' "$OUT/env.txt"
    echo
    echo "| step | result | seconds |"
    echo "| --- | --- | --- |"
    cat "$OUT/steps.md"
    for x in "$OUT"/gpu-tests-*.xml; do
      [ -f "$x" ] || continue
      echo
      echo "$(basename "$x"): $(grep -o '<testsuites [^>]*' "$x" | grep -o 'tests="[0-9]*"\|failures="[0-9]*"\|disabled="[0-9]*"\|errors="[0-9]*"' | tr '\n' ' ')skipped: $(grep -c '<skipped' "$x")"
      grep -o '<testcase name="[^"]*"[^>]*>\s*<failure' "$x" | sed 's/<testcase name="\([^"]*\)".*/  FAILED: \1/'
    done
    [ -f "$OUT/ceilings.md" ] && { echo; cat "$OUT/ceilings.md"; }
    [ -f "$OUT/kernel-table.md" ] && { echo; cat "$OUT/kernel-table.md"; }
    [ -f "$OUT/kernel-table-layers.md" ] && { echo; cat "$OUT/kernel-table-layers.md"; }
  } > "$OUT/summary.md"
  cat "$OUT/summary.md"
  grep -q FAILED "$OUT/steps.md" && return 1
  return 0
}

case "${1:-}" in
  build) shift; build "$@" ;;
  run) shift; run "$@" ;;
  check_loader_logs) check_loader_logs ;;  # the dry run's own step (KIT, OUT set)
  *) echo "usage: gpu-kit.sh build [BUILD_DIR [KIT_DIR]] | run [--dry-run] OUTDIR" >&2; exit 2 ;;
esac
