"""Point-to-point over the communicator's transfer engine: registered memory, descriptors a
peer writes to, paged and scatter writes, immediates counted at the target, and small
messages (docs/p2p.md). Communicator inherits these methods.

Regions are host memory (numpy arrays, CPU torch tensors, DLPack arrays on the host) or,
on a communicator of a GPU backend, device memory of that backend (CUDA or ROCm tensors and
arrays), which the network then reads and writes in place where its rails can register it.
"""
import ctypes
import time
import weakref

import numpy as np

from . import _buffers as b
from . import _types as t
from ._library import check
from .errors import StrataError

DESC_SIZE = 128  # STRATA_MEM_DESC_SIZE
WRITE_IMM = 1    # STRATA_WRITE_IMM
_DEFAULT_TIMEOUT_S = 60.0
# How long a call that gave up on its request waits for the cancel to end it (a cancelled
# receive ends at the engine's next sweep), and how long close() waits for every request
# left (a cancelled write ends once its chunks with the transport do, or its peer is
# declared failed, after STRATA_INTER_PEER_TIMEOUT). Past them nothing is freed early: the
# communicator holds what the request uses.
_CANCEL_WAIT_S = 1.0
_CLOSE_WAIT_S = 10.0
# What requests still in flight when their communicator closed used: the engine may reach
# it until it is torn down, which a communicator sharing it may outlive, so it stays to the
# process's exit.
_kept_to_exit = []


class Descriptor:
    """Where a peer may write: a registered region's descriptor (strata_mem_desc_t), as
    bytes to send to that peer (to_bytes) and to read back there (from_bytes)."""

    def __init__(self, raw):
        if len(raw) != DESC_SIZE:
            raise ValueError(f"a descriptor is {DESC_SIZE} bytes, not {len(raw)}")
        self._raw = bytes(raw)

    def to_bytes(self):
        return self._raw

    @classmethod
    def from_bytes(cls, data):
        return cls(bytes(data))

    def _struct(self):
        return (ctypes.c_uint8 * DESC_SIZE).from_buffer_copy(self._raw)

    def __repr__(self):
        return f"<strata.Descriptor {self._raw[:16].hex()}...>"


