/*
 * What the node's kernels and the network kernels found, read from this rank's control
 * block once they are done, turned into one status and one log line.
 */
#include "moe_internal.h"

#include <inttypes.h>

static intra_moe_control_t *moe_own_control(const intra_moe_t *moe)
{
    char *own = moe->args.heap[moe->args.rank];

    return (intra_moe_control_t *)(own + moe->args.heap_offsets.control);
}

static const char *const moe_net_waits[] = {
    [INTRA_NET_WAIT_CREDIT] = "room in the work ring",   [INTRA_NET_WAIT_HEADER] = "a header",
    [INTRA_NET_WAIT_GRANT] = "a round-two grant",        [INTRA_NET_WAIT_ROUND_ONE] = "round one",
    [INTRA_NET_WAIT_ROUND_TWO] = "round two",            [INTRA_NET_WAIT_READS] = "reads",
    [INTRA_NET_WAIT_TERMS] = "combine terms",            [INTRA_NET_WAIT_SENDS] = "our transfers",
    [INTRA_NET_BAD_ENTRY] = "a token entry",
    [INTRA_NET_WAIT_WEIGHTS] = "combine weights",
    [INTRA_NET_WAIT_ROUND] = "a peer's header of the next dispatch round",
    [INTRA_NET_BAD_COUNTS] = "step counts",
};

static const char *moe_net_what(int32_t what)
{
    return what > 0 && (size_t)what < UTIL_ARRAY_SIZE(moe_net_waits) && moe_net_waits[what]
               ? moe_net_waits[what] : "the network";
}

/* The step across nodes' findings: each fails the object. */
static strata_status_t moe_net_status(intra_moe_t *moe, const intra_moe_status_t *st)
{
    strata_status_t status;

    switch (st->code) {
    case INTRA_MOE_KERNEL_NET_FAILED:
        /* The ring ends for a dead peer, or for a command it refused: never an input error. */
        status = (strata_status_t)st->count == STRATA_ERR_PEER_FAILED ? STRATA_ERR_PEER_FAILED
                                                                      : STRATA_ERR_INTERNAL;
        moe->waited_for = st->value;
        if (st->value >= 0) {
            UTIL_LOG_ERROR("moe: step %" PRIu64 ": waiting for %s from rank %d: the work ring "
                           "failed: %s", moe->step, moe_net_what(st->token), st->value,
                           strata_status_string((strata_status_t)st->count));
        } else {
            UTIL_LOG_ERROR("moe: step %" PRIu64 ": waiting for %s: the work ring failed: %s",
                           moe->step, moe_net_what(st->token),
                           strata_status_string((strata_status_t)st->count));
        }
        break;
    case INTRA_MOE_KERNEL_NET_TIMEOUT:
        status = STRATA_ERR_TIMEOUT;
        moe->waited_for = st->value;
        UTIL_LOG_ERROR("moe: step %" PRIu64 ": waiting for %s from rank %d: nothing within "
                       "the bound (count %" PRId64 " awaited)", moe->step, moe_net_what(st->token),
                       st->value, st->count);
        break;
    case INTRA_MOE_KERNEL_NET_PROTOCOL:
        status = STRATA_ERR_INTERNAL;
        if (st->token == INTRA_NET_BAD_COUNTS) {
            UTIL_LOG_ERROR("moe: step %" PRIu64 ": rank %d's header (step %" PRId64 ") counts "
                           "rows out of range: a count below 0, or more rows than its tokens "
                           "can have", moe->step, st->value, st->count);
            break;
        }
        UTIL_LOG_ERROR("moe: step %" PRIu64 ": rank %d's %s (step %" PRId64 ") does not match "
                       "ours: the ranks are not in the same step", moe->step, st->value,
                       moe_net_what(st->token), st->count);
        break;
    default:
        status = STRATA_ERR_INTERNAL;
        UTIL_LOG_ERROR("moe: the network kernels reported unknown code %d", st->code);
        break;
    }
    moe->state = MOE_FAILED;
    return status == STRATA_OK ? STRATA_ERR_INTERNAL : status;
}

