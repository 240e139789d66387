/*
 * ucx transport: registrations and the exchange of their rkeys (docs/transports.md, "ucx").
 *
 * A registration is ucp_mem_map'd and its rkey packed at once; its key is a 64-bit id this
 * transport gives (the requested key when it is above every id given before), never
 * reused. A peer that writes or reads (owner, key) for the first time asks the owner by an
 * active message and queues the operation; the owner answers with the packed rkey, or with
 * "not found" for a key never registered or already deregistered, which fails the queued
 * operations. The owner remembers who asked. Deregistration revokes the rkey at each of
 * them and waits (up to STRATA_UCX_TIMEOUT, and only while the proxy polls) until they
 * acknowledged dropping it, so an operation posted after deregistration returned asks
 * again and fails instead of reaching memory that is no longer registered.
 */
#include "inter/ucx/ucx_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How long a deregistration waiting for acknowledgements sleeps between its checks. */
#define UCX_REVOKE_NAP_NS (50 * UTIL_NSEC_PER_USEC)

strata_status_t ucx_memory_init(ucx_transport_t *ucx)
{
    pthread_condattr_t attr;

    if (pthread_mutex_init(&ucx->lock, NULL) != 0) {
        return STRATA_ERR_NO_MEMORY;
    }
    if (pthread_mutex_init(&ucx->progress_lock, NULL) != 0) {
        pthread_mutex_destroy(&ucx->lock);
        return STRATA_ERR_NO_MEMORY;
    }
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (pthread_cond_init(&ucx->revoked, &attr) != 0) {
        pthread_condattr_destroy(&attr);
        pthread_mutex_destroy(&ucx->progress_lock);
        pthread_mutex_destroy(&ucx->lock);
        return STRATA_ERR_NO_MEMORY;
    }
    pthread_condattr_destroy(&attr);
    ucx->replies_tail = &ucx->replies;
    return STRATA_OK;
}

static void ucx_mr_free(ucx_transport_t *ucx, ucx_mr_t *mr)
{
    if (mr->rkey_buf != NULL) {
        ucp_rkey_buffer_release(mr->rkey_buf);
    }
    if (mr->memh != NULL) {
        ucs_status_t status = ucp_mem_unmap(ucx->context, mr->memh);

        if (status != UCS_OK) {
            UTIL_LOG_WARN("ucx: %s: ucp_mem_unmap: %s", ucx->base.name,
                          ucs_status_string(status));
        }
    }
    free(mr->fetchers);
    free(mr);
}

static void ucx_mr_free_cb(void *value, void *arg)
{
    ucx_mr_free(arg, value);
}

void ucx_memory_cleanup(ucx_transport_t *ucx)
{
    ucx_reply_t *reply;

    /* Registrations the engine left open (it closes them all before shutdown). */
    ucx_map_for_each(&ucx->mrs, ucx_mr_free_cb, ucx);
    ucx_map_cleanup(&ucx->mrs);
    while ((reply = ucx->replies) != NULL) {
        ucx->replies = reply->next;
        free(reply);
    }
    while (ucx->revokes != NULL) {
        ucx_revoke_t *revoke = ucx->revokes;

        ucx->revokes = revoke->next;
        free(revoke);
    }
    pthread_cond_destroy(&ucx->revoked);
    pthread_mutex_destroy(&ucx->progress_lock);
    pthread_mutex_destroy(&ucx->lock);
}

/* --- Registration ------------------------------------------------------------------------ */

