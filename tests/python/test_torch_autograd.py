"""strata.torch.MoEDispatcher on one rank: the layer's output and the gradients of x, of
the routing weights and of every expert match the same layer computed plainly with torch
autograd; with x not needing a gradient the steps stay paired, and the next step runs; a
capacity factor in the environment does not reach the dispatcher's own Moe. On 2 ranks
under torchrun: one rank alone raising in a call that drives both of the dispatcher's
objects leaves the other's steps paired (autograd_worker.py)."""
import os
import unittest
from unittest import mock

import torch

import strata
from strata.torch import MoEDispatcher

import one_rank
import torchrun
from torch_layer import plain, through_strata

EXPERTS, TOPK, HIDDEN, TOKENS = 4, 2, 32, 10


def layer_parts(seed):
    torch.manual_seed(seed)
    experts = [torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(EXPERTS)]
    x = torch.randn(TOKENS, HIDDEN)
    idx = torch.stack([torch.randperm(EXPERTS)[:TOPK] for _ in range(TOKENS)])
    idx[3, 1] = -1  # a slot with no expert
    weights = torch.rand(TOKENS, TOPK)
    return experts, x, idx, weights


class TestAutograd(one_rank.CommTestCase):
    def grads(self, fn, experts, x, weights, grad_out):
        out = fn()
        params = [p for m in experts for p in m.parameters()]
        got = torch.autograd.grad(out, [x, weights] + params, grad_out, allow_unused=True)
        return out.detach(), got

    def test_gradients_match_plain_autograd(self):
        experts, x, idx, weights = layer_parts(seed=5)
        x.requires_grad_(True)
        weights.requires_grad_(True)
        grad_out = torch.randn(TOKENS, HIDDEN)
        with strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                        max_tokens=TOKENS) as moe:
            dispatcher = MoEDispatcher(moe)
            for step in range(2):  # a second step: the backward left none half-done
                out, got = self.grads(lambda: through_strata(dispatcher, experts, x, idx,
                                                             weights),
                                      experts, x, weights, grad_out)
                ref_out, ref = self.grads(lambda: plain(experts, x, idx, weights),
                                          experts, x, weights, grad_out)
                torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
                names = ["x", "topk_weights"] + [f"expert parameter {i}"
                                                 for i in range(len(got) - 2)]
                for name, g, r in zip(names, got, ref):
                    with self.subTest(step=step, grad=name):
                        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
            dispatcher.close()

    def test_gradient_of_the_experts_alone(self):
        """A gradient asked of the experts' parameters alone skips dispatch's backward
        although x needs one: no step is left open, and the next forward runs."""
        experts, x, idx, weights = layer_parts(seed=7)
        x.requires_grad_(True)
        params = [p for m in experts for p in m.parameters()]
        with strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                        max_tokens=TOKENS) as moe:
            dispatcher = MoEDispatcher(moe)
            for _ in range(2):
                out = through_strata(dispatcher, experts, x, idx, weights)
                got = torch.autograd.grad(out.sum(), params, allow_unused=True)
            ref = torch.autograd.grad(plain(experts, x, idx, weights).sum(), params,
                                      allow_unused=True)
            for g, r in zip(got, ref):
                if r is not None:
                    torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
            dispatcher.close()

    def test_capacities_of_both_objects_differ(self):
        """A Moe with an expert alignment (a capacity unlike the dispatcher's own Moe's):
        the rows are still matched across the two."""
        experts, x, idx, weights = layer_parts(seed=8)
        x.requires_grad_(True)
        grad_out = torch.randn(TOKENS, HIDDEN)
        with strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                        max_tokens=TOKENS, expert_alignment=16) as moe:
            dispatcher = MoEDispatcher(moe)
            out = through_strata(dispatcher, experts, x, idx, weights)
            (got,) = torch.autograd.grad(out, [x], grad_out)
            (ref,) = torch.autograd.grad(plain(experts, x, idx, weights), [x], grad_out)
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
            dispatcher.close()

    def test_environment_leaves_the_weights_object_every_row(self):
        """STRATA_MOE_CAPACITY_FACTOR=0.5 (a capacity of half the mean load for objects that
        leave it to the library): a layer Moe given a capacity that holds every row, as the
        dispatcher asks, still gets exact gradients. The dispatcher's own Moe names its
        capacity too."""
        experts, x, idx, weights = layer_parts(seed=9)
        x.requires_grad_(True)
        weights.requires_grad_(True)
        grad_out = torch.randn(TOKENS, HIDDEN)
        with mock.patch.dict(os.environ, {"STRATA_MOE_CAPACITY_FACTOR": "0.5"}):
            moe = strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                             max_tokens=TOKENS, capacity=TOKENS * self.comm.size)
            dispatcher = MoEDispatcher(moe)
        with moe:
            out, got = self.grads(lambda: through_strata(dispatcher, experts, x, idx, weights),
                                  experts, x, weights, grad_out)
            ref_out, ref = self.grads(lambda: plain(experts, x, idx, weights), experts, x,
                                      weights, grad_out)
            torch.testing.assert_close(out, ref_out, rtol=1e-5, atol=1e-5)
            for g, r in zip(got, ref):
                torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
            dispatcher.close()

    def test_x_without_gradient(self):
        """Only the weights and experts need gradients: combine's backward ends the step
        itself, and the next forward runs."""
        experts, x, idx, weights = layer_parts(seed=6)
        weights.requires_grad_(True)
        with strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                        max_tokens=TOKENS) as moe:
            dispatcher = MoEDispatcher(moe)
            for _ in range(2):
                out = through_strata(dispatcher, experts, x, idx, weights)
                out.sum().backward()
            ref = plain(experts, x, idx, weights)
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
            dispatcher.close()


class TestOneRankRaises(unittest.TestCase):
    def test_steps_stay_paired_on_two_ranks(self):
        """One rank alone raises in the forward dispatch (a bad topk_weights) and in
        combine's backward (between its two objects' steps): the other rank's calls return
        exact, neither waits for a step the other never joins (a short STRATA_MOE_TIMEOUT
        would make it raise), and the next steps are exact (autograd_worker.py)."""
        output = torchrun.run(self, "autograd_worker.py", 2, {"STRATA_MOE_TIMEOUT": "15s"})
        for rank in range(2):
            self.assertIn(f"rank {rank} of 2: strata.torch failure checks passed", output)


if __name__ == "__main__":
    unittest.main()
