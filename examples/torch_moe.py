"""A Mixture-of-Experts layer in PyTorch whose dispatch and combine go through strata.

    router:   logits = router(x) (nn.Linear), softmax, top-k, weights renormalised over k
    dispatch: each token to the ranks owning its k experts (strata.Moe.dispatch)
    experts:  y = relu(expert_e(x)) (nn.Linear) for the rows each local expert received
    combine:  out = sum over k of weight_k * y_k (strata.Moe.combine)

through strata.torch.MoEDispatcher, so that the layer is differentiable: its gradients
(router, experts) are checked against the one-rank layer's, then it trains for a few SGD
steps, whose loss must fall.

Every rank builds the same layer (same seed) and owns num_experts / world of its experts.
It then computes the whole layer alone, on every rank's tokens (each rank's batch comes
from a seed of its own), and checks its own rows against that, with the tolerance of
examples/moe_layer.c. Launch it with torchrun; strata bootstraps from the variables torchrun
sets (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: it listens on MASTER_PORT + 1):

    PYTHONPATH=python python3 -m torch.distributed.run --nproc_per_node 2 \
        --redirects 2 --tee 2 examples/torch_moe.py

(--redirects and --tee work around torchrun's own output handling in Debian's torch 1.13 on
Python 3.11, which fails before starting a worker without them)

with libstrata on the loader's path or STRATA_LIBRARY_PATH naming it (build/api). Exit
status 0 when every rank's output matches.
"""
import sys

import torch
from torch import nn

import strata
from strata.torch import MoEDispatcher

HIDDEN = 128
TOPK = 2
TOKENS = 32            # per rank and step
EXPERTS_PER_RANK = 2
STEPS = 3              # forward passes, each a new batch
TRAIN_STEPS = 8        # SGD steps
TOLERANCE = 1e-5       # relative to max(1, |reference|), as moe_layer.c
GRAD_TOLERANCE = 1e-4  # gradients: sums of more terms, in another order


