"""Point-to-point over the communicator's transfer engine: registered memory, descriptors a
peer writes to, paged and scatter writes, immediates counted at the target, and small
messages (docs/p2p.md). Communicator inherits these methods.

Regions are host memory (numpy arrays, CPU torch tensors, DLPack arrays on the host) or,
on a communicator of a GPU backend, device memory of that backend (CUDA or ROCm tensors and
arrays), which the network then reads and writes in place where its rails can register it.
"""
import ctypes

import numpy as np

from . import _buffers as b
from ._library import check

DESC_SIZE = 128  # STRATA_MEM_DESC_SIZE
WRITE_IMM = 1    # STRATA_WRITE_IMM
_DEFAULT_TIMEOUT_S = 60.0


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
    STRATA_ERR_UNSUPPORTED where its rails cannot register device memory). Keeps the buffer
    alive; close() (or the end of a with block) deregisters it, which must
    wait until no request uses it."""

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
        check(comm._lib.strata_mem_register(comm.handle, ctypes.c_void_p(d.address),
                                            self.nbytes, ctypes.byref(self._mem)),
              "strata_mem_register")
        raw = (ctypes.c_uint8 * DESC_SIZE)()
        comm._lib.strata_mem_descriptor(self._mem, raw)
        self.descriptor = Descriptor(bytes(raw))

    @property
    def handle(self):
        if not self._mem:
            raise ValueError("the region is closed")
        return self._mem

    def close(self):
        if self._mem:
            self._comm._lib.strata_mem_deregister(self._comm.handle, self._mem)
            self._mem = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if not self._mem else f"{self.nbytes} bytes"
        return f"<strata.Region {state}>"


class Request:
    """A transfer in flight (strata_request_t): wait() for it; close() gives it back (once
    done, or after cancel()). The regions and lists it uses stay referenced until then."""

    def __init__(self, comm, handle, keep):
        self._comm, self._req, self._keep = comm, handle, keep

    def test(self):
        """True once done (raising StrataError if it failed), False while in flight."""
        status = self._comm._lib.strata_request_test(self._req)
        if status == 1:  # STRATA_INPROGRESS
            return False
        check(status, "strata_request_test")
        return True

    def wait(self, timeout=_DEFAULT_TIMEOUT_S):
        """Wait until done; StrataError of STRATA_ERR_TIMEOUT leaves it running."""
        check(self._comm._lib.strata_request_wait(self._req, _timeout_ms(timeout)),
              "strata_request_wait")

    def cancel(self):
        self._comm._lib.strata_request_cancel(self._req)

    def close(self):
        if self._req:
            self._comm._lib.strata_request_free(self._req)
            self._req, self._keep = None, None

    def __del__(self):
        if getattr(self, "_req", None) and getattr(self, "_comm", None) is not None:
            self.close()


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
        return self._plan

    def execute(self, timeout=_DEFAULT_TIMEOUT_S):
        """One round: a source writes its pieces and returns once they are written."""
        check(self._comm._lib.strata_transfer_plan_execute(self.handle, _timeout_ms(timeout)),
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


class _ScatterEntry(ctypes.Structure):
    _fields_ = [("src_offset", ctypes.c_size_t), ("dst_offset", ctypes.c_size_t),
                ("length", ctypes.c_size_t)]


class PointToPoint:
    """The communicator's point-to-point calls (mixed into Communicator)."""

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
        """A small message (at most STRATA_INTER_MSG_SIZE bytes) to peer, waited for."""
        data = bytes(data)
        req = ctypes.c_void_p()
        check(self._lib.strata_send(self.handle, int(peer), data, len(data), ctypes.byref(req)),
              "strata_send")
        Request(self, req, data).wait(timeout)

    def recv_bytes(self, peer=-1, capacity=65536, timeout=_DEFAULT_TIMEOUT_S):
        """The next message from peer (any with -1), as bytes."""
        buf = ctypes.create_string_buffer(capacity)
        req = ctypes.c_void_p()
        check(self._lib.strata_recv(self.handle, int(peer), buf, capacity, ctypes.byref(req)),
              "strata_recv")
        request = Request(self, req, buf)
        request.wait(timeout)
        length = self._lib.strata_request_length(req)
        request.close()
        return buf.raw[:length]
