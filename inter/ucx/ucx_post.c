/*
 * ucx transport, the proxy's side: posting writes (ucp_put_nbx), reads (ucp_get_nbx),
 * messages (tagged sends into the peer's posted receives) and injects; immediates (a flush
 * of the endpoint, then an active message); and the completion queue UCX's callbacks fill
 * and poll drains.
 */
#include "inter/ucx/ucx_internal.h"

#include <stdlib.h>
#include <string.h>

/* Calls of ucp_worker_progress per round while they keep finding work. */
#define UCX_PROGRESS_ROUNDS 16

/* --- Completion queue ------------------------------------------------------------------ */

static bool ucx_cq_grow(ucx_transport_t *ucx)
{
    size_t size = ucx->cq_size ? 2 * ucx->cq_size : UCX_CQ_INITIAL;
    inter_cqe_t *cq = malloc(size * sizeof(*cq));

    if (cq == NULL) {
        return false;
    }
    for (size_t i = 0; i < ucx->cq_count; ++i) {
        cq[i] = ucx->cq[(ucx->cq_head + i) % ucx->cq_size];
    }
    free(ucx->cq);
    ucx->cq      = cq;
    ucx->cq_head = 0;
    ucx->cq_size = size;
    return true;
}

/* Queue a completion (from UCX's callbacks or the proxy); a queue that cannot grow breaks. */
static void ucx_cq_push(ucx_transport_t *ucx, inter_cqe_kind_t kind, strata_status_t status,
                        void *context, size_t length, uint32_t imm)
{
    if (ucx->cq_count == ucx->cq_size && !ucx_cq_grow(ucx)) {
        /* A lost completion would leave its request waiting forever: break the rail. */
        UTIL_LOG_ERROR("ucx: %s: out of memory queueing a completion", ucx->base.name);
        ucx->cq_broken = true;
        return;
    }
    ucx->cq[(ucx->cq_head + ucx->cq_count++) % ucx->cq_size] = (inter_cqe_t){
        .kind = kind, .status = status, .context = context, .length = length, .imm = imm};
}

void ucx_op_fail(ucx_transport_t *ucx, ucx_op_t *op, strata_status_t status)
{
    ucx_cq_push(ucx, INTER_CQE_LOCAL, status, op, 0, 0);
}

/* An operation's request: done now (NULL), failed now, or its callback will come. */
static void ucx_track(ucx_transport_t *ucx, ucs_status_ptr_t request, ucx_op_t *op)
{
    if (request == NULL) {
        ucx_cq_push(ucx, INTER_CQE_LOCAL, STRATA_OK, op, 0, 0);
    } else if (UCS_PTR_IS_ERR(request)) {
        UTIL_LOG_DEBUG("ucx: %s: posting failed: %s", ucx->base.name,
                       ucs_status_string(UCS_PTR_STATUS(request)));
        ucx_op_fail(ucx, op, ucx_cqe_status(UCS_PTR_STATUS(request)));
    } else {
        ++ucx->in_flight;
    }
}

/* The completion of a write, read or message, or of a write's immediate. */
static void ucx_op_done(void *request, ucs_status_t status, void *user_data)
{
    ucx_op_t *op = user_data;
    ucx_transport_t *ucx = op->peer->ucx;

    --ucx->in_flight;
    if (status != UCS_OK) {
        UTIL_LOG_DEBUG("ucx: %s: operation to peer %llu: %s", ucx->base.name,
                       (unsigned long long)op->peer->handle, ucs_status_string(status));
    }
    ucx_cq_push(ucx, INTER_CQE_LOCAL, ucx_cqe_status(status), op, 0, 0);
    ucp_request_free(request);
}

static ucp_request_param_t ucx_param(void *user_data)
{
    return (ucp_request_param_t){
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send      = ucx_op_done,
        .user_data    = user_data,
    };
}

/* --- Writes, reads and immediates ----------------------------------------------------------- */

