#!/usr/bin/env bash
# strata-info: version line, build options, every config variable with -c (and the value a
# set one takes), usage errors.
set -u
info=$1
fail() { echo "FAIL: $*"; exit 1; }

out=$("$info") || fail "strata-info exited $?"
out_plain=$out
grep -q '^strata [0-9]*\.[0-9]*\.[0-9]*$' <<<"$out" || fail "no version line: $out"
grep -q '^build: cuda=\(on\|off\) hip=\(on\|off\) verbs=\(on\|off\) ucx=\(on\|off\) chaos=\(on\|off\) sanitize=' <<<"$out" ||
    fail "no build line: $out"

grep -q '^device backends:.* host' <<<"$out" || fail "host device backend not listed: $out"

out=$("$info" -c) || fail "strata-info -c exited $?"
for var in STRATA_LOG_LEVEL STRATA_TOPO_FILE STRATA_MOE_MODE STRATA_ADAPTIVE_POLICY STRATA_ADAPTIVE_CALIBRATE; do
    grep -q "^$var=" <<<"$out" || fail "-c does not list $var"
done

# A variable the environment sets shows the value it takes, in the form that parses back to
# it; one that does not parse shows why it is refused; one not set shows no "set:" line.
out=$(STRATA_INTER_MSG_SIZE=128k STRATA_INTER_HEARTBEAT=250ms STRATA_INTER_SHARED_MEMORY=off \
      STRATA_INTRA_TIMEOUT=soon "$info" -c 2>/dev/null) || fail "strata-info -c with variables set exited $?"
set_line() { grep -A3 "^$1=" <<<"$out" | grep -m1 '^    set: '; }
[ "$(set_line STRATA_INTER_MSG_SIZE)" = "    set: 131072" ] || fail "size: $(set_line STRATA_INTER_MSG_SIZE)"
[ "$(set_line STRATA_INTER_HEARTBEAT)" = "    set: 250000000ns" ] ||
    fail "time: $(set_line STRATA_INTER_HEARTBEAT)"
[ "$(set_line STRATA_INTER_SHARED_MEMORY)" = "    set: no" ] ||
    fail "bool: $(set_line STRATA_INTER_SHARED_MEMORY)"
grep -q "^    set: 'soon', refused: " <<<"$(set_line STRATA_INTRA_TIMEOUT)" ||
    fail "a refused value: $(set_line STRATA_INTRA_TIMEOUT)"
[ -z "$(set_line STRATA_INTER_PEER_TIMEOUT)" ] || fail "a variable not set shows a value"

err=$(STRATA_TOPO_FIEL=x "$info" 2>&1 >/dev/null)
grep -q 'unknown variable STRATA_TOPO_FIEL (did you mean STRATA_TOPO_FILE?)' <<<"$err" ||
    fail "no warning for a misspelt variable: $err"

# A malformed level is reported once at start-up, not a hang (logging cannot log itself).
err=$(STRATA_LOG_LEVEL=verbose STRATA_NO_SUCH_VARIABLE=1 timeout 10 "$info" 2>&1 >/dev/null)
[ $? -eq 0 ] || fail "strata-info with a bad STRATA_LOG_LEVEL did not finish"
grep -q "STRATA_LOG_LEVEL=verbose: 'verbose' is not one of" <<<"$err" || fail "bad level not reported: $err"

# The command line every tool shares (tests/tools/cli.sh): each mistake its own message.
. "$(dirname "$0")/cli.sh"
trap cli_cleanup EXIT
cli_version strata-info "$info" || fail "version"
# The same build line as the full output's.
[ "$(sed 's/^strata-info /strata /; s/ (/\nbuild: /; s/)$//' <<<"$("$info" -V)")" = \
  "$(grep -E '^(strata |build: )' <<<"$out_plain")" ] || fail "-V differs from the version and build lines"
cli_help "$info" --help || fail "--help"
cli_help "$info" -h || fail "-h"
cli_usage_error "strata-info: unknown option '--bogus' (see --help)" "$info" --bogus ||
    fail "unknown option"
cli_usage_error "strata-info: unknown option '-x' (see --help)" "$info" -x || fail "unknown short option"
cli_usage_error "strata-info: option '--config' takes no value (found 'all') (see --help)" \
    "$info" --config=all || fail "value to a flag"
cli_usage_error "strata-info: unexpected argument 'extra' (see --help)" "$info" extra ||
    fail "unexpected argument"
cli_usage_error "strata-info: --check and --config are separate runs (see --help)" \
    "$info" --check -c || fail "--check with --config"

# --moe-memory: the estimate's parts, their sum last, on a shape whose expert blocks are
# simple to count (2 nodes x 2 ranks, 8 experts, capacity 16, hidden 64, bf16: each rank's
# 2 experts hold 32 input rows of 128 bytes, 32 sources of 12 and 32 output rows of 128,
# each array rounded up to 256 bytes: 4096 + 512 + 4096).
mem=(--moe-memory --world 4 --nodes 2 --max-tokens 8 --hidden 64 --topk 2 --experts 8
     --capacity 16 --route hierarchical)
