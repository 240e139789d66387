"""Device tensors on one rank of a CUDA communicator (scripts/gpu-check.sh runs it; it skips
where no GPU is visible): buffers from cudaMalloc behind a minimal __cuda_array_interface__
run a step and the recv comes back as Arrays on the GPU; host memory is refused; a call on
a stream of the caller's with async_op returns a Work whose wait() orders the stream and
whose synchronize() gives the result; and, where torch has CUDA, torch in gives torch out on
the same GPU, on torch's current stream, and strata.torch.MoEDispatcher (forward and
backward) and strata.ep.Buffer run on CUDA tensors; device memory registers as a region
for point-to-point writes where the rails can register it."""
import ctypes
import unittest

import numpy as np

import strata
from strata import _gpu

import moe_reference as ref
import one_rank

EXPERTS, TOPK, HIDDEN, TOKENS = 4, 2, 64, 8


class DeviceArray:
    """Device memory from cudaMalloc, exposed as CUDA's array interface only."""

    def __init__(self, rt, host):
        self.rt, self.host = rt, np.ascontiguousarray(host)
        self.address = rt.malloc(max(self.host.nbytes, 1))
        rt.copy(self.address, self.host.ctypes.data, self.host.nbytes, _gpu.COPY_TO_DEVICE)
        rt.device_synchronize()  # a copy from pageable memory may return before it lands
        self.__cuda_array_interface__ = {
            "shape": self.host.shape, "typestr": self.host.dtype.str,
            "data": (self.address, False), "strides": None, "version": 3}

    def read(self):
        out = np.empty_like(self.host)
        self.rt.copy(out.ctypes.data, self.address, out.nbytes, _gpu.COPY_TO_HOST)
        return out

    def __del__(self):
        if getattr(self, "address", None):
            self.rt.free(self.address)


def read_array(rt, array, dtype):
    """An Array of the library's GPU memory, copied to the host whole."""
    itemsize = np.dtype(dtype).itemsize
    strides = array.strides or [int(np.prod(array.shape[i + 1:])) for i in range(len(array.shape))]
    extent = strides[0] * array.shape[0]
    out = np.empty(extent, dtype=dtype)
    rt.copy(out.ctypes.data, array.address, extent * itemsize, _gpu.COPY_TO_HOST)
    return np.lib.stride_tricks.as_strided(
        out, array.shape, tuple(s * itemsize for s in strides))