/* A write with an immediate is put without a callback; the flush after it says it landed. */
static void ucx_put_for_imm(ucx_transport_t *ucx, ucx_op_t *op, ucp_rkey_h rkey)
{
    ucx_peer_t *peer = op->peer;
    ucp_request_param_t param = {.op_attr_mask = 0};
    ucs_status_ptr_t request = ucp_put_nbx(peer->ep, op->u.rma.buf, op->u.rma.len,
                                           op->u.rma.raddr, rkey, &param);

    if (UCS_PTR_IS_ERR(request)) {
        UTIL_LOG_DEBUG("ucx: %s: the put of a write with an immediate: %s", ucx->base.name,
                       ucs_status_string(UCS_PTR_STATUS(request)));
        ucx_op_fail(ucx, op, ucx_cqe_status(UCS_PTR_STATUS(request)));
        return;
    }
    if (request != NULL) {
        ucp_request_free(request); /* completes on its own; the flush covers it */
    }
    ucx_op_list_push(&peer->unflushed, op);
    if (!peer->to_flush) {
        peer->to_flush   = true;
        peer->next_flush = ucx->flush_list;
        ucx->flush_list  = peer;
    }
}

void ucx_rma_issue(ucx_transport_t *ucx, ucx_op_t *op, ucp_rkey_h rkey)
{
    ucp_request_param_t param = ucx_param(op);
    ucx_peer_t *peer = op->peer;

    if (peer->error != UCS_OK) {
        ucx_op_fail(ucx, op, STRATA_ERR_TRANSPORT);
    } else if (op->kind == UCX_OP_READ) {
        ucx_track(ucx, ucp_get_nbx(peer->ep, op->u.rma.buf, op->u.rma.len, op->u.rma.raddr,
                                   rkey, &param), op);
    } else if (op->with_imm) {
        ucx_put_for_imm(ucx, op, rkey);
    } else {
        ucx_track(ucx, ucp_put_nbx(peer->ep, op->u.rma.buf, op->u.rma.len, op->u.rma.raddr,
                                   rkey, &param), op);
    }
}

/*
 * The flush of a peer's writes with immediates came back: every put issued on the
 * endpoint before it is complete at the target (ucp_ep_flush_nbx), so the immediates may
 * go. user_data: the batch, linked through next.
 */
static void ucx_flush_done(void *request, ucs_status_t status, void *user_data)
{
    ucx_op_t *batch = user_data;
    ucx_transport_t *ucx = batch->peer->ucx;

    --ucx->in_flight;
    if (status == UCS_OK) {
        ucx_op_list_append(&ucx->flushed, batch);
    } else {
        for (ucx_op_t *op = batch, *next; op != NULL; op = next) {
            next = op->next;
            ucx_op_fail(ucx, op, ucx_cqe_status(status));
        }
    }
    ucp_request_free(request);
}

/* One flush per peer written to with immediates since the last call. */
static int ucx_flush_peers(ucx_transport_t *ucx)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send      = ucx_flush_done,
    };
    ucx_peer_t *peer;
    ucs_status_ptr_t request;
    int n = 0;

    while ((peer = ucx->flush_list) != NULL) {
        ucx_op_t *batch = ucx_op_list_take(&peer->unflushed);

        ucx->flush_list = peer->next_flush;
        peer->to_flush  = false;
        param.user_data = batch;
        request = peer->error == UCS_OK ? ucp_ep_flush_nbx(peer->ep, &param)
                                        : UCS_STATUS_PTR(peer->error);
        if (request == NULL) {
            ucx_op_list_append(&ucx->flushed, batch);
        } else if (UCS_PTR_IS_ERR(request)) {
            UTIL_LOG_DEBUG("ucx: %s: flushing to peer %llu: %s", ucx->base.name,
                           (unsigned long long)peer->handle,
                           ucs_status_string(UCS_PTR_STATUS(request)));
            for (ucx_op_t *op = batch, *next; op != NULL; op = next) {
                next = op->next;
                ucx_op_fail(ucx, op, ucx_cqe_status(UCS_PTR_STATUS(request)));
            }
        } else {
            ++ucx->in_flight;
        }
        ++n;
    }
    return n;
}

