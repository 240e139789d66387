"""strata.ep.Buffer, the DeepEP-shaped facade, on 2 ranks under torchrun (ep_worker.py):
layout, tokens received per rank and per expert, recv_topk_idx and weights, combine's round
trip with weights, a cached dispatch, fp8 pairs, num_worst_tokens (on every rank, and on
one rank alone), the low-latency path's padded layout and combine, a lost handle's step
ended by abort_steps, and DeepEP's static methods as frameworks call them. On one rank:
DeepEP's event semantics (previous_event waited for first, EventOverlap's exit waiting), a
cached dispatch refused while its handle's step is open, abort_steps, and a step that
fails the shape's object (through a library that fails as a dead peer makes it)."""
import unittest

import torch

import strata
import strata.ep

import failing_lib
import one_rank
import torchrun

TOKENS, HIDDEN, EXPERTS, TOPK = 12, 64, 4, 2


class TestEp(unittest.TestCase):
    def test_buffer_on_two_ranks(self):
        output = torchrun.run(self, "ep_worker.py", 2, torchrun.LOOPBACK_TCP)
        for rank in range(2):
            self.assertIn(f"rank {rank} of 2: strata.ep checks passed", output)


class RecordingEvent:
    """An event whose current_stream_wait() records, for each wait, whether a step of
    buffer's objects was open then."""

    def __init__(self, buffer):
        self.buffer = buffer
        self.waits = []

    def current_stream_wait(self):
        self.waits.append(any(obj is not None and obj._in_step()
                              for objects in self.buffer._objects.values()
                              for obj in objects))


