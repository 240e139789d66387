"""examples/torch_moe.py launched by torchrun on 2 ranks: each rank prints that its output
and its gradients (router, experts; strata.torch.MoEDispatcher) match the layer computed
on one rank, and that a few SGD steps lowered its loss. torchrun's store takes a free port P, strata's
rendezvous P + 1 (MASTER_PORT + 1)."""
import os
import signal
import socket
import subprocess
import sys
import unittest

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "torch_moe.py")
TIMEOUT_S = 240


def free_port_pair():
    """A port P such that P and P + 1 were both free a moment ago."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            try:
                with socket.socket() as second:
                    second.bind(("127.0.0.1", port + 1))
                    return port
            except OSError:
                continue
    raise RuntimeError("no two consecutive free ports")


class TestTorchMoeExample(unittest.TestCase):
    def test_two_ranks_match(self):
        # --redirects 2 --tee 2: Debian's torch 1.13 on Python 3.11 cannot parse its own
        # default (--redirects 0); this shows stderr as the default would.
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                   "--master_addr", "127.0.0.1", "--master_port", str(free_port_pair()),
                   "--redirects", "2", "--tee", "2", EXAMPLE]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            output, _ = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its workers, by our child's id
            output, _ = proc.communicate()
            self.fail(f"torchrun did not finish within {TIMEOUT_S} s:\n{output}")
        print(output)
        self.assertEqual(proc.returncode, 0, output)
        for rank in (0, 1):
            self.assertRegex(output, rf"rank {rank} of 2 \(node 0\): .* matches the one-rank "
                                     rf"layer \(max abs error [0-9.e+-]+\); its gradients too "
                                     rf"\(max relative error [0-9.e+-]+\); 8 SGD steps took "
                                     rf"the loss from [0-9.]+ to [0-9.]+")


if __name__ == "__main__":
    unittest.main()
