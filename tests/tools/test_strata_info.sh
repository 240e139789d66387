#!/usr/bin/env bash
# strata-info: version line, build options, every config variable with -c, usage errors.
set -u
info=$1
fail() { echo "FAIL: $*"; exit 1; }

out=$("$info") || fail "strata-info exited $?"
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

"$info" --bogus >/dev/null 2>&1
[ $? -eq 2 ] || fail "bad option should exit 2"
echo "1 passed, 0 failed"