/* Immediates of flushed writes: an active message each; the write completes with it. */
static int ucx_send_immediates(ucx_transport_t *ucx)
{
    ucx_op_t *op = ucx_op_list_take(&ucx->flushed), *next;
    int n = 0;

    for (; op != NULL; op = next, ++n) {
        ucp_request_param_t param = ucx_param(op);

        next = op->next;
        if (op->peer->error != UCS_OK) {
            ucx_op_fail(ucx, op, STRATA_ERR_TRANSPORT);
            continue;
        }
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
        param.flags         = UCP_AM_SEND_FLAG_EAGER;
        ucx_track(ucx, ucp_am_send_nbx(op->peer->ep, UCX_AM_IMM, &op->imm, sizeof(op->imm),
                                       NULL, 0, &param), op);
    }
    return n;
}

ucs_status_t ucx_imm_handler(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param)
{
    ucx_transport_t *ucx = arg;
    uint32_t imm;

    if (header_length != sizeof(imm)) {
        UTIL_LOG_WARN("ucx: %s: dropped an immediate of %zu bytes", ucx->base.name,
                      header_length);
        return UCS_OK;
    }
    memcpy(&imm, header, sizeof(imm));
    ucx_cq_push(ucx, INTER_CQE_IMM, STRATA_OK, NULL, 0, imm);
    return UCS_OK;
}

/* Operations whose rkey came since the last poll. */
static int ucx_post_ready(ucx_transport_t *ucx)
{
    ucx_op_t *op = ucx_op_list_take(&ucx->ready), *next;
    int n = 0;

    for (; op != NULL; op = next, ++n) {
        next = op->next;
        ucx_rma_start(ucx, op);
    }
    return n;
}

/* --- Posting --------------------------------------------------------------------------- */

static ucx_peer_t *ucx_peer_of(ucx_transport_t *ucx, uint64_t handle)
{
    return handle < ucx->num_peers ? ucx->peers[handle] : NULL;
}

static strata_status_t ucx_post_one(ucx_transport_t *ucx, const inter_post_t *post)
{
    ucx_peer_t *peer = ucx_peer_of(ucx, post->peer);
    ucx_op_t *op = post->context;
    ucp_request_param_t param;
    ucs_status_ptr_t request;

    if (peer == NULL || post->len > UCX_MAX_SIZE ||
        (post->kind != INTER_POST_WRITE && post->kind != INTER_POST_READ &&
         post->kind != INTER_POST_SEND)) {
        UTIL_LOG_ERROR("ucx: %s: bad post (kind %d, peer %llu of %zu, %zu bytes)",
                       ucx->base.name, (int)post->kind, (unsigned long long)post->peer,
                       ucx->num_peers, post->len);
        return STRATA_ERR_INVALID;
    }
    if (peer->error != UCS_OK) {
        return STRATA_ERR_TRANSPORT;
    }
    *op = (ucx_op_t){.peer = peer, .imm = post->imm, .kind = (uint8_t)post->kind,
                     .with_imm = post->kind == INTER_POST_WRITE && post->with_imm,
                     .u.rma = {.buf = post->buf, .len = post->len, .raddr = post->raddr,
                               .key = post->rkey}};
    if (post->kind != INTER_POST_SEND) {
        ucx_rma_start(ucx, op);
        return STRATA_OK;
    }
    param   = ucx_param(op);
    request = ucp_tag_send_nbx(peer->ep, post->buf, post->len, UCX_TAG, &param);
    if (UCS_PTR_IS_ERR(request)) {
        UTIL_LOG_DEBUG("ucx: %s: sending to peer %llu: %s", ucx->base.name,
                       (unsigned long long)post->peer,
                       ucs_status_string(UCS_PTR_STATUS(request)));
        return STRATA_ERR_TRANSPORT;
    }
    ucx_track(ucx, request, op);
    return STRATA_OK;
}

