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

# Cases at once. A script that calls case_parallel runs up to STRATA_TEST_CASE_JOBS of its
# cases at a time (default 2; most cases wait on their peers, sockets and timeouts more than
# they compute): case_spawn starts a case's job in the background, and its lines (its
# "ok:"/"FAIL:" line, a failure's log) are printed, and the case counted in passed or
# failed, in the order the cases started, once it and those before it ended. A script must
# call case_drain before it reads a case's log or the counts. case_alone runs one case with
# no other running (a case whose bounds are on time). Without case_parallel, case_spawn
# runs each case before it returns.
case_jobs=1 case_pids=() case_outs=()
declare -A case_status=() # pid -> exit status, once ended

# Needs bash 5.1 (wait -n -p); elsewhere, or with a count that is not a positive integer,
# the cases run one at a time.
case_parallel() {
    local jobs=${STRATA_TEST_CASE_JOBS:-2}

    if [[ "$jobs" =~ ^[1-9][0-9]*$ ]] &&
       { [ "${BASH_VERSINFO[0]}" -gt 5 ] ||
         { [ "${BASH_VERSINFO[0]}" -eq 5 ] && [ "${BASH_VERSINFO[1]}" -ge 1 ]; }; }; then
        case_jobs=$jobs
    else
        echo "cases one at a time (STRATA_TEST_CASE_JOBS=$jobs, bash $BASH_VERSION)"
    fi
}

# case_spawn OUT COMMAND...: COMMAND's exit status says whether the case passed; its output
# goes to the file OUT until it is printed. Where case_jobs cases run, it waits for any to
# end first.
case_spawn() {
    local out=$1 running ended; shift
    while running=($(case_running)) && [ "${#running[@]}" -ge "$case_jobs" ]; do
        wait -n -p ended "${running[@]}"
        case_status[$ended]=$?
        case_print_ended
    done
    "$@" >"$out" 2>&1 &
    case_pids+=("$!") case_outs+=("$out")
    [ "$case_jobs" -gt 1 ] || case_drain
}

# The pids of the cases that have not ended.
case_running() {
    local pid
    for pid in "${case_pids[@]}"; do
        [[ -v case_status[$pid] ]] || echo "$pid"
    done
}

# Prints and counts the cases at the front that ended.
case_print_ended() {
    while [ "${#case_pids[@]}" -gt 0 ] && [[ -v case_status[${case_pids[0]}] ]]; do
        cat "${case_outs[0]}"
        rm -f "${case_outs[0]}"
        if [ "${case_status[${case_pids[0]}]}" -eq 0 ]; then
            passed=$((passed + 1))
        else
            failed=$((failed + 1))
        fi
        unset "case_status[${case_pids[0]}]"
        case_pids=("${case_pids[@]:1}") case_outs=("${case_outs[@]:1}")
    done
}

case_drain() {
    while [ "${#case_pids[@]}" -gt 0 ]; do
        if ! [[ -v case_status[${case_pids[0]}] ]]; then
            wait "${case_pids[0]}"
            case_status[${case_pids[0]}]=$?
        fi
        case_print_ended
    done
}

case_alone() {
    local jobs=$case_jobs

    case_drain
    case_jobs=1
    "$@"
    case_jobs=$jobs
}
