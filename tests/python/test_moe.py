"""MoE dispatch and combine on one rank with numpy arrays: the whole step and its halves
against a plain reference, the recv's views (rows, counts, sources), the statistics, and
every buffer check's ValueError (after which the call can be made again)."""
import ctypes
import gc
import unittest

import numpy as np

import strata
from strata import Dtype

import failing_lib
import moe_reference as ref
import one_rank

EXPERTS, TOPK, HIDDEN, MAX_TOKENS = 8, 3, 64, 16


def run_experts(recv):
    """Each local expert on its rows, written into recv.expert_y in place."""
    for e in range(recv.num_local_experts):
        n = int(recv.count[e])
        rows = recv.x[e, :n].astype(np.float32)
        recv.expert_y[e, :n] = ref.expert(recv.first_expert + e, rows)


class MoeTest(one_rank.CommTestCase):
    def setUp(self):
        self.seed = 1234 + len(self.id())
        self.rng = np.random.default_rng(self.seed)

    def moe(self, dtype=Dtype.FP32):
        return strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                          max_tokens=MAX_TOKENS, dtype=dtype)

    def batch(self, num_tokens=MAX_TOKENS, dtype=np.float32):
        x = self.rng.standard_normal((num_tokens, HIDDEN)).astype(dtype)
        idx, weights = ref.routing(self.rng, num_tokens, EXPERTS, TOPK)
        return x, idx, weights

    def assert_close(self, out, expected, tolerance):
        err = float(np.max(np.abs(out.astype(np.float32) - expected) /
                           np.maximum(1.0, np.abs(expected)))) if out.size else 0.0
        self.assertLessEqual(err, tolerance, f"seed {self.seed}: max relative error {err}")


