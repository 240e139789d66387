"""One rank of a torchrun job of 2 checking strata.ep.Buffer the way a DeepEP user checks
its Buffer, against what every rank's inputs say (each rank's inputs come from a seed of its
own, so every rank can recompute every other's): the dispatch layout, the tokens each rank
receives (each once, from which ranks, with which local experts and weights), the counts
per expert, combine's round trip with weights, a cached dispatch, and the low-latency
path's padded per-expert layout and weighted combine; a bad expert id refused before the
step, and a rank that aborts its step; the handle reused as Megatron's backward does, a
dispatch refused while another waits for its combine (that step left whole), and, last,
each rank a node of its own with STRATA_MOE_EXCHANGE=streamed and STRATA_MOE_COMBINE=
node-reduce set. Prints "rank R of W: strata.ep checks passed"."""
import os
import sys

import torch
import torch.distributed as dist

import strata
import strata.ep

TOKENS, HIDDEN, EXPERTS, TOPK = 24, 64, 8, 3


def inputs(rank):
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(TOKENS, HIDDEN, generator=g)
    idx = torch.stack([torch.randperm(EXPERTS, generator=g)[:TOPK] for _ in range(TOKENS)])
    idx[torch.rand(TOKENS, TOPK, generator=g) < 0.15] = -1
    w = torch.rand(TOKENS, TOPK, generator=g)
    return x, idx, w


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def check_layout(buffer, idx, world):
    per_rank = EXPERTS // world
    tokens_per_rank, per_node, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, EXPERTS)
    for r in range(world):
        want = ((idx >= r * per_rank) & (idx < (r + 1) * per_rank)).any(1)
        check(torch.equal(in_rank[:, r], want), f"is_token_in_rank[:, {r}]")
        check(int(tokens_per_rank[r]) == int(want.sum()), f"num_tokens_per_rank[{r}]")
    for e in range(EXPERTS):
        check(int(per_expert[e]) == int((idx == e).sum()), f"num_tokens_per_expert[{e}]")
    nodes = buffer.comm.num_nodes
    if nodes == 1:
        check(per_node is None, "num_tokens_per_rdma_rank on one node")
    else:
        node_of = torch.tensor([buffer._node_of(r) for r in range(world)])
        for n in range(nodes):
            want = int(in_rank[:, node_of == n].any(1).sum())
            check(int(per_node[n]) == want, f"num_tokens_per_rdma_rank[{n}]")
    return tokens_per_rank, per_expert, in_rank


def expected_recv(rank, world):
    """The tokens rank receives, ordered by source rank then index: (x, local idx, weights)."""
    per_rank = EXPERTS // world
    first = rank * per_rank
    xs, idxs, ws = [], [], []
    for s in range(world):
        x, idx, w = inputs(s)
        local = (idx >= first) & (idx < first + per_rank)
        for t in range(TOKENS):
            if local[t].any():
                xs.append(x[t])
                idxs.append(torch.where(local[t], idx[t] - first, torch.tensor(-1)))
                ws.append(torch.where(local[t], w[t], torch.tensor(0.0)))
    return torch.stack(xs), torch.stack(idxs), torch.stack(ws)


