"""Buffers of other frameworks, on one rank of the host backend: an array that only speaks
DLPack runs a whole step; DLPack's and CUDA's array interface's descriptions are checked as
numpy's are (dtype, shape, contiguity), and device memory is refused where the communicator
is the host's; the library's GPU memory is exported as an Array that DLPack and CUDA array
interface consumers take; the streams a call may be given are told apart; and the GPU is
named by the runtime's number for it wherever the package talks to the runtime or torch.
(The same on a GPU: test_device.py.)"""
import contextlib
import ctypes
import gc
import subprocess
import sys
import unittest
from unittest import mock

import numpy as np
import torch

import strata
from strata import _buffers, _dlpack, _gpu, _work
from strata._buffers import HOST, Memory

import moe_reference as ref
import one_rank

EXPERTS, TOPK, HIDDEN, TOKENS = 4, 2, 64, 8


class DLPackOnly:
    """An array of a framework strata does not know: DLPack and nothing else."""

    def __init__(self, tensor, device=None):
        self._tensor = torch.as_tensor(tensor)
        self._device = device  # ("cuda", 1): claim device memory (never read here)

    def __dlpack__(self, stream=None):
        if self._device is None:
            return torch.utils.dlpack.to_dlpack(self._tensor)
        t = self._tensor
        return _dlpack.capsule(t.data_ptr(), str(t.dtype).replace("torch.", ""),
                               tuple(t.shape), None, self._device[0], self._device[1], t)

    def __dlpack_device__(self):
        return (_dlpack.KDL_CPU, 0) if self._device is None else (_dlpack.KDL_CUDA,
                                                                   self._device[1])


class CudaInterfaceOnly:
    """An array exposing CUDA's array interface over an address no one reads here."""

    def __init__(self, shape, typestr="<f4", address=0x7f0000000000, strides=None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr,
                                         "data": (address, False), "strides": strides,
                                         "version": 3}


class TestForeignArrays(one_rank.CommTestCase):
    def setUp(self):
        self.rng = np.random.default_rng(77)

    def moe(self):
        return strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                          max_tokens=TOKENS)

    def batch(self):
        x = self.rng.standard_normal((TOKENS, HIDDEN)).astype(np.float32)
        idx, weights = ref.routing(self.rng, TOKENS, EXPERTS, TOPK)
        return x, idx, weights

    def test_dlpack_array_runs_a_step(self):
        """x, topk_weights and out given only through DLPack: the step is exact, out is
        written in place, and the recv comes back as numpy arrays (host memory)."""
        with self.moe() as moe:
            x, idx, weights = self.batch()
            recv = moe.dispatch(DLPackOnly(x), idx)
            self.assertIsInstance(recv.x, np.ndarray)
            for e in range(recv.num_local_experts):
                n = int(recv.count[e])
                recv.expert_y[e, :n] = ref.expert(recv.first_expert + e, recv.x[e, :n])
            out = torch.full((TOKENS, HIDDEN), float("nan"))
            moe.combine(DLPackOnly(weights), DLPackOnly(out))
            np.testing.assert_allclose(out.numpy(), ref.moe_step(x, idx, weights),
                                       rtol=1e-6, atol=1e-6)

    def test_dlpack_descriptions_are_checked(self):
        with self.moe() as moe:
            x, idx, _ = self.batch()
            wide = torch.zeros(TOKENS, 2 * HIDDEN)
            cases = [
                (DLPackOnly(wide[:, ::2]), r"^x is not C-contiguous"),
                (DLPackOnly(x.astype(np.float64)), r"^x has dtype float64, expected float32$"),
                (DLPackOnly(x[:, :32].copy()), r"^x has shape \(8, 32\), expected"),
                (DLPackOnly(x, device=("cuda", 1)),
                 r"^x is on CUDA GPU 1; this communicator's buffers are in host memory$"),
                (CudaInterfaceOnly((TOKENS, HIDDEN)),
                 r"^x is in CUDA memory; this communicator's buffers are in host memory$"),
            ]
            for bad, pattern in cases:
                with self.subTest(pattern=pattern), self.assertRaisesRegex(ValueError, pattern):
                    moe.dispatch(bad, idx)
            moe.dispatch(x, idx)  # none of them started a step
            moe.abort_step()

    def test_dlpack_export_lives_as_long_as_its_array(self):
        """A producer may export a copy through __dlpack__: what the capsule holds stays
        alive as long as the array the address came from, not only as long as the check."""
        import weakref

        class CopyOnExport:
            def __init__(self, tensor):
                self.tensor, self.exported = tensor, None

            def __dlpack__(self, stream=None):
                copy = self.tensor.clone()
                self.exported = weakref.ref(copy)
                return torch.utils.dlpack.to_dlpack(copy)

        obj = CopyOnExport(torch.zeros(TOKENS, HIDDEN))
        address = _buffers.address(obj, "x", "float32", (TOKENS, HIDDEN))
        gc.collect()
        copy = obj.exported()
        self.assertIsNotNone(copy, "the exported copy was freed while its address is in use")
        self.assertEqual(copy.data_ptr(), address)
        exported = obj.exported
        del obj, copy
        gc.collect()
        self.assertIsNone(exported(), "the exported copy outlived its array")

    def test_cuda_interface_descriptions(self):
        """Against a GPU communicator's memory (checked without one): the interface's
        typestr, strides and read-only flag, and host memory refused."""
        gpu = Memory("cuda", None)

        def check(obj, **kw):
            return _buffers.address(obj, "x", "float32", (TOKENS, HIDDEN), memory=gpu, **kw)

        self.assertEqual(check(CudaInterfaceOnly((TOKENS, HIDDEN), address=0x1000)), 0x1000)
        self.assertEqual(check(CudaInterfaceOnly((TOKENS, HIDDEN),
                                                 strides=(HIDDEN * 4, 4))), 0x7f0000000000)
        bad = [
            (CudaInterfaceOnly((TOKENS, HIDDEN), typestr="<i2"), r"typestr '<i2'", {}),
            (CudaInterfaceOnly((TOKENS, HIDDEN), strides=(4, TOKENS * 4)), "not C-contig", {}),
            (CudaInterfaceOnly((TOKENS, HIDDEN), typestr="<i8"), "dtype int64", {}),
            (np.zeros((TOKENS, HIDDEN), np.float32),
             r"^x is in host memory; this communicator's buffers are in CUDA memory$", {}),
        ]
        read_only = CudaInterfaceOnly((TOKENS, HIDDEN))
        read_only.__cuda_array_interface__["data"] = (0x1000, True)
        bad.append((read_only, "^x is read-only", {"writable": True}))
        for obj, pattern, kw in bad:
            with self.subTest(pattern=pattern), self.assertRaisesRegex(ValueError, pattern):
                check(obj, **kw)
        # CuPy on ROCm speaks CUDA's interface over HIP memory: taken by a HIP communicator
        self.assertEqual(_buffers.address(CudaInterfaceOnly((TOKENS, HIDDEN), address=0x2000),
                                          "x", "float32", (TOKENS, HIDDEN),
                                          memory=Memory("rocm", None)), 0x2000)
        other = DLPackOnly(np.zeros((TOKENS, HIDDEN), np.float32), device=("cuda", 1))
        with self.assertRaisesRegex(ValueError, r"^x is on CUDA GPU 1; the communicator's "
                                                r"buffers are on CUDA GPU 0$"):
            _buffers.address(other, "x", "float32", (TOKENS, HIDDEN),
                             memory=Memory("cuda", 0))


