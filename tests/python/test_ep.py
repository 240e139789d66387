"""strata.ep.Buffer, the DeepEP-shaped facade, on 2 ranks under torchrun (ep_worker.py):
layout, tokens received per rank and per expert, recv_topk_idx and weights, combine's round
trip with weights, a cached dispatch, fp8 pairs, num_worst_tokens, the low-latency path's
padded layout and combine, and DeepEP's static methods as frameworks call them."""
import unittest

import torchrun


class TestEp(unittest.TestCase):
    def test_buffer_on_two_ranks(self):
        output = torchrun.run(self, "ep_worker.py", 2, torchrun.LOOPBACK_TCP)
        for rank in range(2):
            self.assertIn(f"rank {rank} of 2: strata.ep checks passed", output)


if __name__ == "__main__":
    unittest.main()
