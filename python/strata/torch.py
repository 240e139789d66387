"""strata's dispatch and combine as torch autograd functions: strata.torch.MoEDispatcher.

    dispatcher = strata.torch.MoEDispatcher(moe)       # collective, like the Moe
    recv_x, counts, handle = dispatcher.dispatch(x, topk_idx, topk_weights)
    expert_y = ...                                     # recv_x[e, :counts[e]] -> outputs
    out = dispatcher.combine(expert_y, handle)         # sum over k of w[t, k] * y(t, k)
    out.backward(grad)                                 # gradients of x, topk_weights, experts

The backward passes are steps of strata too, on every rank in the same order:
- combine's backward dispatches the output's gradient to the experts' ranks (as the
  forward dispatched x), where each row's gradient is its token's weight times it;
- the routing weights' gradient, <grad_out[t], y(t, k)>, is computed where y is and comes
  back through a small second Moe of the dispatcher's (each row's weights travel there in
  the forward too);
- dispatch's backward, where x needs a gradient, lays the rows out again (a dispatch of
  zeros) and combines their gradients back to their tokens with weight 1.

Tensors are on the communicator's memory: CPU tensors on the host backend, the GPU's on
CUDA or HIP (recv_x and the gradients on x's device; counts on the host, where strata keeps
them). Rows come back from strata in no particular order; every row is matched to its forward
row by its source (rank, token, slot). So the dispatch must drop nothing: give the Moe a
capacity that holds every row (the default does). Every backward step ends where it
starts, so a gradient that skips dispatch's backward leaves no step open.
"""
import torch

from . import _types as t
from ._buffers import DTYPE_NAMES
from .errors import StrataError
from .moe import Moe, aborting, check_routing

_PAD = torch.iinfo(torch.int64).max  # the key of a row past an expert's count


def _row_keys(recv, topk, max_tokens):
    """Each received row's source as one number, (rank * max_tokens + token) * topk + slot;
    _PAD past each expert's count. [experts, capacity] int64, on the rows' device (worked
    out on the host, where strata keeps the sources and counts)."""
    src = recv.src.to(torch.int64)
    keys = (src[..., 0] * max_tokens + src[..., 1]) * topk + src[..., 2]
    counts = recv.count.to(torch.int64)
    past = torch.arange(keys.shape[1])[None, :] >= counts[:, None]
    return keys.masked_fill(past, _PAD).to(recv.x.device)


def _reorder(rows, keys_from, keys_to):
    """rows, laid out as keys_from lays out the rows, laid out as keys_to does: both hold
    the same keys per expert, then _PAD, possibly to another capacity (two Moe objects).
    rows: [experts, capacity of keys_from, ...]; the result has keys_to's capacity, zeros
    where it holds _PAD."""
    shape = rows.shape[2:]

    def take(values, index):
        return torch.gather(values, 1, index.view(*index.shape, *([1] * len(shape)))
                            .expand(*index.shape, *shape))
    ordered = take(rows, torch.argsort(keys_from, dim=1))  # by key: the real rows first
    width = keys_to.shape[1]
    if ordered.shape[1] >= width:
        ordered = ordered[:, :width]
    else:
        pad = torch.zeros(ordered.shape[0], width - ordered.shape[1], *shape,
                          dtype=ordered.dtype, device=ordered.device)
        ordered = torch.cat([ordered, pad], dim=1)
    back = torch.argsort(torch.argsort(keys_to, dim=1), dim=1)
    return take(ordered, back)


def _torch_dtype(dtype):
    """The torch element type of a strata Dtype (bf16, fp16, fp32), by the name both share."""
    return getattr(torch, DTYPE_NAMES[dtype])


class DispatchHandle:
    """What a dispatch leaves for its combine and for both backward passes."""

    def __init__(self, dispatcher, topk_idx, num_tokens):
        self.dispatcher = dispatcher
        self.topk_idx = topk_idx
        self.num_tokens = num_tokens
        self.keys = None          # the forward rows' sources
        self.row_weights = None   # each forward row's routing weight [experts, capacity]
        self.device = None        # where the forward's x was: the backward's rows go there


