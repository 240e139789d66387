#!/usr/bin/env bash
# The device-initiated step on CUDA across 2 simulated nodes x 2 ranks sharing one GPU
# (network namespaces, tcp between them; FI_HMEM where libfabric offers it, else the pinned
# host bounce buffer): synchronous steps, stream-ordered steps (on one stream, on a stream
# changing every step, beside a kernel holding most of the GPU), a step captured in a CUDA
# graph and replayed, and an adaptive object's dispatch refused under capture. Skipped
# without a CUDA device or where namespaces cannot be made.
set -u
run=$1 check=$2
if ! "$check" --probe; then
    echo "SKIP: no CUDA device"
    exit 0
fi
if ! "$run" -n 1 --nodes 1 -- true >/dev/null 2>&1; then
    echo "SKIP: network namespaces cannot be made here (need root and iproute2)"
    exit 0
fi
log=$(mktemp /tmp/strata-test-graph-XXXXXX)
trap 'rm -f "$log"' EXIT
failed=0
for memory in auto bounce; do
    STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=eth0 STRATA_INTER_PEER_TIMEOUT=30s \
        STRATA_MOE_NET_MEMORY=$memory "$run" --timeout 300 -n 4 --nodes 2 -- "$check" >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -c 'adaptive capture refusal, passed' "$log")" -eq 4 ]; then
        echo "ok: 2x2 on one GPU, network area $memory: $(grep -o 'network area in [a-z ]*' "$log" | sort -u | tr '\n' ' ')"
    else
        echo "FAIL: 2x2 on one GPU, network area $memory (exit $rc)"; tail -30 "$log"; failed=1
    fi
done
exit $failed
