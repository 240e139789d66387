#!/usr/bin/env bash
# The transfer engine over real libfabric providers, several processes each: tcp;ofi_rxm on
# loopback (2 and 4 ranks, 1 and 2 rails), tcp between 2 simulated nodes x 2 ranks (network
# namespaces; skipped where they cannot be made), shm, work rings fed by host threads, a
# rank killed mid-transfer (also while producers feed a ring, after which a ring and a failure
# watch over the survivors alone go on), chunks posted last first (the
# order EFA SRD may deliver them in), ranks quiet past the peer timeout with heartbeats by
# inject and by send, progress by the waiting caller and by a thread, submissions paced by
# rate control, STRATA_INTER_SHARED_MEMORY=no, and the chaos transport (delays, pieces and
# completions out of order). Every run must close its
# registrations before its endpoints, and every fi_close must succeed.
# With a third argument "ucx", the same matrix over the UCX transport (STRATA_INTER_TRANSPORT
# =ucx): tcp alone (shared memory forbidden) and with UCX's shared-memory transports
# allowed, plus a network device UCX does not have; "SKIP:" when this build has no ucx.
set -u
run=$1 check=$2 transport=${3:-ofi}
passed=0 failed=0 skipped=0
seed=${STRATA_TEST_SEED:-$(( $(date +%s) % 100000 ))}
export STRATA_TEST_SEED=$seed
log=$(mktemp /tmp/strata-test-engine-XXXXXX)
trap 'case_drain; rm -rf "$log" "$log".*' EXIT # case_drain: cases still running

. "$(dirname "$0")/engine_cases.sh"
# Two cases at a time (the counts of /dev/shm are taken with none running); one under
# ThreadSanitizer, where the quiet ranks' 2 s peer timeout leaves no room for a second job.
[ "${STRATA_TEST_SANITIZE:-}" = thread ] || case_parallel

if [ "$transport" = ucx ]; then
    if ! "$check" --built ucx; then
        echo "SKIP: strata was built without ucx (-DSTRATA_WITH_UCX=ON)"
        exit 0
    fi
ok='all checks passed'
calm=STRATA_INTER_PEER_TIMEOUT=20s
quick=STRATA_INTER_PEER_TIMEOUT=2s
ucx=STRATA_INTER_TRANSPORT=ucx
tcp_only=STRATA_INTER_SHARED_MEMORY=no
check_case "ucx tcp loopback, 2 ranks" 2 "$ok over ucx tcp lo" -- $calm $ucx $tcp_only STRATA_INTER_IFACE=lo -- -n 2 --
check_case "ucx tcp loopback, 4 ranks, 2 rails" 4 "$ok over ucx tcp lo, 2 rails" -- $calm $ucx $tcp_only STRATA_INTER_IFACE=lo STRATA_INTER_RAILS=2 -- -n 4 --
check_case "ucx tcp loopback, 4 ranks, engines left right after a barrier" 4 "left 4 engines.*complete, 0 destroys waited" -- STRATA_INTER_PEER_TIMEOUT=3s $ucx $tcp_only STRATA_INTER_IFACE=lo -- -n 4 -- --leave 3
# UCX's own choice within a host, its shared-memory transports allowed (UCX 1.13 leaves
# posix and sysv out of endpoints that must detect a dead peer: the name says what is used).
check_case "ucx, shared memory allowed, 2 ranks" 2 "$ok over ucx tcp" -- $calm $ucx -- -n 2 --
check_case "ucx, shared memory allowed, 4 ranks, 2 rails" 4 "$ok over ucx tcp" -- $calm $ucx STRATA_INTER_RAILS=2 -- -n 4 --
check_case "ucx tcp loopback, 4 ranks, 2 rails, chunks last first" 4 "$ok" -- $calm $ucx $tcp_only STRATA_INTER_IFACE=lo STRATA_INTER_RAILS=2 STRATA_INTER_STRIPE_MIN=16k STRATA_INTER_CHUNK_ORDER=reverse -- -n 4 --
# Progress: the cases above take the waiting caller (auto, on this machine); a thread here.
check_case "ucx tcp loopback, 4 ranks, 2 rails, progress thread" 4 "$ok" -- $calm STRATA_INTER_PROGRESS=thread $ucx $tcp_only STRATA_INTER_IFACE=lo STRATA_INTER_RAILS=2 -- -n 4 --
alive='every peer alive'
check_case "ucx tcp, quiet past the peer timeout, heartbeats by inject, caller progress" 3 "$alive" -- $quick STRATA_INTER_PROGRESS=caller $ucx $tcp_only STRATA_INTER_IFACE=lo -- -n 3 -- --idle
check_case "ucx tcp, quiet past the peer timeout, heartbeats by send, caller progress" 3 "$alive" -- $quick STRATA_INTER_PROGRESS=caller $ucx $tcp_only STRATA_INTER_IFACE=lo STRATA_INTER_HEARTBEAT_PATH=send -- -n 3 -- --idle
check_case "ucx tcp, quiet past the peer timeout, progress thread" 3 "$alive" -- $quick STRATA_INTER_PROGRESS=thread $ucx $tcp_only STRATA_INTER_IFACE=lo -- -n 3 -- --idle
forbid='as expected'
check_case "ucx, shared memory forbidden" 2 "$forbid" -- $ucx $tcp_only -- -n 2 -- --forbid-shm
check_case "ucx, shared memory forbidden and named in STRATA_UCX_TLS (refused)" 2 "$forbid" -- $ucx $tcp_only STRATA_UCX_TLS=posix,tcp -- -n 2 -- --forbid-shm
dead='failed after'
ring_on="the survivors' ring and watch went on"
check_case "ucx tcp, rank 2 of 3 killed" 2 "$dead" -- $quick $ucx $tcp_only STRATA_INTER_IFACE=lo -- -n 3 --allow-fail 2 -- --kill 2
check_case "ucx tcp, rank 2 of 3 killed, progress thread" 2 "$dead" -- $quick STRATA_INTER_PROGRESS=thread $ucx $tcp_only STRATA_INTER_IFACE=lo -- -n 3 --allow-fail 2 -- --kill 2
check_case "ucx tcp, rank 1 of 3 killed under a work ring, the survivors' ring goes on" 2 "$ring_on" -- $quick $ucx $tcp_only STRATA_INTER_IFACE=lo -- -n 3 --allow-fail 1 -- --kill-ring 1
case_drain
ucx_shm_before=$(ls /dev/shm 2>/dev/null | grep -c ucx)
check_case "ucx, shared memory allowed, rank 1 of 3 killed" 2 "$dead" -- $quick $ucx -- -n 3 --allow-fail 1 -- --kill 1
# UCX's own segments (its names say ucx; other jobs' are not counted) do not outlive the job.
case_drain
ucx_shm_after=$(ls /dev/shm 2>/dev/null | grep -c ucx)
if [ "$ucx_shm_after" -le "$ucx_shm_before" ]; then
    passed=$((passed + 1)); echo "ok: no UCX shared memory left in /dev/shm"
