"""The C API's enums and structs, mirrored field for field from strata/strata.h.

The ctypes Structures must keep the order, types and sizes of the C ones: the test
tests/python/test_abi.py compares them with what a C compiler says of the header.
"""
import ctypes
import enum


class Status(enum.IntEnum):
    """strata_status_t: STRATA_OK is zero, STRATA_INPROGRESS positive, errors negative."""

    STRATA_OK = 0
    STRATA_INPROGRESS = 1
    STRATA_ERR_INVALID = -1
    STRATA_ERR_NO_MEMORY = -2
    STRATA_ERR_UNSUPPORTED = -3
    STRATA_ERR_TIMEOUT = -4
    STRATA_ERR_CANCELLED = -5
    STRATA_ERR_NOT_FOUND = -6
    STRATA_ERR_IO = -7
    STRATA_ERR_INTERNAL = -8
    STRATA_ERR_BUSY = -9
    STRATA_ERR_PEER_FAILED = -20
    STRATA_ERR_TRANSPORT = -21
    STRATA_ERR_BOOTSTRAP = -22
    STRATA_ERR_PARSE = -40
    STRATA_ERR_TOPOLOGY = -41
    STRATA_ERR_CONFIG = -42
    STRATA_ERR_CAPACITY = -60
    STRATA_ERR_LAST = -100


class Dtype(enum.IntEnum):
    """strata_dtype_t: element types of tokens and expert outputs."""

    BF16 = 0
    FP16 = 1
    FP32 = 2
    FP8_E4M3 = 3  # one fp32 scale per 128 columns

    @property
    def itemsize(self):
        return 1 if self is Dtype.FP8_E4M3 else 4 if self is Dtype.FP32 else 2


class LogLevel(enum.IntEnum):
    """strata_log_level_t."""

    ERROR = 0
    WARN = 1
    INFO = 2
    DEBUG = 3
    TRACE = 4


class ConfigField(enum.IntFlag):
    """Bits of strata_config_t.field_mask."""

    LOG_LEVEL = 1 << 0
    TOPO_FILE = 1 << 1
    NODE_NAME = 1 << 2
    GPU = 1 << 3


class Route(enum.IntEnum):
    """strata_moe_route_t: how tokens cross nodes."""

    DEFAULT = 0
    FLAT = 1
    HIERARCHICAL = 2


class Mode(enum.IntEnum):
    """strata_moe_mode_t: how each expert's tokens move."""

    DEFAULT = 0
    PUSH = 1
    PULL = 2
    ADAPTIVE = 3
    FIXED = 4


class Combine(enum.IntEnum):
    """strata_moe_combine_t: how combine sums a token's terms across nodes."""

    DEFAULT = 0
    EXACT = 1
    NODE_REDUCE = 2


class Exchange(enum.IntEnum):
    """strata_moe_exchange_t: how a step's rows cross the network."""

    DEFAULT = 0
    WORST_CASE = 1
    STREAMED = 2


class Receive(enum.IntEnum):
    """strata_moe_receive_t: where a dispatch delivers the rows."""

    DEFAULT = 0
    BLOCKS = 1
    EXACT = 2


class Phase(enum.IntEnum):
    """strata_moe_phase_t: the phases of a step that the statistics time."""

    PACK = 0
    DISPATCH_WAIT = 1
    INTRA_DISPATCH = 2
    COMBINE_KERNEL = 3
    COMBINE_WAIT = 4
    REDUCE = 5


MOE_PHASES = len(Phase)  # STRATA_MOE_PHASES

# C enums are int-sized on every ABI strata builds for.
_enum = ctypes.c_int


AllgatherFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.c_size_t)
BarrierFn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class Bootstrap(ctypes.Structure):
    """strata_bootstrap_t: how ranks find each other, filled by the caller."""

    _fields_ = [("rank", ctypes.c_int), ("world_size", ctypes.c_int),
                ("allgather", AllgatherFn), ("barrier", BarrierFn), ("ctx", ctypes.c_void_p)]


