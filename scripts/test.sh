#!/usr/bin/env bash
# Builds strata and runs the whole test suite three times: a plain build, then under
# AddressSanitizer+UBSan and ThreadSanitizer; then fuzzes (scripts/fuzz.sh). Installs what it
# needs first.
# STRATA_TEST_TOPOLOGY_DIR names the folder of real-machine topology files (optional).
# STRATA_TEST_BAD_INPUTS_DIR names a folder of hostile input files, e.g. hwloc-xml/ (optional).
# STRATA_TEST_SANITIZERS="address thread" (default) chooses the sanitizer builds; "" skips them.
# The multi-process tests' cases alternate between the two sanitizer builds
# (tests/common/case_share.sh); STRATA_TEST_ALL_CASES=1 runs every case in each.
# STRATA_TEST_CASE_JOBS (default 2) is how many cases at once the scripts that allow it run.
# STRATA_FUZZ_SECONDS (default 15) is how long each fuzz target runs after its seed corpus;
# 0 replays the seeds only. Without clang the fuzz stage is skipped with a message.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)

"$top/scripts/setup.sh" --deps-only

# Folders named relative to the repository's parent become absolute: tests run elsewhere.
for var in STRATA_TEST_TOPOLOGY_DIR STRATA_TEST_BAD_INPUTS_DIR; do
    dir=${!var:-}
    [ -n "$dir" ] || continue
    if [ -d "$dir" ]; then
        dir=$(cd "$dir" && pwd)
    else
        echo "test: $dir not found; tests that need it are skipped"
    fi
    export "$var=$dir"
done

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

# A crash, leak or sanitizer report found by a fuzz target fails the run.
if command -v clang >/dev/null 2>&1; then
    "$top/scripts/fuzz.sh" "${STRATA_FUZZ_SECONDS:-15}"
else
    echo "=== fuzz skipped: clang is not installed (scripts/setup.sh installs it)"
fi
