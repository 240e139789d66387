"""Statuses as exceptions: every status's name and the library's own text, and a refused
call raising StrataError with the status it returned; a step ended by abort_step."""
import unittest

import numpy as np

import strata
from strata import Status, StrataError
from strata._library import check

import one_rank


class TestStatus(unittest.TestCase):
    def test_every_status_has_its_name_and_the_library_text(self):
        for status in Status:
            with self.subTest(status=status.name):
                err = StrataError(status, "strata_call", strata.status_string(status))
                self.assertIs(err.status, status)
                self.assertEqual(err.name, status.name)
                self.assertEqual(str(err), f"strata_call: {status.name}: "
                                           f"{strata.status_string(status)}")

    def test_check_raises_errors_only(self):
        self.assertEqual(check(0, "call"), Status.STRATA_OK)
        self.assertEqual(check(1, "call"), Status.STRATA_INPROGRESS)
        with self.assertRaises(StrataError) as caught:
            check(-60, "strata_moe_dispatch")
        self.assertIs(caught.exception.status, Status.STRATA_ERR_CAPACITY)
        self.assertEqual(str(caught.exception),
                         "strata_moe_dispatch: STRATA_ERR_CAPACITY: capacity exceeded")

    def test_status_unknown_to_the_package(self):
        err = StrataError(-77, "call", strata.status_string(-77))
        self.assertEqual(err.status, -77)
        self.assertEqual(str(err), "call: status -77: unknown status")

    def test_refused_call_raises_its_status(self):
        with one_rank.communicator() as comm:
            with self.assertRaises(StrataError) as caught:
                strata.Moe(comm, num_experts=4, topk=0, hidden=64, max_tokens=8)
            self.assertIs(caught.exception.status, Status.STRATA_ERR_INVALID)
            self.assertEqual(caught.exception.call, "strata_moe_create")
            self.assertIn("invalid argument", str(caught.exception))

    def test_error_carries_the_library_message(self):
        """A refused call's error says why, in the library's words (strata_get_last_error);
        a later refusal carries its own message, never the earlier one's."""
        with one_rank.communicator() as comm:
            with self.assertRaises(StrataError) as caught:
                strata.Moe(comm, num_experts=4, topk=0, hidden=64, max_tokens=8)
            first = caught.exception.message
            self.assertIn("topk", first)
            self.assertIn(first, str(caught.exception))
            with strata.Moe(comm, num_experts=4, topk=2, hidden=64, max_tokens=8) as moe:
                with self.assertRaises(StrataError) as caught:
                    moe.dispatch_recv()  # no dispatch_send before it
                self.assertNotEqual(caught.exception.message, first)
                self.assertIn("dispatch_recv", caught.exception.message)
            # A call that succeeds leaves no message behind.
            comm.barrier()
            self.assertEqual(strata.last_error(), "")

    def test_out_of_order_call_raises(self):
        with one_rank.communicator() as comm, \
                strata.Moe(comm, num_experts=4, topk=2, hidden=64, max_tokens=8) as moe:
            with self.assertRaises(StrataError) as caught:
                moe.dispatch_recv()  # no dispatch_send before it
            self.assertIs(caught.exception.status, Status.STRATA_ERR_INVALID)

    def test_mid_step_refusal_names_the_calls_that_finish_it(self):
        """A new step while one is in progress is refused with the calls that finish it,
        for each place the step can be; once finished, the next step runs."""
        with one_rank.communicator() as comm, \
                strata.Moe(comm, num_experts=4, topk=2, hidden=64, max_tokens=8) as moe:
            x = np.ones((8, 64), np.float32)
            idx = np.tile(np.array([[0, 1]], np.int64), (8, 1))
            layout = moe.layout(idx)
            moe.dispatch_send(layout, x)
            with self.assertRaises(StrataError) as caught:
                moe.dispatch_send(layout, x)
            self.assertIn("step 1 is in progress after its dispatch_send: finish it with "
                          "dispatch_recv, then combine", caught.exception.message)
            recv = moe.dispatch_recv()
            with self.assertRaises(StrataError) as caught:
                moe.dispatch(x, idx)
            self.assertIn("after its dispatch_recv: finish it with combine",
                          caught.exception.message)
            moe.combine_send(recv.expert_y)
            with self.assertRaises(StrataError) as caught:
                moe.dispatch_recv()
            self.assertIn("after its combine_send: finish it with combine_recv",
                          caught.exception.message)
            moe.combine_recv(np.ones((8, 2), np.float32), np.empty_like(x))
            moe.dispatch(x, idx)  # the next step runs
            moe.combine(np.ones((8, 2), np.float32), np.empty_like(x))

    def test_capacity_error_keeps_the_step(self):
        """Rows past an expert's capacity: dispatch raises STRATA_ERR_CAPACITY with what did
        arrive; combine still completes the step (raising it again for the dropped terms),
        and the next step runs."""
        with one_rank.communicator() as comm, \
                strata.Moe(comm, num_experts=4, topk=1, hidden=64, max_tokens=8,
                           capacity=2) as moe:
            x = np.ones((8, 64), np.float32)
            weights = np.ones((8, 1), np.float32)
            with self.assertRaises(StrataError) as caught:
                moe.dispatch(x, np.zeros((8, 1), np.int64))  # 8 rows for expert 0
            self.assertIs(caught.exception.status, Status.STRATA_ERR_CAPACITY)
            self.assertEqual([int(c) for c in caught.exception.recv.count], [2, 0, 0, 0])
            with self.assertRaises(StrataError) as caught:
                moe.combine(weights, np.empty_like(x))
            self.assertIs(caught.exception.status, Status.STRATA_ERR_CAPACITY)
            recv = moe.dispatch(x, np.arange(8, dtype=np.int64).reshape(8, 1) % 4)
            self.assertEqual([int(c) for c in recv.count], [2, 2, 2, 2])
            moe.combine(weights, np.empty_like(x))
            self.assertEqual(moe.stats().steps, 2)

    def test_combine_that_raises_for_the_step_ends_it(self):
        """A combine_recv that ends the step with an error the step found (the rows dropped
        for capacity) ends it for the package too: the step's layout may then be closed,
        and the next step runs."""
        with one_rank.communicator() as comm, \
                strata.Moe(comm, num_experts=4, topk=1, hidden=64, max_tokens=8,
                           capacity=2) as moe:
            x = np.ones((8, 64), np.float32)
            layout = moe.layout(np.zeros((8, 1), np.int64))  # 8 rows for expert 0
            moe.dispatch_send(layout, x)
            with self.assertRaises(StrataError) as caught:
                moe.dispatch_recv()
            self.assertIs(caught.exception.status, Status.STRATA_ERR_CAPACITY)
            moe.combine_send()
            with self.assertRaises(StrataError) as caught:
                moe.combine_recv(np.ones((8, 1), np.float32), np.empty_like(x))
            self.assertIs(caught.exception.status, Status.STRATA_ERR_CAPACITY)
            # the library's own message, read before the package asks anything more
            self.assertIn("was dropped for capacity", caught.exception.message)
            layout.close()  # the step is over
            moe.dispatch(x, np.arange(8, dtype=np.int64).reshape(8, 1) % 4)
            moe.combine(np.ones((8, 1), np.float32), np.empty_like(x))
            self.assertEqual(moe.stats().steps, 2)

    def test_abort_step_ends_the_step_where_it_is(self):
        """abort_step ends a step after each of its halves (and does nothing between
        steps); the step after it is exact, and the refusal before it names abort_step."""
        with one_rank.communicator() as comm, \
                strata.Moe(comm, num_experts=4, topk=2, hidden=64, max_tokens=8) as moe:
            x = np.arange(8 * 64, dtype=np.float32).reshape(8, 64)
            idx = np.tile(np.array([[0, 3]], np.int64), (8, 1))
            weights = np.full((8, 2), 0.5, np.float32)
            layout = moe.layout(idx)
            moe.abort_step()  # nothing in progress
            for where in ("dispatch_send", "dispatch", "combine_send"):
                with self.subTest(after=where):
                    if where == "dispatch_send":
                        moe.dispatch_send(layout, x)
                    else:
                        recv = moe.dispatch(x, idx)
                        recv.expert_y[...] = recv.x
                    if where == "combine_send":
                        moe.combine_send()
                    with self.assertRaises(StrataError) as caught:
                        moe.dispatch(x, idx)
                    self.assertIn("or end it without results with abort_step",
                                  caught.exception.message)
                    moe.abort_step()
                    recv = moe.dispatch(x, idx)
                    recv.expert_y[...] = recv.x
                    out = moe.combine(weights, np.zeros_like(x))
                    np.testing.assert_array_equal(out, x)
            self.assertEqual(moe.stats().steps, 6)

    def test_bad_expert_id_then_abort_step(self):
        """A bad expert id: dispatch raises STRATA_ERR_INVALID, with one line naming the
        entries, and the step stays open until abort_step ends it; the next step runs."""
        with one_rank.communicator() as comm, \
                strata.Moe(comm, num_experts=4, topk=2, hidden=64, max_tokens=8) as moe:
            x = np.ones((8, 64), np.float32)
            idx = np.tile(np.array([[0, 1]], np.int64), (8, 1))
            idx[2, 1] = 9
            with self.assertRaises(StrataError) as caught:
                moe.dispatch(x, idx)
            self.assertIs(caught.exception.status, Status.STRATA_ERR_INVALID)
            self.assertIn("9", caught.exception.message)
            with self.assertRaises(StrataError):
                moe.dispatch(x, idx)
            moe.abort_step()
            idx[2, 1] = 1
            recv = moe.dispatch(x, idx)
            self.assertEqual([int(c) for c in recv.count], [8, 8, 0, 0])
            moe.combine(np.ones((8, 2), np.float32), np.empty_like(x))
            with self.assertRaises(ValueError) as caught:
                strata.moe.check_routing(np.array([[0, 0], [1, 7]]), 4)
            self.assertIn("topk_idx[1][1] = 7 is not an expert (-1 or 0..3)",
                          str(caught.exception))
            with self.assertRaises(ValueError) as caught:
                strata.moe.check_routing(np.array([[2, 2], [-1, -1]]), 4)
            self.assertIn("token 0 names expert 2 twice", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
