"""The MoE step computed plainly, to check strata's against: each token's k expert outputs,
weighted, summed in k order in float32. The expert used in the tests: expert e scales a
row by (e + 1) and adds e, so a row sent to the wrong expert shows."""
import numpy as np


def expert(e, rows):
    return rows * np.float32(e + 1) + np.float32(e)


def moe_step(x, topk_idx, topk_weights):
    out = np.zeros(x.shape, dtype=np.float32)
    for t in range(x.shape[0]):
        for k in range(topk_idx.shape[1]):
            e = int(topk_idx[t, k])
            if e >= 0:
                out[t] += topk_weights[t, k] * expert(e, x[t].astype(np.float32))
    return out


def routing(rng, num_tokens, num_experts, topk, drop=0.1):
    """Distinct experts per token, some slots -1 (no expert)."""
    idx = np.stack([rng.permutation(num_experts)[:topk] for _ in range(num_tokens)])
    idx[rng.random(idx.shape) < drop] = -1
    weights = rng.random((num_tokens, topk), dtype=np.float32)
    return idx.astype(np.int64), weights
