#!/usr/bin/env bash
# Builds strata with the GPU backends this machine can compile, then runs what needs a GPU:
# the GPU device tests (copies, and MoE dispatch/combine with 2 and 4 processes sharing the
# GPU through IPC handles, checked against the sequential reference), the Python package on
# device memory (where python3 has numpy: CUDA array interface buffers, a stream of the
# caller's, torch CUDA tensors where torch has CUDA), the two-tier step on
# the GPU across 2 simulated nodes x 2 ranks (network namespaces, tcp between them, with
# FI_HMEM or the pinned host bounce buffer; synchronous, stream-ordered, and captured in a
# CUDA graph and replayed), and strata-bench intra on the GPU: one rank with every expert
# local against the device-to-device copy of the same bytes (the figure that means
# something on one GPU), and 2 and 4 ranks where MPS lets them share it. Everything else
# runs in scripts/test.sh. Exits non-zero if a check fails, and says so if there is no GPU.
# Usage: scripts/gpu-check.sh [--deps BUNDLE] [build-dir]     (default: build-gpu)
#   --deps BUNDLE: a folder of scripts/deps-bundle.sh, for a node without the packages
#   (air-gapped, not Debian, no root): unpacked into a scratch prefix that the build uses.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = --deps ]; then
    [ $# -ge 2 ] || { echo "usage: $0 [--deps BUNDLE] [build-dir]" >&2; exit 2; }
    prefix=$(mktemp -d /tmp/strata-deps-XXXXXX)
    eval "$("$top/scripts/deps-bundle.sh" --install "$2" "$prefix")"
    echo "gpu-check: dependencies from $2, unpacked in $prefix"
    shift 2
fi
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
(cd "$build" && ctest --output-on-failure -R 'intra/(gpu_device|moe|heap)|scheduler/moe_graph|python/device') \
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
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    bench=(intra --device "$backend" --tokens 128,4096 --hidden 7168)
    echo "=== strata-bench intra on $backend: 1 rank, every expert local, hidden 7168, bf16"
    timeout 300 mpirun -n 1 "$build/tools/strata-bench" "${bench[@]}" | tee "$log"
    ratio=$(awk '$1 == 4096 && $2 == "strata/device" {print $6}' "$log" | tr -d x)
    if [ -n "$ratio" ]; then
        awk -v r="$ratio" 'BEGIN { printf "gpu-check: push at 4096 tokens reaches %.2fx of the device copy (target 0.50x): %s\n", r, r >= 0.5 ? "met" : "NOT met" }'
    fi
    # Ranks sharing one GPU time-slice it unless MPS runs: only then do 2 and 4 ranks mean
    # anything.
    if [ "$backend" = cuda ] && command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
        mps=$(mktemp -d /tmp/strata-mps-XXXXXX)
        export CUDA_MPS_PIPE_DIRECTORY=$mps CUDA_MPS_LOG_DIRECTORY=$mps
        if nvidia-cuda-mps-control -d; then
            for n in 2 4; do
                echo "=== strata-bench intra on $backend: $n ranks under MPS"
                timeout 300 mpirun --oversubscribe -n $n "$build/tools/strata-bench" "${bench[@]}" || status=1
            done
            echo quit | nvidia-cuda-mps-control || true
        else
            echo "gpu-check: MPS would not start: no runs of several ranks" >&2
        fi
        rm -rf "$mps"
    else
        echo "gpu-check: no MPS here: no runs of several ranks on the one GPU (they would time-slice it)"
    fi
    [ $status -eq 0 ] || { echo "gpu-check: a benchmark under MPS failed" >&2; exit 1; }
fi
echo "gpu-check: passed on $backend"
