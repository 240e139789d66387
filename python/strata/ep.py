"""A DeepEP-shaped facade over strata: strata.ep.Buffer, with DeepEP's Buffer names, argument
names and return shapes, for frameworks whose expert-parallel backends speak that API.

    buffer = strata.ep.Buffer(group)                 # a torch.distributed process group
    layout = buffer.get_dispatch_layout(topk_idx, num_experts)
    recv_x, recv_topk_idx, recv_topk_weights, counts, handle, event = buffer.dispatch(
        x, topk_idx=topk_idx, topk_weights=topk_weights, num_tokens_per_rank=layout[0],
        is_token_in_rank=layout[3], num_tokens_per_expert=layout[2])
    combined_x, combined_topk_weights, event = buffer.combine(y, handle, topk_weights=w)

Every call completes before it returns, on the host: the events returned are done, and the
receive hooks have nothing left to do. docs/python.md maps each call to DeepEP's and says
what differs and why. Torch tensors on the communicator's memory: CPU tensors over the host
backend, tensors on the communicator's GPU over CUDA or HIP. What comes back is on the
device the call's x (or topk_idx) is on, as is the bookkeeping of which row is whose: normal
mode receives exactly (every row, packed into buffers of the step's size, with their
sources), so nothing is dropped and no per-expert block of the worst case is kept.

Like DeepEP's, the calls are collective in kind: every rank makes the same calls in the
same order, and passes topk_weights to combine on all ranks or on none.
"""
import torch

from . import _types as t
from .comm import Communicator
from .moe import Moe, aborting, check_routing

_ROW_DTYPES = (torch.bfloat16, torch.float16, torch.float32)  # strata.Moe takes them as named


