#!/usr/bin/env bash
# strata-tune scale: the default run prints a table per token count with both routes at every
# EP size, labelled as modelled; a policy file's figures reach a hand-computed row; a topology
# file gives the ranks per node and the busiest NIC's share; usage errors exit 2 naming the
# mistake, unreadable files exit 1.
#   test_strata_tune_scale.sh STRATA-TUNE FIXTURES          the checks on the repository's files
#   test_strata_tune_scale.sh STRATA-TUNE FIXTURES shared   real machines' files from
#       STRATA_TEST_TOPOLOGY_DIR; exit 77 (skipped) when it is not set
set -u
tune=$1
fixtures=$2
fail() { echo "FAIL: $*"; exit 1; }

dir=$(mktemp -d) || fail "mktemp -d"
trap 'rm -rf "$dir"' EXIT

if [ "${3:-}" = shared ]; then
    tdir=${STRATA_TEST_TOPOLOGY_DIR:-}
    if [ -z "$tdir" ] || [ ! -f "$tdir/aws-p4d.24xlarge.nccl.xml" ]; then
        echo "SKIP: needs STRATA_TEST_TOPOLOGY_DIR with aws-p4d.24xlarge.nccl.xml"
        exit 77
    fi
    # p4d.24xlarge: 8 GPUs, 4 EFA NICs: two GPUs' traffic on each NIC.
    out=$("$tune" scale --topology "$tdir/aws-p4d.24xlarge.nccl.xml" --ep 64,256) ||
        fail "p4d exited $?: $out"
    grep -q "8 ranks per node; the busiest NIC carries 2.00 ranks' traffic" <<<"$out" ||
        fail "p4d's fabric: $out"
    # The same rows as 8 ranks per node and 4 NICs given by hand.
    hand=$("$tune" scale --ranks-per-node 8 --nics-per-node 4 --ep 64,256) || fail "hand: $?"
    diff <(grep '^|' <<<"$out") <(grep '^|' <<<"$hand") >/dev/null ||
        fail "p4d's rows differ from 8 ranks and 4 NICs per node"
    echo "PASS (shared topologies)"
    exit 0
fi

# --- the default run: two tables, both routes at EP 8..256, node-reduce only hierarchical ---
out=$("$tune" scale) || fail "scale exited $?"
grep -q "^# strata-tune scale: MODELLED, not measured" <<<"$out" || fail "no 'modelled' label: $out"
[ "$(grep -c '^## ' <<<"$out")" -eq 2 ] || fail "expected 2 tables: $out"
grep -q "^## 128 tokens per rank, dispatch bf16 (entry 14384 bytes)" <<<"$out" || fail "decode: $out"
grep -q "^## 4096 tokens per rank, dispatch bf16" <<<"$out" || fail "prefill: $out"
for ep in 8 16 32 64 256; do
    for route in flat hier; do
        [ "$(grep -c "^| $ep | [0-9]* | $route |" <<<"$out")" -eq 2 ] ||
            fail "EP $ep $route: not one row per table: $out"
    done
done
bad=$(awk -F'|' '/^\| [0-9]/ { if (NF != 15) print "columns: " $0
                                if ($4 ~ /flat/ && $10 !~ /-/) print "flat node-reduce: " $0
                                if ($4 ~ /hier/ && $10 ~ /-/) print "hier node-reduce: " $0
                                if ($4 ~ /flat/ && $13 !~ /-/) print "flat node-reduce GiB: " $0
                                if ($12 + 0 <= 0) print "no memory: " $0
                                if ($14 + 0 <= 0) print "no streamed memory: " $0
                                if ($2 == 8 && $7 + 0 != 0) print "EP8 bytes: " $0 }' <<<"$out")
[ -z "$bad" ] || fail "$bad"
# The memory columns are the library's sizing function: strata-info --moe-memory's total
# for the same object (EP64 prefill, capacity 2 x 4096 x 64 x 8 / 256 = 16384 rows).
info=$(dirname "$tune")/strata-info
# The last column is the streamed exchange's (exact combine), below the worst case's.
for combine in exact node-reduce streamed; do
    total=$("$info" --moe-memory --world 64 --nodes 8 --max-tokens 4096 --hidden 7168 --topk 8 \
        --experts 256 --capacity 16384 --route hierarchical \
        --combine $([ $combine = node-reduce ] && echo node-reduce || echo exact) \
        --exchange $([ $combine = streamed ] && echo streamed || echo worst-case) |
        awk '/^total:/ {printf "%.2f", $2 / 2^30}') || fail "strata-info --moe-memory: $?"
    column=$(case $combine in exact) echo 12;; node-reduce) echo 13;; *) echo 14;; esac)
    got=$("$tune" scale --ep 64 --tokens 4096 | awk -F'|' -v c=$column '/^\| 64 \| 8 \| hier/ {print $c + 0}')
    [ "$got" = "$total" ] || fail "EP64 prefill $combine: $got GiB, strata-info says $total"
    [ $combine = exact ] && exact_gib=$got
    [ $combine = streamed ] && streamed_gib=$got
done
awk -v a="$streamed_gib" -v b="$exact_gib" 'BEGIN {exit !(a < b / 3)}' ||
    fail "streamed ($streamed_gib GiB) is not below a third of worst-case ($exact_gib GiB)"
