# Sourced by the test scripts of strata-run jobs: check_case runs one job under strata-run
# and counts it (in a sanitizer build, where that build takes it: ../common/case_share.sh).
# Needs run, check, log, seed, passed and failed set by the caller.
# check_case NAME EXPECTED_COUNT PATTERN -- env... -- run options... -- args...
# A case passes when the job exits 0, PATTERN is printed by EXPECTED_COUNT ranks, and no
# transport reports a registration left open or a close that failed.
. "$(dirname "${BASH_SOURCE[0]}")/../common/case_share.sh"
check_case() {
    case_taken || return 0
    case_spawn "$log.out.$case_number" check_job "$log.$case_number" "$@"
}

# check_job LOG, then check_case's arguments: one case's job, its output in LOG; the ranks
# may keep files in the folder STRATA_TEST_CASE_DIR, the case's own. Both are removed at
# the end; exits 0 where it passed.
check_job() {
    local log=$1 name=$2 count=$3 pattern=$4; shift 5
    local envs=() opts=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
    while [ "$1" != -- ]; do opts+=("$1"); shift; done; shift
    local start=$SECONDS
    mkdir -p "$log.d"
    env STRATA_TEST_CASE_DIR="$log.d" "${envs[@]}" "$run" --timeout 120 "${opts[@]}" -- \
        "$check" "$@" >"$log" 2>&1
    local rc=$? got teardown took=$((SECONDS - start))
    rm -rf "$log.d"
    got=$(grep -c "$pattern" "$log")
    teardown=$(grep -c 'registrations still open\|ofi: closing the .* failed\|ucx: .*ucp_mem_unmap\|verbs: closing .* failed' "$log")
    if [ $rc -eq 0 ] && [ "$got" -eq "$count" ] && [ "$teardown" -eq 0 ]; then
        echo "ok: $name (${took} s)"
        rm -f "$log"
    else
        echo "FAIL: $name (exit $rc after ${took} s, $got of $count ranks reported, $teardown teardown errors; seed $seed)"
        grep -v 'error: engine:' "$log" | tail -30
        rm -f "$log"
        return 1
    fi
}

# The last lines of a script of check_case cases: the counts, a "SKIP:" line where cases
# that need network namespaces were skipped and nothing failed (ctest then shows the test
# skipped), and the script's status.
cases_summary() {
    case_drain
    echo "$passed passed, $failed failed, $skipped skipped"
    cases_left_line
    if [ "$failed" -eq 0 ] && [ "$skipped" -gt 0 ]; then
        echo "SKIP: the cases that need network namespaces did not run (need root and iproute2); the other $passed passed"
    fi
    [ "$failed" -eq 0 ]
}