class Config(ctypes.Structure):
    """strata_config_t."""

    _fields_ = [
        ("field_mask", ctypes.c_uint64),
        ("log_level", _enum),
        ("topo_file", ctypes.c_char_p),
        ("node_name", ctypes.c_char_p),
        ("gpu", ctypes.c_int),
    ]


class MoeParams(ctypes.Structure):
    """strata_moe_params_t."""

    _fields_ = [
        ("num_experts", ctypes.c_int),
        ("topk", ctypes.c_int),
        ("hidden", ctypes.c_int),
        ("dtype", _enum),
        ("combine_dtype", _enum),
        ("max_tokens", ctypes.c_int),
        ("capacity", ctypes.c_int),
        ("expert_alignment", ctypes.c_int),
        ("route", _enum),
        ("mode", _enum),
        ("mode_file", ctypes.c_char_p),
        ("combine", _enum),
        ("exchange", _enum),
        ("receive", _enum),
    ]


class MoeSource(ctypes.Structure):
    """strata_moe_source_t: where a received row came from."""

    _fields_ = [
        ("rank", ctypes.c_int32),
        ("token", ctypes.c_int32),
        ("slot", ctypes.c_int32),
    ]


class MoeRecv(ctypes.Structure):
    """strata_moe_recv_t: what a dispatch delivered to this rank's experts."""

    _fields_ = [
        ("num_local_experts", ctypes.c_int),
        ("first_expert", ctypes.c_int),
        ("capacity", ctypes.c_int),
        ("row_bytes", ctypes.c_size_t),
        ("y_row_bytes", ctypes.c_size_t),
        ("count", ctypes.POINTER(ctypes.c_int32)),
        ("x", ctypes.c_void_p),
        ("x_scales", ctypes.POINTER(ctypes.c_float)),
        ("scale_stride", ctypes.c_size_t),
        ("src", ctypes.POINTER(MoeSource)),
        ("expert_y", ctypes.c_void_p),
    ]


class MoeMemory(ctypes.Structure):
    """strata_moe_memory_t: the bytes one rank of a MoE object holds, by part."""

    _fields_ = [
        ("expert_rows", ctypes.c_uint64),
        ("node_rows", ctypes.c_uint64),
        ("net_headers", ctypes.c_uint64),
        ("net_round_one", ctypes.c_uint64),
        ("net_round_two", ctypes.c_uint64),
        ("net_staging", ctypes.c_uint64),
        ("net_returns", ctypes.c_uint64),
        ("work_ring", ctypes.c_uint64),
        ("tables", ctypes.c_uint64),
        ("total", ctypes.c_uint64),
    ]


class MoeStats(ctypes.Structure):
    """strata_moe_stats_t: what the last step did on this rank."""

    _fields_ = [
        ("steps", ctypes.c_uint64),
        ("route", _enum),
        ("num_local_experts", ctypes.c_int),
        ("tokens_per_expert", ctypes.POINTER(ctypes.c_int32)),
        ("pull_mask", ctypes.POINTER(ctypes.c_uint64)),
        ("tokens_to_nodes", ctypes.c_uint64),
        ("tokens_round_two", ctypes.c_uint64),
        ("bytes_to_nodes", ctypes.c_uint64),
        ("dispatch_ns", ctypes.c_uint64),
        ("combine_ns", ctypes.c_uint64),
        ("phase_ns", ctypes.c_uint64 * MOE_PHASES),
        ("host_copied_bytes", ctypes.c_uint64),
        ("net_bounce", ctypes.c_int),
        ("commands_posted", ctypes.c_uint64),
        ("post_delay_ns", ctypes.c_uint64),
        ("memory", MoeMemory),
        ("exchange", _enum),
        ("exchange_rounds", ctypes.c_int),
    ]


# Every mirrored struct by its C name, for the layout test.
STRUCTS = {
    "strata_config_t": Config,
    "strata_moe_params_t": MoeParams,
    "strata_moe_source_t": MoeSource,
    "strata_moe_recv_t": MoeRecv,
    "strata_moe_stats_t": MoeStats,
    "strata_moe_memory_t": MoeMemory,
}