half=$("$tune" scale --ep 64 --tokens 4096 --capacity-factor 1 | awk -F'|' '/^\| 64 \| 8 \| hier/ {print $12 + 0}')
awk -v a="$half" -v b="$exact_gib" 'BEGIN {exit !(a < b)}' ||
    fail "capacity factor 1 ($half GiB) is not below factor 2 ($exact_gib GiB)"
# fp8 entries: 48 + 7168 + 224 bytes.
"$tune" scale --dtype bf16,fp8 --tokens 128 | grep -q "^## 128 tokens per rank, dispatch fp8 (entry 7440 bytes)" ||
    fail "no fp8 table"

# --- a policy file's figures reach the model: 2 nodes of 2 ranks, hand-computed -------------
# top-2 of 8 experts, 10 tokens, hidden 128 bf16 (entries 16 + 256 bytes), round one 4.
# Links: NIC 1 GB/s, intra 2 GB/s, one-way trips 1 us across (round trip 2) and 0.5 inside.
# Flat: 2 peers x 10 x 13/28 = 4.64 tokens each (> 4: three trips); dispatch
# 3 + 9.2857 x 272 / 1000 + 0.5 + 20 x 256 / 2000 = 8.59 us; exact combine: 10 terms of 256
# bytes: 0.5 + 2.56 + 1 + 2.56 = 6.62 us. Hier: 1 peer x 10 x 22/28 = 7.86 tokens;
# dispatch 3 + 2.137 + 0.5 + 2.56 = 8.20 us; node-reduce 7.857 x (8 + 256) bytes:
# 0.5 + 2.56 + 2 + 2.074 = 7.13 us.
cat >"$dir/p.json" <<'EOF'
{"format": "strata-policy", "version": 1,
 "model": {"intra": {"push": {"alpha_us": 0, "beta_GBps": 2}, "pull_rtt_us": 1},
           "inter": {"push": {"alpha_us": 0, "beta_GBps": 1}, "pull_rtt_us": 2}}}
EOF
hand=(scale --policy "$dir/p.json" --ranks-per-node 2 --nics-per-node 2 --ep 4 --experts 8
      --topk 2 --tokens 10 --hidden 128 --spec-tokens 4)
out=$("$tune" "${hand[@]}") || fail "hand-computed case exited $?: $out"
grep -qF "| 4 | 2 | flat | 4.6 | 8.6 | 0.00 | 6.6 | 0.00 | - | - |" <<<"$out" || fail "flat row: $out"
grep -qF "| 4 | 2 | hier | 7.9 | 8.2 | 0.00 | 6.6 | 0.00 | 7.1 | 0.00 |" <<<"$out" || fail "hier row: $out"
# --nic-gbps replaces the policy's NIC: 4 Gb/s is 0.5 GB/s, dispatch 3 + 4.27 + 3.06 = 10.3 us.
out=$("$tune" "${hand[@]}" --nic-gbps 4) || fail "--nic-gbps exited $?"
grep -qF "| 4 | 2 | hier | 7.9 | 10.3 |" <<<"$out" || fail "--nic-gbps 4: $out"

# --- topology files: ranks per node and the busiest NIC ------------------------------------
out=$("$tune" scale --topology "$fixtures/shared-4nic-8gpu.hwloc.xml" --ep 16) || fail "4 NICs: $?"
grep -q "8 ranks per node; the busiest NIC carries 2.00 ranks' traffic" <<<"$out" || fail "4 NICs: $out"
out=$("$tune" scale --topology "$fixtures/vm-2gpu-4efa.hwloc.xml" --ep 4) || fail "2 GPUs: $?"
grep -q "2 ranks per node; the busiest NIC carries 0.50 ranks' traffic" <<<"$out" || fail "2 GPUs: $out"

# --- errors --------------------------------------------------------------------------------
expect() { # CODE TEXT ARGS...: exits CODE, one line on stderr containing TEXT, nothing on stdout
    local code=$1 text=$2 err rc
    shift 2
    err=$("$tune" "$@" 2>&1 >"$dir/stdout")
    rc=$?
    [ $rc -eq "$code" ] || fail "$*: exit $rc, expected $code: $err"
    grep -qF -- "$text" <<<"$err" || fail "$*: expected '$text': $err"
    [ ! -s "$dir/stdout" ] || fail "$*: wrote to stdout: $(cat "$dir/stdout")"
}
expect 2 "EP 12 is not a whole number of 8-rank nodes" scale --ep 8,12
expect 2 "256 experts do not divide among EP 512 ranks" scale --ep 512
expect 2 "--dtype 'fp4' is not bf16 or fp8" scale --dtype bf16,fp4
expect 2 "--tokens 0 is out of range" scale --tokens 128,0
expect 2 "--combine-dtype 'int8'" scale --combine-dtype int8
expect 2 "--ep ',': give a comma-separated list" scale --ep ,
expect 2 "--topk 33 is out of range" scale --topk 33
expect 2 "--topology gives the ranks and NICs per node" scale --topology live --ranks-per-node 4
expect 2 "unexpected argument 'extra'" scale extra
expect 1 "cannot use the policy file $dir/none.json" scale --policy "$dir/none.json"
expect 1 "$dir/none.xml" scale --topology "$dir/none.xml"
expect 1 "has no GPU" scale --topology "$fixtures/no-gpu-no-nic.hwloc.xml"
"$tune" scale --help | grep -q "^Usage: strata-tune scale" || fail "scale --help"
echo PASS
