#!/usr/bin/env bash
# Two-tier MoE end to end at 16 ranks on 8 simulated nodes (2 ranks each), small shapes:
# both routes, in Push, in Pull (by read and by request), with pull masks changing by step,
# node-reduce combine, the streamed exchange, the exact receive (in one round and in
# rounds), and adaptive on a drifting routing trace; every rank checks its data exactly
# (node-reduce against a reference that sums in its order). On 2 cores the whole file takes
# about a minute; the sanitizer builds run 6 steps in the fixed modes (adaptive keeps its
# 30: it must see an expert change mode).
set -u
run=$1 check=$2 tune=$3
. "$(dirname "$0")/moe_cases.sh"
# Two cases at a time; one under ThreadSanitizer, where 32 instrumented processes on two
# cores take longer than 16 twice (68 s against 45 s for the file).
[ "${STRATA_TEST_SANITIZE:-}" = thread ] || case_parallel

calm=STRATA_INTER_PEER_TIMEOUT=30s
world=(-n 16 --nodes 8)
shape=(--experts 32 --topk 4 --hidden 64 --tokens 8)
for route in flat hierarchical; do
    at="STRATA_MOE_ROUTE=$route"
    case_run "16x8 $route, push" 16 "$ok" -- $calm $at STRATA_MOE_MODE=push -- "${world[@]}" -- \
        --steps $(steps 20 6) "${shape[@]}" --mode env
    case_run "16x8 $route, pull by read" 16 "$ok" -- $calm $at STRATA_MOE_MODE=pull -- \
        "${world[@]}" -- --steps $(steps 20 6) "${shape[@]}" --mode env
    case_run "16x8 $route, pull masks by step, pull by request" 16 "$ok" -- $calm $at \
        STRATA_MOE_PULL_READ=off -- "${world[@]}" -- --steps $(steps 20 6) "${shape[@]}"
done
# Node-reduce combine across 8 nodes: 7 peers' partial rows in one area, in node order.
case_run "16x8 hierarchical, node-reduce" 16 "steps passed (hierarchical route, node-reduce combine" \
    -- $calm STRATA_MOE_ROUTE=hierarchical -- "${world[@]}" -- --steps $(steps 20 6) "${shape[@]}" \
    --combine node-reduce
# The streamed exchange: windows of 2 tokens a round (per peer and token four 160-byte
# entries and two rows of up to t terms returned, t = 2 flat and 4 hierarchical; 14 and 7
# peers), so each step crosses 4 rounds; pull masks by step; the streamed exchange's default
# capacity, twice the mean load (rows past it dropped, and checked so).
case_run "16x8 flat, streamed in 4 rounds" 16 "streamed exchange in 4 rounds" -- $calm \
    STRATA_MOE_ROUTE=flat STRATA_MOE_EXCHANGE=streamed STRATA_MOE_WINDOW_BYTES=36k -- \
    "${world[@]}" -- --steps $(steps 20 6) "${shape[@]}"
case_run "16x8 hierarchical, streamed in 4 rounds, pull by request" 16 \
    "streamed exchange in 4 rounds" -- $calm STRATA_MOE_ROUTE=hierarchical \
    STRATA_MOE_EXCHANGE=streamed STRATA_MOE_WINDOW_BYTES=26k STRATA_MOE_PULL_READ=off -- \
    "${world[@]}" -- --steps $(steps 20 6) "${shape[@]}"
# Node-reduce in rounds: the weights (4 x 4 bytes a token per peer, twice each way) leave
# the same window 2 tokens.
case_run "16x8 hierarchical, node-reduce, streamed in 4 rounds" 16 \
    "node-reduce combine, streamed exchange in 4 rounds" -- $calm STRATA_MOE_ROUTE=hierarchical \
    STRATA_MOE_EXCHANGE=streamed STRATA_MOE_WINDOW_BYTES=26k -- "${world[@]}" -- \
    --steps $(steps 20 6) "${shape[@]}" --combine node-reduce
# The exact receive across 8 nodes on the worst-case exchange (named: the exact receive
# streams by default): every row into buffers of the step's size, both routes.
for route in flat hierarchical; do
    case_run "16x8 $route, exact receive, worst-case exchange" 16 "exact receive, worst-case exchange" \
        -- $calm STRATA_MOE_ROUTE=$route STRATA_MOE_EXCHANGE=worst-case \
        -- "${world[@]}" -- --steps $(steps 20 6) "${shape[@]}" --exact 1
done
# The exact receive in rounds across 8 nodes (4 a step): the step's counts from its first
# round, then every row into buffers of the step's size, round by round, both routes.
for route in flat hierarchical; do
    case_run "16x8 $route, exact receive, streamed in 4 rounds" 16 "exact receive, streamed exchange in 4 rounds" \
        -- $calm STRATA_MOE_ROUTE=$route STRATA_MOE_EXCHANGE=streamed STRATA_MOE_WINDOW_BYTES=36k \
        -- "${world[@]}" -- --steps $(steps 20 6) "${shape[@]}" --exact 1
done
# Hot experts that move every 5 steps: the owners switch experts between Push and Pull.
"$tune" generate --experts 32 --ranks 16 --ranks-per-node 2 --tokens 8 --topk 4 --hidden 64 \
    --zipf 1.6 --drift-period 5 --drift-fraction 1 --steps 30 --seed "$seed" -o "$dir/drift.trace" ||
    { echo "FAIL: strata-tune generate"; exit 1; }
for route in flat hierarchical; do
    case_run "16x8 $route, adaptive on a drifting trace" 16 "$ok" -- $calm STRATA_MOE_ROUTE=$route \
        -- "${world[@]}" -- --steps 30 "${shape[@]}" --trace "$dir/drift.trace" --mode adaptive
done

case_drain
echo "$passed passed, $failed failed"
cases_left_line
[ "$failed" -eq 0 ]
