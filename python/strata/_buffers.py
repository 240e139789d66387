"""Buffers strata reads and writes in place: numpy arrays, torch tensors (CPU or GPU), and
any object exposing CUDA's array interface (__cuda_array_interface__: CuPy, Numba) or
DLPack (__dlpack__: JAX, CuPy, TensorFlow, ROCm frameworks).

A buffer is checked (kind, where its memory is, dtype, shape, contiguity, alignment,
writability) before its address goes to the library, and ValueError says which of them is
wrong. Nothing is copied: the library reads and writes the caller's memory. Memory of the
library's comes back as arrays of the caller's framework: numpy or torch on the host,
torch tensors on the caller's GPU, and otherwise an Array that frameworks take through
DLPack (or CUDA's array interface).
"""
import collections
import ctypes
import math

import numpy as np

from . import _dlpack
from ._types import Dtype

# Element types by the name numpy and torch share (torch's without "torch."); fp8 rows
# travel as their bytes, bf16 only in torch (numpy has no bfloat16).
DTYPE_NAMES = {
    Dtype.BF16: "bfloat16",
    Dtype.FP16: "float16",
    Dtype.FP32: "float32",
    Dtype.FP8_E4M3: "uint8",
}

ALIGNMENT = 16  # the library's rows are whole 16-byte units

# fp8 rows travel as their bytes: a framework's own fp8 e4m3 type (torch.float8_e4m3fn, in
# torch 2.1 and later) is taken wherever those bytes are.
SAME_BYTES = {"uint8": ("float8_e4m3fn",)}

# Where a buffer's memory is: kind "cpu" (host), "cuda" or "rocm"; device: the GPU's number as
# the runtime and the frameworks name it (cudaSetDevice's, torch's cuda:N; None: host, or not
# known).
Memory = collections.namedtuple("Memory", "kind device")
HOST = Memory("cpu", None)

# CUDA array interface type strings (little-endian) of the element types strata meets
_TYPESTRS = {"<f4": "float32", "<f2": "float16", "<i8": "int64", "<i4": "int32",
             "|u1": "uint8", "<u1": "uint8", "|i1": "int8", "<f8": "float64"}
_TYPESTR_OF = {"float32": "<f4", "float16": "<f2", "int64": "<i8", "int32": "<i4",
               "uint8": "|u1"}
_ITEMSIZES = {"float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
              "uint8": 1, "int8": 1, "float64": 8, "int16": 2, "uint16": 2}


def memory_of(comm):
    """Where a communicator's buffers are: the host, or its GPU, by the runtime's number
    for it (comm.gpu_ordinal; comm.gpu is its place in the node's topology, another number
    where the process sees only some of the node's GPUs)."""
    backend = comm.device_backend
    if backend == "host":
        return HOST
    ordinal = comm.gpu_ordinal
    return Memory("cuda" if backend == "cuda" else "rocm", ordinal if ordinal >= 0 else None)


def is_torch(obj):
    """Whether obj is a torch tensor (without importing torch where it is not used)."""
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def framework_of(obj):
    """The framework of the arrays to return for obj: "torch", "numpy", or "array"."""
    return "torch" if is_torch(obj) else "numpy" if isinstance(obj, np.ndarray) else "array"


def _where(memory):
    """Where memory is, as a message says it: "in host memory", "on CUDA GPU 0"."""
    if memory.kind == "cpu":
        return "in host memory"
    name = "CUDA" if memory.kind == "cuda" else "ROCm"
    return f"on {name} GPU {memory.device}" if memory.device is not None else f"in {name} memory"


class _Described:
    """What the checks need of a buffer, whatever its kind."""

    def __init__(self, address, shape, dtype, contiguous, memory, readonly=False,
                 requires_grad=False):
        self.address, self.shape, self.dtype = address, tuple(int(s) for s in shape), dtype
        self.contiguous, self.memory, self.readonly = contiguous, memory, readonly
        self.requires_grad = requires_grad


def _torch_memory(tensor):
    device = tensor.device
    if device.type == "cpu":
        return HOST
    import torch

    kind = "rocm" if getattr(torch.version, "hip", None) else "cuda"
    return Memory(kind, device.index) if device.type == "cuda" else Memory(device.type, None)


def _from_cuda_interface(obj, name, kind):
    """kind: "rocm" where the communicator drives HIP GPUs (CuPy on ROCm exposes HIP memory
    through CUDA's interface), else "cuda"."""
    info = obj.__cuda_array_interface__
    dtype = _TYPESTRS.get(info.get("typestr"))
    if dtype is None:
        raise ValueError(f"{name} has CUDA array typestr {info.get('typestr')!r}, not an "
                         f"element type strata moves")
    if info.get("mask") is not None:
        raise ValueError(f"{name} has a mask: strata reads and writes every element")
    shape = tuple(info["shape"])
    address, readonly = info["data"]
    strides = info.get("strides")
    contiguous = strides is None or _dlpack.c_order(shape, strides, _ITEMSIZES[dtype])
    memory = Memory(kind, None)
    if address:
        from . import _gpu

        try:
            rt = _gpu.runtime("hip" if kind == "rocm" else "cuda")
            device = rt.pointer_device(address)
            memory = Memory(kind, device) if device is not None else HOST
            if info.get("stream"):  # the producer's work on it is ordered before ours
                rt.stream_synchronize(info["stream"])
        except Exception:  # no runtime or no GPU here: the library's own checks remain
            pass
    return _Described(address or 0, shape, dtype, contiguous, memory,
                      readonly=bool(readonly))