class ReorderedGpuComm:
    """What the package reads of a CUDA communicator whose rank runs with
    CUDA_VISIBLE_DEVICES=1,0: its GPU is the node's first (gpu 0, the topology's index),
    which the runtime and torch number 1 (cuda:1). None of it is touched on this machine."""
    device_backend = "cuda"
    gpu = 0
    gpu_ordinal = 1


class FakeRuntime:
    """A GPU runtime that records the device each event was made on."""

    def __init__(self):
        self.devices = []

    @contextlib.contextmanager
    def on_device(self, device):
        self.devices.append(device)
        yield

    def event(self):
        return ctypes.c_void_p(1)

    def record(self, event, stream):
        pass

    def event_destroy(self, event):
        pass


class TestGpuOrdinal(unittest.TestCase):
    """The device number the runtime and the frameworks use (comm.gpu_ordinal), not the
    GPU's place in the node's topology (comm.gpu), names the communicator's GPU wherever
    the package talks to them: the buffer checks, torch's current stream, the events
    recorded after a call, and the tensors it allocates."""

    def test_host_communicator_has_none(self):
        with one_rank.communicator() as comm:
            if comm.device_backend != "host":
                self.skipTest(f"the communicator runs on {comm.device_backend}")
            self.assertEqual((comm.gpu, comm.gpu_ordinal), (-1, -1))
            self.assertEqual(_buffers.memory_of(comm), HOST)

    def test_device_number_is_the_runtimes(self):
        memory = _buffers.memory_of(ReorderedGpuComm())
        self.assertEqual(memory, Memory("cuda", 1))
        x = np.zeros((TOKENS, HIDDEN), np.float32)
        self.assertEqual(_buffers.address(DLPackOnly(x, device=("cuda", 1)), "x", "float32",
                                          (TOKENS, HIDDEN), memory=memory),
                         torch.from_numpy(x).data_ptr())
        with self.assertRaisesRegex(ValueError, r"^x is on CUDA GPU 0; the communicator's "
                                                r"buffers are on CUDA GPU 1$"):
            _buffers.address(DLPackOnly(x, device=("cuda", 0)), "x", "float32",
                             (TOKENS, HIDDEN), memory=memory)

        class Current:
            cuda_stream = 0x77

        with mock.patch.object(torch.cuda, "current_stream",
                               return_value=Current()) as current:
            self.assertEqual(_work.resolve(None, memory, "torch")[0], 0x77)
        current.assert_called_once_with(1)
        rt = FakeRuntime()
        with mock.patch.object(_gpu, "runtime", return_value=rt):
            _work.record(memory, 0x77)
        self.assertEqual(rt.devices, [1])
        with mock.patch.object(torch, "empty") as empty:
            _buffers.empty("float32", (2, HIDDEN), "torch", memory)
        self.assertEqual(empty.call_args.kwargs["device"], torch.device("cuda", 1))