else
    failed=$((failed + 1)); echo "FAIL: UCX's entries in /dev/shm grew from $ucx_shm_before to $ucx_shm_after"
fi
# A device UCX does not have: creation refuses (STRATA_ERR_CONFIG), naming it and what UCX
# sees (strata-run may stop the other ranks first).
env $ucx STRATA_INTER_IFACE=nosuchdev0 "$run" --timeout 60 -n 2 -- "$check" >"$log" 2>&1
rc=$?
named=$(grep -c "ucx: rail 0: no network device 'nosuchdev0'; UCX sees: .*lo" "$log")
refused=$(grep -c "engine create: invalid configuration" "$log")
if [ $rc -ne 0 ] && [ "$named" -ge 1 ] && [ "$refused" -ge 1 ]; then
    passed=$((passed + 1)); echo "ok: ucx, a device that does not exist"
else
    failed=$((failed + 1)); echo "FAIL: ucx, a device that does not exist (exit $rc, $named ranks named it, $refused refused with STRATA_ERR_CONFIG)"
    tail -20 "$log"
fi

if "$run" -n 1 --nodes 1 -- true >/dev/null 2>&1; then
    # Simulated nodes share the host's memory: they must talk tcp, as real nodes would.
    check_case "ucx tcp, 2 nodes x 2 ranks, 2 rails" 4 "$ok over ucx tcp eth0" -- $calm $ucx $tcp_only STRATA_INTER_IFACE=eth0 STRATA_INTER_RAILS=2 -- -n 4 --nodes 2 --
    check_case "ucx tcp, 2 nodes x 2 ranks, rank 3 killed" 3 "$dead" -- $quick $ucx $tcp_only STRATA_INTER_IFACE=eth0 -- -n 4 --nodes 2 --allow-fail 3 -- --kill 3
else
    echo "skipped: network namespaces cannot be made here (need root and iproute2)"
    skipped=$((skipped + 2))
fi