strata_status_t ucx_mem_register(inter_transport_t *tp, void *addr, size_t len,
                                 inter_mem_kind_t kind, int device, uint64_t requested_key,
                                 inter_tmr_t *tmr)
{
    ucx_transport_t *ucx = ucx_of(tp);
    ucp_mem_map_params_t params = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address    = addr,
        .length     = len,
    };
    ucs_status_t ucs;
    strata_status_t status;
    ucx_mr_t *mr;

    (void)device;
    if (kind != INTER_MEM_HOST) {
        return STRATA_ERR_UNSUPPORTED; /* tp->hmem is false */
    }
    if ((mr = calloc(1, sizeof(*mr))) == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    /* mt_workers_shared: the context's lock makes these safe beside the proxy's progress. */
    ucs = ucp_mem_map(ucx->context, &params, &mr->memh);
    if (ucs == UCS_OK) {
        ucs = ucp_rkey_pack(ucx->context, mr->memh, &mr->rkey_buf, &mr->rkey_len);
    }
    if (ucs != UCS_OK) {
        UTIL_LOG_ERROR("ucx: %s: registering %zu bytes at %p: %s", tp->name, len, addr,
                       ucs_status_string(ucs));
        ucx_mr_free(ucx, mr);
        return ucs == UCS_ERR_NO_MEMORY ? STRATA_ERR_NO_MEMORY : STRATA_ERR_TRANSPORT;
    }
    pthread_mutex_lock(&ucx->lock);
    mr->key        = requested_key > ucx->last_key ? requested_key : ucx->last_key + 1;
    ucx->last_key  = mr->key;
    status         = ucx_map_put(&ucx->mrs, mr->key, mr);
    pthread_mutex_unlock(&ucx->lock);
    if (status != STRATA_OK) {
        ucx_mr_free(ucx, mr);
        return status;
    }
    tmr->handle = mr;
    tmr->desc   = NULL; /* posts need no descriptor: UCX registers what it sends itself */
    tmr->key    = mr->key;
    return STRATA_OK;
}

/* Queue a revoke to every peer that was given the rkey (lock held). */
static int ucx_revoke_queue(ucx_transport_t *ucx, ucx_mr_t *mr, ucx_revoke_wait_t *wait)
{
    int queued = 0;

    for (int i = 0; i < mr->num_fetchers; ++i) {
        ucx_revoke_t *revoke = calloc(1, sizeof(*revoke));

        if (revoke == NULL) {
            UTIL_LOG_WARN("ucx: %s: out of memory revoking key %llu", ucx->base.name,
                          (unsigned long long)mr->key);
            continue;
        }
        revoke->msg  = (ucx_revoke_msg_t){.key = mr->key, .cookie = mr->fetchers[i].cookie,
                                          .id = ++ucx->next_revoke_id};
        revoke->ep   = mr->fetchers[i].ep;
        revoke->wait = wait;
        revoke->next = ucx->revokes;
        ucx->revokes = revoke;
        atomic_fetch_add_explicit(&ucx->revokes_unsent, 1, memory_order_release);
        ++queued;
    }
    return queued;
}

/* Stop waiting: revokes still out no longer point at this deregistration (lock held). */
static void ucx_revoke_forget(ucx_transport_t *ucx, ucx_revoke_wait_t *wait)
{
    for (ucx_revoke_t *revoke = ucx->revokes; revoke != NULL; revoke = revoke->next) {
        if (revoke->wait == wait) {
            revoke->wait = NULL;
        }
    }
}

/*
 * Wait for the acks, up to the timeout (lock held). Where no one else progresses (caller
 * progress between waits, a stopped proxy) this thread does: revokes go and acks come only
 * through progress. Completions it makes stay queued for the engine's next poll.
 */
static void ucx_revoke_wait(ucx_transport_t *ucx, ucx_revoke_wait_t *wait, uint64_t key)
{
    uint64_t start = util_clock_now_ns(), now = start, next;
    struct timespec until;

    while (wait->remaining > 0) {
        if (now - start >= ucx->timeout_ns) {
            UTIL_LOG_DEBUG("ucx: %s: deregistered key %llu without %d peer%s acknowledging "
                           "the revoke within STRATA_UCX_TIMEOUT", ucx->base.name,
                           (unsigned long long)key, wait->remaining,
                           wait->remaining == 1 ? "" : "s");
            ucx_revoke_forget(ucx, wait);
            return;
        }
        /* Lock order: progress_lock, then lock (the handlers take lock). */
        if (pthread_mutex_trylock(&ucx->progress_lock) == 0) {
            pthread_mutex_unlock(&ucx->lock);
            if (ucx->worker != NULL) {
                ucx_progress_round(ucx);
            }
            pthread_mutex_unlock(&ucx->progress_lock);
            pthread_mutex_lock(&ucx->lock);
        }
        if (wait->remaining > 0) {
            next          = util_clock_now_ns() + UCX_REVOKE_NAP_NS;
            until.tv_sec  = (time_t)(next / UTIL_NSEC_PER_SEC);
            until.tv_nsec = (long)(next % UTIL_NSEC_PER_SEC);
            pthread_cond_timedwait(&ucx->revoked, &ucx->lock, &until);
        }
        now = util_clock_now_ns();
    }
}

