#!/usr/bin/env bash
# Two-tier MoE end to end: 2 nodes x 2 ranks and 3 nodes x 2 ranks as network namespaces
# joined by veth pairs (tcp;ofi_rxm between nodes, the host backend within), both routes,
# every dtype, pull masks changing by step, round two exercised by a small round one, Pull
# across nodes by read and by request; rate control pacing the work ring's commands; adaptive
# modes on a drifting routing trace (made by strata-tune) and a fixed mode file; bad inputs on
# one rank; a rank aborting its step (strata_moe_abort_step) at three points; a rank killed, and one stopped, mid-step; one that dispatches past the object's
# bound on streams; steps on host streams that change every
# step, each rank waiting for its experts one by one meanwhile; the network area in a pinned host
# bounce buffer; node-reduce combine, and where it is refused; the streamed exchange in rounds
# (its step counts before the later rounds); and the exact receive (dispatch_recv_into). Where strata has ucx, a
# few cases again over it (STRATA_INTER_TRANSPORT=ucx, tcp between the nodes), a kill among
# them.
set -u
run=$1 check=$2 tune=$3
. "$(dirname "$0")/moe_cases.sh"
case_parallel # two cases at a time; those whose bounds are on time alone (case_alone)

calm=STRATA_INTER_PEER_TIMEOUT=30s
nr='steps passed (hierarchical route, node-reduce combine'
case_run "2x2 flat, bf16, round one of 3 tokens, 3 blocks" 4 "$ok" -- $calm STRATA_INTRA_BLOCKS=3 STRATA_MOE_ROUTE=flat STRATA_MOE_SPEC_TOKENS=3 -- -n 4 --nodes 2 -- --steps $(steps 60)
case_run "2x2 hierarchical, fp8 -> bf16" 4 "$ok" -- $calm STRATA_MOE_ROUTE=hierarchical STRATA_MOE_SPEC_TOKENS=8 -- -n 4 --nodes 2 -- --steps $(steps 60) --dtype fp8 --hidden 256
case_run "2x2 flat, fp32, pull by request" 4 "$ok" -- $calm STRATA_MOE_ROUTE=flat STRATA_MOE_PULL_READ=off -- -n 4 --nodes 2 -- --steps $(steps 50) --dtype fp32 --combine-dtype fp32 --hidden 64
case_run "3x2 hierarchical, fp16, no round one, 2 blocks, rate control on, 16 KiB chunks" 6 "$ok" -- $calm STRATA_INTER_RATE_CONTROL=on STRATA_INTER_STRIPE_MIN=16k STRATA_INTRA_BLOCKS=2 STRATA_MOE_ROUTE=hierarchical STRATA_MOE_SPEC_TOKENS=0 -- -n 6 --nodes 3 -- --steps $(steps 50) --dtype fp16 --combine-dtype fp16 --experts 24 --topk 6
case_run "3x2 flat, bf16 -> fp32, pull by request" 6 "$ok" -- $calm STRATA_MOE_ROUTE=flat STRATA_MOE_PULL_READ=off -- -n 6 --nodes 3 -- --steps $(steps 50) --combine-dtype fp32 --experts 12 --topk 3
# A token's top-k spans the nodes: topk up to the number of experts, more than a node has.
case_run "2x2 flat, 4 experts, topk 4" 4 "$ok" -- $calm STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps $(steps 20) --experts 4 --topk 4
case_run "3x2 hierarchical, 6 experts, topk 6" 6 "$ok" -- $calm STRATA_MOE_ROUTE=hierarchical -- -n 6 --nodes 3 -- --steps $(steps 20) --experts 6 --topk 6
case_run "4x1 hierarchical, 4 experts, topk 3" 4 "$ok" -- $calm STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 4 -- --steps $(steps 20) --experts 4 --topk 3
# Every token to one expert on the other node, whose capacity holds 12 rows: the ranks
# whose tokens lost their term learn it (CAPACITY from combine_recv), on both routes.
case_run "2x2 hierarchical, all tokens to expert 12, capacity 12" 4 "$ok" -- $calm STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps $(steps 20) --overflow 12:10 --expert-wait 1
# The same capacity from STRATA_MOE_CAPACITY_FACTOR: 0.4 x the mean load of 24 rows, 10,
# rounded up to 12.
case_run "2x2 hierarchical, all tokens to expert 12, capacity 0.4 x the mean load" 4 "$ok" -- $calm STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps $(steps 10) --overflow 12 --capacity-factor 0.4
case_run "3x2 flat, all tokens to expert 5, capacity 8" 6 "$ok" -- $calm STRATA_MOE_ROUTE=flat -- -n 6 --nodes 3 -- --steps $(steps 20) --experts 12 --topk 2 --overflow 5:8
# Only node 1's tokens go to expert 0 (rank 0's), past its capacity: CAPACITY comes to the
# ranks whose tokens lost terms, not to the owner (its dispatch_recv says it) nor to rank 0
# and 1 for the node-1 tokens they dispatched in their node.
case_run "2x2 hierarchical, node 1's tokens to expert 0, capacity 12: only node 1 told" 4 "$ok" -- $calm STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps $(steps 20) --overflow 0:12:2
# A work ring of 2 and 4 slots: the kernels wait for the proxy's credit on almost every
# command, and the credit each block remembers is exercised (posting past the credit fails
# this case).
case_run "2x2 flat, work ring of 2 slots, 3 blocks" 4 "$ok" -- $calm STRATA_MOE_ROUTE=flat STRATA_MOE_RING_SLOTS=2 STRATA_INTRA_BLOCKS=3 STRATA_MOE_SPEC_TOKENS=3 -- -n 4 --nodes 2 -- --steps $(steps 30)
case_run "2x2 hierarchical, work ring of 4 slots" 4 "$ok" -- $calm STRATA_MOE_ROUTE=hierarchical STRATA_MOE_RING_SLOTS=4 -- -n 4 --nodes 2 -- --steps $(steps 30)
# The counts of what the network wrote wait for a loopback read on the rail that wrote it
# (the flush a GPU without its own takes; here forced on host memory), every rank saying so.
over_line='flushed by a loopback read'
case_run "2x2 flat, flushed by loopback reads" 4 "$ok" -- $calm STRATA_LOG_LEVEL=info STRATA_MOE_FLUSH=read STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps $(steps 30)
case_run "2x2 hierarchical, pull, flushed by loopback reads" 4 "$ok" -- $calm STRATA_LOG_LEVEL=info STRATA_MOE_FLUSH=read STRATA_MOE_ROUTE=hierarchical STRATA_MOE_MODE=pull -- -n 4 --nodes 2 -- --steps $(steps 30)
over_line=
# Stream-ordered steps on two host streams, changing every step, nothing waited for between
# steps: the object alone orders a step after the last one, still running on the other stream.
# Each rank waits for its experts one by one (strata_moe_expert_wait, or on a stream of its
# own: strata_moe_expert_wait_stream) while the kernels run,
# and copies each expert's rows the moment its wait returns: they must be its final rows.
case_run "2x2 flat, streams changing every step, experts waited for" 4 "$ok" -- $calm STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps $(steps 40) --streams 1 --expert-wait 1
case_run "2x2 hierarchical, fp8, streams changing every step, experts waited for on a stream, 3 blocks" 4 "$ok" -- $calm STRATA_INTRA_BLOCKS=3 STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps $(steps 40) --streams 1 --expert-wait 2 --dtype fp8 --hidden 256
# Two objects at once, one per route, steps alternating between them.
case_run "2x2, a flat and a hierarchical object at once" 4 "$ok" -- $calm -- -n 4 --nodes 2 -- --steps $(steps 40) --two 1
# Adaptive: a trace whose hot experts move every 10 steps; the owners switch experts between
# Push and Pull as they do (checked: results exact, every rank in the same modes each step,
# at least one change). A policy file with a short dwell, and the model measured at creation,
# starting in Pull: the measured model prices Push below Pull wherever an expert has rows
# (docs/adaptive.md "Calibration"), so the experts that get tokens move to Push.
"$tune" generate --experts 32 --ranks 4 --ranks-per-node 2 --tokens 16 --topk 2 --hidden 256 \
    --zipf 1.6 --drift-period 10 --drift-fraction 1 --steps 60 --seed "$seed" -o "$dir/drift.trace" ||
    { echo "FAIL: strata-tune generate"; exit 1; }
