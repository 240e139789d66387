"""examples/torch_moe.py launched by torchrun on 2 ranks: each rank prints that its output
and its gradients (router, experts; strata.torch.MoEDispatcher) match the layer computed
on one rank, and that a few SGD steps lowered its loss. torchrun's store takes a free port
P, strata's rendezvous P + 1 (MASTER_PORT + 1)."""
import os
import unittest

import torchrun

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "torch_moe.py")


class TestTorchMoeExample(unittest.TestCase):
    def test_two_ranks_match(self):
        output = torchrun.run(self, EXAMPLE, 2)
        for rank in (0, 1):
            self.assertRegex(output, rf"rank {rank} of 2 \(node 0\): .* matches the one-rank "
                                     rf"layer \(max abs error [0-9.e+-]+\); its gradients too "
                                     rf"\(max relative error [0-9.e+-]+\); 8 SGD steps took "
                                     rf"the loss from [0-9.]+ to [0-9.]+")


if __name__ == "__main__":
    unittest.main()
