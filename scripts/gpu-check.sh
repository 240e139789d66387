#!/usr/bin/env bash
# Builds strata with the GPU backends this machine can compile, then runs what needs a GPU:
# the GPU device tests (copies, and MoE dispatch/combine with 2 and 4 processes sharing the
# GPU through IPC handles, checked against the sequential reference), the two-tier step on
# the GPU across 2 simulated nodes x 2 ranks (network namespaces, tcp between them, with
# FI_HMEM or the pinned host bounce buffer; synchronous, stream-ordered, and captured in a
# CUDA graph and replayed), and strata-bench intra on the GPU. Everything else runs in
# scripts/test.sh. Exits non-zero if a check fails, and says so if there is no GPU.
# Usage: scripts/gpu-check.sh [build-dir]     (default: build-gpu)
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build-gpu}
jobs=$(nproc)
log=$(mktemp /tmp/strata-gpu-check-XXXXXX)
trap 'rm -f "$log"' EXIT

options=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
backend=""
nvcc_bin=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)

echo "=== versions"
if [ -n "$nvcc_bin" ]; then
    options+=(-DSTRATA_WITH_CUDA=ON)
    toolkit=$("$nvcc_bin" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p')
    echo "CUDA toolkit: $("$nvcc_bin" --version | tail -1)"
    if command -v nvidia-smi >/dev/null 2>&1; then
        if info=$(nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader); then
            echo "GPU: $info"
            driver=$(echo "$info" | head -1 | cut -d, -f2 | tr -d ' ' | cut -d. -f1)
            if [ "${toolkit:-0}" -ge 13 ] && [ "${driver:-0}" -lt 580 ]; then
                echo "gpu-check: driver $driver is too old for CUDA $toolkit (it needs 580 or newer)" >&2
            fi
            if echo "$info" | grep -qi exclusive; then
                echo "gpu-check: compute mode is exclusive-process: several ranks cannot share the GPU" >&2
            fi
            backend=cuda
        else
            echo "gpu-check: nvidia-smi found no GPU" >&2
        fi
    else
        echo "gpu-check: nvidia-smi is missing: no NVIDIA driver here" >&2
    fi
fi
if command -v hipcc >/dev/null 2>&1; then
    options+=(-DSTRATA_WITH_HIP=ON)
    echo "HIP: $(hipcc --version 2>/dev/null | grep -i 'hip version' | head -1)"
    [ -z "$backend" ] && [ -e /dev/kfd ] && backend=hip
fi
if [ ${#options[@]} -eq 1 ]; then
    echo "gpu-check: neither nvcc nor hipcc is installed: nothing to check" >&2
    exit 1
fi

echo "=== build $build ${options[*]}"
cmake -S "$top" -B "$build" "${options[@]}" >/dev/null
cmake --build "$build" -j "$jobs"

echo "=== GPU tests"
status=0
(cd "$build" && ctest --output-on-failure -R 'intra/(gpu_device|moe|heap)|scheduler/moe_graph') \
    >"$log" 2>&1 || status=$?
cat "$log"
if [ -z "$backend" ]; then
    echo "gpu-check: no GPU found: the GPU tests above were skipped" >&2
    exit 1
fi
if [ $status -ne 0 ]; then
    echo "gpu-check: GPU tests failed" >&2
    exit 1
fi
# ctest reports a skipped test as passed-with-note; a GPU machine must really run them.
if grep -E '(gpu_device|moe_graph) .*Skipped' "$log"; then
    echo "gpu-check: GPU tests skipped on a machine with a GPU" >&2
    exit 1
fi

if [ -x "$build/tools/strata-bench" ] && command -v mpirun >/dev/null 2>&1; then
    echo "=== strata-bench intra on $backend (2 ranks on one GPU)"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    timeout 300 mpirun --oversubscribe -n 2 "$build/tools/strata-bench" intra --device "$backend"
fi
echo "gpu-check: passed on $backend"