class Region:
    """A buffer registered with the communicator's engine (strata_mem_register): the source
    of writes from this rank, and, through its descriptor, their destination from a peer.
    Host memory, or device memory of the communicator's GPU backend (StrataError with
    STRATA_ERR_UNSUPPORTED where its rails cannot register device memory).

    It stays registered, and its buffer alive, until close() (or the end of a with block)
    or the communicator's close(): the communicator holds it, so dropping it deregisters
    and frees nothing (a peer holding its descriptor may still write there). close() must
    wait until no request of the caller's uses it; where a request given up in flight
    (dropped or closed before it ended) still reads from it, the deregistration waits for
    that request to end."""

    def __init__(self, comm, buffer):
        memory = b.memory_of(comm)
        backend = memory.kind
        d = b.describe(buffer, "buffer", memory)
        if d.memory.kind not in ("cpu", backend):
            also = "" if backend == "cpu" else f" and {backend.upper()} device memory"
            raise ValueError(f"buffer is {b._where(d.memory)}; this communicator "
                             f"({comm.device_backend} backend) registers host memory{also}")
        if not d.contiguous:
            raise ValueError("buffer is not C-contiguous: pass a contiguous copy")
        self.nbytes = int(np.prod(d.shape, dtype=np.int64)) * b._ITEMSIZES.get(d.dtype, 1)
        if self.nbytes == 0:
            raise ValueError("buffer is empty")
        self._comm, self.buffer, self._mem = comm, buffer, ctypes.c_void_p()
        self._open = False
        comm._p2p_reap()
        check(comm._lib.strata_mem_register(comm.handle, ctypes.c_void_p(d.address),
                                            self.nbytes, ctypes.byref(self._mem)),
              "strata_mem_register")
        self._open = True
        comm._p2p.regions[id(self)] = self  # until deregistered (_p2p_deregister)
        raw = (ctypes.c_uint8 * DESC_SIZE)()
        comm._lib.strata_mem_descriptor(self._mem, raw)
        self.descriptor = Descriptor(bytes(raw))

    @property
    def handle(self):
        if not self._open:
            raise ValueError("the region is closed")
        return self._mem

    def close(self):
        """Deregister it (once no request given up in flight reads from it) and let the
        communicator drop it. Idempotent; after the communicator's close(), nothing to do."""
        if self._open:
            self._open = False
            self._comm._p2p_close_region(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if not self._open else f"{self.nbytes} bytes"
        return f"<strata.Region {state}>"


class Request:
    """A transfer in flight (strata_request_t): wait() for it; close() gives it back. The
    regions and lists it uses stay referenced until it has ended: one closed (or dropped)
    while in flight is cancelled, and where the cancel has not ended it yet, the
    communicator holds it, and what it uses, until it ends or the communicator closes."""

    def __init__(self, comm, handle, keep):
        self._comm, self._req, self._keep = comm, handle, keep
        comm._p2p.requests.add(self)

    @property
    def handle(self):
        if not self._req:
            raise ValueError("the request is closed")
        self._comm.handle  # ValueError once the communicator is closed
        return self._req

    def test(self):
        """True once done (raising StrataError if it failed), False while in flight."""
        status = self._comm._lib.strata_request_test(self.handle)
        if status == t.Status.STRATA_INPROGRESS:
            return False
        check(status, "strata_request_test")
        return True

    def wait(self, timeout=_DEFAULT_TIMEOUT_S):
        """Wait until done; StrataError of STRATA_ERR_TIMEOUT leaves it running."""
        check(self._comm._lib.strata_request_wait(self.handle, _timeout_ms(timeout)),
              "strata_request_wait")

    def cancel(self):
        """Parts not yet posted are dropped; it ends with STRATA_ERR_CANCELLED (a receive
        at the engine's next sweep, a write once its posted chunks are done)."""
        if self._req and self._comm._comm is not None:
            self._comm._lib.strata_request_cancel(self._req)

    def close(self):
        """Give it back; one still in flight is cancelled first (above). Idempotent."""
        self._release(0.0)

    def _release(self, wait_s):
        """close(), waiting up to wait_s for the cancel of one in flight to end it."""
        req, keep = self._req, self._keep
        if req:
            self._req, self._keep = None, None
            self._comm._p2p.requests.discard(self)
            self._comm._p2p_give_back(req, keep, wait_s)

    def __del__(self):
        try:
            if getattr(self, "_req", None) and getattr(self, "_comm", None) is not None:
                self.close()  # never waits: cancels, or hands it to the communicator
        except Exception:  # the interpreter is exiting
            pass


def _timeout_ms(timeout):
    if timeout is None or not timeout >= 0:
        raise ValueError(f"timeout must be at least 0 seconds, not {timeout}")
    return int(timeout * 1000)


def _uint32_list(values, name):
    arr = np.ascontiguousarray(np.asarray(values), dtype=np.int64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty list of page indices")
    if arr.min() < 0 or arr.max() > 0xFFFFFFFF:
        raise ValueError(f"{name} has an index outside 0..4294967295")
    return np.ascontiguousarray(arr, dtype=np.uint32)


class _TransferPiece(ctypes.Structure):
    _fields_ = [("tensor", ctypes.c_uint32), ("src_rank", ctypes.c_int),
                ("src_offset", ctypes.c_size_t), ("dst_rank", ctypes.c_int),
                ("dst_offset", ctypes.c_size_t), ("length", ctypes.c_size_t)]


class TransferPlan:
    """A weight transfer plan (strata_transfer_plan_create), made by
    Communicator.transfer_plan: every round, execute() on every rank, then on destinations
    wait_tensor(t) or wait(). close() frees it (not its region)."""

    def __init__(self, comm, region, pieces, num_tensors, imm_base):
        table = (_TransferPiece * len(pieces))(*[_TransferPiece(*map(int, p)) for p in pieces])
        self._comm, self._region, self._plan = comm, region, ctypes.c_void_p()
        check(comm._lib.strata_transfer_plan_create(
                  comm.handle, region.handle if region is not None else None, table,
                  len(pieces), int(num_tensors), int(imm_base), ctypes.byref(self._plan)),
              "strata_transfer_plan_create")

    @property
    def handle(self):
        if not self._plan:
            raise ValueError("the plan is closed")
        self._comm.handle  # the plan runs on the communicator: ValueError once it is closed
        return self._plan

    def execute(self, timeout=_DEFAULT_TIMEOUT_S):
        """One round: a source writes its pieces and returns once they are written."""
        plan = self.handle
        if self._region is not None:
            self._region.handle  # ValueError once closed: the plan writes from it
        check(self._comm._lib.strata_transfer_plan_execute(plan, _timeout_ms(timeout)),
              "strata_transfer_plan_execute")

    def wait_tensor(self, tensor, timeout=_DEFAULT_TIMEOUT_S):
        """On a destination: tensor's pieces landing here in this round are all in."""
        check(self._comm._lib.strata_transfer_plan_wait_tensor(self.handle, int(tensor),
                                                                _timeout_ms(timeout)),
              "strata_transfer_plan_wait_tensor")

    def wait(self, timeout=_DEFAULT_TIMEOUT_S):
        """On a destination: every tensor landing here, this round."""
        check(self._comm._lib.strata_transfer_plan_wait(self.handle, _timeout_ms(timeout)),
              "strata_transfer_plan_wait")

    def close(self):
        if self._plan:
            self._comm._lib.strata_transfer_plan_destroy(self._plan)
            self._plan = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):  # the plan's own memory (no round runs once it is unreachable)
        try:
            if getattr(self, "_plan", None):
                self.close()
        except Exception:  # the interpreter is exiting
            pass


class _State:
    """What a communicator holds for point-to-point: every registered Region (until it is
    deregistered), those of them closed but waiting for a request to end (closing), the
    Request objects alive (weakly), and the requests given up while in flight, each as
    (handle, what it uses), until they end."""

    def __init__(self):
        self.regions = {}
        self.closing = {}
        self.requests = weakref.WeakSet()
        self.held = []


def _in_flight(lib, req):
    """Whether request req has not ended yet."""
    return lib.strata_request_test(req) == t.Status.STRATA_INPROGRESS


def _uses(keep, region):
    return keep is region or (isinstance(keep, tuple) and any(k is region for k in keep))


class _ScatterEntry(ctypes.Structure):
    _fields_ = [("src_offset", ctypes.c_size_t), ("dst_offset", ctypes.c_size_t),
                ("length", ctypes.c_size_t)]


class PointToPoint:
    """The communicator's point-to-point calls (mixed into Communicator)."""

    @property
    def _p2p(self):
        state = self.__dict__.get("_p2p_state")
        if state is None:
            state = self.__dict__.setdefault("_p2p_state", _State())
        return state

    def _p2p_give_back(self, req, keep, wait_s):
        """Free req once ended; one in flight is cancelled and waited for up to wait_s,
        then, where still in flight, held with keep until it ends (_p2p_reap)."""
        lib = self._lib
        if self._comm is None:  # closed without seeing it: the engine's state is unknown
            _kept_to_exit.append(keep)
            return
        if _in_flight(lib, req):
            lib.strata_request_cancel(req)
            if wait_s > 0:
                lib.strata_request_wait(req, _timeout_ms(wait_s))
            if _in_flight(lib, req):
                self._p2p.held.append((req, keep))
                return
        lib.strata_request_free(req)

    def _p2p_reap(self):
        """Free the requests given up in flight that have ended since, then deregister
        the closed regions none of those left reads from."""
        state = self.__dict__.get("_p2p_state")
        if state is None or self._comm is None or not (state.held or state.closing):
            return
        lib = self._lib
        held, state.held, still = state.held, [], []
        try:
            while held:
                if _in_flight(lib, held[-1][0]):
                    still.append(held.pop())
                else:
                    lib.strata_request_free(held.pop()[0])
        finally:
            state.held.extend(still)
            state.held.extend(held)
        for region in list(state.closing.values()):
            if not any(_uses(keep, region) for _, keep in state.held):
                self._p2p_deregister(region)

    def _p2p_deregister(self, region):
        state = self._p2p
        state.closing.pop(id(region), None)
        if state.regions.pop(id(region), None) is not None and region._mem:
            self._lib.strata_mem_deregister(self.handle, region._mem)
            region._mem = ctypes.c_void_p()

    def _p2p_close_region(self, region):
        """region.close(): deregistered now, or once the requests given up in flight that
        read from it end (waited for up to _CANCEL_WAIT_S here)."""
        if self._comm is None:
            return
        self._p2p.closing[id(region)] = region
        self._p2p_reap()
        deadline = time.monotonic() + _CANCEL_WAIT_S
        for req, keep in list(self._p2p.held):
            if _uses(keep, region):
                left = max(deadline - time.monotonic(), 0.0)
                self._lib.strata_request_wait(req, _timeout_ms(left))
        self._p2p_reap()

    def _p2p_close(self):
        """Before the communicator is destroyed: every request cancelled and waited for (up
        to _CLOSE_WAIT_S in all), then given back; every region deregistered. What a
        request still in flight uses stays to the process's exit (_kept_to_exit), and its
        regions registered until the engine is torn down."""
        state = self.__dict__.get("_p2p_state")
        if state is None or self._comm is None:
            return
        lib = self._lib
        pending = []
        for request in list(state.requests):
            if request._req:
                pending.append((request._req, request._keep))
                request._req, request._keep = None, None
        state.requests = weakref.WeakSet()
        pending.extend(state.held)
        state.held = []
        for req, _ in pending:
            if _in_flight(lib, req):
                lib.strata_request_cancel(req)
        deadline = time.monotonic() + _CLOSE_WAIT_S
        stuck = []
        for req, keep in pending:
            if _in_flight(lib, req):
                lib.strata_request_wait(req, _timeout_ms(max(deadline - time.monotonic(), 0)))
            if _in_flight(lib, req):
                stuck.append(keep)
            lib.strata_request_free(req)
        _kept_to_exit.extend(stuck)
        for region in list(state.regions.values()):
            region._open = False
            if any(_uses(keep, region) for keep in stuck):
                state.regions.pop(id(region))
                state.closing.pop(id(region), None)
                _kept_to_exit.append(region)  # its buffer; registered to the engine's end
            else:
                self._p2p_deregister(region)

    def register(self, buffer):
        """A Region of buffer (host memory, or the communicator's GPU memory), whose
        descriptor a peer can write to."""
        return Region(self, buffer)

    def write_paged(self, peer, src, dst, page_bytes, src_pages, dst_pages, imm=None):
        """Page src_pages[i] of src (a Region) to page dst_pages[i] of the peer's region dst
        (a Descriptor), page_bytes each, in one request (strata_write_paged). With imm, the
        peer's imm_wait(imm, self.list_imm_count(me)) returns once every page is in."""
        src_arr, dst_arr = _uint32_list(src_pages, "src_pages"), _uint32_list(dst_pages,
                                                                             "dst_pages")
        if src_arr.size != dst_arr.size:
            raise ValueError(f"src_pages has {src_arr.size} pages, dst_pages {dst_arr.size}")
        self._p2p_reap()
        req = ctypes.c_void_p()
        check(self._lib.strata_write_paged(
                  self.handle, int(peer), src.handle, dst._struct(), int(page_bytes),
                  src_arr.ctypes.data, dst_arr.ctypes.data, src_arr.size,
                  WRITE_IMM if imm is not None else 0, int(imm or 0), ctypes.byref(req)),
              "strata_write_paged")
        return Request(self, req, (src, src_arr, dst_arr))

    def write_scatter(self, peer, src, dst, entries, imm=None):
        """Each (src_offset, dst_offset, length) of entries from src (a Region) to the peer's
        region dst (a Descriptor), in one request (strata_write_scatter); imm as
        write_paged."""
        entries = list(entries)
        if not entries:
            raise ValueError("entries must not be empty")
        table = (_ScatterEntry * len(entries))(*[_ScatterEntry(*map(int, e)) for e in entries])
        self._p2p_reap()
        req = ctypes.c_void_p()
        check(self._lib.strata_write_scatter(self.handle, int(peer), src.handle, dst._struct(),
                                             table, len(entries),
                                             WRITE_IMM if imm is not None else 0,
                                             int(imm or 0), ctypes.byref(req)),
              "strata_write_scatter")
        return Request(self, req, (src, table))

    def transfer_plan(self, region, pieces, num_tensors, imm_base=1000):
        """Collective: a TransferPlan moving pieces, (tensor, src_rank, src_offset, dst_rank,
        dst_offset, length) each, between the ranks' regions (this rank's: region, or None
        where it neither sends nor receives); every rank passes the same pieces."""
        pieces = list(pieces)
        if not pieces:
            raise ValueError("pieces must not be empty")
        return TransferPlan(self, region, pieces, num_tensors, imm_base)

    def list_imm_count(self, peer):
        """Immediates one write_paged or write_scatter with imm from peer produces here."""
        return self._lib.strata_write_list_imm_count(self.handle, int(peer))

    def imm_wait(self, imm, count, peer=-1, timeout=_DEFAULT_TIMEOUT_S):
        """Wait for count arrivals of imm (from peer, or any with -1) and consume them."""
        check(self._lib.strata_imm_wait(self.handle, int(imm), int(count), int(peer),
                                        _timeout_ms(timeout)), "strata_imm_wait")

    def send_bytes(self, peer, data, timeout=_DEFAULT_TIMEOUT_S):
        """A small message (at most STRATA_INTER_MSG_SIZE bytes) to peer, waited for. Where
        the wait fails (STRATA_ERR_TIMEOUT, say), the send is cancelled: it may have gone
        or not."""
        data = bytes(data)
        _timeout_ms(timeout)  # checked before anything is sent
        self._p2p_reap()
        req = ctypes.c_void_p()
        check(self._lib.strata_send(self.handle, int(peer), data, len(data), ctypes.byref(req)),
              "strata_send")
        request = Request(self, req, data)
        try:
            request.wait(timeout)
        finally:
            request._release(_CANCEL_WAIT_S)

    def recv_bytes(self, peer=-1, capacity=65536, timeout=_DEFAULT_TIMEOUT_S):
        """The next message from peer (any with -1), as bytes. Where the wait fails
        (STRATA_ERR_TIMEOUT, say), the receive is cancelled, and takes no later message; one
        that landed while it was being cancelled is returned."""
        _timeout_ms(timeout)  # checked before anything is posted
        self._p2p_reap()
        buf = ctypes.create_string_buffer(capacity)
        req = ctypes.c_void_p()
        check(self._lib.strata_recv(self.handle, int(peer), buf, capacity, ctypes.byref(req)),
              "strata_recv")
        request = Request(self, req, buf)
        try:
            request.wait(timeout)
        except StrataError:
            request.cancel()
            self._lib.strata_request_wait(req, _timeout_ms(_CANCEL_WAIT_S))
            status = self._lib.strata_request_test(req)
            landed = status in (t.Status.STRATA_OK, t.Status.STRATA_ERR_CANCELLED)
            if landed and self._lib.strata_request_source(req) >= 0:
                length = self._lib.strata_request_length(req)  # it came as it was cancelled
                request.close()
                return buf.raw[:length]
            request.close()  # held, with buf, where the cancel has not ended it yet
            raise
        except BaseException:  # Ctrl-C: given up (held with buf until it ends), and raised
            request.close()
            raise
        length = self._lib.strata_request_length(req)
        request.close()
        return buf.raw[:length]
