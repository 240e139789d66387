#!/usr/bin/env bash
# Installs the Debian packages strata builds and tests with, then configures and builds it,
# with the CUDA backend where nvcc (on PATH or in /usr/local/cuda/bin) and an NVIDIA driver
# are present, and the HIP backend where hipcc and /dev/kfd are; it says what it chose.
# Usage: scripts/setup.sh [--deps-only] [extra cmake -D options...]
#        STRATA_SETUP_NO_APT=1 skips the package step (no root, not Debian: see README).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${STRATA_BUILD_DIR:-$top/build}

packages=(
    build-essential cmake pkg-config
    libhwloc-dev libxml2-dev libcmocka-dev libjansson-dev
    libfabric-dev libibverbs-dev libucx-dev
    iproute2 python3             # python3: the tests check the JSON files strata writes
    python3-numpy python3-torch  # the Python package (python/strata), its tests, examples/torch_moe.py
    hipcc                        # compiles the HIP kernels (the CUDA toolkit is not in Debian)
    libopenmpi-dev openmpi-bin   # MPI_Alltoallv, the baseline of strata-bench intra
    clang libclang-rt-dev        # the libFuzzer targets of tests/fuzz (scripts/fuzz.sh)
)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ] && [ "${STRATA_SETUP_NO_APT:-0}" != 1 ]; then
    echo "setup: installing ${missing[*]}"
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo_cmd apt-get update -qq
    $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [ "${1:-}" = "--deps-only" ]; then
    exit 0
fi

# The GPU backends this machine can run (a compiler and a device); "$@" may override them.
gpu_options=()
nvcc_bin=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
if [ -n "$nvcc_bin" ] && { [ -e /dev/nvidiactl ] || nvidia-smi -L >/dev/null 2>&1; }; then
    gpu_options+=(-DSTRATA_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc_bin")
    echo "setup: CUDA backend on ($nvcc_bin, and an NVIDIA driver)"
elif [ -n "$nvcc_bin" ]; then
    echo "setup: CUDA backend off: nvcc is here but no NVIDIA driver (scripts/test.sh still compiles the kernels)"
fi
if command -v hipcc >/dev/null 2>&1 && [ -e /dev/kfd ]; then
    gpu_options+=(-DSTRATA_WITH_HIP=ON)
    echo "setup: HIP backend on (hipcc and /dev/kfd)"
elif command -v hipcc >/dev/null 2>&1; then
    echo "setup: HIP backend off: hipcc is here but no AMD GPU driver (/dev/kfd)"
fi
[ ${#gpu_options[@]} -gt 0 ] || echo "setup: no GPU here: the host backend only"

cmake -S "$top" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${gpu_options[@]}" "$@"
cmake --build "$build_dir" -j "$(nproc)"

# The Python that has numpy and torch: a version manager's python3 may come first on PATH
# without the distribution's packages. build/strata-python links to it, so that the
# README's Python commands run as written.
python_with_torch=""
for candidate in $(type -P -a python3 2>/dev/null) /usr/bin/python3; do
    if [ -x "$candidate" ] && "$candidate" -c "import numpy, torch" >/dev/null 2>&1; then
        python_with_torch=$candidate
        break
    fi
done
if [ -n "$python_with_torch" ]; then
    ln -sfn "$python_with_torch" "$build_dir/strata-python"
    echo "setup: Python with numpy and torch: $python_with_torch (linked as $build_dir/strata-python)"
else
    echo "setup: no python3 here imports numpy and torch (apt-get install python3-numpy python3-torch): the Python examples cannot run"
fi