else
ok='all checks passed'
dead='failed after'
ring_on="the survivors' ring and watch went on"
# Runs that kill nobody get a peer timeout no scheduling hiccup on a loaded machine reaches;
# the kill runs use a short one and check that the death is seen within it (plus slack).
calm=STRATA_INTER_PEER_TIMEOUT=20s
quick=STRATA_INTER_PEER_TIMEOUT=2s
# On one host every peer shares the node, and would go through libfabric shm beside tcp:
# the tcp cases keep tcp for the data with STRATA_INTER_SAME_NODE=network ($net).
net=STRATA_INTER_SAME_NODE=network
check_case "tcp loopback, 2 ranks" 2 "$ok" -- $calm $net STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo -- -n 2 --
check_case "tcp loopback, 4 ranks, 2 rails" 4 "$ok" -- $calm $net STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo STRATA_INTER_RAILS=2 -- -n 4 --
check_case "shm, 2 ranks" 2 "$ok" -- $calm STRATA_INTER_PROVIDER=shm -- -n 2 --
check_case "shm, 4 ranks, 2 rails" 4 "$ok" -- $calm STRATA_INTER_PROVIDER=shm STRATA_INTER_RAILS=2 -- -n 4 --
# Engines destroyed as soon as a barrier returns: their peers still complete it (the
# destroy waits until they have read what it sent), and a peer that left is refused at
# once and failed without a warning past the peer timeout (3 s: rank 0 waits 4.5 s for it).
leave=STRATA_INTER_PEER_TIMEOUT=3s
check_case "tcp loopback, 4 ranks, 2 rails, engines left right after a barrier" 4 "left 4 engines.*complete, 0 destroys waited" -- $leave $net STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo STRATA_INTER_RAILS=2 -- -n 4 -- --leave 3
check_case "tcp beside shm for same-node peers, 4 ranks, engines left right after a barrier" 4 "left 4 engines.*complete, 0 destroys waited" -- $leave STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo -- -n 4 -- --leave 3
# EFA SRD delivers a write's chunks in any order; tcp never does. Posting them last first,
# small enough that every large write is cut into many, shows up code that counts on the
# last chunk landing last.
check_case "tcp loopback, 4 ranks, 2 rails, chunks last first" 4 "$ok" -- $calm $net STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo STRATA_INTER_RAILS=2 STRATA_INTER_STRIPE_MIN=16k STRATA_INTER_CHUNK_ORDER=reverse -- -n 4 --
# The chaos transport (test builds): every operation held back a random time, writes cut
# into pieces posted in any order, completions out of order; the same checks must hold, and
# a death be seen as soon.
if "$check" --built chaos:ofi; then
    chaos="STRATA_INTER_TRANSPORT=chaos:ofi STRATA_CHAOS_SEED=$seed"
    check_case "chaos over tcp loopback, 4 ranks, 2 rails, 4 KiB chunks" 4 "$ok over chaos ofi" -- $calm $chaos STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo STRATA_INTER_RAILS=2 STRATA_INTER_STRIPE_MIN=4k -- -n 4 --
    check_case "chaos over tcp loopback, 4 ranks, rate control, progress thread" 4 "$ok.*rate control on ([1-9]" -- $calm $chaos STRATA_INTER_PROGRESS=thread STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo STRATA_INTER_STRIPE_MIN=16k STRATA_INTER_RATE_CONTROL=on -- -n 4 --
    check_case "chaos over tcp, rank 2 of 3 killed" 2 "$dead" -- $quick $chaos STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo -- -n 3 --allow-fail 2 -- --kill 2
    # Operations held up to 300 ms: without the leaving handshake a peer lost a barrier
    # write of a rank that had gone in every run of this case. The chaos transport drops
    # what it still holds at the close, answers included, so destroys may wait out their
    # bound here.
    check_case "chaos over tcp (300 ms delays), 4 ranks, engines left right after a barrier" 4 "left 5 engines" -- $leave $chaos STRATA_CHAOS_DELAY=300ms STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo -- -n 4 -- --leave 4
else
    echo "not run: the chaos cases (this build has no chaos transport: -DSTRATA_WITH_CHAOS=ON)"