class TestOneRank(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        one_rank.communicator().close()  # the environment of a world of one

    def setUp(self):
        self.buffer = strata.ep.Buffer(max_tokens=TOKENS)
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(TOKENS, HIDDEN, generator=g)
        self.idx = torch.stack([torch.randperm(EXPERTS, generator=g)[:TOPK]
                                for _ in range(TOKENS)])
        self.w = torch.rand(TOKENS, TOPK, generator=g)

    def tearDown(self):
        self.buffer.destroy()

    def dispatch(self, x=None, **kwargs):
        layout = self.buffer.get_dispatch_layout(self.idx, EXPERTS)
        return self.buffer.dispatch(self.x if x is None else x, topk_idx=self.idx,
                                    topk_weights=self.w, num_tokens_per_expert=layout[2],
                                    **kwargs)

    def round_trip(self, x=None):
        """A whole step, exact: on one rank every token comes back once."""
        x = self.x if x is None else x
        recv_x, _, recv_w, _, handle, _ = self.dispatch(x)
        combined, combined_w, _ = self.buffer.combine(recv_x, handle, topk_weights=recv_w)
        torch.testing.assert_close(combined, x)
        torch.testing.assert_close(combined_w, self.w)

    def test_event_overlap_exit_waits(self):
        event = RecordingEvent(self.buffer)
        with strata.ep.EventOverlap(event) as overlap:
            self.assertIs(overlap.event, event)
            self.assertEqual(event.waits, [])
        self.assertEqual(len(event.waits), 1, "EventOverlap's exit waits for its event")
        with strata.ep.EventOverlap():
            pass  # no event: nothing to wait for

    def test_previous_event_waited_for_first(self):
        event = RecordingEvent(self.buffer)
        layout = self.buffer.get_dispatch_layout(self.idx, EXPERTS, previous_event=event)
        self.assertEqual(event.waits, [False])
        recv_x, _, recv_w, _, handle, _ = self.buffer.dispatch(
            self.x, topk_idx=self.idx, topk_weights=self.w, num_tokens_per_expert=layout[2],
            previous_event=event)
        self.assertEqual(event.waits, [False, False], "dispatch waits before its step")
        combined, _, _ = self.buffer.combine(recv_x, handle, previous_event=event)
        self.assertEqual(event.waits, [False, False, True], "combine waits before its step")
        torch.testing.assert_close(combined, self.x)

    def test_cached_dispatch_refused_while_its_handle_is_open(self):
        """A handle whose step waits for its combine is refused by a cached dispatch of
        another shape (float16 rows), before anything starts; its step then combines."""
        recv_x, _, recv_w, _, handle, _ = self.dispatch()
        shapes = len(self.buffer._objects)
        with self.assertRaisesRegex(ValueError, "handle whose step waits for its combine"):
            self.buffer.dispatch(self.x.half(), handle=handle)
        self.assertEqual(len(self.buffer._objects), shapes, "a step of another shape began")
        self.assertEqual(handle.objects, next(iter(self.buffer._objects.values())))
        combined, combined_w, _ = self.buffer.combine(recv_x, handle, topk_weights=recv_w)
        torch.testing.assert_close(combined, self.x)
        torch.testing.assert_close(combined_w, self.w)
        recv_half, _, _, _, again, _ = self.buffer.dispatch(self.x.half(), handle=handle)
        self.assertIs(again, handle)
        combined, _, _ = self.buffer.combine(recv_half, handle)
        torch.testing.assert_close(combined, self.x.half())

    def test_abort_steps_ends_a_lost_handles_step(self):
        """A dispatch whose handle is lost leaves its step open: the next dispatch of the
        shape names abort_steps(), which ends it, in normal and low-latency mode; the
        handle is spent, and the next steps are exact."""
        recv_x, _, _, _, lost, _ = self.dispatch()
        with self.assertRaisesRegex(ValueError, r"abort_steps\(\)"):
            self.dispatch()
        self.buffer.low_latency_dispatch(self.x, self.idx, TOKENS, EXPERTS)
        with self.assertRaisesRegex(ValueError, r"abort_steps\(\)"):
            self.buffer.low_latency_dispatch(self.x, self.idx, TOKENS, EXPERTS)
        self.buffer.abort_steps()
        with self.assertRaisesRegex(ValueError, "once per dispatch"):
            self.buffer.combine(recv_x, lost)
        self.round_trip(self.x * 3)
        recv, count, handle, _, _ = self.buffer.low_latency_dispatch(self.x, self.idx, TOKENS,
                                                                     EXPERTS)
        out, _, _ = self.buffer.low_latency_combine(recv, self.idx, self.w, handle)
        torch.testing.assert_close(out, self.x * self.w.sum(1, keepdim=True))
        self.buffer.abort_steps()  # nothing open: nothing to do
        self.round_trip()

    def test_failed_step_fails_the_shape(self):
        """The rows' combine fails as a dead peer makes it fail (STRATA_ERR_PEER_FAILED):
        combine raises it, and a later dispatch of that shape says the shape failed and the
        Buffer must be destroyed, instead of waiting for a combine that cannot come.
        abort_steps() leaves that shape alone; another shape still runs."""
        recv_x, _, recv_w, _, handle, _ = self.dispatch()
        moe, weights = handle.objects
        lib = failing_lib.FailingLib(moe._lib, "strata_moe_combine",
                                     strata.Status.STRATA_ERR_PEER_FAILED)
        moe._lib = lib
        try:
            with self.assertRaises(strata.StrataError) as caught:
                self.buffer.combine(recv_x, handle, topk_weights=recv_w)
            self.assertIs(caught.exception.status, strata.Status.STRATA_ERR_PEER_FAILED)
            self.assertEqual(lib.calls, ["strata_moe_combine"])
            with self.assertRaises(strata.StrataError) as caught:
                self.dispatch()
            self.assertIs(caught.exception.status, strata.Status.STRATA_ERR_PEER_FAILED)
            self.assertIn("can only be destroyed", caught.exception.message)
            self.buffer.abort_steps()
            self.assertEqual(lib.calls, ["strata_moe_combine"])
            self.round_trip(self.x.half())
        finally:
            moe._lib = lib._lib
            # under the stand-in both library objects are still in their steps: end them,
            # so that they are destroyed between steps
            moe._lib.strata_moe_abort_step(moe.handle)
            weights.abort_step()


if __name__ == "__main__":
    unittest.main()
