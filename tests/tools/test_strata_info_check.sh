#!/usr/bin/env bash
# strata-info --check: what a communicator would choose, line by line, on topology files
# whose facts are known by hand (tests/topo/fixtures, and tests/tools/fixtures for a GPU with
# several NICs); exit 1 with the reason where no communicator could be created.
# Usage: test_strata_info_check.sh STRATA_INFO TOPO_FIXTURES TOOLS_FIXTURES
set -u
info=$1
topo_fixtures=$2
tools_fixtures=$3
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The machine's own STRATA_* or launcher settings would change the answers: none of them.
# STRATA_INTER_PROVIDER=tcp makes ofi's probe "asked" (50), above any device a test machine
# may have; STRATA_INTER_IFACE=lo makes its device the same everywhere.
for var in $(compgen -e | grep -E '^(STRATA_|LOCAL_RANK$|LOCAL_WORLD_SIZE$)' | grep -v '^STRATA_TEST_'); do
    unset "$var"
done
run() { # run VAR=VALUE... : stdout in $out, stderr in $err, exit status in $rc
    local errfile
    errfile=$(mktemp)
    out=$(env STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo "$@" "$info" --check 2>"$errfile")
    rc=$?
    err=$(cat "$errfile")
    rm -f "$errfile"
}
has() { # has LINE-REGEX WHAT
    grep -q -- "$1" <<<"$out" || fail "$2: no line matching '$1' in:"$'\n'"$out"$'\n'"$err"
}
status_is() {
    [ "$rc" -eq "$1" ] || fail "$2: exit $rc, expected $1:"$'\n'"$out"$'\n'"$err"
}

# The backend a topology of NVIDIA or AMD GPUs gets: host unless this build has that
# backend and its runtime finds a GPU here (strata-info lists the unusable ones).
backend_for() { # backend_for cuda|hip
    if "$info" | grep -q "^device backends:.* $1\( [^(]\|$\)"; then echo "$1"; else echo host; fi
}
cuda_backend=$(backend_for cuda)
hip_backend=$(backend_for hip)

# No GPU, no NIC: the host backend, one rail on the transport's default device.
run STRATA_TOPO_FILE="$topo_fixtures/no-gpu-no-nic.hwloc.xml"
status_is 0 "no-gpu-no-nic"
has "^topology: $topo_fixtures/no-gpu-no-nic.hwloc.xml (STRATA_TOPO_FILE, hwloc-xml)$" "no-gpu-no-nic"
has '^gpus: 0 (none in the topology)$' "no-gpu-no-nic"
has '^nics: 0 (none in the topology)$' "no-gpu-no-nic"
has '^device backend: host (the topology has no GPU)$' "no-gpu-no-nic"
has '^gpu: none (the topology has no GPU)$' "no-gpu-no-nic"
has '^transport: ofi (auto: STRATA_INTER_PROVIDER=tcp)$' "no-gpu-no-nic"
has '^rails: 1 (no GPU, so no planned NIC' "no-gpu-no-nic"
has '^rail 0: ofi tcp;ofi_rxm lo (STRATA_INTER_IFACE=lo)$' "no-gpu-no-nic"
grep -q '^rail 1' <<<"$out" && fail "no-gpu-no-nic: a second rail"
has '^gpu memory: none (the host backend)$' "no-gpu-no-nic"
has '^communicator: can be created' "no-gpu-no-nic"

# 8 H100 and 8 ConnectX-7, GPUn beside mlx5_n: local rank 5 takes GPU 5 and its NIC.
nv="$topo_fixtures/nvswitch-8gpu-8nic.nccl.xml"
run STRATA_TOPO_FILE="$nv" LOCAL_RANK=5 LOCAL_WORLD_SIZE=8
status_is 0 "nvswitch"
has '^local rank: 5 of 8 (LOCAL_RANK 5, LOCAL_WORLD_SIZE 8)$' "nvswitch"
has '^gpus: 8 (nvidia H100-SXM5-80GB)$' "nvswitch"
has '^nics: 8 (mlx5_0 verbs, mlx5_1 verbs, .*, mlx5_7 verbs)$' "nvswitch"
if [ "$cuda_backend" = host ]; then
    has '^device backend: host (the topology.s GPUs are nvidia, but ' "nvswitch"
    has '^gpu: 5 (0000:ab:00.0 H100-SXM5-80GB; local rank 5 takes the topology.s 8 GPUs in turn)$' \
        "nvswitch"
    has '^rails: 1 (one per NIC: the rail plan gives GPU 5 mlx5_5)$' "nvswitch"
else
    has '^device backend: cuda (the topology.s GPUs are nvidia and the cuda runtime' "nvswitch"
fi
has '^transport: ofi (auto: STRATA_INTER_PROVIDER=tcp)$' "nvswitch"
has '^rail 0: ofi tcp;ofi_rxm lo (STRATA_INTER_IFACE=lo)$' "nvswitch"
has '^progress: \(thread\|caller\) (auto: [0-9]* cores\? for 8 ranks of this node' "nvswitch"

# The planned device, when STRATA_INTER_IFACE does not override it, is named as such: tcp
# offers no mlx5_0, so the rail says it takes the provider's preferred device instead.
run STRATA_TOPO_FILE="$nv" STRATA_INTER_IFACE=
status_is 0 "nvswitch, planned device"
[ "$cuda_backend" = host ] &&
    has '^rail 0: ofi tcp;ofi_rxm [^ ]* (the planned mlx5_0 is not offered by this provider' "planned device"

