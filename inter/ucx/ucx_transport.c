/*
 * UCX transport (ucp): one context and worker per rail, an endpoint per peer with peer
 * error handling, writes and reads by ucp_put_nbx/ucp_get_nbx on rkeys fetched from their
 * owners (ucx_memory.c), messages by tagged sends, immediates as active messages after a
 * flush (ucx_post.c). This file opens, describes, connects and closes; what it asks of UCX
 * is ucx_context.c. See docs/transports.md.
 */
#include "inter/ucx/ucx_internal.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const util_config_field_t ucx_config_fields[] = {
    {.name = "UCX_TLS", .default_value = "",
     .doc = "UCX transports of the ucx transport, in UCX_TLS syntax (\"tcp\", \"^shm\"); "
            "empty: UCX's choice, less shared memory where STRATA_INTER_SHARED_MEMORY=no.",
     .type = UTIL_CONFIG_STRING, .offset = offsetof(ucx_config_t, tls)},
    {.name = "UCX_TIMEOUT", .default_value = "1s",
     .doc = "Longest wait of the ucx transport for peers: flushing endpoints at close, and "
            "acknowledging the revoke of a deregistered key.",
     .type = UTIL_CONFIG_TIME, .offset = offsetof(ucx_config_t, timeout_ns)},
};

const util_config_table_t ucx_config_table = {
    .layer       = "inter ucx",
    .fields      = ucx_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(ucx_config_fields),
    .struct_size = sizeof(ucx_config_t),
};

strata_status_t ucx_cqe_status(ucs_status_t status)
{
    switch (status) {
    case UCS_OK:           return STRATA_OK;
    case UCS_ERR_CANCELED: return STRATA_ERR_CANCELLED;
    default:               return STRATA_ERR_TRANSPORT;
    }
}

/* --- Probe, open, close ---------------------------------------------------------------- */

/* Whether UCX's transports ("tcp,posix,rc_mlx5") include an RDMA lane (rc, dc or ud on
 * verbs): without one, UCX emulates puts in software, and ofi over tcp serves better. */
static bool ucx_has_rdma_lane(const char *tls)
{
    for (const char *tl = tls; tl != NULL && *tl != '\0';
         tl = strchr(tl, ',') ? strchr(tl, ',') + 1 : NULL) {
        if (strncmp(tl, "rc", 2) == 0 || strncmp(tl, "dc", 2) == 0 ||
            strncmp(tl, "ud", 2) == 0) {
            return true;
        }
    }
    return false;
}

static void ucx_probe(const inter_transport_params_t *params, inter_probe_t *probe)
{
    char err[UTIL_REASON_LEN], tls[64], devices[64], spaced[96] = "";
    inter_transport_params_t probe_params = *params;
    ucx_config_t config;
    ucp_context_h context;
    unsigned major, minor, release;

    ucp_get_version(&major, &minor, &release);
    if (util_config_read_quiet(&ucx_config_table, &config, err) != STRATA_OK) {
        probe->score = INTER_PROBE_NONE;
        snprintf(probe->why, sizeof(probe->why), "ucx: %.150s", err);
        return;
    }
    /* Whether UCX runs here; a device it lacks, or settings that contradict each other, are
     * open's to refuse (STRATA_ERR_CONFIG, naming them). */
    probe_params.iface = "";
    probe_params.shared_memory = params->shared_memory || ucx_names_shared_memory(config.tls);
    if (ucx_context_create(&probe_params, &config, &context) != STRATA_OK) {
        probe->score = INTER_PROBE_NONE;
        snprintf(probe->why, sizeof(probe->why), "ucx %u.%u: ucp_init failed (no usable "
                 "transport or device)", major, minor);
    } else {
        ucx_context_resources(context, tls, sizeof(tls), devices, sizeof(devices));
        ucp_cleanup(context);
        /* "tcp, posix, cma" */
        for (char *c = tls, *out = spaced; *c && out < spaced + sizeof(spaced) - 3; ++c) {
            *out++ = *c;
            *out   = '\0';
            if (*c == ',') {
                *out++ = ' ';
                *out   = '\0';
            }
        }
        probe->score = config.tls[0]             ? INTER_PROBE_ASKED
                       : ucx_has_rdma_lane(tls) ? INTER_PROBE_PORTABLE
                                                : INTER_PROBE_EMULATED;
        snprintf(probe->why, sizeof(probe->why), "ucx %u.%u: %s%s", major, minor,
                 tls[0] ? spaced : "no transport",
                 config.tls[0]             ? " (STRATA_UCX_TLS set)"
                 : ucx_has_rdma_lane(tls) ? ""
                                          : " (no RDMA lane: puts emulated, ofi over tcp is faster)");
    }
    util_config_release(&ucx_config_table, &config);
}

