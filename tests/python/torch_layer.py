"""A layer of tanh(Linear) experts, run two ways for the strata.torch tests: plainly (each
token's top-k expert outputs, weighted, summed in k order) and through a
strata.torch.MoEDispatcher, whose gradients must match the plain layer's."""
import torch


def plain(experts, x, idx, weights):
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for k in range(idx.shape[1]):
            e = int(idx[t, k])
            if e >= 0:
                out[t] = out[t] + weights[t, k] * torch.tanh(experts[e](x[t]))
    return out


def through_strata(dispatcher, experts, x, idx, weights):
    recv_x, counts, handle = dispatcher.dispatch(x, idx, weights)
    rows = []
    for e in range(recv_x.shape[0]):
        n = int(counts[e])
        y = torch.tanh(experts[dispatcher.first_expert + e](recv_x[e, :n]))
        rows.append(torch.cat([y, torch.zeros_like(recv_x[e, n:])]))
    return dispatcher.combine(torch.stack(rows), handle)