class TestRoundTrip(MoeTest):
    def test_dispatch_combine(self):
        with self.moe() as moe:
            for step in range(3):
                x, idx, weights = self.batch()
                recv = moe.dispatch(x, idx)
                run_experts(recv)
                out = np.full_like(x, np.nan)
                self.assertIs(moe.combine(weights, out), out)
                self.assert_close(out, ref.moe_step(x, idx, weights), 1e-6)
                self.assertEqual(moe.stats().steps, step + 1)

    def test_split_communicator(self):
        """Communicator.split: color -1 gets None; color 0 a communicator of its own (here
        of one rank), on which a MoE step runs as on any other."""
        self.assertIsNone(self.comm.split(-1))
        with self.comm.split(0, key=5) as sub:
            self.assertEqual((sub.rank, sub.size), (0, 1))
            with strata.Moe(sub, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                            max_tokens=MAX_TOKENS) as moe:
                x, idx, weights = self.batch()
                run_experts(moe.dispatch(x, idx))
                out = moe.combine(weights, np.empty_like(x))
                self.assert_close(out, ref.moe_step(x, idx, weights), 1e-6)

    def test_recreate_with_experts_masked(self):
        """Moe.recreate on the same communicator with experts 2 and 5 masked: the places
        named by expert_id, the masked slots per token, the step exact without them; and
        the map's refusals."""
        with self.moe() as moe:
            owner = [-1 if e in (2, 5) else 0 for e in range(EXPERTS)]
            with self.assertRaisesRegex(ValueError, "expert_owner has 7 entries, not 8"):
                moe.recreate(self.comm, owner[:7])
            with self.assertRaisesRegex(ValueError, "needs expert_owner"):
                strata.Moe.join(self.comm, None, EXPERTS, TOPK, HIDDEN, MAX_TOKENS)
            with moe.recreate(self.comm, owner) as again:
                self.assertEqual([again.expert_id(j) for j in range(7)], [0, 1, 3, 4, 6, 7, -1])
                x, idx, weights = self.batch()
                recv = again.dispatch(x, idx)
                for e in range(recv.num_local_experts):
                    n = int(recv.count[e])
                    recv.expert_y[e, :n] = ref.expert(again.expert_id(e), recv.x[e, :n])
                out = again.combine(weights, np.empty_like(x))
                masked = np.isin(idx, (2, 5))
                self.assertEqual(again.masked(), [int(m) for m in masked.sum(axis=1)])
                self.assertTrue(masked.any())
                expected = ref.moe_step(x, np.where(masked, -1, idx), weights)
                self.assertTrue(np.array_equal(out, expected))

    def test_recv_views(self):
        with self.moe() as moe:
            x, idx, weights = self.batch()
            recv = moe.dispatch(x, idx)
            self.assertEqual((recv.num_local_experts, recv.first_expert), (EXPERTS, 0))
            self.assertEqual(recv.x.shape, (EXPERTS, recv.capacity, HIDDEN))
            expected = [int(np.sum(idx == e)) for e in range(EXPERTS)]
            self.assertEqual([int(c) for c in recv.count], expected)
            for e in range(EXPERTS):
                for row in range(int(recv.count[e])):
                    rank, token, slot = (int(v) for v in recv.src[e, row])
                    self.assertEqual((rank, int(idx[token, slot])), (0, e))
                    np.testing.assert_array_equal(recv.x[e, row], x[token])
            self.assertEqual(moe.stats().steps, 0)  # the step completes at combine
            run_experts(recv)
            moe.combine(weights, np.empty_like(x))
            stats = moe.stats()
            self.assertEqual(stats.tokens_per_expert, expected)
            self.assertEqual(stats.num_local_experts, EXPERTS)
            self.assertEqual(stats.host_copied_bytes, 0)
            memory = stats.memory
            self.assertEqual(memory["total"], sum(v for k, v in memory.items() if k != "total"))
            # the experts' blocks: capacity rows of input, output and source, per expert
            self.assertGreaterEqual(memory["expert_rows"],
                                    EXPERTS * recv.capacity * (2 * x[0].nbytes + 12))

    def test_halves_with_a_reused_layout(self):
        with self.moe() as moe:
            x, idx, weights = self.batch(num_tokens=5)
            layout = moe.layout(idx)
            for step in range(2):
                x = self.rng.standard_normal(x.shape).astype(np.float32)
                moe.dispatch_send(layout, x)
                recv = moe.dispatch_recv()
                y = np.zeros_like(recv.expert_y)
                for e in range(EXPERTS):
                    n = int(recv.count[e])
                    y[e, :n] = ref.expert(e, recv.x[e, :n])
                moe.combine_send(y)  # the outputs from a buffer of the caller's
                out = moe.combine_recv(weights, np.empty_like(x))
                self.assert_close(out, ref.moe_step(x, idx, weights), 1e-6)
            layout.close()

    def test_node_reduce_accepted_on_one_node(self):
        # With one node no term crosses nodes, and the library runs node-reduce as exact
        # mode: the object is made and gives exact's results bit for bit. (This cannot tell
        # whether the field reached the library; the multi-node tests do.) A value outside
        # strata.Combine is refused by the package itself; the library's own refusal of one
        # is tested in scheduler/moe.
        x, idx, weights = self.batch()
        outs = []
        for combine in (strata.Combine.EXACT, strata.Combine.NODE_REDUCE):
            with strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                            max_tokens=MAX_TOKENS, combine=combine) as moe:
                recv = moe.dispatch(x, idx)
                run_experts(recv)
                outs.append(moe.combine(weights, np.empty_like(x)))
        self.assertTrue(np.array_equal(outs[0], outs[1]), f"seed {self.seed}")
        self.assert_close(outs[1], ref.moe_step(x, idx, weights), 1e-6)
        with self.assertRaises(ValueError):
            strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                       max_tokens=MAX_TOKENS, combine=7)

    def test_exchange_reaches_the_library(self):
        # The exchange asked for is the one the object reports (stats: the library's own
        # resolution of the field); on one node a step is one round either way, and exact
        # with a capacity that holds every row (the streamed default, twice the mean load,
        # may drop some). A value outside strata.Exchange is refused by the package itself.
        x, idx, weights = self.batch()
        for exchange in (strata.Exchange.WORST_CASE, strata.Exchange.STREAMED):
            with strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                            max_tokens=MAX_TOKENS, exchange=exchange,
                            capacity=MAX_TOKENS * self.comm.size) as moe:
                recv = moe.dispatch(x, idx)
                run_experts(recv)
                out = moe.combine(weights, np.empty_like(x))
                stats = moe.stats()
                self.assertIs(stats.exchange, exchange)
                self.assertEqual(stats.exchange_rounds, 1)
                self.assert_close(out, ref.moe_step(x, idx, weights), 1e-6)
        with self.assertRaises(ValueError):
            strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                       max_tokens=MAX_TOKENS, exchange=3)

    def test_fp16(self):
        with self.moe(dtype="fp16") as moe:
            x, idx, weights = self.batch(dtype=np.float16)
            recv = moe.dispatch(x, idx)
            self.assertEqual(recv.x.dtype, np.float16)
            run_experts(recv)
            out = moe.combine(weights, np.empty_like(x))
            self.assert_close(out, ref.moe_step(x, idx, weights), 2e-2)

    def test_fp8_rows_and_scales_arrive_as_sent(self):
        with strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=256,
                        max_tokens=MAX_TOKENS, dtype="fp8_e4m3", combine_dtype="fp32") as moe:
            x = self.rng.integers(0, 256, (MAX_TOKENS, 256), dtype=np.uint8)
            scales = self.rng.random((MAX_TOKENS, 2), dtype=np.float32)
            idx, weights = ref.routing(self.rng, MAX_TOKENS, EXPERTS, TOPK)
            self.assertRaisesRegex(ValueError, "x_scales is required", moe.dispatch, x, idx)
            recv = moe.dispatch(x, idx, x_scales=scales)
            for e in range(EXPERTS):
                for row in range(int(recv.count[e])):
                    token = int(recv.src[e, row, 1])
                    np.testing.assert_array_equal(recv.x[e, row], x[token])
                    np.testing.assert_array_equal(recv.x_scales[e, row], scales[token])
            recv.expert_y[:] = 1.0
            out = moe.combine(weights, np.empty((MAX_TOKENS, 256), np.float32))
            expected = np.where(idx >= 0, weights, 0).sum(axis=1, dtype=np.float32)
            self.assert_close(out, np.repeat(expected[:, None], 256, axis=1), 1e-6)

    def test_layout_in_use_is_not_closed(self):
        with self.moe() as moe:
            x, idx, weights = self.batch()
            layout = moe.layout(idx)
            moe.dispatch_send(layout, x)
            with self.assertRaisesRegex(ValueError, "in use by the step in progress"):
                layout.close()
            run_experts(moe.dispatch_recv())
            moe.combine(weights, np.empty_like(x))
            layout.close()

    def test_combine_send_keeps_expert_y(self):
        # On one node the library reads expert_y only in combine_recv: a temporary given to
        # combine_send must outlive the call.
        with self.moe() as moe:
            x, idx, weights = self.batch(num_tokens=5)
            layout = moe.layout(idx)
            moe.dispatch_send(layout, x)
            recv = moe.dispatch_recv()
            moe.combine_send(np.full(recv.expert_y.shape, 2.0, dtype=np.float32))
            np.full(recv.expert_y.shape, -7.0, dtype=np.float32)  # reuses freed memory
            out = moe.combine_recv(weights, np.empty_like(x))
            routed = np.where(idx >= 0, weights, 0.0)  # slot -1: no expert
            expected = 2.0 * np.sum(routed, axis=1, keepdims=True) * np.ones_like(x)
            self.assert_close(out, expected, 1e-6)
            layout.close()

    def test_views_keep_their_moe(self):
        # A Recv returned from a function whose Moe went out of scope: the views keep the
        # Moe, and so its memory, alive.
        def dispatch_alone():
            moe = self.moe()
            x, idx, _ = self.batch(num_tokens=4)
            return moe.dispatch(x, idx), x, idx

        recv, x, idx = dispatch_alone()
        gc.collect()
        token, slot = (int(v) for v in np.argwhere(idx >= 0)[0])
        e = int(idx[token, slot])
        rows = [r for r in range(int(recv.count[e])) if int(recv.src[e, r, 1]) == token]
        np.testing.assert_array_equal(recv.x[e, rows[0]], x[token])


