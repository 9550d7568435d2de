#!/usr/bin/env bash
# Installs what StateFlow needs from Debian's packages, and nothing that is
# already there. Idempotent: a second run installs nothing and takes a second.
set -euo pipefail

packages=(
  cmake g++ make pkg-config git
  libprotobuf-dev protobuf-compiler
  libboost-program-options-dev
  libeigen3-dev
  libgtest-dev libgmock-dev
  libbenchmark-dev
  libopenmpi-dev openmpi-bin
  # the sanitizer build's compiler (scripts/build.sh --sanitize) and its
  # OpenMP runtime
  clang libomp-dev
  python3 python3-matplotlib
  # `import stateflow` (python/): the module's headers and pybind11
  python3-dev pybind11-dev
  # `pip install .` offline (pyproject.toml, ctest python_pip_install)
  python3-pip python3-setuptools python3-wheel
  # the PyTorch reference of the model (bench/torch_reference.py, ctest
  # torch_reference): about 45 MB to download, 230 MB installed with
  # libtorch1.13 and libtorch-test
  python3-torch
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
