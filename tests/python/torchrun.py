"""Running a script under torchrun for a test: a free pair of ports, the environment, a
bound on time, and the whole process group killed if it overruns."""
import os
import signal
import socket
import subprocess
import sys

TIMEOUT_S = 300
HERE = os.path.dirname(os.path.abspath(__file__))
# strata's engine over tcp on loopback, for workers whose ranks pretend to be nodes.
LOOPBACK_TCP = {"STRATA_INTER_PROVIDER": "tcp", "STRATA_INTER_IFACE": "lo"}


def free_port_pair():
    """A port P such that P and P + 1 were both free a moment ago (torchrun's store takes P,
    strata's rendezvous P + 1)."""
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


def run(case, script, nproc, env=None):
    """Run script (a path, or a name in tests/python) on nproc ranks, with env's variables
    added, and tests/python on PYTHONPATH; fail case unless every rank exits 0. Returns the
    output."""
    # --redirects 2 --tee 2: Debian's torch 1.13 on Python 3.11 cannot parse its own default
    # (--redirects 0); this shows stderr as the default would.
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--master_addr", "127.0.0.1", "--master_port", str(free_port_pair()),
               "--redirects", "2", "--tee", "2", "--monitor_interval", "0.1",
               os.path.join(HERE, script)]
    environ = dict(os.environ, **(env or {}))
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, env=environ)
    try:
        output, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its workers, by our child's id
        output, _ = proc.communicate()
        case.fail(f"torchrun did not finish within {TIMEOUT_S} s:\n{output}")
    print(output)
    case.assertEqual(proc.returncode, 0, output)
    return output
