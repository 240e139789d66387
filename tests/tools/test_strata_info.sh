#!/usr/bin/env bash
# strata-info: version line, build options, every config variable with -c, usage errors.
set -u
info=$1
fail() { echo "FAIL: $*"; exit 1; }

out=$("$info") || fail "strata-info exited $?"
out_plain=$out
grep -q '^strata [0-9]*\.[0-9]*\.[0-9]*$' <<<"$out" || fail "no version line: $out"
grep -q '^build: cuda=\(on\|off\) hip=\(on\|off\) verbs=\(on\|off\) ucx=\(on\|off\) sanitize=' <<<"$out" ||
    fail "no build line: $out"

grep -q '^device backends:.* host' <<<"$out" || fail "host device backend not listed: $out"

out=$("$info" -c) || fail "strata-info -c exited $?"
for var in STRATA_LOG_LEVEL STRATA_TOPO_FILE STRATA_MOE_MODE STRATA_ADAPTIVE_POLICY STRATA_ADAPTIVE_CALIBRATE; do
    grep -q "^$var=" <<<"$out" || fail "-c does not list $var"
done

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
echo "1 passed, 0 failed"
