#!/usr/bin/env bash
# The checks that need an RDMA device: builds strata with the verbs transport and runs the
# verbs unit tests, the engine matrix (tests/inter/test_engine_verbs.sh) and the MoE matrix
# (tests/scheduler/test_moe_net.sh) with STRATA_INTER_TRANSPORT=verbs, saying what it ran.
# On a machine without an RDMA device it says so and exits 2 without building anything.
# Usage: scripts/rdma-check.sh [extra cmake -D options...]
# STRATA_INTER_IFACE names the device (mlx5_0, or mlx5_0:1 for a port); unset, the verbs
# transport takes the best active port (ConnectX first). STRATA_RDMA_BUILD_DIR (default
# build-rdma) is where it builds.
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${STRATA_RDMA_BUILD_DIR:-$top/build-rdma}

devices=$(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')
if [ -z "$devices" ]; then
    echo "rdma-check: no RDMA device on this machine (/sys/class/infiniband is empty or absent;"
    echo "rdma-check: ibv_get_device_list finds none), so there is nothing to check here."
    echo "rdma-check: run it on a host with a ConnectX (InfiniBand or RoCE) port."
    exit 2
fi
echo "rdma-check: RDMA devices: $devices"

"$top/scripts/setup.sh" --deps-only || exit 1
cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_WITH_VERBS=ON "$@" \
    >/dev/null || exit 1
cmake --build "$build" -j "$(nproc)" >/dev/null || exit 1

probe=$("$build/tools/strata-info" | grep '^  verbs ')
echo "rdma-check: probe:$probe"
if ! grep -q '(score [1-9][0-9]*)$' <<<"$probe"; then
    echo "rdma-check: the verbs transport cannot run on these devices (see the probe line)"
    exit 2
fi

export STRATA_INTER_TRANSPORT=verbs
status=0
echo "=== rdma-check: verbs unit tests and the engine matrix on verbs (ctest)"
(cd "$build" && ctest --output-on-failure -R '^inter/(verbs|verbs_data|engine_verbs)$') || status=1
echo "=== rdma-check: the MoE matrix on verbs (tests/scheduler/test_moe_net.sh)"
# Its simulated nodes are network namespaces on this host; the device is shared by all.
STRATA_TEST_NET_IFACE="${STRATA_INTER_IFACE:-}" \
    "$top/tests/scheduler/test_moe_net.sh" "$build/tools/strata-run" "$build/tests/moe_net_check" \
    "$build/tools/strata-tune" || status=1
if [ $status -eq 0 ]; then
    echo "rdma-check: every check passed on verbs ($devices)"
else
    echo "rdma-check: some checks failed on verbs ($devices): see above"
fi
exit $status