class TestExactReceive(MoeTest):
    """receive=Receive.EXACT: dispatch gives a CompactRecv of every row, packed expert after
    expert, none dropped whatever the load; combine reads the outputs from its expert_y."""

    def exact(self, dtype=Dtype.FP32):
        return strata.Moe(self.comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                          max_tokens=MAX_TOKENS, dtype=dtype, receive=strata.Receive.EXACT)

    def check_rows(self, recv, x, idx):
        expected = [int(np.sum(idx == e)) for e in range(EXPERTS)]
        self.assertEqual(recv.counts, expected)
        self.assertEqual(recv.offsets[-1], recv.rows)
        self.assertEqual(recv.x.shape, (recv.rows, HIDDEN))
        for e in range(EXPERTS):
            for row in range(recv.offsets[e], recv.offsets[e + 1]):
                rank, token, slot = (int(v) for v in recv.src[row])
                self.assertEqual((rank, int(idx[token, slot])), (0, e))
                np.testing.assert_array_equal(recv.x[row], x[token])

    def test_every_row_packed(self):
        with self.exact() as moe:
            for step in range(3):
                x, idx, weights = self.batch()
                if step > 0:  # every token's first slot to expert 2: MAX_TOKENS rows there
                    idx[:, 0] = 2
                    idx[:, 1:][idx[:, 1:] == 2] = -1
                recv = moe.dispatch(x, idx)
                self.assertIsInstance(recv, strata.CompactRecv)
                self.check_rows(recv, x, idx)
                for e in range(EXPERTS):
                    rows = slice(recv.offsets[e], recv.offsets[e + 1])
                    recv.expert_y[rows] = ref.expert(e, recv.x[rows])
                out = np.full_like(x, np.nan)
                moe.combine(weights, out)
                self.assert_close(out, ref.moe_step(x, idx, weights), 1e-6)
            self.assertEqual(moe.stats().tokens_per_expert, recv.counts)
            # one row per expert, not max_tokens: no blocks to speak of
            self.assertLess(moe.stats().memory["expert_rows"], EXPERTS * 2 * 4 * HIDDEN * 2)

    def test_halves_and_own_buffers(self):
        with self.exact() as moe:
            x, idx, weights = self.batch(num_tokens=5)
            layout = moe.layout(idx)
            moe.dispatch_send(layout, x)
            recv = moe.dispatch_recv()
            self.check_rows(recv, x, idx)
            with self.assertRaises(strata.StrataError) as caught:  # once per step
                moe.dispatch_recv_into(recv.x, recv.src)
            self.assertEqual(caught.exception.status, strata.Status.STRATA_ERR_INVALID)
            y = np.zeros((recv.rows, HIDDEN), dtype=np.float32)
            for e in range(EXPERTS):
                rows = slice(recv.offsets[e], recv.offsets[e + 1])
                y[rows] = ref.expert(e, recv.x[rows])
            with self.assertRaises(ValueError):  # not the step's rows
                moe.combine_send(np.zeros((recv.rows + 1, HIDDEN), dtype=np.float32))
            moe.combine_send(y)
            out = moe.combine_recv(weights, np.empty_like(x))
            self.assert_close(out, ref.moe_step(x, idx, weights), 1e-6)
            layout.close()

    def test_into_buffers_of_the_callers(self):
        """receive_buffers=False: the counts alone, then the caller's own buffers."""
        with self.exact() as moe:
            x, idx, weights = self.batch()
            recv = moe.dispatch(x, idx, receive_buffers=False)
            self.assertIsNone(recv.x)
            self.assertEqual(recv.counts, [int(np.sum(idx == e)) for e in range(EXPERTS)])
            rows = np.empty((recv.rows, HIDDEN), dtype=np.float32)
            src = np.empty((recv.rows, 3), dtype=np.int32)
            with self.assertRaises(ValueError):  # too few rows for src: the call can be redone
                moe.dispatch_recv_into(rows, src[:-1])
            moe.dispatch_recv_into(rows, src)
            self.assertIs(recv.x, rows)
            self.check_rows(recv, x, idx)
            with self.assertRaises(ValueError):  # no outputs of its own to take
                moe.combine(weights, np.empty_like(x))
            y = np.empty_like(rows)
            for e in range(EXPERTS):
                part = slice(recv.offsets[e], recv.offsets[e + 1])
                y[part] = ref.expert(e, rows[part])
            out = moe.combine(weights, np.empty_like(x), expert_y=y)
            self.assert_close(out, ref.moe_step(x, idx, weights), 1e-6)

    def test_blocks_object_has_no_exact_receive(self):
        with self.moe() as moe:
            x, idx, weights = self.batch()
            recv = moe.dispatch(x, idx)
            with self.assertRaises(strata.StrataError):
                moe.dispatch_recv_into(np.zeros((64, HIDDEN), dtype=np.float32),
                                       np.zeros((64, 3), dtype=np.int32))
            run_experts(recv)
            moe.combine(weights, np.empty_like(x))