strata_status_t ucx_post(inter_transport_t *tp, const inter_post_t *posts, int count,
                         int *posted_p)
{
    ucx_transport_t *ucx = ucx_of(tp);
    strata_status_t status = STRATA_OK;
    int i;

    pthread_mutex_lock(&ucx->progress_lock);
    for (i = 0; i < count && status == STRATA_OK; ++i) {
        status = ucx_post_one(ucx, &posts[i]);
    }
    *posted_p = status == STRATA_OK ? i : i - 1;
    /* The writes with immediates of this call share a flush per peer. */
    ucx_flush_peers(ucx);
    ucx_send_immediates(ucx);
    pthread_mutex_unlock(&ucx->progress_lock);
    return status;
}

static void ucx_inject_done(void *request, ucs_status_t status, void *user_data)
{
    ucx_inject_slot_t *slot = user_data;
    ucx_transport_t *ucx = slot->ucx;

    --ucx->in_flight;
    ucx->inject_free[ucx->num_inject_free++] = slot->index;
    ucp_request_free(request);
}

static strata_status_t ucx_inject_locked(ucx_transport_t *ucx, uint64_t peer_handle,
                                         const void *buf, size_t len)
{
    ucx_peer_t *peer = ucx_peer_of(ucx, peer_handle);
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send      = ucx_inject_done,
    };
    ucx_inject_slot_t *slot;
    ucs_status_ptr_t request;

    if (peer == NULL || len > UCX_INJECT_SIZE) {
        return STRATA_ERR_INVALID;
    }
    if (peer->error != UCS_OK) {
        return STRATA_ERR_TRANSPORT;
    }
    if (ucx->num_inject_free == 0) {
        return STRATA_ERR_BUSY;
    }
    slot = &ucx->inject_slots[ucx->inject_free[--ucx->num_inject_free]];
    memcpy(slot->data, buf, len);
    param.user_data = slot;
    request = ucp_tag_send_nbx(peer->ep, slot->data, len, UCX_TAG, &param);
    if (request == NULL || UCS_PTR_IS_ERR(request)) {
        ucx->inject_free[ucx->num_inject_free++] = slot->index;
        if (request != NULL) {
            UTIL_LOG_ERROR("ucx: %s: inject to peer %llu: %s", ucx->base.name,
                           (unsigned long long)peer_handle,
                           ucs_status_string(UCS_PTR_STATUS(request)));
        }
        return request == NULL ? STRATA_OK : STRATA_ERR_TRANSPORT;
    }
    ++ucx->in_flight;
    return STRATA_OK;
}

strata_status_t ucx_inject(inter_transport_t *tp, uint64_t peer, const void *buf, size_t len)
{
    ucx_transport_t *ucx = ucx_of(tp);
    strata_status_t status;

    pthread_mutex_lock(&ucx->progress_lock);
    status = ucx_inject_locked(ucx, peer, buf, len);
    pthread_mutex_unlock(&ucx->progress_lock);
    return status;
}

/* --- Receives -------------------------------------------------------------------------- */

static void ucx_rx_unlink(ucx_transport_t *ucx, ucx_op_t *op)
{
    if (op->u.rx.prev != NULL) {
        op->u.rx.prev->next = op->next;
    } else {
        ucx->rx_posted = op->next;
    }
    if (op->next != NULL) {
        op->next->u.rx.prev = op->u.rx.prev;
    }
}

