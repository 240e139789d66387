"""Running a worker script under torchrun for a test: ports, environment, a bound on time,
and the whole process group killed if it overruns."""
import os
import signal
import subprocess
import sys

from test_torch_moe import free_port_pair

TIMEOUT_S = 300


def run(case, worker, nproc):
    """Run worker on nproc ranks over tcp on loopback; fail case unless all exit 0. Returns
    the output."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--master_addr", "127.0.0.1", "--master_port", str(free_port_pair()),
               "--redirects", "2", "--tee", "2",
               os.path.join(os.path.dirname(os.path.abspath(__file__)), worker)]
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, STRATA_INTER_PROVIDER="tcp", STRATA_INTER_IFACE="lo",
               PYTHONPATH=os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, env=env)
    try:
        output, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its workers, by our child's id
        output, _ = proc.communicate()
        case.fail(f"torchrun did not finish within {TIMEOUT_S} s:\n{output}")
    print(output)
    case.assertEqual(proc.returncode, 0, output)
    return output
