"""Communicator.shrink and Moe.recreate under strata-run (shrink_worker.py): one of 4 ranks
killed, the three others shrink to a communicator of 3 and run a MoE step on it, the dead
rank's experts masked, exact against the plain step."""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


class TestShrink(unittest.TestCase):
    def test_one_of_four_killed(self):
        run = os.environ.get("STRATA_TEST_RUN")
        if not run:
            self.skipTest("STRATA_TEST_RUN (the strata-run program) is not set")
        env = dict(os.environ, STRATA_INTER_PEER_TIMEOUT="2s", STRATA_INTER_PROVIDER="tcp",
                   STRATA_INTER_IFACE="lo")
        command = [run, "--timeout", "120", "-n", "4", "--allow-fail", "2", "--",
                   sys.executable, os.path.join(HERE, "shrink_worker.py")]
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=env, timeout=180)
        print(proc.stdout)
        self.assertEqual(proc.returncode, 0, proc.stdout)
        for rank, new in ((0, 0), (1, 1), (3, 2)):
            self.assertIn(f"rank {rank}: shrunk to 3 as rank {new} (parents [0, 1, 3]), "
                          "masked step exact", proc.stdout)


if __name__ == "__main__":
    unittest.main()
