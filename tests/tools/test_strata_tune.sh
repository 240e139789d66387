#!/usr/bin/env bash
# strata-tune: a generated trace is well formed and replays into the four strategies; a
# hand-made trace gives hand-computed latencies (with the two-step lag); malformed traces
# are refused naming the line, and so are a NUL byte and a line without end, while what is
# not a regular file of trace size (/dev/zero, a FIFO, 5 GiB) is refused at once; the SVG is well formed; usage errors exit 2; the synthetic
# suite passes the sweep and the check on a short run.
set -u
tune=$1
fail() { echo "FAIL: $*"; exit 1; }

dir=$(mktemp -d) || fail "mktemp -d"
. "$(dirname "$0")/cli.sh"
trap 'rm -rf "$dir"; cli_cleanup' EXIT

# --- generate: the format, every rank's counts within bounds, the same file for a seed -----
gen=(generate --experts 16 --ranks 8 --ranks-per-node 2 --tokens 32 --topk 4 --steps 30
     --seed 7)
"$tune" "${gen[@]}" -o "$dir/g.trace" || fail "generate exited $?"
[ "$(sed -n 1p "$dir/g.trace")" = "strata-trace 1" ] || fail "first line: $(head -1 "$dir/g.trace")"
[ "$(sed -n 2p "$dir/g.trace")" = "experts 16 ranks 8 ranks_per_node 2 tokens 32 topk 4 row_bytes 14336" ] ||
    fail "shape line: $(sed -n 2p "$dir/g.trace")"