static void ucx_peer_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    ucx_peer_t *peer = arg;
    ucx_transport_t *ucx = peer->ucx;

    if (peer->error != UCS_OK) {
        return;
    }
    peer->error = status;
    if (!ucx->shut) {
        UTIL_LOG_INFO("ucx: %s: the endpoint to peer %llu failed: %s", ucx->base.name,
                      (unsigned long long)peer->handle, ucs_status_string(status));
    }
    /* Operations in flight on it complete with an error through their own callbacks. */
    ucx_memory_peer_failed(ucx, peer);
}

static void ucx_flush_wait_done(void *request, ucs_status_t status, void *user_data)
{
    ucx_peer_t *peer = user_data;

    --peer->ucx->in_flight;
    peer->flushed = status == UCS_OK ? 1 : -1;
    ucp_request_free(request);
}

/* Progress until done() or the deadline; false on the deadline. */
static bool ucx_progress_until(ucx_transport_t *ucx, bool (*done)(const ucx_transport_t *),
                               uint64_t deadline)
{
    while (!done(ucx)) {
        if (util_clock_now_ns() >= deadline) {
            return false;
        }
        if (ucp_worker_progress(ucx->worker) == 0) {
            sched_yield();
        }
    }
    return true;
}

static bool ucx_quiet(const ucx_transport_t *ucx)
{
    for (size_t i = 0; i < ucx->num_peers; ++i) {
        if (ucx->peers[i]->flushed == 0) {
            return false;
        }
    }
    return ucx->rx_posted == NULL;
}

static bool ucx_closed(const ucx_transport_t *ucx)
{
    for (size_t i = 0; i < ucx->num_peers; ++i) {
        void *request = ucx->peers[i]->close_request;

        if (request != NULL && ucp_request_check_status(request) == UCS_INPROGRESS) {
            return false;
        }
    }
    return true;
}

/* Operations the transport still holds that were never given to UCX. */
static void ucx_cancel_queued(ucx_transport_t *ucx)
{
    ucx_peer_t *peer;

    for (ucx_op_t *op = ucx_op_list_take(&ucx->ready), *next; op != NULL; op = next) {
        next = op->next;
        ucx_op_fail(ucx, op, STRATA_ERR_CANCELLED);
    }
    for (ucx_op_t *op = ucx_op_list_take(&ucx->flushed), *next; op != NULL; op = next) {
        next = op->next;
        ucx_op_fail(ucx, op, STRATA_ERR_CANCELLED);
    }
    while ((peer = ucx->flush_list) != NULL) {
        ucx->flush_list = peer->next_flush;
        for (ucx_op_t *op = ucx_op_list_take(&peer->unflushed), *next; op; op = next) {
            next = op->next;
            ucx_op_fail(ucx, op, STRATA_ERR_CANCELLED);
        }
    }
}

/* Flush the endpoints of live peers (what was posted lands), then destroy the rkeys, then
 * close: gracefully where the flush finished, by force elsewhere. */
static void ucx_close_endpoints(ucx_transport_t *ucx)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send      = ucx_flush_wait_done,
    };
    uint64_t deadline = util_clock_now_ns() + ucx->timeout_ns;
    ucs_status_ptr_t request;

    for (size_t i = 0; i < ucx->num_peers; ++i) {
        ucx_peer_t *peer = ucx->peers[i];

        param.user_data = peer;
        request = peer->error == UCS_OK ? ucp_ep_flush_nbx(peer->ep, &param)
                                        : UCS_STATUS_PTR(peer->error);
        if (request == NULL || UCS_PTR_IS_ERR(request)) {
            peer->flushed = request == NULL ? 1 : -1;
        } else {
            ++ucx->in_flight;
        }
    }
    if (!ucx_progress_until(ucx, ucx_quiet, deadline)) {
        UTIL_LOG_INFO("ucx: %s: peers did not answer within STRATA_UCX_TIMEOUT; closing their "
                      "endpoints by force", ucx->base.name);
    }
    for (size_t i = 0; i < ucx->num_peers; ++i) {
        ucx_peer_t *peer = ucx->peers[i];
        ucp_request_param_t close = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
            .flags        = (peer->flushed == 1 && peer->error == UCS_OK)
                                ? 0 : UCP_EP_CLOSE_FLAG_FORCE,
        };

        ucx_peer_rkeys_release(ucx, peer);
        request = ucp_ep_close_nbx(peer->ep, &close);
        peer->close_request = UCS_PTR_IS_PTR(request) ? request : NULL;
    }
    deadline = util_clock_now_ns() + ucx->timeout_ns;
    ucx_progress_until(ucx, ucx_closed, deadline);
    for (size_t i = 0; i < ucx->num_peers; ++i) {
        if (ucx->peers[i]->close_request != NULL) {
            ucp_request_free(ucx->peers[i]->close_request); /* the worker's destroy ends it */
            ucx->peers[i]->close_request = NULL;
        }
    }
}

