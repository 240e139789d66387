"""Which stream a Moe call runs on, and the Work an async_op call returns.

A call's stream is a strata Stream (Communicator.stream(), any backend), a framework's GPU
stream (torch.cuda.Stream, or anything with .cuda_stream or .ptr, such as CuPy's), a raw
cudaStream_t / hipStream_t as an int, or None. None runs the call before it returns, except
where the buffers are torch GPU tensors: then the call goes on torch's current stream, as a
framework's collective does. On a GPU stream each call is followed by an event, which
Work.wait() makes the caller's current stream wait for and Work.synchronize() waits for on
the host; buffers of calls whose event has not passed are kept alive until it has.
"""
from . import _gpu
from .comm import Stream


def _backend(memory):
    return "cuda" if memory.kind == "cuda" else "hip"


def resolve(stream, memory, framework):
    """(the stream's handle as an int or None, the object to keep while it is set).

    memory: where the communicator's buffers are; framework: of the call's buffers."""
    if stream is None:
        if memory.kind != "cpu" and framework == "torch":
            import torch

            current = torch.cuda.current_stream(memory.device)
            return int(current.cuda_stream), current
        return None, None
    if isinstance(stream, Stream):
        if stream.handle is None:
            raise ValueError("stream is a closed strata Stream")
        return stream.handle.value, stream
    if memory.kind == "cpu":
        raise ValueError(f"stream {stream!r} is a GPU stream; this communicator runs on the "
                         f"host backend: pass a strata Stream (Communicator.stream()) or None")
    for attribute in ("cuda_stream", "ptr"):
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute)), stream
    if isinstance(stream, int):
        return stream, stream
    raise ValueError(f"stream must be a strata Stream, a torch.cuda.Stream, a stream with .ptr "
                     f"or .cuda_stream, or a cudaStream_t as an int, not {type(stream).__name__}")


def current_stream(memory, framework):
    """The stream a caller's next work goes on: torch's current one for torch tensors, else
    the legacy default stream (0; a CuPy caller passes its own: work.wait(stream))."""
    handle, _ = resolve(None, memory, framework)
    return 0 if handle is None else handle


class Pending:
    """Buffers of calls that a stream may still be running, each with the event recorded
    after its call (None on the host backend, where the object's synchronize frees all)."""

    def __init__(self):
        self._entries = []  # (_gpu.Event or None, buffers)

    def add(self, event, buffers):
        self._entries.append((event, buffers))
        self._entries = [(e, b) for e, b in self._entries if e is None or not e.passed()]

    def clear(self):
        """Everything the stream ran is done (the object was synchronized)."""
        self._entries = []


def record(memory, stream):
    """An event recorded on stream (a handle of memory's GPU) after what was enqueued there."""
    return _gpu.Event(_gpu.runtime(_backend(memory)), stream, memory.device)


class Work:
    """What a Moe call given async_op=True returns: its result, complete once wait() (or
    synchronize()) has returned.

    On the host backend wait() waits on the host for the object's work
    (strata_moe_synchronize) and raises what the step found then (a StrataError of
    STRATA_ERR_CAPACITY, say). On a GPU stream wait() makes the caller's current stream (or
    the one given) wait for the call's event and returns at once; synchronize() waits on the
    host and raises what the kernels found. The buffers the call reads or writes are kept
    alive until the work is done; they must not be touched before."""

    def __init__(self, moe, result, event=None, framework=None):
        self.result = result
        self._moe = moe      # None: complete already
        self._event = event  # GPU: recorded after the call on its stream
        self._framework = framework  # of the call's buffers: whose current stream waits

    def wait(self, stream=None):
        """Order what comes next after the call's work; its result (a Recv, out, or None).
        GPU: stream (default: the current one of the result's framework) waits, the host
        does not. Host backend: the host waits."""
        moe = self._moe
        if moe is None or moe._moe is None:  # done, or close() synchronized the object
            self._moe = None
            return self.result
        if self._event is None:
            self._moe = None
            moe._synchronize()
            return self.result
        if stream is None:
            handle = current_stream(moe._memory, self._framework)
        else:
            handle = resolve(stream, moe._memory, self._framework)[0]
        self._event.make_wait(handle)
        return self.result

    def synchronize(self):
        """Wait on the host for the call's work and raise what it found; its result."""
        moe, self._moe = self._moe, None
        if moe is not None and moe._moe is not None:
            if self._event is not None:
                self._event.synchronize()
            moe._synchronize()
        return self.result

    def is_completed(self):
        """Whether the call's work is known to be done (synchronize() returned, or wait()
        on the host backend)."""
        return self._moe is None
