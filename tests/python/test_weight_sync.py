"""examples/weight_sync.py launched by torchrun on 4 ranks: 2 trainer ranks send their shards
of a model's state_dict to 2 inference ranks through one transfer plan, three steps, and
each inference rank prints that every tensor matched bit for bit at every step."""
import os
import unittest

import torchrun

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "weight_sync.py")


class TestWeightSyncExample(unittest.TestCase):
    def test_weights_match(self):
        output = torchrun.run(self, EXAMPLE, 4, env=torchrun.LOOPBACK_TCP)
        for rank in (2, 3):
            for step in range(3):
                self.assertRegex(output, rf"rank {rank} \(inference\): step {step}: every one "
                                         rf"of the 8 tensors matches the trainers' bit for bit")
        for rank in (0, 1):
            self.assertRegex(output, rf"rank {rank} \(trainer\): sent its shard of 4 tensors "
                                     rf"for 3 steps through one plan")


if __name__ == "__main__":
    unittest.main()
