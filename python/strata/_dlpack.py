"""DLPack through ctypes: reading the tensor a producer's __dlpack__() capsule describes, and
exporting memory of the library's as a capsule any framework's from_dlpack takes.

The structures are DLPack's ABI (dlpack.h, version 0.x, the one every framework speaks):
DLManagedTensor { DLTensor dl_tensor; void *manager_ctx; void (*deleter)(DLManagedTensor *) },
in a capsule named "dltensor" (renamed "used_dltensor" by the consumer that takes it).
"""
import ctypes
import threading
import weakref

# DLDeviceType values strata meets
KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_ROCM, KDL_ROCM_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 10, 11, 13
# DLDataTypeCode
_INT, _UINT, _FLOAT, _BFLOAT = 0, 1, 2, 4

# Where memory is, as the package names it: DLPack's device type -> (kind, host-readable)
DEVICE_KINDS = {KDL_CPU: "cpu", KDL_CUDA_HOST: "cpu", KDL_ROCM_HOST: "cpu", KDL_CUDA: "cuda",
                KDL_CUDA_MANAGED: "cuda", KDL_ROCM: "rocm"}
_DEVICE_TYPES = {"cpu": KDL_CPU, "cuda": KDL_CUDA, "rocm": KDL_ROCM}

# (code, bits) <-> the element type names numpy and torch share
_DTYPES = {(_FLOAT, 32): "float32", (_FLOAT, 16): "float16", (_BFLOAT, 16): "bfloat16",
           (_FLOAT, 64): "float64", (_INT, 64): "int64", (_INT, 32): "int32",
           (_INT, 16): "int16", (_INT, 8): "int8", (_UINT, 8): "uint8", (_UINT, 16): "uint16"}
_CODES = {name: key for key, name in _DTYPES.items()}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", _DELETER)]

_NAME = b"dltensor"
_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class Imported:
    """What a producer's capsule describes; holding it keeps the producer's memory (the
    capsule is never consumed here, so the producer's destructor frees it with this)."""

    def __init__(self, capsule, name):
        if not _api.PyCapsule_IsValid(capsule, _NAME):
            raise ValueError(f"{name}.__dlpack__() did not return an unused DLPack capsule")
        t = DLManagedTensor.from_address(_api.PyCapsule_GetPointer(capsule, _NAME)).dl_tensor
        self._capsule = capsule
        self.device = DEVICE_KINDS.get(t.device.device_type)
        if self.device is None:
            raise ValueError(f"{name} is on DLPack device type {t.device.device_type}, not "
                             f"host, CUDA or ROCm memory")
        self.device_id = t.device.device_id
        if t.dtype.lanes != 1 or (t.dtype.code, t.dtype.bits) not in _DTYPES:
            raise ValueError(f"{name} has DLPack dtype (code {t.dtype.code}, {t.dtype.bits} "
                             f"bits, {t.dtype.lanes} lanes), not an element type strata moves")
        self.dtype = _DTYPES[(t.dtype.code, t.dtype.bits)]
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        self.strides = None if not t.strides else tuple(t.strides[i] for i in range(t.ndim))
        self.address = (t.data or 0) + t.byte_offset
        self.itemsize = t.dtype.bits // 8

    def contiguous(self):
        """Whether the elements are in C order with no gaps."""
        return self.strides is None or c_order(self.shape, self.strides, 1)


def c_order(shape, strides, unit):
    """Whether strides (in units of unit: 1 for elements, the item size for bytes) lay the
    elements out in C order with no gaps."""
    step = unit
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != step:
            return False
        step *= size
    return True


# What each object read through DLPack gave: its capsule's owner keeps the memory valid (a
# producer may export a copy), so it lives as long as the object does.
_imports = weakref.WeakKeyDictionary()


def read(obj, name):
    """obj's memory as an Imported, from obj.__dlpack__(), kept while obj lives (where obj
    can be weakly referenced; otherwise while the caller holds the Imported)."""
    imported = Imported(obj.__dlpack__(), name)
    try:
        _imports[obj] = imported
    except TypeError:
        pass
    return imported


# --- exporting ----------------------------------------------------------------------------

_exported = {}  # address of a DLManagedTensor -> what it needs alive until its deleter
_exported_lock = threading.RLock()  # a collection inside may run a capsule's destructor


def _callbacks():
    """The DLPack deleter and the capsule destructor. They hold what they use themselves:
    at interpreter exit the module's globals are cleared before the last capsules go (a
    capsule still held then would find no ctypes)."""
    exported, lock = _exported, _exported_lock
    addressof, cast, py_object = ctypes.addressof, ctypes.cast, ctypes.py_object
    is_valid, get_pointer, name = _api.PyCapsule_IsValid, _api.PyCapsule_GetPointer, _NAME
    managed_pointer = ctypes.POINTER(DLManagedTensor)

    @_DELETER
    def delete(managed):
        with lock:
            exported.pop(addressof(managed.contents), None)

    @ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    def capsule_destructor(capsule):
        """A capsule that nobody consumed (still named "dltensor") frees what it holds."""
        obj = cast(capsule, py_object)
        if is_valid(obj, name):
            delete(cast(get_pointer(obj, name), managed_pointer))

    return delete, capsule_destructor


_delete, _capsule_destructor = _callbacks()


def capsule(address, dtype, shape, strides, device, device_id, owner):
    """A "dltensor" capsule over address (dtype a name; strides in elements, None: C order;
    device "cpu", "cuda" or "rocm"), holding owner until its consumer's deleter runs."""
    n = len(shape)
    managed = DLManagedTensor()
    shape_array = (ctypes.c_int64 * max(n, 1))(*shape)
    stride_array = None if strides is None else (ctypes.c_int64 * max(n, 1))(*strides)
    code, bits = _CODES[dtype]
    t = managed.dl_tensor
    t.data = address or None
    t.device = DLDevice(_DEVICE_TYPES[device], device_id or 0)
    t.ndim = n
    t.dtype = DLDataType(code, bits, 1)
    t.shape = ctypes.cast(shape_array, ctypes.POINTER(ctypes.c_int64))
    t.strides = (ctypes.cast(stride_array, ctypes.POINTER(ctypes.c_int64))
                 if stride_array is not None else None)
    t.byte_offset = 0
    managed.deleter = _delete
    with _exported_lock:
        _exported[ctypes.addressof(managed)] = (managed, shape_array, stride_array, owner)
    return _api.PyCapsule_New(ctypes.addressof(managed), _NAME,
                              ctypes.cast(_capsule_destructor, ctypes.c_void_p))


def live_exports():
    """How many exported tensors are still held (by a consumer or an unused capsule)."""
    with _exported_lock:
        return len(_exported)