class _Dispatch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, topk_weights, handle):
        d = handle.dispatcher
        moe = d.moe
        # moe's step stays open for combine; the weights' step runs whole in between. Where
        # this raises once moe's step began, this rank still takes its part, without
        # results, in the weights' step the other ranks run, then ends moe's.
        began = []
        try:
            recv = d._step_dispatch(began, moe, x.detach().to(d.dtype).contiguous(),
                                    handle.topk_idx)
            keys = _row_keys(recv, moe.topk, moe.max_tokens)
            recv_x = recv.x.clone().masked_fill_((keys == _PAD)[..., None], 0)
            counts = recv.count.to(torch.int64).clone()
            handle.keys = keys
            handle.device = x.device
            handle.row_weights = d._row_weights(topk_weights.detach(), handle.topk_idx, keys,
                                                began)
        except BaseException:
            d._give_up(began, handle, x.device, moe_ends_first=False)
            raise
        ctx.handle = handle
        ctx.x_dtype = x.dtype
        ctx.mark_non_differentiable(counts)
        return recv_x, counts

    @staticmethod
    def backward(ctx, grad_recv_x, grad_counts):
        if not ctx.needs_input_grad[0]:
            return None, None, None
        handle = ctx.handle
        d = handle.dispatcher
        # A step of its own: a dispatch that only lays the rows out (its rows are zeros),
        # then the combine of the rows' gradients with weight 1.
        dev = handle.device
        zeros = torch.zeros(handle.num_tokens, d.moe.hidden, dtype=d.dtype, device=dev)
        with aborting(d.moe):
            recv = d._dispatch(d.moe, zeros, handle.topk_idx)
            back_keys = _row_keys(recv, d.moe.topk, d.moe.max_tokens)
            grad_rows = _reorder(grad_recv_x.to(d.combine_dtype), handle.keys, back_keys)
            ones = torch.ones(handle.num_tokens, d.moe.topk, dtype=torch.float32, device=dev)
            grad_x = d.moe.combine(ones, torch.empty(handle.num_tokens, d.moe.hidden,
                                                     dtype=d.combine_dtype, device=dev),
                                   expert_y=grad_rows.contiguous())
        return grad_x.to(ctx.x_dtype), None, None


class _Combine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, expert_y, topk_weights, handle):
        d = handle.dispatcher
        y = expert_y.detach().to(d.combine_dtype).contiguous()
        weights = topk_weights.detach().to(y.device, torch.float32).contiguous()
        with aborting(d.moe):
            out = d.moe.combine(weights, torch.empty(handle.num_tokens, d.moe.hidden,
                                                     dtype=d.combine_dtype, device=y.device),
                                expert_y=y)
        ctx.save_for_backward(y)
        ctx.handle = handle
        ctx.y_dtype, ctx.w_dtype = expert_y.dtype, topk_weights.dtype
        ctx.w_device = topk_weights.device
        return out

    @staticmethod
    def backward(ctx, grad_out):
        (y,) = ctx.saved_tensors
        handle = ctx.handle
        d = handle.dispatcher
        moe = d.moe
        # Two steps in turn: moe's, then the weights'. Where this raises once moe's step
        # began (or its combine raised STRATA_ERR_CANCELLED, another rank having given its
        # step up), this rank still takes its part, without results, in what is left of
        # both, so that no rank waits for a step that another never joins.
        began = []
        try:
            recv = d._step_dispatch(began, moe, grad_out.to(d.dtype).contiguous(),
                                    handle.topk_idx)
            back_keys = _row_keys(recv, moe.topk, moe.max_tokens)
            g = _reorder(recv.x.to(torch.float32).masked_fill((back_keys == _PAD)[..., None],
                                                              0),
                         back_keys, handle.keys)
            # The step ends here, whatever runs next: dispatch's backward (which may not run
            # at all, where recv_x is off the gradient's path) takes a step of its own.
            dev = grad_out.device
            moe.combine(torch.zeros(handle.num_tokens, moe.topk, dtype=torch.float32,
                                    device=dev),
                        torch.empty(handle.num_tokens, moe.hidden, dtype=d.combine_dtype,
                                    device=dev))
            grad_y = handle.row_weights[..., None] * g
            grad_w = d._weights_grad((g * y.to(torch.float32)).sum(-1), handle, began)
        except BaseException:
            d._give_up(began, handle, grad_out.device, moe_ends_first=True)
            raise
        return (grad_y.to(ctx.y_dtype), grad_w.to(ctx.w_device, ctx.w_dtype), None)


