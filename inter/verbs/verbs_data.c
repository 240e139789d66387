/*
 * The verbs transport's data path: posts chained per queue pair, injected sends inline
 * with periodic signaling, receives on the shared receive queue, and the completion queue
 * mapped to the engine's completions. Called under the engine's progress lock (its
 * progress thread or a waiting caller), one call at a time.
 */
#include "inter/verbs/verbs.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#define VERBS_POST_BATCH      16 /* work requests chained into one ibv_post_send */
#define VERBS_POLL_BATCH      32
#define VERBS_ASYNC_PERIOD_NS (10 * UTIL_NSEC_PER_MSEC)

strata_status_t verbs_wc_status(enum ibv_wc_status status)
{
    switch (status) {
    case IBV_WC_SUCCESS:      return STRATA_OK;
    case IBV_WC_WR_FLUSH_ERR: return STRATA_ERR_CANCELLED; /* the QP went to error before */
    default:                  return STRATA_ERR_TRANSPORT;
    }
}

void verbs_wc_to_cqe(const struct ibv_wc *wc, const verbs_ctx_t *ctx, inter_cqe_t *cqe)
{
    cqe->status  = verbs_wc_status(wc->status);
    cqe->context = (void *)ctx;
    cqe->length  = 0;
    cqe->imm     = 0;
    if (wc->status != IBV_WC_SUCCESS) {
        /* ibv_poll_cq(3): only wr_id, status, qp_num and vendor_err are valid then. */
        cqe->kind = ctx->kind == VERBS_CTX_RX ? INTER_CQE_RECV : INTER_CQE_LOCAL;
        return;
    }
    switch (wc->opcode) {
    case IBV_WC_RECV_RDMA_WITH_IMM:
        /* The write consumed this receive (its buffer holds nothing): give it back. */
        cqe->kind   = INTER_CQE_IMM;
        cqe->imm    = ntohl(wc->imm_data);
        cqe->length = wc->byte_len;
        break;
    case IBV_WC_RECV:
        cqe->kind   = INTER_CQE_RECV;
        cqe->length = wc->byte_len;
        break;
    case IBV_WC_RDMA_READ:
        cqe->kind   = INTER_CQE_LOCAL;
        cqe->length = wc->byte_len;
        break;
    default: /* IBV_WC_SEND, IBV_WC_RDMA_WRITE */
        cqe->kind = INTER_CQE_LOCAL;
        break;
    }
}

/* An errno from ibv_post_send or ibv_post_srq_recv: a full queue is the engine's "busy". */
static strata_status_t verbs_post_status(int rc)
{
    return rc == ENOMEM ? STRATA_ERR_BUSY : rc == EINVAL ? STRATA_ERR_INVALID
                                                         : STRATA_ERR_TRANSPORT;
}

/* Room for n more work requests on the peer's send queue: a request's slot is free once
 * it, or a later signaled one, has completed (retired). */
static bool verbs_sq_room(const verbs_transport_t *vt, const verbs_peer_t *peer, uint64_t n)
{
    return peer->posted - peer->retired + n <= vt->sq_depth;
}

/* The peer a post or inject names, usable: else why not. */
static strata_status_t verbs_peer_get(verbs_transport_t *vt, uint64_t index,
                                      verbs_peer_t **peer_p)
{
    verbs_peer_t *peer;

    if (index >= (uint64_t)vt->world || !vt->peers[index].connected || vt->shut) {
        UTIL_LOG_ERROR("verbs: %s: no connected peer %llu (of %d)", vt->base.name,
                       (unsigned long long)index, vt->world);
        return STRATA_ERR_INVALID;
    }
    peer = &vt->peers[index];
    if (peer->failed) {
        return STRATA_ERR_TRANSPORT; /* its QP is in error: nothing posted there completes */
    }
    *peer_p = peer;
    return STRATA_OK;
}

static strata_status_t verbs_post_check(const verbs_transport_t *vt, const inter_post_t *post)
{
    uint64_t max = post->kind == INTER_POST_SEND ? vt->base.max_msg_size
                                                 : vt->base.max_rma_size;

    if (post->context == NULL || (post->len > 0 && post->desc == NULL) || post->len > max ||
        (post->kind == INTER_POST_READ && !vt->base.has_read)) {
        UTIL_LOG_ERROR("verbs: %s: cannot post a %s of %zu bytes (at most %llu) with context "
                       "%p and descriptor %p", vt->base.name,
                       post->kind == INTER_POST_SEND ? "send"
                       : post->kind == INTER_POST_READ ? "read" : "write",
                       post->len, (unsigned long long)max, post->context, post->desc);
        return STRATA_ERR_INVALID;
    }
    return STRATA_OK;
}

