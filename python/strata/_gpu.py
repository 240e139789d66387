"""The GPU runtime (CUDA's cudart or HIP's amdhip64) through ctypes, for what the package
does with device memory besides handing it to libstrata: which GPU a pointer is on, events
recorded after a call and waited for on a stream or the host, and (for tests and tools)
allocations and copies. Loaded on first use; nothing here runs on the host backend.
"""
import ctypes
import ctypes.util
import glob

from .errors import StrataError
from . import _types as t

# cudaMemoryType / hipMemoryType
MEMORY_HOST, MEMORY_DEVICE, MEMORY_MANAGED = 1, 2, 3
# cudaErrorNotReady and hipErrorNotReady
_NOT_READY = 600
# cudaMemcpyKind / hipMemcpyKind
COPY_TO_DEVICE, COPY_TO_HOST = 1, 2

_LIBRARIES = {
    "cuda": ("cudart", ["libcudart.so", "libcudart.so.13", "libcudart.so.12",
                        "libcudart.so.11.0"],
             ["/usr/local/cuda/lib64/libcudart.so*", "/usr/local/cuda-*/lib64/libcudart.so*"]),
    "hip": ("amdhip64", ["libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"],
            ["/opt/rocm/lib/libamdhip64.so*", "/opt/rocm-*/lib/libamdhip64.so*"]),
}


class _PointerAttributes(ctypes.Structure):
    # cudaPointerAttributes (CUDA 11 and later) and hipPointerAttribute_t share this prefix
    _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int),
                ("device_pointer", ctypes.c_void_p), ("host_pointer", ctypes.c_void_p),
                ("reserved", ctypes.c_byte * 64)]


def _load(backend):
    short, names, patterns = _LIBRARIES[backend]
    found = ctypes.util.find_library(short)
    candidates = ([found] if found else []) + names
    for pattern in patterns:
        candidates += sorted(glob.glob(pattern), reverse=True)
    errors = []
    for candidate in candidates:
        try:
            return ctypes.CDLL(candidate)
        except OSError as err:
            errors.append(str(err))
    raise StrataError(t.Status.STRATA_ERR_UNSUPPORTED, f"loading the {backend} runtime",
                      f"lib{short} not found ({'; '.join(errors[:2]) or 'no candidate'}); "
                      f"set LD_LIBRARY_PATH to the toolkit's library folder")


class Runtime:
    """One backend's runtime: "cuda" or "hip"."""

    def __init__(self, backend):
        self.backend = backend
        self._lib = _load(backend)
        self._prefix = "cuda" if backend == "cuda" else "hip"

    def _call(self, name, *args):
        rc = getattr(self._lib, self._prefix + name)(*args)
        if rc != 0:
            text = getattr(self._lib, self._prefix + "GetErrorString")
            text.restype = ctypes.c_char_p
            raise StrataError(t.Status.STRATA_ERR_INTERNAL, self._prefix + name,
                              f"{self.backend} error {rc}: {text(rc).decode()}")

    def pointer_device(self, address):
        """(memory type, device index) of a pointer; (MEMORY_HOST, -1) for plain host
        memory the runtime does not know."""
        attributes = _PointerAttributes()
        self._call("PointerGetAttributes", ctypes.byref(attributes), ctypes.c_void_p(address))
        return attributes.type, attributes.device

    def event(self):
        """A new event without timing (cudaEventDisableTiming), as a c_void_p."""
        handle = ctypes.c_void_p()
        self._call("EventCreateWithFlags", ctypes.byref(handle), ctypes.c_uint(2))
        return handle

    def record(self, event, stream):
        self._call("EventRecord", event, ctypes.c_void_p(stream))

    def stream_wait(self, stream, event):
        """Work enqueued on stream after this waits for event."""
        self._call("StreamWaitEvent", ctypes.c_void_p(stream), event, ctypes.c_uint(0))

    def query(self, event):
        """Whether everything recorded before event has run (cudaEventQuery)."""
        rc = getattr(self._lib, self._prefix + "EventQuery")(event)
        if rc == _NOT_READY:
            return False
        if rc != 0:
            self._call("EventQuery", event)  # raises with the runtime's text
        return True

    def event_synchronize(self, event):
        self._call("EventSynchronize", event)

    def event_destroy(self, event):
        self._call("EventDestroy", event)

    def malloc(self, size):
        address = ctypes.c_void_p()
        self._call("Malloc", ctypes.byref(address), ctypes.c_size_t(size))
        return address.value

    def free(self, address):
        self._call("Free", ctypes.c_void_p(address))

    def copy(self, dst, src, size, kind):
        self._call("Memcpy", ctypes.c_void_p(dst), ctypes.c_void_p(src), ctypes.c_size_t(size),
                   ctypes.c_int(kind))

    def device_synchronize(self):
        self._call("DeviceSynchronize")


class Event:
    """An event recorded on a stream after a call, destroyed once nothing refers to it."""

    def __init__(self, rt, stream):
        self._rt = rt
        self.handle = rt.event()
        rt.record(self.handle, stream)

    def passed(self):
        return self._rt.query(self.handle)

    def synchronize(self):
        self._rt.event_synchronize(self.handle)

    def make_wait(self, stream):
        """Work enqueued on stream from now on waits for the event."""
        self._rt.stream_wait(stream, self.handle)

    def __del__(self):
        if getattr(self, "handle", None) is not None:
            try:
                self._rt.event_destroy(self.handle)
            except Exception:  # the runtime is shutting down with the interpreter
                pass
            self.handle = None


_runtimes = {}


def runtime(backend):
    """The runtime of a communicator's device backend ("cuda" or "hip"), loaded once."""
    if backend not in _runtimes:
        _runtimes[backend] = Runtime(backend)
    return _runtimes[backend]


def visible(backend):
    """Whether the backend's runtime loads and sees a GPU (for tests that need one)."""
    try:
        count = ctypes.c_int()
        rt = runtime(backend)
        rt._call("GetDeviceCount", ctypes.byref(count))
        return count.value > 0
    except (StrataError, OSError):
        return False

