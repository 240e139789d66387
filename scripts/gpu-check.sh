#!/usr/bin/env bash
# Builds strata with the GPU backends this machine can compile, then runs what needs a GPU:
# the GPU device tests (copies, and MoE dispatch/combine with 2 and 4 processes sharing the
# GPU through IPC handles, checked against the sequential reference) and strata-bench intra
# on the GPU. Everything else runs in scripts/test.sh. Exits non-zero if a check fails, and
# says so if there is no GPU to check on.
# Usage: scripts/gpu-check.sh [build-dir]     (default: build-gpu)
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build-gpu}
jobs=$(nproc)

options=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
backend=""
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    options+=(-DSTRATA_WITH_CUDA=ON)
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && backend=cuda
fi
if command -v hipcc >/dev/null 2>&1; then
    options+=(-DSTRATA_WITH_HIP=ON)
    [ -z "$backend" ] && [ -e /dev/kfd ] && backend=hip
fi
if [ ${#options[@]} -eq 1 ]; then
    echo "gpu-check: neither nvcc nor hipcc is installed: nothing to check" >&2
    exit 1
fi

echo "=== build $build ${options[*]}"
cmake -S "$top" -B "$build" "${options[@]}" >/dev/null
cmake --build "$build" -j "$jobs"

echo "=== GPU device tests"
(cd "$build" && ctest --output-on-failure -R 'intra/(gpu_device|moe|heap)')
if [ -z "$backend" ]; then
    echo "gpu-check: no GPU found: the GPU tests above were skipped" >&2
    exit 1
fi
# ctest reports a skipped test as passed-with-note; a GPU machine must really run them.
if (cd "$build" && ./tests/test_intra_gpu_device 2>&1 | grep -q SKIPPED); then
    echo "gpu-check: the GPU tests skipped on a machine with a GPU" >&2
    exit 1
fi

if [ -x "$build/tools/strata-bench" ] && command -v mpirun >/dev/null 2>&1; then
    echo "=== strata-bench intra on $backend (2 ranks on one GPU)"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    timeout 300 mpirun --oversubscribe -n 2 "$build/tools/strata-bench" intra --device "$backend"
fi
echo "gpu-check: passed on $backend"
