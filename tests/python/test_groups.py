"""Communicators over torch.distributed process groups: torchrun starts 4 ranks, which form
two EP groups of 2 (new_group); each group's strata communicator rendezvouses through the
group's own collectives and runs MoE steps on its own routing, exact against the plain
step (groups_worker.py). Group 0 shares one node, group 1 spans two."""
import unittest

import torchrun


class TestGroups(unittest.TestCase):
    def test_two_ep_groups_of_two(self):
        output = torchrun.run(self, "groups_worker.py", 4, torchrun.LOOPBACK_TCP)
        for rank in range(4):
            self.assertRegex(output, rf"rank {rank} of 4: group {rank // 2} \(rank {rank % 2} "
                                     rf"of 2\): 3 steps exact")


if __name__ == "__main__":
    unittest.main()
