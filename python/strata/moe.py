"""MoE dispatch and combine over a communicator (strata_moe_*), on numpy arrays or tensors."""
import contextlib
import ctypes
import dataclasses
import weakref

from . import _buffers as b
from . import _group
from . import _gpu
from . import _types as t
from . import _work
from ._library import check, last_error, library, status_string
from .comm import Stream
from .errors import StrataError

Work = _work.Work  # what a call given async_op=True returns

# Errors a step's call returns that the library object survives: a refusal (STRATA_ERR_INVALID,
# STRATA_ERR_UNSUPPORTED: nothing started, or the step goes on) or an error the step found
# in its rows (STRATA_ERR_CAPACITY, STRATA_ERR_CANCELLED: the step completes). Any other error
# of a call that ends the step (combine, combine_recv, abort_step) where the step did not
# end, and STRATA_ERR_PEER_FAILED from any call, failed the object: it refuses every call
# but destroy from then on (strata/moe.h).
_SURVIVED = frozenset((t.Status.STRATA_ERR_INVALID, t.Status.STRATA_ERR_UNSUPPORTED,
                       t.Status.STRATA_ERR_CAPACITY, t.Status.STRATA_ERR_CANCELLED))


# A framework's element types by name (torch's without "torch.", numpy's): fp8 tokens travel
# as their bytes, with scales: uint8 buffers, or torch's own fp8 type (torch.float8_e4m3fn,
# torch 2.1 on), whose tensors the buffer checks take as those bytes (_buffers.SAME_BYTES).
# What comes back holds the bytes as uint8 (.view(torch.float8_e4m3fn) reads them as fp8).
_FRAMEWORK_DTYPES = {
    "bfloat16": t.Dtype.BF16, "float16": t.Dtype.FP16, "half": t.Dtype.FP16,
    "float32": t.Dtype.FP32, "float": t.Dtype.FP32, "uint8": t.Dtype.FP8_E4M3,
    "float8_e4m3fn": t.Dtype.FP8_E4M3,
}


def _timeout_ns(timeout):
    """A wait's bound in seconds as the library takes it: None, the object's (-1)."""
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"timeout must be None or at least 0 seconds, not {timeout}")
    return -1 if timeout is None else int(timeout * 1e9)


def _delivered(status, call, recv):
    """recv, or where the dispatch call returned an error (the step still running), that
    error raised with recv attached."""
    if status < 0:
        err = StrataError(status, call, status_string(status), last_error())
        err.recv = recv
        raise err
    return recv


def _delivers(raw):
    """Whether a dispatch call filled its strata_moe_recv_t: the library took the call and
    the step is at its combine. A refused call (out of order) delivers nothing."""
    return raw.num_local_experts > 0


def _dtype(value, name):
    """A Dtype from a Dtype, its name ("bf16"), a torch dtype (torch.bfloat16) or a numpy
    one (np.float32)."""
    if isinstance(value, t.Dtype):
        return value
    if isinstance(value, str):
        try:
            return t.Dtype[value.upper()]
        except KeyError:
            raise ValueError(f"{name} {value!r} is not one of "
                             f"{', '.join(d.name.lower() for d in t.Dtype)}") from None
    if isinstance(value, int):
        return t.Dtype(value)
    text = str(value).replace("torch.", "")
    if type(value).__module__ == "numpy" or isinstance(value, type):
        try:
            import numpy as np
            text = np.dtype(value).name
        except TypeError:
            pass
    if text in _FRAMEWORK_DTYPES:
        return _FRAMEWORK_DTYPES[text]
    raise ValueError(f"{name} {value!r} is not an element type strata moves: bf16, fp16, "
                     f"fp32 or fp8_e4m3 (torch.bfloat16, torch.float16, torch.float32, "
                     f"torch.uint8 with scales)")


