"""Finding and loading libstrata, and the C prototypes of the calls the package makes.

The library comes from STRATA_LIBRARY_PATH (the file itself, or a directory holding
libstrata.so*), else from beside the package where cmake --install put both (_installed.py
says where), else from the dynamic loader's search path (LD_LIBRARY_PATH, ld.so.cache).
"""
import ctypes
import ctypes.util
import glob
import os
import threading

from . import _types as t
from .errors import LibraryNotFoundError, LibraryVersionError, StrataError

LIBRARY_ENV = "STRATA_LIBRARY_PATH"
SONAME = "libstrata.so.0"
# The (major, minor) version whose header _types.py mirrors.
MIRRORED_VERSION = (0, 1)

_c_status = ctypes.c_int
_p = ctypes.c_void_p
_int = ctypes.c_int

# name: (return type, argument types). Status returns are checked by check().
_PROTOTYPES = {
    "strata_status_string": (ctypes.c_char_p, [_c_status]),
    "strata_get_version": (None, [ctypes.POINTER(ctypes.c_uint)] * 3),
    "strata_get_version_string": (ctypes.c_char_p, []),
    "strata_get_build_options": (ctypes.c_char_p, []),
    "strata_get_last_error": (ctypes.c_char_p, []),
    "strata_clear_last_error": (None, []),
    "strata_bootstrap_from_env": (_c_status, [ctypes.POINTER(_p)]),
    "strata_bootstrap_tcp_create": (_c_status, [ctypes.c_char_p, ctypes.c_uint16, _int, _int,
                                                ctypes.c_uint64, ctypes.POINTER(_p)]),
    "strata_bootstrap_destroy": (None, [_p]),
    "strata_comm_create": (_c_status, [ctypes.POINTER(t.Config), _p, ctypes.POINTER(_p)]),
    "strata_comm_destroy": (None, [_p]),
    "strata_comm_split": (_c_status, [_p, _int, _int, ctypes.POINTER(_p)]),
    "strata_comm_shrink": (_c_status, [_p, ctypes.POINTER(_p)]),
    "strata_comm_parent_rank": (_int, [_p, _int]),
    "strata_comm_expand": (_c_status, [_p, _int, ctypes.c_char_p, ctypes.c_uint16,
                                       ctypes.POINTER(_p)]),
    "strata_comm_stream_create": (_c_status, [_p, ctypes.POINTER(_p)]),
    "strata_comm_stream_destroy": (None, [_p, _p]),
    "strata_comm_stream_synchronize": (_c_status, [_p, _p]),
    "strata_moe_set_stream": (_c_status, [_p, _p]),
    "strata_comm_rank": (_int, [_p]),
    "strata_comm_size": (_int, [_p]),
    "strata_comm_node": (_int, [_p]),
    "strata_comm_num_nodes": (_int, [_p]),
    "strata_comm_local_rank": (_int, [_p]),
    "strata_comm_local_size": (_int, [_p]),
    "strata_comm_node_rank": (_int, [_p, _int, _int]),
    "strata_comm_device_backend": (ctypes.c_char_p, [_p]),
    "strata_comm_gpu": (_int, [_p]),
    "strata_comm_gpu_ordinal": (_int, [_p]),
    "strata_comm_num_rails": (_int, [_p]),
    "strata_comm_transport": (ctypes.c_char_p, [_p]),
    "strata_barrier": (_c_status, [_p, ctypes.c_uint64]),
    "strata_mem_register": (_c_status, [_p, _p, ctypes.c_size_t, ctypes.POINTER(_p)]),
    "strata_mem_deregister": (None, [_p, _p]),
    "strata_mem_descriptor": (None, [_p, _p]),
    "strata_write_paged": (_c_status, [_p, _int, _p, _p, ctypes.c_size_t, _p, _p,
                                       ctypes.c_size_t, ctypes.c_uint, ctypes.c_uint32,
                                       ctypes.POINTER(_p)]),
    "strata_write_scatter": (_c_status, [_p, _int, _p, _p, _p, ctypes.c_size_t, ctypes.c_uint,
                                         ctypes.c_uint32, ctypes.POINTER(_p)]),
    "strata_write_list_imm_count": (ctypes.c_uint32, [_p, _int]),
    "strata_imm_wait": (_c_status, [_p, ctypes.c_uint32, ctypes.c_uint64, _int,
                                    ctypes.c_uint64]),
    "strata_send": (_c_status, [_p, _int, _p, ctypes.c_size_t, ctypes.POINTER(_p)]),
    "strata_recv": (_c_status, [_p, _int, _p, ctypes.c_size_t, ctypes.POINTER(_p)]),
    "strata_request_test": (_c_status, [_p]),
    "strata_request_wait": (_c_status, [_p, ctypes.c_uint64]),
    "strata_request_length": (ctypes.c_size_t, [_p]),
    "strata_request_source": (_int, [_p]),
    "strata_request_cancel": (None, [_p]),
    "strata_request_free": (None, [_p]),
    "strata_transfer_plan_create": (_c_status, [_p, _p, _p, ctypes.c_size_t, ctypes.c_uint32,
                                                ctypes.c_uint32, ctypes.POINTER(_p)]),
    "strata_transfer_plan_execute": (_c_status, [_p, ctypes.c_uint64]),
    "strata_transfer_plan_wait_tensor": (_c_status, [_p, ctypes.c_uint32, ctypes.c_uint64]),
    "strata_transfer_plan_wait": (_c_status, [_p, ctypes.c_uint64]),
    "strata_transfer_plan_destroy": (None, [_p]),
    "strata_moe_create": (_c_status, [_p, ctypes.POINTER(t.MoeParams), ctypes.POINTER(_p)]),
    "strata_moe_destroy": (None, [_p]),
    "strata_moe_layout_create": (_c_status, [_p, _p, _int, ctypes.POINTER(_p)]),
    "strata_moe_layout_destroy": (None, [_p]),
    "strata_moe_set_pull_mask": (_c_status, [_p, _p, _p]),
    "strata_moe_dispatch_send": (_c_status, [_p, _p, _p, _p]),
    "strata_moe_dispatch_recv": (_c_status, [_p, ctypes.POINTER(t.MoeRecv)]),
    "strata_moe_dispatch": (_c_status, [_p, _p, _p, _p, _int, ctypes.POINTER(t.MoeRecv)]),
    "strata_moe_combine_send": (_c_status, [_p, _p]),
    "strata_moe_combine_recv": (_c_status, [_p, _p, _p]),
    "strata_moe_combine": (_c_status, [_p, _p, _p, _p]),
    "strata_moe_abort_step": (_c_status, [_p]),
    "strata_moe_expert_wait": (_c_status, [_p, _int, ctypes.c_int64,
                                           ctypes.POINTER(ctypes.c_int32)]),
    "strata_moe_dispatch_counts": (_c_status, [_p, ctypes.c_int64,
                                               ctypes.POINTER(ctypes.c_int32)]),
    "strata_moe_dispatch_recv_into": (_c_status, [_p, _p, _p, _p, ctypes.c_int64]),
    "strata_moe_synchronize": (_c_status, [_p]),
    "strata_moe_recreate": (_c_status, [_p, _p, _p, ctypes.POINTER(_p)]),
    "strata_moe_expert_id": (_int, [_p, _int]),
    "strata_moe_masked": (_c_status, [_p, _p, ctypes.POINTER(ctypes.c_int32),
                                      ctypes.POINTER(ctypes.c_int64)]),
    "strata_moe_get_stats": (_c_status, [_p, ctypes.POINTER(t.MoeStats)]),
}