def describe(obj, name, memory=HOST):
    """obj's address, shape, element type, contiguity and memory; ValueError for an object
    strata cannot read. memory: where the communicator's buffers are (it tells CUDA's array
    interface over HIP memory from CUDA's)."""
    if is_torch(obj):
        return _Described(obj.data_ptr(), obj.shape, str(obj.dtype).replace("torch.", ""),
                          obj.is_contiguous(), _torch_memory(obj),
                          requires_grad=obj.requires_grad)
    if isinstance(obj, np.ndarray):
        return _Described(obj.ctypes.data, obj.shape, obj.dtype.name, obj.flags.c_contiguous,
                          HOST, readonly=not obj.flags.writeable)
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cuda_interface(obj, name, "rocm" if memory.kind == "rocm" else "cuda")
    if hasattr(obj, "__dlpack__"):
        t = _dlpack.read(obj, name)
        return _Described(t.address, t.shape, t.dtype, t.contiguous(),
                          Memory(t.device, None if t.device == "cpu" else t.device_id))
    raise ValueError(f"{name} must be a numpy array, a torch tensor, or an array exposing "
                     f"__cuda_array_interface__ or __dlpack__, not {type(obj).__name__}")


def _shape_text(shape, names):
    if names is None:
        return str(tuple(shape))
    return "(" + ", ".join(f"{n}={s}" for n, s in zip(names, shape)) + ")"


def _check_memory(d, name, memory):
    if d.memory.kind != memory.kind:
        raise ValueError(f"{name} is {_where(d.memory)}; this communicator's buffers are "
                         f"{_where(memory)}")
    if None not in (d.memory.device, memory.device) and d.memory.device != memory.device:
        raise ValueError(f"{name} is {_where(d.memory)}; the communicator's buffers are "
                         f"{_where(memory)}")


def _check_numpy(obj, name, writable):
    if writable and not obj.flags.writeable:
        raise ValueError(f"{name} is a read-only array: strata writes it in place")
    if not obj.dtype.isnative:
        raise ValueError(f"{name} is in {'big' if obj.dtype.byteorder == '>' else 'little'}-"
                         f"endian byte order, not this machine's: pass obj.astype(obj.dtype."
                         f"newbyteorder('='))")
    if not obj.flags.aligned:
        raise ValueError(f"{name} is not aligned to its elements' size: pass a copy "
                         f"(numpy.ascontiguousarray allocates an aligned one)")


def address(obj, name, dtype, shape, names=None, writable=False, aligned=False, memory=HOST):
    """The address of obj's first element, once obj is checked.

    dtype: the element type's name ("float32", "int64", "bfloat16", ...); shape: the
    expected shape; names: the dimensions' names for the message; writable: the library
    writes it; aligned: it must start on a 16-byte boundary; memory: where it must be (the
    host, or the communicator's GPU: memory_of).
    """
    d = describe(obj, name, memory)
    _check_memory(d, name, memory)
    if writable and d.requires_grad:
        raise ValueError(f"{name} requires grad: strata writes it in place, where autograd "
                         f"cannot follow (use torch.no_grad() and a tensor without grad)")
    if isinstance(obj, np.ndarray):
        _check_numpy(obj, name, writable)
    elif writable and d.readonly:
        raise ValueError(f"{name} is read-only: strata writes it in place")
    if d.dtype != dtype and d.dtype not in SAME_BYTES.get(dtype, ()):
        raise ValueError(f"{name} has dtype {d.dtype}, expected {dtype}")
    if d.shape != tuple(shape):
        raise ValueError(f"{name} has shape {d.shape}, expected {_shape_text(shape, names)}")
    if not d.contiguous:
        raise ValueError(f"{name} is not C-contiguous (strided or transposed): pass a "
                         f"contiguous copy (numpy.ascontiguousarray, tensor.contiguous())")
    if aligned and d.address % ALIGNMENT != 0:
        raise ValueError(f"{name} starts at {d.address:#x}, not on a {ALIGNMENT}-byte boundary "
                         f"(a slice of a larger buffer?): pass a buffer that starts aligned")
    return d.address


def host_copy(obj):
    """obj as host memory strata can read: itself on the host, else a host copy (torch's
    .cpu(); the host waits for the tensor's stream)."""
    if is_torch(obj) and obj.device.type != "cpu":
        return obj.detach().cpu()
    return obj