class TestLifetimes(MoeTest):
    """Views and layouts against a closed Moe or Communicator."""

    def test_views_read_after_close(self):
        # Arrays of a Recv outlive the Moe's close(): they keep its memory mapped, and
        # still hold the last step's rows. The memory is the node's heap, which the
        # library unmaps at destroy: before, these reads crashed the interpreter.
        moe = self.moe()
        x, idx, _ = self.batch(num_tokens=6)
        recv = moe.dispatch(x, idx)
        counts = recv.count.copy()
        rows = recv.x.copy()
        moe.close()
        gc.collect()
        np.testing.assert_array_equal(recv.count, counts)
        np.testing.assert_array_equal(recv.x, rows)
        with self.assertRaisesRegex(ValueError, "closed"):
            moe.dispatch(x, idx)

    def test_views_read_after_communicator_close(self):
        comm = one_rank.communicator()
        moe = strata.Moe(comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                         max_tokens=MAX_TOKENS)
        x, idx, _ = self.batch(num_tokens=5)
        recv = moe.dispatch(x, idx)
        rows = recv.x.copy()
        comm.close()  # closes the Moe, then destroys the communicator and its bootstrap
        gc.collect()
        np.testing.assert_array_equal(recv.x, rows)
        del recv
        gc.collect()  # the library object goes now, after its bootstrap: no crash either

    def test_close_closes_layouts(self):
        moe = self.moe()
        _, idx, _ = self.batch(num_tokens=3)
        layouts = [moe.layout(idx), moe.layout(idx)]
        layouts[0].close()
        moe.close()
        self.assertTrue(all(layout._handle is None for layout in layouts))
        layouts[1].close()  # closing again is harmless

    def test_layout_of_another_moe_refused(self):
        with self.moe() as first, self.moe() as second:
            x, idx, weights = self.batch(num_tokens=4)
            theirs = first.layout(idx)
            with self.assertRaisesRegex(ValueError, "made by this Moe"):
                second.dispatch_send(theirs, x)
            mine = second.layout(idx)  # the refused call did not start a step
            second.dispatch_send(mine, x)
            run_experts(second.dispatch_recv())
            out = second.combine(weights, np.empty_like(x))
            self.assert_close(out, ref.moe_step(x, idx, weights), 1e-6)


