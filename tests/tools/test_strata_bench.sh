#!/usr/bin/env bash
# strata-bench p2p runs end to end on a small size range and prints a row per size.
set -u
run=$1 bench=$2
out=$(STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo "$run" -n 2 --timeout 120 -- \
      "$bench" p2p --min 8 --max 64k 2>&1)
rc=$?
rows=$(grep -cE '^\[r0\] +[0-9]+ \|' <<<"$out")
if [ $rc -ne 0 ] || [ "$rows" -ne 14 ]; then
    echo "$out"
    echo "0 passed, 1 failed"
    exit 1
fi
"$run" -n 1 -- "$bench" p2p >/dev/null 2>&1
[ $? -eq 2 ] || { echo "one rank should be refused (exit 2)"; echo "1 passed, 1 failed"; exit 1; }
echo "2 passed, 0 failed"
