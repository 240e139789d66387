"""Buffers strata reads and writes in place: numpy arrays or CPU torch tensors.

A buffer is checked (type, device, dtype, shape, contiguity, alignment, writability) before
its address goes to the library, and ValueError says which of them is wrong. Nothing is
copied: the library reads and writes the caller's memory.
"""
import ctypes
import math

import numpy as np

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


def is_torch(obj):
    """Whether obj is a torch tensor (without importing torch where it is not used)."""
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def _dtype_name(obj):
    return obj.dtype.name if isinstance(obj, np.ndarray) else str(obj.dtype).replace("torch.", "")


def _contiguous(obj):
    return obj.flags.c_contiguous if isinstance(obj, np.ndarray) else obj.is_contiguous()


def _address(obj):
    return obj.ctypes.data if isinstance(obj, np.ndarray) else obj.data_ptr()


def _shape_text(shape, names):
    if names is None:
        return str(tuple(shape))
    return "(" + ", ".join(f"{n}={s}" for n, s in zip(names, shape)) + ")"


def address(obj, name, dtype, shape, names=None, writable=False, aligned=False):
    """The address of obj's first element, once obj is checked.

    dtype: the element type's name ("float32", "int64", "bfloat16", ...); shape: the
    expected shape; names: the dimensions' names for the message; writable: the library
    writes it; aligned: it must start on a 16-byte boundary.
    """
    if is_torch(obj):
        if obj.device.type != "cpu":
            raise ValueError(f"{name} is on {obj.device}: strata's Python package passes host "
                             f"memory (numpy arrays, CPU tensors)")
        if writable and obj.requires_grad:
            raise ValueError(f"{name} requires grad: strata writes it in place, where autograd "
                             f"cannot follow (use torch.no_grad() and a tensor without grad)")
    else:
        _check_kind(obj, name)
    if writable and isinstance(obj, np.ndarray) and not obj.flags.writeable:
        raise ValueError(f"{name} is a read-only array: strata writes it in place")
    if _dtype_name(obj) != dtype:
        raise ValueError(f"{name} has dtype {_dtype_name(obj)}, expected {dtype}")
    if isinstance(obj, np.ndarray) and not obj.dtype.isnative:
        raise ValueError(f"{name} is in {'big' if obj.dtype.byteorder == '>' else 'little'}-"
                         f"endian byte order, not this machine's: pass obj.astype(obj.dtype."
                         f"newbyteorder('='))")
    if isinstance(obj, np.ndarray) and not obj.flags.aligned:
        raise ValueError(f"{name} is not aligned to its elements' size: pass a copy "
                         f"(numpy.ascontiguousarray allocates an aligned one)")
    if tuple(obj.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(obj.shape)}, expected "
                         f"{_shape_text(shape, names)}")
    if not _contiguous(obj):
        raise ValueError(f"{name} is not C-contiguous (strided or transposed): pass a "
                         f"contiguous copy (numpy.ascontiguousarray, tensor.contiguous())")
    addr = _address(obj)
    if aligned and addr % ALIGNMENT != 0:
        raise ValueError(f"{name} starts at {addr:#x}, not on a {ALIGNMENT}-byte boundary "
                         f"(a slice of a larger buffer?): pass a buffer that starts aligned")
    return addr


def _check_kind(obj, name):
    if not is_torch(obj) and not isinstance(obj, np.ndarray):
        raise ValueError(f"{name} must be a numpy array or a torch tensor, not "
                         f"{type(obj).__name__}")


def rows_of(obj, name):
    """The first dimension of a 2-D buffer (its number of tokens), checked to exist."""
    _check_kind(obj, name)
    if len(obj.shape) != 2:
        raise ValueError(f"{name} must be 2-D (num_tokens, columns), not shape "
                         f"{tuple(obj.shape)}")
    return int(obj.shape[0])


def view(addr, dtype, shape, torch_like, strides=None, owner=None):
    """An array over library memory at addr (no copy): numpy, or torch where torch_like.

    strides in bytes (None: C-contiguous). owner: what keeps the memory mapped (the
    library object's keeper), held as long as the array: garbage collection or an explicit
    close of the Python object never unmaps memory under a live view.
    """
    # bf16 bits as int16: numpy has no bfloat16, torch 1.13 no uint16 to view them from
    numpy_dtype = np.dtype(np.int16 if dtype == "bfloat16" else dtype)
    shape = tuple(int(s) for s in shape)
    if strides is None:
        strides, step = [], numpy_dtype.itemsize
        for size in reversed(shape):
            strides.insert(0, step)
            step *= size
    if math.prod(shape) == 0 or not addr:
        array = np.zeros(shape, dtype=numpy_dtype)
    else:
        nbytes = sum((s - 1) * st for s, st in zip(shape, strides)) + numpy_dtype.itemsize
        memory = (ctypes.c_uint8 * nbytes).from_address(addr)
        memory._strata_owner = owner
        array = np.ndarray(shape, dtype=numpy_dtype, buffer=memory, strides=tuple(strides))
    if not torch_like:
        return array
    import torch

    tensor = torch.from_numpy(array)
    return tensor.view(torch.bfloat16) if dtype == "bfloat16" else tensor