cat >"$dir/policy.json" <<'JSON'
{"format": "strata-policy", "version": 1, "alpha": 0.5, "margin": 0.05, "noise_k": 0.5, "dwell": 2, "initial": "pull"}
JSON
case_run "2x2 flat, adaptive on a drifting trace" 4 "$ok" -- $calm STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps $(steps 60) --trace "$dir/drift.trace" --mode adaptive
case_run "2x2 hierarchical, adaptive, policy file, calibrated" 4 "$ok" -- $calm STRATA_MOE_ROUTE=hierarchical STRATA_ADAPTIVE_POLICY="$dir/policy.json" STRATA_ADAPTIVE_CALIBRATE=on STRATA_ADAPTIVE_SAVE="$dir/saved.json" -- -n 4 --nodes 2 -- --steps $(steps 60) --trace "$dir/drift.trace" --mode adaptive
# STRATA_ADAPTIVE_SAVE: rank 0 wrote the policy it used: the file's parameters, and the
# model as measured (docs/adaptive.md "Calibration"): no alpha in either mode or tier, and
# Pull's round trip (a bandwidth may keep the policy's figure on a busy machine).
case_drain
if [ "$case_ran" = 0 ]; then
    : # the case that writes the file is left to the other sanitizer build
elif python3 - "$dir/saved.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
m = p["model"]
assert p["alpha"] == 0.5 and p["dwell"] == 2 and p["initial"] == "pull", p
for tier in ("intra", "inter"):
    for mode in ("push", "pull"):
        assert m[tier][mode]["alpha_us"] == 0, (tier, mode, m)
assert m["inter"]["pull_rtt_us"] > 0, m
PY
then
    passed=$((passed + 1)); echo "ok: the calibrated policy saved by STRATA_ADAPTIVE_SAVE"
else
    failed=$((failed + 1)); echo "FAIL: the calibrated policy saved by STRATA_ADAPTIVE_SAVE"
