"""The communicator, bootstrapped from the launcher's environment (torchrun, mpirun, srun)."""
import ctypes
import weakref

from . import _types as t
from ._group import GroupBootstrap
from ._library import check, library
from .errors import StrataError
from .p2p import PointToPoint


class Communicator(PointToPoint):
    """A strata communicator over every rank of the job, or of a process group
    (strata_comm_create).

    Without group, rank and world size come from the launcher's variables, as
    strata_bootstrap_from_env reads them: torchrun's RANK, WORLD_SIZE, MASTER_ADDR and
    MASTER_PORT (strata's rendezvous listens on MASTER_PORT + 1), Open MPI's, MPICH's or
    Slurm's; without any, a world of one. Creating it is collective: every rank of the job
    must create one.

    With group (a torch.distributed process group, e.g. an EP group from new_group), it
    spans the group's ranks, numbered as the group numbers them, and its rendezvous runs
    through the group's own collectives (gloo on CPU, NCCL on the current GPU): no port of
    strata's. Every member creates one, as for the group's collectives.

    log_level (a LogLevel), topo_file, node_name and gpu (an index among the GPUs the
    process sees) override STRATA_LOG_LEVEL, STRATA_TOPO_FILE, STRATA_NODE_NAME and
    STRATA_GPU. close() (or the end of a with block) destroys it,
    and first every Moe made on it. Not thread-safe: one thread at a time.

    Point-to-point (docs/p2p.md): register(buffer) gives a Region whose descriptor a peer
    writes to; write_paged, write_scatter, imm_wait and list_imm_count move a KV cache's
    pages; send_bytes and recv_bytes carry small messages (descriptors, page lists).
    """

    def __init__(self, log_level=None, topo_file=None, node_name=None, gpu=None, group=None,
                 _tcp=None):
        self._lib = library()
        self._comm = None
        self._bootstrap = None
        self._group = None
        self._moes = weakref.WeakSet()
        self._streams = weakref.WeakSet()
        config = _config(log_level, topo_file, node_name, gpu)
        if group is not None:
            self._group = GroupBootstrap(group)
            bootstrap = ctypes.cast(ctypes.pointer(self._group.struct), ctypes.c_void_p)
        elif _tcp is not None:  # join(): the built-in rendezvous at a given place
            root_addr, port, rank, world_size = _tcp
            bootstrap = ctypes.c_void_p()
            check(self._lib.strata_bootstrap_tcp_create(str(root_addr).encode(), int(port),
                                                        int(rank), int(world_size), 0,
                                                        ctypes.byref(bootstrap)),
                  "strata_bootstrap_tcp_create")
            self._bootstrap = bootstrap
        else:
            bootstrap = ctypes.c_void_p()
            check(self._lib.strata_bootstrap_from_env(ctypes.byref(bootstrap)),
                  "strata_bootstrap_from_env")
            self._bootstrap = bootstrap
        comm = ctypes.c_void_p()
        try:
            status = self._lib.strata_comm_create(ctypes.byref(config), bootstrap,
                                                  ctypes.byref(comm))
            if status != 0 and self._group is not None:
                self._group.raise_interrupt()  # Ctrl-C in the group's collective wins
            check(status, "strata_comm_create")
        except StrataError as err:
            self.close()
            if self._group is not None and self._group.error is not None:
                raise StrataError(err.status, err.call, err.text,
                                  f"the group's collective failed: {self._group.error!r}") from err
            raise
        except BaseException:
            self.close()
            raise
        self._comm = comm

    @classmethod
    def from_env(cls, **config):
        """The same as Communicator(**config): named for what it reads."""
        return cls(**config)

    @classmethod
    def join(cls, root_addr, port, rank, world_size, **config):
        """A process joining a running job: its communicator, as rank rank of world_size,
        through the rendezvous the job's ranks open with expand(num_joiners, root_addr,
        port) (strata_bootstrap_tcp_create, then strata_comm_create)."""
        return cls(_tcp=(root_addr, port, rank, world_size), **config)

    @property
    def handle(self):
        """The strata_comm_t * as a ctypes.c_void_p (for calls this package does not wrap)."""
        if self._comm is None:
            raise ValueError("the communicator is closed")
        return self._comm

    def _query(self, name):
        return getattr(self._lib, name)(self.handle)

    rank = property(lambda self: self._query("strata_comm_rank"), doc="this rank")
    size = property(lambda self: self._query("strata_comm_size"), doc="ranks in the job")
    node = property(lambda self: self._query("strata_comm_node"), doc="this rank's node")
    num_nodes = property(lambda self: self._query("strata_comm_num_nodes"))
    local_rank = property(lambda self: self._query("strata_comm_local_rank"),
                          doc="rank among the ranks with this node's name")
    local_size = property(lambda self: self._query("strata_comm_local_size"))
    gpu = property(lambda self: self._query("strata_comm_gpu"),
                   doc="index of this rank's GPU among the node's (the topology's order), "
                       "-1 without one")
    gpu_ordinal = property(lambda self: self._query("strata_comm_gpu_ordinal"),
                           doc="the runtime's number for this rank's GPU: what cudaSetDevice "
                               "takes and torch's cuda:N names (it differs from gpu where "
                               "CUDA_VISIBLE_DEVICES hides some of the node's GPUs), -1 "
                               "without one")
    num_rails = property(lambda self: self._query("strata_comm_num_rails"))
    device_backend = property(lambda self: self._query("strata_comm_device_backend").decode(),
                              doc='"host", "cuda" or "hip"')
    transport = property(lambda self: self._query("strata_comm_transport").decode(),
                         doc='the inter-node transport, e.g. "ofi tcp;ofi_rxm lo"')

    def node_rank(self, node, local_rank):
        """Global rank of local rank local_rank on node node, -1 if none."""
        return self._lib.strata_comm_node_rank(self.handle, node, local_rank)

    def split(self, color, key=0):
        """Collective over this communicator's ranks: a Communicator over the ranks that
        pass the same color (>= 0), numbered by key, then by rank here; None for color -1
        (strata_comm_split). No new rendezvous: it bootstraps over this one's engine."""
        sub = ctypes.c_void_p()
        check(self._lib.strata_comm_split(self.handle, int(color), int(key), ctypes.byref(sub)),
              "strata_comm_split")
        return self._derived(sub) if sub.value else None

    def shrink(self):
        """After a StrataError with status STRATA_ERR_PEER_FAILED, every surviving rank
        calls it: a Communicator over the ranks that are alive, numbered in their order here
        (strata_comm_shrink). The survivors agree among themselves, with no rendezvous (rank
        0 may be the one that failed). Raises StrataError (PEER_FAILED) where the others
        declared this rank failed. A rank that fails once they agreed is a failure of the
        new one: shrink that in turn. The new one runs on this one's engine: its
        connections and registered memory stay good. This one is then good for nothing but
        close(); Moe objects are made again on the new one."""
        shrunk = ctypes.c_void_p()
        check(self._lib.strata_comm_shrink(self.handle, ctypes.byref(shrunk)),
              "strata_comm_shrink")
        return self._derived(shrunk)

    def expand(self, num_joiners, root_addr, port):
        """Collective over this communicator's ranks and num_joiners processes that call
        Communicator.join(root_addr, port, rank, size + num_joiners): a Communicator over
        both, this one's ranks first with their numbers (strata_comm_expand). Rank 0 listens
        on port; root_addr is how the others reach it."""
        grown = ctypes.c_void_p()
        check(self._lib.strata_comm_expand(self.handle, int(num_joiners),
                                           str(root_addr).encode(), int(port),
                                           ctypes.byref(grown)), "strata_comm_expand")
        return self._derived(grown)

    def parent_rank(self, rank):
        """rank's number in the communicator this one was split or shrunk from; -1 for one
        made from a bootstrap (strata_comm_parent_rank)."""
        return self._lib.strata_comm_parent_rank(self.handle, int(rank))

    def _derived(self, handle):
        """A Communicator over a handle split or shrunk from this one's."""
        comm = Communicator.__new__(Communicator)
        comm._lib, comm._comm, comm._bootstrap, comm._group = self._lib, handle, None, None
        comm._moes = weakref.WeakSet()
        comm._streams = weakref.WeakSet()
        return comm

    def stream(self):
        """A stream of the communicator's device backend (strata_comm_stream_create): on the
        host backend, work strata enqueues on it runs in order on a thread of its own, so
        that a Moe call given stream= returns before its step is done. close() (or the end of
        a with block) waits for its work and frees it."""
        stream = Stream(self)
        self._streams.add(stream)
        return stream

    def barrier(self, timeout_ms=60000):
        """Collective barrier over every rank (strata_barrier)."""
        check(self._lib.strata_barrier(self.handle, timeout_ms), "strata_barrier")

    def close(self):
        """Destroy every Moe made on it, cancel and give back its point-to-point requests
        and deregister its regions (p2p.Region), then destroy the communicator and its
        bootstrap. Idempotent."""
        for moe in list(self._moes):
            moe.close()
        for stream in list(getattr(self, "_streams", ())):
            stream.close()
        if self._comm is not None:
            self._p2p_close()  # requests given back, regions deregistered (p2p.py)
            self._lib.strata_comm_destroy(self._comm)
            self._comm = None
        if self._bootstrap is not None:
            self._lib.strata_bootstrap_destroy(self._bootstrap)
            self._bootstrap = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_lib", None) is not None:
            self.close()

    def __repr__(self):
        if self._comm is None:
            return "<strata.Communicator closed>"
        return (f"<strata.Communicator rank {self.rank} of {self.size}, node {self.node}, "
                f"local rank {self.local_rank}, {self.device_backend}, {self.transport}>")