/* One engine operation as a signaled work request whose wr_id is its context. */
static void verbs_fill_wr(const inter_post_t *post, uint32_t peer, uint64_t seq,
                          struct ibv_send_wr *wr, struct ibv_sge *sge)
{
    verbs_ctx_t *ctx = post->context;

    ctx->kind = VERBS_CTX_TX;
    ctx->peer = peer;
    ctx->seq  = seq;
    memset(wr, 0, sizeof(*wr));
    sge->addr       = (uintptr_t)post->buf;
    sge->length     = (uint32_t)post->len;
    sge->lkey       = post->desc ? ((const struct ibv_mr *)post->desc)->lkey : 0;
    wr->wr_id       = (uintptr_t)ctx;
    wr->sg_list     = sge;
    wr->num_sge     = post->len > 0 ? 1 : 0;
    wr->send_flags  = IBV_SEND_SIGNALED;
    switch (post->kind) {
    case INTER_POST_WRITE:
        wr->opcode = post->with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
        wr->imm_data = post->with_imm ? htonl(post->imm) : 0;
        wr->wr.rdma.remote_addr = post->raddr;
        wr->wr.rdma.rkey        = (uint32_t)post->rkey;
        break;
    case INTER_POST_READ:
        wr->opcode = IBV_WR_RDMA_READ;
        wr->wr.rdma.remote_addr = post->raddr;
        wr->wr.rdma.rkey        = (uint32_t)post->rkey;
        break;
    case INTER_POST_SEND:
        wr->opcode = IBV_WR_SEND;
        break;
    }
}

/* Post a chain of n requests to one peer; how many went in *posted_p. */
static strata_status_t verbs_post_chain(verbs_transport_t *vt, verbs_peer_t *peer,
                                        struct ibv_send_wr *wrs, int n, int *posted_p)
{
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(peer->qp, wrs, &bad);
    int posted = n;

    if (rc != 0) {
        posted = (bad >= wrs && bad < wrs + n) ? (int)(bad - wrs) : 0;
        if (rc != ENOMEM) {
            UTIL_LOG_ERROR("verbs: %s: ibv_post_send to QP %u: %s", vt->base.name,
                           peer->qp->qp_num, strerror(rc));
        }
    }
    peer->posted += (uint64_t)posted;
    if (posted > 0) {
        peer->last_signaled = peer->posted; /* every engine request is signaled */
    }
    *posted_p = posted;
    return rc == 0 ? STRATA_OK : verbs_post_status(rc);
}

/*
 * Consecutive posts to one peer go as one chain (one doorbell); a chain ends at another
 * peer, at VERBS_POST_BATCH requests, at a full send queue (STRATA_ERR_BUSY) or at a post
 * that cannot go (what was chained before it is posted first).
 */
strata_status_t verbs_post(inter_transport_t *tp, const inter_post_t *posts, int count,
                           int *posted_p)
{
    verbs_transport_t *vt = verbs_of(tp);
    struct ibv_send_wr wrs[VERBS_POST_BATCH];
    struct ibv_sge sges[VERBS_POST_BATCH];
    strata_status_t status = STRATA_OK, chain_status;
    int done = 0, n, went;
    verbs_peer_t *peer;

    while (done < count && status == STRATA_OK) {
        uint64_t index = posts[done].peer;

        status = verbs_peer_get(vt, index, &peer);
        for (n = 0; status == STRATA_OK && done + n < count && n < VERBS_POST_BATCH &&
                    posts[done + n].peer == index; ++n) {
            status = verbs_post_check(vt, &posts[done + n]);
            if (status == STRATA_OK && !verbs_sq_room(vt, peer, (uint64_t)n + 1)) {
                status = STRATA_ERR_BUSY;
            }
            if (status != STRATA_OK) {
                break;
            }
            verbs_fill_wr(&posts[done + n], (uint32_t)index, peer->posted + (uint64_t)n + 1,
                          &wrs[n], &sges[n]);
            wrs[n].next = NULL;
            if (n > 0) {
                wrs[n - 1].next = &wrs[n];
            }
        }
        if (n == 0) {
            break;
        }
        chain_status = verbs_post_chain(vt, peer, wrs, n, &went);
        done += went;
        if (chain_status != STRATA_OK) {
            status = chain_status;
        }
    }
    *posted_p = done;
    return status;
}

