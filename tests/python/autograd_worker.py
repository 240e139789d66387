"""One rank of a torchrun job of 2 checking that strata.torch.MoEDispatcher keeps both ranks'
steps paired when one rank alone raises inside a call that drives both of its Moe objects:
- the forward dispatch, on a bad topk_weights of rank 1's alone (found after the layer's
  dispatch, before the weights' step);
- combine's backward, on an error of rank 1's alone between the layer's step and the
  weights' step.
Rank 0's tokens have no expert on rank 1 here, so its calls return exact results while rank
1 raises; neither rank waits for a step the other never joins (STRATA_MOE_TIMEOUT, set
short by the test, would make rank 0 raise), and the next step is exact on both ranks.
Prints "rank R of W: strata.torch failure checks passed"."""
import sys

import torch
import torch.distributed as dist

import strata
from strata.torch import MoEDispatcher
from torch_layer import plain, through_strata

EXPERTS, TOPK, HIDDEN, TOKENS = 4, 2, 16, 12


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def parts(rank, world, own_experts_only):
    g = torch.Generator().manual_seed(300 + rank)
    experts = [torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(EXPERTS)]
    for e, m in enumerate(experts):  # the same experts on every rank
        torch.manual_seed(e)
        m.reset_parameters()
    x = torch.randn(TOKENS, HIDDEN, generator=g)
    per_rank = EXPERTS // world
    if own_experts_only:
        first = rank * per_rank
        idx = torch.stack([torch.randperm(per_rank, generator=g)[:TOPK] + first
                           for _ in range(TOKENS)])
    else:
        idx = torch.stack([torch.randperm(EXPERTS, generator=g)[:TOPK]
                           for _ in range(TOKENS)])
    w = torch.rand(TOKENS, TOPK, generator=g)
    return experts, x, idx, w


def exact_step(dispatcher, rank, world):
    """A whole step, forward and backward, on every rank: exact."""
    experts, x, idx, w = parts(rank, world, own_experts_only=False)
    w.requires_grad_(True)
    out = through_strata(dispatcher, experts, x, idx, w)
    (grad_w,) = torch.autograd.grad(out.sum(), [w])
    wr = w.detach().clone().requires_grad_(True)
    ref = plain(experts, x, idx, wr)
    (ref_w,) = torch.autograd.grad(ref.sum(), [wr])
    torch.testing.assert_close(out.detach(), ref.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad_w, ref_w, rtol=1e-5, atol=1e-5)


def check_bad_weights_on_one_rank(dispatcher, rank, world):
    experts, x, idx, w = parts(rank, world, own_experts_only=True)
    if rank == 1:
        try:
            dispatcher.dispatch(x, idx, w[:-1])  # one row short: rank 1's alone
            check(False, "a short topk_weights must raise")
        except ValueError:
            pass
        return
    out = through_strata(dispatcher, experts, x, idx, w)
    torch.testing.assert_close(out, plain(experts, x, idx, w), rtol=1e-5, atol=1e-5)


def check_error_in_combine_backward(dispatcher, rank, world):
    experts, x, idx, w = parts(rank, world, own_experts_only=True)
    w.requires_grad_(True)
    out = through_strata(dispatcher, experts, x, idx, w)
    if rank == 1:
        real = dispatcher._weights_grad

        def fails(*args):  # between the layer's step and the weights' step
            raise RuntimeError("out of memory (simulated)")
        dispatcher._weights_grad = fails
        try:
            torch.autograd.grad(out.sum(), [w])
            check(False, "combine's backward must raise")
        except RuntimeError as err:
            check("simulated" in str(err), f"raised {err!r}")
        finally:
            dispatcher._weights_grad = real
        return
    (grad_w,) = torch.autograd.grad(out.sum(), [w])
    wr = w.detach().clone().requires_grad_(True)
    (ref_w,) = torch.autograd.grad(plain(experts, x, idx, wr).sum(), [wr])
    torch.testing.assert_close(grad_w, ref_w, rtol=1e-5, atol=1e-5)


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    with strata.Communicator() as comm:
        with strata.Moe(comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                        max_tokens=TOKENS) as moe:
            dispatcher = MoEDispatcher(moe)
            exact_step(dispatcher, rank, world)
            check_bad_weights_on_one_rank(dispatcher, rank, world)
            exact_step(dispatcher, rank, world)
            check_error_in_combine_backward(dispatcher, rank, world)
            exact_step(dispatcher, rank, world)
            dispatcher.close()
    print(f"rank {rank} of {world}: strata.torch failure checks passed", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