class TestRefusedCalls(MoeTest):
    """A call the library refuses (out of the step's order) leaves the step in progress,
    and what the package knows of it, as they were: the step's combine still takes buffers
    of the step's own dispatch, its layout stays in use, and what the library reads stays
    alive. out and topk_weights of the wrong size are slices of buffers of the right one,
    so that a check that let them through would not have the library write past them."""

    def buffers(self, num_tokens):
        """topk_weights and out of num_tokens rows, the first rows of MAX_TOKENS-row ones."""
        weights = np.ones((MAX_TOKENS, TOPK), np.float32)
        out = np.full((MAX_TOKENS, HIDDEN), np.nan, np.float32)
        return weights[:num_tokens], out[:num_tokens]

    def expect_step_of(self, moe, num_tokens, call, *buffers):
        with self.assertRaisesRegex(ValueError, rf"^(topk_weights|out) has shape "
                                                rf"\({num_tokens}, \d+\), expected "
                                                rf"\(num_tokens={MAX_TOKENS}, "):
            call(*buffers)

    def test_refused_dispatch_leaves_the_step(self):
        with self.moe() as moe:
            x, idx, weights = self.batch()
            recv = moe.dispatch(x, idx)
            x2, idx2, _ = self.batch(num_tokens=10)
            with self.assertRaises(strata.StrataError) as caught:
                moe.dispatch(x2, idx2)  # the step of 16 is in progress
            self.assertIs(caught.exception.status, strata.Status.STRATA_ERR_INVALID)
            self.assertEqual(len(moe.masked()), MAX_TOKENS)  # the routing of the step's own
            run_experts(recv)
            self.expect_step_of(moe, 10, moe.combine, *self.buffers(10))
            out = moe.combine(weights, np.full_like(x, np.nan))
            self.assert_close(out, ref.moe_step(x, idx, weights), 1e-6)
            self.assertEqual(moe.stats().steps, 1)

    def test_refused_dispatch_send_leaves_the_step(self):
        with self.moe() as moe:
            x, idx, weights = self.batch()
            x2, idx2, _ = self.batch(num_tokens=10)
            layout, other = moe.layout(idx), moe.layout(idx2)
            moe.dispatch_send(layout, x)
            with self.assertRaises(strata.StrataError):
                moe.dispatch_send(other, x2)
            other.close()  # not the step's: free to go
            with self.assertRaisesRegex(ValueError, "in use by the step in progress"):
                layout.close()
            run_experts(moe.dispatch_recv())
            self.expect_step_of(moe, 10, moe.combine, *self.buffers(10))
            out = moe.combine(weights, np.full_like(x, np.nan))
            self.assert_close(out, ref.moe_step(x, idx, weights), 1e-6)
            layout.close()

    def test_refused_combine_leaves_the_step_open(self):
        with self.moe() as moe:
            x, idx, weights = self.batch()
            layout = moe.layout(idx)
            moe.dispatch_send(layout, x)
            run_experts(moe.dispatch_recv())
            with self.assertRaises(strata.StrataError) as caught:
                moe.combine_recv(weights, np.empty_like(x))  # before its combine_send
            self.assertIn("combine_recv refused", caught.exception.message)
            self.expect_step_of(moe, 10, moe.combine, *self.buffers(10))
            with self.assertRaisesRegex(ValueError, "in use by the step in progress"):
                layout.close()
            moe.combine_send()
            with self.assertRaises(strata.StrataError):
                moe.combine(weights, np.empty_like(x))  # its combine_send half is refused
            self.expect_step_of(moe, 10, moe.combine_recv, *self.buffers(10))
            out = moe.combine_recv(weights, np.full_like(x, np.nan))
            self.assert_close(out, ref.moe_step(x, idx, weights), 1e-6)
            self.assertEqual(moe.stats().steps, 1)
            layout.close()
            moe.dispatch(x, idx)  # the next step runs
            moe.abort_step()

    def test_refused_dispatch_recv_keeps_expert_y(self):
        # On one node the library reads combine_send's expert_y in combine_recv: a
        # dispatch_recv refused in between must not let it go.
        with self.moe() as moe:
            x, idx, weights = self.batch(num_tokens=5)
            layout = moe.layout(idx)
            moe.dispatch_send(layout, x)
            recv = moe.dispatch_recv()
            moe.combine_send(np.full(recv.expert_y.shape, 2.0, dtype=np.float32))
            with self.assertRaises(strata.StrataError):
                moe.dispatch_recv()
            gc.collect()
            np.full(recv.expert_y.shape, -7.0, dtype=np.float32)  # reuses freed memory
            out = moe.combine_recv(weights, np.empty_like(x))
            routed = np.where(idx >= 0, weights, 0.0)
            expected = 2.0 * np.sum(routed, axis=1, keepdims=True) * np.ones_like(x)
            self.assert_close(out, expected, 1e-6)
            layout.close()