static void ucx_recv_done(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                          void *user_data)
{
    ucx_op_t *op = user_data;
    ucx_transport_t *ucx = op->u.rx.ucx;

    --ucx->in_flight;
    ucx_rx_unlink(ucx, op);
    if (status != UCS_OK && status != UCS_ERR_CANCELED) {
        UTIL_LOG_DEBUG("ucx: %s: receive: %s", ucx->base.name, ucs_status_string(status));
    }
    ucx_cq_push(ucx, INTER_CQE_RECV, ucx_cqe_status(status), op,
                status == UCS_OK ? info->length : 0, 0);
    ucp_request_free(request);
}

static strata_status_t ucx_post_recv_locked(ucx_transport_t *ucx, void *buf, size_t len,
                                            ucx_op_t *op)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
        .cb.recv      = ucx_recv_done,
        .user_data    = op,
    };
    ucs_status_ptr_t request;

    if (ucx->shut) {
        return STRATA_ERR_CANCELLED;
    }
    *op = (ucx_op_t){.kind = UCX_OP_RECV, .u.rx = {.ucx = ucx}};
    request = ucp_tag_recv_nbx(ucx->worker, buf, len, UCX_TAG, UCX_TAG_MASK, &param);
    if (UCS_PTR_IS_ERR(request)) {
        UTIL_LOG_ERROR("ucx: %s: posting a receive: %s", ucx->base.name,
                       ucs_status_string(UCS_PTR_STATUS(request)));
        return STRATA_ERR_TRANSPORT;
    }
    ++ucx->in_flight;
    op->u.rx.request = request;
    op->next         = ucx->rx_posted;
    if (op->next != NULL) {
        op->next->u.rx.prev = op;
    }
    ucx->rx_posted = op;
    return STRATA_OK;
}

strata_status_t ucx_post_recv(inter_transport_t *tp, void *buf, size_t len, void *desc,
                              void *context)
{
    ucx_transport_t *ucx = ucx_of(tp);
    strata_status_t status;

    (void)desc; /* UCX registers what it needs itself (see ucx_mem_register) */
    pthread_mutex_lock(&ucx->progress_lock);
    status = ucx_post_recv_locked(ucx, buf, len, context);
    pthread_mutex_unlock(&ucx->progress_lock);
    return status;
}

void ucx_cancel_receives(ucx_transport_t *ucx)
{
    ucx_op_t *op = ucx->rx_posted, *next;

    /* Each completes with UCS_ERR_CANCELED through ucx_recv_done, which unlinks it. */
    for (; op != NULL; op = next) {
        next = op->next;
        ucp_request_cancel(ucx->worker, op->u.rx.request);
    }
}

/* --- Polling --------------------------------------------------------------------------- */

int ucx_progress_round(ucx_transport_t *ucx)
{
    int n = 0, made;

    while (n < UCX_PROGRESS_ROUNDS && (made = (int)ucp_worker_progress(ucx->worker)) != 0) {
        n += made;
    }
    /* Work UCX's callbacks left for outside them, in an order that lets each feed the next. */
    n += ucx_memory_progress(ucx);
    n += ucx_post_ready(ucx);
    n += ucx_flush_peers(ucx);
    n += ucx_send_immediates(ucx);
    return n;
}

strata_status_t ucx_poll(inter_transport_t *tp, inter_cqe_t *cqes, int max, int *count_p)
{
    ucx_transport_t *ucx = ucx_of(tp);
    strata_status_t status = STRATA_OK;
    int n = 0;

    pthread_mutex_lock(&ucx->progress_lock);
    ucx_progress_round(ucx);
    if (ucx->cq_broken) {
        status = STRATA_ERR_TRANSPORT;
    }
    while (status == STRATA_OK && n < max && ucx->cq_count > 0) {
        cqes[n++] = ucx->cq[ucx->cq_head];
        ucx->cq_head = (ucx->cq_head + 1) % ucx->cq_size;
        --ucx->cq_count;
    }
    pthread_mutex_unlock(&ucx->progress_lock);
    *count_p = n;
    return status;
}