def _config(log_level, topo_file, node_name, gpu=None):
    config = t.Config()
    if log_level is not None:
        config.field_mask |= t.ConfigField.LOG_LEVEL
        config.log_level = int(t.LogLevel(log_level))
    if topo_file is not None:
        config.field_mask |= t.ConfigField.TOPO_FILE
        config.topo_file = str(topo_file).encode()
    if node_name is not None:
        config.field_mask |= t.ConfigField.NODE_NAME
        config.node_name = node_name.encode()
    if gpu is not None:
        config.field_mask |= t.ConfigField.GPU
        config.gpu = int(gpu)
    return config


class Stream:
    """A stream of a communicator's device backend (Communicator.stream())."""

    def __init__(self, comm):
        self._comm = comm
        self._lib = comm._lib
        handle = ctypes.c_void_p()
        check(self._lib.strata_comm_stream_create(comm.handle, ctypes.byref(handle)),
              "strata_comm_stream_create")
        self.handle = handle
        self._users = weakref.WeakSet()  # Moe objects whose work it runs
        # Library objects of Moe objects closed mid-step, kept (by arrays over their memory)
        # and still running on it: it is destroyed once the last of them is.
        self._keepers = 0
        self._close_asked = False

    def synchronize(self):
        """Wait on the host for everything enqueued on it (strata_comm_stream_synchronize)."""
        if self.handle is None:
            raise ValueError("the stream is closed")
        check(self._lib.strata_comm_stream_synchronize(self._comm.handle, self.handle),
              "strata_comm_stream_synchronize")

    def close(self):
        """Wait for its work, then free it; the Moe objects that used it run without a
        stream from then on (StrataError, and nothing freed, while one is in a step). Where
        a Moe closed mid-step still runs on it (arrays of its Recvs keep its memory), it is
        freed once that Moe's library object is destroyed. Idempotent."""
        for moe in list(self._users):
            moe._leave_stream()
        self._close_asked = True
        if self._keepers > 0:
            return
        if self.handle is not None and self._comm._comm is not None:
            self._lib.strata_comm_stream_destroy(self._comm.handle, self.handle)
        # (after the communicator's destroy the stream is left to the process: the call
        # needs the communicator)
        self.handle = None

    def _keep(self):
        """A library object closed mid-step runs on it until it is destroyed (_release)."""
        self._keepers += 1

    def _release(self):
        self._keepers -= 1
        if self._keepers == 0 and self._close_asked:
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "handle", None) is not None:
            try:
                self.close()
            except Exception:  # a Moe still in a step: the stream stays with its object
                pass
