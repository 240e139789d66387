#!/usr/bin/env bash
# examples/moe_layer on one node (2 ranks) and on 2 simulated nodes x 2 ranks (skipped where
# network namespaces cannot be made), the latter also with STRATA_MOE_MODE=adaptive: every
# rank's output must match the one-rank layer.
set -u
run=$1 layer=$2
failed=0
check() { # check RANKS [strata-run options...]
    local ranks=$1; shift
    local out
    out=$("$run" --timeout 300 -n "$ranks" "$@" -- "$layer" 2>&1)
    if [ $? -eq 0 ] && [ "$(grep -c 'match the one-rank layer' <<<"$out")" -eq "$ranks" ]; then
        echo "ok: $ranks ranks $* ${STRATA_MOE_MODE:+(mode $STRATA_MOE_MODE)}"
    else
        echo "FAIL: $ranks ranks $* ${STRATA_MOE_MODE:+(mode $STRATA_MOE_MODE)}"; echo "$out" | tail -20; failed=1
    fi
}
check 2
if "$run" -n 1 --nodes 1 -- true >/dev/null 2>&1; then
    STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=eth0 check 4 --nodes 2
    STRATA_MOE_MODE=adaptive STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=eth0 check 4 --nodes 2
else
    echo "skipped: 2 nodes (network namespaces cannot be made here)"
fi
exit $failed