# A GPU with four EFA devices under its switch: four rails, one per NIC, in plan order.
efa="$tools_fixtures/efa-2gpu-8nic.nccl.xml"
if [ "$cuda_backend" = host ]; then
    run STRATA_TOPO_FILE="$efa" LOCAL_RANK=1 LOCAL_WORLD_SIZE=2
    status_is 0 "efa"
    has '^nics: 8 (rdmap17s0 efa, .*rdmap36s0 efa)$' "efa"
    has '^gpu: 1 (0000:26:00.0 ' "efa"
    has '^rails: 4 (one per NIC: the rail plan gives GPU 1 rdmap33s0, rdmap34s0, rdmap35s0, rdmap36s0)$' \
        "efa"
    for r in 0 1 2 3; do
        has "^rail $r: ofi tcp;ofi_rxm lo (STRATA_INTER_IFACE=lo)$" "efa rail $r"
    done
    grep -q '^rail 4' <<<"$out" && fail "efa: a fifth rail"

    # STRATA_INTER_RAILS overrides the plan's count; out of range, no engine.
    run STRATA_TOPO_FILE="$efa" STRATA_INTER_RAILS=2
    status_is 0 "efa, 2 rails asked"
    has '^rails: 2 (STRATA_INTER_RAILS=2; the rail plan gives GPU 0 rdmap17s0, ' "efa, 2 asked"
    run STRATA_TOPO_FILE="$efa" STRATA_INTER_RAILS=9
    status_is 1 "efa, 9 rails asked"
    has '^engine: none (STRATA_INTER_\* values out of range' "9 rails"
    grep -q '9 rails (1\.\.8)' <<<"$err" || fail "9 rails: no error line naming the range: $err"
fi

# An NCCL topology overlay gives a VM's flat PCIe its switches: the communicator would
# apply it, say so, and GPU1 (local rank 1) would drive the two EFA devices on its switch.
run STRATA_TOPO_FILE="$topo_fixtures/vm-2gpu-4efa.hwloc.xml" \
    STRATA_TOPO_OVERLAY="$topo_fixtures/overlay/p5-style.nccl.xml" LOCAL_RANK=1 LOCAL_WORLD_SIZE=2
status_is 0 "overlay"
has "^topology overlay: $topo_fixtures/overlay/p5-style.nccl.xml (2 GPUs and 4 NICs matched by PCI bus id, 1 of its devices not here)$" "overlay"
has '^nics: 4 (rdmap80s0 efa, rdmap81s0 efa, efa_2 efa, efa_3 efa)$' "overlay"
has '^rails: 2 (one per NIC: the rail plan gives GPU 1 efa_2, efa_3)$' "overlay"

# AMD GPUs: the hip backend where built and runnable, else host, saying why.
run STRATA_TOPO_FILE="$topo_fixtures/amd-xgmi-4gpu.hwloc.xml" LOCAL_RANK=2 LOCAL_WORLD_SIZE=4
status_is 0 "amd"
if [ "$hip_backend" = host ]; then
    has '^device backend: host (the topology.s GPUs are amd, but ' "amd"
    has '^rails: 1 (one per NIC: the rail plan gives GPU 2 mlx5_1)$' "amd"
else
    has '^device backend: hip (' "amd"
fi

# Progress as asked, and auto's caller mode where cores are short for the ranks.
run STRATA_TOPO_FILE="$nv" STRATA_INTER_PROGRESS=thread LOCAL_RANK=0 LOCAL_WORLD_SIZE=100000
has '^progress: thread (STRATA_INTER_PROGRESS=thread)$' "progress asked"
run STRATA_TOPO_FILE="$nv" LOCAL_RANK=0 LOCAL_WORLD_SIZE=100000
has '^progress: caller (auto: [0-9]* cores\? for 100000 ranks of this node, fewer than 2 per rank)$' \
    "progress auto"

# No communicator: exit 1, the reason on the line and again on the last one.
run STRATA_TOPO_FILE="$nv" STRATA_INTER_TRANSPORT=nope
status_is 1 "transport nope"
has '^transport: none (STRATA_INTER_TRANSPORT=nope: no such transport; this build has .*ofi' "nope"
has '^communicator: none (transport: STRATA_INTER_TRANSPORT=nope: no such transport' "nope"

# ofi named: under auto, a build with ucx would take ucx instead of the ofi that cannot run.
run STRATA_TOPO_FILE="$nv" STRATA_INTER_TRANSPORT=ofi STRATA_INTER_PROVIDER=psm9
status_is 1 "provider psm9"
has '^transport: none (.*STRATA_INTER_PROVIDER=psm9, which libfabric does not offer here' "psm9"

run STRATA_TOPO_FILE="$topo_fixtures/no-such-file.xml"
status_is 1 "missing topology file"
has '^topology: none (.*no-such-file.xml' "missing topology file"
has '^communicator: none (topology: ' "missing topology file"

run STRATA_TOPO_FILE="$nv" LOCAL_RANK=8 LOCAL_WORLD_SIZE=8
status_is 1 "local rank out of range"
has '^local rank: none (LOCAL_RANK=8 and LOCAL_WORLD_SIZE=8' "local rank out of range"

"$info" --check --config >/dev/null 2>&1
[ $? -eq 2 ] || fail "--check with --config should exit 2"

[ "$failures" -eq 0 ] || { echo "$failures failed"; exit 1; }
echo "all passed"
