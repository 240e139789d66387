# Sourced by the case runners of the multi-process test scripts (moe_cases.sh,
# engine_cases.sh). The plain build runs every case. Under the sanitizers (CMake sets
# STRATA_TEST_SANITIZE) each case runs in one of the two sanitizer builds: AddressSanitizer
# takes the odd-numbered cases of a script, ThreadSanitizer the even ones, so that every case
# still runs under a sanitizer in each full run of the suite, at half the cost of both.
# STRATA_TEST_ALL_CASES=1 runs every case in every build.
#
# case_taken: counts a case and says whether this build runs it; where it does not, the
# case is counted as left to the other sanitizer build. case_ran is 1 after a case that
# ran, 0 after one that did not: checks that read a case's log test it first.
case_number=0 cases_left=0 case_ran=0

case_taken() {
    case_number=$((case_number + 1))
    case_ran=1
    [ "${STRATA_TEST_ALL_CASES:-0}" = 1 ] && return 0
    local parity
    case "${STRATA_TEST_SANITIZE:-}" in
        address) parity=1 ;;
        thread) parity=0 ;;
        *) return 0 ;;
    esac
    [ $((case_number % 2)) -eq "$parity" ] && return 0
    case_ran=0 cases_left=$((cases_left + 1))
    return 1
}

# The line a script prints among its counts: how many cases the other sanitizer build runs.
cases_left_line() {
    [ "$cases_left" -gt 0 ] || return 0
    echo "$cases_left cases left to the other sanitizer build (STRATA_TEST_ALL_CASES=1 runs them here)"
}
