#!/usr/bin/env bash
# Paged and scatter writes (strata_write_paged, strata_write_scatter) under strata-run,
# checked byte for byte by p2p_list_check: tcp on loopback with 1 and 2 rails and small
# chunks; lists far longer than the engine's pools (4 requests); the chaos transport, which
# delays, cuts and reorders every write, so an immediate that overtook its data would be
# caught; 2 simulated nodes (network namespaces; skipped where they cannot be made); and a
# writer or reader killed mid-transfer, the survivor seeing STRATA_ERR_PEER_FAILED within
# the peer timeout and nothing written outside the pages named.
set -u
run=$1 check=$2
passed=0 failed=0 skipped=0
seed=none # engine_cases.sh names it on a failure
log=$(mktemp /tmp/strata-test-p2p-list-XXXXXX)
trap 'rm -rf "$log" "$log".*' EXIT

. "$(dirname "$0")/../inter/engine_cases.sh"

ok='rounds passed'
calm=STRATA_INTER_PEER_TIMEOUT=20s
quick=STRATA_INTER_PEER_TIMEOUT=2s
lo="STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo"
check_case "tcp loopback, 2 ranks" 2 "$ok" -- $calm $lo -- -n 2 --
check_case "tcp loopback, 4 ranks, 2 rails, 4 KiB chunks" 4 "$ok" -- $calm $lo STRATA_INTER_RAILS=2 STRATA_INTER_STRIPE_MIN=4k -- -n 4 -- --page 8192 --pages 256
# About 1000 pages, nearly all apart, through a pool of 4 requests of 2 operations.
check_case "tcp loopback, 2 rails, lists longer than the pools" 2 "$ok" -- $calm $lo STRATA_INTER_RAILS=2 STRATA_INTER_REQUESTS=4 STRATA_INTER_STRIPE_MAX_CHUNKS=2 -- -n 2 -- --pages 2048 --page 512 --rounds 2
check_case "chaos over tcp loopback, 2 rails" 2 "$ok" -- $calm $lo STRATA_INTER_TRANSPORT=chaos:ofi STRATA_INTER_RAILS=2 STRATA_INTER_STRIPE_MIN=4k -- -n 2 -- --page 4096 --pages 128
dead='failed after'
check_case "tcp loopback, the writer killed mid-transfer" 1 "$dead" -- $quick $lo -- -n 2 --allow-fail 0 -- --kill-writer --pages 8192 --page 1024
check_case "tcp loopback, the reader killed" 1 "$dead" -- $quick $lo -- -n 2 --allow-fail 1 -- --kill-reader --pages 8192 --page 1024
if "$run" -n 1 --nodes 1 -- true >/dev/null 2>&1; then
    check_case "tcp, 2 nodes x 1 rank, 2 rails" 2 "$ok" -- $calm STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=eth0 STRATA_INTER_RAILS=2 -- -n 2 --nodes 2 --
    check_case "tcp, 2 nodes x 2 ranks" 4 "$ok" -- $calm STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=eth0 -- -n 4 --nodes 2 --
else
    echo "skipped: network namespaces cannot be made here (need root and iproute2)"
    skipped=$((skipped + 2))
fi
cases_summary
