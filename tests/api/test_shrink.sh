#!/usr/bin/env bash
# strata_comm_shrink under strata-run (shrink_check): a rank killed or stopped at a step,
# the survivors shrinking and going on, checked in a ring (the step of the failure drawn
# from STRATA_TEST_SEED, or at random, in most cases); rank 0, another rank and a
# node's local rank 0 as the victim, on 1 node x 4 ranks and on 2 simulated nodes x 2
# (network namespaces; skipped where they cannot be made); a second rank dying during the
# shrink; and a rank whose engine would take 60 s to declare the stopped rank failed, which
# must learn it from the others' failure sets. Each survivor prints the time from the
# failure to its first good step, which must be under the peer timeout (2 s; 4 s under
# TSan) plus 5 s, plus 4 s for the slow rank's own step timeout, and two peer timeouts plus
# 5 s where a second rank dies in the shrink. With MoE steps (before the failure on
# the first communicator, after it on an object strata_moe_recreate made): the dead ranks'
# experts masked, or reassigned to the survivors, every combined row exact; and a
# replacement process that joins the survivors (strata_comm_expand) and gets its experts
# back (strata_moe_recreate), steps exact again on all 4. A rank "dies in the shrink" 1 to
# 20 ms after it starts it, or, where the shrink was quicker, as it returns (before its
# first step on the shrunk communicator); or it plays the agreement by hand, sends its last
# set to one survivor only and dies, and the survivors must still end on the same members
# (it among them, until a second shrink). A stopped rank resumed after the others shrank
# is out: it must end on a communicator of itself alone, the others going on. A split and a
# MoE object asked for on the failed communicator fail and still count as its split and
# object. Where a case says "registered",
# each step also writes into memory the first communicator registered, through the
# descriptors exchanged then: the shrunk communicators run on the first one's engine. And a
# rank whose engine declares the stopped victim failed only after the shrink must see the
# shrunk communicator's steps (MoE included) go on.
set -u
run=$1 check=$2
passed=0 failed=0 skipped=0
seed=${STRATA_TEST_SEED:-$RANDOM} # engine_cases.sh names it on a failure
at=$((seed % 6)) # the step at which the victim fails, where a case leaves it to chance
log=$(mktemp /tmp/strata-test-shrink-XXXXXX)
trap 'case_drain; rm -rf "$log" "$log".*' EXIT # case_drain: cases still running

. "$(dirname "$0")/../inter/engine_cases.sh"
# Two cases at a time; one under ThreadSanitizer, where a rank's heartbeats were once held
# back past the peer timeout with a single case running (below).
[ "${STRATA_TEST_SANITIZE:-}" = thread ] || case_parallel

