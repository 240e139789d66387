"""strata for Python: the communicator and MoE dispatch/combine over libstrata, by ctypes.

No compiled extension: the package loads libstrata (STRATA_LIBRARY_PATH, a file or a
directory holding libstrata.so*, else the dynamic loader's path) on first use. Buffers are
numpy arrays, torch tensors, or arrays exposing __cuda_array_interface__ or __dlpack__, in
host memory or on the communicator's GPU, read and written in place. See docs/python.md.
"""
from ._library import LIBRARY_ENV, last_error, library, library_path, open_library, status_string
from ._types import (Combine, ConfigField, Dtype, Exchange, LogLevel, Mode, Phase, Receive,
                     Route, Status)
from .comm import Communicator
from .errors import LibraryNotFoundError, LibraryVersionError, StrataError
from .moe import CompactRecv, Layout, Moe, Recv, Stats
from .p2p import Descriptor, Region, Request, TransferPlan

__all__ = [
    "Combine", "CompactRecv", "Communicator", "ConfigField", "Descriptor", "Dtype", "Exchange",
    "Layout",
    "LIBRARY_ENV", "LibraryNotFoundError", "LibraryVersionError", "LogLevel", "Mode", "Moe",
    "Phase", "Receive", "Recv", "Region", "Request", "Route", "Stats", "Status", "StrataError", "TransferPlan",
    "build_options",
    "last_error", "library",
    "library_path",
    "open_library", "status_string", "version",
]


def version():
    """The loaded library's version string, e.g. "0.1.0"."""
    return library().strata_get_version_string().decode()


def build_options():
    """The loaded library's build options, e.g. "cuda=off hip=off verbs=on ucx=on ..."."""
    return library().strata_get_build_options().decode()
