"""One rank of a torchrun job of 2 checking strata.ep.Buffer the way a DeepEP user checks
its Buffer, against what every rank's inputs say (each rank's inputs come from a seed of its
own, so every rank can recompute every other's): the dispatch layout, the tokens each rank
receives (each once, from which ranks, with which local experts and weights), the counts
per expert, combine's round trip with weights, a cached dispatch, and the low-latency
path's padded per-expert layout and weighted combine; a bad expert id refused before the
step, and a rank that aborts its step; the handle reused as Megatron's backward does, a
dispatch refused while another waits for its combine (that step left whole), and a lost
handle's step ended by abort_steps on every rank; DeepEP's fp8 pair (x_fp8, x_scales),
num_worst_tokens' padding and its overflow on every rank or on one alone (the other rank
neither waiting for a step the first never joins nor missing a term), the wait
statistics' keywords, the
Buffer made and sized as Megatron makes it, and the static methods and upkeep calls
Megatron, SGLang and vLLM call (set_num_sms, the Configs and their size hints, the
low-latency size hint against the object's memory, capture, clean_low_latency_buffer);
and, last, each rank a node of its own with STRATA_MOE_EXCHANGE=streamed and
STRATA_MOE_COMBINE=node-reduce set. Prints "rank R of W: strata.ep checks passed"."""
import os
import sys

import torch
import torch.distributed as dist

import strata
import strata.ep

TOKENS, HIDDEN, EXPERTS, TOPK = 24, 64, 8, 3
FP8_HIDDEN = 256  # fp8 rows: a scale per 128 columns


def inputs(rank):
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(TOKENS, HIDDEN, generator=g)
    idx = torch.stack([torch.randperm(EXPERTS, generator=g)[:TOPK] for _ in range(TOKENS)])
    idx[torch.rand(TOKENS, TOPK, generator=g) < 0.15] = -1
    w = torch.rand(TOKENS, TOPK, generator=g)
    return x, idx, w