@unittest.skipUnless(_gpu.visible("cuda"), "no CUDA GPU visible")
class TestDevice(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.comm = one_rank.communicator()
        if cls.comm.device_backend != "cuda":
            cls.comm.close()
            raise unittest.SkipTest(f"the communicator runs on {cls.comm.device_backend}")
        cls.rt = _gpu.runtime("cuda")

    @classmethod
    def tearDownClass(cls):
        cls.comm.close()

    def setUp(self):
        self.rng = np.random.default_rng(5)
        self.x = self.rng.standard_normal((TOKENS, HIDDEN)).astype(np.float32)
        self.idx, self.weights = ref.routing(self.rng, TOKENS, EXPERTS, TOPK)

    def moe(self):
        return strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                          max_tokens=TOKENS)

    def run_experts(self, recv):
        """Each expert's outputs written on the GPU, from its rows read back."""
        rows = read_array(self.rt, recv.x, np.float32)
        for e in range(recv.num_local_experts):
            n = int(recv.count[e])
            y = np.ascontiguousarray(ref.expert(recv.first_expert + e, rows[e, :n]),
                                     dtype=np.float32)
            at = recv.expert_y.address + e * recv.expert_y.strides[0] * 4
            self.rt.copy(at, y.ctypes.data, y.nbytes, _gpu.COPY_TO_DEVICE)
        self.rt.device_synchronize()

    def torch_on_gpu(self):
        """torch and the communicator's GPU as its device; the test skips where torch has
        no CUDA here."""
        try:
            import torch
        except ImportError:
            self.skipTest("no torch")
        if not torch.cuda.is_available():
            self.skipTest("torch has no CUDA here")
        return torch, torch.device("cuda", self.comm.gpu_ordinal)

    def test_cuda_array_interface_step(self):
        with self.moe() as moe:
            recv = moe.dispatch(DeviceArray(self.rt, self.x), self.idx)
            self.assertIsInstance(recv.x, strata._buffers.Array)
            self.assertEqual(recv.x.__dlpack_device__(), (2, self.comm.gpu_ordinal))
            self.assertIsInstance(recv.count, np.ndarray)  # host memory
            self.run_experts(recv)
            out = DeviceArray(self.rt, np.full((TOKENS, HIDDEN), np.nan, np.float32))
            self.assertIs(moe.combine(DeviceArray(self.rt, self.weights), out), out)
            np.testing.assert_allclose(out.read(), ref.moe_step(self.x, self.idx, self.weights),
                                       rtol=1e-6, atol=1e-6)
            with self.assertRaisesRegex(ValueError, r"^x is in host memory; this "
                                                    r"communicator's buffers are on CUDA GPU"):
                moe.dispatch(self.x, self.idx)

    def test_register_device_memory(self):
        """A device array registers as a region where the rails can register device memory
        (written then from and into device memory in place, checked byte for byte), and is
        refused with STRATA_ERR_UNSUPPORTED where they cannot; never as host memory."""
        data = self.rng.integers(0, 256, 4096, dtype=np.uint8)
        src, dst = DeviceArray(self.rt, data), DeviceArray(self.rt, np.zeros(4096, np.uint8))
        try:
            src_region = self.comm.register(src)
        except strata.StrataError as refused:
            self.assertIs(refused.status, strata.Status.STRATA_ERR_UNSUPPORTED)
            self.skipTest("the rails here cannot register device memory")
        me = self.comm.rank
        with src_region, self.comm.register(dst) as dst_region:
            self.assertEqual(src_region.nbytes, 4096)
            self.comm.write_scatter(me, src_region, dst_region.descriptor,
                                    [(0, 100, 3000)], imm=9).wait()
            self.comm.imm_wait(9, self.comm.list_imm_count(me), peer=me)
            want = np.zeros(4096, np.uint8)
            want[100:3100] = data[:3000]
            np.testing.assert_array_equal(dst.read(), want)

    def test_async_on_a_stream_of_the_callers(self):
        stream = ctypes.c_void_p()
        self.rt._call("StreamCreate", ctypes.byref(stream))
        try:
            with self.moe() as moe:
                x, weights = DeviceArray(self.rt, self.x), DeviceArray(self.rt, self.weights)
                work = moe.dispatch(x, self.idx, stream=stream.value, async_op=True)
                self.assertIsInstance(work, strata.moe.Work)
                work.wait(stream.value)  # the stream is ordered after it (it is, already)
                recv = work.synchronize()
                self.run_experts(recv)
                out = DeviceArray(self.rt, np.zeros((TOKENS, HIDDEN), np.float32))
                work = moe.combine(weights, out, stream=stream.value, async_op=True)
                self.assertIs(work.synchronize(), out)
                np.testing.assert_allclose(out.read(),
                                           ref.moe_step(self.x, self.idx, self.weights),
                                           rtol=1e-6, atol=1e-6)
        finally:
            self.rt._call("StreamDestroy", stream)

    def test_torch_in_torch_out(self):
        torch, device = self.torch_on_gpu()
        with self.moe() as moe:
            x = torch.from_numpy(self.x).to(device)
            recv = moe.dispatch(x, torch.from_numpy(self.idx).to(device))
            self.assertEqual(recv.x.device, device)
            self.assertEqual(recv.count.device.type, "cpu")
            for e in range(recv.num_local_experts):
                n = int(recv.count[e])
                rows = recv.x[e, :n].cpu().numpy()
                recv.expert_y[e, :n] = torch.from_numpy(
                    ref.expert(recv.first_expert + e, rows).astype(np.float32)).to(device)
            out = moe.combine(torch.from_numpy(self.weights).to(device),
                              torch.empty(TOKENS, HIDDEN, device=device))
            self.assertEqual(out.device, device)
            np.testing.assert_allclose(out.cpu().numpy(),
                                       ref.moe_step(self.x, self.idx, self.weights),
                                       rtol=1e-6, atol=1e-6)

    def test_autograd_on_the_gpu(self):
        """strata.torch.MoEDispatcher on torch CUDA tensors (one rank), experts scaling
        their rows by (expert + 1): the output and the gradients of x and of the weights
        against their closed forms."""
        torch, device = self.torch_on_gpu()
        import strata.torch

        x = torch.from_numpy(self.x).to(device).requires_grad_()
        idx = torch.from_numpy(self.idx).to(device)
        w = torch.from_numpy(self.weights).to(device).requires_grad_()
        with self.moe() as moe:
            dispatcher = strata.torch.MoEDispatcher(moe)
            try:
                recv_x, counts, handle = dispatcher.dispatch(x, idx, w)
                self.assertEqual(recv_x.device, device)
                scale = torch.arange(1, EXPERTS + 1, dtype=torch.float32, device=device)
                out = dispatcher.combine(recv_x * scale[:, None, None], handle)
                out.sum().backward()
            finally:
                dispatcher.close()
        factor = torch.where(idx >= 0, idx + 1, torch.zeros((), dtype=idx.dtype,
                                                                 device=device)).float()
        per_token = (w.detach() * factor).sum(1, keepdim=True)
        torch.testing.assert_close(out.detach(), x.detach() * per_token, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(x.grad, per_token.expand_as(x), rtol=1e-5, atol=1e-5)
        want_w = x.detach().sum(1, keepdim=True) * factor
        torch.testing.assert_close(w.grad, want_w, rtol=1e-4, atol=1e-4)

    def test_ep_buffer_on_the_gpu(self):
        """strata.ep.Buffer on torch CUDA tensors (one rank): every token with an expert
        comes back once, on the GPU, and combine returns it; the low-latency path's rows
        and weighted sums too."""
        torch, _ = self.torch_on_gpu()
        import strata.ep

        buffer = strata.ep.Buffer(max_tokens=TOKENS)
        device = torch.device("cuda", buffer.comm.gpu_ordinal)
        x = torch.from_numpy(self.x).to(device)
        idx = torch.from_numpy(self.idx).to(device)
        w = torch.from_numpy(self.weights).to(device)
        try:
            per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(idx, EXPERTS)
            self.assertEqual(per_expert.device, device)
            recv_x, recv_idx, recv_w, counts, handle, _ = buffer.dispatch(
                x, topk_idx=idx, topk_weights=w, num_tokens_per_rank=per_rank,
                is_token_in_rank=in_rank, num_tokens_per_expert=per_expert)
            routed = (idx >= 0).any(1)
            self.assertEqual(recv_x.device, device)
            self.assertTrue(torch.equal(recv_x, x[routed]))
            self.assertTrue(torch.equal(recv_idx, idx[routed]))
            combined, _, _ = buffer.combine(recv_x, handle)
            self.assertTrue(torch.equal(combined[routed], x[routed]))
            rows, count, ll_handle, _, hook = buffer.low_latency_dispatch(x, idx, TOKENS,
                                                                          EXPERTS)
            hook()
            y = rows.clone()
            for e in range(EXPERTS):
                n = int(count[e])
                y[e, :n] = rows[e, :n] * (e + 1)
            out, _, _ = buffer.low_latency_combine(y, idx, w, ll_handle)
            scale = torch.where(idx >= 0, w * (idx + 1), torch.zeros((), device=device))
            torch.testing.assert_close(out, x * scale.sum(1, keepdim=True), rtol=1e-5,
                                       atol=1e-5)
        finally:
            buffer.destroy()


if __name__ == "__main__":
    unittest.main()