def check_normal(buffer, rank, world):
    x, idx, w = inputs(rank)
    tokens_per_rank, per_expert, in_rank = check_layout(buffer, idx, world)
    recv_x, recv_idx, recv_w, counts, handle, event = buffer.dispatch(
        x, topk_idx=idx, topk_weights=w, num_tokens_per_rank=tokens_per_rank,
        is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    event.current_stream_wait()
    want_x, want_idx, want_w = expected_recv(rank, world)
    check(torch.equal(recv_x, want_x), "recv_x: each token once, by source rank and index")
    check(torch.equal(recv_idx, want_idx), "recv_topk_idx: local experts, -1 elsewhere")
    check(torch.equal(recv_w, want_w), "recv_topk_weights")
    per_rank = EXPERTS // world
    everyone = [inputs(s)[1] for s in range(world)]
    for e in range(per_rank):
        want = sum(int((i == rank * per_rank + e).sum()) for i in everyone)
        check(counts[e] == want, f"num_recv_tokens_per_expert_list[{e}]: {counts[e]} != {want}")
    # Round trip: each rank sends back what it received; a token comes back once per rank
    # it went to, and the weights, split over the ranks, add up to the token's own.
    combined_x, combined_w, _ = buffer.combine(recv_x, handle, topk_weights=recv_w)
    times = in_rank.sum(1, keepdim=True).to(torch.float32)
    torch.testing.assert_close(combined_x, x * times, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(combined_w, torch.where(idx >= 0, w, torch.tensor(0.0)))
    # A cached dispatch: the same routing, new rows.
    recv2, _, _, _, handle2, _ = buffer.dispatch(x * 2, handle=handle)
    check(torch.equal(recv2, want_x * 2), "a cached dispatch's rows")
    check(handle2 is handle, "a cached dispatch returns the handle it was given")
    combined2, _, _ = buffer.combine(recv2, handle2)
    torch.testing.assert_close(combined2, x * 2 * times, rtol=1e-6, atol=1e-6)


def check_low_latency(buffer, rank, world):
    x, idx, w = inputs(rank)
    per_rank = EXPERTS // world
    recv_x, recv_count, handle, event, hook = buffer.low_latency_dispatch(x, idx, TOKENS,
                                                                           EXPERTS)
    hook()
    check(tuple(recv_x.shape) == (per_rank, TOKENS * world, HIDDEN), "recv_x's padded shape")
    for e in range(per_rank):
        want = sorted(tuple(xs[t].tolist()) for s in range(world)
                      for xs, ids in [inputs(s)[:2]] for t in range(TOKENS)
                      if (ids[t] == rank * per_rank + e).any())
        n = int(recv_count[e])
        check(n == len(want), f"recv_count[{e}]: {n} != {len(want)}")
        check(sorted(tuple(r.tolist()) for r in recv_x[e, :n]) == want,
              f"expert {e}'s rows")
    # Expert e scales its rows by (global id + 1); combine weighs and sums them per token.
    y = torch.zeros_like(recv_x)
    for e in range(per_rank):
        n = int(recv_count[e])
        y[e, :n] = recv_x[e, :n] * (rank * per_rank + e + 1)
    out, _, _ = buffer.low_latency_combine(y, idx, w, handle)
    scale = torch.where(idx >= 0, w * (idx + 1), torch.tensor(0.0)).sum(1, keepdim=True)
    torch.testing.assert_close(out, x * scale, rtol=1e-5, atol=1e-5)
    # recv_count is a tensor of its own, as DeepEP's: the next dispatch (no rows for any
    # expert) leaves it as it was
    counts = recv_count.clone()
    nowhere = torch.full_like(idx, -1)
    recv_none, count_none, handle_none, _, _ = buffer.low_latency_dispatch(x, nowhere, TOKENS,
                                                                           EXPERTS)
    check(int(count_none.sum()) == 0, "recv_count of a dispatch with no rows")
    check(torch.equal(recv_count, counts), "recv_count rewritten by the next dispatch")
    buffer.low_latency_combine(torch.zeros_like(recv_none), nowhere, w, handle_none)


def check_megatron_backward(buffer, rank, world):
    """Megatron's fused_a2a: the forward's dispatch and combine, then the backward's
    dispatch of the gradient with the forward's handle (the handle it returns is not
    looked at) and combine with that same handle, once more; a new dispatch then runs."""
    x, idx, w = inputs(rank)
    tokens_per_rank, per_expert, in_rank = check_layout(buffer, idx, world)
    recv_x, _, _, _, handle, _ = buffer.dispatch(
        x, topk_idx=idx, topk_weights=w, num_tokens_per_rank=tokens_per_rank,
        is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    times = in_rank.sum(1, keepdim=True).to(torch.float32)
    y, _, _ = buffer.combine(recv_x, handle)
    torch.testing.assert_close(y, x * times, rtol=1e-6, atol=1e-6)
    want_x, _, _ = expected_recv(rank, world)
    for scale in (3.0, -0.5):  # backward passes of two iterations
        grad_recv, _, _, _, _, _ = buffer.dispatch(x * scale, handle=handle)
        check(torch.equal(grad_recv, want_x * scale), "the gradient's dispatch with the handle")
        grad_x, _, _ = buffer.combine(grad_recv, handle)
        torch.testing.assert_close(grad_x, x * scale * times, rtol=1e-6, atol=1e-6)
    check_normal(buffer, rank, world)  # no step left open


def check_dispatch_while_open(buffer, rank, world):
    """A dispatch while another's step waits for its combine is refused, in normal and in
    low-latency mode, and the step it found stays whole: its combine is exact."""
    x, idx, w = inputs(rank)
    tokens_per_rank, per_expert, in_rank = check_layout(buffer, idx, world)
    recv_x, _, recv_w, _, handle, _ = buffer.dispatch(
        x, topk_idx=idx, topk_weights=w, num_tokens_per_rank=tokens_per_rank,
        is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    for again in (dict(topk_idx=idx, topk_weights=w, num_tokens_per_expert=per_expert),
                  dict(handle=handle)):
        try:
            buffer.dispatch(x * 5, **again)
            check(False, "a dispatch while another waits for its combine must be refused")
        except ValueError as err:
            check("waits for its combine" in str(err), str(err))
    combined_x, combined_w, _ = buffer.combine(recv_x, handle, topk_weights=recv_w)
    times = in_rank.sum(1, keepdim=True).to(torch.float32)
    torch.testing.assert_close(combined_x, x * times, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(combined_w, torch.where(idx >= 0, w, torch.tensor(0.0)))
    recv_x, recv_count, ll_handle, _, _ = buffer.low_latency_dispatch(x, idx, TOKENS, EXPERTS)
    try:
        buffer.low_latency_dispatch(x * 5, idx, TOKENS, EXPERTS)
        check(False, "a low-latency dispatch while another waits must be refused")
    except ValueError as err:
        check("waits for its combine" in str(err), str(err))
    per_rank = EXPERTS // world
    y = torch.zeros_like(recv_x)
    for e in range(per_rank):
        n = int(recv_count[e])
        y[e, :n] = recv_x[e, :n] * (rank * per_rank + e + 1)
    out, _, _ = buffer.low_latency_combine(y, idx, w, ll_handle)
    scale = torch.where(idx >= 0, w * (idx + 1), torch.tensor(0.0)).sum(1, keepdim=True)
    torch.testing.assert_close(out, x * scale, rtol=1e-5, atol=1e-5)


def check_across_nodes(rank, world):
    """Each rank a node of its own, with the variables that choose the exchange and the
    combine for objects that leave them to the library set to what the exact receive
    cannot take across nodes (the streamed exchange in rounds of a few tokens, node-reduce
    on the hierarchical route it needs): normal mode's objects name their own and are
    exact."""
    os.environ.update(STRATA_NODE_NAME=f"ep-node-{rank}", STRATA_MOE_EXCHANGE="streamed",
                      STRATA_MOE_WINDOW_BYTES="4k", STRATA_MOE_COMBINE="node-reduce",
                      STRATA_MOE_ROUTE="hierarchical")
    buffer = strata.ep.Buffer(dist.group.WORLD, max_tokens=TOKENS)
    check(buffer.comm.num_nodes == world, f"{buffer.comm.num_nodes} nodes, not {world}")
    check_normal(buffer, rank, world)
    check_megatron_backward(buffer, rank, world)
    buffer.destroy()


def check_refusal_and_abort(buffer, rank, world):
    """Rank 1's bad expert id is refused before the step (ValueError), so its next call
    joins the step rank 0 waits in; rank 1 then gives the step up (abort_step) instead of
    computing its experts' outputs: rank 0's combine raises STRATA_ERR_CANCELLED, with every
    token's sum lacking exactly rank 1's experts' terms."""
    x, idx, w = inputs(rank)
    per_rank = EXPERTS // world
    if rank == 1:
        bad = idx.clone()
        bad[3, 0] = EXPERTS + 5
        try:
            buffer.low_latency_dispatch(x, bad, TOKENS, EXPERTS)
            check(False, "a bad expert id must be refused")
        except ValueError as err:
            check("topk_idx[3][0] = 13 is not an expert" in str(err), str(err))
    recv_x, recv_count, handle, _, hook = buffer.low_latency_dispatch(x, idx, TOKENS, EXPERTS)
    hook()
    if rank == 1:
        handle.moe.abort_step()
        return
    y = torch.zeros_like(recv_x)
    for e in range(per_rank):
        n = int(recv_count[e])
        y[e, :n] = recv_x[e, :n] * (rank * per_rank + e + 1)
    out = torch.zeros(TOKENS, HIDDEN)
    try:
        buffer.low_latency_combine(y, idx, w, handle, out=out)
        check(False, "combine must raise where rank 1 withheld its experts' terms")
    except strata.StrataError as err:
        check(err.status is strata.Status.STRATA_ERR_CANCELLED, f"combine raised {err}")
    kept = (idx >= 0) & (idx // per_rank != 1)
    scale = torch.where(kept, w * (idx + 1), torch.tensor(0.0)).sum(1, keepdim=True)
    torch.testing.assert_close(out, x * scale, rtol=1e-5, atol=1e-5)


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    buffer = strata.ep.Buffer(dist.group.WORLD, max_tokens=TOKENS)
    check(buffer.rank == rank and buffer.group_size == world, "the buffer's ranks")
    for _ in range(2):  # twice: the objects made on first use serve the next calls
        check_normal(buffer, rank, world)
        check_low_latency(buffer, rank, world)
    check_refusal_and_abort(buffer, rank, world)
    check_low_latency(buffer, rank, world)  # the step after the aborted one is exact
    check_normal(buffer, rank, world)
    check_megatron_backward(buffer, rank, world)
    check_dispatch_while_open(buffer, rank, world)
    check_normal(buffer, rank, world)
    buffer.destroy()
    check_across_nodes(rank, world)
    print(f"rank {rank} of {world}: strata.ep checks passed", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
