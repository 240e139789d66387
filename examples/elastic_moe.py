"""Elastic expert parallelism: 4 ranks serve MoE steps; one of them hangs mid-run (it stops
itself, as a wedged GPU would); the other three shrink the communicator, recreate the MoE
object with the hung rank's experts masked, and keep producing results that match the
reference; then a replacement process joins, the experts go back where they were, and the
four go on, exact again.

Every step is checked against the step computed plainly (numpy): each token's top-k expert
outputs, weighted and summed in k order in float32; while experts are masked, without the
slots that name them (Moe.masked() must name exactly those). The expert used: expert e
scales a row by (e + 1) and adds e, so a row sent to the wrong expert shows.

Launch it with torchrun (strata bootstraps from the variables it sets) or strata-run:

    PYTHONPATH=python STRATA_INTER_PEER_TIMEOUT=2s python3 -m torch.distributed.run \\
        --nproc_per_node 4 --redirects 2 --tee 2 examples/elastic_moe.py

with libstrata on the loader's path or STRATA_LIBRARY_PATH naming it (build/api). The hung
rank is resumed at the end, finds itself out of the job and leaves; exit status 0 when
every check passed. The replacement is started by the survivors' rank 0 (this script with
--join); a real deployment starts it through its scheduler.
"""
import os
import signal
import socket
import struct
import subprocess
import sys

import numpy as np

import strata

HUNG = 2                     # the rank that stops
EXPERTS, TOPK, HIDDEN, TOKENS, STEPS = 8, 2, 64, 32, 3
SHAPE = dict(num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN, max_tokens=TOKENS)


def expert(e, rows):
    return rows * np.float32(e + 1) + np.float32(e)


def step(moe, first_rank, seed, masked_experts=()):
    """One MoE step with routing of this rank's own, checked; its masked slot count."""
    rng = np.random.default_rng(1000 * seed + first_rank)
    x = rng.standard_normal((TOKENS, HIDDEN)).astype(np.float32)
    idx = np.stack([rng.permutation(EXPERTS)[:TOPK] for _ in range(TOKENS)]).astype(np.int64)
    weights = rng.random((TOKENS, TOPK), dtype=np.float32)
    recv = moe.dispatch(x, idx)
    for e in range(recv.num_local_experts):
        n = int(recv.count[e])
        recv.expert_y[e, :n] = expert(moe.expert_id(e), recv.x[e, :n])
    out = moe.combine(weights, np.empty_like(x))
    masked = np.isin(idx, list(masked_experts))
    if moe.masked() != [int(m) for m in masked.sum(axis=1)]:
        raise AssertionError(f"masked slots {moe.masked()}, expected {masked.sum(axis=1)}")
    expected = np.zeros_like(x)
    for t in range(TOKENS):
        for k in range(TOPK):
            if not masked[t, k]:
                expected[t] += weights[t, k] * expert(int(idx[t, k]), x[t])
    if not np.array_equal(out, expected):
        raise AssertionError(f"step {seed}: off by {np.abs(out - expected).max()}")
    return int(masked.sum())


def first_placement(first_of):
    """Each expert on the rank of a communicator that first held it (first_of[r]: rank r's
    first rank): 2 experts per first rank."""
    return [first_of.index(e // (EXPERTS // 4)) for e in range(EXPERTS)]


def pids_to_rank0(comm):
    """Rank 0 learns every rank's process id (to resume the hung one at the end)."""
    if comm.rank != 0:
        comm.send_bytes(0, struct.pack("<q", os.getpid()))
        return None
    return [os.getpid()] + [struct.unpack("<q", comm.recv_bytes(r))[0] for r in range(1, 4)]


def hang(comm):
    """The hung rank: stopped until the end, then out of the job."""
    os.kill(os.getpid(), signal.SIGSTOP)
    try:
        comm.barrier(10000)
        raise AssertionError("a barrier passed after the others shrank")
    except strata.StrataError as error:
        print(f"rank {HUNG}: resumed, and out of the job ({error.name})", flush=True)


def rendezvous(comm):
    """Rank 0 of comm picks where the replacement joins and tells the others."""
    if comm.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            where = ("127.0.0.1", s.getsockname()[1])
        for r in range(1, comm.size):
            comm.send_bytes(r, f"{where[0]} {where[1]}".encode())
        return where
    addr, port = comm.recv_bytes(0).decode().split()
    return addr, int(port)


def joiner(addr, port):
    """The replacement: joins as rank 3 in the hung rank's place and takes its experts."""
    first_of = [0, 1, 3, HUNG]
    with strata.Communicator.join(addr, port, 3, 4) as grown:
        with strata.Moe.join(grown, first_placement(first_of), **SHAPE) as moe:
            for s in range(STEPS):
                step(moe, HUNG, 200 + s)
        print(f"replacement: joined as rank {grown.rank} of {grown.size}, {STEPS} steps exact",
              flush=True)
        grown.barrier(30000)


def main():
    if sys.argv[1:2] == ["--join"]:
        joiner(sys.argv[2], int(sys.argv[3]))
        return
    with strata.Communicator() as comm:
        me = comm.rank
        pids = pids_to_rank0(comm)
        moe = strata.Moe(comm, **SHAPE)
        for s in range(STEPS):
            step(moe, me, s)
        print(f"rank {me}: {STEPS} steps on 4 ranks exact", flush=True)
        if me == HUNG:
            hang(comm)
            return
        try:
            step(moe, me, STEPS)
            raise AssertionError("a step passed with a rank stopped")
        except strata.StrataError as error:
            if error.name != "STRATA_ERR_PEER_FAILED":
                raise
        with comm.shrink() as shrunk:
            again = moe.recreate(shrunk)  # the hung rank's experts 4 and 5 masked
            moe.close()
            lost = sum(step(again, me, 100 + s, masked_experts=(4, 5)) for s in range(STEPS))
            print(f"rank {me}: shrunk to {shrunk.size} ranks, {STEPS} steps exact with "
                  f"{lost} slots masked", flush=True)
            addr, port = rendezvous(shrunk)
            child = None
            if shrunk.rank == 0:
                child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--join",
                                          addr, str(port)])
            with shrunk.expand(1, addr, port) as grown:
                back = again.recreate(grown, first_placement([0, 1, 3, HUNG]))
                again.close()
                for s in range(STEPS):
                    step(back, me, 200 + s)
                print(f"rank {me}: grew back to {grown.size} ranks, {STEPS} steps exact",
                      flush=True)
                grown.barrier(30000)
                back.close()
            if child is not None:
                if child.wait(timeout=120) != 0:
                    raise AssertionError("the replacement failed")
                os.kill(pids[HUNG], signal.SIGCONT)  # it finds itself out, and leaves


if __name__ == "__main__":
    main()