class MaskedSpy:
    """The package's libstrata handle, save that strata_moe_masked writes into a scratch
    buffer of room enough for any plan, filled with -7 first, and then copies into the
    caller's buffer what it holds: each call records (the entries the caller's buffer has,
    the entries the library wrote)."""

    SCRATCH = 4096

    def __init__(self, lib):
        self._lib = lib
        self.calls = []

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def strata_moe_masked(self, moe, layout, per_token, slots_p):
        scratch = (ctypes.c_int32 * self.SCRATCH)(*([-7] * self.SCRATCH))
        status = self._lib.strata_moe_masked(moe, layout, scratch, slots_p)
        written = next(i for i, v in enumerate(scratch) if v == -7)
        room = len(per_token)
        ctypes.memmove(per_token, scratch, 4 * min(room, written))
        self.calls.append((room, written))
        return status


class TestMasked(MoeTest):
    """Moe.masked: a closed layout refused (the library would read the last dispatch's
    routing instead), and room for every entry the library writes."""

    def test_closed_layout_refused(self):
        with self.moe() as moe:
            _, idx, _ = self.batch(num_tokens=5)
            layout = moe.layout(idx)
            self.assertEqual(moe.masked(layout), [0] * 5)
            layout.close()
            with self.assertRaisesRegex(ValueError, "^layout is closed$"):
                moe.masked(layout)

    def test_room_for_the_plan_whatever_the_count(self):
        """The library writes an entry per token of its own plan; however many tokens
        the package counts for the last dispatch (here fewer, as where a dispatch the
        library refused after taking its routing went unrecorded), the buffer holds them,
        and the list has the package's count."""
        owner = [-1 if e in (2, 5) else 0 for e in range(EXPERTS)]
        with self.moe() as moe, moe.recreate(self.comm, owner) as again:
            x, idx, weights = self.batch()
            again.dispatch(x, idx)
            again.abort_step()
            spy = MaskedSpy(again._lib)
            again._lib = spy
            try:
                masked = [int(m) for m in np.isin(idx, (2, 5)).sum(axis=1)]
                self.assertEqual(again.masked(), masked)
                layout = again.layout(idx[:3])
                self.assertEqual(again.masked(layout), masked[:3])
                layout.close()
            finally:
                again._lib = spy._lib
            self.assertEqual(spy.calls[0][1], MAX_TOKENS)
            for room, written in spy.calls:
                self.assertGreaterEqual(room, written)

    def test_routing_of_a_refused_dispatch_that_rebuilt_it(self):
        """A dispatch the library refuses after it rebuilt its routing from the call's
        topk_idx (as one inside a stream capture: STRATA_ERR_UNSUPPORTED, no recv): masked()
        then reads that routing, with its own number of tokens."""
        owner = [-1 if e in (2, 5) else 0 for e in range(EXPERTS)]
        with self.moe() as moe, moe.recreate(self.comm, owner) as again:
            x, idx, weights = self.batch()
            again.dispatch(x, idx)
            again.combine(weights, np.empty_like(x))
            x5, idx5, _ = self.batch(num_tokens=5)
            again._lib = RebuildThenRefuse(again._lib)
            try:
                with self.assertRaises(strata.StrataError) as caught:
                    again.dispatch(x5, idx5)
                self.assertIs(caught.exception.status, strata.Status.STRATA_ERR_UNSUPPORTED)
            finally:
                again._lib = again._lib._lib
            self.assertEqual(again.masked(),
                             [int(m) for m in np.isin(idx5, (2, 5)).sum(axis=1)])
            again.dispatch(x, idx)  # the next step runs, and masked() reads its routing
            again.abort_step()
            self.assertEqual(again.masked(),
                             [int(m) for m in np.isin(idx, (2, 5)).sum(axis=1)])


