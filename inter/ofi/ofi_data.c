/*
 * The libfabric transport's data path: writes, reads and sends posted one call each (the
 * API has no list post), injects, receives, and the completion queue read into the
 * engine's completions. Also the mapping of libfabric's return codes.
 */
#include "inter/ofi/ofi_internal.h"
#include "util/util.h"

#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define OFI_CQ_BATCH 32

ofi_transport_t *ofi_of(inter_transport_t *tp)
{
    return util_container_of(tp, ofi_transport_t, base);
}

strata_status_t ofi_status(ssize_t rc)
{
    switch (rc) {
    case 0:            return STRATA_OK;
    case -FI_EAGAIN:   return STRATA_ERR_BUSY;
    case -FI_ENOMEM:   return STRATA_ERR_NO_MEMORY;
    case -FI_EINVAL:
    case -FI_EMSGSIZE: return STRATA_ERR_INVALID; /* larger than the provider carries */
    case -FI_ENOSYS:
    case -FI_EOPNOTSUPP: return STRATA_ERR_UNSUPPORTED;
    case -FI_ECANCELED: return STRATA_ERR_CANCELLED;
    case -FI_ETIMEDOUT: return STRATA_ERR_TIMEOUT;
    default:           return STRATA_ERR_TRANSPORT;
    }
}

/* The status of a posting call; a refusal other than "queue full, retry" is logged with
 * libfabric's own text, since the caller sees only the mapped status. */
static strata_status_t ofi_post_status(const char *call, ssize_t rc)
{
    if (rc != 0 && rc != -FI_EAGAIN) {
        UTIL_LOG_ERROR("ofi: %s: %s", call, fi_strerror((int)-rc));
    }
    return ofi_status(rc);
}

static ssize_t ofi_post_one(ofi_transport_t *ofi, const inter_post_t *post)
{
    switch (post->kind) {
    case INTER_POST_WRITE:
        return post->with_imm ? fi_writedata(ofi->ep, post->buf, post->len, post->desc,
                                             post->imm, post->peer, post->raddr, post->rkey,
                                             post->context)
                              : fi_write(ofi->ep, post->buf, post->len, post->desc, post->peer,
                                         post->raddr, post->rkey, post->context);
    case INTER_POST_READ:
        return fi_read(ofi->ep, post->buf, post->len, post->desc, post->peer, post->raddr,
                       post->rkey, post->context);
    case INTER_POST_SEND:
        return fi_send(ofi->ep, post->buf, post->len, post->desc, post->peer, post->context);
    }
    return -FI_EINVAL;
}

/* libfabric has no list post: one call each, in order, until one is refused. */
strata_status_t ofi_post(inter_transport_t *tp, const inter_post_t *posts, int count,
                         int *posted_p)
{
    ofi_transport_t *ofi = ofi_of(tp);
    strata_status_t status = STRATA_OK;
    int i;

    for (i = 0; i < count && status == STRATA_OK; ++i) {
        status = ofi_post_status("posting a write, read or send", ofi_post_one(ofi, &posts[i]));
    }
    *posted_p = status == STRATA_OK ? i : i - 1;
    return status;
}

strata_status_t ofi_inject(inter_transport_t *tp, uint64_t peer, const void *buf,
                           size_t len)
{
    return ofi_post_status("fi_inject", fi_inject(ofi_of(tp)->ep, buf, len, peer));
}

strata_status_t ofi_post_recv(inter_transport_t *tp, void *buf, size_t len, void *desc,
                              void *context)
{
    return ofi_post_status("fi_recv",
                           fi_recv(ofi_of(tp)->ep, buf, len, desc, FI_ADDR_UNSPEC, context));
}

static void ofi_fill_cqe(const ofi_transport_t *ofi, const struct fi_cq_data_entry *entry,
                         inter_cqe_t *cqe)
{
    cqe->status  = STRATA_OK;
    cqe->context = entry->op_context;
    cqe->length  = entry->len;
    cqe->imm     = (uint32_t)entry->data;
    if ((entry->flags & FI_REMOTE_CQ_DATA) && (entry->flags & (FI_RMA | FI_REMOTE_WRITE))) {
        cqe->kind = INTER_CQE_IMM;
        /* Only FI_RX_CQ_DATA providers hand back a receive; elsewhere the field means nothing. */
        cqe->context = ofi->base.rx_cq_data ? entry->op_context : NULL;
    } else if (entry->flags & FI_RECV) {
        cqe->kind = INTER_CQE_RECV;
    } else {
        cqe->kind = INTER_CQE_LOCAL;
    }
}

static strata_status_t ofi_poll_error(ofi_transport_t *ofi, inter_cqe_t *cqe, int *count_p)
{
    struct fi_cq_err_entry err = {0};
    ssize_t rc = fi_cq_readerr(ofi->cq, &err, 0);

    if (rc < 0) {
        return (rc == -FI_EAGAIN) ? STRATA_OK : STRATA_ERR_TRANSPORT;
    }
    UTIL_LOG_DEBUG("ofi: completion error: %s (provider: %s)", fi_strerror(err.err),
                   fi_cq_strerror(ofi->cq, err.prov_errno, err.err_data, NULL, 0));
    cqe->kind    = (err.flags & FI_RECV) ? INTER_CQE_RECV : INTER_CQE_LOCAL;
    cqe->context = err.op_context;
    cqe->length  = err.len;
    cqe->imm     = 0;
    cqe->status  = (err.err == FI_ECANCELED) ? STRATA_ERR_CANCELLED : STRATA_ERR_TRANSPORT;
    *count_p     = 1;
    return STRATA_OK;
}

strata_status_t ofi_poll(inter_transport_t *tp, inter_cqe_t *cqes, int max, int *count_p)
{
    ofi_transport_t *ofi = ofi_of(tp);
    struct fi_cq_data_entry entries[OFI_CQ_BATCH];
    ssize_t rc = fi_cq_read(ofi->cq, entries, (size_t)UTIL_MIN(max, OFI_CQ_BATCH));

    *count_p = 0;
    if (rc == -FI_EAGAIN) {
        return STRATA_OK;
    }
    if (rc == -FI_EAVAIL) {
        return ofi_poll_error(ofi, &cqes[0], count_p);
    }
    if (rc < 0) {
        UTIL_LOG_ERROR("ofi: fi_cq_read: %s", fi_strerror((int)-rc));
        return STRATA_ERR_TRANSPORT;
    }
    for (ssize_t i = 0; i < rc; ++i) {
        ofi_fill_cqe(ofi, &entries[i], &cqes[i]);
    }
    *count_p = (int)rc;
    return STRATA_OK;
}
