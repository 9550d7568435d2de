#!/usr/bin/env bash
# The main job: install what is missing, build, simulate the default scenario
# (the paper's 3B Gated DeltaNet at 64K tokens on 8 A100s, 1F1B beside
# StateFlow), and draw its pictures into out/: the schedule as a Gantt chart,
# each stage's memory over the step, the paper's Figure 1 (4 stages, 5
# microbatches, N = 4, uniform costs), and, once `stateflow sweep` exists,
# throughput and memory against N and alpha.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# The stateflow program alone: the pictures need only it and Python's
# matplotlib (scripts/test.sh builds the tests, benchmarks and the CUDA
# program too).
bash scripts/build.sh stateflow
# And `import stateflow` (build/python/; docs/python.md), when the build has
# the Python module (Python's headers and pybind11 found).
if cmake --build build --target help 2>/dev/null | grep -q '_stateflow'; then
  cmake --build build -j "$(nproc 2>/dev/null || echo 2)" --target _stateflow
fi

mkdir -p out
./build/stateflow simulate --trace out/default-trace.json

# Debian's python3 has matplotlib (install-deps.sh); a python3 earlier on
# PATH (pyenv, venv) may not.
plots=(/usr/bin/python3 plots/stateflow_plots.py)
pictures=(out/figure1-gantt.png out/default-gantt.png out/default-memory.png)
echo
echo "drawing the pictures of the default scenario into out/"
./build/stateflow simulate --json >out/default-report.json
"${plots[@]}" gantt --trace out/default-trace.json \
  --report out/default-report.json --out out/default-gantt.png
"${plots[@]}" memory --trace out/default-trace.json \
  --report out/default-report.json --out out/default-memory.png
figure1=(-P 4 -M 5 -N 4 --cost-model uniform)
./build/stateflow simulate "${figure1[@]}" --trace out/figure1-trace.json \
  >/dev/null
./build/stateflow simulate "${figure1[@]}" --json >out/figure1-report.json
"${plots[@]}" gantt --trace out/figure1-trace.json \
  --report out/figure1-report.json --dpi 140 --out out/figure1-gantt.png
if ./build/stateflow sweep --help >/dev/null 2>&1; then
  # The paper's N range, unless this sweep cannot take it.
  sweep=(--csv out/default-sweep.csv)
  if ./build/stateflow sweep --help | grep -q -- --chunks-list; then
    sweep+=(--chunks-list 2,4,6,8,16,32)
  fi
  ./build/stateflow sweep "${sweep[@]}"
  "${plots[@]}" sweep --csv out/default-sweep.csv --out out/default-sweep.png
  pictures+=(out/default-sweep.png)
fi

echo
echo "pictures (open them in any image viewer; docs/usage.md explains them):"
for p in "${pictures[@]}"; do echo "  $PWD/$p"; done