class MoELayer(nn.Module):
    """Router and experts; the same weights on every rank (built under one seed)."""

    def __init__(self, num_experts, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.router = nn.Linear(HIDDEN, num_experts, bias=False)
        self.experts = nn.ModuleList(nn.Linear(HIDDEN, HIDDEN) for _ in range(num_experts))

    def route(self, x):
        probs = torch.softmax(self.router(x), dim=-1)
        weights, idx = torch.topk(probs, TOPK, dim=-1)
        return idx, (weights / weights.sum(dim=-1, keepdim=True)).contiguous()

    def expert(self, e, rows):
        return torch.relu(self.experts[e](rows))

    def forward_local(self, x):
        """The reference: every token through its k experts on this rank alone."""
        idx, weights = self.route(x)
        out = torch.zeros_like(x)
        for k in range(TOPK):
            for e in range(len(self.experts)):
                chosen = idx[:, k] == e
                if chosen.any():
                    out[chosen] += weights[chosen, k, None] * self.expert(e, x[chosen])
        return out

    def forward_strata(self, dispatcher, x):
        """The same layer with each token's experts on their owners' ranks, differentiable
        (strata.torch.MoEDispatcher): gradients reach the router and the experts."""
        idx, weights = self.route(x)
        recv_x, counts, handle = dispatcher.dispatch(x, idx, weights)
        first = dispatcher.first_expert
        rows = []
        for e in range(recv_x.shape[0]):
            n = int(counts[e])
            y = self.expert(first + e, recv_x[e, :n]) if n > 0 else recv_x[e, :0]
            rows.append(torch.cat([y, recv_x[e, n:]]))  # the padding rows stay zeros
        return dispatcher.combine(torch.stack(rows), handle)


def batch(step, rank):
    generator = torch.Generator().manual_seed(1000 * (step + 1) + rank)
    return torch.rand(TOKENS, HIDDEN, generator=generator) - 0.5


def max_errors(out, ref):
    """Largest absolute error, and largest error relative to max(1, |reference|)."""
    diff = (out - ref).abs()
    return diff.max().item(), (diff / ref.abs().clamp(min=1.0)).max().item()


def target(step, rank):
    """What the layer is trained towards (a fixed random map of the batch)."""
    generator = torch.Generator().manual_seed(7 + 1000 * (step + 1) + rank)
    return torch.rand(TOKENS, HIDDEN, generator=generator) - 0.5


def grads_against_one_rank(layer, dispatcher, rank, world):
    """This rank's gradients of loss_r = sum(out_r * target_r) against the one-rank layer's:
    the router's (from this rank's tokens) and this rank's experts' (from every rank's
    tokens that reached them, as the one-rank layer sums over every rank's loss). The
    largest error relative to max(1, |reference|)."""
    x = batch(0, rank)
    loss = (layer.forward_strata(dispatcher, x) * target(0, rank)).sum()
    mine = [p for e in range(dispatcher.first_expert,
                             dispatcher.first_expert + EXPERTS_PER_RANK)
            for p in layer.experts[e].parameters()]
    got = torch.autograd.grad(loss, list(layer.router.parameters()) + mine)
    everyone = torch.cat([batch(0, r) for r in range(world)])
    targets = torch.cat([target(0, r) for r in range(world)])
    out = layer.forward_local(everyone)
    own = slice(rank * TOKENS, (rank + 1) * TOKENS)
    ref_router = torch.autograd.grad((out[own] * targets[own]).sum(),
                                     list(layer.router.parameters()), retain_graph=True)
    ref_experts = torch.autograd.grad((out * targets).sum(), mine)
    worst = 0.0
    for g, r in zip(got, list(ref_router) + list(ref_experts)):
        worst = max(worst, ((g - r).abs() / r.abs().clamp(min=1.0)).max().item())
    return worst


def train(layer, dispatcher, comm, steps):
    """A few SGD steps on one batch towards its target(): each rank updates its own copy of
    the router (without an all-reduce of its gradient the copies drift apart, which this
    example allows) and its own experts. Returns this rank's first and last losses."""
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    losses = []
    for step in range(steps):
        optimizer.zero_grad()
        out = layer.forward_strata(dispatcher, batch(0, comm.rank))
        loss = ((out - target(0, comm.rank)) ** 2).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses[0], losses[-1]


def main():
    with strata.Communicator() as comm:
        rank, world = comm.rank, comm.size
        layer = MoELayer(EXPERTS_PER_RANK * world)
        moe = strata.Moe(comm, num_experts=EXPERTS_PER_RANK * world, topk=TOPK, hidden=HIDDEN,
                         max_tokens=TOKENS, dtype="fp32")
        dispatcher = MoEDispatcher(moe)
        worst_abs = worst_rel = 0.0
        with torch.no_grad():
            for step in range(STEPS):
                out = layer.forward_strata(dispatcher, batch(step, rank))
                everyone = torch.cat([batch(step, r) for r in range(world)])
                ref = layer.forward_local(everyone)[rank * TOKENS:(rank + 1) * TOKENS]
                step_abs, step_rel = max_errors(out, ref)
                if not torch.isfinite(out).all():
                    step_abs = step_rel = float("inf")  # a row combine never wrote
                worst_abs, worst_rel = max(worst_abs, step_abs), max(worst_rel, step_rel)
        grad_rel = grads_against_one_rank(layer, dispatcher, rank, world)
        first, last = train(layer, dispatcher, comm, TRAIN_STEPS)
        dispatcher.close()
        moe.close()
        if not worst_rel <= TOLERANCE or not grad_rel <= GRAD_TOLERANCE:
            print(f"rank {rank} of {world}: differs from the one-rank layer: output max abs "
                  f"error {worst_abs:.3g}, relative {worst_rel:.3g} (at most {TOLERANCE}); "
                  f"gradients relative {grad_rel:.3g} (at most {GRAD_TOLERANCE})",
                  file=sys.stderr)
            return 1
        # One write per line: the ranks share torchrun's stdout.
        sys.stdout.write(f"rank {rank} of {world} (node {comm.node}): {STEPS} forward passes "
                         f"of a {EXPERTS_PER_RANK * world}-expert top-{TOPK} torch layer "
                         f"matches the one-rank layer (max abs error {worst_abs:.3g}); its "
                         f"gradients too (max relative error {grad_rel:.3g}); {TRAIN_STEPS} "
                         f"SGD steps took the loss from {first:.4f} to {last:.4f}\n")
        sys.stdout.flush()
    return 0 if last < first else 1


if __name__ == "__main__":
    sys.exit(main())