class Recv:
    """What a dispatch delivered to this rank's experts (strata_moe_recv_t), as arrays.

    Views of the library's memory, rewritten by the next dispatch. They keep that memory
    mapped as long as they live, even past the Moe's close() (which then destroys the
    library object only once the last view is gone): local expert e (global id
    first_expert + e) has count[e] rows in x[e, :count[e]], in no particular order;
    src[e, row] is (rank, token, slot) of each. Writing the experts' outputs into
    expert_y[e, :count[e]] saves combine a copy. In the framework of the dispatch's x:
    numpy arrays, torch tensors (on x's GPU for GPU tensors), or Arrays on a GPU for other
    frameworks; count and src are host memory (numpy, or CPU tensors).
    """

    def __init__(self, raw, hidden, dtype, combine_dtype, framework, memory, owner):
        e, cap = raw.num_local_experts, raw.capacity
        host = "numpy" if framework == "array" else framework  # count and src: host memory
        self.num_local_experts = e
        self.first_expert = raw.first_expert
        self.capacity = cap
        self.row_bytes = raw.row_bytes
        self.y_row_bytes = raw.y_row_bytes
        self.count = b.view(ctypes.cast(raw.count, ctypes.c_void_p).value, "int32", (e,),
                            host, owner=owner)
        self.x = b.view(raw.x, b.DTYPE_NAMES[dtype], (e, cap, hidden), framework,
                        strides=(cap * raw.row_bytes, raw.row_bytes, dtype.itemsize),
                        owner=owner, memory=memory)
        self.src = b.view(ctypes.cast(raw.src, ctypes.c_void_p).value, "int32", (e, cap, 3),
                          host, owner=owner)
        self.expert_y = b.view(raw.expert_y, b.DTYPE_NAMES[combine_dtype], (e, cap, hidden),
                               framework, strides=(cap * raw.y_row_bytes, raw.y_row_bytes,
                                                   combine_dtype.itemsize),
                               owner=owner, memory=memory)
        self.x_scales = None
        if dtype is t.Dtype.FP8_E4M3:
            stride = raw.scale_stride
            self.x_scales = b.view(ctypes.cast(raw.x_scales, ctypes.c_void_p).value, "float32",
                                   (e, cap, hidden // 128), framework,
                                   strides=(cap * stride, stride, 4), owner=owner,
                                   memory=memory)

    def __repr__(self):
        return (f"<strata.Recv experts {self.first_expert}.."
                f"{self.first_expert + self.num_local_experts - 1}, capacity {self.capacity}, "
                f"rows {[int(c) for c in self.count]}>")


class CompactRecv:
    """What a dispatch of an object that receives exactly (Moe(receive=Receive.EXACT))
    delivered: every row sent to this rank's experts, none dropped, packed expert after
    expert (strata_moe_dispatch_recv_into). Local expert e (global id first_expert + e) has
    counts[e] rows, x[offsets[e]:offsets[e + 1]]; src has (rank, token, slot) of each row.
    Write the experts' outputs into expert_y, row for row (combine reads them there unless
    given others of that shape). Buffers of the caller's framework, allocated for the step
    (numpy on the host, torch tensors on the host or x's GPU); counts and offsets are
    Python lists. Where the dispatch was told receive_buffers=False, or its framework is
    neither (a GPU array of another), x, src and expert_y are None until the caller's
    dispatch_recv_into gives buffers (combine then needs its expert_y)."""

    def __init__(self, moe, counts, x, x_scales, src, expert_y):
        self.num_local_experts = len(counts)
        self.first_expert = moe._first_expert
        self.counts = list(counts)
        self.offsets = [0]
        for count in counts:
            self.offsets.append(self.offsets[-1] + count)
        self.x, self.x_scales, self.src, self.expert_y = x, x_scales, src, expert_y

    @property
    def rows(self):
        return self.offsets[-1]

    def __repr__(self):
        return (f"<strata.CompactRecv experts {self.first_expert}.."
                f"{self.first_expert + self.num_local_experts - 1}, rows {self.counts}>")


@dataclasses.dataclass
class Stats:
    """The last completed step on this rank (strata_moe_stats_t), copied."""

    steps: int
    route: t.Route
    num_local_experts: int
    tokens_per_expert: list
    pull_mask: int  # bit e: expert e moved in Pull form
    tokens_to_nodes: int
    tokens_round_two: int
    bytes_to_nodes: int
    dispatch_ns: int
    combine_ns: int
    phase_ns: dict  # Phase -> nanoseconds
    host_copied_bytes: int
    net_bounce: bool
    commands_posted: int
    post_delay_ns: int
    memory: dict  # strata_moe_memory_t's parts -> bytes this rank holds (fixed at creation)
    exchange: t.Exchange  # how rows cross the network (fixed at creation)
    exchange_rounds: int  # rounds of a step's dispatch across nodes


class _Kept:
    """A library object destroyed once nothing uses it: its Python owner until close(), and
    every array over its memory, which holds this through its buffer. So an array read after
    close() reads memory that is still mapped, never freed memory."""

    __slots__ = ("_destroy", "_handle", "_also", "_stream")

    def __init__(self, destroy, handle, also=None):
        self._destroy, self._handle = destroy, handle
        self._also = also  # what the library object may still call (a group's bootstrap)
        self._stream = None  # the stream it still runs on, where closed mid-step

    def keep_stream(self, stream):
        """The library object still runs on stream (its Moe was closed mid-step): the
        stream stays until the object is destroyed (a strata Stream: not destroyed before)."""
        self._stream = stream
        if hasattr(stream, "_keep"):
            stream._keep()

    def __del__(self):
        if self._handle is not None:
            self._destroy(self._handle)
            self._handle = None
        stream, self._stream = self._stream, None
        if stream is not None and hasattr(stream, "_release"):
            stream._release()


class Layout:
    """Where a batch's tokens go (strata_moe_layout_create): reusable for every dispatch
    whose routing (topk_idx) is the same. Made by Moe.layout(); close() frees it."""

    def __init__(self, moe, handle, num_tokens):
        self._moe = moe
        self._handle = handle
        self.num_tokens = num_tokens
        moe._layouts.add(self)

    def close(self):
        """Free it; not while a step that uses it is in progress (ValueError)."""
        if self._handle is None:
            return
        if self._moe._step_layout is self:
            raise ValueError("the layout is in use by the step in progress: close it after "
                             "the step's combine")
        self._moe._lib.strata_moe_layout_destroy(self._handle)
        self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None) is not None and self._moe._lib is not None:
            self._moe._lib.strata_moe_layout_destroy(self._handle)


def check_routing(topk_idx, num_experts):
    """Raise ValueError where topk_idx ([num_tokens, topk], numpy or torch) names an expert
    outside -1..num_experts - 1, or one expert twice for a token: the library would skip
    those entries and report STRATA_ERR_INVALID from inside a step, which the other ranks
    are in already. Checked first, nothing has started and the call can be made again."""
    import numpy as np

    ids = topk_idx.detach().cpu().numpy() if b.is_torch(topk_idx) else np.asarray(topk_idx)
    bad = (ids < -1) | (ids >= num_experts)
    if bad.any():
        t, k = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"topk_idx[{t}][{k}] = {int(ids[t, k])} is not an expert (-1 or "
                         f"0..{num_experts - 1}); {int(bad.sum())} such entries")
    ordered = np.sort(ids, axis=1)
    twice = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
    if twice.any():
        t, k = (int(i) for i in np.argwhere(twice)[0])
        raise ValueError(f"token {t} names expert {int(ordered[t, k])} twice in topk_idx; "
                         f"{int(twice.any(axis=1).sum())} tokens repeat an expert")


@contextlib.contextmanager
def aborting(*moes):
    """Run a step's calls; where one raises, end the step in progress on each of moes
    (Moe.abort_step) before the error goes on, so that the next step can start. An object
    that failed (Moe.failed) is left as it is, and an error of the abort itself (the step
    failed: the object can only be closed) is logged by the library and leaves the first
    error to be raised."""
    try:
        yield
    except BaseException:
        for moe in moes:
            if moe._moe is not None and moe._failed is None:
                try:
                    moe.abort_step()
                except StrataError:
                    pass  # logged by the library; the first error is the one to raise
        raise