class RebuildThenRefuse:
    """The package's libstrata handle, save that strata_moe_dispatch has the library read
    the call's routing (a dispatch it then ends at once) and then reports the call refused
    with STRATA_ERR_UNSUPPORTED and no recv, as a dispatch refused after its routing was
    rebuilt does."""

    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def strata_moe_dispatch(self, moe, x, x_scales, topk_idx, num_tokens, recv_p):
        self._lib.strata_moe_dispatch(moe, x, x_scales, topk_idx, num_tokens, recv_p)
        self._lib.strata_moe_abort_step(moe)
        raw = recv_p._obj
        ctypes.memset(ctypes.addressof(raw), 0, ctypes.sizeof(raw))
        return int(strata.Status.STRATA_ERR_UNSUPPORTED)


class TestFailedObject(MoeTest):
    """A step that fails (here its combine times out, or abort_step meets the library's
    refusal after a failure, through a library that fails as a dead peer makes it) fails
    the object: failed holds the error, the step is over for the package (its layout
    closes), later calls raise STRATA_ERR_PEER_FAILED saying the object failed, and
    aborting() leaves it alone. Refusals and the step's own errors do not fail it."""

    def failing(self, moe, fail_at, status):
        lib = failing_lib.FailingLib(moe._lib, fail_at, status)
        moe._lib = lib
        return lib

    def end_real_step(self, moe, lib):
        """The library object under the stand-in is still in its step: end it, so that it
        is destroyed between steps."""
        moe._lib = lib._lib
        self.assertEqual(lib._lib.strata_moe_abort_step(moe.handle), 0)

    def expect_failed(self, moe, first):
        self.assertIs(moe.failed, first)
        x, idx, weights = self.batch()
        with self.assertRaises(strata.StrataError) as caught:
            moe.dispatch(x, idx)
        self.assertIs(caught.exception.status, strata.Status.STRATA_ERR_PEER_FAILED)
        self.assertIn("the object failed in an earlier step", caught.exception.message)
        self.assertIn(first.name, caught.exception.message)
        # the shape of the failed step's buffers is not asked for: the object failed
        for call in (lambda: moe.combine(weights[:3], np.empty_like(x[:3])),
                     lambda: moe.combine_recv(weights, np.empty_like(x)),
                     moe.abort_step, moe.combine_send, moe.dispatch_recv,
                     lambda: moe.expert_wait(0)):
            with self.assertRaisesRegex(strata.StrataError, "can only be closed"):
                call()
        self.assertFalse(moe._in_step())

    def test_combine_that_times_out_fails_the_object(self):
        for fail_at in ("strata_moe_combine", "strata_moe_combine_recv"):
            with self.subTest(call=fail_at), self.moe() as moe:
                x, idx, weights = self.batch()
                layout = moe.layout(idx)
                moe.dispatch_send(layout, x)
                run_experts(moe.dispatch_recv())
                lib = self.failing(moe, fail_at, strata.Status.STRATA_ERR_TIMEOUT)
                with self.assertRaises(strata.StrataError) as caught:
                    if fail_at == "strata_moe_combine":
                        moe.combine(weights, np.empty_like(x))
                    else:
                        moe.combine_send()
                        moe.combine_recv(weights, np.empty_like(x))
                self.assertIs(caught.exception.status, strata.Status.STRATA_ERR_TIMEOUT)
                layout.close()  # no step is in progress any more
                self.expect_failed(moe, caught.exception)
                calls = len(lib.calls)
                with self.assertRaises(RuntimeError), strata.moe.aborting(moe):
                    raise RuntimeError("after the failure")
                self.assertEqual(len(lib.calls), calls, "aborting() called the library")
                self.end_real_step(moe, lib)

    def test_abort_step_refused_after_a_failure_fails_the_object(self):
        with self.moe() as moe:
            x, idx, _ = self.batch()
            moe.dispatch(x, idx)
            lib = self.failing(moe, "strata_moe_abort_step",
                               strata.Status.STRATA_ERR_PEER_FAILED)
            with self.assertRaises(RuntimeError), strata.moe.aborting(moe):
                raise RuntimeError("the step's computation failed")
            self.assertEqual(lib.calls, ["strata_moe_abort_step"])
            self.assertIs(moe.failed.status, strata.Status.STRATA_ERR_PEER_FAILED)
            self.expect_failed(moe, moe.failed)
            self.end_real_step(moe, lib)

    def test_refusals_and_the_steps_errors_do_not_fail_it(self):
        with self.moe() as moe:
            x, idx, weights = self.batch()
            run_experts(moe.dispatch(x, idx))
            for status in (strata.Status.STRATA_ERR_INVALID,
                           strata.Status.STRATA_ERR_UNSUPPORTED):
                lib = self.failing(moe, "strata_moe_combine", status)
                with self.assertRaises(strata.StrataError):
                    moe.combine(weights, np.empty_like(x))
                moe._lib = lib._lib
                self.assertIsNone(moe.failed)
                self.assertTrue(moe._in_step())
            out = moe.combine(weights, np.empty_like(x))  # the step is still there
            self.assert_close(out, ref.moe_step(x, idx, weights), 1e-6)


