"""The GPU runtime (CUDA's cudart or HIP's amdhip64) through ctypes, for what the package
does with device memory besides handing it to libstrata: which GPU a pointer is on, events
recorded after a call and waited for on a stream or the host, and (for tests and tools)
allocations and copies. Loaded on first use; nothing here runs on the host backend.
"""
import contextlib
import ctypes
import glob
import os

from .errors import StrataError
from . import _types as t

# cudaErrorNotReady and hipErrorNotReady; hipErrorInvalidValue
_NOT_READY = 600
_HIP_INVALID_VALUE = 1
# cudaMemcpyKind / hipMemcpyKind
COPY_TO_DEVICE, COPY_TO_HOST = 1, 2
# cudaStreamLegacy: the default stream of the whole process (0 would mean "none" to
# libstrata, which then runs on a stream of its own)
CUDA_STREAM_LEGACY = 1

# The runtime's library: a copy already loaded in the process first (torch's or
# libstrata's), so that events and streams come from the one runtime the caller uses.
_LIBRARIES = {
    "cuda": ("libcudart.so", ["libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"],
             ["/usr/local/cuda/lib64/libcudart.so.*", "/usr/local/cuda-*/lib64/libcudart.so.*"]),
    "hip": ("libamdhip64.so", ["libamdhip64.so.6", "libamdhip64.so.5"],
            ["/opt/rocm/lib/libamdhip64.so.*", "/opt/rocm-*/lib/libamdhip64.so.*"]),
}


class _PointerAttributes(ctypes.Structure):
    # cudaPointerAttributes (CUDA 11 and later) and hipPointerAttribute_t share this prefix
    _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int),
                ("device_pointer", ctypes.c_void_p), ("host_pointer", ctypes.c_void_p),
                ("reserved", ctypes.c_byte * 64)]


def _load(backend):
    plain, versions, patterns = _LIBRARIES[backend]
    names = [plain] + versions
    for name in names:
        try:
            return ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        except OSError:
            continue
    candidates = names + [p for pattern in patterns for p in sorted(glob.glob(pattern))]
    errors = []
    for candidate in candidates:
        try:
            return ctypes.CDLL(candidate)
        except OSError as err:
            errors.append(str(err))
    raise StrataError(t.Status.STRATA_ERR_UNSUPPORTED, f"loading the {backend} runtime",
                      f"{plain} not found ({'; '.join(errors[:2]) or 'no candidate'}); set "
                      f"LD_LIBRARY_PATH to the toolkit's library folder")


class Runtime:
    """One backend's runtime: "cuda" or "hip"."""

    def __init__(self, backend):
        self.backend = backend
        self._lib = _load(backend)
        self._prefix = "cuda" if backend == "cuda" else "hip"
        self._device_types = (2, 3)  # cudaMemoryTypeDevice, Managed
        if backend == "hip":
            version = ctypes.c_int()
            self._call("RuntimeGetVersion", ctypes.byref(version))
            if version.value < 60000000:  # before ROCm 6: Host 0, Device 1, Unified 3, Managed 4
                self._device_types = (1, 3, 4)

    def _call(self, name, *args):
        rc = getattr(self._lib, self._prefix + name)(*args)
        if rc != 0:
            text = getattr(self._lib, self._prefix + "GetErrorString")
            text.restype = ctypes.c_char_p
            raise StrataError(t.Status.STRATA_ERR_INTERNAL, self._prefix + name,
                              f"{self.backend} error {rc}: {text(rc).decode()}")

    def pointer_device(self, address):
        """The GPU a pointer's memory is on, or None for host memory (plain, pinned, or
        unknown to HIP); StrataError where the runtime cannot tell (no driver, no GPU)."""
        attributes = _PointerAttributes()
        rc = getattr(self._lib, self._prefix + "PointerGetAttributes")(
            ctypes.byref(attributes), ctypes.c_void_p(address))
        if rc == _HIP_INVALID_VALUE and self.backend == "hip":  # memory HIP never saw
            return None
        if rc != 0:
            self._call("PointerGetAttributes", ctypes.byref(attributes),
                       ctypes.c_void_p(address))
        return attributes.device if attributes.type in self._device_types else None

    @contextlib.contextmanager
    def on_device(self, device):
        """Make device current (events and the default stream belong to one), then restore."""
        current = ctypes.c_int()
        self._call("GetDevice", ctypes.byref(current))
        if device is None or device == current.value:
            yield
            return
        self._call("SetDevice", ctypes.c_int(device))
        try:
            yield
        finally:
            self._call("SetDevice", current)

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

    def stream_synchronize(self, stream):
        self._call("StreamSynchronize", ctypes.c_void_p(stream))

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
    """An event recorded on a stream of device's after a call, destroyed once nothing refers
    to it."""

    def __init__(self, rt, stream, device):
        self._rt = rt
        self.device = device
        with rt.on_device(device):
            self.handle = rt.event()
            rt.record(self.handle, stream)

    def passed(self):
        return self._rt.query(self.handle)

    def synchronize(self):
        self._rt.event_synchronize(self.handle)

    def make_wait(self, stream):
        """Work enqueued on stream (of the same device) from now on waits for the event."""
        with self._rt.on_device(self.device):
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
    """The runtime of a communicator's device backend ("cuda" or "hip"), loaded once (a
    failure to load is remembered too, and raised again)."""
    if backend not in _runtimes:
        try:
            _runtimes[backend] = Runtime(backend)
        except StrataError as err:
            _runtimes[backend] = err
    found = _runtimes[backend]
    if isinstance(found, StrataError):
        raise found
    return found


def visible(backend):
    """Whether the backend's runtime loads and sees a GPU (for tests that need one)."""
    try:
        count = ctypes.c_int()
        runtime(backend)._call("GetDeviceCount", ctypes.byref(count))
        return count.value > 0
    except (StrataError, OSError):
        return False