def _library_in(directory):
    """The libstrata shared object in directory: the soname first, then any other."""
    for name in (SONAME, "libstrata.so"):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    found = sorted(glob.glob(os.path.join(glob.escape(directory), "libstrata.so.*")))
    return found[0] if found else None


def _installed_library():
    """Where cmake --install put this package: the libstrata installed with it, else None
    (the package runs from a source tree)."""
    try:
        from . import _installed
    except ImportError:
        return None
    return _library_in(os.path.normpath(os.path.join(os.path.dirname(__file__),
                                                     _installed.LIBRARY_DIR)))


def library_path(environ=None):
    """The file STRATA_LIBRARY_PATH names (itself, or libstrata.so* in its directory), else
    the libstrata installed with this package (cmake --install).

    None where neither is: the loader's search path applies. LibraryNotFoundError where the
    variable names nothing usable.
    """
    environ = os.environ if environ is None else environ
    value = environ.get(LIBRARY_ENV, "")
    if not value:
        return _installed_library()
    if os.path.isdir(value):
        path = _library_in(value)
        if path is None:
            raise LibraryNotFoundError(f"{LIBRARY_ENV}={value} is a directory without "
                                       f"libstrata.so* in it")
        return path
    if os.path.isfile(value):
        return value
    raise LibraryNotFoundError(f"{LIBRARY_ENV}={value}: no such file or directory")


