"""One rank of a strata-run job of 4 (Communicator() from the environment): a MoE step
(2 experts per rank), a barrier, then rank 2 kills itself; every other rank must see its
next barrier fail with STRATA_ERR_PEER_FAILED, shrink, and find itself in a communicator
of 3 whose parent ranks are 0, 1 and 3. There it recreates the MoE object (rank 2's
experts 4 and 5 masked) and runs a step exact against the plain one with the masked slots
left out, Moe.masked() naming them per token. Prints "rank R: shrunk to 3 as rank r
(parents [0, 1, 3]), masked step exact"."""
import os
import signal

import numpy as np

import strata

import moe_reference as ref

VICTIM, EXPERTS, TOPK, HIDDEN, TOKENS = 2, 8, 2, 32, 16


def step(moe, rank, seed, masked_experts):
    """One step, checked; the routing's masked slots as the plain step sees them."""
    rng = np.random.default_rng(seed * 10 + rank)
    x = rng.standard_normal((TOKENS, HIDDEN)).astype(np.float32)
    idx, weights = ref.routing(rng, TOKENS, EXPERTS, TOPK)
    recv = moe.dispatch(x, idx)
    for e in range(recv.num_local_experts):
        n = int(recv.count[e])
        recv.expert_y[e, :n] = ref.expert(moe.expert_id(e), recv.x[e, :n])
    out = moe.combine(weights, np.empty_like(x))
    masked = np.isin(idx, list(masked_experts))
    assert moe.masked() == [int(m) for m in masked.sum(axis=1)], moe.masked()
    expected = ref.moe_step(x, np.where(masked, -1, idx), weights)
    assert np.array_equal(out, expected), np.abs(out - expected).max()


def main():
    with strata.Communicator() as comm:
        moe = strata.Moe(comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN, max_tokens=TOKENS)
        step(moe, comm.rank, 0, ())
        comm.barrier(30000)
        if comm.rank == VICTIM:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            comm.barrier(30000)
        except strata.StrataError as error:
            assert error.name == "STRATA_ERR_PEER_FAILED", error
        else:
            raise AssertionError("the barrier after the failure passed")
        with comm.shrink() as shrunk:
            parents = [shrunk.parent_rank(r) for r in range(shrunk.size)]
            assert shrunk.size == 3 and parents == [0, 1, 3], (shrunk.size, parents)
            assert parents[shrunk.rank] == comm.rank, (shrunk.rank, comm.rank)
            assert comm.parent_rank(0) == -1
            with moe.recreate(shrunk) as again:
                moe.close()
                assert [again.expert_id(j) for j in range(2)] == [2 * comm.rank,
                                                                   2 * comm.rank + 1]
                step(again, comm.rank, 1, (2 * VICTIM, 2 * VICTIM + 1))
            print(f"rank {comm.rank}: shrunk to {shrunk.size} as rank {shrunk.rank} "
                  f"(parents {parents}), masked step exact", flush=True)
            shrunk.barrier(30000)


if __name__ == "__main__":
    main()