void ucx_mem_deregister(inter_transport_t *tp, inter_tmr_t *tmr)
{
    ucx_transport_t *ucx = ucx_of(tp);
    ucx_mr_t *mr = tmr->handle;
    ucx_revoke_wait_t wait = {0};

    if (mr == NULL) {
        return;
    }
    pthread_mutex_lock(&ucx->lock);
    ucx_map_remove(&ucx->mrs, mr->key); /* from now on, asking for it finds nothing */
    if (!ucx->shut) {
        wait.remaining = ucx_revoke_queue(ucx, mr, &wait);
        ucx_revoke_wait(ucx, &wait, mr->key);
    }
    pthread_mutex_unlock(&ucx->lock);
    ucx_mr_free(ucx, mr);
    tmr->handle = NULL;
}

/* --- The asking side ------------------------------------------------------------------------ */

void ucx_rma_start(ucx_transport_t *ucx, ucx_op_t *op)
{
    ucx_peer_t *peer = op->peer;
    ucx_rkey_t *entry = ucx_map_get(&peer->rkeys, op->u.rma.key);
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags        = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER};
    ucs_status_ptr_t request;

    if (entry != NULL && entry->rkey != NULL) {
        ucx_rma_issue(ucx, op, entry->rkey);
        return;
    }
    if (peer->error != UCS_OK) {
        ucx_op_fail(ucx, op, STRATA_ERR_TRANSPORT);
        return;
    }
    if (entry != NULL) {
        ucx_op_list_push(&entry->waiting, op); /* asked already */
        return;
    }
    entry = calloc(1, sizeof(*entry));
    if (entry == NULL || ucx_map_put(&peer->rkeys, op->u.rma.key, entry) != STRATA_OK) {
        free(entry);
        ucx_op_fail(ucx, op, STRATA_ERR_TRANSPORT);
        return;
    }
    entry->peer    = peer;
    entry->key     = op->u.rma.key;
    entry->request = (ucx_rkey_req_t){.key = op->u.rma.key, .cookie = peer->handle};
    ucx_op_list_push(&entry->waiting, op);
    /* No callback: the header lives in the entry, kept until the peer's rkeys are released
     * at shutdown, after the worker's last progress. */
    request = ucp_am_send_nbx(peer->ep, UCX_AM_RKEY_REQ, &entry->request,
                              sizeof(entry->request), NULL, 0, &param);
    if (UCS_PTR_IS_ERR(request)) {
        UTIL_LOG_DEBUG("ucx: %s: asking peer %llu for key %llu: %s", ucx->base.name,
                       (unsigned long long)peer->handle, (unsigned long long)entry->key,
                       ucs_status_string(UCS_PTR_STATUS(request)));
        /* The endpoint's error callback fails the waiting operations. */
    } else if (request != NULL) {
        ucp_request_free(request);
    }
}

static void ucx_rkey_fail_waiting(ucx_transport_t *ucx, ucx_rkey_t *entry,
                                  strata_status_t status)
{
    for (ucx_op_t *op = ucx_op_list_take(&entry->waiting), *next; op != NULL; op = next) {
        next = op->next;
        ucx_op_fail(ucx, op, status);
    }
}

