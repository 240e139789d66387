"""Two trainer ranks send a model's weights to two inference ranks, step after step, through
one weight transfer plan (strata_transfer_plan_*, Communicator.transfer_plan).

Ranks 0 and 1 train (here: the same seeded model, and an update rule standing in for an
optimizer step); each sends its shard of the state_dict, the tensors with an even or an odd
index. Ranks 2 and 3 serve: each receives every tensor into a flat buffer laid out as the
state_dict, waits for the tensors one at a time, and checks every one of them bit for bit
against the trainers' weights of that step (which it can recompute: the same seed, the same
rule), then loads them into its own model. The plan is made once; each step re-executes it
with the new weights, through the same registered buffers. Launch it on 4 ranks with
torchrun (strata bootstraps from the variables it sets) or strata-run:

    PYTHONPATH=python python3 -m torch.distributed.run --nproc_per_node 4 \\
        --redirects 2 --tee 2 examples/weight_sync.py

with libstrata on the loader's path or STRATA_LIBRARY_PATH naming it (build/api). Exit
status 0 when every inference rank's weights match at every step.
"""
import sys

import torch
from torch import nn

import strata

STEPS = 3
TRAINERS = (0, 1)
SERVERS = (2, 3)


def make_model():
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(256, 512), nn.LayerNorm(512), nn.ReLU(),
                         nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 128))


def train_step(model, step):
    """What the trainers' optimizer would do, deterministically."""
    gen = torch.Generator().manual_seed(100 + step)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=gen))


def layout(state):
    """Each tensor's byte offset in the flat buffer, and the buffer's size."""
    offsets, at = [], 0
    for tensor in state.values():
        offsets.append(at)
        at += tensor.numel() * tensor.element_size()
    return offsets, at


def flatten(state, flat):
    for tensor, (start, length) in zip(state.values(), spans(state)):
        flat[start:start + length] = tensor.contiguous().view(torch.uint8).flatten()


def spans(state):
    offsets, _ = layout(state)
    return [(o, t.numel() * t.element_size()) for o, t in zip(offsets, state.values())]


def pieces_of(state):
    """Tensor i from trainer i % 2 to every server, at the same offset both sides."""
    return [(i, TRAINERS[i % 2], start, server, start, length)
            for i, (start, length) in enumerate(spans(state)) for server in SERVERS]


def serve_step(comm, plan, flat, state, model, step):
    """Wait for each tensor, check it against the trainers' weights of this step."""
    expected = make_model()
    for s in range(step + 1):
        train_step(expected, s)
    want = expected.state_dict()
    received = {}
    for i, ((name, tensor), (start, length)) in enumerate(zip(state.items(), spans(state))):
        plan.wait_tensor(i)
        got = flat[start:start + length].view(tensor.dtype).view(tensor.shape).clone()
        if not torch.equal(got, want[name]):
            print(f"rank {comm.rank} (inference): step {step}: {name} differs")
            return False
        received[name] = got
    model.load_state_dict(received)
    print(f"rank {comm.rank} (inference): step {step}: every one of the {len(state)} tensors "
          f"matches the trainers' bit for bit ({flat.numel()} bytes)")
    return True


def main():
    with strata.Communicator() as comm:
        if comm.size != 4:
            print("run on 4 ranks: 2 trainers, 2 inference ranks", file=sys.stderr)
            return 2
        model = make_model()
        state = model.state_dict()
        _, size = layout(state)
        flat = torch.zeros(size, dtype=torch.uint8)
        ok = True
        with comm.register(flat) as region, \
                comm.transfer_plan(region, pieces_of(state), len(state)) as plan:
            for step in range(STEPS):
                if comm.rank in TRAINERS:
                    train_step(model, step)
                    flatten(model.state_dict(), flat)
                comm.barrier()
                plan.execute()
                if comm.rank in SERVERS:
                    ok = serve_step(comm, plan, flat, state, model, step) and ok
                comm.barrier()  # the servers read this step's weights before the next
        if comm.rank in TRAINERS:
            print(f"rank {comm.rank} (trainer): sent its shard of {len(state) // 2} tensors "
                  f"for {STEPS} steps through one plan")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
