"""A strata bootstrap over a torch.distributed process group: its ranks, and its own
collectives for the rendezvous, so that a communicator spans the group (an EP group of a
TP x EP x DP layout) with no port of strata's own."""
import ctypes

from . import _types as t


class GroupBootstrap:
    """strata_bootstrap_t whose allgather and barrier are the group's (torch.distributed).

    The group's backend moves the bytes: gloo on CPU tensors, NCCL on tensors of the
    current CUDA device. A collective that raises returns STRATA_ERR_BOOTSTRAP to the
    library, and the exception is kept in .error for the caller's message; a
    KeyboardInterrupt or SystemExit is raised again once the library call returns
    (raise_interrupt), rather than lost inside the callback.
    """

    def __init__(self, group):
        import torch
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("group=: torch.distributed is not initialized "
                             "(torch.distributed.init_process_group first)")
        self._torch, self._dist, self._group = torch, dist, group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        if self.rank < 0:
            raise ValueError("group=: this process is not a member of the group")
        backend = str(dist.get_backend(group)).lower()
        self._device = (torch.device("cuda", torch.cuda.current_device())
                        if backend == "nccl" else torch.device("cpu"))
        self.error = None
        # The callbacks live as long as this object: the library calls them whenever the
        # communicator (or a Moe made on it) runs a collective.
        self._allgather_fn = t.AllgatherFn(self._allgather)
        self._barrier_fn = t.BarrierFn(self._barrier)
        self.struct = t.Bootstrap(rank=self.rank, world_size=self.size,
                                  allgather=self._allgather_fn, barrier=self._barrier_fn,
                                  ctx=None)

    def _allgather(self, ctx, send, recv, size):
        torch = self._torch
        try:
            if size == 0:
                self._dist.barrier(group=self._group)
                return 0
            mine = torch.empty(size, dtype=torch.uint8)
            ctypes.memmove(mine.data_ptr(), send, size)
            mine = mine.to(self._device)
            every = [torch.empty(size, dtype=torch.uint8, device=self._device)
                     for _ in range(self.size)]
            self._dist.all_gather(every, mine, group=self._group)
            for r, block in enumerate(every):
                block = block.cpu()
                ctypes.memmove(recv + r * size, block.data_ptr(), size)
            return 0
        except BaseException as err:  # nothing may cross into the library, Ctrl-C included
            return self._failed(err)

    def _barrier(self, ctx):
        try:
            self._dist.barrier(group=self._group)
            return 0
        except BaseException as err:
            return self._failed(err)

    def _failed(self, err):
        """The status a collective that raised err returns to the library; err is kept."""
        self.error = err
        return int(t.Status.STRATA_ERR_BOOTSTRAP)

    def raise_interrupt(self):
        """After a library call that may run the group's collectives: raise the
        KeyboardInterrupt or SystemExit that stopped one of them, if any (once)."""
        err = self.error
        if err is not None and not isinstance(err, Exception):
            self.error = None
            raise err


def raise_interrupt(comm):
    """GroupBootstrap.raise_interrupt for comm's group, where it was made on one."""
    group = getattr(comm, "_group", None)
    if group is not None:
        group.raise_interrupt()
