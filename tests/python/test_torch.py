"""MoE dispatch and combine on one rank with CPU torch tensors: fp32 and bf16 round trips
against the plain reference, the recv's views as tensors over the library's memory, the
checks that only tensors have (grad, dtype names), and fp8 tokens as uint8 tensors or of
torch's own fp8 type."""
import unittest

import numpy as np
import torch

import strata

import moe_reference as ref
import one_rank

EXPERTS, TOPK, HIDDEN, TOKENS = 4, 2, 64, 12


class Float8Named:
    """A uint8 tensor as a torch with fp8 types describes one of torch.float8_e4m3fn: its
    dtype's name, its address, shape and layout (what the buffer checks read of a tensor)."""

    def __init__(self, tensor):
        self._tensor = tensor
        self.shape, self.device, self.requires_grad = tensor.shape, tensor.device, False
        self.dtype = "torch.float8_e4m3fn"

    def data_ptr(self):
        return self._tensor.data_ptr()

    def is_contiguous(self):
        return self._tensor.is_contiguous()


Float8Named.__module__ = "torch.float8_named"  # taken for a torch tensor, as the real one


class TestTorch(one_rank.CommTestCase):
    def step(self, dtype, torch_dtype, tolerance, seed):
        rng = np.random.default_rng(seed)
        x = torch.from_numpy(rng.standard_normal((TOKENS, HIDDEN)).astype(np.float32))
        x = x.to(torch_dtype)
        idx, weights = ref.routing(rng, TOKENS, EXPERTS, TOPK)
        with strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                        max_tokens=TOKENS, dtype=dtype) as moe:
            recv = moe.dispatch(x, torch.from_numpy(idx))
            self.assertIsInstance(recv.x, torch.Tensor)
            self.assertEqual(recv.x.dtype, torch_dtype)
            self.assertEqual(recv.expert_y.dtype, torch_dtype)
            for e in range(recv.num_local_experts):
                n = int(recv.count[e])
                rows = recv.x[e, :n].float().numpy()
                recv.expert_y[e, :n] = torch.from_numpy(ref.expert(e, rows)).to(torch_dtype)
            out = torch.empty_like(x)
            self.assertIs(moe.combine(torch.from_numpy(weights), out), out)
        expected = ref.moe_step(x.float().numpy(), idx, weights)
        err = np.max(np.abs(out.float().numpy() - expected) / np.maximum(1.0, np.abs(expected)))
        self.assertLessEqual(err, tolerance, f"seed {seed}: max relative error {err}")

    def test_fp32(self):
        self.step("fp32", torch.float32, 1e-6, seed=11)

    def test_bf16(self):
        self.step("bf16", torch.bfloat16, 3e-2, seed=12)

    def test_torch_dtypes_name_the_element_types(self):
        """torch dtypes wherever a dtype name is taken: the same step as by name."""
        self.step(torch.float32, torch.float32, 1e-6, seed=13)
        self.step(torch.bfloat16, torch.bfloat16, 3e-2, seed=14)
        with strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=256,
                        max_tokens=TOKENS, dtype=torch.uint8,
                        combine_dtype=torch.float16) as moe:
            self.assertIs(moe.dtype, strata.Dtype.FP8_E4M3)
            self.assertIs(moe.combine_dtype, strata.Dtype.FP16)
        with self.assertRaisesRegex(ValueError, "torch.int64 is not an element type"):
            strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                       max_tokens=TOKENS, dtype=torch.int64)

    def fp8_step(self, x, x_bytes):
        """An fp8 dispatch of x (whose bytes are x_bytes, uint8): every row and scale arrives
        as sent; combine runs."""
        rng = np.random.default_rng(15)
        idx, weights = ref.routing(rng, TOKENS, EXPERTS, TOPK)
        scales = torch.from_numpy(rng.random((TOKENS, 2), dtype=np.float32))
        with strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=256,
                        max_tokens=TOKENS, dtype="fp8_e4m3", combine_dtype="fp32") as moe:
            recv = moe.dispatch(x, torch.from_numpy(idx), x_scales=scales)
            self.assertEqual(recv.x.dtype, torch.uint8)  # the bytes, as sent
            for e in range(EXPERTS):
                for row in range(int(recv.count[e])):
                    token = int(recv.src[e, row, 1])
                    self.assertTrue(torch.equal(recv.x[e, row], x_bytes[token]))
                    self.assertTrue(torch.equal(recv.x_scales[e, row], scales[token]))
            recv.expert_y[...] = 0
            moe.combine(torch.from_numpy(weights), torch.empty(TOKENS, 256))

    def test_fp8_tensors_of_torchs_own_type(self):
        """torch.float8_e4m3fn (torch 2.1 on) names fp8 tokens as a dtype, and its tensors
        travel as their bytes, as uint8 tensors do."""
        x_bytes = torch.randint(0, 256, (TOKENS, 256), dtype=torch.uint8)
        self.fp8_step(x_bytes, x_bytes)
        fp8 = getattr(torch, "float8_e4m3fn", None)
        if fp8 is not None:
            self.assertIs(strata.moe._dtype(fp8, "dtype"), strata.Dtype.FP8_E4M3)
            self.fp8_step(x_bytes.view(fp8), x_bytes)
        # Where this torch has no fp8 type: a tensor that names its dtype as later ones do.
        self.fp8_step(Float8Named(x_bytes), x_bytes)

    def test_tensor_checks(self):
        with strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                        max_tokens=TOKENS, dtype="bf16") as moe:
            x = torch.zeros(TOKENS, HIDDEN, dtype=torch.bfloat16)
            idx = torch.zeros(TOKENS, TOPK, dtype=torch.int64)
            idx[:, 1] = 1
            with self.assertRaisesRegex(ValueError, "^x has dtype float32, expected bfloat16$"):
                moe.dispatch(x.float(), idx)
            with self.assertRaisesRegex(ValueError, "^x is not C-contiguous"):
                moe.dispatch(torch.zeros(HIDDEN, TOKENS, dtype=torch.bfloat16).t(), idx)
            moe.dispatch(x, idx)
            weights = torch.ones(TOKENS, TOPK)
            out = torch.zeros(TOKENS, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
            with self.assertRaisesRegex(ValueError, "^out requires grad"):
                moe.combine(weights, out)
            moe.combine(weights, out.detach())


if __name__ == "__main__":
    unittest.main()