class TestBufferChecks(MoeTest):
    """Each bad buffer raises ValueError naming it before the library is called; the same
    step then runs with good buffers."""

    def expect(self, pattern, call, *args, **kwargs):
        with self.assertRaisesRegex(ValueError, pattern):
            call(*args, **kwargs)

    def test_dispatch_buffers(self):
        with self.moe() as moe:
            x, idx, weights = self.batch(num_tokens=8)
            self.expect(r"^x has dtype float64, expected float32$",
                        moe.dispatch, x.astype(np.float64), idx)
            self.expect(r"^x has shape \(8, 32\), expected \(num_tokens=8, hidden=64\)$",
                        moe.dispatch, x[:, :32].copy(), idx)
            wide = np.zeros((8, 2 * HIDDEN), dtype=np.float32)
            self.expect(r"^x is not C-contiguous", moe.dispatch, wide[:, ::2], idx)
            self.expect(r"^x is in big-endian byte order, not this machine's",
                        moe.dispatch, x.astype(">f4"), idx)
            unaligned = np.zeros(8 * HIDDEN + 1, dtype=np.float32)[1:].reshape(8, HIDDEN)
            self.expect(r"^x starts at 0x[0-9a-f]+, not on a 16-byte boundary",
                        moe.dispatch, unaligned, idx)
            self.expect(r"^x must be a numpy array, a torch tensor, or an array exposing "
                        r"__cuda_array_interface__ or __dlpack__, not list$",
                        moe.dispatch, x.tolist(), idx)
            self.expect(r"^x_scales is only for dtype fp8_e4m3, not fp32$",
                        moe.dispatch, x, idx, x_scales=np.ones((8, 1), np.float32))
            self.expect(r"^topk_idx has dtype int32, expected int64$",
                        moe.dispatch, x, idx.astype(np.int32))
            self.expect(r"^topk_idx has shape \(8, 2\), expected \(num_tokens=8, topk=3\)$",
                        moe.dispatch, x, idx[:, :2].copy())
            self.expect(r"^topk_idx must be 2-D \(num_tokens, columns\), not shape \(24,\)$",
                        moe.dispatch, x, idx.reshape(-1))
            self.expect(r"^topk_idx must be a numpy array, a torch tensor, or an array "
                        r"exposing __cuda_array_interface__ or __dlpack__, not list$",
                        moe.dispatch, x, idx.tolist())
            big_x, big_idx, _ = self.batch(num_tokens=MAX_TOKENS + 1)
            self.expect(r"^17 tokens, more than max_tokens 16$", moe.dispatch, big_x, big_idx)
            # None of them started a step: this one runs as the first.
            run_experts(moe.dispatch(x, idx))
            self.check_combine_buffers(moe, x, weights)
            self.assertEqual(moe.stats().steps, 1)

    def check_combine_buffers(self, moe, x, weights):
        out = np.empty_like(x)
        self.expect(r"^topk_weights has dtype float64, expected float32$",
                    moe.combine, weights.astype(np.float64), out)
        self.expect(r"^out has shape \(7, 64\), expected \(num_tokens=8, hidden=64\)$",
                    moe.combine, weights, out[:7])
        read_only = out.copy()
        read_only.flags.writeable = False
        self.expect(r"^out is a read-only array", moe.combine, weights, read_only)
        self.expect(r"^expert_y has shape \(1, 2, 3\), expected \(num_local_experts=8, "
                    r"capacity=\d+, hidden=64\)$",
                    moe.combine, weights, out, expert_y=np.zeros((1, 2, 3), np.float32))
        moe.combine(weights, out)

    def test_dtype_names(self):
        with self.assertRaisesRegex(ValueError, r"^dtype 'fp64' is not one of bf16, fp16, "
                                                r"fp32, fp8_e4m3$"):
            self.moe(dtype="fp64")
        with self.assertRaisesRegex(ValueError, "fp8_e4m3 needs a combine_dtype"):
            self.moe(dtype=Dtype.FP8_E4M3)


if __name__ == "__main__":
    unittest.main()
