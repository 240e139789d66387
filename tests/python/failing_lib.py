"""A libstrata handle under which a MoE object fails as a step's failure leaves it: the
failure a second process (a peer that dies, or one that stops past the timeout) would
cause, on one rank."""
import strata

# The MoE calls the library refuses once a step failed (strata/moe.h: the object then
# refuses every call but destroy); the others (statistics, layouts' destroy) still answer.
REFUSED_AFTER_FAILURE = frozenset((
    "strata_moe_dispatch", "strata_moe_dispatch_send", "strata_moe_dispatch_recv",
    "strata_moe_dispatch_recv_into", "strata_moe_combine_send", "strata_moe_combine_recv",
    "strata_moe_combine", "strata_moe_abort_step", "strata_moe_expert_wait",
    "strata_moe_dispatch_counts", "strata_moe_set_stream", "strata_moe_synchronize",
    "strata_moe_set_pull_mask"))


class FailingLib:
    """The package's libstrata handle, save that the first call named fail_at returns
    status without reaching the library, as a call whose step failed does, and every later
    call of REFUSED_AFTER_FAILURE returns STRATA_ERR_PEER_FAILED, as the library's refusal
    after a failed step. calls lists the MoE calls made through it, in order."""

    def __init__(self, lib, fail_at, status):
        self._lib = lib
        self.fail_at = fail_at
        self.status = int(status)
        self.failed = False
        self.calls = []

    def __getattr__(self, name):
        real = getattr(self._lib, name)
        if name not in REFUSED_AFTER_FAILURE:
            return real

        def call(*args):
            self.calls.append(name)
            if self.failed:
                return int(strata.Status.STRATA_ERR_PEER_FAILED)
            if name == self.fail_at:
                self.failed = True
                return self.status
            return real(*args)

        return call