fi
cat >"$dir/modes.json" <<'JSON'
{"format": "strata-modes", "version": 1, "num_experts": 16, "pull": [0, 3, 5, 8, 9, 15]}
JSON
case_run "2x2 flat, fixed mode file" 4 "$ok" -- $calm STRATA_MOE_ROUTE=flat STRATA_MOE_MODE=fixed:"$dir/modes.json" -- -n 4 --nodes 2 -- --steps $(steps 30) --mode env
# Ranks that disagree on a step's modes: the step fails on every rank instead of running
# (inside the node by the boards' digests, across nodes by the headers').
case_run "1x2, rank 1 sets other pull masks" 2 "other modes failed" -- STRATA_INTER_PEER_TIMEOUT=3s STRATA_MOE_TIMEOUT=5s -- -n 2 --nodes 1 -- --steps 10 --disagree 1
case_run "2x2 hierarchical, rank 3 sets other pull masks" 4 "other modes failed" -- STRATA_INTER_PEER_TIMEOUT=3s STRATA_MOE_TIMEOUT=5s STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps 10 --disagree 3
# A rank whose input is refused on two steps in a row (one of each form) takes part without
# tokens and gets INVALID; the others get OK, and every step stays paired with the same step
# everywhere (a shift would show as wrong rows at once).
case_run "1x4, rank 2 passes max_tokens + 1 tokens" 4 "$ok" -- $calm -- -n 4 --nodes 1 -- --steps 12 --bad-input 2:over
case_run "1x4, rank 1 passes no x" 4 "$ok" -- $calm -- -n 4 --nodes 1 -- --steps 12 --bad-input 1:null-x
case_run "2x2 flat, rank 3 passes -1 tokens" 4 "$ok" -- $calm STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps 12 --bad-input 3:negative
case_run "2x2 hierarchical, rank 0 passes no x" 4 "$ok" -- $calm STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps 12 --bad-input 0:null-x
case_run "2x2 hierarchical, rank 2 passes max_tokens + 1 tokens" 4 "$ok" -- $calm STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps 12 --bad-input 2:over
# Ranks whose protocol settings differ (round one's size here) refuse the object together.
case_run "1x4, rank 1 aborts its step after dispatch_recv" 4 "$ok" -- $calm -- -n 4 --nodes 1 -- --steps 12 --abort 1:dispatched
case_run "2x2 flat, fp8, rank 2 aborts its step after dispatch_send" 4 "$ok" -- $calm STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps 12 --abort 2:sent --dtype fp8 --hidden 256
case_run "2x2 hierarchical, pull by request, rank 3 aborts its step after dispatch_recv" 4 "$ok" -- $calm STRATA_MOE_ROUTE=hierarchical STRATA_MOE_PULL_READ=off -- -n 4 --nodes 2 -- --steps 12 --abort 3:dispatched
case_run "2x2 hierarchical, node-reduce, rank 0 aborts its step after dispatch_recv" 4 "$nr" -- $calm STRATA_MOE_ROUTE=hierarchical STRATA_MOE_COMBINE=node-reduce -- -n 4 --nodes 2 -- --steps 12 --abort 0:dispatched
case_run "2x2 hierarchical, rank 1 aborts its step after combine_send" 4 "$ok" -- $calm STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps 12 --abort 1:combined
case_run "2x2, rank 2 with another round one" 4 "configuration differs" -- $calm STRATA_MOE_SPEC_TOKENS=8 -- -n 4 --nodes 2 -- --odd-config 2
# A live rank that stalls longer than the heartbeat bound (a debugger, a page-cache storm)
# is waited for: the peer timeout ends waits only for ranks whose heartbeats stopped, and
# STRATA_MOE_TIMEOUT (60 s) bounds the wait for a live one.
case_alone case_run "1x4, rank 1 stalls 5 s, peer timeout 3 s" 4 "$ok" -- STRATA_INTER_PEER_TIMEOUT=3s -- -n 4 --nodes 1 -- --steps 10 --stall 1:5000
case_alone case_run "2x2 hierarchical, rank 2 stalls 5 s, peer timeout 3 s" 4 "$ok" -- STRATA_INTER_PEER_TIMEOUT=3s STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps 10 --stall 2:5000
# A rank killed mid-step: every survivor sees PEER_FAILED within the heartbeat bound (3 s),
# inside the node too (the engine's failure watch ends the kernels' waits), with slack for
# a loaded machine.
case_run "1x4, rank 2 killed mid-step" 3 "rank 2 failed after" -- STRATA_INTER_PEER_TIMEOUT=3s -- -n 4 --nodes 1 --allow-fail 2 -- --steps 10 --kill 2 --kill-bound-ms 12000
case_run "2x2, rank 3 killed mid-step" 3 "rank 3 failed after" -- STRATA_INTER_PEER_TIMEOUT=3s -- -n 4 --nodes 2 --allow-fail 3 -- --steps 10 --kill 3 --kill-bound-ms 12000
# What each survivor logged: one step number in all its lines, and a last line that names
# the rank that failed and its node: as the rank the failed wait was for, or among the
# failed ones (a survivor that ended first may be the one this rank saw fail first).
case_drain
for r in 0 1 2; do
    [ "$case_ran" = 1 ] || break
    steps_seen=$(grep "^\[r$r\] .*error: .*step [0-9]" "$log" | grep -o 'step [0-9]*' | sort -u | wc -l)
    last=$(grep "^\[r$r\] .*error: moe: step [0-9]* failed" "$log" | tail -1)
    if [ "$steps_seen" -eq 1 ] && [[ "$last" == *"(failed:"* ]] &&
       [[ "$last" == *"rank 3 (node 1)"* || "$last" == *"(failed:"*" rank 3 of node 1"* ]]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1)); echo "FAIL: rank $r's failure log ($steps_seen step numbers; last: $last)"
        grep "^\[r$r\] .*error" "$log"
    fi
