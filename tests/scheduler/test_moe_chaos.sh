#!/usr/bin/env bash
# The two-tier MoE matrix over the chaos transport (STRATA_INTER_TRANSPORT=chaos:ofi, test
# builds only): tcp between simulated nodes, every operation held back a random time, writes
# cut into pieces posted in any order, completions reported out of order and in odd batches
# (inter/chaos/chaos_transport.c). Both routes, Push, Pull by read and by request, adaptive,
# node-reduce, fp8, the bounce buffer, the loopback-read flush and a rank's aborted step
# (its withheld terms counted after each returned block) must stay exact: nothing
# above the transport may count on the order tcp happens to keep. The seed drives the chaos
# too (STRATA_CHAOS_SEED, mixed with rank and rail); a failure prints it, and
# STRATA_TEST_SEED=<seed> replays the run.
set -u
run=$1 check=$2 tune=$3
. "$(dirname "$0")/moe_cases.sh"
case_parallel # two cases at a time

if ! "$check" --built chaos 2>/dev/null; then
    echo "SKIP: strata was built without the chaos transport (-DSTRATA_WITH_CHAOS=ON)"
    exit 0
fi
# Chunks of 4 KiB: every transfer is several writes, each free to land before the others.
chaos="STRATA_INTER_TRANSPORT=chaos:ofi STRATA_CHAOS_SEED=$seed STRATA_INTER_STRIPE_MIN=4k"
calm=STRATA_INTER_PEER_TIMEOUT=30s
# Every rank must have logged, as it closed, that pieces were handed over out of order.
over_line='chaos: ofi .* pieces, [1-9][0-9]* of them after a later one'
log_info=STRATA_LOG_LEVEL=info
case_run "chaos, 2x2 flat, push, bf16, round one of 3 tokens, 3 blocks" 4 "$ok" -- $calm $chaos $log_info STRATA_INTRA_BLOCKS=3 STRATA_MOE_ROUTE=flat STRATA_MOE_SPEC_TOKENS=3 STRATA_MOE_MODE=push -- -n 4 --nodes 2 -- --steps $(steps 30)
case_run "chaos, 2x2 hierarchical, fp8 -> bf16" 4 "$ok" -- $calm $chaos $log_info STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps $(steps 30) --dtype fp8 --hidden 256
case_run "chaos, 2x2 flat, pull by read" 4 "$ok" -- $calm $chaos $log_info STRATA_MOE_ROUTE=flat STRATA_MOE_MODE=pull -- -n 4 --nodes 2 -- --steps $(steps 30)
case_run "chaos, 3x2 hierarchical, pull by request, fp16" 6 "$ok" -- $calm $chaos $log_info STRATA_MOE_ROUTE=hierarchical STRATA_MOE_MODE=pull STRATA_MOE_PULL_READ=off -- -n 6 --nodes 3 -- --steps $(steps 20) --dtype fp16 --combine-dtype fp16 --experts 24 --topk 6
case_run "chaos, 2x2 flat, pull by request, fp32" 4 "$ok" -- $calm $chaos $log_info STRATA_MOE_ROUTE=flat STRATA_MOE_MODE=pull STRATA_MOE_PULL_READ=off -- -n 4 --nodes 2 -- --steps $(steps 30) --dtype fp32 --combine-dtype fp32 --hidden 64
"$tune" generate --experts 32 --ranks 4 --ranks-per-node 2 --tokens 16 --topk 2 --hidden 256 \
    --zipf 1.6 --drift-period 10 --drift-fraction 1 --steps 40 --seed "$seed" -o "$dir/drift.trace" ||
    { echo "FAIL: strata-tune generate"; exit 1; }
case_run "chaos, 2x2 flat, adaptive on a drifting trace" 4 "$ok" -- $calm $chaos $log_info STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps $(steps 40) --trace "$dir/drift.trace" --mode adaptive
nr='steps passed (hierarchical route, node-reduce combine'
case_run "chaos, 2x2 hierarchical, node-reduce, adaptive" 4 "$nr" -- $calm $chaos $log_info STRATA_MOE_ROUTE=hierarchical STRATA_MOE_COMBINE=node-reduce -- -n 4 --nodes 2 -- --steps $(steps 40) --trace "$dir/drift.trace" --mode adaptive
case_run "chaos, 3x2 hierarchical, node-reduce, bounce buffer, pull by request" 6 "$nr" -- $calm $chaos $log_info STRATA_MOE_NET_MEMORY=bounce STRATA_MOE_ROUTE=hierarchical STRATA_MOE_PULL_READ=off -- -n 6 --nodes 3 -- --steps $(steps 20) --dtype fp16 --combine-dtype fp16 --experts 24 --topk 6 --combine node-reduce
case_run "chaos, 2x2 flat, bounce buffer, overflow to expert 5" 4 "$ok" -- $calm $chaos $log_info STRATA_MOE_NET_MEMORY=bounce STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps $(steps 20) --overflow 5:8
case_run "chaos, 2x2 hierarchical, pull, flushed by loopback reads" 4 "$ok" -- $calm $chaos $log_info STRATA_MOE_FLUSH=read STRATA_MOE_ROUTE=hierarchical STRATA_MOE_MODE=pull -- -n 4 --nodes 2 -- --steps $(steps 20)
case_run "chaos, 2x2 flat, rank 2 aborts a step, its experts' terms withheld" 4 "$ok" -- $calm $chaos $log_info STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps 12 --abort 2:dispatched --hidden 1024
case_run "chaos, 2x2 flat, 2 rails, streams changing every step" 4 "$ok" -- $calm $chaos $log_info STRATA_INTER_RAILS=2 STRATA_MOE_ROUTE=flat -- -n 4 --nodes 2 -- --steps $(steps 30) --streams 1
# The streamed exchange in rounds of 1 to 2 tokens: a peer may have returns (and with
# node-reduce weights) in flight into both of a buffer pair at once, each counted apart.
case_run "chaos, 2x2 hierarchical, streamed, 1-token rounds" 4 "streamed exchange in" -- $calm $chaos $log_info STRATA_MOE_EXCHANGE=streamed STRATA_MOE_CAPACITY_FACTOR=0 STRATA_MOE_WINDOW_BYTES=8k STRATA_MOE_ROUTE=hierarchical -- -n 4 --nodes 2 -- --steps $(steps 20)
case_run "chaos, 2x2 hierarchical, streamed, node-reduce" 4 "node-reduce combine, streamed exchange in" -- $calm $chaos $log_info STRATA_MOE_EXCHANGE=streamed STRATA_MOE_CAPACITY_FACTOR=0 STRATA_MOE_WINDOW_BYTES=16k STRATA_MOE_ROUTE=hierarchical STRATA_MOE_COMBINE=node-reduce -- -n 4 --nodes 2 -- --steps $(steps 20)

case_drain
echo "$passed passed, $failed failed (seed $seed)"
cases_left_line
[ "$failed" -eq 0 ]
