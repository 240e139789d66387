#!/usr/bin/env bash
# Installs the Debian packages strata builds and tests with, then configures and builds it.
# Usage: scripts/setup.sh [--deps-only] [extra cmake -D options...]
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
if [ ${#missing[@]} -gt 0 ]; then
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

cmake -S "$top" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build "$build_dir" -j "$(nproc)"
