"""examples/kv_transfer.py launched by torchrun on 2 ranks: the prefill rank writes a
request's KV-cache pages into free pages of the decode rank's cache with one paged write,
and the decode rank prints that they match bit for bit and that no other page changed."""
import os
import unittest

import torchrun

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "kv_transfer.py")


class TestKvTransferExample(unittest.TestCase):
    def test_pages_match(self):
        output = torchrun.run(self, EXAMPLE, 2, env=torchrun.LOOPBACK_TCP)
        self.assertRegex(output, r"rank 0 \(prefill\): wrote the request's 9 pages \(144 KiB\)")
        self.assertRegex(output, r"rank 1 \(decode\): the request's 9 pages match the prefill "
                                 r"rank's bit for bit, in pages \[3, 4, 5, 6, 7, 8, 12, 13, "
                                 r"14\]; the other 55 pages are untouched")


if __name__ == "__main__":
    unittest.main()
