"""One rank of a strata-run job of 4 (Communicator() from the environment): after a first
barrier, rank 2 kills itself; every other rank must see its next barrier fail with
STRATA_ERR_PEER_FAILED, shrink, and find itself in a communicator of 3 whose parent ranks
are 0, 1 and 3, where a barrier passes. Prints "rank R: shrunk to 3 as rank r (parents
[0, 1, 3])"."""
import os
import signal

import strata

VICTIM = 2


def main():
    with strata.Communicator() as comm:
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
            shrunk.barrier(30000)
            print(f"rank {comm.rank}: shrunk to {shrunk.size} as rank {shrunk.rank} "
                  f"(parents {parents})", flush=True)
            shrunk.barrier(30000)


if __name__ == "__main__":
    main()