def empty(dtype, shape, framework, memory, like=None):
    """A new C-contiguous array of dtype (a DTYPE_NAMES name) in the caller's framework, in
    memory (the communicator's): numpy or torch on the host, torch on a GPU (on like's
    device where like is a tensor there). Other frameworks allocate their own buffers."""
    shape = tuple(int(s) for s in shape)
    if framework == "torch":
        import torch

        device = like.device if is_torch(like) else "cpu"
        if memory.kind != "cpu" and device == "cpu":
            device = torch.device("cuda", memory.device or 0)
        return torch.empty(shape, dtype=getattr(torch, dtype), device=device)
    if memory.kind != "cpu":
        raise ValueError(f"the library allocates {dtype} buffers {_where(memory)} only as "
                         f"torch tensors: pass buffers of your own framework instead")
    return np.empty(shape, dtype=np.int16 if dtype == "bfloat16" else dtype)


def rows_of(obj, name):
    """The first dimension of a 2-D buffer (its number of tokens), checked to exist."""
    shape = describe(obj, name).shape
    if len(shape) != 2:
        raise ValueError(f"{name} must be 2-D (num_tokens, columns), not shape {shape}")
    return shape[0]


class Array:
    """Memory of the library's on a GPU (a Recv's rows) for a caller that is not torch:
    frameworks take it through DLPack (cupy.from_dlpack, jax.dlpack.from_dlpack,
    torch.from_dlpack) or, on CUDA, CUDA's array interface (cupy.asarray, numba). It keeps
    the library's memory mapped as long as it, or a tensor made from it, lives."""

    def __init__(self, address, dtype, shape, strides, memory, owner):
        self.address, self.dtype, self.shape = address, dtype, tuple(shape)
        self.strides = strides  # in elements, None: C order
        self.memory = memory
        self._owner = owner

    def __dlpack__(self, stream=None):
        # the capsule holds what keeps the memory, not this Array: strata reading its own
        # Array (_dlpack.read keeps the capsule while the Array lives) would otherwise keep
        # both alive for good
        return _dlpack.capsule(self.address, self.dtype, self.shape, self.strides,
                               self.memory.kind, self.memory.device, self._owner)

    def __dlpack_device__(self):
        return (_dlpack._DEVICE_TYPES[self.memory.kind], self.memory.device or 0)

    @property
    def __cuda_array_interface__(self):
        if self.memory.kind != "cuda" or self.dtype not in _TYPESTR_OF:
            raise AttributeError(f"no CUDA array interface for {self.dtype} "
                                 f"{_where(self.memory)}: use __dlpack__")
        size = _ITEMSIZES[self.dtype]
        strides = None if self.strides is None else tuple(s * size for s in self.strides)
        return {"shape": self.shape, "typestr": _TYPESTR_OF[self.dtype],
                "data": (self.address, False), "strides": strides, "version": 3,
                "stream": None}

    def __repr__(self):
        return f"<strata.Array {self.dtype}{list(self.shape)} {_where(self.memory)}>"


def _contiguous_strides(shape, itemsize):
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.insert(0, step)
        step *= size
    return strides


def view(addr, dtype, shape, framework, strides=None, owner=None, memory=HOST):
    """An array over library memory at addr (no copy) in the caller's framework ("numpy",
    "torch" or "array"): numpy or torch in host memory, torch or an Array on a GPU.

    strides in bytes (None: C-contiguous). owner: what keeps the memory mapped (the
    library object's keeper), held as long as the array: garbage collection or an explicit
    close of the Python object never unmaps memory under a live view.
    """
    shape = tuple(int(s) for s in shape)
    itemsize = _ITEMSIZES[dtype]
    strides = _contiguous_strides(shape, itemsize) if strides is None else list(strides)
    if memory.kind != "cpu":
        array = Array(addr, dtype, shape, [s // itemsize for s in strides], memory, owner)
        if framework != "torch":
            return array
        import torch.utils.dlpack

        return torch.utils.dlpack.from_dlpack(array.__dlpack__())
    # bf16 bits as int16: numpy has no bfloat16, torch 1.13 no uint16 to view them from
    numpy_dtype = np.dtype(np.int16 if dtype == "bfloat16" else dtype)
    if math.prod(shape) == 0 or not addr:
        array = np.zeros(shape, dtype=numpy_dtype)
    else:
        nbytes = sum((s - 1) * st for s, st in zip(shape, strides)) + numpy_dtype.itemsize
        memory_block = (ctypes.c_uint8 * nbytes).from_address(addr)
        memory_block._strata_owner = owner
        array = np.ndarray(shape, dtype=numpy_dtype, buffer=memory_block,
                           strides=tuple(strides))
    if framework != "torch":
        return array
    import torch

    tensor = torch.from_numpy(array)
    return tensor.view(torch.bfloat16) if dtype == "bfloat16" else tensor
