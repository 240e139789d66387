#!/usr/bin/env bash
# A weight transfer plan (strata_transfer_plan_*) under strata-run, checked byte for byte by
# transfer_check: 2 trainer ranks to 2 inference ranks, three rounds, on tcp over loopback
# with 1 and 2 rails; between 2 simulated nodes, trainers on one and inference ranks on the
# other (network namespaces; skipped where they cannot be made); and a trainer killed at
# the start of a round, the inference ranks' waits ending with STRATA_ERR_PEER_FAILED; and,
# under the chaos transport, a round given up at its deadline whose sources are overwritten
# at once: none of what they were overwritten with lands.
set -u
run=$1 check=$2
passed=0 failed=0 skipped=0
seed=none # engine_cases.sh names it on a failure
log=$(mktemp /tmp/strata-test-transfer-XXXXXX)
trap 'rm -rf "$log" "$log".*' EXIT

. "$(dirname "$0")/../inter/engine_cases.sh"

ok='3 rounds passed'
calm=STRATA_INTER_PEER_TIMEOUT=20s
lo="STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo"
check_case "tcp loopback, 2 trainers -> 2 inference ranks" 4 "$ok" -- $calm $lo -- -n 4 --
check_case "tcp loopback, 2 rails, 8 KiB chunks" 4 "$ok" -- $calm $lo STRATA_INTER_RAILS=2 STRATA_INTER_STRIPE_MIN=8k -- -n 4 --
check_case "tcp loopback, a trainer killed" 2 "failed after" -- STRATA_INTER_PEER_TIMEOUT=2s $lo -- -n 4 --allow-fail 0 -- --kill-trainer
check_case "chaos over tcp loopback, a round given up after 1 ms, its sources overwritten" 4 "late round passed" -- $calm $lo STRATA_INTER_TRANSPORT=chaos:ofi STRATA_CHAOS_DELAY=50ms STRATA_INTER_STRIPE_MIN=64k -- -n 4 -- --late-writes
if "$run" -n 1 --nodes 1 -- true >/dev/null 2>&1; then
    check_case "tcp, 2 nodes x 2 ranks (trainers on one node)" 4 "$ok" -- $calm STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=eth0 -- -n 4 --nodes 2 --
else
    echo "skipped: network namespaces cannot be made here (need root and iproute2)"
    skipped=$((skipped + 1))
fi
cases_summary