done
# A rank killed while the others wait for their experts' rows (strata_moe_expert_wait) on
# streams: the same bound.
case_run "1x4, streams, rank 1 killed while the others wait for their experts" 3 "rank 1 failed after" -- STRATA_INTER_PEER_TIMEOUT=3s -- -n 4 --nodes 1 --allow-fail 1 -- --steps 10 --streams 1 --expert-wait 1 --kill 1 --kill-bound-ms 12000
# A rank that dispatches past the object's bound (STRATA_MOE_TIMEOUT) while every rank runs
# the step as a framework computing on the stream does, with no host wait between dispatch
# and combine: the others' owners give up on its rows and still run their combine, which
# withholds their results, so every rank gets TIMEOUT (PEER_FAILED once a failed rank has
# left), the late one too, whose terms from them were never computed on its rows (summed,
# they would be a wrong result, or a CAPACITY the object survives).
case_run "1x4, streams, rank 1 dispatches past the bound" 4 "rank 1 was late" -- STRATA_MOE_TIMEOUT=2s -- -n 4 --nodes 1 -- --steps 6 --streams 1 --late 1:6000
# Across nodes the late rank's peers give up on its header first: the same statuses.
case_run "2x2 hierarchical, streams, rank 3 dispatches past the bound" 4 "rank 3 was late" -- STRATA_MOE_TIMEOUT=2s STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps 6 --streams 1 --late 3:6000
# A rank whose combine comes past the bound of its node's ranks, which wait for its results;
# the other node outwaits it (a longer bound). Rank 0 gives up on rank 1 and still returns
# rank 2's terms: those of rank 1's experts are a former step's, so they must go flagged as
# given up, and rank 2 must fail (TIMEOUT), not sum them as the step's (a wrong result,
# passed off as OK). A rank that passes is checked exact.
case_alone case_run "2x2 hierarchical, streams, rank 1's combine past its node's bound" 4 "rank 1 combined late" -- STRATA_MOE_TIMEOUT=2s STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps 6 --streams 1 --late-combine 1:3000 --timeout-from 2:8s
case_alone case_run "2x2 hierarchical node-reduce, streams, rank 1's combine past its node's bound" 4 "rank 1 combined late" -- STRATA_MOE_TIMEOUT=2s STRATA_MOE_ROUTE=hierarchical STRATA_MOE_COMBINE=node-reduce -- -n 4 --nodes 2 -- --steps 6 --streams 1 --late-combine 1:3000 --timeout-from 2:8s
# A rank stopped mid-step (SIGSTOP: alive, silent): the same bound, PEER_FAILED or TIMEOUT;
# strata-run removes the stopped rank once the others are done.
case_run "2x2 hierarchical, rank 1 stopped mid-step" 3 "rank 1 failed after" -- STRATA_INTER_PEER_TIMEOUT=3s STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 --allow-fail 1 -- --steps 10 --stop 1 --kill-bound-ms 12000
# The network area in a pinned host bounce buffer instead of the registered heap (the
# fallback for transports that cannot register device memory), both routes.
case_run "2x2 flat, bounce buffer, round one of 3 tokens, 2 blocks" 4 "$ok" -- $calm STRATA_INTRA_BLOCKS=2 STRATA_MOE_NET_MEMORY=bounce STRATA_MOE_ROUTE=flat STRATA_MOE_SPEC_TOKENS=3 -- -n 4 --nodes 2 -- --steps $(steps 40)
case_run "3x2 hierarchical, bounce buffer, pull by request" 6 "$ok" -- $calm STRATA_MOE_NET_MEMORY=bounce STRATA_MOE_ROUTE=hierarchical STRATA_MOE_PULL_READ=off -- -n 6 --nodes 3 -- --steps $(steps 30) --experts 24 --topk 6
# Node-reduce combine: each node sums a token's terms there (fp32, k order) and returns one
# row in the combine dtype; the token's rank adds the rows in node order. Checked bit for bit
# against a reference that sums in that order (the exact reference fails these cases), through
# STRATA_MOE_COMBINE and through params.combine (--combine).
case_run "2x2 hierarchical, node-reduce, bf16, round one of 3 tokens" 4 "$nr" -- $calm STRATA_MOE_ROUTE=hierarchical STRATA_MOE_COMBINE=node-reduce STRATA_MOE_SPEC_TOKENS=3 -- -n 4 --nodes 2 -- --steps $(steps 40)
case_run "2x2 hierarchical, node-reduce, fp32, 3 blocks" 4 "$nr" -- $calm STRATA_INTRA_BLOCKS=3 STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps $(steps 40) --dtype fp32 --combine-dtype fp32 --hidden 64 --combine node-reduce
case_run "3x2 hierarchical, node-reduce, fp16, bounce buffer, pull by request, 16 KiB chunks" 6 "$nr" -- $calm STRATA_INTER_STRIPE_MIN=16k STRATA_MOE_NET_MEMORY=bounce STRATA_MOE_ROUTE=hierarchical STRATA_MOE_PULL_READ=off -- -n 6 --nodes 3 -- --steps $(steps 30) --dtype fp16 --combine-dtype fp16 --experts 24 --topk 6 --combine node-reduce
case_run "4x1 hierarchical, node-reduce, fp8 -> bf16" 4 "$nr" -- $calm STRATA_MOE_ROUTE=hierarchical STRATA_MOE_COMBINE=node-reduce -- -n 4 --nodes 4 -- --steps $(steps 20) --experts 8 --topk 4 --dtype fp8 --hidden 256
case_run "2x2 hierarchical, node-reduce, all tokens to expert 12, capacity 12" 4 "$nr" -- $calm STRATA_MOE_ROUTE=hierarchical STRATA_MOE_COMBINE=node-reduce -- -n 4 --nodes 2 -- --steps $(steps 20) --overflow 12:10 --expert-wait 1
case_run "2x2 hierarchical, node-reduce, adaptive on the drifting trace" 4 "$nr" -- $calm STRATA_MOE_ROUTE=hierarchical STRATA_MOE_COMBINE=node-reduce -- -n 4 --nodes 2 -- --steps $(steps 60) --trace "$dir/drift.trace" --mode adaptive
case_run "2x2 hierarchical, node-reduce, rank 2 passes max_tokens + 1 tokens" 4 "$nr" -- $calm STRATA_MOE_ROUTE=hierarchical STRATA_MOE_COMBINE=node-reduce -- -n 4 --nodes 2 -- --steps 12 --bad-input 2:over
# Where node-reduce cannot run and params.combine asks for it, creation is refused on every
# rank: the flat route; ranks that differ in the combine mode; a value outside
# strata_moe_combine_t. STRATA_MOE_COMBINE=node-reduce, a preference for every object of the
# process, leaves a flat one exact instead (decode-sized objects take the flat route).
case_run "2x2 flat, node-reduce refused" 4 "creation refused: operation not supported" -- $calm STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --combine node-reduce --refused "not supported"
case_run "2x2 flat, STRATA_MOE_COMBINE=node-reduce combines exactly" 4 "steps passed (flat route, exact combine" -- $calm STRATA_MOE_COMBINE=node-reduce -- -n 4 --nodes 2 -- --steps $(steps 10)
case_run "2x2 hierarchical, rank 1 alone asks for node-reduce" 4 "creation refused: invalid configuration" -- $calm STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --odd-combine 1 --refused "invalid configuration"
# On the flat route, where node-reduce is refused: the ranks still agree first, so none
# waits for the one that asked.
case_run "2x2 flat, rank 1 alone asks for node-reduce" 4 "creation refused: invalid configuration" -- STRATA_INTER_PEER_TIMEOUT=3s STRATA_BOOTSTRAP_TIMEOUT=20s STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --odd-combine 1 --refused "invalid configuration"
case_run "2x2 hierarchical, rank 1 alone takes the flat route" 4 "creation refused: invalid configuration" -- $calm STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --odd-route 1 --refused "invalid configuration"
case_run "2x2 hierarchical, params.combine 7" 4 "creation refused: invalid argument" -- $calm STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --combine bogus --refused "invalid argument"