ok='shrunk to'
# The peer timeout, and the bounds on the time to the first good step: the timeout plus 5 s
# (two timeouts where a second rank dies, plus 4 s where the slow rank's own step waits).
# Under ThreadSanitizer 4 ranks' threads on 2 cores once held a live rank's heartbeats back
# for more than 2 s, and the others declared it failed: 4 s there.
peer_s=2
[ "${STRATA_TEST_SANITIZE:-}" = thread ] && peer_s=4
one=$((peer_s * 1000 + 5000)) two=$((2 * peer_s * 1000 + 5000)) slow=$((peer_s * 1000 + 9000))
quick="STRATA_INTER_PEER_TIMEOUT=${peer_s}s"
lo="STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=lo"
check_case "1 node x 4, rank 0 killed, registered" 3 "$ok" -- $quick $lo -- -n 4 --allow-fail 0 -- --victim 0 --at $at --registered --max-ms $one
check_case "1 node x 4, rank 2 killed at step 0" 3 "$ok" -- $quick $lo -- -n 4 --allow-fail 2 -- --victim 2 --at 0 --max-ms $one
check_case "1 node x 4, rank 3 stopped" 3 "$ok" -- $quick $lo -- -n 4 --allow-fail 3 -- --victim 3 --stop --at $at --max-ms $one
check_case "1 node x 4, rank 2 stopped, resumed once the others shrank: it ends alone" 4 "$ok\|resumed alone" -- $quick $lo -- -n 4 --allow-fail 2 -- --victim 2 --resume --at $at --steps 40 --step-ms 150 --max-ms $one
check_case "1 node x 4, rank 1 stopped, rank 0 slow to see it" 3 "$ok" -- $quick $lo -- -n 4 --allow-fail 1 -- --victim 1 --stop --slow 0 --max-ms $slow
check_case "1 node x 4, rank 1 killed, rank 2 dies as the shrink starts" 2 "$ok" -- $quick $lo -- -n 4 --allow-fail 1 --allow-fail 2 -- --victim 1 --second 2 --second-first --max-ms $one
check_case "1 node x 4, rank 1 killed, rank 2 dies in the shrink, registered" 2 "$ok" -- $quick $lo -- -n 4 --allow-fail 1 --allow-fail 2 -- --victim 1 --second 2 --registered --max-ms $two
check_case "1 node x 4, rank 1 stopped, rank 0's engine declares it failed after the shrink, MoE, registered" 3 "$ok" -- $quick $lo -- -n 4 --allow-fail 1 -- --victim 1 --stop --slow 0 --slow-timeout 9 --steps 60 --step-ms 150 --moe --registered --max-ms $slow
check_case "1 node x 4, rank 0 killed, MoE with its experts masked, one rank's bad maps refused everywhere" 3 "$ok" -- $quick $lo -- -n 4 --allow-fail 0 -- --victim 0 --moe --map-refusals --at $at --max-ms $one
check_case "1 node x 4, rank 1 killed, MoE masked, then a replacement joins" 4 "grew back to 4 ranks" -- $quick $lo -- -n 4 --allow-fail 1 -- --victim 1 --moe --rejoin
if "$run" -n 1 --nodes 1 -- true >/dev/null 2>&1; then
    net="STRATA_INTER_PROVIDER=tcp STRATA_INTER_IFACE=eth0"
    check_case "2 nodes x 2, rank 0 killed, registered" 3 "$ok" -- $quick $net -- -n 4 --nodes 2 --allow-fail 0 -- --victim 0 --at $at --registered --max-ms $one
    check_case "2 nodes x 2, node 1's local rank 0 stopped" 3 "$ok" -- $quick $net -- -n 4 --nodes 2 --allow-fail 2 -- --victim 2 --stop --at 5 --max-ms $one
    check_case "2 nodes x 2, rank 3 killed, rank 0 sends its last set to rank 1 only and dies" 2 "$ok" -- $quick $net -- -n 4 --nodes 2 --allow-fail 3 --allow-fail 0 -- --victim 3 --second 0 --second-last-to 1 --max-ms $two
    check_case "2 nodes x 2, rank 3 killed, rank 0 dies in the shrink" 2 "$ok" -- $quick $net -- -n 4 --nodes 2 --allow-fail 3 --allow-fail 0 -- --victim 3 --second 0 --max-ms $two
    check_case "2 nodes x 2, rank 1 killed, a split and a MoE object asked for on the failed communicator, then MoE with its experts reassigned" 3 "$ok" -- $quick $net -- -n 4 --nodes 2 --allow-fail 1 -- --victim 1 --reassign --failed-calls --at $at --max-ms $one
    check_case "2 nodes x 2, rank 0 killed, MoE reassigned, then a replacement joins" 4 "grew back to 4 ranks" -- $quick $net -- -n 4 --nodes 2 --allow-fail 0 -- --victim 0 --reassign --rejoin
    check_case "2 nodes x 2, rank 3 killed, rank 0 dies in the shrink, MoE masked" 2 "$ok" -- $quick $net -- -n 4 --nodes 2 --allow-fail 3 --allow-fail 0 -- --victim 3 --second 0 --moe
else
    echo "skipped: network namespaces cannot be made here (need root and iproute2)"
    skipped=$((skipped + 7))
fi
cases_summary