def fp8_inputs(rank):
    """DeepEP's fp8 pair for rank: the rows' bytes [TOKENS, FP8_HIDDEN] uint8 (torch 1.13 has
    no fp8 type) and their scales [TOKENS, FP8_HIDDEN / 128] float32, with inputs(rank)'s
    routing."""
    g = torch.Generator().manual_seed(200 + rank)
    rows = torch.randint(0, 256, (TOKENS, FP8_HIDDEN), generator=g, dtype=torch.uint8)
    scales = torch.rand(TOKENS, FP8_HIDDEN // 128, generator=g)
    _, idx, w = inputs(rank)
    return rows, scales, idx, w


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def refused(call, text, error=ValueError):
    """call() raises error with text in its message."""
    try:
        call()
    except error as err:
        check(text in str(err), f"{error.__name__} {err!r} does not say {text!r}")
        return
    raise AssertionError(f"no {error.__name__} ({text!r})")


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


def expected_recv(rank, world, rows_of=lambda s: inputs(s)[0]):
    """The tokens rank receives, ordered by source rank then index: (rows, local idx,
    weights); rows_of(s) gives source rank s's rows (by default its x)."""
    per_rank = EXPERTS // world
    first = rank * per_rank
    xs, idxs, ws = [], [], []
    for s in range(world):
        _, idx, w = inputs(s)
        x = rows_of(s)
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
    # DeepEP's wait statistics are accepted and left as they are
    dispatch_cost = torch.full((world,), 7, dtype=torch.int64)
    combine_cost = torch.full((world,), 9, dtype=torch.int64)
    recv_x, recv_count, handle, event, hook = buffer.low_latency_dispatch(
        x, idx, TOKENS, EXPERTS, dispatch_wait_recv_cost_stats=dispatch_cost)
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
    out, _, _ = buffer.low_latency_combine(y, idx, w, handle,
                                           combine_wait_recv_cost_stats=combine_cost)
    scale = torch.where(idx >= 0, w * (idx + 1), torch.tensor(0.0)).sum(1, keepdim=True)
    torch.testing.assert_close(out, x * scale, rtol=1e-5, atol=1e-5)
    check(bool((dispatch_cost == 7).all() and (combine_cost == 9).all()),
          "the wait statistics left as they were")
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
    low-latency mode, and the step it found stays whole: its combine is exact. A lost
    handle's step is ended by abort_steps() on every rank."""
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
    # A dispatch whose handle is lost (an error between dispatch and combine): the next
    # dispatch of the shape names abort_steps(), which every rank calls; the handle is then
    # spent and the next step exact.
    layout = dict(topk_idx=idx, topk_weights=w, num_tokens_per_rank=tokens_per_rank,
                  is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    recv_x, _, _, _, lost, _ = buffer.dispatch(x, **layout)
    refused(lambda: buffer.dispatch(x, **layout), "abort_steps()")
    buffer.abort_steps()
    refused(lambda: buffer.combine(recv_x, lost), "once per dispatch")
    check_normal(buffer, rank, world)


def check_fp8(buffer, rank, world):
    """DeepEP's fp8 form x=(x_fp8, x_scales), the scales column-major as DeepEP's callers
    pass them: recv_x is the pair, rows and scales as sent; the combine takes bfloat16 rows
    (a float32 x is refused, the step left waiting for a good one); the handle then
    dispatches bfloat16 rows, as Megatron's backward does. Bad pairs are refused first."""
    rows, scales, idx, w = fp8_inputs(rank)
    tokens_per_rank, per_expert, in_rank = check_layout(buffer, idx, world)
    layout = dict(topk_idx=idx, topk_weights=w, num_tokens_per_rank=tokens_per_rank,
                  is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    refused(lambda: buffer.dispatch(rows, **layout), "or fp8 as x=(x_fp8, x_scales)")
    refused(lambda: buffer.dispatch((rows[:, :200], scales), **layout),
            "must be a multiple of 128")
    refused(lambda: buffer.dispatch((rows, scales[:, :1]), **layout), "must be float32")
    refused(lambda: buffer.dispatch((rows, scales[:, 0]), **layout), "must be float32")
    refused(lambda: buffer.dispatch((rows.float(), scales), **layout), "fp8 rows are")
    column_major = scales.t().contiguous().t()
    recv, recv_idx, recv_w, counts, handle, _ = buffer.dispatch((rows, column_major), **layout)
    check(isinstance(recv, tuple) and len(recv) == 2, "fp8 recv_x is (rows, scales)")
    recv_x, recv_scales = recv
    want_x, want_idx, want_w = expected_recv(rank, world, lambda s: fp8_inputs(s)[0])
    want_scales, _, _ = expected_recv(rank, world, lambda s: fp8_inputs(s)[1])
    check(recv_x.dtype == torch.uint8 and torch.equal(recv_x, want_x), "fp8 rows as sent")
    check(recv_scales.dtype == torch.float32 and torch.equal(recv_scales, want_scales),
          "fp8 scales as sent")
    check(torch.equal(recv_idx, want_idx) and torch.equal(recv_w, want_w),
          "fp8 dispatch's recv_topk_idx and weights")
    per_rank = EXPERTS // world
    everyone = [inputs(s)[1] for s in range(world)]
    check(counts == [sum(int((i == rank * per_rank + e).sum()) for i in everyone)
                     for e in range(per_rank)], f"fp8 dispatch's counts {counts}")
    # bytes 0..255 are exact in bfloat16, and so are their sums over the 2 ranks
    y = recv_x.to(torch.bfloat16)
    # the handle's own step waits for its combine: a cached dispatch of bfloat16 rows (other
    # objects) with it is refused before anything starts
    refused(lambda: buffer.dispatch(rows.to(torch.bfloat16), handle=handle),
            "waits for its combine")
    refused(lambda: buffer.combine(y.float(), handle), "combine takes torch.bfloat16 rows")
    combined, _, _ = buffer.combine(y, handle)
    times = in_rank.sum(1, keepdim=True).to(torch.bfloat16)
    check(combined.dtype == torch.bfloat16, "fp8 dispatch's combine is in bfloat16")
    check(torch.equal(combined, rows.to(torch.bfloat16) * times), "fp8 dispatch's combine")
    grad = rows.to(torch.bfloat16) - 100
    grad_recv, _, _, _, _, _ = buffer.dispatch(grad, handle=handle)
    check(torch.equal(grad_recv, want_x.to(torch.bfloat16) - 100),
          "a bfloat16 dispatch with an fp8 dispatch's handle")
    grad_x, _, _ = buffer.combine(grad_recv, handle)
    check(torch.equal(grad_x, grad * times), "its combine")


def check_num_worst_tokens(buffer, rank, world):
    """num_worst_tokens pads recv_x (0), recv_topk_idx (-1) and recv_topk_weights (0) to
    that many rows and gives no per-expert list, as DeepEP's; combine takes the padded rows
    or the received ones, and a cached dispatch pads as its handle did. A rank receiving
    more than that many tokens raises and gives up the step; the next step is exact."""
    x, idx, w = inputs(rank)
    tokens_per_rank, per_expert, in_rank = check_layout(buffer, idx, world)
    layout = dict(topk_idx=idx, topk_weights=w, num_tokens_per_rank=tokens_per_rank,
                  is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
    worst = TOKENS * world
    refused(lambda: buffer.dispatch(x, num_worst_tokens=-1, **layout), "num_worst_tokens")
    want_x, want_idx, want_w = expected_recv(rank, world)
    n = want_x.shape[0]
    times = in_rank.sum(1, keepdim=True).to(torch.float32)
    recv_x, recv_idx, recv_w, counts, handle, _ = buffer.dispatch(
        x, num_worst_tokens=worst, config=strata.ep.Buffer.get_dispatch_config(world),
        **layout)
    check(tuple(recv_x.shape) == (worst, HIDDEN), f"padded recv_x {tuple(recv_x.shape)}")
    check(counts == [], "no per-expert list with num_worst_tokens")
    check(torch.equal(recv_x[:n], want_x) and not recv_x[n:].any(), "padded recv_x's rows")
    check(torch.equal(recv_idx[:n], want_idx) and bool((recv_idx[n:] == -1).all()),
          "padded recv_topk_idx")
    check(torch.equal(recv_w[:n], want_w) and not recv_w[n:].any(), "padded recv_topk_weights")
    refused(lambda: buffer.combine(recv_x[:n + 1], handle), "or num_worst_tokens")
    refused(lambda: buffer.combine(recv_x, handle, topk_weights=recv_w[:n + 1]),
            f"not ({n} (or num_worst_tokens {worst}), {TOPK})")
    y, weights = recv_x.clone(), recv_w.clone()
    y[n:], weights[n:] = 1e6, 1e6  # past the received tokens: not read
    combined, combined_w, _ = buffer.combine(y, handle, topk_weights=weights,
                                             config=strata.ep.Buffer.get_combine_config(world))
    torch.testing.assert_close(combined, x * times, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(combined_w, torch.where(idx >= 0, w, torch.tensor(0.0)))
    recv2, _, _, counts2, _, _ = buffer.dispatch(x * 2, handle=handle)
    check(tuple(recv2.shape) == (worst, HIDDEN) and counts2 == [],
          "a cached dispatch pads as its handle's")
    check(torch.equal(recv2[:n], want_x * 2), "a cached dispatch's padded rows")
    combined2, _, _ = buffer.combine(recv2[:n], handle)  # the received rows alone
    torch.testing.assert_close(combined2, x * 2 * times, rtol=1e-6, atol=1e-6)
    refused(lambda: buffer.dispatch(x, num_worst_tokens=1, **layout),
            f"{n} tokens received, more than num_worst_tokens 1")
    check_normal(buffer, rank, world)  # the step given up on every rank: the next is exact


def check_one_rank_gives_up(buffer, rank, world):
    """Rank 1 alone receives more tokens than its num_worst_tokens and gives the step up,
    while rank 0's dispatch returns. First rank 0's tokens have no expert on rank 1: its
    combine, with topk_weights, returns its tokens exact, rank 1 taking its part in both
    steps without results. Then rank 0's tokens have rows on rank 1: its combine raises
    STRATA_ERR_CANCELLED. Neither rank waits for a step the other never joins (the
    harness's time bound would catch it), and the next step is exact."""
    x, idx, w = inputs(rank)
    per_rank = EXPERTS // world
    for rows_on_rank_1 in (False, True):
        routing = idx.clone()
        if rank == 0 and not rows_on_rank_1:
            routing[routing >= per_rank] = -1  # rank 0's own experts only
        tokens_per_rank, per_expert, in_rank = check_layout(buffer, routing, world)
        layout = dict(topk_idx=routing, topk_weights=w, num_tokens_per_rank=tokens_per_rank,
                      is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
        if rank == 1:
            refused(lambda: buffer.dispatch(x, num_worst_tokens=1, **layout),
                    "more than num_worst_tokens 1")
            continue
        recv_x, _, recv_w, _, handle, _ = buffer.dispatch(x, num_worst_tokens=TOKENS * world,
                                                          **layout)
        if rows_on_rank_1:
            try:
                buffer.combine(recv_x, handle, topk_weights=recv_w)
                check(False, "combine must raise where rank 1 gave its step up")
            except strata.StrataError as err:
                check(err.status is strata.Status.STRATA_ERR_CANCELLED, f"combine raised {err}")
            continue
        combined, combined_w, _ = buffer.combine(recv_x, handle, topk_weights=recv_w)
        valid = routing >= 0
        torch.testing.assert_close(combined, x * valid.any(1, keepdim=True), rtol=1e-6,
                                   atol=1e-6)
        torch.testing.assert_close(combined_w, torch.where(valid, w, torch.tensor(0.0)))
    check_normal(buffer, rank, world)


def check_static_methods(buffer, rank, world):
    """DeepEP's static methods and upkeep calls, as Megatron, SGLang and vLLM call them."""
    Buffer = strata.ep.Buffer
    check(Buffer.num_sms == 20, f"Buffer.num_sms {Buffer.num_sms}")
    Buffer.set_num_sms(24)
    check(Buffer.num_sms == 24 and Buffer.get_dispatch_config(world).num_sms == 24,
          "set_num_sms is what get_dispatch_config's Config carries")
    check(Buffer.get_combine_config(world).num_sms == 24, "get_combine_config's num_sms")
    refused(lambda: Buffer.set_num_sms(23), "must be even")
    Buffer.set_num_sms(20)
    refused(lambda: Buffer.get_dispatch_config(0), "num_ranks")
    # SGLang's tuned configs: Config(**json), read back
    tuned = strata.ep.Config(**dict(num_sms=16, num_max_nvl_chunked_send_tokens=8,
                                    num_max_nvl_chunked_recv_tokens=512,
                                    num_max_rdma_chunked_send_tokens=16,
                                    num_max_rdma_chunked_recv_tokens=128))
    check((tuned.num_sms, tuned.num_max_nvl_chunked_send_tokens,
           tuned.num_max_nvl_chunked_recv_tokens, tuned.num_max_rdma_chunked_send_tokens,
           tuned.num_max_rdma_chunked_recv_tokens) == (16, 8, 512, 16, 128), "Config fields")
    refused(lambda: strata.ep.Config(num_sms=-2), "negative")
    check(tuned.get_nvl_buffer_size_hint(HIDDEN * 4, world) == 0
          and tuned.get_rdma_buffer_size_hint(HIDDEN * 4, world) == 0,
          "normal mode's hints: no buffer sized by the caller")
    # vLLM's keywords; the hint is the expert blocks of the low-latency object of that
    # shape (of a row count whose sources' array strata rounds up)
    most = TOKENS + 1
    hint = Buffer.get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank=most,
                                                 hidden=HIDDEN, num_ranks=world,
                                                 num_experts=EXPERTS)
    refused(lambda: Buffer.get_low_latency_rdma_size_hint(most, HIDDEN, 3, EXPERTS),
            "not a multiple")
    x, idx, w = inputs(rank)
    xb = x.to(torch.bfloat16)
    recv_x, recv_count, handle, _, _ = buffer.low_latency_dispatch(xb, idx, most, EXPERTS)
    memory = handle.moe.stats().memory["expert_rows"]
    check(hint == memory, f"size hint {hint}, the object's expert blocks {memory}")
    # SGLang cleans between the modes; not while a low-latency step waits for its combine
    refused(lambda: buffer.clean_low_latency_buffer(most, HIDDEN, EXPERTS),
            "waits for its combine")
    out, _, _ = buffer.low_latency_combine(recv_x, idx, w, handle)
    scale = torch.where(idx >= 0, w, torch.tensor(0.0)).sum(1, keepdim=True)
    torch.testing.assert_close(out, (xb.float() * scale).to(torch.bfloat16), rtol=2e-2,
                               atol=2e-2)
    refused(lambda: buffer.clean_low_latency_buffer(TOKENS, HIDDEN, EXPERTS + 1),
            "not a multiple")
    check_normal(buffer, rank, world)
    check(buffer.clean_low_latency_buffer(TOKENS, HIDDEN, EXPERTS) is None, "clean")
    check_low_latency(buffer, rank, world)
    # SGLang's previous_event = Buffer.capture(); Megatron's EventOverlap(EventHandle())
    for previous in (Buffer.capture(), strata.ep.EventOverlap(strata.ep.EventHandle())):
        check(isinstance(previous, strata.ep.EventOverlap), "capture() is an EventOverlap")
        previous.current_stream_wait()
        layout = buffer.get_dispatch_layout(idx, EXPERTS, previous_event=previous)
        recv, _, _, _, h, _ = buffer.dispatch(
            x, topk_idx=idx, topk_weights=w, num_tokens_per_rank=layout[0],
            is_token_in_rank=layout[3], num_tokens_per_expert=layout[2],
            previous_event=previous, async_finish=True, allocate_on_comm_stream=True)
        buffer.combine(recv, h, previous_event=Buffer.capture(), async_finish=True)

    class Event:
        waits = 0

        def current_stream_wait(self):
            Event.waits += 1

    strata.ep.EventOverlap(Event()).current_stream_wait()
    check(Event.waits == 1, "an EventOverlap waits for its event")


def check_constructor(rank, world):
    """Refusals before any communication, so one rank alone may meet them: DeepEP's shrink
    mode and mpi4py communicator, and a misspelt keyword (no blanket **kwargs)."""
    Buffer = strata.ep.Buffer
    refused(lambda: Buffer(dist.group.WORLD, enable_shrink=True), "no rank masks")
    refused(lambda: Buffer(None, comm=object()), "not an mpi4py communicator")
    refused(lambda: Buffer(dist.group.WORLD, num_nvl_byte=0), "num_nvl_byte", TypeError)


def megatron_buffer(group, hidden_bytes):
    """A Buffer as Megatron's fused_a2a.get_buffer makes it: sized by both configs' hints."""
    Buffer = strata.ep.Buffer
    num_nvl_bytes = num_rdma_bytes = 0
    for config in (Buffer.get_dispatch_config(group.size()),
                   Buffer.get_combine_config(group.size())):
        num_nvl_bytes = max(config.get_nvl_buffer_size_hint(hidden_bytes, group.size()),
                            num_nvl_bytes)
        num_rdma_bytes = max(config.get_rdma_buffer_size_hint(hidden_bytes, group.size()),
                             num_rdma_bytes)
    buffer = Buffer(group, num_nvl_bytes, num_rdma_bytes, allow_nvlink_for_low_latency_mode=True,
                    allow_mnnvl=False, explicitly_destroy=True, max_tokens=TOKENS)
    # Megatron keeps it unless it is of another group or smaller than the hints
    check(buffer.group is group and buffer.num_nvl_bytes >= num_nvl_bytes
          and buffer.num_rdma_bytes >= num_rdma_bytes and not buffer.low_latency_mode,
          "the Buffer's group and sizes, as Megatron reads them")
    return buffer


def check_across_nodes(rank, world):
    """Each rank a node of its own, with the streamed exchange in rounds of a few tokens
    and node-reduce (on the hierarchical route it needs) for objects that leave the combine
    to the library: normal mode's objects name exact combine, which the exact receive needs,
    take the streamed exchange in rounds, and are exact."""
    os.environ.update(STRATA_NODE_NAME=f"ep-node-{rank}", STRATA_MOE_EXCHANGE="streamed",
                      STRATA_MOE_WINDOW_BYTES="4k", STRATA_MOE_COMBINE="node-reduce",
                      STRATA_MOE_ROUTE="hierarchical")
    buffer = strata.ep.Buffer(dist.group.WORLD, max_tokens=TOKENS)
    check(buffer.comm.num_nodes == world, f"{buffer.comm.num_nodes} nodes, not {world}")
    check_normal(buffer, rank, world)
    for moe, weights in buffer._objects.values():
        stats = moe.stats()
        check(weights is None or (stats.exchange is strata.Exchange.STREAMED
                                  and stats.exchange_rounds > 1),
              f"normal mode across nodes: exchange {stats.exchange}, "
              f"{stats.exchange_rounds} rounds")
    check_megatron_backward(buffer, rank, world)
    check_fp8(buffer, rank, world)
    check_num_worst_tokens(buffer, rank, world)
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
    check_constructor(rank, world)
    buffer = megatron_buffer(dist.group.WORLD, HIDDEN * 4)
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
    check_fp8(buffer, rank, world)
    check_num_worst_tokens(buffer, rank, world)
    check_one_rank_gives_up(buffer, rank, world)
    check_static_methods(buffer, rank, world)
    buffer.destroy()
    check_across_nodes(rank, world)
    print(f"rank {rank} of {world}: strata.ep checks passed", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