out=$("$info" "${mem[@]}") || fail "--moe-memory exited $?"
grep -q '^total: [0-9]* bytes$' <<<"$(tail -1 <<<"$out")" || fail "no total line last: $out"
grep -q '^  expert rows *8704 bytes' <<<"$out" || fail "expert rows of 2 x 16 rows: $out"
parts=$(awk '/^  / && !/^  other/ {sum += $(NF - 3)} END {print sum}' <<<"$out")
[ "$parts" = "$(awk '/^total:/ {print $2}' <<<"$out")" ] || fail "the parts do not add up: $out"
grep -q '^  net returns *0 bytes' <<<"$("$info" --moe-memory --world 4 --nodes 1 --max-tokens 8 \
    --hidden 64 --topk 2 --experts 8)" || fail "one node has network returns"
cli_run "$info" "${mem[@]}" --combine node-reduce --route flat
[ $? -eq 1 ] && grep -q 'node-reduce combine needs the hierarchical route' "$cli_err" ||
    { cli_show "node-reduce on the flat route: expected exit 1 and the reason"; fail "refusal"; }
# --exchange streamed: round two, staging and the returns hold a window's tokens (3200
# bytes: 2 tokens, each four 144-byte entries for the 1 peer, two buffers of 2 returned
# terms and two of 2 received, rows of 128 bytes), staging and returns twice, each part
# rounded up to 256 bytes; round one (8 tokens worst-case, 2 here) shrinks with them.
# Node-reduce's weights (two buffers each way of 2 x 4 bytes a token per peer) leave room
# for 1 token: 1664 bytes each.
out=$(STRATA_MOE_WINDOW_BYTES=3200 "$info" "${mem[@]}" --exchange streamed) ||
    fail "--exchange streamed exited $?"
grep -q 'exchange streamed$' <<<"$(head -1 <<<"$out")" || fail "streamed not named: $out"
for part in "round one *512" "round two *512" "staging *768" "returns *2560"; do
    grep -q "^  net $part bytes" <<<"$out" || fail "streamed net $part: $out"
done
grep -q '^  net staging *1280 bytes' <<<"$("$info" "${mem[@]}" --exchange worst-case)" ||
    fail "worst-case staging of 8 tokens"
out=$(STRATA_MOE_WINDOW_BYTES=3200 "$info" "${mem[@]}" --exchange streamed --combine node-reduce) ||
    fail "--exchange streamed --combine node-reduce exited $?"
grep -q 'combine node-reduce, exchange streamed$' <<<"$(head -1 <<<"$out")" &&
    grep -q '^  net staging *512 bytes' <<<"$out" || fail "node-reduce's window of 1 token: $out"
# --receive exact: no blocks of capacity rows, one row each (each array of 2 still rounded
# up to 256 bytes: 768), named in the first line; the same with the streamed exchange in
# rounds across nodes, whose own rows' terms and stage of returned terms hold one round's
# (the network's returns then include the stage: more than the area's 2 x 1024 + drops).
out=$("$info" "${mem[@]}" --receive exact) || fail "--receive exact exited $?"
grep -q 'receive exact$' <<<"$(head -1 <<<"$out")" && grep -q '^  expert rows *768 bytes' <<<"$out" ||
    fail "the exact receive's one row per expert: $out"
out=$(STRATA_MOE_WINDOW_BYTES=3200 "$info" "${mem[@]}" --receive exact --exchange streamed) ||
    fail "--receive exact --exchange streamed exited $?"
grep -q 'exchange streamed, receive exact$' <<<"$(head -1 <<<"$out")" &&
    grep -q '^  expert rows *768 bytes' <<<"$out" || fail "the exact receive in rounds: $out"
cli_run "$info" "${mem[@]}" --receive exact --combine node-reduce
[ $? -eq 1 ] && grep -q 'the exact receive combines exactly, not with node-reduce' "$cli_err" ||
    { cli_show "the exact receive with node-reduce: expected exit 1 and the reason"; fail "refusal"; }
# --capacity-factor F: F x an expert's mean load (8 x 2 / 8 x 4 = 8 rows), as --capacity
# would give it, named in the first line; with --capacity, a usage error.
out=$("$info" "${mem[@]/#16/0}" --capacity-factor 2) || fail "--capacity-factor exited $?"
grep -q 'capacity 16 (2 x an expert.s mean load)' <<<"$out" || fail "factor's capacity: $out"
[ "$(tail -1 <<<"$out")" = "$("$info" "${mem[@]}" | tail -1)" ] ||
    fail "--capacity-factor 2 is not --capacity 16: $out"
cli_usage_error "strata-info: --capacity and --capacity-factor: give one (see --help)" \
    "$info" "${mem[@]}" --capacity-factor 2 || fail "both capacities"
cli_usage_error "strata-info: --moe-memory needs --world, --nodes, --max-tokens, --hidden, --topk and --experts (see --help)" \
    "$info" --moe-memory --world 4 || fail "--moe-memory without a shape"
cli_usage_error "strata-info: --dtype: 'bf17' is not one of the names it takes (see --help)" \
    "$info" "${mem[@]}" --dtype bf17 || fail "bad dtype"
cli_usage_error "strata-info: --topk 33 is out of range (1..32) (see --help)" \
    "$info" "${mem[@]}" --topk 33 || fail "topk out of range"
echo "1 passed, 0 failed"