fi
# Peers of the same node through libfabric shm, the others through tcp: on one host, and
# between 2 simulated nodes (below); engine_check checks which transport each peer gets.
samenode="STRATA_TEST_SAME_NODE=ofi shm"
check_case "tcp beside shm for same-node peers, 4 ranks, 2 rails" 4 "$ok" -- $calm "$samenode" STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo STRATA_INTER_RAILS=2 -- -n 4 --
check_case "tcp beside shm for same-node peers, rank 2 of 3 killed" 2 "$dead" -- $quick STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo -- -n 3 --allow-fail 2 -- --kill 2
# Progress: auto takes the caller on this machine wherever ranks outnumber half the cores
# (every multi-rank case above); a progress thread polls in these.
check_case "tcp loopback, 4 ranks, 2 rails, progress thread" 4 "$ok" -- $calm STRATA_INTER_PROGRESS=thread $net STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo STRATA_INTER_RAILS=2 -- -n 4 --
# Rate control: 16 KiB chunks keep the windows' floors small, so that pacing holds many
# operations back while every byte and immediate is checked.
check_case "tcp loopback, 4 ranks, 2 rails, rate control" 4 "$ok.*rate control on ([1-9]" -- $calm $net STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo STRATA_INTER_RAILS=2 STRATA_INTER_STRIPE_MIN=16k STRATA_INTER_RATE_CONTROL=on -- -n 4 --
check_case "shm, 2 ranks, progress thread" 2 "$ok" -- $calm STRATA_INTER_PROGRESS=thread STRATA_INTER_PROVIDER=shm -- -n 2 --
# Quiet ranks: heartbeats keep them alive; with caller progress the thread only beats
# (engine_check --idle bounds its CPU time).
alive='every peer alive'
check_case "tcp, quiet past the peer timeout, heartbeats by inject, caller progress" 3 "$alive" -- $quick STRATA_INTER_PROGRESS=caller $net STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo -- -n 3 -- --idle
check_case "tcp, quiet past the peer timeout, heartbeats by send, caller progress" 3 "$alive" -- $quick STRATA_INTER_PROGRESS=caller $net STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo STRATA_INTER_HEARTBEAT_PATH=send -- -n 3 -- --idle
check_case "tcp, quiet past the peer timeout, progress thread" 3 "$alive" -- $quick STRATA_INTER_PROGRESS=thread $net STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo -- -n 3 -- --idle
forbid='as expected'
check_case "tcp, shared memory forbidden" 2 "$forbid" -- $net STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo STRATA_INTER_SHARED_MEMORY=no -- -n 2 -- --forbid-shm
check_case "shm, shared memory forbidden (refused)" 2 "$forbid" -- STRATA_INTER_PROVIDER=shm STRATA_INTER_SHARED_MEMORY=no -- -n 2 -- --forbid-shm
check_case "tcp, rank 2 of 3 killed" 2 "$dead" -- $quick $net STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo -- -n 3 --allow-fail 2 -- --kill 2
check_case "tcp, rank 2 of 3 killed, progress thread" 2 "$dead" -- $quick STRATA_INTER_PROGRESS=thread $net STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo -- -n 3 --allow-fail 2 -- --kill 2
case_drain
shm_before=$(ls /dev/shm 2>/dev/null | wc -l)
check_case "tcp, rank 1 of 3 killed under a work ring, rate control on, the survivors' ring goes on" 2 "$ring_on" -- $quick $net STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo STRATA_INTER_RATE_CONTROL=on STRATA_INTER_STRIPE_MIN=16k -- -n 3 --allow-fail 1 -- --kill-ring 1
check_case "shm, rank 1 of 3 killed" 2 "$dead" -- $quick STRATA_INTER_PROVIDER=shm -- -n 3 --allow-fail 1 -- --kill 1
# The killed rank's shared memory (and the survivors', whose stuck transport stays open)
# must not outlive the job: strata-run removes what its ranks left in /dev/shm.
case_drain
shm_after=$(ls /dev/shm 2>/dev/null | wc -l)
if [ "$shm_after" -le "$shm_before" ]; then
    passed=$((passed + 1)); echo "ok: no shared memory left in /dev/shm"
else
    failed=$((failed + 1)); echo "FAIL: /dev/shm grew from $shm_before to $shm_after entries"
fi

if "$run" -n 1 --nodes 1 -- true >/dev/null 2>&1; then
    check_case "tcp, 2 nodes x 2 ranks, 2 rails" 4 "$ok" -- $calm STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=eth0 STRATA_INTER_RAILS=2 -- -n 4 --nodes 2 --
    check_case "tcp, 2 nodes x 2 ranks, shm within each node" 4 "$ok" -- $calm "$samenode" STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=eth0 -- -n 4 --nodes 2 --
    check_case "tcp, 2 nodes x 2 ranks, rank 3 killed" 3 "$dead" -- $quick STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=eth0 -- -n 4 --nodes 2 --allow-fail 3 -- --kill 3
else
    echo "skipped: network namespaces cannot be made here (need root and iproute2)"
    skipped=$((skipped + 3))
fi

fi
case_drain
echo "$passed passed, $failed failed, $skipped skipped"
cases_left_line
# ctest reports the test skipped on this line (SKIP_REGULAR_EXPRESSION, which would also
# hide a failure: so only when nothing failed).
if [ "$failed" -eq 0 ] && [ "$skipped" -gt 0 ]; then
    echo "SKIP: the cases that need network namespaces did not run (need root and iproute2); the other $passed passed"
fi
[ "$failed" -eq 0 ]