class TestExport(unittest.TestCase):
    def test_gpu_memory_comes_back_as_an_array(self):
        """The library's GPU memory (an address here) as an Array: DLPack's device, CUDA's
        array interface with byte strides, none for bf16; torch gets a tensor only where
        it has that GPU, so here only its description is read."""
        owner = object()
        array = _buffers.view(0x10000, "float32", (2, 3, 4), "array",
                              strides=(3 * 32, 32, 4), owner=owner, memory=Memory("cuda", 0))
        self.assertIsInstance(array, _buffers.Array)
        self.assertEqual(array.__dlpack_device__(), (_dlpack.KDL_CUDA, 0))
        cai = array.__cuda_array_interface__
        self.assertEqual((cai["shape"], cai["typestr"], cai["data"], cai["strides"]),
                         ((2, 3, 4), "<f4", (0x10000, False), (96, 32, 4)))
        bf16 = _buffers.view(0x10000, "bfloat16", (4, 8), "array", owner=owner,
                             memory=Memory("cuda", 0))
        self.assertFalse(hasattr(bf16, "__cuda_array_interface__"))
        before = _dlpack.live_exports()
        t = _dlpack.read(array, "array")
        self.assertEqual((t.device, t.device_id, t.dtype, t.shape, t.strides, t.address),
                         ("cuda", 0, "float32", (2, 3, 4), (24, 8, 1), 0x10000))
        self.assertFalse(t.contiguous())  # 8 floats between rows of 4
        # strata reading its own Array keeps the capsule as long as the Array lives, no
        # longer: nothing of it is left once the Array is gone
        del array, t
        gc.collect()
        self.assertEqual(_dlpack.live_exports(), before)

    def test_host_export_is_read_by_numpy_and_torch(self):
        """An Array over host memory: numpy and torch read the same bytes through DLPack,
        and every exported capsule is released once its consumer is gone."""
        data = np.arange(24, dtype=np.float32).reshape(4, 6)
        before = _dlpack.live_exports()
        array = _buffers.Array(data.ctypes.data, "float32", (4, 6), None, HOST, data)
        np.testing.assert_array_equal(np.from_dlpack(array), data)
        tensor = torch.utils.dlpack.from_dlpack(array.__dlpack__())
        data[1, 2] = -5
        self.assertEqual(float(tensor[1, 2]), -5.0)  # the same memory, not a copy
        unused = array.__dlpack__()
        del tensor, unused
        gc.collect()
        self.assertEqual(_dlpack.live_exports(), before)


    def test_capsule_held_until_exit(self):
        """A capsule nobody consumed, still held as the interpreter exits, is freed without
        an error (its destructor runs after the package's module globals are cleared)."""
        program = ("import numpy as np\n"
                   "from strata import _buffers, _dlpack\n"
                   "data = np.zeros(4, dtype=np.float32)\n"
                   "array = _buffers.Array(data.ctypes.data, 'float32', (4,), None,\n"
                   "                       _buffers.HOST, data)\n"
                   "# freed as the package's own module is cleared\n"
                   "_dlpack.held_at_exit = array.__dlpack__()\n")
        done = subprocess.run([sys.executable, "-c", program], capture_output=True,
                              text=True, timeout=60, check=False)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertNotIn("Exception ignored", done.stderr)
        self.assertNotIn("Error", done.stderr)


class TestStreams(unittest.TestCase):
    def test_streams_told_apart(self):
        gpu = Memory("cuda", 0)

        class TorchLike:
            cuda_stream = 0x1234

        class CupyLike:
            ptr = 0x5678

        torch_like, cupy_like = TorchLike(), CupyLike()
        self.assertEqual(_work.resolve(torch_like, gpu, "numpy"), (0x1234, torch_like))
        self.assertEqual(_work.resolve(cupy_like, gpu, "numpy"), (0x5678, cupy_like))
        self.assertEqual(_work.resolve(7, gpu, "numpy"), (7, 7))
        self.assertEqual(_work.resolve(None, gpu, "numpy"), (None, None))
        self.assertEqual(_work.resolve(None, HOST, "torch"), (None, None))
        with self.assertRaisesRegex(ValueError, "is a GPU stream; this communicator runs on "
                                                "the host backend"):
            _work.resolve(torch_like, HOST, "numpy")
        with self.assertRaisesRegex(ValueError, "stream must be a strata Stream"):
            _work.resolve("default", gpu, "numpy")


if __name__ == "__main__":
    unittest.main()