# The streamed exchange: a step's dispatch and combine cross the network in rounds of a
# slice of every rank's tokens, through areas that STRATA_MOE_WINDOW_BYTES sizes. Windows of
# 4 to 64 KiB make rounds of 1 to 6 tokens, so that every step crosses 4 to 24 rounds (every
# rank checks every row and combined value, as above), both buffers of staging and of the
# returns take turns, and later rounds wait for their peers' credit. The streamed exchange's
# experts hold twice their mean load by default: rows past it are dropped, and every rank
# checks that its results lacking terms lack only some of those past capacity, exactly, with
# CAPACITY. Where a case checks what a rank aborting or refused withholds, or runs on
# streams, STRATA_MOE_CAPACITY_FACTOR=0 (exact, never drops) keeps drops out of it ($never).
st="STRATA_MOE_EXCHANGE=streamed"
never="STRATA_MOE_CAPACITY_FACTOR=0"
sok='streamed exchange in'
short='results lacked terms dropped past'
case_run "streamed: 2x2 flat, bf16, 1-token rounds" 4 "$sok" -- $calm $st STRATA_MOE_WINDOW_BYTES=8k STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps $(steps 40)
case_run "streamed: 2x2 hierarchical, fp8, no round one, 3 blocks" 4 "$sok" -- $calm $st STRATA_MOE_WINDOW_BYTES=32k STRATA_MOE_SPEC_TOKENS=0 STRATA_INTRA_BLOCKS=3 STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps $(steps 40) --dtype fp8 --hidden 256
case_run "streamed: 3x2 hierarchical, pull by read, 6 experts, topk 6" 6 "$sok" -- $calm $st STRATA_MOE_WINDOW_BYTES=64k STRATA_MOE_MODE=pull STRATA_MOE_ROUTE=hierarchical -- -n 6 --nodes 3 -- --steps $(steps 30) --experts 6 --topk 6
case_run "streamed: 2x2 flat, pull by request, bounce buffer, work ring of 2 slots" 4 "$sok" -- $calm $st STRATA_MOE_WINDOW_BYTES=48k STRATA_MOE_MODE=pull STRATA_MOE_PULL_READ=off STRATA_MOE_NET_MEMORY=bounce STRATA_MOE_RING_SLOTS=2 STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps $(steps 30)
case_run "streamed: 2x2 hierarchical, streams changing every step, experts waited for on a stream" 4 "$sok" -- $calm $st $never STRATA_MOE_WINDOW_BYTES=64k STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps $(steps 30) --streams 1 --expert-wait 2
# In 24 rounds an expert whose rows of the step are all in (or that gets none) is complete
# before the last round: each is waited for on the host and copied, and must not change.
case_run "streamed: 2x2 flat, 24 rounds, streams, experts waited for on the host" 4 "$sok" -- $calm $st $never STRATA_MOE_WINDOW_BYTES=8k STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps $(steps 20) --streams 1 --expert-wait 1
# The step's counts come with the first round: rank 3 holds back its dispatch_recv, and with
# it its later rounds, until rank 0's dispatch_counts has returned the step's counts.
mkdir -p "$dir/counts-flat" "$dir/counts-hierarchical"
for route in flat hierarchical; do
    case_run "streamed: 2x2 $route, streams, rank 0's counts while rank 3 holds its later rounds back" 4 "$sok" -- $calm $st $never STRATA_MOE_WINDOW_BYTES=16k STRATA_MOE_ROUTE=$route -- -n 4 --nodes 2 -- --steps $(steps 20) --streams 1 --counts-first 3:"$dir/counts-$route"
