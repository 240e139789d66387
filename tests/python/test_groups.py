"""Communicators over torch.distributed process groups: torchrun starts 4 ranks, which form
two EP groups of 2 (new_group); each group's strata communicator rendezvouses through the
group's own collectives and runs MoE steps on its own routing, exact against the plain
step (groups_worker.py). Group 0 shares one node, group 1 spans two."""
import os
import signal
import subprocess
import sys
import unittest

from test_torch_moe import free_port_pair

WORKER = os.path.join(os.path.dirname(__file__), "groups_worker.py")
TIMEOUT_S = 300


class TestGroups(unittest.TestCase):
    def test_two_ep_groups_of_two(self):
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4",
                   "--master_addr", "127.0.0.1", "--master_port", str(free_port_pair()),
                   "--redirects", "2", "--tee", "2", WORKER]
        env = dict(os.environ, STRATA_INTER_PROVIDER="tcp", STRATA_INTER_IFACE="lo",
                   PYTHONPATH=os.pathsep.join(filter(None, [os.path.dirname(__file__),
                                                            os.environ.get("PYTHONPATH")])))
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True, env=env)
        try:
            output, _ = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            self.fail(f"torchrun did not finish within {TIMEOUT_S} s:\n{output}")
        print(output)
        self.assertEqual(proc.returncode, 0, output)
        for rank in range(4):
            self.assertRegex(output, rf"rank {rank} of 4: group {rank // 2} \(rank {rank % 2} "
                                     rf"of 2\): 3 steps exact")


if __name__ == "__main__":
    unittest.main()