class MoEDispatcher:
    """Autograd-aware dispatch and combine over a Moe (bf16, fp16 or fp32 tokens).

    Creating it is collective: it makes a small second Moe (top-k fp32 weights per row) on
    the same communicator, which carries each row's routing weight to the experts and the
    weights' gradient back.
    """

    def __init__(self, moe):
        if not isinstance(moe, Moe):
            raise TypeError("MoEDispatcher takes a strata.Moe")
        if moe.dtype not in (t.Dtype.BF16, t.Dtype.FP16, t.Dtype.FP32):
            raise ValueError(f"MoEDispatcher moves bf16, fp16 or fp32 tokens, not "
                             f"{moe.dtype.name.lower()}")
        self.moe = moe
        comm = moe._comm
        # Rank r's experts: [r * E / W, (r + 1) * E / W), as recv_x's first dimension.
        self.first_expert = comm.rank * moe.num_experts // comm.size
        self.dtype = _torch_dtype(moe.dtype)
        self.combine_dtype = _torch_dtype(moe.combine_dtype)
        self._width = (moe.topk + 3) // 4 * 4  # fp32 rows of whole 16-byte units
        # Every row its step can carry, whatever STRATA_MOE_CAPACITY_FACTOR or the
        # exchange (the streamed one's default is twice the mean load) would choose: its
        # rows are matched to the layer's one for one.
        self._weights = Moe(moe._comm, num_experts=moe.num_experts, topk=moe.topk,
                            hidden=self._width, max_tokens=moe.max_tokens, dtype="fp32",
                            capacity=moe.max_tokens * comm.size)

    def close(self):
        """Close the dispatcher's own Moe (not the one it was given)."""
        self._weights.close()

    @staticmethod
    def _dispatch(moe, x, topk_idx):
        return moe.dispatch(x, topk_idx)

    def _step_dispatch(self, began, moe, x, topk_idx):
        """moe's dispatch, moe added to began where the library took it (its step runs,
        though the call raised)."""
        try:
            return self._dispatch(moe, x, topk_idx)
        finally:
            if moe._in_step():
                began.append(moe)

    def _give_up(self, began, handle, device, moe_ends_first):
        """After a call of the dispatcher raised on this rank once the layer's step began
        (began: the objects whose dispatch it made): this rank's part, without results, in
        every step the other ranks' call runs, in their order, so that they finish: the
        weights' dispatch where it was not made, and the abort of each step still open
        (strata.Moe.abort_step: their tokens with rows here get STRATA_ERR_CANCELLED).
        moe_ends_first: the layer's step ends before the weights' begins (combine's
        backward); otherwise it stays open across the weights' step (the forward dispatch).
        Nothing began (a refusal before the library took the call): nothing to do. An
        object that failed (a peer failed) is left as it is: nothing can finish its step."""
        moe, weights = self.moe, self._weights

        def abort(obj):
            if obj.failed is None and obj._in_step():
                try:
                    obj.abort_step()
                except StrataError:
                    pass  # logged by the library; the first error is the one to raise

        if moe not in began or moe.failed is not None:
            return
        if moe_ends_first:
            abort(moe)
            if moe.failed is not None:
                return
        if weights not in began and weights.failed is None:
            try:
                weights.dispatch(torch.zeros(handle.num_tokens, weights.hidden,
                                             dtype=torch.float32, device=device),
                                 handle.topk_idx, receive_buffers=False)
            except StrataError:
                pass  # the step is running all the same, or the object failed
        abort(weights)
        if not moe_ends_first and weights.failed is None:
            abort(moe)

    def _row_weights(self, topk_weights, topk_idx, keys, began):
        """Each forward row's routing weight, [experts, capacity], through the weights Moe."""
        n, k = topk_weights.shape
        dev = keys.device
        rows = torch.zeros(n, self._width, dtype=torch.float32, device=dev)
        rows[:, :k] = topk_weights.to(dev, torch.float32)
        recv = self._step_dispatch(began, self._weights, rows, topk_idx)
        wkeys = _row_keys(recv, k, self.moe.max_tokens)
        slot = recv.src[..., 2].to(torch.int64).clamp(min=0).to(dev)
        mine = torch.gather(recv.x, 2, slot[..., None])[..., 0]
        row_weights = _reorder(mine.masked_fill(wkeys == _PAD, 0), wkeys, keys)
        self._weights.combine(torch.zeros(n, k, dtype=torch.float32, device=dev),
                              torch.empty(n, self._width, dtype=torch.float32, device=dev))
        return row_weights

    def _weights_grad(self, dots, handle, began):
        """<grad_out[t], y(t, k)> computed on the experts' ranks (dots, in the forward rows'
        order) back at each token, [num_tokens, topk], through the weights Moe."""
        n, k, dev = handle.num_tokens, self.moe.topk, dots.device
        recv = self._step_dispatch(began, self._weights,
                                   torch.zeros(n, self._width, dtype=torch.float32,
                                               device=dev), handle.topk_idx)
        wkeys = _row_keys(recv, k, self.moe.max_tokens)
        slot = recv.src[..., 2].to(torch.int64).clamp(min=0).to(dev)
        rows = torch.zeros(*wkeys.shape, self._width, dtype=torch.float32, device=dev)
        rows.scatter_(2, slot[..., None], _reorder(dots, handle.keys, wkeys)[..., None])
        rows.masked_fill_((wkeys == _PAD)[..., None], 0)
        out = self._weights.combine(torch.ones(n, k, dtype=torch.float32, device=dev),
                                    torch.empty(n, self._width, dtype=torch.float32,
                                                device=dev),
                                    expert_y=rows)
        return out[:, :k]

    def dispatch(self, x, topk_idx, topk_weights):
        """Send x's rows to their top-k experts: (recv_x [experts, capacity, hidden], counts
        [experts], handle). recv_x[e, :counts[e]] are expert e's rows; the rest are zeros.
        Differentiable in x."""
        # on the host once: every step of the layer reads the routing there
        topk_idx = torch.as_tensor(topk_idx, dtype=torch.int64).cpu().contiguous()
        check_routing(topk_idx, self.moe.num_experts)
        handle = DispatchHandle(self, topk_idx, topk_idx.shape[0])
        recv_x, counts = _Dispatch.apply(x, topk_weights, handle)
        handle.topk_weights = topk_weights
        return recv_x, counts, handle

    def combine(self, expert_y, handle):
        """Sum each token's expert outputs with its routing weights: [num_tokens, hidden].
        Differentiable in expert_y and in the dispatch's topk_weights."""
        return _Combine.apply(expert_y, handle.topk_weights, handle)