/* The owner answered: unpack and release the waiting operations, or fail them. */
static ucs_status_t ucx_rkey_rep_handler(void *arg, const void *header, size_t header_length,
                                         void *data, size_t length,
                                         const ucp_am_recv_param_t *param)
{
    ucx_transport_t *ucx = arg;
    ucx_rkey_rep_t rep;
    ucx_peer_t *peer;
    ucx_rkey_t *entry;
    ucs_status_t status;

    if (header_length != sizeof(rep) || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        UTIL_LOG_WARN("ucx: %s: dropped a malformed rkey reply", ucx->base.name);
        return UCS_OK;
    }
    memcpy(&rep, header, sizeof(rep));
    if (ucx->shut) {
        return UCS_OK; /* the rkeys are released: nothing is posted any more */
    }
    peer  = rep.cookie < ucx->num_peers ? ucx->peers[rep.cookie] : NULL;
    entry = peer ? ucx_map_get(&peer->rkeys, rep.key) : NULL;
    if (entry == NULL || entry->rkey != NULL) {
        return UCS_OK;
    }
    if (!rep.found) {
        UTIL_LOG_DEBUG("ucx: %s: peer %llu has no registration with key %llu",
                       ucx->base.name, (unsigned long long)peer->handle,
                       (unsigned long long)rep.key);
        ucx_map_remove(&peer->rkeys, rep.key);
        ucx_rkey_fail_waiting(ucx, entry, STRATA_ERR_TRANSPORT);
        free(entry);
        return UCS_OK;
    }
    status = ucp_ep_rkey_unpack(peer->ep, data, &entry->rkey);
    if (status != UCS_OK) {
        UTIL_LOG_ERROR("ucx: %s: unpacking peer %llu's rkey %llu: %s", ucx->base.name,
                       (unsigned long long)peer->handle, (unsigned long long)rep.key,
                       ucs_status_string(status));
        entry->rkey = NULL;
        ucx_map_remove(&peer->rkeys, rep.key);
        ucx_rkey_fail_waiting(ucx, entry, STRATA_ERR_TRANSPORT);
        free(entry);
        return UCS_OK;
    }
    /* Posted from poll, outside this callback. */
    ucx_op_list_append(&ucx->ready, ucx_op_list_take(&entry->waiting));
    return UCS_OK;
}

/* The owner deregistered the key: drop the rkey (operations already posted with it are
 * the application's race, as with any RDMA transport), then acknowledge. */
static ucs_status_t ucx_revoke_handler(void *arg, const void *header, size_t header_length,
                                       void *data, size_t length,
                                       const ucp_am_recv_param_t *param)
{
    ucx_transport_t *ucx = arg;
    ucx_revoke_msg_t msg;
    ucx_peer_t *peer;
    ucx_rkey_t *entry;
    ucx_reply_t *ack;

    if (header_length != sizeof(msg) || !(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)) {
        UTIL_LOG_WARN("ucx: %s: dropped a malformed revoke", ucx->base.name);
        return UCS_OK;
    }
    memcpy(&msg, header, sizeof(msg));
    if (ucx->shut) {
        return UCS_OK; /* shutting down: the rkeys go anyway, and nothing is posted */
    }
    peer  = msg.cookie < ucx->num_peers ? ucx->peers[msg.cookie] : NULL;
    entry = peer ? ucx_map_get(&peer->rkeys, msg.key) : NULL;
    if (entry != NULL && entry->rkey != NULL) {
        /* ucp_rkey_destroy(3): only once the operations using it are flushed. */
        ucx_map_remove(&peer->rkeys, msg.key);
        entry->next_retired = peer->retired;
        peer->retired       = entry;
        ucx->retire_pending = true;
    }
    if ((ack = calloc(1, sizeof(*ack))) != NULL) {
        ack->ep            = param->reply_ep;
        ack->am_id         = UCX_AM_REVOKE_ACK;
        ack->header.revoke = msg;
        ack->header_len    = sizeof(msg);
        *ucx->replies_tail = ack;
        ucx->replies_tail  = &ack->next;
    }
    return UCS_OK;
}

static void ucx_rkeys_destroy(ucx_rkey_t *list)
{
    for (ucx_rkey_t *entry = list, *next; entry != NULL; entry = next) {
        next = entry->next_retired;
        ucp_rkey_destroy(entry->rkey);
        free(entry);
    }
}

static void ucx_retire_done(void *request, ucs_status_t status, void *user_data)
{
    ucx_rkey_t *list = user_data;

    --list->peer->ucx->in_flight;
    ucx_rkeys_destroy(list);
    ucp_request_free(request);
}