def _load_from_loader_path():
    tried = []
    for name in (SONAME, ctypes.util.find_library("strata")):
        if name is None:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError as err:
            tried.append(str(err))
    raise LibraryNotFoundError(
        f"libstrata not found: {LIBRARY_ENV} is unset and the dynamic loader's path "
        f"(LD_LIBRARY_PATH, ld.so.cache) has no {SONAME} ({'; '.join(tried) or 'no match'}). "
        f"Set {LIBRARY_ENV} to the library or its directory (build/api in a build tree), or "
        f"install libstrata where the loader looks")


def _check_version(lib, where):
    major, minor, patch = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    lib.strata_get_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch))
    if (major.value, minor.value) != MIRRORED_VERSION:
        raise LibraryVersionError(
            f"{where} is libstrata {major.value}.{minor.value}.{patch.value}; this package "
            f"mirrors the structs of {MIRRORED_VERSION[0]}.{MIRRORED_VERSION[1]}")


def _clearing(clear, fn):
    """fn, called after forgetting the thread's last error: a failure's message is then its
    own, never an earlier call's (check() reads it)."""
    def call(*args):
        clear()
        return fn(*args)
    call.__name__ = fn.__name__
    return call


def _declare(lib, where):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise LibraryVersionError(f"{where} has no {name}: not a libstrata this package "
                                      f"can use") from None
        fn.restype = restype
        fn.argtypes = argtypes
    for name, (restype, _) in _PROTOTYPES.items():
        if restype is _c_status and name != "strata_status_string":
            setattr(lib, name, _clearing(lib.strata_clear_last_error, getattr(lib, name)))


def open_library(environ=None):
    """Load libstrata as the lookup rules say, check its version, declare its calls.

    Each call loads afresh (the dynamic loader shares an object already loaded); use
    library() for the package's own handle.
    """
    path = library_path(environ)
    if path is None:
        lib = _load_from_loader_path()
        where = lib._name
    else:
        try:
            lib = ctypes.CDLL(path)
        except OSError as err:
            raise LibraryNotFoundError(f"{LIBRARY_ENV}: cannot load {path}: {err}") from None
        where = path
    _declare(lib, where)
    _check_version(lib, where)
    return lib


_lib = None
_lib_lock = threading.Lock()


def library():
    """The package's handle on libstrata, loaded on first use."""
    global _lib
    with _lib_lock:
        if _lib is None:
            _lib = open_library()
        return _lib


def status_string(status):
    """strata_status_string: the library's text for a status."""
    return library().strata_status_string(int(status)).decode()


def last_error():
    """strata_get_last_error: why the calling thread's last failed call failed ("" if the
    library logged nothing)."""
    return library().strata_get_last_error().decode(errors="replace")


def check(status, call):
    """Raise StrataError for an error status, with the library's message for it; return
    STRATA_OK or STRATA_INPROGRESS."""
    if status < 0:
        raise StrataError(status, call, status_string(status), last_error())
    return status
