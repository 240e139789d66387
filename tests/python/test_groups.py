"""Communicators over torch.distributed process groups: torchrun starts 4 ranks, which form
two EP groups of 2 (new_group); each group's strata communicator rendezvouses through the
group's own collectives and runs MoE steps on its own routing, exact against the plain
step (groups_worker.py). Group 0 shares one node, group 1 spans two. And a Ctrl-C inside
one of the group's collectives, which the library calls back, is kept and raised again
once the library call returns, not lost in the callback."""
import ctypes
import unittest

from strata import _group
from strata import _types as t

import torchrun


class _InterruptedDist:
    """torch.distributed whose collectives are interrupted (Ctrl-C while they wait)."""

    @staticmethod
    def all_gather(every, mine, group=None):
        raise KeyboardInterrupt

    @staticmethod
    def barrier(group=None):
        raise KeyboardInterrupt


class TestInterrupt(unittest.TestCase):
    def test_ctrl_c_in_a_collective(self):
        import torch

        bootstrap = object.__new__(_group.GroupBootstrap)  # no process group needed
        bootstrap._torch, bootstrap._dist, bootstrap._group = torch, _InterruptedDist, None
        bootstrap.size, bootstrap.error = 2, None
        bootstrap._device = torch.device("cpu")
        send, recv = ctypes.create_string_buffer(8), ctypes.create_string_buffer(16)
        status = bootstrap._allgather(None, ctypes.addressof(send), ctypes.addressof(recv), 8)
        self.assertEqual(status, int(t.Status.STRATA_ERR_BOOTSTRAP))
        with self.assertRaises(KeyboardInterrupt):
            bootstrap.raise_interrupt()
        bootstrap.raise_interrupt()  # once
        self.assertEqual(bootstrap._barrier(None), int(t.Status.STRATA_ERR_BOOTSTRAP))
        self.assertIsInstance(bootstrap.error, KeyboardInterrupt)


class TestGroups(unittest.TestCase):
    def test_two_ep_groups_of_two(self):
        output = torchrun.run(self, "groups_worker.py", 4, torchrun.LOOPBACK_TCP)
        for rank in range(4):
            self.assertRegex(output, rf"rank {rank} of 4: group {rank // 2} \(rank {rank % 2} "
                                     rf"of 2\): 3 steps exact")


if __name__ == "__main__":
    unittest.main()
