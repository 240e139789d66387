# The end-to-end MoE tests' common part, sourced by test_moe_net.sh and test_moe_scale.sh
# after they set run (strata-run) and check (moe_net_check): a seed every case shares
# (STRATA_TEST_SEED to replay one), a scratch folder removed at exit, and case_run, which
# runs one case on simulated nodes and counts it (in a sanitizer build, where that build
# takes it: ../common/case_share.sh). Exits 0 with SKIP where network namespaces cannot be
# made.
. "$(dirname "${BASH_SOURCE[0]}")/../common/case_share.sh"
passed=0 failed=0
seed=${STRATA_TEST_SEED:-$(( $(date +%s) % 100000 ))}
export STRATA_TEST_SEED=$seed
dir=$(mktemp -d /tmp/strata-test-moe-XXXXXX)
log=$dir/log
# A script that ends early still waits for the cases it started (case_drain).
trap 'case_drain; rm -rf "$dir"' EXIT

if ! "$run" -n 1 --nodes 1 -- true >/dev/null 2>&1; then
    echo "SKIP: network namespaces cannot be made here (need root and iproute2)"
    exit 0
fi

# Every rank of every case would discover the machine (seconds each under the sanitizers);
# the tests of topo/ do that. Here a small fixed topology does: the links between the
# simulated nodes are named by STRATA_INTER_IFACE, not found in it. STRATA_TEST_NET_IFACE
# replaces that name (scripts/rdma-check.sh sets it empty: the verbs transport picks the
# RDMA device itself).
topology=$(cd "$(dirname "$0")/../topo/fixtures" && pwd)/no-gpu-no-nic.hwloc.xml

case_run() { # case_run NAME EXPECTED_COUNT PATTERN -- env... -- run options... -- args...
    case_taken || return 0
    log=$dir/log.$case_number # the last case's, once case_drain returned
    case_spawn "$dir/out.$case_number" case_job "$log" "$@"
}

# case_job LOG, then case_run's arguments: one case's job; exits 0 where it passed.
case_job() {
    local log=$1 name=$2 count=$3 pattern=$4; shift 5
    local envs=() opts=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
    while [ "$1" != -- ]; do opts+=("$1"); shift; done; shift
    local start=$SECONDS
    env STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE="${STRATA_TEST_NET_IFACE-eth0}" STRATA_TOPO_FILE="$topology" "${envs[@]}" \
        "$run" --timeout 400 "${opts[@]}" -- "$check" "$@" >"$log" 2>&1
    local rc=$? got over=$count
    got=$(grep -c "$pattern" "$log")
    # Where a case names its transport's line (over=...), every rank must have logged it.
    if [ -n "${over_line:-}" ]; then over=$(grep -c "$over_line" "$log"); fi
    if [ $rc -eq 0 ] && [ "$got" -eq "$count" ] && [ "$over" -ge "$count" ]; then
        echo "ok: $name ($((SECONDS - start)) s)"
    else
        echo "FAIL: $name (exit $rc, $got of $count ranks reported, $over transport lines; seed $seed)"
        tail -40 "$log"
        return 1
    fi
}

ok='steps passed'
# steps N [LEAST]: sanitizer builds (STRATA_TEST_QUICK=1, set by CMake), where a step costs
# over ten times as much, run a third of the steps, at least LEAST (20): every path and both
# parities still run.
steps() {
    local n=$1 least=${2:-20}
    if [ "${STRATA_TEST_QUICK:-0}" = 1 ]; then echo $(( n / 3 > least ? n / 3 : least )); else echo "$n"; fi
}