static void ucx_shutdown(inter_transport_t *tp)
{
    ucx_transport_t *ucx = ucx_of(tp);

    pthread_mutex_lock(&ucx->progress_lock);
    if (ucx->worker == NULL) {
        pthread_mutex_unlock(&ucx->progress_lock);
        return;
    }
    pthread_mutex_lock(&ucx->lock);
    ucx->shut = true; /* deregistrations from now on revoke nothing */
    pthread_mutex_unlock(&ucx->lock);
    ucx_revokes_abandon(ucx);
    ucx_cancel_receives(ucx);
    ucx_cancel_queued(ucx);
    ucx_close_endpoints(ucx);
    if (ucx->address != NULL) {
        ucp_worker_release_address(ucx->worker, ucx->address);
        ucx->address = NULL;
    }
    if (ucx->self_address != NULL) {
        ucp_worker_release_address(ucx->worker, ucx->self_address);
        ucx->self_address = NULL;
    }
    /* Callbacks of requests still open run inside this call, not after. */
    ucp_worker_destroy(ucx->worker);
    ucx->worker = NULL;
    pthread_mutex_unlock(&ucx->progress_lock);
}

static void ucx_close(inter_transport_t *tp)
{
    ucx_transport_t *ucx;

    if (tp == NULL) {
        return;
    }
    ucx = ucx_of(tp);
    ucx_shutdown(tp);
    for (size_t i = 0; i < ucx->num_peers; ++i) {
        ucx_peer_rkeys_free(ucx->peers[i]);
        free(ucx->peers[i]);
    }
    free(ucx->peers);
    ucx_memory_cleanup(ucx); /* registrations left open need the context */
    if (ucx->context != NULL) {
        ucp_cleanup(ucx->context);
    }
    free(ucx->inject_slots);
    free(ucx->cq);
    free(ucx);
}

static strata_status_t ucx_worker_open(ucx_transport_t *ucx,
                                       const inter_transport_params_t *params)
{
    ucp_worker_params_t worker_params = {
        .field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SERIALIZED, /* the opener, then the proxy */
    };
    ucp_worker_attr_t attr = {
        .field_mask    = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS,
        .address_flags = params->shared_memory ? 0 : UCP_WORKER_ADDRESS_FLAG_NET_ONLY,
    };
    ucs_status_t ucs = ucp_worker_create(ucx->context, &worker_params, &ucx->worker);
    strata_status_t status;
    size_t self_len;

    if (ucs != UCS_OK) {
        UTIL_LOG_ERROR("ucx: rail %d: ucp_worker_create: %s", params->rail,
                       ucs_status_string(ucs));
        return STRATA_ERR_TRANSPORT;
    }
    if ((status = ucx_memory_set_handlers(ucx)) != STRATA_OK) {
        return status;
    }
    /* Without shared memory, the address offers the network transports only. */
    ucs = ucp_worker_query(ucx->worker, &attr);
    if (ucs != UCS_OK) {
        UTIL_LOG_ERROR("ucx: rail %d: ucp_worker_query: %s", params->rail,
                       ucs_status_string(ucs));
        return STRATA_ERR_TRANSPORT;
    }
    ucx->address     = attr.address;
    ucx->address_len = attr.address_length;
    /* The endpoint to this worker takes UCX's "self" transport, whose device a network-only
     * address leaves out. Over tcp to itself, UCX 1.13 failed the endpoints of the other
     * peers on that interface ("Endpoint timeout" within milliseconds). */
    ucs = ucp_worker_get_address(ucx->worker, &ucx->self_address, &self_len);
    if (ucs != UCS_OK) {
        UTIL_LOG_ERROR("ucx: rail %d: ucp_worker_get_address: %s", params->rail,
                       ucs_status_string(ucs));
        return STRATA_ERR_TRANSPORT;
    }
    if (sizeof(uint32_t) * 2 + ucx->address_len > UCX_ADDR_SIZE) {
        UTIL_LOG_ERROR("ucx: rail %d: the worker's address takes %zu bytes, over the %d this "
                       "transport exchanges (restrict STRATA_UCX_TLS or STRATA_INTER_IFACE)",
                       params->rail, ucx->address_len, UCX_ADDR_SIZE - 8);
        return STRATA_ERR_UNSUPPORTED;
    }
    return STRATA_OK;
}