class EventOverlap:
    """DeepEP's event handle. strata's calls return once done, so there is nothing to wait
    for: current_stream_wait() returns at once, and the handle works as a context manager."""

    def __init__(self, event=None):
        self.event = event

    def current_stream_wait(self):
        """Nothing to wait for: the call that returned this handle is complete."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _done_hook():
    """A receive hook whose data has arrived already."""


def _check_tensor(value, name, dims):
    if not isinstance(value, torch.Tensor) or value.dim() != dims:
        raise ValueError(f"{name} must be a {dims}-D torch tensor")
    return value


class Handle:
    """What a normal-mode dispatch leaves for its combine (and a cached dispatch, which
    makes it good for its own step's combine again): the routing, and where each received
    token's rows are."""

    def __init__(self, objects, topk_idx, num_tokens):
        self.objects = objects
        self.topk_idx = topk_idx
        self.num_tokens = num_tokens
        self.lead = None   # [num_recv] the strata row (flat) a token's combine rides on
        self.tokens = None # [num_recv] the received tokens' keys, sorted
        self.open = False  # the strata step the dispatch began, until its combine
        self.device = None # where the dispatch's x was: combine's buffers go there


class LowLatencyHandle:
    """What a low-latency dispatch leaves for its combine."""

    def __init__(self, moe, topk_idx):
        self.moe = moe
        self.topk_idx = topk_idx


class Buffer:
    """DeepEP's Buffer over a strata communicator of the group.

    group: a torch.distributed process group (None: the launcher's variables, as
    strata.Communicator()). num_nvl_bytes, num_rdma_bytes, low_latency_mode and
    num_qps_per_rank are accepted for DeepEP's callers and not used: strata sizes its memory
    per MoE shape. max_tokens bounds the tokens a rank dispatches in normal mode (DeepEP
    sizes buffers in bytes instead); the objects for each shape are made on first use, which
    is collective.
    """

    def __init__(self, group=None, num_nvl_bytes=0, num_rdma_bytes=0, low_latency_mode=False,
                 num_qps_per_rank=1, max_tokens=4096, **_ignored):
        self.comm = Communicator(group=group) if group is not None else Communicator()
        self.rank = self.comm.rank
        self.group_size = self.comm.size
        self.max_tokens = max_tokens
        self.low_latency_mode = low_latency_mode
        self._objects = {}

    def destroy(self):
        """Close every MoE object, then the communicator."""
        for moe, weights in self._objects.values():
            if weights is not None:
                weights.close()
            moe.close()
        self._objects.clear()
        self.comm.close()

    # --- shapes and objects -----------------------------------------------------------------

    def _moe(self, num_experts, topk, hidden, dtype, max_tokens, with_weights):
        """The Moe (and, for normal mode, its weights Moe) of a shape; made on first use."""
        if dtype not in _ROW_DTYPES:
            raise ValueError(f"x of {dtype}: strata.ep moves bfloat16, float16 or float32 rows")
        key = (num_experts, topk, hidden, dtype, max_tokens, with_weights)
        if key not in self._objects:
            # every row delivered, as DeepEP's buffers do: normal mode receives exactly (no
            # capacity, rows packed into buffers of the step's size), low-latency mode into
            # per-expert blocks of the most an expert can receive. The exact receive needs
            # the worst-case exchange and exact combine across nodes: named here, so that
            # STRATA_MOE_EXCHANGE and STRATA_MOE_COMBINE, which choose for objects that
            # leave them to the library, do not make these fail.
            exact = dict(receive=t.Receive.EXACT, exchange=t.Exchange.WORST_CASE,
                         combine=t.Combine.EXACT)
            if with_weights:
                moe = Moe(self.comm, num_experts=num_experts, topk=topk, hidden=hidden,
                          max_tokens=max_tokens, dtype=dtype, **exact)
                # each row's token's top-k weights travel beside it
                weights = Moe(self.comm, num_experts=num_experts, topk=topk,
                              hidden=(topk + 3) // 4 * 4, max_tokens=max_tokens, dtype="fp32",
                              **exact)
            else:
                moe = Moe(self.comm, num_experts=num_experts, topk=topk, hidden=hidden,
                          max_tokens=max_tokens, dtype=dtype,
                          capacity=max_tokens * self.group_size)
                weights = None
            self._objects[key] = (moe, weights)
        return self._objects[key]

    def _first_expert(self, num_experts):
        return self.rank * num_experts // self.group_size

    @staticmethod
    def _refuse_open_step(*moes):
        """ValueError where an earlier dispatch's step is still open on one of moes: strata
        runs one step at a time per object, and the new dispatch must neither start nor end
        that step (its combine is still to come)."""
        for moe in moes:
            if moe is not None and moe._in_step():
                raise ValueError("dispatch while the step of an earlier dispatch of this shape "
                                 "waits for its combine: combine that one (with its handle) "
                                 "first; strata runs one step at a time per shape")

    # --- layout -------------------------------------------------------------------------------

    def get_dispatch_layout(self, topk_idx, num_experts, previous_event=None, async_finish=False,
                            allocate_on_comm_stream=False):
        """(num_tokens_per_rank [ranks], num_tokens_per_rdma_rank [nodes] or None on one
        node, num_tokens_per_expert [num_experts], is_token_in_rank [tokens, ranks] bool,
        event), from this rank's topk_idx alone."""
        topk_idx = _check_tensor(topk_idx, "topk_idx", 2).to(torch.int64)
        if num_experts % self.group_size != 0:
            raise ValueError(f"num_experts {num_experts} is not a multiple of the "
                             f"{self.group_size} ranks")
        dev = topk_idx.device
        valid = topk_idx >= 0
        per_rank = num_experts // self.group_size
        experts = topk_idx.clamp(min=0)
        num_tokens_per_expert = torch.zeros(num_experts, dtype=torch.int32, device=dev)
        num_tokens_per_expert.index_add_(0, experts[valid],
                                         torch.ones(int(valid.sum()), dtype=torch.int32,
                                                    device=dev))
        is_token_in_rank = torch.zeros(topk_idx.shape[0], self.group_size, dtype=torch.bool,
                                       device=dev)
        rows = torch.arange(topk_idx.shape[0], device=dev)[:, None].expand_as(topk_idx)
        is_token_in_rank[rows[valid], (experts // per_rank)[valid]] = True
        num_tokens_per_rank = is_token_in_rank.sum(0).to(torch.int32)
        per_node = None
        if self.comm.num_nodes > 1:
            nodes = torch.tensor([self._node_of(r) for r in range(self.group_size)],
                                 device=dev)
            in_node = torch.zeros(topk_idx.shape[0], self.comm.num_nodes, dtype=torch.bool,
                                  device=dev)
            for node in range(self.comm.num_nodes):
                in_node[:, node] = is_token_in_rank[:, nodes == node].any(1)
            per_node = in_node.sum(0).to(torch.int32)
        return (num_tokens_per_rank, per_node, num_tokens_per_expert, is_token_in_rank,
                EventOverlap())

    def _node_of(self, rank):
        for node in range(self.comm.num_nodes):
            for local in range(self.group_size):
                if self.comm.node_rank(node, local) == rank:
                    return node
        return 0

    # --- normal mode ----------------------------------------------------------------------------

    def dispatch(self, x, handle=None, num_tokens_per_rank=None, num_tokens_per_rdma_rank=None,
                 is_token_in_rank=None, num_tokens_per_expert=None, topk_idx=None,
                 topk_weights=None, expert_alignment=1, config=None, previous_event=None,
                 async_finish=False, allocate_on_comm_stream=False):
        """Each token once to every rank that has one of its experts: (recv_x [received,
        hidden], recv_topk_idx [received, topk] (this rank's expert index, or -1),
        recv_topk_weights [received, topk] (0 where -1), num_recv_tokens_per_expert_list,
        handle, event). Tokens arrive ordered by source rank, then by index there. With
        handle (a cached dispatch), the routing of that dispatch is used again, and the
        handle serves this step's combine (DeepEP's handles are reusable: Megatron's backward
        dispatches the gradient with the forward's handle, then combines with it); the
        handle returned is that one. A dispatch while another of the same shape waits for
        its combine is refused (ValueError), that step left as it was."""
        x = _check_tensor(x, "x", 2)
        if handle is not None:
            if not isinstance(handle, Handle):
                raise ValueError("handle must be the handle of a dispatch of this Buffer")
            topk_idx, topk_weights = handle.topk_idx, handle.topk_weights
            num_experts = handle.num_experts
        else:
            if topk_idx is None or topk_weights is None or num_tokens_per_expert is None:
                raise ValueError("dispatch without a handle needs topk_idx, topk_weights and "
                                 "num_tokens_per_expert (get_dispatch_layout)")
            num_experts = int(num_tokens_per_expert.shape[0])
        # the routing on the host once: strata reads it there, in each Moe's dispatch
        topk_idx = _check_tensor(topk_idx, "topk_idx", 2).to(torch.int64).cpu().contiguous()
        topk_weights = _check_tensor(topk_weights, "topk_weights", 2).to(x.device,
                                                                           torch.float32)
        topk = topk_idx.shape[1]
        check_routing(topk_idx, num_experts)
        moe, weights = self._moe(num_experts, topk, x.shape[1], x.dtype, self.max_tokens, True)
        self._refuse_open_step(moe, weights)
        new = handle if handle is not None else Handle((moe, weights), topk_idx, x.shape[0])
        new.open = False  # until this dispatch's step is open for its combine
        new.objects, new.num_tokens = (moe, weights), x.shape[0]
        new.topk_weights, new.num_experts, new.device = topk_weights, num_experts, x.device
        with aborting(moe, weights):  # moe's step stays open for combine unless this raises
            recv = moe.dispatch(x.contiguous(), topk_idx)
            wrows = torch.zeros(x.shape[0], weights.hidden, dtype=torch.float32,
                                device=x.device)
            wrows[:, :topk] = topk_weights.to(x.device)
            wrecv = weights.dispatch(wrows, topk_idx)
            gathered = self._gather_tokens(recv, wrecv, new, topk, expert_alignment)
            weights.combine(torch.zeros(x.shape[0], topk, dtype=torch.float32, device=x.device),
                            torch.empty(x.shape[0], weights.hidden, dtype=torch.float32,
                                        device=x.device))
        new.open = True
        return gathered

    @staticmethod
    def _rows(recv, max_tokens):
        """Every received row of an exact receive (a CompactRecv, rows packed expert after
        expert): its local expert, its token's key (source rank * max_tokens + token) and
        its slot, in row order, on the device of its rows."""
        dev = recv.x.device
        src = recv.src.to(dev, torch.int64)
        experts = torch.repeat_interleave(torch.arange(recv.num_local_experts, device=dev),
                                          torch.tensor(recv.counts, device=dev))
        return experts, src[:, 0] * max_tokens + src[:, 1], src[:, 2]

    def _token_weights(self, wrecv, topk, keys):
        """Each token of keys (sorted, unique): its top-k weights, from the weights Moe's
        rows. [len(keys), topk]."""
        _, wkeys, _ = self._rows(wrecv, self.max_tokens)
        weights = torch.zeros(len(keys), topk, dtype=torch.float32, device=wrecv.x.device)
        weights[torch.searchsorted(keys, wkeys)] = wrecv.x[:, :topk]
        return weights

    def _gather_tokens(self, recv, wrecv, handle, topk, expert_alignment):
        """The strata rows, one per (token, local expert), as DeepEP's tokens, each once,
        ordered by source rank, then by index there."""
        experts, keys, slots = self._rows(recv, self.max_tokens)
        dev = recv.x.device
        tokens, which = torch.unique(keys, sorted=True, return_inverse=True)
        # A token's lead row: its first in row order; combine rides on it.
        rows = torch.arange(recv.rows, device=dev)
        lead = torch.full((len(tokens),), recv.rows, dtype=torch.int64,
                          device=dev).scatter_reduce(0, which, rows, reduce="amin")
        recv_x = recv.x[lead].clone()
        recv_topk_idx = torch.full((len(tokens), topk), -1, dtype=torch.int64, device=dev)
        recv_topk_idx[which, slots] = experts
        weights = self._token_weights(wrecv, topk, tokens)
        recv_topk_weights = torch.where(recv_topk_idx >= 0, weights,
                                        torch.zeros((), device=dev))
        handle.lead = lead
        handle.tokens = tokens
        counts = list(recv.counts)
        if expert_alignment > 1:
            counts = [(c + expert_alignment - 1) // expert_alignment * expert_alignment
                      for c in counts]
        return recv_x, recv_topk_idx, recv_topk_weights, counts, handle, EventOverlap()

    def combine(self, x, handle, topk_weights=None, bias=None, config=None, previous_event=None,
                async_finish=False, allocate_on_comm_stream=False):
        """Each received token's row back to its rank, summed there over the ranks it went
        to: (combined_x [tokens, hidden], combined_topk_weights [tokens, topk] or None,
        event). x [received, hidden] in dispatch's order; topk_weights [received, topk],
        summed the same way."""
        if not isinstance(handle, Handle) or not handle.open:
            raise ValueError("combine needs the handle of this Buffer's last dispatch, once "
                             "per dispatch (a cached dispatch, handle=, makes it good again)")
        moe, weights = handle.objects
        x = _check_tensor(x, "x", 2)
        topk = handle.topk_idx.shape[1]
        if x.shape[0] != len(handle.lead):
            raise ValueError(f"x has {x.shape[0]} rows; the dispatch received "
                             f"{len(handle.lead)} tokens")
        if topk_weights is not None and tuple(topk_weights.shape) != (len(handle.lead), topk):
            raise ValueError(f"topk_weights is {tuple(topk_weights.shape)}, not "
                             f"({len(handle.lead)}, {topk}): one row per received token")
        dev = x.device
        expert_y = torch.zeros(moe._recv.rows, moe.hidden, dtype=x.dtype, device=dev)
        expert_y[handle.lead.to(dev)] = x  # one row per token and rank: each sums once
        ones = torch.ones(handle.num_tokens, topk, dtype=torch.float32, device=dev)
        handle.open = False  # the step ends here, results or an error
        with aborting(moe):
            combined_x = moe.combine(ones, torch.empty(handle.num_tokens, moe.hidden,
                                                       dtype=x.dtype, device=dev),
                                     expert_y=expert_y)
        combined_weights = None
        if topk_weights is not None:
            with aborting(weights):
                combined_weights = self._combine_weights(handle, weights, topk_weights, topk)
        if bias is not None:
            for b in (bias if isinstance(bias, (tuple, list)) else (bias,)):
                if b is not None:
                    combined_x = combined_x + b
        return combined_x, combined_weights, EventOverlap()

    def _combine_weights(self, handle, weights, topk_weights, topk):
        """topk_weights [received, topk] summed back at each token over the ranks."""
        n, dev = handle.num_tokens, handle.device
        topk_weights = topk_weights.to(dev)
        wrecv = weights.dispatch(torch.zeros(n, weights.hidden, dtype=torch.float32,
                                             device=dev), handle.topk_idx)
        _, keys, _ = self._rows(wrecv, self.max_tokens)
        which = torch.searchsorted(handle.tokens.to(keys.device), keys)
        first = torch.full((len(handle.tokens),), wrecv.rows, dtype=torch.int64,
                           device=keys.device).scatter_reduce(
                               0, which, torch.arange(wrecv.rows, device=keys.device),
                               reduce="amin")
        rows = torch.zeros(wrecv.rows, weights.hidden, dtype=torch.float32, device=dev)
        rows[first.to(dev), :topk] = topk_weights.to(torch.float32)
        out = weights.combine(torch.ones(n, topk, dtype=torch.float32, device=dev),
                              torch.empty(n, weights.hidden, dtype=torch.float32, device=dev),
                              expert_y=rows)
        return out[:, :topk].clone()

    # --- low-latency mode -------------------------------------------------------------------------

    def low_latency_dispatch(self, x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                             cumulative_local_expert_recv_stats=None, use_fp8=False,
                             round_scale=False, use_ue8m0=False, async_finish=False,
                             return_recv_hook=False):
        """Each token's row to each of its experts, laid out per expert: (recv_x
        [local experts, num_max_dispatch_tokens_per_rank * ranks, hidden], recv_count
        [local experts], handle, event, hook). Rows past recv_count[e] are not written."""
        if use_fp8:
            raise ValueError("use_fp8=True: strata.ep sends the rows as given; quantize them "
                             "to fp8 with their scales and use a strata.Moe of dtype fp8_e4m3")
        x = _check_tensor(x, "x", 2)
        topk_idx = _check_tensor(topk_idx, "topk_idx", 2).to(torch.int64).contiguous()
        check_routing(topk_idx, num_experts)
        moe, _ = self._moe(num_experts, topk_idx.shape[1], x.shape[1], x.dtype,
                           num_max_dispatch_tokens_per_rank, False)
        self._refuse_open_step(moe)
        with aborting(moe):
            recv = moe.dispatch(x.contiguous(), topk_idx)
        # strata keeps it on the host, rewritten by the next dispatch; DeepEP's is a tensor
        # of its own on x's device
        count = recv.count.to(x.device, copy=True)
        if cumulative_local_expert_recv_stats is not None:
            cumulative_local_expert_recv_stats += count.to(
                cumulative_local_expert_recv_stats.device,
                cumulative_local_expert_recv_stats.dtype)
        return (recv.x, count, LowLatencyHandle(moe, topk_idx), EventOverlap(), _done_hook)

    def low_latency_combine(self, x, topk_idx, topk_weights, handle, use_logfmt=False,
                            zero_copy=False, async_finish=False, return_recv_hook=False,
                            out=None):
        """The experts' outputs x [local experts, capacity, hidden], laid out as
        low_latency_dispatch's recv_x, summed at each token with its weights: (combined_x
        [tokens, hidden], event, hook)."""
        if not isinstance(handle, LowLatencyHandle):
            raise ValueError("low_latency_combine needs the handle of low_latency_dispatch")
        moe = handle.moe
        n = handle.topk_idx.shape[0]
        if out is None:
            out = torch.empty(n, moe.hidden, dtype=x.dtype, device=x.device)
        weights = _check_tensor(topk_weights, "topk_weights", 2).to(x.device, torch.float32)
        with aborting(moe):
            moe.combine(weights.contiguous(), out, expert_y=x.contiguous())
        return out, EventOverlap(), _done_hook

    def get_next_low_latency_combine_buffer(self, handle):
        """Where low_latency_combine's x may be written in place: the dispatch's own rows."""
        return handle.moe._recv.expert_y
