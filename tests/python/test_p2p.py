"""Point-to-point from Python on one rank: a registered region and its descriptor (bytes
out and back), and the checks made before a paged or scatter write reaches the engine
(ValueError) and those the library makes (StrataError, nothing sent). The transfers
themselves run between two ranks in examples/kv_transfer.py (test_kv_transfer)."""
import unittest

import numpy as np

import strata
from strata import Status, StrataError

import one_rank


class P2PTest(one_rank.CommTestCase):
    def test_region_and_descriptor(self):
        cache = np.zeros((8, 1024), np.uint8)
        with self.comm.register(cache) as region:
            self.assertEqual(region.nbytes, 8192)
            raw = region.descriptor.to_bytes()
            self.assertEqual(len(raw), strata.p2p.DESC_SIZE)
            self.assertEqual(strata.Descriptor.from_bytes(raw).to_bytes(), raw)
        with self.assertRaises(ValueError):
            region.handle  # closed
        with self.assertRaises(ValueError):
            strata.Descriptor.from_bytes(raw[:-1])
        with self.assertRaises(ValueError):
            self.comm.register(np.zeros((8, 16), np.float32)[:, ::2])  # strided

    def test_device_memory_on_a_host_communicator(self):
        class OnGpu:  # says it is CUDA memory; never read
            __cuda_array_interface__ = {"shape": (64,), "typestr": "|u1", "strides": None,
                                        "data": (1 << 40, False), "version": 3}

        if self.comm.device_backend != "host":
            self.skipTest(f"the communicator runs on {self.comm.device_backend}")
        with self.assertRaisesRegex(ValueError, r"^buffer is (in CUDA memory|on CUDA GPU \d+); "
                                                r"this communicator \(host backend\) registers "
                                                r"host memory$"):
            self.comm.register(OnGpu())

    def test_refusals(self):
        cache = np.zeros((8, 1024), np.uint8)
        with self.comm.register(cache) as region:
            me, dst = self.comm.rank, region.descriptor
            with self.assertRaises(ValueError):
                self.comm.write_paged(me, region, dst, 1024, [0, 1], [2])
            with self.assertRaises(ValueError):
                self.comm.write_paged(me, region, dst, 1024, [], [])
            with self.assertRaises(ValueError):
                self.comm.write_paged(me, region, dst, 1024, [-1], [0])
            with self.assertRaises(StrataError) as caught:  # destination page 3 twice
                self.comm.write_paged(me, region, dst, 1024, [0, 1], [3, 3], imm=1)
            self.assertIs(caught.exception.status, Status.STRATA_ERR_INVALID)
            with self.assertRaises(StrataError) as caught:  # page 8 is past the end
                self.comm.write_paged(me, region, dst, 1024, [0], [8])
            self.assertIs(caught.exception.status, Status.STRATA_ERR_INVALID)
            with self.assertRaises(StrataError) as caught:  # overlapping pieces
                self.comm.write_scatter(me, region, dst, [(0, 0, 100), (200, 50, 10)])
            self.assertIs(caught.exception.status, Status.STRATA_ERR_INVALID)
            with self.assertRaises(ValueError):
                self.comm.write_scatter(me, region, dst, [])


if __name__ == "__main__":
    unittest.main()