static void ucx_describe(ucx_transport_t *ucx, const inter_transport_params_t *params)
{
    char tls[48], devices[40]; /* within the 96 bytes of a name */
    unsigned major, minor, release;

    ucx_context_resources(ucx->context, tls, sizeof(tls), devices, sizeof(devices));
    snprintf(ucx->base.name, sizeof(ucx->base.name), "ucx %s %s", tls[0] ? tls : "?",
             devices[0] ? devices : "-");
    ucx->base.has_read     = true;
    /* A read to this worker takes UCX's "self" transport, a memory copy that passes no
     * NIC: it flushes nothing. */
    ucx->base.loopback_flush = false;
    ucx->base.virt_addr    = true;
    ucx->base.max_msg_size = UCX_MAX_SIZE;
    ucx->base.max_rma_size = UCX_MAX_SIZE;
    ucx->base.inject_size  = UCX_INJECT_SIZE;
    ucx->base.hmem         = false;
    ucx->base.rx_cq_data   = false; /* immediates are active messages, not receives */
    ucx->base.rx_size      = 1u << 16; /* UCX queues posted receives without a bound */
    ucx->base.addr_size    = UCX_ADDR_SIZE;
    ucp_get_version(&major, &minor, &release);
    UTIL_LOG_INFO("rail %d: %s (UCX %u.%u.%u; the endpoints to peers take those that detect "
                  "a dead peer), worker address %zu bytes, device memory %s",
                  params->rail, ucx->base.name, major, minor, release, ucx->address_len,
                  params->device_memory == INTER_MEM_HOST ? "not asked for"
                                                          : "not registered (host only)");
}