done
case_run "streamed: 2x2 flat, adaptive on the drifting trace, rows past twice the mean load dropped" 4 "$short" -- $calm $st STRATA_MOE_WINDOW_BYTES=4k STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps $(steps 60) --trace "$dir/drift.trace" --mode adaptive
case_run "streamed: 2x2 hierarchical, all tokens to expert 12, capacity 12" 4 "$sok" -- $calm $st STRATA_MOE_WINDOW_BYTES=16k STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps $(steps 20) --overflow 12:10 --expert-wait 1
case_run "streamed: 2x2 flat, node 1's tokens to expert 0, capacity 12: only node 1 told" 4 "$sok" -- $calm $st STRATA_MOE_WINDOW_BYTES=16k STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps $(steps 20) --overflow 0:12:2
case_run "streamed: 2x2 hierarchical, rank 3 aborts its step after dispatch_recv" 4 "$sok" -- $calm $st $never STRATA_MOE_WINDOW_BYTES=16k STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps 12 --abort 3:dispatched
case_run "streamed: 2x2 flat, fp16, rank 1 aborts its step after combine_send" 4 "$sok" -- $calm $st $never STRATA_MOE_WINDOW_BYTES=32k STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps 12 --abort 1:combined --dtype fp16 --combine-dtype fp16
case_run "streamed: 2x2 flat, rank 2 passes max_tokens + 1 tokens" 4 "$sok" -- $calm $st $never STRATA_MOE_WINDOW_BYTES=16k STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps 12 --bad-input 2:over
# Node-reduce in rounds: each round's terms summed where they were computed, one row per
# entry back, the weights a round ahead (checked within each node's rounding, as above).
case_run "streamed: 2x2 hierarchical, node-reduce (STRATA_MOE_COMBINE), 1-token rounds" 4 "node-reduce combine, $sok" -- $calm $st STRATA_MOE_WINDOW_BYTES=8k STRATA_MOE_COMBINE=node-reduce STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps $(steps 20)
case_run "streamed: 3x2 hierarchical, node-reduce, fp16, bounce buffer, pull by request" 6 "node-reduce combine, $sok" -- $calm $st $never STRATA_MOE_WINDOW_BYTES=32k STRATA_MOE_NET_MEMORY=bounce STRATA_MOE_PULL_READ=off STRATA_MOE_ROUTE=hierarchical -- -n 6 --nodes 3 -- --steps $(steps 20) --dtype fp16 --combine-dtype fp16 --experts 24 --topk 6 --combine node-reduce
case_run "streamed: 2x2 hierarchical, node-reduce, all tokens to expert 12, capacity 12" 4 "node-reduce combine, $sok" -- $calm $st STRATA_MOE_WINDOW_BYTES=16k STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps $(steps 20) --overflow 12:10 --combine node-reduce
case_run "streamed: 2x2 hierarchical, node-reduce, rank 0 aborts its step after dispatch_recv" 4 "node-reduce combine, $sok" -- $calm $st $never STRATA_MOE_WINDOW_BYTES=16k STRATA_MOE_COMBINE=node-reduce STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps 12 --abort 0:dispatched
# (The default window holds every token here, and the capacity is given: the ranks differ in
# the exchange alone, not also in round one's size, which a small window would clamp, or in
# the capacity, which follows the exchange by default.)
case_run "streamed: 2x2, rank 1 alone on the worst-case exchange" 4 "and STRATA_MOE_WINDOW_BYTES must match on every rank" -- $calm $st $never -- -n 4 --nodes 2 -- --odd-exchange 1
# A rank killed or stopped inside a round: the same bounds as above.
case_run "streamed: 2x2, rank 3 killed mid-step" 3 "rank 3 failed after" -- STRATA_INTER_PEER_TIMEOUT=3s $st STRATA_MOE_WINDOW_BYTES=8k -- -n 4 --nodes 2 --allow-fail 3 -- --steps 10 --kill 3 --kill-bound-ms 12000
case_run "streamed: 2x2 hierarchical, rank 1 stopped mid-step" 3 "rank 1 failed after" -- STRATA_INTER_PEER_TIMEOUT=3s $st STRATA_MOE_WINDOW_BYTES=8k STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 --allow-fail 1 -- --steps 10 --stop 1 --kill-bound-ms 12000
case_run "streamed: 2x2 hierarchical, node-reduce, rank 2 killed mid-step" 3 "rank 2 failed after" -- STRATA_INTER_PEER_TIMEOUT=3s $st STRATA_MOE_WINDOW_BYTES=8k STRATA_MOE_COMBINE=node-reduce STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 --allow-fail 2 -- --steps 10 --kill 2 --kill-bound-ms 12000
# A combine past its node's bound in rounds (as in one pass above): rank 0's rounds return
# rank 1's terms flagged as given up, and a rank that passes is checked exact. (Here rank 1
# wrote its outputs in place before it slept, so terms read early would still be right:
# this case checks the bounded failure; the two above check that nothing stale is summed.)
case_alone case_run "streamed: 2x2 hierarchical, streams, rank 1's combine past its node's bound" 4 "rank 1 combined late" -- STRATA_MOE_TIMEOUT=2s $st STRATA_MOE_WINDOW_BYTES=64k STRATA_MOE_CAPACITY_FACTOR=0 STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps 6 --streams 1 --late-combine 1:3000 --timeout-from 2:8s

