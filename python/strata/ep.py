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

fp8 rows go as DeepEP's pair x=(x_fp8, x_scales): the rows' bytes (torch.uint8, or
torch.float8_e4m3fn where torch has it) and their float32 scales, one per 128 columns;
recv_x comes back as such a pair, and the step's combine takes bfloat16 rows.

Like DeepEP's, the calls are collective in kind: every rank makes the same calls in the
same order. A rank whose normal-mode dispatch raises once its step has started still takes
its part in what the others' dispatch and combine run, without results, so that they
finish; abort_steps() (strata's own) ends the steps of dispatches whose combine will not
come.
"""
import torch

from . import _types as t
from ._library import status_string
from .comm import Communicator
from .errors import StrataError
from .moe import Moe, aborting, check_routing

_ROW_DTYPES = (torch.bfloat16, torch.float16, torch.float32)  # strata.Moe takes them as named
_FP8 = "fp8"  # the rows of a normal-mode dispatch of (x_fp8, x_scales), in an object's key
_TORCH_DTYPES = {t.Dtype.BF16: torch.bfloat16, t.Dtype.FP16: torch.float16,
                 t.Dtype.FP32: torch.float32}
_ALIGN = 256  # strata rounds each array of an object up to this many bytes (docs/moe.md)


class Config:
    """DeepEP's Config: the tuning of its normal-mode kernels (the SMs they take, and how
    many tokens their NVLink and RDMA queues move per chunk and hold). strata has neither
    such kernels nor queues: it chooses its own launch and sizes its memory per MoE shape,
    so dispatch and combine accept a Config and read none of its fields. The fields are
    kept as given, for callers that read them back."""

    def __init__(self, num_sms=20, num_max_nvl_chunked_send_tokens=6,
                 num_max_nvl_chunked_recv_tokens=256, num_max_rdma_chunked_send_tokens=6,
                 num_max_rdma_chunked_recv_tokens=256):
        self.num_sms = int(num_sms)
        self.num_max_nvl_chunked_send_tokens = int(num_max_nvl_chunked_send_tokens)
        self.num_max_nvl_chunked_recv_tokens = int(num_max_nvl_chunked_recv_tokens)
        self.num_max_rdma_chunked_send_tokens = int(num_max_rdma_chunked_send_tokens)
        self.num_max_rdma_chunked_recv_tokens = int(num_max_rdma_chunked_recv_tokens)
        if self.num_sms < 0:
            raise ValueError(f"num_sms {self.num_sms} is negative")
        chunks = (self.num_max_nvl_chunked_send_tokens, self.num_max_nvl_chunked_recv_tokens,
                  self.num_max_rdma_chunked_send_tokens, self.num_max_rdma_chunked_recv_tokens)
        if min(chunks) <= 0:
            raise ValueError(f"the chunk sizes {chunks} must be positive")

    def get_nvl_buffer_size_hint(self, hidden_bytes, num_ranks):
        """0: strata takes no buffer sized by the caller (Buffer's num_nvl_bytes is not
        used), so a Buffer of any num_nvl_bytes, 0 included, serves every shape."""
        return 0

    def get_rdma_buffer_size_hint(self, hidden_bytes, num_ranks):
        """0, as get_nvl_buffer_size_hint: num_rdma_bytes is not used either."""
        return 0

    def __repr__(self):
        return (f"strata.ep.Config(num_sms={self.num_sms}, "
                f"num_max_nvl_chunked_send_tokens={self.num_max_nvl_chunked_send_tokens}, "
                f"num_max_nvl_chunked_recv_tokens={self.num_max_nvl_chunked_recv_tokens}, "
                f"num_max_rdma_chunked_send_tokens={self.num_max_rdma_chunked_send_tokens}, "
                f"num_max_rdma_chunked_recv_tokens={self.num_max_rdma_chunked_recv_tokens})")


class EventHandle:
    """DeepEP's EventHandle: an event recorded on torch's current CUDA stream when made, where
    torch has initialized CUDA; current_stream_wait() makes the then current stream wait
    for it. Over the host backend there is no stream: nothing is recorded, and the wait
    returns at once."""

    def __init__(self):
        self._event = None
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self._event = torch.cuda.Event()
            self._event.record()

    def current_stream_wait(self):
        if self._event is not None:
            self._event.wait()


class EventOverlap:
    """DeepEP's event handle. strata's calls return once done, so the handles they return
    hold no event and current_stream_wait() returns at once; one made of an EventHandle
    (Buffer.capture()) waits for that. Works as a context manager, whose exit waits for the
    event as current_stream_wait() does, as DeepEP's. extra_tensors are kept, as DeepEP
    keeps them alive with the event."""

    def __init__(self, event=None, extra_tensors=None):
        self.event = event
        self.extra_tensors = extra_tensors

    def current_stream_wait(self):
        """The current stream waits for the event, if this handle has one."""
        if self.event is not None:
            self.event.current_stream_wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.current_stream_wait()
        return False


def _wait_for(previous_event):
    """DeepEP's previous_event: what the call does starts after it (an EventOverlap, or
    anything with current_stream_wait())."""
    if previous_event is not None:
        previous_event.current_stream_wait()


def _done_hook():
    """A receive hook whose data has arrived already."""


def _check_tensor(value, name, dims):
    if not isinstance(value, torch.Tensor) or value.dim() != dims:
        raise ValueError(f"{name} must be a {dims}-D torch tensor")
    return value


def _is_fp8_bytes(dtype):
    """Whether rows of dtype are fp8 bytes as strata takes them: torch.uint8, or torch's
    float8_e4m3fn (torch 2.1 on)."""
    return dtype == torch.uint8 or str(dtype) == "torch.float8_e4m3fn"


def _dispatch_rows(x):
    """(rows, scales) of a normal-mode dispatch's x: a tensor and None, or DeepEP's fp8 pair
    (x_fp8 [tokens, hidden], x_scales [tokens, hidden / 128] float32, hidden a multiple of
    128), the scales made C-contiguous (DeepEP's callers may pass them column-major)."""
    if not isinstance(x, (tuple, list)):
        return _check_tensor(x, "x", 2), None
    if len(x) != 2:
        raise ValueError(f"x as a tuple is (x_fp8, x_scales), not {len(x)} items")
    rows = _check_tensor(x[0], "x[0] (the fp8 rows)", 2)
    scales = x[1]
    if not _is_fp8_bytes(rows.dtype):
        raise ValueError(f"x[0] of {rows.dtype}: fp8 rows are torch.uint8 bytes "
                         f"(or torch.float8_e4m3fn)")
    if rows.shape[1] % 128 != 0:
        raise ValueError(f"fp8 rows of hidden {rows.shape[1]}: hidden must be a multiple of "
                         f"128 (one scale per 128 columns)")
    want = (rows.shape[0], rows.shape[1] // 128)
    if (not isinstance(scales, torch.Tensor) or scales.dtype != torch.float32
            or tuple(scales.shape) != want):
        shape = tuple(scales.shape) if isinstance(scales, torch.Tensor) else type(scales)
        raise ValueError(f"x[1] (the scales) must be float32 of shape {want}, one per 128 "
                         f"columns, not {shape}")
    return rows, scales.to(rows.device).contiguous()


def _pad_rows(value, rows, fill):
    """value [n, ...] padded to [rows, ...] with fill."""
    out = torch.full((rows,) + tuple(value.shape[1:]), fill, dtype=value.dtype,
                     device=value.device)
    out[:value.shape[0]] = value
    return out


def _up(nbytes):
    return (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN


class Handle:
    """What a normal-mode dispatch leaves for its combine (and a cached dispatch, which
    makes it good for its own step's combine again): the routing, and where each received
    token's rows are."""

    def __init__(self, objects, topk_idx, num_tokens):
        self.objects = objects
        self.topk_idx = topk_idx
        self.num_tokens = num_tokens
        self.lead = None   # [num_recv] the strata row (flat) a token's combine rides on
        self.wlead = None  # [num_recv] the same in the weights Moe's rows
        self.tokens = None # [num_recv] the received tokens' keys, sorted
        self.open = False  # the strata steps the dispatch began, until its combine
        self.device = None # where the dispatch's x was: combine's buffers go there
        self.num_worst = 0 # num_worst_tokens of the dispatch (0: none): rows, padding too


class LowLatencyHandle:
    """What a low-latency dispatch leaves for its combine."""

    def __init__(self, moe, topk_idx):
        self.moe = moe
        self.topk_idx = topk_idx
        self.open = True  # the strata step the dispatch began, until its combine


class Buffer:
    """DeepEP's Buffer over a strata communicator of the group.

    group: a torch.distributed process group (None: the launcher's variables, as
    strata.Communicator()); kept as buffer.group. num_nvl_bytes, num_rdma_bytes,
    low_latency_mode, num_qps_per_rank, allow_nvlink_for_low_latency_mode, allow_mnnvl,
    use_fabric and explicitly_destroy are accepted for DeepEP's callers, kept as attributes
    of those names, and not used: strata sizes its memory per MoE shape and chooses its
    transports itself, and destroy() works whatever explicitly_destroy says. enable_shrink
    (DeepEP's rank masks) and comm (an mpi4py communicator) are not offered: True, or a
    comm, raises ValueError. max_tokens bounds the tokens a rank dispatches in normal mode
    (DeepEP sizes buffers in bytes instead); the objects for each shape are made on first
    use, which is collective.
    """

    num_sms = 20  # DeepEP's SMs for its normal-mode kernels; recorded (set_num_sms), not used

    def __init__(self, group=None, num_nvl_bytes=0, num_rdma_bytes=0, low_latency_mode=False,
                 num_qps_per_rank=24, allow_nvlink_for_low_latency_mode=True,
                 allow_mnnvl=False, *, use_fabric=False, explicitly_destroy=False,
                 enable_shrink=False, comm=None, max_tokens=4096):
        if enable_shrink:
            raise ValueError("enable_shrink=True: strata.ep has no rank masks (DeepEP's "
                             "low_latency_*_mask_buffer calls); strata.Moe.set_pull_mask and "
                             "Communicator.shrink are strata's own")
        if comm is not None:
            raise ValueError("comm: strata.ep takes a torch.distributed group, or None for "
                             "the launcher's variables, not an mpi4py communicator")
        self.comm = Communicator(group=group) if group is not None else Communicator()
        self.group = group
        self.rank = self.comm.rank
        self.group_size = self.comm.size
        self.max_tokens = max_tokens
        self.num_nvl_bytes = num_nvl_bytes
        self.num_rdma_bytes = num_rdma_bytes
        self.low_latency_mode = low_latency_mode
        self.num_qps_per_rank = num_qps_per_rank
        self.allow_nvlink_for_low_latency_mode = allow_nvlink_for_low_latency_mode
        self.allow_mnnvl = allow_mnnvl
        self.use_fabric = use_fabric
        self.explicitly_destroy = explicitly_destroy
        self.enable_shrink = enable_shrink
        self._objects = {}
        self._open = {}  # Moe -> the handle whose dispatch left its step open

    def abort_steps(self):
        """strata's own (DeepEP has none): end without results every step that a dispatch
        of this Buffer began and whose combine will not come, as after an error that lost
        its handle; the handles of those dispatches are then spent (a cached dispatch with
        one starts anew). Collective as strata.Moe.abort_step: every rank calls it at the
        same point of its calls, and a rank that gave the step up already (a dispatch that
        raised) takes no further part in it. The other ranks' tokens that had rows here
        get STRATA_ERR_CANCELLED from their combine. A shape whose step failed (a peer
        failed) is left to destroy(); the first StrataError of an abort is raised once
        every step was tried."""
        first = None
        for moe, weights in self._objects.values():
            objects = (moe,) if weights is None else (moe, weights)  # as a combine ends them
            if any(obj.failed is not None for obj in objects):
                objects = ()  # a peer failed: nothing can finish the step
            for obj in objects:
                if obj._in_step():
                    try:
                        obj.abort_step()
                    except StrataError as err:
                        first = first or err
            self._spend(moe)
        if first is not None:
            raise first

    def _spend(self, moe):
        """The handle whose step on moe was open: combined or ended, it is spent."""
        handle = self._open.pop(moe, None)
        if handle is not None:
            handle.open = False

    def destroy(self):
        """Close every MoE object, then the communicator."""
        for moe, weights in self._objects.values():
            if weights is not None:
                weights.close()
            moe.close()
            self._spend(moe)
        self._objects.clear()
        self.comm.close()

    # --- DeepEP's static methods --------------------------------------------------------------

    @staticmethod
    def set_num_sms(new_num_sms):
        """Record new_num_sms as Buffer.num_sms (an even number, as DeepEP requires), which
        get_dispatch_config and get_combine_config put in their Configs. strata chooses its
        own launch: nothing reads the number."""
        if isinstance(new_num_sms, bool) or not isinstance(new_num_sms, int):
            raise ValueError(f"the SM count must be an int, not {new_num_sms!r}")
        if new_num_sms < 0 or new_num_sms % 2 != 0:
            raise ValueError(f"the SM count must be even and not negative, not {new_num_sms}")
        Buffer.num_sms = new_num_sms

    @staticmethod
    def get_dispatch_config(num_ranks):
        """A Config for dispatch on num_ranks ranks: Buffer.num_sms and Config's defaults.
        strata reads no field of it (see Config), so every rank count gets one."""
        if isinstance(num_ranks, bool) or not isinstance(num_ranks, int) or num_ranks < 1:
            raise ValueError(f"num_ranks must be a positive int, not {num_ranks!r}")
        return Config(Buffer.num_sms)

    @staticmethod
    def get_combine_config(num_ranks):
        """A Config for combine on num_ranks ranks, as get_dispatch_config."""
        return Buffer.get_dispatch_config(num_ranks)

    @staticmethod
    def capture():
        """An EventOverlap of an EventHandle: an event on torch's current CUDA stream where
        CUDA is in use, none over the host backend. strata's calls accept it as
        previous_event and do not need it (each completes before it returns)."""
        return EventOverlap(EventHandle())

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks,
                                       num_experts):
        """The bytes of the expert blocks that low_latency_dispatch's object of that shape
        holds on each rank, for bfloat16 rows (as DeepEP sizes its hint): every local
        expert's rows in and out, num_max_dispatch_tokens_per_rank x num_ranks of each, with
        the rows' sources (strata.Moe.stats().memory["expert_rows"]). The rest of that
        object's memory depends on top-k and the ranks' nodes, which this call is not told.
        strata allocates per shape itself: passed back as Buffer's num_rdma_bytes, this (or
        any) value is accepted and not used."""
        for name, value in (("num_max_dispatch_tokens_per_rank",
                             num_max_dispatch_tokens_per_rank), ("hidden", hidden),
                            ("num_ranks", num_ranks), ("num_experts", num_experts)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, not {value!r}")
        if num_experts % num_ranks != 0:
            raise ValueError(f"num_experts {num_experts} is not a multiple of the "
                             f"{num_ranks} ranks")
        rows = num_experts // num_ranks * num_max_dispatch_tokens_per_rank * num_ranks
        row = hidden * 2  # bfloat16, in and out
        source = 12  # a row's (rank, token, slot), int32 each
        return _up(rows * row) + _up(rows * source) + _up(rows * row)

    # --- low-latency upkeep -------------------------------------------------------------------

    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank, hidden, num_experts):
        """DeepEP zeroes part of its buffer here after normal mode wrote it. strata's
        low-latency objects have memory of their own, per shape, that normal mode never
        writes, and each step starts clean: there is nothing to clean, and the call returns
        at once. It raises ValueError where num_experts is not a multiple of the ranks, or
        where a low-latency dispatch of that shape waits for its combine (cleaning then
        would break that step in DeepEP)."""
        if num_experts % self.group_size != 0:
            raise ValueError(f"num_experts {num_experts} is not a multiple of the "
                             f"{self.group_size} ranks")
        for key, (moe, weights) in self._objects.items():
            experts, _, rows, _, tokens, with_weights = key
            if (not with_weights and (experts, rows, tokens) ==
                    (num_experts, hidden, num_max_dispatch_tokens_per_rank)
                    and moe._in_step()):
                raise ValueError("clean_low_latency_buffer while a low-latency dispatch of "
                                 "this shape waits for its combine: combine it first")

    # --- shapes and objects -----------------------------------------------------------------

    def _moe(self, num_experts, topk, hidden, dtype, max_tokens, with_weights):
        """The Moe (and, for normal mode, its weights Moe) of a shape; made on first use.
        dtype: a torch dtype of _ROW_DTYPES, or _FP8 (normal mode's fp8 pair: fp8_e4m3 rows
        with scales, combined in bfloat16, as DeepEP's combine takes)."""
        if dtype not in _ROW_DTYPES and not (dtype == _FP8 and with_weights):
            fp8 = (", or fp8 as x=(x_fp8, x_scales)" if with_weights
                   else " (fp8 rows with their scales: a strata.Moe of dtype fp8_e4m3)")
            raise ValueError(f"x of {dtype}: strata.ep moves bfloat16, float16 or float32 "
                             f"rows{fp8}")
        key = (num_experts, topk, hidden, dtype, max_tokens, with_weights)
        if key not in self._objects:
            # every row delivered, as DeepEP's buffers do: normal mode receives exactly (no
            # capacity, rows packed into buffers of the step's size), low-latency mode into
            # per-expert blocks of the most an expert can receive. The exact receive needs
            # exact combine across nodes: named here, so that STRATA_MOE_COMBINE, which
            # chooses for objects that leave it to the library, does not make these fail.
            # The exchange is the library's: an exact object streams, its network buffers
            # held to the window across many nodes whatever the step's size, unless
            # STRATA_MOE_EXCHANGE=worst-case.
            exact = dict(receive=t.Receive.EXACT, combine=t.Combine.EXACT)
            if with_weights:
                rows = dict(dtype="fp8_e4m3", combine_dtype="bf16") if dtype == _FP8 \
                    else dict(dtype=dtype)
                moe = Moe(self.comm, num_experts=num_experts, topk=topk, hidden=hidden,
                          max_tokens=max_tokens, **rows, **exact)
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
        that step (its combine is still to come). StrataError where one of them failed."""
        for moe in moes:
            if moe is not None and moe.failed is not None:
                status = t.Status.STRATA_ERR_PEER_FAILED
                raise StrataError(status, "strata_moe_dispatch", status_string(status),
                                  f"a step of this shape failed ({moe.failed}): the Buffer "
                                  f"can only be destroyed (destroy())")
        for moe in moes:
            if moe is not None and moe._in_step():
                raise ValueError("dispatch while the step of an earlier dispatch of this shape "
                                 "waits for its combine: combine that one (with its handle) "
                                 "first, or end it without results with abort_steps() "
                                 "(strata's own, collective); strata runs one step at a time "
                                 "per shape")

    # --- layout -------------------------------------------------------------------------------

    def get_dispatch_layout(self, topk_idx, num_experts, previous_event=None, async_finish=False,
                            allocate_on_comm_stream=False):
        """(num_tokens_per_rank [ranks], num_tokens_per_rdma_rank [nodes] or None on one
        node, num_tokens_per_expert [num_experts], is_token_in_rank [tokens, ranks] bool,
        event), from this rank's topk_idx alone, after previous_event."""
        _wait_for(previous_event)
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
                 topk_weights=None, expert_alignment=1, num_worst_tokens=0, config=None,
                 previous_event=None, async_finish=False, allocate_on_comm_stream=False):
        """Each token once to every rank that has one of its experts: (recv_x [received,
        hidden], recv_topk_idx [received, topk] (this rank's expert index, or -1),
        recv_topk_weights [received, topk] (0 where -1), num_recv_tokens_per_expert_list,
        handle, event). Tokens arrive ordered by source rank, then by index there.

        x is a tensor, or DeepEP's fp8 pair (x_fp8 [tokens, hidden] uint8 or float8_e4m3fn,
        x_scales [tokens, hidden / 128] float32, hidden a multiple of 128): recv_x is then
        the pair (recv_x_fp8, recv_x_scales), the rows of x_fp8's dtype, and the step's
        combine takes bfloat16 rows. num_worst_tokens > 0 pads the results to that many
        rows (recv_x 0, recv_topk_idx -1, recv_topk_weights 0 past the received tokens), and
        the list is empty, as DeepEP's; combine then takes x of either row count. More
        tokens received than that raises ValueError on the rank that received them, which
        gives up the step: a rank with tokens there gets StrataError STRATA_ERR_CANCELLED
        from its combine. So does any error once the step has started: the rank that raises
        still takes its part, without results, in the steps the other ranks' dispatch and
        combine run, so that they finish.

        With handle (a cached dispatch), the routing of that dispatch is used again, rows
        padded as it padded them (num_worst_tokens is not read), and the handle serves
        this step's combine (DeepEP's handles are reusable: Megatron's backward dispatches
        the gradient with the forward's handle, then combines with it); the handle returned
        is that one. It must have been combined (or its step ended by abort_steps()): a
        handle whose step waits for its combine is refused (ValueError), as is a dispatch
        while another of the same shape waits for its combine, that step left as it was.
        The work starts after previous_event. config is accepted and not read (see
        Config)."""
        _wait_for(previous_event)
        x, x_scales = _dispatch_rows(x)
        if isinstance(num_worst_tokens, bool) or not isinstance(num_worst_tokens, int) \
                or num_worst_tokens < 0:
            raise ValueError(f"num_worst_tokens must be an int of at least 0, not "
                             f"{num_worst_tokens!r}")
        if handle is not None:
            if not isinstance(handle, Handle):
                raise ValueError("handle must be the handle of a dispatch of this Buffer")
            if handle.open:
                raise ValueError("a cached dispatch with a handle whose step waits for its "
                                 "combine: combine it first (or end it without results with "
                                 "abort_steps(), strata's own)")
            topk_idx, topk_weights = handle.topk_idx, handle.topk_weights
            num_experts = handle.num_experts
            num_worst_tokens = handle.num_worst  # the rows its combine takes, as DeepEP's
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
        dtype = _FP8 if x_scales is not None else x.dtype
        moe, weights = self._moe(num_experts, topk, x.shape[1], dtype, self.max_tokens, True)
        self._refuse_open_step(moe, weights)
        new = handle if handle is not None else Handle((moe, weights), topk_idx, x.shape[0])
        new.open = False  # until this dispatch's step is open for its combine
        new.objects, new.num_tokens = (moe, weights), x.shape[0]
        new.topk_weights, new.num_experts, new.device = topk_weights, num_experts, x.device
        new.num_worst = num_worst_tokens
        # Two steps stay open for the combine: moe's (the rows) and weights' (each row's
        # token's top-k weights, which the combine sums back too), ended in that order.
        try:
            recv = moe.dispatch(x.contiguous(), topk_idx, x_scales=x_scales)
            wrows = torch.zeros(x.shape[0], weights.hidden, dtype=torch.float32,
                                device=x.device)
            wrows[:, :topk] = topk_weights.to(x.device)
            wrecv = weights.dispatch(wrows, topk_idx)
            gathered = self._gather_tokens(recv, wrecv, new, topk, expert_alignment)
            if num_worst_tokens > 0:
                gathered = self._pad_tokens(gathered, num_worst_tokens)
        except BaseException:
            self._give_up(moe, weights, topk_idx, x.device)
            raise
        recv_x, recv_scales = gathered[0]
        if recv_scales is not None and recv_x.dtype != x.dtype:
            recv_x = recv_x.view(x.dtype)  # strata's fp8 bytes as the caller's fp8 type
        self._spend(moe)  # a handle whose step was ended by strata.Moe.abort_step
        new.open = True
        self._open[moe] = new
        return ((recv_x, recv_scales) if recv_scales is not None else recv_x,) + gathered[1:]

    @staticmethod
    def _give_up(moe, weights, topk_idx, device):
        """After a normal-mode dispatch raised on this rank: where its step had started, this
        rank's part, without results, in every step the other ranks' dispatch and combine
        run: the weights' dispatch where it was not made, then the abort of both steps, in
        the order the others' combine ends them (strata.Moe.abort_step: their tokens with
        rows here get STRATA_ERR_CANCELLED). Nothing started: nothing to do. An object that
        failed (a peer failed) is left as it is: nothing can finish its step."""
        if not moe._in_step() or moe.failed is not None:
            return
        if not weights._in_step() and weights.failed is None:
            try:
                weights.dispatch(torch.zeros(topk_idx.shape[0], weights.hidden,
                                             dtype=torch.float32, device=device), topk_idx,
                                 receive_buffers=False)
            except StrataError:
                pass  # the step is running all the same, or the object failed
        for obj in (moe, weights):
            if moe.failed is not None or weights.failed is not None:
                break  # a peer failed: nothing can finish the steps
            try:
                obj.abort_step()
            except StrataError:
                pass  # logged by the library; the first error is the one to raise

    @staticmethod
    def _pad_tokens(gathered, rows):
        """_gather_tokens' results padded to rows tokens (num_worst_tokens), the list empty
        as DeepEP's; ValueError where more tokens than that arrived."""
        (recv_x, recv_scales), recv_topk_idx, recv_topk_weights, _, handle, event = gathered
        received = recv_x.shape[0]
        if received > rows:
            raise ValueError(f"{received} tokens received, more than num_worst_tokens {rows}")
        if recv_scales is not None:
            recv_scales = _pad_rows(recv_scales, rows, 0)
        return ((_pad_rows(recv_x, rows, 0), recv_scales), _pad_rows(recv_topk_idx, rows, -1),
                _pad_rows(recv_topk_weights, rows, 0), [], handle, event)

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
        rows, [len(keys), topk]; and its lead row there, where its combine rides."""
        _, wkeys, _ = self._rows(wrecv, self.max_tokens)
        which = torch.searchsorted(keys, wkeys)
        weights = torch.zeros(len(keys), topk, dtype=torch.float32, device=wrecv.x.device)
        weights[which] = wrecv.x[:, :topk]
        lead = torch.full((len(keys),), wrecv.rows, dtype=torch.int64,
                          device=wkeys.device).scatter_reduce(
                              0, which, torch.arange(wrecv.rows, device=wkeys.device),
                              reduce="amin")
        return weights, lead

    def _gather_tokens(self, recv, wrecv, handle, topk, expert_alignment):
        """The strata rows, one per (token, local expert), as DeepEP's tokens, each once,
        ordered by source rank, then by index there; recv_x as (rows, their fp8 scales or
        None)."""
        experts, keys, slots = self._rows(recv, self.max_tokens)
        dev = recv.x.device
        tokens, which = torch.unique(keys, sorted=True, return_inverse=True)
        # A token's lead row: its first in row order; combine rides on it.
        rows = torch.arange(recv.rows, device=dev)
        lead = torch.full((len(tokens),), recv.rows, dtype=torch.int64,
                          device=dev).scatter_reduce(0, which, rows, reduce="amin")
        recv_x = recv.x[lead].clone()
        recv_scales = recv.x_scales[lead].clone() if recv.x_scales is not None else None
        recv_topk_idx = torch.full((len(tokens), topk), -1, dtype=torch.int64, device=dev)
        recv_topk_idx[which, slots] = experts
        weights, handle.wlead = self._token_weights(wrecv, topk, tokens)
        recv_topk_weights = torch.where(recv_topk_idx >= 0, weights,
                                        torch.zeros((), device=dev))
        handle.lead = lead
        handle.tokens = tokens
        counts = list(recv.counts)
        if expert_alignment > 1:
            counts = [(c + expert_alignment - 1) // expert_alignment * expert_alignment
                      for c in counts]
        return ((recv_x, recv_scales), recv_topk_idx, recv_topk_weights, counts, handle,
                EventOverlap())

    def combine(self, x, handle, topk_weights=None, bias=None, config=None, previous_event=None,
                async_finish=False, allocate_on_comm_stream=False):
        """Each received token's row back to its rank, summed there over the ranks it went
        to: (combined_x [tokens, hidden], combined_topk_weights [tokens, topk] or None,
        event). x [received, hidden] in dispatch's order, of its rows' dtype (bfloat16 after
        an fp8 dispatch); topk_weights [received, topk], summed the same way. After a
        dispatch with num_worst_tokens, both may have that many rows: those past the
        received tokens are not read. A bad x or topk_weights raises ValueError before
        anything happens: the step still waits for its combine. The work starts after
        previous_event. config is not read."""
        _wait_for(previous_event)
        if not isinstance(handle, Handle) or not handle.open:
            raise ValueError("combine needs the handle of this Buffer's last dispatch, once "
                             "per dispatch (a cached dispatch, handle=, makes it good again)")
        moe, weights = handle.objects
        x = _check_tensor(x, "x", 2)
        topk = handle.topk_idx.shape[1]
        received = len(handle.lead)
        allowed = (received, handle.num_worst) if handle.num_worst else (received,)
        if x.shape[0] not in allowed:
            padded = f" (or num_worst_tokens {handle.num_worst})" if handle.num_worst else ""
            raise ValueError(f"x has {x.shape[0]} rows; the dispatch received {received} "
                             f"tokens{padded}")
        if topk_weights is not None and (topk_weights.dim() != 2
                                         or topk_weights.shape[0] not in allowed
                                         or topk_weights.shape[1] != topk):
            rows = (f"{received} (or num_worst_tokens {handle.num_worst})"
                    if handle.num_worst else f"{received}")
            raise ValueError(f"topk_weights is {tuple(topk_weights.shape)}, not ({rows}, "
                             f"{topk}): one row per received token")
        rows_dtype = _TORCH_DTYPES[moe.combine_dtype]
        if x.dtype != rows_dtype:
            raise ValueError(f"x of {x.dtype}: this dispatch's combine takes {rows_dtype} rows")
        x = x[:received]
        dev, n = x.device, handle.num_tokens
        expert_y = torch.zeros(moe._recv.rows, moe.hidden, dtype=x.dtype, device=dev)
        expert_y[handle.lead.to(dev)] = x  # one row per token and rank: each sums once
        # The weights' step ends whether topk_weights is given or not (zeros then), and
        # whatever the rows' combine raised, so every rank ends both steps.
        wdev = handle.device
        wrows = torch.zeros(weights._recv.rows, weights.hidden, dtype=torch.float32,
                            device=wdev)
        if topk_weights is not None:
            wrows[handle.wlead.to(wdev), :topk] = topk_weights[:received].to(wdev,
                                                                             torch.float32)
        self._spend(moe)  # the steps end here, results or an error
        error = None
        try:
            with aborting(moe):
                combined_x = moe.combine(torch.ones(n, topk, dtype=torch.float32, device=dev),
                                         torch.empty(n, moe.hidden, dtype=x.dtype, device=dev),
                                         expert_y=expert_y)
        except Exception as err:  # CANCELLED, say: the weights' step still ends
            error = err
        combined_weights = None
        if moe.failed is None:  # failed: nothing runs on this shape any more (destroy())
            try:
                with aborting(weights):
                    summed = weights.combine(
                        torch.ones(n, topk, dtype=torch.float32, device=wdev),
                        torch.empty(n, weights.hidden, dtype=torch.float32, device=wdev),
                        expert_y=wrows)
                if topk_weights is not None:
                    combined_weights = summed[:, :topk].clone()
            except Exception:
                if error is None:
                    raise
        if error is not None:
            raise error
        if bias is not None:
            for b in (bias if isinstance(bias, (tuple, list)) else (bias,)):
                if b is not None:
                    combined_x = combined_x + b
        return combined_x, combined_weights, EventOverlap()

    # --- low-latency mode -------------------------------------------------------------------------

    def low_latency_dispatch(self, x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                             cumulative_local_expert_recv_stats=None,
                             dispatch_wait_recv_cost_stats=None, use_fp8=False,
                             round_scale=False, use_ue8m0=False, async_finish=False,
                             return_recv_hook=False):
        """Each token's row to each of its experts, laid out per expert: (recv_x
        [local experts, num_max_dispatch_tokens_per_rank * ranks, hidden], recv_count
        [local experts], handle, event, hook). Rows past recv_count[e] are not written.
        cumulative_local_expert_recv_stats is added to; dispatch_wait_recv_cost_stats
        (DeepEP's wait per source rank, in GPU clock cycles) is accepted and left as it is:
        strata does not time its waits per source rank."""
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
        self._spend(moe)  # a handle whose step was ended by strata.Moe.abort_step
        handle = self._open[moe] = LowLatencyHandle(moe, topk_idx)
        return (recv.x, count, handle, EventOverlap(), _done_hook)

    def low_latency_combine(self, x, topk_idx, topk_weights, handle, use_logfmt=False,
                            zero_copy=False, async_finish=False, return_recv_hook=False,
                            out=None, combine_wait_recv_cost_stats=None):
        """The experts' outputs x [local experts, capacity, hidden], laid out as
        low_latency_dispatch's recv_x, summed at each token with its weights: (combined_x
        [tokens, hidden], event, hook). combine_wait_recv_cost_stats is accepted and left
        as it is, as low_latency_dispatch's dispatch_wait_recv_cost_stats."""
        if not isinstance(handle, LowLatencyHandle) or not handle.open:
            raise ValueError("low_latency_combine needs the handle of low_latency_dispatch, "
                             "once per dispatch")
        moe = handle.moe
        n = handle.topk_idx.shape[0]
        if out is None:
            out = torch.empty(n, moe.hidden, dtype=x.dtype, device=x.device)
        weights = _check_tensor(topk_weights, "topk_weights", 2).to(x.device, torch.float32)
        self._spend(moe)  # the step ends here, results or an error
        with aborting(moe):
            moe.combine(weights.contiguous(), out, expert_y=x.contiguous())
        return out, EventOverlap(), _done_hook

    def get_next_low_latency_combine_buffer(self, handle):
        """Where low_latency_combine's x may be written in place: the dispatch's own rows."""
        return handle.moe._recv.expert_y