class Moe:
    """Expert-parallel dispatch and combine over a communicator (strata_moe_create).

    Collective: every rank creates it with the same parameters. Rank r owns experts
    [r * E / W, (r + 1) * E / W). A step is dispatch then combine, or their halves
    dispatch_send, dispatch_recv, combine_send, combine_recv, on every rank in that order.

    Buffers are numpy arrays, torch tensors or arrays exposing __cuda_array_interface__ or
    __dlpack__, in the communicator's memory (host memory on the host backend, its GPU on
    CUDA and HIP), C-contiguous, read and written in place (topk_idx is read on the host: a
    GPU tensor's is copied there). The recv's arrays are of the framework of x: numpy or
    torch on the host, torch tensors on the same GPU, otherwise an Array that DLPack and
    CUDA array interface consumers take; count and src are host memory:
    x [num_tokens, hidden] in dtype (fp8: uint8 bytes, with x_scales [num_tokens,
    hidden / 128] float32), topk_idx [num_tokens, topk] int64 (-1: no expert),
    topk_weights [num_tokens, topk] float32, out [num_tokens, hidden] in combine_dtype.
    A buffer that fails its check raises ValueError before the library is called: the call
    did not happen, and the same call can be made again with a good buffer. A StrataError
    from dispatch with status STRATA_ERR_INVALID or STRATA_ERR_CAPACITY leaves the step
    running (its recv attribute holds what arrived): combine must still be called, or
    abort_step() to end it without results. aborting(moe) does the latter for a block of
    calls that raises. A step that fails (STRATA_ERR_PEER_FAILED, or STRATA_ERR_TIMEOUT from
    its combine) fails the object: failed holds that error, the step is over for the
    package too (its layout may be closed), and every later call of a step raises a
    StrataError of STRATA_ERR_PEER_FAILED saying so; close() it.
    """

    def __init__(self, comm, num_experts, topk, hidden, max_tokens, dtype="fp32",
                 combine_dtype=None, capacity=0, expert_alignment=0, route=t.Route.DEFAULT,
                 mode=t.Mode.DEFAULT, mode_file=None, combine=t.Combine.DEFAULT,
                 exchange=t.Exchange.DEFAULT, receive=t.Receive.DEFAULT):
        self._lib = None
        self._moe = None
        self._memory = b.memory_of(comm)  # where the buffers must be: the host, or its GPU
        self.dtype = _dtype(dtype, "dtype")
        if combine_dtype is None and self.dtype is t.Dtype.FP8_E4M3:
            raise ValueError("dtype fp8_e4m3 needs a combine_dtype (bf16, fp16 or fp32)")
        self.combine_dtype = self.dtype if combine_dtype is None else _dtype(combine_dtype,
                                                                             "combine_dtype")
        self.num_experts, self.topk, self.hidden = num_experts, topk, hidden
        self.max_tokens = max_tokens
        params = t.MoeParams(num_experts=num_experts, topk=topk, hidden=hidden,
                             dtype=self.dtype, combine_dtype=self.combine_dtype,
                             max_tokens=max_tokens, capacity=capacity,
                             expert_alignment=expert_alignment, route=int(t.Route(route)),
                             mode=int(t.Mode(mode)),
                             mode_file=None if mode_file is None else str(mode_file).encode(),
                             combine=int(t.Combine(combine)),
                             exchange=int(t.Exchange(exchange)),
                             receive=int(t.Receive(receive)))
        lib = library()
        handle = ctypes.c_void_p()
        status = lib.strata_moe_create(comm.handle, ctypes.byref(params), ctypes.byref(handle))
        if status != 0:
            _group.raise_interrupt(comm)  # Ctrl-C in a group communicator's collective wins
        check(status, "strata_moe_create")
        self._adopt(lib, handle, comm)

    def recreate(self, comm, expert_owner=None):
        """Collective over comm (typically this object's communicator's shrink()): a Moe
        with this one's parameters and expert ids on comm's ranks (strata_moe_recreate).
        expert_owner: for each expert, the rank of comm that holds it from now on, or -1 to
        mask it; None keeps every expert where it was and masks those of ranks that are
        gone. Routing keeps naming the same expert ids; a slot naming a masked expert is
        left out of the step (masked() says which tokens lost one). Close this object
        afterwards."""
        return Moe._recreated(self, comm, expert_owner, self.num_experts, self.topk,
                              self.hidden, self.max_tokens, self.dtype, self.combine_dtype)

    @classmethod
    def join(cls, comm, expert_owner, num_experts, topk, hidden, max_tokens, dtype="fp32",
             combine_dtype=None):
        """On a process that joined the job (Communicator.join), its part in the others'
        recreate(comm, expert_owner): the same collective with no old object. The object's
        parameters come from the others; the shape given here must be theirs (this side's
        buffer checks use it)."""
        dtype = _dtype(dtype, "dtype")
        combine_dtype = dtype if combine_dtype is None else _dtype(combine_dtype, "combine_dtype")
        if expert_owner is None:
            raise ValueError("a joining process needs expert_owner")
        return cls._recreated(None, comm, expert_owner, num_experts, topk, hidden, max_tokens,
                              dtype, combine_dtype)

    @classmethod
    def _recreated(cls, old, comm, expert_owner, num_experts, topk, hidden, max_tokens, dtype,
                   combine_dtype):
        lib = library()
        handle = ctypes.c_void_p()
        owner = None
        if expert_owner is not None:
            values = [int(rank) for rank in expert_owner]
            if len(values) != num_experts:
                raise ValueError(f"expert_owner has {len(values)} entries, not {num_experts}")
            owner = (ctypes.c_int32 * len(values))(*values)
        check(lib.strata_moe_recreate(None if old is None else old.handle, comm.handle, owner,
                                      ctypes.byref(handle)), "strata_moe_recreate")
        fresh = cls.__new__(cls)
        fresh._memory = b.memory_of(comm)
        fresh.dtype, fresh.combine_dtype = dtype, combine_dtype
        fresh.num_experts, fresh.topk, fresh.hidden = num_experts, topk, hidden
        fresh.max_tokens = max_tokens
        fresh._adopt(lib, handle, comm)
        return fresh

    def expert_id(self, local_expert):
        """The expert id of this rank's local place local_expert, -1 for a place no expert
        uses (strata_moe_expert_id): after recreate() a rank's experts need not follow on
        from recv.first_expert."""
        return self._lib.strata_moe_expert_id(self.handle, int(local_expert))

    def masked(self, layout=None):
        """Per token of layout (None: the routing of the last dispatch() the library read,
        which a dispatch it then refused, as one inside a stream capture, may have
        rebuilt), how many of its top-k slots named a masked expert (strata_moe_masked), as
        a list."""
        if layout is not None and (not isinstance(layout, Layout) or layout._moe is not self):
            raise ValueError("layout must be a Layout made by this Moe's layout()")
        if layout is not None and layout._handle is None:
            # the library would read NULL as "the last dispatch()'s routing"
            raise ValueError("layout is closed")
        handle = None if layout is None else layout._handle
        # The library writes an entry (0 or more) per token of its plan, as many as the plan
        # holds: room for the most any plan holds, -1 after them. The last dispatch's plan
        # is counted so, since which dispatches rebuilt it cannot be told from their
        # statuses alone (one refused after the routing was read returns what one refused
        # before does).
        room = max(self.max_tokens, 0 if layout is None else layout.num_tokens, 1)
        per_token = (ctypes.c_int32 * room)()
        ctypes.memset(per_token, 0xFF, ctypes.sizeof(per_token))
        check(self._lib.strata_moe_masked(self.handle, handle, per_token, None),
              "strata_moe_masked")
        entries = list(per_token)
        count = entries.index(-1) if -1 in entries else room
        return entries[:count if layout is None else layout.num_tokens]

    def _adopt(self, lib, handle, comm):
        """This object's state around a library handle just made on comm."""
        self._lib, self._moe, self._comm = lib, handle, comm
        self._kept = _Kept(lib.strata_moe_destroy, handle,  # views hold it too
                           also=getattr(comm, "_group", None))
        self._layouts = weakref.WeakSet()                    # made by layout(), still open
        comm._moes.add(self)
        self._recv = None          # the step's Recv (or CompactRecv), once dispatched
        self._exact = False        # whether its dispatches gave CompactRecvs (Receive.EXACT)
        self._step_x = None        # the step's tokens: an exact receive's buffers follow them
        self._first_expert = 0     # of the last recv
        self._receive_buffers = True  # the exact receive: the facade makes the buffers
        self._places = self.num_experts // comm.size  # local expert places, as dispatched
        self._step_layout = None   # the layout the step in progress uses
        self._step_tokens = None   # its number of tokens
        self._failed = None        # the StrataError that failed the library object
        self._step_inputs = None   # buffers the library reads until the step's half returns
        self._framework = "numpy"  # of the step's buffers: the arrays it returns
        self._stream = None        # the stream set on the library object (what keeps it)
        self._stream_handle = None  # ... as an int, None: no stream
        self._pending = _work.Pending()  # buffers of calls its stream may not have run yet
        self._last_event = None    # recorded after the last call on a GPU stream

    # --- buffers -------------------------------------------------------------------------

    def _tokens(self, x, x_scales, num_tokens):
        addr = b.address(x, "x", b.DTYPE_NAMES[self.dtype], (num_tokens, self.hidden),
                         ("num_tokens", "hidden"), aligned=True, memory=self._memory)
        if self.dtype is t.Dtype.FP8_E4M3:
            if x_scales is None:
                raise ValueError("x_scales is required with dtype fp8_e4m3")
            return addr, b.address(x_scales, "x_scales", "float32",
                                   (num_tokens, self.hidden // 128),
                                   ("num_tokens", "hidden / 128"), memory=self._memory)
        if x_scales is not None:
            raise ValueError(f"x_scales is only for dtype fp8_e4m3, not {self.dtype.name.lower()}")
        return addr, None

    def _check_rows(self, num_tokens):
        if num_tokens > self.max_tokens:
            raise ValueError(f"{num_tokens} tokens, more than max_tokens {self.max_tokens}")

    def _routing(self, topk_idx, name="topk_idx"):
        """(num_tokens, the address, the host buffer to keep): the library reads the
        routing on the host, so a GPU tensor's is copied there (the host waits for it)."""
        num_tokens = b.rows_of(topk_idx, name)
        self._check_rows(num_tokens)
        host = b.host_copy(topk_idx)
        return num_tokens, b.address(host, name, "int64", (num_tokens, self.topk),
                                     ("num_tokens", "topk")), host

    def _expert_y(self, expert_y):
        """(the address, the buffer to keep) of the experts' outputs: expert_y, or for a
        CompactRecv's step where it is None, the recv's own."""
        if isinstance(self._recv, CompactRecv):
            expert_y = self._recv.expert_y if expert_y is None else expert_y
            if expert_y is None and self._recv.rows == 0:
                return None, None  # nothing to return
            if expert_y is None:
                raise ValueError(f"combine of {self._recv.rows} rows received into buffers "
                                 f"of the caller's needs expert_y [rows, hidden]")
            return b.address(expert_y, "expert_y", b.DTYPE_NAMES[self.combine_dtype],
                             (self._recv.rows, self.hidden), ("rows", "hidden"), aligned=True,
                             memory=self._memory), expert_y
        if expert_y is None:
            return None, None
        if self._recv is None:
            raise ValueError("expert_y given before any dispatch: its shape comes from the recv")
        shape = (self._recv.num_local_experts, self._recv.capacity, self.hidden)
        return b.address(expert_y, "expert_y", b.DTYPE_NAMES[self.combine_dtype], shape,
                         ("num_local_experts", "capacity", "hidden"),
                         memory=self._memory), expert_y

    def _combine_buffers(self, topk_weights, out):
        n = self._step_tokens
        if n is None:
            n = b.rows_of(out, "out")  # out of order: the library refuses the call
        weights = b.address(topk_weights, "topk_weights", "float32", (n, self.topk),
                            ("num_tokens", "topk"), memory=self._memory)
        result = b.address(out, "out", b.DTYPE_NAMES[self.combine_dtype], (n, self.hidden),
                           ("num_tokens", "hidden"), writable=True, aligned=True,
                           memory=self._memory)
        return weights, result

    # --- the step --------------------------------------------------------------------------

    def _receive(self, status, raw, call):
        if raw.num_local_experts > 0:  # a recreated object may have more than its experts
            self._places = raw.num_local_experts
        if raw.num_local_experts > 0 and raw.capacity == 0:  # an object that receives exactly
            return self._receive_exact(status, raw, call)
        recv = Recv(raw, self.hidden, self.dtype, self.combine_dtype, self._framework,
                    self._memory, self._kept) if raw.num_local_experts > 0 else None
        if recv is not None:  # a refused call delivers nothing: the step's recv stands
            self._recv = recv
        return _delivered(status, call, recv)

    def _receive_exact(self, status, raw, call):
        """The exact receive's step after its dispatch: the counts (the host waits for
        them), then, unless the caller gives its own (receive_buffers=False, or a framework
        the facade cannot allocate in), buffers of that many rows and the rows into them."""
        self._first_expert, self._exact = raw.first_expert, True
        self._recv = None  # until the counts came: no former step's buffers for this one
        self._recv = self._compact_recv()
        if self._receive_buffers and (self._framework != "array" or self._memory.kind == "cpu"):
            rows, like, framework = self._recv.rows, self._step_x, self._framework
            x = b.empty(b.DTYPE_NAMES[self.dtype], (rows, self.hidden), framework,
                        self._memory, like)
            scales = None
            if self.dtype is t.Dtype.FP8_E4M3:
                scales = b.empty("float32", (rows, self.hidden // 128), framework,
                                 self._memory, like)
            src = b.empty("int32", (rows, 3), framework, self._memory, like)
            self._recv.expert_y = b.empty(b.DTYPE_NAMES[self.combine_dtype],
                                          (rows, self.hidden), framework, self._memory, like)
            self._order_after_allocation()
            self.dispatch_recv_into(x, src, scales)
        return _delivered(status, call, self._recv)

    def _compact_recv(self):
        """The step's CompactRecv, its buffers still to come: the host waits for the counts."""
        return CompactRecv(self, self.dispatch_counts(), None, None, None, None)

    def _order_after_allocation(self):
        """Buffers torch just made may reuse memory its current stream still works on: a
        step on another stream waits for that stream first."""
        if self._memory.kind == "cpu" or self._stream_handle is None:
            return
        current = _work.current_stream(self._memory, self._framework)
        if current != self._stream_handle:
            event = _work.record(self._memory, current)
            event.make_wait(self._stream_handle)

    def dispatch_recv_into(self, x, src, x_scales=None):
        """The exact receive (an object made with receive=Receive.EXACT), after dispatch_recv
        and once per step: every row sent to this rank's experts into x [rows, hidden] in
        dtype, src [rows, 3] int32 (rank, token, slot) and, for fp8, x_scales [rows,
        hidden / 128] float32, in the communicator's memory, packed expert after expert
        (local expert e's from the sum of dispatch_counts()[:e] on), rows at least the
        counts' sum (strata_moe_dispatch_recv_into). On the step's stream; dispatch() does
        it with buffers it makes, unless told not to (receive_buffers=False); the step's
        CompactRecv then takes these, and combine needs expert_y given. The buffers must
        live until the step's combine."""
        self._usable("strata_moe_dispatch_recv_into")
        if self._recv is None and self._exact:
            # the dispatch's wait for the counts failed (TIMEOUT): this step's recv from here
            self._recv = self._compact_recv()
        rows = b.rows_of(x, "x")
        xs = b.address(x, "x", b.DTYPE_NAMES[self.dtype], (rows, self.hidden),
                       ("rows", "hidden"), writable=True, aligned=True, memory=self._memory)
        ss = b.address(src, "src", "int32", (rows, 3), ("rows", "3"), writable=True,
                       memory=self._memory)
        scales = None
        if self.dtype is t.Dtype.FP8_E4M3 or x_scales is not None:
            if x_scales is None:
                raise ValueError("x_scales is required with dtype fp8_e4m3")
            scales = b.address(x_scales, "x_scales", "float32", (rows, self.hidden // 128),
                               ("rows", "hidden / 128"), writable=True, memory=self._memory)
        status = self._lib.strata_moe_dispatch_recv_into(self.handle, xs, scales, ss, rows)
        self._after_call(x, src, x_scales)
        if self._note_failure(status, "strata_moe_dispatch_recv_into"):
            raise self._failed
        check(status, "strata_moe_dispatch_recv_into")
        if isinstance(self._recv, CompactRecv):  # the step's recv: its rows are these
            self._recv.x, self._recv.x_scales, self._recv.src = x, x_scales, src

    def layout(self, topk_idx):
        """A reusable Layout for this routing (strata_moe_layout_create)."""
        num_tokens, idx, _ = self._routing(topk_idx)
        handle = ctypes.c_void_p()
        check(self._lib.strata_moe_layout_create(self.handle, idx, num_tokens,
                                                 ctypes.byref(handle)),
              "strata_moe_layout_create")
        return Layout(self, handle, num_tokens)

    # Every call of a step below takes stream=None, async_op=False and previous_event=None:
    # - stream: where the call's work runs (_work.resolve): a strata Stream
    #   (Communicator.stream()), a framework's GPU stream or a raw handle; None runs it
    #   before returning, or, for torch GPU tensors, on torch's current stream. One step's
    #   calls take the same stream; it may change between steps.
    # - async_op: return a Work at once instead of the result; Work.wait() orders what comes
    #   next after the work (on a GPU, the current stream waits; on the host backend, the
    #   host), Work.synchronize() waits on the host. Without it every call, each half
    #   (dispatch_send, combine_send) and abort_step included, has finished its work on
    #   return: on a stream the host waits for it, and errors the stream found are raised.
    # - previous_event: a Work (of this or another object) the call is ordered after.

    def _set_stream(self, handle, keeper):
        if handle != self._stream_handle:
            check(self._lib.strata_moe_set_stream(self.handle, handle), "strata_moe_set_stream")
            if isinstance(self._stream, Stream):
                self._stream._users.discard(self)
            if self._memory.kind == "cpu":
                self._pending.clear()  # host streams: the library waited for the old one
            if isinstance(keeper, Stream):
                keeper._users.add(self)
        self._stream, self._stream_handle = keeper, handle

    def _begin(self, stream, previous_event, buffer=None):
        """Before a call: its stream set (buffer: one of the call's buffers, whose framework
        the results take), after previous_event."""
        if buffer is not None:
            self._framework = b.framework_of(buffer)
        handle, keeper = _work.resolve(stream, self._memory, self._framework)
        if handle == 0:  # the default stream; libstrata reads NULL as "a stream of its own"
            if self._memory.kind == "cuda":
                handle = _gpu.CUDA_STREAM_LEGACY
            else:  # HIP names no handle for it: the call runs after it, without a stream
                _gpu.runtime("hip").stream_synchronize(0)
                handle, keeper = None, None
        if previous_event is not None:
            if handle is None or self._memory.kind == "cpu":
                previous_event.synchronize()
            else:
                previous_event.wait(handle)
        self._set_stream(handle, keeper)

    def _leave_stream(self):
        """Back to no stream (the library orders later work after the stream's)."""
        if self._stream_handle is not None and self._moe is not None:
            self._set_stream(None, None)

    def _after_call(self, *keep):
        """Right after a library call, whether it then raises or not: on a stream, an event
        recorded behind it, and the call's buffers kept until that has passed."""
        self._last_event = None
        if self._stream_handle is not None:
            if self._memory.kind != "cpu":
                self._last_event = _work.record(self._memory, self._stream_handle)
            self._pending.add(self._last_event, keep)

    def _finish(self, result, async_op):
        work = Work(self if self._stream_handle is not None else None, result,
                    self._last_event, self._framework)
        return work if async_op else work.synchronize()

    def _synchronize(self):
        """Wait for the object's work (strata_moe_synchronize); its buffers may go then."""
        try:
            status = self._lib.strata_moe_synchronize(self.handle)
            if self._note_failure(status, "strata_moe_synchronize"):
                raise self._failed
            check(status, "strata_moe_synchronize")
        finally:
            self._pending.clear()

    def dispatch(self, x, topk_idx, x_scales=None, stream=None, async_op=False,
                 previous_event=None, receive_buffers=True):
        """Send each token to its top-k experts' ranks and return what this rank's experts
        received (strata_moe_dispatch), as a Recv; on an object that receives exactly, a
        CompactRecv (receive_buffers=False: its counts alone, for dispatch_recv_into)."""
        self._usable("strata_moe_dispatch")
        num_tokens, idx, host_idx = self._routing(topk_idx)
        xs, scales = self._tokens(x, x_scales, num_tokens)
        self._begin(stream, previous_event, x)
        raw = t.MoeRecv()
        status = self._lib.strata_moe_dispatch(self.handle, xs, scales, idx, num_tokens,
                                               ctypes.byref(raw))
        self._after_call(x, x_scales, host_idx)
        if _delivers(raw):  # the library took the call: this step is the one to combine
            self._step_x, self._receive_buffers = x, receive_buffers
            self._step_tokens = num_tokens
        if self._note_failure(status, "strata_moe_dispatch"):
            raise self._failed
        return self._finish(self._receive(status, raw, "strata_moe_dispatch"), async_op)

    def dispatch_send(self, layout, x, x_scales=None, stream=None, async_op=False,
                      previous_event=None):
        """First half of dispatch: send x along layout (strata_moe_dispatch_send). x must
        stay untouched until dispatch_recv returns; the layout, until the step's combine."""
        self._usable("strata_moe_dispatch_send")
        if not isinstance(layout, Layout) or layout._handle is None or layout._moe is not self:
            raise ValueError("layout must be an open Layout made by this Moe's layout()")
        xs, scales = self._tokens(x, x_scales, layout.num_tokens)
        self._begin(stream, previous_event, x)
        status = self._lib.strata_moe_dispatch_send(self.handle, layout._handle, xs, scales)
        self._after_call(x, x_scales)
        if self._note_failure(status, "strata_moe_dispatch_send"):
            raise self._failed
        # A refusal (out of order: another step is in progress) leaves that step's record.
        # The facade's checks leave the library no reason to take part without the layout.
        check(status, "strata_moe_dispatch_send")
        self._step_x, self._step_layout, self._step_tokens = x, layout, layout.num_tokens
        self._step_inputs = (x, x_scales)
        return self._finish(None, async_op)

    def dispatch_recv(self, stream=None, async_op=False, previous_event=None,
                      receive_buffers=True):
        """Second half: wait for this rank's experts' tokens (strata_moe_dispatch_recv);
        receive_buffers as for dispatch."""
        self._usable("strata_moe_dispatch_recv")
        self._begin(stream, previous_event)
        raw = t.MoeRecv()
        status = self._lib.strata_moe_dispatch_recv(self.handle, ctypes.byref(raw))
        self._after_call(self._step_inputs)
        if self._note_failure(status, "strata_moe_dispatch_recv"):
            raise self._failed
        if _delivers(raw):  # taken: the library is done with x (refused: it may still read
            self._step_inputs = None  # x, or a combine_send's expert_y)
            self._receive_buffers = receive_buffers
        return self._finish(self._receive(status, raw, "strata_moe_dispatch_recv"), async_op)

    def combine_send(self, expert_y=None, stream=None, async_op=False, previous_event=None):
        """First half of combine: return the experts' outputs (expert_y, shaped like the
        recv's; None: recv.expert_y) to their tokens' ranks (strata_moe_combine_send)."""
        self._usable("strata_moe_combine_send")
        ys, expert_y = self._expert_y(expert_y)
        self._begin(stream, previous_event)
        status = self._lib.strata_moe_combine_send(self.handle, ys)
        self._after_call(expert_y)
        if self._note_failure(status, "strata_moe_combine_send"):
            raise self._failed
        check(status, "strata_moe_combine_send")  # refused: what the step reads stays kept
        # The library may read expert_y until combine_recv returns (on one node it does).
        self._step_inputs = expert_y
        return self._finish(None, async_op)

    def combine_recv(self, topk_weights, out, stream=None, async_op=False, previous_event=None):
        """Second half: out[t] = sum over k of topk_weights[t, k] * y(t, k), written in place
        (strata_moe_combine_recv). Returns out."""
        self._usable("strata_moe_combine_recv")
        weights, result = self._combine_buffers(topk_weights, out)
        self._begin(stream, previous_event, out)
        steps = self._steps_done()
        status = self._lib.strata_moe_combine_recv(self.handle, weights, result)
        self._after_call(topk_weights, out, self._step_inputs)
        _, error = self._step_end(status, "strata_moe_combine_recv", steps)
        if error is not None:
            raise error
        return self._finish(out, async_op)

    def combine(self, topk_weights, out, expert_y=None, stream=None, async_op=False,
                previous_event=None):
        """Both halves of combine (strata_moe_combine). Returns out."""
        self._usable("strata_moe_combine")
        ys, expert_y = self._expert_y(expert_y)
        weights, result = self._combine_buffers(topk_weights, out)
        self._begin(stream, previous_event, out)
        steps = self._steps_done()
        status = self._lib.strata_moe_combine(self.handle, ys, weights, result)
        self._after_call(topk_weights, out, expert_y)
        ended, error = self._step_end(status, "strata_moe_combine", steps)
        if not ended and expert_y is not None:
            # its combine_send half may have been taken: the library reads expert_y until
            # the step's combine_recv
            self._step_inputs = (self._step_inputs, expert_y)
        if error is not None:
            raise error
        return self._finish(out, async_op)

    def abort_step(self, async_op=False):
        """End the step in progress on this rank without finishing it (strata_moe_abort_step):
        after a call of the step raised, or when the experts' outputs cannot be computed.
        The halves the other ranks wait for run, so they finish the step; this rank's
        tokens get no results. Unless combine_send ran, this rank's experts' results are
        withheld: a rank whose tokens had rows here gets a StrataError of
        STRATA_ERR_CANCELLED from its combine (its other terms are summed). Nothing in
        progress: nothing happens. Then the next step can start. It runs on the stream the
        step's calls ran on (a step's stream does not change mid-step); without async_op the
        host waits for it there. A refusal (STRATA_ERR_UNSUPPORTED inside a stream capture)
        leaves the step in progress; any other error failed the step and the object (see
        failed)."""
        self._usable("strata_moe_abort_step")
        status = self._lib.strata_moe_abort_step(self.handle)
        self._after_call(self._step_inputs)
        if status >= 0:  # ended (or none was in progress)
            self._end_step()
        self._note_failure(status, "strata_moe_abort_step", ends_step=True)
        check(status, "strata_moe_abort_step")
        return self._finish(None, async_op)

    def expert_wait(self, expert, timeout=None):
        """Wait until local expert `expert`'s rows of the step are all in recv.x, and return
        how many there are (strata_moe_expert_wait): its compute can start while other
        experts' rows still arrive. For a dispatch on a stream with async_op=True, after
        the call (dispatch_recv, or dispatch) returned its Work; without a stream the rows
        are all in already. recv.src is complete only once the Work is. timeout in seconds,
        None: the object's (STRATA_MOE_TIMEOUT), 0: poll. A StrataError of
        STRATA_ERR_TIMEOUT leaves the step running; STRATA_ERR_PEER_FAILED ends it."""
        if isinstance(expert, bool) or not isinstance(expert, int):
            raise TypeError(f"expert must be an int, not {type(expert).__name__}")
        self._usable("strata_moe_expert_wait")
        rows = ctypes.c_int32(0)
        status = self._lib.strata_moe_expert_wait(self.handle, expert, _timeout_ns(timeout),
                                                  ctypes.byref(rows))
        if self._note_failure(status, "strata_moe_expert_wait"):
            raise self._failed
        check(status, "strata_moe_expert_wait")
        return rows.value

    def dispatch_counts(self, timeout=None):
        """The rows every rank sent each local expert in the step, before its capacity, as a
        list (strata_moe_dispatch_counts): count[e] minus recv.count[e] of them were
        dropped. The node's dispatch counts before it moves any row, so after an async
        dispatch on a stream this returns while the rows still move (across nodes, once
        the other nodes' rows have arrived). timeout and errors: as expert_wait."""
        self._usable("strata_moe_dispatch_counts")
        places = self._places
        counts = (ctypes.c_int32 * max(places, 1))()
        status = self._lib.strata_moe_dispatch_counts(self.handle, _timeout_ns(timeout), counts)
        if self._note_failure(status, "strata_moe_dispatch_counts"):
            raise self._failed
        check(status, "strata_moe_dispatch_counts")
        return list(counts[:places])

    def _end_step(self):
        self._step_layout, self._step_tokens, self._step_inputs = None, None, None
        self._step_x = None

    def _steps_done(self):
        """How many steps the library object has completed (strata_moe_get_stats' steps)."""
        raw = t.MoeStats()
        check(self._lib.strata_moe_get_stats(self.handle, ctypes.byref(raw)),
              "strata_moe_get_stats")
        return raw.steps

    def _step_end(self, status, call, steps_before):
        """After call, which finishes the step (combine, combine_recv): forget the step
        where the library ended it, with results (status >= 0) or with an error the step
        found (its count of completed steps moved on). A refused call (out of order, or a
        buffer the library would not take) leaves the step, and its record, as they were.
        Returns (whether it ended, the StrataError to raise or None); the error is made
        first, since reading the count clears the thread's last error, its message."""
        error = None
        if status < 0:
            error = StrataError(status, call, status_string(status), last_error())
        ended = error is None or self._steps_done() != steps_before
        if ended:
            self._end_step()
        elif self._note_failure(status, call, ends_step=True, error=error):
            ended = True  # the step failed, and the object with it
        return ended, error

    def _note_failure(self, status, call, ends_step=False, error=None):
        """Whether status, just returned by call, says that the library object failed (see
        _SURVIVED; ends_step: call ends the step, which did not end). If so, remember it
        (failed) and forget the step: nothing can finish it, and its layout may go."""
        if status >= 0 or self._failed is not None:
            return self._failed is not None and status < 0
        if status != t.Status.STRATA_ERR_PEER_FAILED and not (ends_step
                                                            and status not in _SURVIVED):
            return False
        self._failed = error if error is not None else StrataError(
            status, call, status_string(status), last_error())
        self._end_step()
        return True

    @property
    def failed(self):
        """None, or the StrataError with which a step failed the library object (a peer
        failed, or a combine timed out): it can then only be closed."""
        return self._failed

    def _usable(self, call):
        """Raise where the library object failed: it refuses every call but destroy."""
        if self._failed is not None:
            status = t.Status.STRATA_ERR_PEER_FAILED
            raise StrataError(status, call, status_string(status),
                              f"the object failed in an earlier step ({self._failed}); it "
                              f"can only be closed")

    def _in_step(self):
        """Whether a step that this object's calls started is still in progress here."""
        return self._step_tokens is not None

    # --- modes and statistics ------------------------------------------------------------

    def _mask_words(self, mask):
        words = (self.num_experts + 63) // 64
        if mask is None:
            return None
        if mask < 0 or mask >> self.num_experts:
            raise ValueError(f"pull mask {mask:#x} has bits past expert {self.num_experts - 1}")
        return (ctypes.c_uint64 * words)(*[(mask >> (64 * w)) & (2**64 - 1)
                                           for w in range(words)])

    def set_pull_mask(self, dispatch_mask, combine_mask):
        """Move expert e in Pull form where bit e of the mask (a Python int) is set, in
        dispatch and in combine; None: all Push. Every rank sets the same, between steps."""
        check(self._lib.strata_moe_set_pull_mask(self.handle, self._mask_words(dispatch_mask),
                                                 self._mask_words(combine_mask)),
              "strata_moe_set_pull_mask")

    def stats(self):
        """The last completed step's statistics (strata_moe_get_stats), as a Stats."""
        raw = t.MoeStats()
        check(self._lib.strata_moe_get_stats(self.handle, ctypes.byref(raw)),
              "strata_moe_get_stats")
        per_expert = [raw.tokens_per_expert[e] if raw.tokens_per_expert else 0
                      for e in range(raw.num_local_experts)]
        words = (self.num_experts + 63) // 64
        mask = sum(raw.pull_mask[w] << (64 * w) for w in range(words)) if raw.pull_mask else 0
        return Stats(steps=raw.steps, route=t.Route(raw.route),
                     num_local_experts=raw.num_local_experts, tokens_per_expert=per_expert,
                     pull_mask=mask, tokens_to_nodes=raw.tokens_to_nodes,
                     tokens_round_two=raw.tokens_round_two, bytes_to_nodes=raw.bytes_to_nodes,
                     dispatch_ns=raw.dispatch_ns, combine_ns=raw.combine_ns,
                     phase_ns={p: raw.phase_ns[p] for p in t.Phase},
                     host_copied_bytes=raw.host_copied_bytes, net_bounce=bool(raw.net_bounce),
                     commands_posted=raw.commands_posted, post_delay_ns=raw.post_delay_ns,
                     memory={name: getattr(raw.memory, name)
                             for name, _ in t.MoeMemory._fields_},
                     exchange=t.Exchange(raw.exchange), exchange_rounds=raw.exchange_rounds)

    # --- lifetime --------------------------------------------------------------------------

    @property
    def handle(self):
        """The strata_moe_t * as a ctypes.c_void_p."""
        if self._moe is None:
            raise ValueError("the Moe is closed")
        return self._moe

    def close(self):
        """Close it and every Layout made by it (local). The library object
        (strata_moe_destroy) goes at once, or, where arrays of its Recvs are still alive,
        once the last of them is gone: they keep its memory until then."""
        if self._moe is not None:
            if self._stream_handle is not None:  # its work done before the stream may go
                self._lib.strata_moe_synchronize(self._moe)  # errors: logged, and moot now
                if self._lib.strata_moe_set_stream(self._moe, None) != 0:
                    # Refused mid-step: the library object (kept by views, maybe) still runs
                    # on the stream, so the stream stays as long as the object.
                    self._kept.keep_stream(self._stream)
                if isinstance(self._stream, Stream):
                    self._stream._users.discard(self)
                self._stream, self._stream_handle = None, None
                self._pending.clear()
            self._end_step()
            for layout in list(self._layouts):
                layout.close()
            self._moe = None
            self._recv = None
            self._kept = None  # destroyed here unless a view still holds it

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_moe", None) is not None:
            self.close()