static strata_status_t ucx_buffers(ucx_transport_t *ucx)
{
    ucx->inject_slots = calloc(UCX_INJECT_SLOTS, sizeof(*ucx->inject_slots));
    ucx->cq           = calloc(UCX_CQ_INITIAL, sizeof(*ucx->cq));
    if (ucx->inject_slots == NULL || ucx->cq == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    ucx->cq_size = UCX_CQ_INITIAL;
    for (int i = 0; i < UCX_INJECT_SLOTS; ++i) {
        ucx->inject_slots[i] = (ucx_inject_slot_t){.ucx = ucx, .index = i};
        ucx->inject_free[i]  = i;
    }
    ucx->num_inject_free = UCX_INJECT_SLOTS;
    return STRATA_OK;
}

static strata_status_t ucx_open(const inter_transport_params_t *params, inter_transport_t **tp_p)
{
    ucx_transport_t *ucx;
    ucx_config_t config;
    strata_status_t status = util_config_read(&ucx_config_table, &config);

    if (status != STRATA_OK) {
        return status;
    }
    if (params->same_node) {
        /* No path of its own for peers of this node: UCX picks one per endpoint. */
        util_config_release(&ucx_config_table, &config);
        return STRATA_ERR_UNSUPPORTED;
    }
    if (params->msg_bytes > UCX_MAX_SIZE) {
        UTIL_LOG_ERROR("ucx: messages of %zu bytes are over the %llu this transport carries",
                       params->msg_bytes, (unsigned long long)UCX_MAX_SIZE);
        util_config_release(&ucx_config_table, &config);
        return STRATA_ERR_INVALID;
    }
    if ((ucx = calloc(1, sizeof(*ucx))) == NULL) {
        util_config_release(&ucx_config_table, &config);
        return STRATA_ERR_NO_MEMORY;
    }
    ucx->base.ops   = &ucx_transport_ops;
    ucx->rail       = params->rail;
    ucx->timeout_ns = config.timeout_ns;
    snprintf(ucx->base.name, sizeof(ucx->base.name), "ucx rail %d", params->rail);
    status = ucx_memory_init(ucx);
    if (status != STRATA_OK) {
        free(ucx);
        util_config_release(&ucx_config_table, &config);
        return status;
    }
    status = ucx_context_create(params, &config, &ucx->context);
    util_config_release(&ucx_config_table, &config);
    if (status == STRATA_OK) {
        status = ucx_buffers(ucx);
    }
    if (status == STRATA_OK) {
        status = ucx_worker_open(ucx, params);
    }
    if (status == STRATA_OK) {
        ucx_describe(ucx, params);
    }
    if (status != STRATA_OK) {
        ucx_close(&ucx->base);
        return status;
    }
    *tp_p = &ucx->base;
    return STRATA_OK;
}

/* --- Addresses and peers ---------------------------------------------------------------- */

static strata_status_t ucx_address(inter_transport_t *tp, void *addr, size_t *len_p)
{
    ucx_transport_t *ucx = ucx_of(tp);
    uint32_t header[2] = {UCX_ADDR_MAGIC, (uint32_t)ucx->address_len};
    size_t len = sizeof(header) + ucx->address_len;

    if (*len_p < len) {
        UTIL_LOG_ERROR("ucx: %s: an address takes %zu bytes, the caller has %zu", tp->name,
                       len, *len_p);
        return STRATA_ERR_INVALID;
    }
    memcpy(addr, header, sizeof(header));
    memcpy((char *)addr + sizeof(header), ucx->address, ucx->address_len);
    *len_p = len;
    return STRATA_OK;
}

static strata_status_t ucx_insert_peer(inter_transport_t *tp, const void *addr, size_t len,
                                       uint64_t *peer_p)
{
    ucx_transport_t *ucx = ucx_of(tp);
    uint32_t header[2];
    ucp_ep_params_t params = {
        .field_mask      = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                           UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .err_mode        = UCP_ERR_HANDLING_MODE_PEER,
        .err_handler.cb  = ucx_peer_error,
    };
    ucx_peer_t *peer;
    ucs_status_t ucs;

    if (len >= sizeof(header)) {
        memcpy(header, addr, sizeof(header));
    }
    if (len < sizeof(header) || header[0] != UCX_ADDR_MAGIC ||
        header[1] > len - sizeof(header)) {
        UTIL_LOG_ERROR("ucx: %s: a peer's address of %zu bytes is not a ucx address (another "
                       "STRATA_INTER_TRANSPORT on that rank?)", tp->name, len);
        return STRATA_ERR_INVALID;
    }
    if (ucx->num_peers == ucx->max_peers) {
        size_t max = ucx->max_peers ? 2 * ucx->max_peers : 16;
        ucx_peer_t **peers = realloc(ucx->peers, max * sizeof(*peers));

        if (peers == NULL) {
            return STRATA_ERR_NO_MEMORY;
        }
        ucx->peers     = peers;
        ucx->max_peers = max;
    }
    if ((peer = calloc(1, sizeof(*peer))) == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    peer->ucx                = ucx;
    peer->handle             = ucx->num_peers;
    params.address           = (const ucp_address_t *)((const char *)addr + sizeof(header));
    if (header[1] == ucx->address_len && memcmp(params.address, ucx->address, header[1]) == 0) {
        /* This worker, over UCX's "self" transport, which handles no peer failure (a
         * worker cannot lose itself): see ucx_worker_open. */
        params.address  = ucx->self_address;
        params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    }
    params.err_handler.arg   = peer;
    ucs = ucp_ep_create(ucx->worker, &params, &peer->ep);
    if (ucs != UCS_OK) {
        UTIL_LOG_ERROR("ucx: %s: ucp_ep_create: %s", tp->name, ucs_status_string(ucs));
        free(peer);
        return STRATA_ERR_TRANSPORT;
    }
    ucx->peers[ucx->num_peers++] = peer;
    if (params.err_mode == UCP_ERR_HANDLING_MODE_PEER) {
        ucx_name_from_lanes(ucx, peer->ep); /* connect: the proxy does not run yet */
    }
    *peer_p = peer->handle;
    return STRATA_OK;
}

const inter_transport_ops_t ucx_transport_ops = {
    .name           = "ucx",
    .config         = &ucx_config_table,
    .probe          = ucx_probe,
    .open           = ucx_open,
    .shutdown       = ucx_shutdown,
    .close          = ucx_close,
    .address        = ucx_address,
    .insert_peer    = ucx_insert_peer,
    .mem_register   = ucx_mem_register,
    .mem_deregister = ucx_mem_deregister,
    .post           = ucx_post,
    .inject         = ucx_inject,
    .post_recv      = ucx_post_recv,
    .poll           = ucx_poll,
};