/* One log line and a status for what a kernel found; net: the step across nodes'. */
static strata_status_t moe_kernel_status(intra_moe_t *moe, const intra_moe_status_t *st, bool net)
{
    const intra_moe_args_t *a = &moe->args;

    switch (st->code) {
    case INTRA_MOE_KERNEL_OK:
        return STRATA_OK;
    case INTRA_MOE_KERNEL_BAD_EXPERT:
        UTIL_LOG_ERROR("intra moe: topk_idx[%d][%d] = %d is not an expert (-1 or 0..%d); "
                       "that entry was skipped", st->token, st->slot, st->value,
                       a->num_experts - 1);
        return STRATA_ERR_INVALID;
    case INTRA_MOE_KERNEL_CAPACITY:
        if (st->token >= 0) {
            UTIL_LOG_ERROR("intra moe: token %d's choice %d for expert %d found %" PRId64
                           " rows already there; capacity %d: not delivered",
                           st->token, st->slot, st->value, st->count - 1, a->capacity);
        } else {
            UTIL_LOG_ERROR("intra moe: expert %d was sent %" PRId64 " rows; capacity %d: "
                           "the rest were not delivered", st->value, st->count, a->capacity);
        }
        return STRATA_ERR_CAPACITY;
    case INTRA_MOE_KERNEL_DROPPED:
        UTIL_LOG_ERROR("intra moe: token %d's choice %d (expert %d) was dropped for capacity; "
                       "its result lacks that term", st->token, st->slot, st->value);
        return STRATA_ERR_CAPACITY;
    case INTRA_MOE_KERNEL_TERMS_DROPPED:
        UTIL_LOG_ERROR("intra moe: %" PRId64 " of this rank's terms returned by rank %d were "
                       "dropped for capacity there; those tokens' results lack them", st->count,
                       st->value);
        return STRATA_ERR_CAPACITY;
    case INTRA_MOE_KERNEL_WITHHELD:
        UTIL_LOG_ERROR("intra moe: token %d's choice %d (expert %d) has no result: the "
                       "expert's rank aborted step %" PRIu64 "; the token's result lacks that "
                       "term", st->token, st->slot, st->value, moe->step);
        return STRATA_ERR_CANCELLED;
    case INTRA_MOE_KERNEL_TERMS_WITHHELD:
        UTIL_LOG_ERROR("intra moe: %" PRId64 " of this rank's terms returned by rank %d were "
                       "withheld on its node, where a rank aborted step %" PRIu64 "; those "
                       "tokens' results lack them", st->count, st->value, moe->step);
        return STRATA_ERR_CANCELLED;
    case INTRA_MOE_KERNEL_GAVE_UP:
        UTIL_LOG_ERROR("intra moe: token %d's choice %d (expert %d) has no result: the "
                       "expert's rank gave up waiting in step %" PRIu64 " and withheld its "
                       "results; the object can only be destroyed", st->token, st->slot,
                       st->value, moe->step);
        moe->state = MOE_FAILED;
        return STRATA_ERR_TIMEOUT;
    case INTRA_MOE_KERNEL_TERMS_GAVE_UP:
        UTIL_LOG_ERROR("intra moe: %" PRId64 " of this rank's terms returned by rank %d were "
                       "withheld on its node, where a rank gave up waiting in step %" PRIu64
                       "; the object can only be destroyed", st->count, st->value, moe->step);
        moe->state = MOE_FAILED;
        return STRATA_ERR_TIMEOUT;
    case INTRA_MOE_KERNEL_TIMEOUT:
        moe->waited_for   = st->value;
        moe->waited_local = true;
        UTIL_LOG_ERROR("intra moe: local rank %d did not reach step %" PRIu64 " within %" PRIu64
                       " us; the object can only be destroyed", st->value, moe->step,
                       a->timeout_ticks / moe->device->timer_ticks_per_us);
        moe->state = MOE_FAILED;
        return STRATA_ERR_TIMEOUT;
    case INTRA_MOE_KERNEL_PEER_FAILED:
        moe->waited_for   = st->value;
        moe->waited_local = true;
        UTIL_LOG_ERROR("intra moe: a rank failed while step %" PRIu64 " waited for local rank "
                       "%d; the object can only be destroyed", moe->step, st->value);
        moe->state = MOE_FAILED;
        return STRATA_ERR_PEER_FAILED;
    case INTRA_MOE_KERNEL_MODES:
        UTIL_LOG_ERROR("moe: %s %d moves the experts of step %" PRIu64 " in other modes than "
                       "this rank: every rank must set the same pull masks and mode",
                       net ? "rank" : "local rank", st->value, moe->step);
        moe->state = MOE_FAILED;
        return STRATA_ERR_INTERNAL;
    case INTRA_MOE_KERNEL_COUNTS:
        UTIL_LOG_ERROR("moe: local expert %d was sent %" PRId64 " rows in step %" PRIu64
                       ", not the %d its first round counted: a rank changed its routing "
                       "during the step, or a peer's header counts are wrong; the object can "
                       "only be destroyed", st->value, st->count, moe->step, st->token);
        moe->state = MOE_FAILED;
        return STRATA_ERR_INTERNAL;
    default:
        if (net) {
            return moe_net_status(moe, st);
        }
        UTIL_LOG_ERROR("intra moe: the kernel reported unknown code %d", st->code);
        moe->state = MOE_FAILED;
        return STRATA_ERR_INTERNAL;
    }
}

