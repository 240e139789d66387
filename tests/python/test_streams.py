"""Moe calls on streams of the host backend: a step enqueued with async_op returns at once
and its Work gives the results once done; calls ordered after another's Work
(previous_event); the stream changing between steps; a call with a stream but without
async_op complete on return, the halves and abort_step too; an error of the step raised by
wait(); and a stream closed under a step refused, then closed once the step is done, or
once the library object of a Moe closed mid-step is destroyed."""
import gc
import unittest

import numpy as np

import strata
from strata import Status, StrataError

import moe_reference as ref
import one_rank

EXPERTS, TOPK, HIDDEN, TOKENS = 4, 2, 64, 16


def run_experts(recv):
    for e in range(recv.num_local_experts):
        n = int(recv.count[e])
        recv.expert_y[e, :n] = ref.expert(recv.first_expert + e, recv.x[e, :n])


class TestStreams(one_rank.CommTestCase):
    def setUp(self):
        self.rng = np.random.default_rng(77 + len(self.id()))

    def batch(self):
        x = self.rng.standard_normal((TOKENS, HIDDEN)).astype(np.float32)
        idx, weights = ref.routing(self.rng, TOKENS, EXPERTS, TOPK)
        return x, idx, weights

    def moe(self, **extra):
        return strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                          max_tokens=TOKENS, **extra)

    def test_async_steps_on_changing_streams(self):
        with self.comm.stream() as first, self.comm.stream() as second, self.moe() as moe:
            for step in range(4):
                stream = first if step % 2 == 0 else second
                x, idx, weights = self.batch()
                work = moe.dispatch(x, idx, stream=stream, async_op=True)
                self.assertIsInstance(work, strata.moe.Work)
                recv = work.wait()
                self.assertTrue(work.is_completed())
                run_experts(recv)
                out = np.full_like(x, np.nan)
                done = moe.combine(weights, out, stream=stream, async_op=True,
                                   previous_event=work)
                self.assertIs(done.wait(), out)
                np.testing.assert_allclose(out, ref.moe_step(x, idx, weights), rtol=1e-6,
                                           atol=1e-6)

    def test_stream_without_async_op_is_complete_on_return(self):
        with self.comm.stream() as stream, self.moe() as moe:
            x, idx, weights = self.batch()
            recv = moe.dispatch(x, idx, stream=stream)
            run_experts(recv)
            out = moe.combine(weights, np.full_like(x, np.nan), stream=stream)
            np.testing.assert_allclose(out, ref.moe_step(x, idx, weights), rtol=1e-6,
                                       atol=1e-6)
            # and back to no stream for the next step
            recv = moe.dispatch(x, idx)
            run_experts(recv)
            moe.combine(weights, np.empty_like(x))

    def test_abort_step_on_the_steps_stream(self):
        """abort_step ends a step whose halves ran on a stream, on that stream (no stream
        argument: a step's stream does not change mid-step), and the next step is exact."""
        with self.comm.stream() as stream, self.moe() as moe:
            x, idx, weights = self.batch()
            layout = moe.layout(idx)
            moe.dispatch_send(layout, x, stream=stream, async_op=True)
            moe.abort_step()
            recv = moe.dispatch(x, idx, stream=stream)
            run_experts(recv)
            out = moe.combine(weights, np.full_like(x, np.nan), stream=stream)
            np.testing.assert_allclose(out, ref.moe_step(x, idx, weights), rtol=1e-6,
                                       atol=1e-6)
            layout.close()

    def test_halves_async(self):
        with self.comm.stream() as stream, self.moe() as moe:
            x, idx, weights = self.batch()
            layout = moe.layout(idx)
            sent = moe.dispatch_send(layout, x, stream=stream, async_op=True)
            recv = moe.dispatch_recv(stream=stream, async_op=True, previous_event=sent).wait()
            run_experts(recv)
            moe.combine_send(stream=stream, async_op=True).wait()
            out = moe.combine_recv(weights, np.full_like(x, np.nan), stream=stream,
                                   async_op=True).wait()
            np.testing.assert_allclose(out, ref.moe_step(x, idx, weights), rtol=1e-6,
                                       atol=1e-6)
            layout.close()

    def test_halves_without_async_op_are_complete_on_return(self):
        """dispatch_send, combine_send and abort_step given a stream but not async_op, like
        every call of a step: the host waits for the object's work on the stream before
        they return, raises what it found there (rows dropped for capacity by a dispatch
        nobody waited for), and the object then keeps no buffer for the stream."""
        with self.comm.stream() as stream, self.moe(capacity=2) as moe:
            x = np.ones((TOKENS, HIDDEN), np.float32)
            idx = np.full((TOKENS, TOPK), -1, np.int64)
            idx[:, 0] = 0  # 16 rows for expert 0, which holds 2
            layout = moe.layout(idx)
            moe.dispatch_send(layout, x, stream=stream, async_op=True)
            moe.dispatch_recv(stream=stream, async_op=True)  # its Work never waited for
            with self.assertRaises(StrataError) as caught:
                moe.combine_send(stream=stream)
            self.assertIs(caught.exception.status, Status.STRATA_ERR_CAPACITY)
            self.assertEqual(moe._pending._entries, [])
            with self.assertRaises(StrataError):  # its tokens lack the dropped terms
                moe.combine_recv(np.ones((TOKENS, TOPK), np.float32), np.empty_like(x),
                                 stream=stream)
            layout.close()
        with self.comm.stream() as stream, self.moe() as moe:
            x, idx, weights = self.batch()
            layout = moe.layout(idx)
            for finish in ("combine", "abort_step"):
                self.assertIsNone(moe.dispatch_send(layout, x, stream=stream))
                self.assertEqual(moe._pending._entries, [])
                if finish == "abort_step":
                    self.assertIsNone(moe.abort_step())
                    self.assertEqual(moe._pending._entries, [])
                    continue
                run_experts(moe.dispatch_recv(stream=stream))
                self.assertIsNone(moe.combine_send(stream=stream))
                self.assertEqual(moe._pending._entries, [])
                out = moe.combine_recv(weights, np.full_like(x, np.nan), stream=stream)
                np.testing.assert_allclose(out, ref.moe_step(x, idx, weights), rtol=1e-6,
                                           atol=1e-6)
            layout.close()

    def test_expert_wait(self):
        """Each local expert waited for alone after an async dispatch: the count it gives is
        the recv's, and its rows then are the rows the step ends with; the step's counts,
        asked for first, are the rows routed to each expert. Out of range: a StrataError of
        STRATA_ERR_INVALID, as before any dispatch; a non-int expert: TypeError."""
        with self.comm.stream() as stream, self.moe() as moe:
            with self.assertRaises(StrataError) as caught:
                moe.expert_wait(0)
            self.assertIs(caught.exception.status, Status.STRATA_ERR_INVALID)
            with self.assertRaises(StrataError) as caught:
                moe.dispatch_counts()
            self.assertIs(caught.exception.status, Status.STRATA_ERR_INVALID)
            with self.assertRaises(ValueError):
                moe.dispatch_counts(timeout=-1)
            for step in range(3):
                x, idx, weights = self.batch()
                work = moe.dispatch(x, idx, stream=stream, async_op=True)
                counts = moe.dispatch_counts(timeout=10.0)  # rows may still be moving
                rows, copies = [], []
                for e in range(EXPERTS):  # one rank: every expert is local
                    rows.append(moe.expert_wait(e, timeout=10.0))
                    copies.append(np.array(work.result.x[e, :rows[-1]]))
                recv = work.wait()
                self.assertEqual(counts, [int((idx == e).sum()) for e in range(EXPERTS)])
                for e in range(EXPERTS):
                    self.assertEqual(rows[e], int(recv.count[e]))
                    np.testing.assert_array_equal(copies[e], recv.x[e, :rows[e]])
                self.assertEqual(moe.expert_wait(EXPERTS - 1, timeout=0), rows[-1])
                with self.assertRaises(StrataError) as caught:
                    moe.expert_wait(EXPERTS)
                self.assertIs(caught.exception.status, Status.STRATA_ERR_INVALID)
                with self.assertRaises(TypeError):
                    moe.expert_wait(1.0)
                run_experts(recv)
                out = moe.combine(weights, np.full_like(x, np.nan), stream=stream)
                np.testing.assert_allclose(out, ref.moe_step(x, idx, weights), rtol=1e-6,
                                           atol=1e-6)

    def test_error_of_the_step_raised_by_wait(self):
        with self.comm.stream() as stream, self.moe(capacity=2) as moe:
            x = np.ones((TOKENS, HIDDEN), np.float32)
            idx = np.full((TOKENS, TOPK), -1, np.int64)
            idx[:, 0] = 0  # 16 rows for expert 0, which holds 2
            work = moe.dispatch(x, idx, stream=stream, async_op=True)
            with self.assertRaises(StrataError) as caught:
                work.wait()
            self.assertIs(caught.exception.status, Status.STRATA_ERR_CAPACITY)
            self.assertEqual(moe.dispatch_counts()[0], TOKENS)  # 16 sent, 2 kept
            with self.assertRaises(StrataError):
                moe.combine(np.ones((TOKENS, TOPK), np.float32), np.empty_like(x),
                            stream=stream)

    def test_wait_after_close(self):
        """close() waits for the object's work: a Work waited for afterwards gives its
        result."""
        with self.comm.stream() as stream:
            moe = self.moe()
            x, idx, weights = self.batch()
            recv = moe.dispatch(x, idx, stream=stream, async_op=True).wait()
            run_experts(recv)
            out = np.full_like(x, np.nan)
            done = moe.combine(weights, out, stream=stream, async_op=True)
            moe.close()
            self.assertIs(done.wait(), out)
            np.testing.assert_allclose(out, ref.moe_step(x, idx, weights), rtol=1e-6,
                                       atol=1e-6)

    def test_communicator_closes_its_streams(self):
        comm = strata.Communicator()
        stream = comm.stream()
        comm.close()
        self.assertIsNone(stream.handle)

    def test_communicator_closed_under_a_kept_step(self):
        """A Moe closed mid-step whose Recv is still held keeps its stream: the
        communicator's close leaves the stream to the library object, which it is freed
        after."""
        comm = strata.Communicator()
        stream = comm.stream()
        moe = strata.Moe(comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                         max_tokens=TOKENS)
        x, idx, _ = self.batch()
        recv = moe.dispatch(x, idx, stream=stream)  # the step stays in progress
        comm.close()
        self.assertIsNotNone(stream.handle)  # the library object still runs on it
        del recv, moe
        gc.collect()
        self.assertIsNone(stream.handle)

    def test_stream_closed_under_a_step(self):
        with self.moe() as moe:
            stream = self.comm.stream()
            x, idx, weights = self.batch()
            recv = moe.dispatch(x, idx, stream=stream)
            with self.assertRaises(StrataError):
                stream.close()  # the step in progress still runs on it
            run_experts(recv)
            moe.combine(weights, np.empty_like(x), stream=stream)
            stream.close()
            self.assertIsNone(stream.handle)
            recv = moe.dispatch(x, idx)  # no stream from here on
            run_experts(recv)
            moe.combine(weights, np.empty_like(x))


if __name__ == "__main__":
    unittest.main()
