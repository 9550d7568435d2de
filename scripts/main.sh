#!/usr/bin/env bash
# The main job: install what is missing, build, and simulate the default
# scenario (the paper's 3B Gated DeltaNet at 64K tokens on 8 A100s, 1F1B beside
# StateFlow).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./build/stateflow simulate