/* Of two statuses, the one to report: a failure of the object before an input error. */
static strata_status_t moe_worse(strata_status_t a, strata_status_t b)
{
    return (a == STRATA_OK || (intra_moe_status_soft(a) && b != STRATA_OK &&
                               !intra_moe_status_soft(b))) ? b : a;
}

bool intra_moe_status_soft(strata_status_t status)
{
    return status == STRATA_ERR_INVALID || status == STRATA_ERR_CAPACITY ||
           status == STRATA_ERR_CANCELLED;
}

strata_status_t intra_moe_synchronize(intra_moe_t *moe)
{
    intra_moe_control_t *control = moe_own_control(moe);
    intra_moe_status_t st[3]; /* net, dispatch, combine: the root cause first */
    const intra_device_ops_t *d = moe->device;
    strata_status_t status, found = STRATA_OK;
    bool capturing = false;

    status = d->queue_capturing(moe->queue, &capturing);
    if (status == STRATA_OK && capturing) {
        UTIL_LOG_ERROR("intra moe: waiting for the object's kernels while its stream is "
                       "being captured; end the capture first");
        return STRATA_ERR_UNSUPPORTED;
    }
    /* On the object's stream, not the legacy one: a framework's work there is not waited for. */
    if (status == STRATA_OK) {
        status = d->queue_read(moe->queue, &st[0], &control->net_status, sizeof(st[0]));
    }
    if (status == STRATA_OK) {
        status = d->queue_read(moe->queue, &st[1], &control->dispatch_status, 2 * sizeof(st[1]));
    }
    if (status == STRATA_OK) {
        status = d->queue_fill(moe->queue, &control->net_status, 0, sizeof(st[0]));
    }
    if (status == STRATA_OK) {
        status = d->queue_fill(moe->queue, &control->dispatch_status, 0, 2 * sizeof(st[1]));
    }
    if (status != STRATA_OK) {
        moe->state = MOE_FAILED; /* peers may be waiting on a launch that never ran */
        return status;
    }
    for (int i = 0; i < 3; ++i) {
        found = moe_worse(found, moe_kernel_status(moe, &st[i], i == 0));
    }
    return found;
}

strata_status_t intra_moe_idle(intra_moe_t *moe)
{
    return moe->device->queue_synchronize(moe->queue);
}
