#!/usr/bin/env bash
# Builds strata and runs the whole test suite three times: a plain build, then under
# AddressSanitizer+UBSan and ThreadSanitizer. Installs what it needs first.
# STRATA_TEST_TOPOLOGY_DIR names the folder of real-machine topology files (optional).
# STRATA_TEST_SANITIZERS="address thread" (default) chooses the sanitizer builds; "" skips them.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)

"$top/scripts/setup.sh" --deps-only

if [ -n "${STRATA_TEST_TOPOLOGY_DIR:-}" ]; then
    if [ -d "$STRATA_TEST_TOPOLOGY_DIR" ]; then
        STRATA_TEST_TOPOLOGY_DIR=$(cd "$STRATA_TEST_TOPOLOGY_DIR" && pwd)
    else
        echo "test: $STRATA_TEST_TOPOLOGY_DIR not found; tests that need it are skipped"
    fi
    export STRATA_TEST_TOPOLOGY_DIR
fi

run_suite() {
    local dir=$1; shift
    echo "=== build $(basename "$dir") $*"
    cmake -S "$top" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
    cmake --build "$dir" -j "$jobs"
    echo "=== test $(basename "$dir")"
    (cd "$dir" && ctest --output-on-failure -j "$jobs")
}

# The plain build also compiles the CUDA backend wherever the CUDA toolkit is installed,
# and the HIP backend with hipcc (which setup.sh installs).
gpu_options=()
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    gpu_options+=(-DSTRATA_WITH_CUDA=ON)
fi
if command -v hipcc >/dev/null 2>&1; then
    gpu_options+=(-DSTRATA_WITH_HIP=ON)
fi
run_suite "$top/build" "${gpu_options[@]}"
for sanitizer in ${STRATA_TEST_SANITIZERS-address thread}; do
    run_suite "$top/build-$sanitizer" -DSTRATA_SANITIZE="$sanitizer"
done
