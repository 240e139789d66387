#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang in build-fuzz/, then runs each one on
# its seed corpus and fuzzes it for SECONDS (0: replay the seeds only). A crash, leak, sanitizer
# report or failed check stops the script; the input is kept in build-fuzz/artifacts/.
# Usage: scripts/fuzz.sh [SECONDS (default 20)] [TARGET...]   (targets: tests/fuzz/fuzz_*.c)
# STRATA_FUZZ_JOBS runs that many fuzzing processes per target (default 1);
# STRATA_FUZZ_TARGETS_AT_ONCE, that many targets at a time (default: the number of cores,
# each target one process).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${STRATA_FUZZ_BUILD_DIR:-$top/build-fuzz}
seconds=${1:-20}
[ $# -gt 0 ] && shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for src in "$top"/tests/fuzz/fuzz_*.c; do
        name=$(basename "$src" .c)
        targets+=("${name#fuzz_}")
    done
fi

if ! command -v clang >/dev/null 2>&1; then
    echo "fuzz: clang is not installed (scripts/setup.sh installs it); fuzzing skipped"
    exit 0
fi

echo "=== build $(basename "$build") (clang, libFuzzer, ASan+UBSan)"
CC=clang cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_BUILD_FUZZ=ON \
    -DSTRATA_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target strata_fuzz

# libfabric's PSM provider loads libinfinipath, whose crash handler would print its own
# backtrace and leave *.btr files: libFuzzer reports crashes itself.
export IPATH_NO_BACKTRACE=1
mkdir -p "$build/artifacts"

# fuzz_one TARGET: runs it into build-fuzz/fuzz_TARGET.log; exits non-zero where it failed.
fuzz_one() {
    local t=$1 bin="$build/tests/fuzz/fuzz_$1" log="$build/fuzz_$1.log" args seeds
    seeds=("$top/tests/fuzz/corpus/$t")
    if [ "$t" = topo_xml ]; then # the topology test files are seeds too
        seeds+=("$top/tests/topo/fixtures" "$top/tests/topo/fixtures/hostile")
    fi
    if [ "$seconds" -eq 0 ]; then
        args=(-runs=0 "${seeds[@]}")
    else
        # New inputs go to build-fuzz/corpus/<target>; the checked-in seeds are only read.
        mkdir -p "$build/corpus/$t"
        args=(-max_total_time="$seconds" "$build/corpus/$t" "${seeds[@]}")
    fi
    if [ "${STRATA_FUZZ_JOBS:-1}" -gt 1 ] && [ "$seconds" -gt 0 ]; then
        args=(-jobs="$STRATA_FUZZ_JOBS" -workers="$STRATA_FUZZ_JOBS" "${args[@]}")
    fi
    # Each target in a folder of its own: libFuzzer's -jobs workers write fuzz-<N>.log there.
    mkdir -p "$build/run/$t"
    (cd "$build/run/$t" && "$bin" -artifact_prefix="$build/artifacts/$t-" \
        -print_final_stats=1 "${args[@]}") >"$log" 2>&1
}

# fuzz_report TARGET STATUS: its line, or its log's end and the script's end where it failed.
fuzz_report() {
    local t=$1 log="$build/fuzz_$1.log"
    echo "=== fuzz $t (${seconds}s)"
    if [ "$2" -ne 0 ]; then
        tail -n 60 "$log"
        echo "fuzz: $t failed; the input is in $build/artifacts/ (log: $log)"
        kill "${pids[@]}" 2>/dev/null # the targets still running: this stage has failed
        wait
        exit 1
    fi
    # (with -jobs the stats are in the workers' logs)
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$log" | tr '\n' ' ' || true
    echo
}

# The oldest target running: waited for and reported.
fuzz_collect() {
    local status=0
    wait "${pids[0]}" || status=$?
    fuzz_report "${names[0]}" "$status"
    pids=("${pids[@]:1}") names=("${names[@]:1}")
}

# Targets a few at a time, reported in order.
at_once=${STRATA_FUZZ_TARGETS_AT_ONCE:-$(nproc)}
pids=() names=()
for t in "${targets[@]}"; do
    if [ "${#pids[@]}" -ge "$at_once" ]; then
        fuzz_collect
    fi
    fuzz_one "$t" &
    pids+=("$!") names+=("$t")
done
while [ "${#pids[@]}" -gt 0 ]; do
    fuzz_collect
done