/*
 * A send carried inline, without a completion for the engine. An RC send queue frees a
 * slot only when that request or a later one completes signaled, so every signal_every-th
 * injected request is signaled (its context is the peer's own), and a queue whose
 * requests were all unsignaled cannot fill.
 */
strata_status_t verbs_inject(inter_transport_t *tp, uint64_t index, const void *buf, size_t len)
{
    verbs_transport_t *vt = verbs_of(tp);
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = (uint32_t)len, .lkey = 0};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = len > 0 ? 1 : 0,
                             .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_INLINE};
    struct ibv_send_wr *bad = NULL;
    strata_status_t status;
    verbs_peer_t *peer;
    bool signal;
    int rc;

    if (len > tp->inject_size) {
        UTIL_LOG_ERROR("verbs: %s: inject of %zu bytes, more than its %zu inline", tp->name,
                       len, tp->inject_size);
        return STRATA_ERR_INVALID;
    }
    if ((status = verbs_peer_get(vt, index, &peer)) != STRATA_OK) {
        return status;
    }
    signal = peer->posted + 1 - peer->last_signaled >= vt->signal_every;
    if (!verbs_sq_room(vt, peer, 1) || (signal && peer->inject_out)) {
        return STRATA_ERR_BUSY;
    }
    /* Every request names the peer's context (a flushed one completes even unsignaled);
     * only a signaled one sets how far its completion retires the queue. */
    peer->inject_ctx.kind = VERBS_CTX_INJECT;
    peer->inject_ctx.peer = (uint32_t)index;
    wr.wr_id              = (uintptr_t)&peer->inject_ctx;
    if (signal) {
        wr.send_flags |= IBV_SEND_SIGNALED;
        peer->inject_ctx.seq = peer->posted + 1;
    }
    rc = ibv_post_send(peer->qp, &wr, &bad);
    if (rc != 0) {
        if (rc != ENOMEM) {
            UTIL_LOG_ERROR("verbs: %s: inject to QP %u: %s", tp->name, peer->qp->qp_num,
                           strerror(rc));
        }
        return verbs_post_status(rc);
    }
    peer->posted++;
    if (signal) {
        peer->last_signaled = peer->posted;
        peer->inject_out    = true;
    }
    return STRATA_OK;
}

strata_status_t verbs_post_recv(inter_transport_t *tp, void *buf, size_t len, void *desc,
                                void *context)
{
    verbs_transport_t *vt = verbs_of(tp);
    verbs_ctx_t *ctx = context;
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = (uint32_t)len};
    struct ibv_recv_wr wr = {.wr_id = (uintptr_t)context, .sg_list = &sge, .num_sge = 1};
    struct ibv_recv_wr *bad = NULL;
    int rc;

    if (ctx == NULL || desc == NULL || len > UINT32_MAX || vt->shut) {
        UTIL_LOG_ERROR("verbs: %s: cannot post a receive of %zu bytes with context %p and "
                       "descriptor %p", tp->name, len, context, desc);
        return STRATA_ERR_INVALID;
    }
    sge.lkey  = ((const struct ibv_mr *)desc)->lkey;
    ctx->kind = VERBS_CTX_RX;
    ctx->peer = UINT32_MAX;
    ctx->seq  = 0;
    rc = ibv_post_srq_recv(vt->srq, &wr, &bad);
    if (rc != 0 && rc != ENOMEM) {
        UTIL_LOG_ERROR("verbs: %s: ibv_post_srq_recv: %s", tp->name, strerror(rc));
    }
    return rc == 0 ? STRATA_OK : verbs_post_status(rc);
}

