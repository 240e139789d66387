"""One rank of a torchrun job of 4: two EP groups of 2 ranks (torch.distributed.new_group),
a strata communicator over each (Communicator(group=...)), and a MoE step in each group on
routing of its own, checked exactly against the step computed plainly. Prints one line per
rank: "rank R of 4: group G (rank g of 2): N steps exact"."""
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import strata

import moe_reference as ref

EXPERTS, TOPK, HIDDEN, TOKENS, STEPS = 4, 2, 64, 16, 3


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]  # every rank makes both
    mine = rank // 2
    # Group 0 on one node (the heap between its ranks), group 1 across two (the network).
    node = "node-a" if mine == 0 else f"node-b{rank}"
    with strata.Communicator(group=groups[mine], node_name=node) as comm:
        assert comm.size == 2 and comm.rank == rank % 2, (comm.size, comm.rank)
        with strata.Moe(comm, num_experts=EXPERTS, topk=TOPK, hidden=HIDDEN,
                        max_tokens=TOKENS) as moe:
            for step in range(STEPS):
                # Each group its own routing: a seed of the group's, the step's and the rank's.
                rng = np.random.default_rng(1000 * mine + 10 * step + comm.rank)
                x = rng.standard_normal((TOKENS, HIDDEN)).astype(np.float32)
                idx, weights = ref.routing(rng, TOKENS, EXPERTS, TOPK)
                recv = moe.dispatch(x, idx)
                for e in range(recv.num_local_experts):
                    n = int(recv.count[e])
                    recv.expert_y[e, :n] = ref.expert(recv.first_expert + e, recv.x[e, :n])
                out = moe.combine(weights, np.empty_like(x))
                expected = ref.moe_step(x, idx, weights)
                if not np.array_equal(out, expected):
                    print(f"rank {rank}: group {mine} step {step} differs by "
                          f"{np.max(np.abs(out - expected))}", flush=True)
                    return 1
        print(f"rank {rank} of {world}: group {mine} (rank {comm.rank} of {comm.size}): "
              f"{STEPS} steps exact", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
