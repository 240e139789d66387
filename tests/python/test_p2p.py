"""Point-to-point from Python on one rank: a registered region and its descriptor (bytes
out and back), and the checks made before a paged or scatter write reaches the engine
(ValueError) and those the library makes (StrataError, nothing sent); what outlives the
calls that gave it up (a receive that timed out, a region or request dropped) and what a
communicator's close() ends. The transfers themselves run between two ranks in
examples/kv_transfer.py (test_kv_transfer)."""
import gc
import unittest
import weakref

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

    def test_timed_out_receive_takes_no_later_message(self):
        # The receive that timed out is cancelled before its buffer goes: the next message
        # is the next receive's, and nothing lands in freed memory.
        with one_rank.communicator() as comm:
            with self.assertRaises(StrataError) as caught:
                comm.recv_bytes(peer=0, timeout=0.2)
            self.assertIs(caught.exception.status, Status.STRATA_ERR_TIMEOUT)
            gc.collect()
            comm.send_bytes(0, b"hello")
            self.assertEqual(comm.recv_bytes(peer=0, timeout=5.0), b"hello")
            comm.send_bytes(0, b"again")
            self.assertEqual(comm.recv_bytes(peer=0, timeout=5.0), b"again")

    def test_dropped_region_stays_registered_until_the_communicator_closes(self):
        comm = one_rank.communicator()
        try:
            me = comm.rank
            source = np.full((4, 1024), 7, np.uint8)
            src = comm.register(source)
            cache = np.zeros((4, 1024), np.uint8)
            dst, alive = comm.register(cache).descriptor, weakref.ref(cache)
            del cache  # the Region too: never closed
            gc.collect()
            self.assertIsNotNone(alive(), "a region dropped without close() freed its buffer")
            request = comm.write_paged(me, src, dst, 1024, [0, 1], [2, 3])
            request.wait(10.0)
            request.close()
            self.assertEqual(alive()[2:].min(), 7)  # still registered: its pages written
            self.assertEqual(alive()[:2].max(), 0)
        finally:
            comm.close()
        gc.collect()
        self.assertIsNone(alive(), "the communicator's close() keeps the buffer")
        src.close()  # nothing left to do
        self.assertEqual(repr(src), "<strata.Region closed>")
        with self.assertRaises(ValueError):
            request.wait()  # closed

    def test_request_dropped_in_flight(self):
        # Dropped while its write runs: cancelled, and held by the communicator, with the
        # region it reads, until it ends; a later call frees it, close() ends the rest.
        comm = one_rank.communicator()
        try:
            me, size = comm.rank, 32 << 20
            source = np.ones(size, np.uint8)
            src, alive = comm.register(source), weakref.ref(source)
            dst = comm.register(np.zeros(size, np.uint8)).descriptor
            del source
            request = comm.write_scatter(me, src, dst, [(0, 0, size)])
            del request
            src.close()  # waits for the dropped write, or leaves it to the communicator
            gc.collect()
            comm.send_bytes(0, b"after")
            self.assertEqual(comm.recv_bytes(peer=0, timeout=5.0), b"after")
            pending = comm.write_scatter(me, comm.register(np.ones(size, np.uint8)), dst,
                                         [(0, 0, size)])
        finally:
            comm.close()  # cancels what is in flight and waits for it
        with self.assertRaises(ValueError):
            pending.test()
        pending.close()
        del src, pending
        gc.collect()
        self.assertIsNone(alive())


if __name__ == "__main__":
    unittest.main()
