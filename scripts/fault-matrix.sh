#!/usr/bin/env bash
# The fault matrix: one fault on one rank (kill, stop, early exit, stall) in one phase
# (MoE creation, dispatch, combine, point-to-point writes), on 1 node x 4 ranks and 2 nodes
# x 2 ranks (network namespaces), with a 3 s heartbeat bound. Prints a markdown table: what
# the other ranks were told, the longest time one of their calls took to say it, and what
# was left behind (/dev/shm entries, network namespaces, processes of the job).
# Usage: scripts/fault-matrix.sh [build-dir]   (default: build; needs root for 2 nodes)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
run=$build/tools/strata-run check=$build/tests/fault_check
log=$(mktemp /tmp/strata-fault-matrix-XXXXXX)
trap 'rm -f "$log"' EXIT
[ -x "$run" ] && [ -x "$check" ] || { echo "fault-matrix: build $build first" >&2; exit 1; }

echo "| nodes x ranks | fault | phase | the others were told | longest call | left behind |"
echo "|---|---|---|---|---|---|"
for layout in "1 4 lo" "2 2 eth0"; do
    set -- $layout
    nodes=$1 per=$2 iface=$3 world=$(( $1 * $2 ))
    victim=$(( world - 1 ))
    for phase in create dispatch combine p2p; do
        for kind in kill stop exit stall; do
            shm_before=$(ls /dev/shm | wc -l)
            netns_before=$(ip netns list 2>/dev/null | wc -l)
            env STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=$iface \
                STRATA_INTER_PEER_TIMEOUT=3s \
                "$run" --timeout 150 -n "$world" --nodes "$nodes" --allow-fail "$victim" -- \
                "$check" --fault "$kind:$phase:$victim" >"$log" 2>&1
            rc=$?
            told=$(grep -o 'rank [0-9]*: .*' "$log" | grep -v "^rank $victim:" |
                   sed -E 's/rank [0-9]+: //; s/ after [0-9]+ ms//' | sort | uniq -c |
                   awk '{c=$1; $1=""; sub(/^ /, ""); printf "%s%s x%d", sep, $0, c; sep="; "}')
            longest=$(grep -o 'after [0-9]* ms' "$log" |
                      awk '{if ($2 > m) m = $2} END {print NR ? m " ms" : "-"}')
            survivors=$(grep -c "^\[r[0-9]*\] rank [0-9]*: " "$log")
            [ "$survivors" -lt $(( world - 1 )) ] && told="$told (only $survivors of $(( world - 1 )) reported; strata-run exit $rc)"
            left=""
            [ "$(ls /dev/shm | wc -l)" -gt "$shm_before" ] && left="/dev/shm +$(( $(ls /dev/shm | wc -l) - shm_before )) "
            [ "$(ip netns list 2>/dev/null | wc -l)" -gt "$netns_before" ] && left="${left}netns "
            pgrep -f "$check --fault" >/dev/null && left="${left}processes"
            echo "| $nodes x $per | $kind | $phase | ${told:-nothing} | $longest | ${left:-nothing} |"
        done
    done
done
