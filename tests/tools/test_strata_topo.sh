#!/usr/bin/env bash
# strata-topo end to end: JSON of each fixture against its golden file (regenerate with
# STRATA_TEST_UPDATE_GOLDEN=1), the human table, and exit codes for bad input.
set -u
topo_bin=$(realpath "$1") fixtures=$(realpath "$2") golden=$(realpath "$3")
passed=0 failed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }
pass() { passed=$((passed + 1)); }
work=$(mktemp -d /tmp/strata-test-topo-XXXXXX)
. "$(dirname "$0")/cli.sh"
trap 'rm -rf "$work"; cli_cleanup' EXIT

# Golden JSON; run from the fixture folder so the recorded description is the bare name.
for f in "$fixtures"/*.xml; do
    name=$(basename "$f")
    if ! (cd "$fixtures" && "$topo_bin" --json --file "$name") >"$work/$name.json" 2>"$work/err"; then
        fail "$name: strata-topo --json failed: $(cat "$work/err")"
        continue
    fi
    if [ "${STRATA_TEST_UPDATE_GOLDEN:-0}" = 1 ]; then
        cp "$work/$name.json" "$golden/$name.json"
    fi
    if diff -u "$golden/$name.json" "$work/$name.json" >"$work/diff"; then
        pass
    else
        fail "$name: JSON differs from golden/$name.json"; cat "$work/diff"
    fi
done

# An NCCL topology overlay (NCCL_TOPO_FILE style) merged onto a file standing in for
# discovery, by --overlay and by STRATA_TOPO_OVERLAY alike.
merged=vm-2gpu-4efa+p5-style-overlay.json
if (cd "$fixtures" && "$topo_bin" --json --file vm-2gpu-4efa.hwloc.xml \
        --overlay overlay/p5-style.nccl.xml) >"$work/$merged" 2>"$work/err"; then
    [ "${STRATA_TEST_UPDATE_GOLDEN:-0}" = 1 ] && cp "$work/$merged" "$golden/$merged"
    diff -u "$golden/$merged" "$work/$merged" && pass || fail "$merged differs from golden"
else
    fail "--overlay failed: $(cat "$work/err")"
fi
(cd "$fixtures" && STRATA_TOPO_OVERLAY=overlay/p5-style.nccl.xml "$topo_bin" --json \
    --file vm-2gpu-4efa.hwloc.xml) >"$work/env.json" 2>&1
cmp -s "$work/env.json" "$work/$merged" && pass || fail "STRATA_TOPO_OVERLAY: $(cat "$work/env.json")"
out=$("$topo_bin" --file "$fixtures/vm-2gpu-4efa.hwloc.xml" --overlay "$fixtures/overlay/p5-style.nccl.xml")
grep -q 'p5-style.nccl.xml: 5 PCI devices without a class, merged by bus id:' <<<"$out" &&
    grep -q '2 GPUs and 4 NICs matched, 1 device not on this machine (first 0000:52:00.0)' <<<"$out" &&
    pass || fail "overlay summary: $out"
# An overlay given as the topology file goes onto live discovery, as NCCL_TOPO_FILE does,
# and says so, instead of showing a machine without GPUs or NICs.
out=$("$topo_bin" --file "$fixtures/overlay/p5-style.nccl.xml" 2>&1)
grep -q '^Topology: .* + overlay .*p5-style.nccl.xml (discovery)' <<<"$out" &&
    grep -q 'p5-style.nccl.xml: 5 PCI devices without a class, merged by bus id' <<<"$out" &&
    pass || fail "overlay as the topology file: $out"
"$topo_bin" --file "$fixtures/vm-2gpu-4efa.hwloc.xml" --overlay "$fixtures/no-gpu-no-nic.hwloc.xml" \
    >"$work/out" 2>"$work/err"
[ $? -eq 1 ] && grep -q 'not an NCCL topology overlay: root element is <topology>' "$work/err" &&
    pass || fail "an hwloc file as overlay: $(cat "$work/err")"

# The table a person reads.
out=$("$topo_bin" --file "$fixtures/nvswitch-8gpu-8nic.nccl.xml")
grep -q '8 GPUs, 8 NICs (8 RDMA, 0 Ethernet), 2 NUMA nodes' <<<"$out" && pass || fail "summary: $out"
grep -Eq '^  GPU0  X +NV18 .* PIX +PXB +NODE +NODE +SYS' <<<"$out" && pass || fail "matrix row: $out"
grep -q 'GPU7   -> NIC7 mlx5_7 (PIX, 2 hops)' <<<"$out" && pass || fail "rail line: $out"
grep -q 'PIX  = through at most one PCIe bridge' <<<"$out" && pass || fail "legend: $out"

# NIC rows beside the GPU rows, and the NIC legend, as nvidia-smi topo -m prints them.
grep -Eq '^  NIC0  PIX +PXB +NODE +NODE +SYS +SYS +SYS +SYS +X +PXB +NODE +NODE +SYS' <<<"$out" &&
    pass || fail "NIC row: $out"
grep -q '^NIC Legend:' <<<"$out" && grep -q '^  NIC7: mlx5_7$' <<<"$out" && pass ||
    fail "NIC legend: $out"

# Within one path class, the GPU nearer by PCIe hops gets the NIC.
out=$("$topo_bin" --file "$fixtures/pxb-depth-2gpu-2nic.nccl.xml")
grep -q 'GPU0   -> NIC1 mlx5_1 (PXB, 4 hops)' <<<"$out" &&
    grep -q 'GPU1   -> NIC0 mlx5_0 (PXB, 3 hops)' <<<"$out" && pass || fail "PXB depth rails: $out"

# IBM POWER9: each GPU's NVLink to its CPU socket in a CPU column.
out=$("$topo_bin" --file "$fixtures/power9-nvlink-cpu.hwloc.xml")
grep -Eq '^  GPU2  SYS +SYS +X +NV3 +SYS +NODE +NV3 ' <<<"$out" && pass || fail "CPU NVLink: $out"
grep -Eq '^  NIC1  SYS +SYS +NODE +NODE +SYS +X +- ' <<<"$out" && pass || fail "CPU column of NICs: $out"

out=$("$topo_bin" --file "$fixtures/no-gpu-no-nic.hwloc.xml")
grep -q 'No GPU found' <<<"$out" && grep -q 'No network device found' <<<"$out" && pass ||
    fail "empty machine not said plainly: $out"

# Live discovery never fails for lack of hardware.
"$topo_bin" >"$work/live" 2>&1 && pass || fail "discovery failed: $(cat "$work/live")"

# Discovery reads the same machine without hwloc's pci component (its linux component finds
# the PCI devices from sysfs): the sanitizer builds' tests run that way (tests/CMakeLists.txt).
env -u HWLOC_COMPONENTS "$topo_bin" --json >"$work/with-pci.json" 2>&1 &&
    HWLOC_COMPONENTS=-pci "$topo_bin" --json >"$work/without-pci.json" 2>&1 &&
    diff -u "$work/with-pci.json" "$work/without-pci.json" >"$work/diff" && pass ||
    fail "discovery without hwloc's pci component differs: $(cat "$work/diff")"

# Exit codes: 1 unreadable topology (one line on stderr), 2 usage.
expect_exit() {
    local want=$1; shift
    "$@" >"$work/out" 2>"$work/err"
    local got=$?
    if [ "$got" -ne "$want" ]; then
        fail "'$*' exited $got, expected $want"
    elif [ "$want" -eq 1 ] && [ "$(wc -l <"$work/err")" -ne 1 ]; then
        fail "'$*' printed more than one error line: $(cat "$work/err")"
    else
        pass
    fi
}
printf '<system><cpu numaid="0"><pci busid="0000:01:00.0" class="0x0302' >"$work/truncated.xml"
printf '<html/>' >"$work/page.xml"
expect_exit 1 "$topo_bin" --file "$work/missing.xml"
expect_exit 1 "$topo_bin" --file "$work/truncated.xml"
expect_exit 1 "$topo_bin" --json --file "$work/page.xml"
expect_exit 1 "$topo_bin" --file "$work"
expect_exit 1 env STRATA_TOPO_FILE="$work/missing.xml" "$topo_bin"
# More PCI nodes than any machine has (under the 64 MiB file limit): a clear error and exit
# 1, not "out of memory" and exit 3.
nccl=$fixtures/nvswitch-8gpu-8nic.nccl.xml
{ sed -n '1,/<system/p' "$nccl"
  for i in $(seq 400); do # each copy in its own PCI domain: no bus id twice
      sed "1,/<system/d; /<\/system>/,\$d; s/busid=\"0000:/busid=\"$(printf %04x "$i"):/g" "$nccl"
  done
  sed -n '/<\/system>/,$p' "$nccl"; } >"$work/many.nccl.xml"
expect_exit 1 "$topo_bin" --file "$work/many.nccl.xml"
grep -q "more than 4096 PCI nodes: too large" "$work/err" && pass ||
    fail "too many PCI nodes: $(cat "$work/err")"
expect_exit 2 "$topo_bin" --bogus
expect_exit 2 "$topo_bin" extra-argument
expect_exit 0 "$topo_bin" --help

# The command line every tool shares (tests/tools/cli.sh): each mistake its own message.
check() { "$@" && pass || fail "${*:1:2}"; }
check cli_version strata-topo "$topo_bin"
check cli_help "$topo_bin" --help
check cli_help "$topo_bin" -h
check cli_usage_error "strata-topo: unknown option '--bogus' (see --help)" "$topo_bin" --bogus
check cli_usage_error "strata-topo: unknown option '-x' (see --help)" "$topo_bin" -x
check cli_usage_error "strata-topo: option '--file' needs a value (see --help)" "$topo_bin" --file
check cli_usage_error "strata-topo: option '-f' needs a value (see --help)" "$topo_bin" -f
check cli_usage_error "strata-topo: option '--json' takes no value (found 'yes') (see --help)" \
    "$topo_bin" --json=yes
check cli_usage_error "strata-topo: unexpected argument 'extra-argument' (see --help)" \
    "$topo_bin" extra-argument

# The machine the README points at, when the shared files are here.
dir=${STRATA_TEST_TOPOLOGY_DIR:-}
if [ -n "$dir" ] && [ -f "$dir/azure-ndv4.nccl.xml" ]; then
    out=$("$topo_bin" --file "$dir/azure-ndv4.nccl.xml")
    grep -q '8 GPUs, 8 NICs' <<<"$out" && pass || fail "azure summary: $out"
    for g in 0 1 2 3 4 5 6 7; do
        grep -Eq "^  GPU$g +-> NIC$g \(PIX, 2 hops\)" <<<"$out" && pass || fail "azure GPU$g rail: $out"
    done
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
