"""examples/elastic_moe.py launched by torchrun on 4 ranks: rank 2 hangs after 3 steps; the
three others shrink, run steps with its experts masked, take a replacement in and run exact
steps on 4 again; rank 2, resumed at the end, finds itself out of the job."""
import os
import unittest

import torchrun

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "elastic_moe.py")


class TestElasticMoeExample(unittest.TestCase):
    def test_shrink_mask_grow(self):
        env = dict(torchrun.LOOPBACK_TCP, STRATA_INTER_PEER_TIMEOUT="2s")
        output = torchrun.run(self, EXAMPLE, 4, env=env)
        for rank in (0, 1, 3):
            self.assertRegex(output, rf"rank {rank}: shrunk to 3 ranks, 3 steps exact with "
                                     r"[1-9]\d* slots masked")
            self.assertIn(f"rank {rank}: grew back to 4 ranks, 3 steps exact", output)
        self.assertIn("replacement: joined as rank 3 of 4, 3 steps exact", output)
        self.assertRegex(output, r"rank 2: resumed, and out of the job \(STRATA_ERR_\w+\)")


if __name__ == "__main__":
    unittest.main()
