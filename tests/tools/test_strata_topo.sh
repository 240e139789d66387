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

# The table a person reads.
out=$("$topo_bin" --file "$fixtures/nvswitch-8gpu-8nic.nccl.xml")
grep -q '8 GPUs, 8 NICs (8 RDMA, 0 Ethernet), 2 NUMA nodes' <<<"$out" && pass || fail "summary: $out"
grep -Eq '^  GPU0  X +NV18 .* PIX +PXB +NODE +NODE +SYS' <<<"$out" && pass || fail "matrix row: $out"
grep -q 'GPU7   -> NIC7 mlx5_7 (PIX)' <<<"$out" && pass || fail "rail line: $out"
grep -q 'PIX  = through at most one PCIe bridge' <<<"$out" && pass || fail "legend: $out"

out=$("$topo_bin" --file "$fixtures/no-gpu-no-nic.hwloc.xml")
grep -q 'No GPU found' <<<"$out" && grep -q 'No network device found' <<<"$out" && pass ||
    fail "empty machine not said plainly: $out"

# Live discovery never fails for lack of hardware.
"$topo_bin" >"$work/live" 2>&1 && pass || fail "discovery failed: $(cat "$work/live")"

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
        grep -Eq "^  GPU$g +-> NIC$g \(PIX\)" <<<"$out" && pass || fail "azure GPU$g rail: $out"
    done
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