# The exact receive: every row delivered, packed, into buffers sized from the step's
# counts, none dropped whatever the load (every token to one expert), on one node and across
# nodes on both routes, every dtype; an abort and a refused input on one rank; a rank killed
# mid-step; on streams (the host waits for the counts, not for the rows); refused with
# node-reduce. With the streamed exchange in rounds (windows of one or a few tokens here:
# 8 to 48 rounds a step) each round's rows are loaded after it and each round's terms
# returned in its own combine round: the same checks on both routes, on streams, with a
# bounce buffer, an abort at each point, a rank killed mid-step.
ex='exact receive'
# across nodes the exact receive streams unless asked otherwise (STRATA_MOE_EXCHANGE=auto)
wc=STRATA_MOE_EXCHANGE=worst-case
exw='exact receive, worst-case exchange'
case_run "exact receive: 1x4, bf16" 4 "$ex" -- $calm -- -n 4 --nodes 1 -- --steps $(steps 40) --exact 1
case_run "exact receive: 1x4, fp8 -> bf16, every token to expert 3, 3 blocks" 4 "$ex" -- $calm STRATA_INTRA_BLOCKS=3 -- -n 4 --nodes 1 -- --steps $(steps 20) --exact 1 --overflow 3 --tokens 64 --dtype fp8 --hidden 256
case_run "exact receive: 1x2, fp32" 2 "$ex" -- $calm -- -n 2 --nodes 1 -- --steps $(steps 20) --exact 1 --dtype fp32 --combine-dtype fp32 --hidden 64
case_run "exact receive: 1x4, rank 1 aborts its step after combine_send" 4 "$ex" -- $calm -- -n 4 --nodes 1 -- --steps 12 --exact 1 --abort 1:combined
case_run "exact receive: 1x4, rank 3 aborts its step after dispatch_recv" 4 "$ex" -- $calm -- -n 4 --nodes 1 -- --steps 12 --exact 1 --abort 3:dispatched
case_run "exact receive: 1x4, rank 2 passes max_tokens + 1 tokens" 4 "$ex" -- $calm -- -n 4 --nodes 1 -- --steps 12 --exact 1 --bad-input 2:over
case_run "exact receive: 1x4, rank 2 killed mid-step" 3 "rank 2 failed after" -- STRATA_INTER_PEER_TIMEOUT=3s -- -n 4 --nodes 1 --allow-fail 2 -- --steps 10 --exact 1 --kill 2 --kill-bound-ms 12000
case_run "exact receive: 2x2 flat, all tokens to expert 12" 4 "$exw" -- $calm $wc STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps $(steps 20) --exact 1 --overflow 12 --tokens 48
case_run "exact receive: 2x2 hierarchical, node 1's tokens to expert 0, round one of 3 tokens" 4 "$exw" -- $calm $wc STRATA_MOE_ROUTE=hierarchical STRATA_MOE_SPEC_TOKENS=3 -- -n 4 --nodes 2 -- --steps $(steps 20) --exact 1 --overflow 0:8:2
case_run "exact receive: 3x2 hierarchical, fp8 -> bf16, 24 experts, topk 6" 6 "$exw" -- $calm $wc STRATA_MOE_ROUTE=hierarchical -- -n 6 --nodes 3 -- --steps $(steps 20) --exact 1 --dtype fp8 --hidden 256 --experts 24 --topk 6
case_run "exact receive: 2x2 hierarchical, rank 1 aborts its step after dispatch_recv" 4 "$exw" -- $calm $wc STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps 12 --exact 1 --abort 1:dispatched
case_run "exact receive: 2x2 hierarchical, rank 0 passes no x" 4 "$exw" -- $calm $wc STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps 12 --exact 1 --bad-input 0:null-x
case_run "exact receive: 2x2 hierarchical, rank 3 killed mid-step" 3 "rank 3 failed after" -- STRATA_INTER_PEER_TIMEOUT=3s $wc STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 --allow-fail 3 -- --steps 10 --exact 1 --kill 3 --kill-bound-ms 12000
exr="exact receive, streamed exchange in"
case_run "exact receive, streamed: 2x2 hierarchical, 24 rounds" 4 "$exr 24 rounds" -- $calm $st STRATA_MOE_WINDOW_BYTES=8k STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps $(steps 20) --exact 1
case_run "exact receive, streamed: 2x2 flat, all tokens to expert 12" 4 "$exr" -- $calm $st STRATA_MOE_WINDOW_BYTES=16k STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps $(steps 20) --exact 1 --overflow 12 --tokens 48
case_run "exact receive, streamed: 3x2 hierarchical, fp8 -> bf16, 24 experts, topk 6" 6 "$exr" -- $calm $st STRATA_MOE_WINDOW_BYTES=64k STRATA_MOE_ROUTE=hierarchical -- -n 6 --nodes 3 -- --steps $(steps 12) --exact 1 --dtype fp8 --hidden 256 --experts 24 --topk 6
case_run "exact receive, the default exchange (streamed, one round): 2x2 hierarchical, streams" 4 "$exr 1 rounds" -- $calm STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps $(steps 20) --exact 1 --streams 1
case_run "exact receive, streamed: 2x2 hierarchical, streams" 4 "$exr 24 rounds" -- $calm $st STRATA_MOE_WINDOW_BYTES=8k STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps $(steps 20) --exact 1 --streams 1
case_run "exact receive, streamed: 2x2 flat, bounce buffer" 4 "$exr" -- $calm $st STRATA_MOE_WINDOW_BYTES=8k STRATA_MOE_NET_MEMORY=bounce STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps $(steps 20) --exact 1
case_run "exact receive, streamed: 2x2 hierarchical, rank 1 aborts after dispatch_recv" 4 "$exr" -- $calm $st STRATA_MOE_WINDOW_BYTES=8k STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps 12 --exact 1 --abort 1:dispatched
case_run "exact receive, streamed: 2x2 flat, rank 2 aborts after combine_send" 4 "$exr" -- $calm $st STRATA_MOE_WINDOW_BYTES=8k STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps 12 --exact 1 --abort 2:combined
case_run "exact receive, streamed: 2x2 hierarchical, rank 3 killed mid-step" 3 "rank 3 failed after" -- STRATA_INTER_PEER_TIMEOUT=3s $st STRATA_MOE_WINDOW_BYTES=8k STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 --allow-fail 3 -- --steps 10 --exact 1 --kill 3 --kill-bound-ms 12000
case_run "exact receive: 2x2 hierarchical node-reduce, refused" 4 "creation refused" -- $calm STRATA_MOE_ROUTE=hierarchical STRATA_MOE_COMBINE=node-reduce -- -n 4 --nodes 2 -- --exact 1 --refused "not supported"