bad=$(awk 'NR > 2 && $1 == "step" { if ($2 != steps) print "step " $2; steps++; next }
           NR > 2 { sum = 0; for (i = 2; i <= NF; i++) { split($i, p, ":");
                    if (p[1] < 0 || p[1] >= 16 || p[2] < 1 || p[2] > 32) print "pair " $i;
                    sum += p[2] } if (sum != 128) print "rank " $1 " sums to " sum; rows++ }
           END { if (steps != 30 || rows != 30 * 8) print steps " steps, " rows " rank lines" }' \
      "$dir/g.trace")
[ -z "$bad" ] || fail "generated trace out of bounds: $bad"
"$tune" "${gen[@]}" -o "$dir/g2.trace" || fail "generate (again) exited $?"
cmp -s "$dir/g.trace" "$dir/g2.trace" || fail "the same seed gave a different trace"
# A leading zero is decimal, not octal: --seed 010 is --seed 10 (not 8).
"$tune" "${gen[@]:0:${#gen[@]}-1}" 010 -o "$dir/g3.trace" || fail "generate --seed 010 exited $?"
"$tune" "${gen[@]:0:${#gen[@]}-1}" 10 -o "$dir/g4.trace" || fail "generate --seed 10 exited $?"
cmp -s "$dir/g3.trace" "$dir/g4.trace" || fail "--seed 010 did not give --seed 10's trace"

out=$("$tune" replay "$dir/g.trace") || fail "replay exited $?: $out"
for s in push pull adaptive oracle; do
    grep -q "| $s p50 | $s p99 |" <<<"$out" || fail "no $s column: $out"
done
grep -q "^| $dir/g.trace (E=16) |" <<<"$out" || fail "no row for the trace: $out"

# --- a hand-made trace against hand-computed costs ------------------------------------------
# 2 nodes of one rank, experts 0-1 on rank 0, 2-3 on rank 1; a token row costs 1 µs on every
# link, a source node alpha 1 µs in the node and 2 µs across, Pull's round trip the same.
# Every step: e0 gets 3 tokens from node 0, e1 2 from node 0, e2 1 from node 1, e3 none.
# Push: e0 (1+3)+2=6, e1 (1+2)+2=5, e2 2+(1+1)=4, e3 2+1=3: owners 11 and 7 -> 11 µs.
# Pull: e0 1+1+3=5, e1 1+1+2=4, e2 1+1+1=3, e3 0: owners 9 and 3 -> 9 µs = the oracle.
# With dwell 1 every expert moves to Pull after step 0; that applies from step 2, so
# adaptive has two steps of 11 µs: p99 (nearest rank) is 11 with 100 steps, 9 with 250.
cat >"$dir/p.json" <<'EOF'
{"format": "strata-policy", "version": 1,
 "model": {"intra": {"push": {"alpha_us": 1, "beta_GBps": 1}, "pull": {"alpha_us": 1, "beta_GBps": 1},
                     "pull_rtt_us": 1},
           "inter": {"push": {"alpha_us": 2, "beta_GBps": 1}, "pull": {"alpha_us": 2, "beta_GBps": 1},
                     "pull_rtt_us": 2}},
 "alpha": 1, "margin": 0, "noise_k": 0, "dwell": 1, "initial": "push"}
EOF
hand_trace() { # steps file
    { echo "strata-trace 1"; echo "# a comment, then a blank line"; echo
      echo "experts 4 ranks 2 ranks_per_node 1 tokens 3 topk 2 row_bytes 1000"
      for ((t = 0; t < $1; t++)); do printf 'step %d\n0 0:3 1:2\n1 2:1\n' "$t"; done; } >"$2"
}
hand_trace 100 "$dir/h100.trace"
hand_trace 250 "$dir/h250.trace"
out=$("$tune" replay --policy "$dir/p.json" "$dir/h100.trace" "$dir/h250.trace") ||
    fail "replay of the hand-made traces exited $?: $out"
grep -qF "| $dir/h100.trace (E=4) | 11.00 | 11.00 | 9.00 | 9.00 | 9.00 | 11.00 | 9.00 | 9.00 | 1.000 | 1.222 | 4 |" <<<"$out" ||
    fail "hand-made trace of 100 steps: $out"
grep -qF "| $dir/h250.trace (E=4) | 11.00 | 11.00 | 9.00 | 9.00 | 9.00 | 9.00 | 9.00 | 9.00 | 1.000 | 1.000 | 4 |" <<<"$out" ||
    fail "hand-made trace of 250 steps: $out"

# --- malformed traces: exit 1, the error names file:line ------------------------------------
bad_trace() { # name line-of-error expected-text body...
    local name=$1 line=$2 text=$3 err
    shift 3
    printf '%s\n' "strata-trace 1" "experts 4 ranks 2 ranks_per_node 1 tokens 3 topk 2 row_bytes 1000" \
        "$@" >"$dir/$name.trace"
    err=$("$tune" replay "$dir/$name.trace" 2>&1 >/dev/null)
    [ $? -eq 1 ] || fail "$name: should exit 1: $err"
    ! grep -q Sanitizer <<<"$err" || fail "$name: $err" # sanitizers exit 1 too
    grep -qF "$dir/$name.trace:$line: " <<<"$err" || fail "$name: line $line not named: $err"
    grep -qF "$text" <<<"$err" || fail "$name: no '$text' in: $err"
}
bad_trace count-above-tokens 4 "4 tokens out of range" "step 0" "0 0:4" "1"
bad_trace missing-step 6 "missing 'step 1' line" "step 0" "0 0:3" "1 2:1" "0 1:1" "1"
bad_trace unknown-expert 5 "unknown expert id 9" "step 0" "0 0:3" "1 9:1"
bad_trace above-tokens-topk 4 "more than tokens * topk" "step 0" "0 0:3 1:3 2:1" "1"
bad_trace step-order 6 "expected step 1" "step 0" "0" "1" "step 2"
bad_trace rank-missing 4 "has no line for rank 1" "step 0" "0 0:1"
bad_trace no-steps 2 "at least one step"
bad_trace bad-pair 4 "expected 'expert:tokens'" "step 0" "0 0-3"
printf 'strata-trace 2\n' >"$dir/version.trace"
err=$("$tune" replay "$dir/version.trace" 2>&1 >/dev/null)
[ $? -eq 1 ] && grep -qF "$dir/version.trace:1: trace version 2" <<<"$err" || fail "version 2: $err"
err=$("$tune" replay "$dir/absent.trace" 2>&1 >/dev/null)
[ $? -eq 1 ] && grep -qF "$dir/absent.trace: No such file" <<<"$err" ||
    fail "a missing file should exit 1 naming it: $err"

# --- input that is not a trace file: refused at once, naming why (no hang, no growth) --------
refused() { # what expected-text args...: exit 1 within 20 s, the text in the error
    local what=$1 text=$2 err rc
    shift 2
    err=$(timeout 20 "$tune" "$@" 2>&1 >/dev/null)
    rc=$?
    [ $rc -ne 124 ] || fail "$what: still running after 20 s"
    [ $rc -eq 1 ] || fail "$what: should exit 1, exited $rc: $err"
    grep -qF "$text" <<<"$err" || fail "$what: no '$text' in: $err"
}
refused "/dev/zero" "/dev/zero: not a regular file" replay /dev/zero
mkfifo "$dir/fifo" || fail "mkfifo"
refused "a FIFO trace" "$dir/fifo: not a regular file" replay "$dir/fifo"
refused "a FIFO policy" "$dir/fifo: not a regular file" replay --policy "$dir/fifo" "$dir/g.trace"
refused "a directory" "$dir: not a regular file" replay "$dir"
printf 'strata-trace 1\nexperts 4 ranks 2 ranks_per_node 1 tokens 3 topk 2 row_bytes 1000\n' \
    >"$dir/nul.trace"
printf 'step 0\n0 0:3\n1 1:1\000 2:3\n' >>"$dir/nul.trace" # the NUL used to hide "2:3"
refused "a NUL byte" "$dir/nul.trace:5: a NUL byte" replay "$dir/nul.trace"
{ printf 'strata-trace 1\n'; head -c $((5 << 20)) /dev/zero | tr '\0' '#'; } >"$dir/long.trace"
refused "a 5 MiB line" "$dir/long.trace:2: line longer than" replay "$dir/long.trace"
truncate -s 5G "$dir/huge.trace" || fail "truncate" # sparse: no disk used
refused "a 5 GiB file" "larger than a strata trace can be" replay "$dir/huge.trace"
truncate -s 5G "$dir/huge.json" || fail "truncate"
refused "a 5 GiB policy" "larger than" replay --policy "$dir/huge.json" "$dir/g.trace"
rm -f "$dir/huge.trace" "$dir/huge.json"

# --- SVG ------------------------------------------------------------------------------------
"$tune" generate --experts 128 --ranks 32 --steps 20 -o "$dir/e128.trace" || fail "generate E=128"
"$tune" replay "$dir/g.trace" "$dir/e128.trace" --svg "$dir/a.svg" >/dev/null || fail "--svg exited $?"
"$tune" replay "$dir/g.trace" "$dir/e128.trace" --svg "$dir/b.svg" --svg-trace 1 >/dev/null ||
    fail "--svg-trace 1 exited $?"
for svg in "$dir/a.svg" "$dir/b.svg"; do
    [ "$(head -c 4 "$svg")" = "<svg" ] || fail "$svg does not start with <svg"
    [ "$(tail -n 1 "$svg")" = "</svg>" ] || fail "$svg does not end with </svg>"
    [ "$(grep -c '<polyline' "$svg")" -eq 4 ] || fail "$svg has not 4 polylines"
    if command -v xmllint >/dev/null 2>&1; then
        xmllint --noout "$svg" || fail "$svg is not well-formed XML"
    fi
done
grep -q 'experts 0–63 of 128 shown' "$dir/b.svg" || fail "no caption for the experts left out"
! grep -q 'shown' "$dir/a.svg" || fail "caption on a trace of 16 experts"

# --- usage errors exit 2 --------------------------------------------------------------------
usage2() {
    local err
    err=$("$tune" "$@" 2>&1 >/dev/null)
    [ $? -eq 2 ] || fail "'strata-tune $*' should exit 2: $err"
    ! grep -q Sanitizer <<<"$err" || fail "strata-tune $*: $err"
}
usage2
usage2 bogus
usage2 generate --experts 16
usage2 generate --experts x -o "$dir/x.trace"
usage2 generate --experts 10 --ranks 4 -o "$dir/x.trace"
usage2 generate --hidden 8 --row-bytes 16 -o "$dir/x.trace"
usage2 generate --bogus -o "$dir/x.trace"
usage2 replay
usage2 replay --bogus "$dir/g.trace"
usage2 replay --synthetic "$dir/g.trace"
usage2 replay --steps 5 "$dir/g.trace"
usage2 replay --svg "$dir/x.svg" --svg-trace 1 "$dir/g.trace"

# --- the command line every tool shares (tests/tools/cli.sh): each mistake its own message ---
cli_version strata-tune "$tune" || fail "version"
for args in --help -h "generate --help" "replay --help"; do
    cli_help "$tune" $args || fail "help"
done
cli_unknown_subcommand strata-tune "$tune" || fail "unknown subcommand"
cli_usage_error "strata-tune: unknown option '--bogus' before the subcommand (see --help)" \
    "$tune" --bogus || fail "option before the subcommand"
cli_usage_error "strata-tune: unknown option '--bogus' (see --help)" \
    "$tune" replay --bogus "$dir/g.trace" || fail "unknown option"
cli_usage_error "strata-tune: unknown option '-x' (see --help)" \
    "$tune" generate -x -o "$dir/x.trace" || fail "unknown short option"
cli_usage_error "strata-tune: ambiguous option '--s' (see --help)" \
    "$tune" replay --s 5 --synthetic || fail "ambiguous option"
cli_usage_error "strata-tune: option '--policy' needs a value (see --help)" \
    "$tune" replay --synthetic --policy || fail "missing value"
cli_usage_error "strata-tune: option '-o' needs a value (see --help)" \
    "$tune" generate -o || fail "missing value of a short option"
cli_usage_error "strata-tune: option '--check' takes no value (found 'yes') (see --help)" \
    "$tune" replay --synthetic --check=yes || fail "value to a flag"
cli_usage_error "strata-tune: --steps: 'x' is not an integer (see --help)" \
    "$tune" replay --synthetic --steps x || fail "unparsable integer"
cli_usage_error "strata-tune: --steps 0 is out of range (1..1000000) (see --help)" \
    "$tune" replay --synthetic --steps 0 || fail "integer out of range"
cli_usage_error "strata-tune: --zipf: '1.2.3' is not a number (see --help)" \
    "$tune" generate --zipf 1.2.3 -o "$dir/x.trace" || fail "unparsable number"
cli_usage_error "strata-tune: --zipf 17 is out of range (0..16) (see --help)" \
    "$tune" generate --zipf 17 -o "$dir/x.trace" || fail "number out of range"
cli_usage_error "strata-tune: --seed: '-1' is not an unsigned integer (see --help)" \
    "$tune" generate --seed -1 -o "$dir/x.trace" || fail "negative seed"
[ ! -e "$dir/x.trace" ] || fail "a refused command line wrote its output file"
# A sweep says how far it is on a terminal, and nothing of it reaches a file.
if cli_have_pty; then
    cli_progress "sweep 0/16 configs" "$tune" replay --synthetic --steps 30 --sweep-small || fail "progress"
else
    echo "progress line on a terminal not checked: script(1) from util-linux is not installed"
fi
# --progress draws it where stderr is no terminal too.
"$tune" replay --synthetic --steps 30 --sweep-small --progress >/dev/null 2>"$dir/progress" ||
    fail "replay --progress exited $?"
cli_progress_drawn "sweep 0/16 configs" "$dir/progress" || fail "--progress"

# --- the synthetic suite: sweep, policy file, check -----------------------------------------
out=$("$tune" replay --synthetic --steps 60 --sweep --check --out-policy "$dir/chosen.json" 2>&1) ||
    fail "synthetic sweep and check failed: $out"
grep -q '^chosen: alpha' <<<"$out" || fail "no chosen parameters: $out"
[ "$(grep -c '^| synthetic E=' <<<"$out")" -eq 36 ] || fail "not 36 synthetic traces: $out"
grep -q '^check passed' <<<"$out" || fail "no check line: $out"
"$tune" replay --policy "$dir/chosen.json" "$dir/g.trace" >/dev/null ||
    fail "the chosen policy file does not load"
echo "1 passed, 0 failed"
