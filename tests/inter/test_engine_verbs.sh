#!/usr/bin/env bash
# The transfer engine over the verbs transport (STRATA_INTER_TRANSPORT=verbs), several
# processes on this host, each rail one RC queue pair per peer on the device the transport
# picks (STRATA_INTER_IFACE, e.g. mlx5_0 or mlx5_0:1, to name one): 2 and 4 ranks, 1 and 2
# rails, chunks posted last first, ranks quiet past the peer timeout with heartbeats by
# inject and by send, a rank killed mid-transfer and under a work ring. Where no RDMA device
# can carry it, prints a line starting "SKIP:" and runs nothing (ctest: Skipped).
# Usage: test_engine_verbs.sh STRATA_RUN ENGINE_CHECK STRATA_INFO
set -u
run=$1 check=$2 info=$3
passed=0 failed=0
seed=${STRATA_TEST_SEED:-$(( $(date +%s) % 100000 ))}
export STRATA_TEST_SEED=$seed STRATA_INTER_TRANSPORT=verbs
log=$(mktemp /tmp/strata-test-engine-verbs-XXXXXX)
trap 'rm -rf "$log" "$log".*' EXIT

# The verbs probe, as strata-info reports it: "  verbs  <why> (score N)", or "not built in".
probe=$("$info" 2>/dev/null | grep '^  verbs ')
if [ -z "$probe" ] || ! grep -q '(score [0-9]*)$' <<<"$probe"; then
    echo "SKIP: the verbs transport is not built in (STRATA_WITH_VERBS=OFF, or no libibverbs-dev at configure time)"
    exit 0
fi
why=$(sed -e 's/^  verbs *//' -e 's/ (score [0-9]*)$//' <<<"$probe")
if grep -q '(score 0)$' <<<"$probe"; then
    case $why in
    "no RDMA device"*) echo "SKIP: no RDMA device (ibv_get_device_list found none)" ;;
    *)                 echo "SKIP: the verbs transport cannot run here: $why" ;;
    esac
    exit 0
fi
echo "verbs: $why"

. "$(dirname "$0")/engine_cases.sh"

# STRATA_INTER_TRANSPORT=verbs is exported: an engine that cannot open verbs fails its case.
ok='all checks passed over verbs'
calm=STRATA_INTER_PEER_TIMEOUT=20s
quick=STRATA_INTER_PEER_TIMEOUT=2s
check_case "verbs, 2 ranks" 2 "$ok" -- $calm -- -n 2 --
check_case "verbs, 4 ranks, 2 rails" 4 "$ok" -- $calm STRATA_INTER_RAILS=2 -- -n 4 --
check_case "verbs, 4 ranks, 2 rails, chunks last first" 4 "$ok" -- $calm STRATA_INTER_RAILS=2 STRATA_INTER_STRIPE_MIN=16k STRATA_INTER_CHUNK_ORDER=reverse -- -n 4 --
alive='every peer alive'
check_case "verbs, quiet past the peer timeout, heartbeats by inject" 3 "$alive" -- $quick -- -n 3 -- --idle
check_case "verbs, quiet past the peer timeout, heartbeats by send" 3 "$alive" -- $quick STRATA_INTER_HEARTBEAT_PATH=send -- -n 3 -- --idle
dead='failed after'
check_case "verbs, rank 2 of 3 killed" 2 "$dead" -- $quick -- -n 3 --allow-fail 2 -- --kill 2
check_case "verbs, rank 1 of 3 killed under a work ring" 2 "$dead" -- $quick -- -n 3 --allow-fail 1 -- --kill-ring 1

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