# Over the UCX transport (where built): tcp between the simulated nodes, as real nodes would
# talk (they share this host's memory, so UCX's shared-memory transports are forbidden).
if "$check" --built ucx; then
    ucx="STRATA_INTER_TRANSPORT=ucx STRATA_INTER_SHARED_MEMORY=no STRATA_LOG_LEVEL=info"
    over_line='rail 0: ucx tcp eth0'
    case_run "ucx: 2x2 flat, bf16, round one of 3 tokens" 4 "$ok" -- $calm $ucx STRATA_MOE_ROUTE=flat STRATA_MOE_SPEC_TOKENS=3 -- -n 4 --nodes 2 -- --steps $(steps 40)
    case_run "ucx: 2x2 hierarchical, fp8 -> bf16, pull by read" 4 "$ok" -- $calm $ucx STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps $(steps 40) --dtype fp8 --hidden 256
    case_run "ucx: 3x2 flat, fp32, pull by request, 2 rails" 6 "$ok" -- $calm $ucx STRATA_INTER_RAILS=2 STRATA_MOE_ROUTE=flat STRATA_MOE_PULL_READ=off -- -n 6 --nodes 3 -- --steps $(steps 30) --dtype fp32 --combine-dtype fp32 --hidden 64 --experts 12 --topk 3
    case_run "ucx: 2x2, rank 3 killed mid-step" 3 "rank 3 failed after" -- STRATA_INTER_PEER_TIMEOUT=3s $ucx -- -n 4 --nodes 2 --allow-fail 3 -- --steps 10 --kill 3 --kill-bound-ms 12000
    over_line=
else
    echo "skipped: the ucx cases (strata built without -DSTRATA_WITH_UCX=ON)"
fi

case_drain
echo "$passed passed, $failed failed"
cases_left_line
[ "$failed" -eq 0 ]