/* Revoked rkeys: destroyed once a flush says no operation of this side uses them. */
int ucx_rkeys_retire(ucx_transport_t *ucx)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send      = ucx_retire_done,
    };
    ucs_status_ptr_t request;
    int n = 0;

    ucx->retire_pending = false;
    for (size_t i = 0; i < ucx->num_peers; ++i) {
        ucx_peer_t *peer = ucx->peers[i];

        if (peer->retired == NULL) {
            continue;
        }
        param.user_data = peer->retired;
        request = peer->error == UCS_OK ? ucp_ep_flush_nbx(peer->ep, &param) : NULL;
        if (request == NULL || UCS_PTR_IS_ERR(request)) {
            ucx_rkeys_destroy(peer->retired); /* nothing left in flight with them */
        } else {
            ++ucx->in_flight;
        }
        peer->retired = NULL;
        ++n;
    }
    return n;
}

void ucx_memory_peer_failed(ucx_transport_t *ucx, ucx_peer_t *peer)
{
    for (size_t i = 0; peer->rkeys.mask != 0 && i <= peer->rkeys.mask; ++i) {
        ucx_rkey_t *entry = peer->rkeys.slots[i].value;

        if (entry != NULL && entry->rkey == NULL) {
            ucx_rkey_fail_waiting(ucx, entry, STRATA_ERR_TRANSPORT);
        }
    }
    pthread_mutex_lock(&ucx->lock);
    for (ucx_revoke_t *revoke = ucx->revokes; revoke != NULL; revoke = revoke->next) {
        if (revoke->ep == peer->ep && revoke->wait != NULL) {
            revoke->wait->remaining--;
            revoke->wait = NULL;
        }
    }
    pthread_cond_broadcast(&ucx->revoked);
    pthread_mutex_unlock(&ucx->lock);
}

static void ucx_rkey_release_cb(void *value, void *arg)
{
    ucx_rkey_t *entry = value;

    if (entry->rkey != NULL) {
        ucp_rkey_destroy(entry->rkey);
        entry->rkey = NULL;
    }
    ucx_rkey_fail_waiting(arg, entry, STRATA_ERR_CANCELLED);
}

void ucx_peer_rkeys_release(ucx_transport_t *ucx, ucx_peer_t *peer)
{
    ucx_rkeys_destroy(peer->retired);
    peer->retired = NULL;
    /* The entries themselves stay until close: an rkey request still queued in UCX reads
     * its header from one while the endpoint closes. */
    ucx_map_for_each(&peer->rkeys, ucx_rkey_release_cb, ucx);
}

static void ucx_rkey_free_cb(void *value, void *arg)
{
    free(value);
}

void ucx_peer_rkeys_free(ucx_peer_t *peer)
{
    ucx_map_for_each(&peer->rkeys, ucx_rkey_free_cb, NULL);
    ucx_map_cleanup(&peer->rkeys);
}

/* --- The active messages of the exchange ------------------------------------------------ */

strata_status_t ucx_memory_set_handlers(ucx_transport_t *ucx)
{
    static const struct {
        unsigned id;
        ucp_am_recv_callback_t cb;
    } handlers[] = {
        {UCX_AM_RKEY_REQ, ucx_rkey_req_handler},
        {UCX_AM_RKEY_REP, ucx_rkey_rep_handler},
        {UCX_AM_IMM, ucx_imm_handler},
        {UCX_AM_REVOKE, ucx_revoke_handler},
        {UCX_AM_REVOKE_ACK, ucx_revoke_ack_handler},
    };

    for (size_t i = 0; i < UTIL_ARRAY_SIZE(handlers); ++i) {
        ucp_am_handler_param_t param = {
            .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                          UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
            .id         = handlers[i].id,
            .cb         = handlers[i].cb,
            .arg        = ucx,
            .flags      = UCP_AM_FLAG_WHOLE_MSG,
        };
        ucs_status_t status = ucp_worker_set_am_recv_handler(ucx->worker, &param);

        if (status != UCS_OK) {
            UTIL_LOG_ERROR("ucx: %s: setting active message handler %u: %s", ucx->base.name,
                           handlers[i].id, ucs_status_string(status));
            return STRATA_ERR_TRANSPORT;
        }
    }
    return STRATA_OK;
}