/* An error completion: the QP it came from is in error, and so is that peer for good. */
static void verbs_on_error(verbs_transport_t *vt, const struct ibv_wc *wc, const verbs_ctx_t *ctx)
{
    int index = ctx->kind == VERBS_CTX_RX ? verbs_peer_of_qpn(vt, wc->qp_num) : (int)ctx->peer;

    if (index < 0 || index >= vt->world) {
        UTIL_LOG_WARN("verbs: %s: error completion on unknown QP %u: %s", vt->base.name,
                      wc->qp_num, ibv_wc_status_str(wc->status));
        return;
    }
    if (!vt->peers[index].failed) {
        UTIL_LOG_WARN("verbs: %s: rank %d's QP %u failed: %s (vendor error 0x%x); nothing "
                      "more is posted to it", vt->base.name, index, wc->qp_num,
                      ibv_wc_status_str(wc->status), wc->vendor_err);
    }
    vt->peers[index].failed = true;
}

/* A send queue's completion frees its slot and the unsignaled ones before it. */
static void verbs_retire(verbs_transport_t *vt, const verbs_ctx_t *ctx)
{
    verbs_peer_t *peer;

    if (ctx->peer >= (uint32_t)vt->world) {
        return;
    }
    peer = &vt->peers[ctx->peer];
    if (ctx->seq > peer->retired) {
        peer->retired = ctx->seq;
    }
    if (ctx->kind == VERBS_CTX_INJECT) {
        peer->inject_out = false;
    }
}

/* The device's asynchronous events, read without blocking: a QP that broke fails its
 * peer; a broken completion queue, receive queue or device breaks the rail. */
static strata_status_t verbs_async_events(verbs_transport_t *vt)
{
    struct ibv_async_event event;
    strata_status_t status = STRATA_OK;
    int index;

    while (ibv_get_async_event(vt->ctx, &event) == 0) {
        switch (event.event_type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
            index = verbs_peer_of_qpn(vt, event.element.qp->qp_num);
            UTIL_LOG_WARN("verbs: %s: %s on rank %d's QP %u", vt->base.name,
                          ibv_event_type_str(event.event_type), index,
                          event.element.qp->qp_num);
            if (index >= 0) {
                vt->peers[index].failed = true;
            }
            break;
        case IBV_EVENT_CQ_ERR:
        case IBV_EVENT_SRQ_ERR:
        case IBV_EVENT_DEVICE_FATAL:
            UTIL_LOG_ERROR("verbs: %s: %s", vt->base.name, ibv_event_type_str(event.event_type));
            status = STRATA_ERR_TRANSPORT;
            break;
        case IBV_EVENT_PORT_ERR:
            UTIL_LOG_WARN("verbs: %s: the port went down: its peers fail as their requests "
                          "time out", vt->base.name);
            break;
        default:
            UTIL_LOG_DEBUG("verbs: %s: %s", vt->base.name, ibv_event_type_str(event.event_type));
            break;
        }
        ibv_ack_async_event(&event);
    }
    return status;
}

strata_status_t verbs_poll(inter_transport_t *tp, inter_cqe_t *cqes, int max, int *count_p)
{
    verbs_transport_t *vt = verbs_of(tp);
    struct ibv_wc wcs[VERBS_POLL_BATCH];
    int n, out = 0;
    uint64_t now;

    *count_p = 0;
    if (vt->shut) {
        return STRATA_ERR_TRANSPORT;
    }
    n = ibv_poll_cq(vt->cq, UTIL_MIN(max, VERBS_POLL_BATCH), wcs);
    if (n < 0) {
        UTIL_LOG_ERROR("verbs: %s: ibv_poll_cq failed (%d)", tp->name, n);
        return STRATA_ERR_TRANSPORT;
    }
    for (int i = 0; i < n; ++i) {
        const verbs_ctx_t *ctx = (const verbs_ctx_t *)(uintptr_t)wcs[i].wr_id;

        if (wcs[i].status != IBV_WC_SUCCESS) {
            verbs_on_error(vt, &wcs[i], ctx);
        }
        if (ctx->kind != VERBS_CTX_RX) {
            verbs_retire(vt, ctx);
        }
        if (ctx->kind != VERBS_CTX_INJECT) {
            verbs_wc_to_cqe(&wcs[i], ctx, &cqes[out++]);
        }
    }
    *count_p = out;
    now      = n == 0 ? util_clock_now_ns() : 0;
    if (n == 0 && now >= vt->next_async_ns) {
        vt->next_async_ns = now + VERBS_ASYNC_PERIOD_NS;
        return verbs_async_events(vt);
    }
    return STRATA_OK;
}
