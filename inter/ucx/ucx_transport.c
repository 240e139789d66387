/*
 * UCX transport (ucp): one context and worker per rail, an endpoint per peer with peer
 * error handling, writes and reads by ucp_put_nbx/ucp_get_nbx on rkeys fetched from their
 * owners (ucx_memory.c), messages by tagged sends, immediates as active messages after a
 * flush (ucx_post.c). This file opens, describes, connects and closes; see docs/transports.md.
 */
#include "inter/ucx/ucx_internal.h"

#include <uct/api/uct.h>

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ucx_config {
    char    *tls;
    uint64_t timeout_ns;
} ucx_config_t;

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

/* The shared-memory transports of UCX (its "shm" alias, ucp_context.c) and names that
 * include them. */
static const char *const ucx_shm_names[] = {"posix", "sysv", "xpmem", "knem", "cma", "mm",
                                            "sm",    "shm",  "all"};

strata_status_t ucx_cqe_status(ucs_status_t status)
{
    switch (status) {
    case UCS_OK:           return STRATA_OK;
    case UCS_ERR_CANCELED: return STRATA_ERR_CANCELLED;
    default:               return STRATA_ERR_TRANSPORT;
    }
}

/* --- What UCX sees ---------------------------------------------------------------------- */

/* Append name to a comma-separated list unless it is there. */
static void ucx_list_add(char *list, size_t size, const char *name)
{
    size_t len = strlen(name), used = strlen(list);

    for (const char *p = list; (p = strstr(p, name)) != NULL; p += len) {
        if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == '\0')) {
            return;
        }
    }
    if (used + len + 2 <= size) {
        snprintf(list + used, size - used, "%s%s", used ? "," : "", name);
    }
}

/* UCX's network devices (uct's resources of type NET), comma-separated. */
static void ucx_net_devices(char *list, size_t size)
{
    uct_component_h *components;
    unsigned num_components;

    list[0] = '\0';
    if (uct_query_components(&components, &num_components) != UCS_OK) {
        return;
    }
    for (unsigned c = 0; c < num_components; ++c) {
        uct_component_attr_t attr = {.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};

        if (uct_component_query(components[c], &attr) != UCS_OK || attr.md_resource_count == 0) {
            continue;
        }
        uct_md_resource_desc_t mds[attr.md_resource_count];

        attr.field_mask   = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        attr.md_resources = mds;
        if (uct_component_query(components[c], &attr) != UCS_OK) {
            continue;
        }
        for (unsigned m = 0; m < attr.md_resource_count; ++m) {
            uct_tl_resource_desc_t *tls;
            uct_md_config_t *md_config;
            unsigned num_tls;
            uct_md_h md;

            if (uct_md_config_read(components[c], NULL, NULL, &md_config) != UCS_OK) {
                continue;
            }
            if (uct_md_open(components[c], mds[m].md_name, md_config, &md) == UCS_OK) {
                if (uct_md_query_tl_resources(md, &tls, &num_tls) == UCS_OK) {
                    for (unsigned t = 0; t < num_tls; ++t) {
                        if (tls[t].dev_type == UCT_DEVICE_TYPE_NET) {
                            ucx_list_add(list, size, tls[t].dev_name);
                        }
                    }
                    uct_release_tl_resource_list(tls);
                }
                uct_md_close(md);
            }
            uct_config_release(md_config);
        }
    }
    uct_release_component_list(components);
}

/*
 * The devices iface names (comma-separated; "mlx5_0" also names "mlx5_0:1") among UCX's
 * network devices, into net_devices; false when one is not there.
 */
static bool ucx_match_devices(const char *iface, const char *devices, char *net_devices,
                              size_t size, char *missing, size_t missing_size)
{
    char want[256], have[1024], *save_w = NULL, *save_h = NULL;

    net_devices[0] = '\0';
    snprintf(want, sizeof(want), "%s", iface);
    for (char *w = strtok_r(want, ",", &save_w); w != NULL; w = strtok_r(NULL, ",", &save_w)) {
        size_t len = strlen(w);
        bool found = false;

        snprintf(have, sizeof(have), "%s", devices);
        for (char *h = strtok_r(have, ",", &save_h); h != NULL; h = strtok_r(NULL, ",", &save_h)) {
            if (strcmp(h, w) == 0 || (strncmp(h, w, len) == 0 && h[len] == ':')) {
                ucx_list_add(net_devices, size, h);
                found = true;
            }
        }
        if (!found) {
            snprintf(missing, missing_size, "%s", w);
            return false;
        }
    }
    return true;
}

/* The transports and network devices of a context, from ucp_context_print_info's
 * "resource" lines ("... -- tcp/eth0"), without UCX's loopback "self". */
static void ucx_context_resources(ucp_context_h context, char *tls, size_t tls_size,
                                  char *devices, size_t devices_size)
{
    char *text = NULL, *save = NULL, name[64], dev[64];
    size_t text_len = 0;
    FILE *stream = open_memstream(&text, &text_len);

    tls[0] = devices[0] = '\0';
    if (stream == NULL) {
        return;
    }
    ucp_context_print_info(context, stream);
    fclose(stream);
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        const char *res = strstr(line, "resource"), *arrow = strstr(line, "-- ");

        if (res == NULL || arrow == NULL || sscanf(arrow + 3, "%63[^/]/%63s", name, dev) != 2 ||
            strcmp(name, "self") == 0) {
            continue;
        }
        ucx_list_add(tls, tls_size, name);
        if (strncmp(dev, "memory", 6) != 0) {
            ucx_list_add(devices, devices_size, dev);
        }
    }
    free(text);
}

/*
 * Add what an endpoint's lanes use ("lane[0]:  2:tcp/lo.0 md[1] -> ...") to the rail's
 * name: with peer failure handling UCX 1.13 leaves out transports that cannot detect a dead
 * peer (its posix and sysv shared memory), so the context's list would overstate.
 */
static void ucx_name_from_lanes(ucx_transport_t *ucx, ucp_ep_h ep)
{
    char *text = NULL, *save = NULL, tl[64], dev[64];
    size_t text_len = 0;
    FILE *stream = open_memstream(&text, &text_len);

    if (stream == NULL) {
        return;
    }
    ucp_ep_print_info(ep, stream);
    fclose(stream);
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        const char *lane = strstr(line, "lane["), *colon = lane ? strchr(lane, ':') : NULL;
        char *dot;

        if (colon == NULL || sscanf(colon + 1, " %*d:%63[^/]/%63s", tl, dev) != 2 ||
            strcmp(tl, "self") == 0) {
            continue;
        }
        if ((dot = strrchr(dev, '.')) != NULL) {
            *dot = '\0'; /* "lo.0": the device's path index */
        }
        ucx_list_add(ucx->lane_tls, sizeof(ucx->lane_tls), tl);
        if (strncmp(dev, "memory", 6) != 0) {
            ucx_list_add(ucx->lane_devices, sizeof(ucx->lane_devices), dev);
        }
    }
    free(text);
    if (ucx->lane_tls[0] != '\0') {
        char name[sizeof(ucx->base.name)];

        snprintf(name, sizeof(name), "ucx %s %s", ucx->lane_tls,
                 ucx->lane_devices[0] ? ucx->lane_devices : "-");
        if (strcmp(name, ucx->base.name) != 0) {
            UTIL_LOG_INFO("rail %d: the endpoints to peers use %s", ucx->rail, name + 4);
            snprintf(ucx->base.name, sizeof(ucx->base.name), "%s", name);
        }
    }
}

static bool ucx_names_shared_memory(const char *tls)
{
    char copy[256], *save = NULL;

    if (tls[0] == '^') {
        return false; /* a list of exclusions */
    }
    snprintf(copy, sizeof(copy), "%s", tls);
    for (char *t = strtok_r(copy, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        for (size_t i = 0; i < UTIL_ARRAY_SIZE(ucx_shm_names); ++i) {
            if (strncmp(t, ucx_shm_names[i], strlen(ucx_shm_names[i])) == 0) {
                return true;
            }
        }
    }
    return false;
}

/* UCX_TLS and UCX_NET_DEVICES for the rail: from STRATA_UCX_TLS, the shared-memory setting
 * and the device asked for (checked against what UCX sees). */
static strata_status_t ucx_choose(const inter_transport_params_t *params,
                                  const ucx_config_t *config, const char **tls_p,
                                  char *net_devices, size_t size)
{
    char devices[512], missing[128] = "";
    const char *iface = params->iface ? params->iface : "";

    *tls_p = config->tls;
    if (!params->shared_memory) {
        if (ucx_names_shared_memory(config->tls)) {
            UTIL_LOG_ERROR("ucx: STRATA_INTER_SHARED_MEMORY=no, but STRATA_UCX_TLS='%s' names "
                           "shared-memory transports", config->tls);
            return STRATA_ERR_CONFIG;
        }
        *tls_p = config->tls[0] ? config->tls : "^shm";
    }
    net_devices[0] = '\0';
    if (iface[0] == '\0') {
        return STRATA_OK;
    }
    ucx_net_devices(devices, sizeof(devices));
    if (ucx_match_devices(iface, devices, net_devices, size, missing, sizeof(missing))) {
        return STRATA_OK;
    }
    if (params->required) {
        UTIL_LOG_ERROR("ucx: rail %d: no network device '%s'; UCX sees: %s", params->rail,
                       missing, devices[0] ? devices : "none");
        return STRATA_ERR_CONFIG;
    }
    UTIL_LOG_WARN("ucx: rail %d: no network device '%s' (from the rail plan); UCX sees %s, "
                  "so the rail uses UCX's default devices", params->rail, missing,
                  devices[0] ? devices : "none");
    net_devices[0] = '\0';
    return STRATA_OK;
}

static strata_status_t ucx_context_create(const inter_transport_params_t *params,
                                          const ucx_config_t *config, ucp_context_h *context_p)
{
    ucp_params_t ucp_params = {
        .field_mask        = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                             UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
        .features          = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AM,
        .mt_workers_shared = 1, /* registration from any thread beside the proxy */
        .estimated_num_eps = (size_t)UTIL_MAX(params->world_size, 1),
    };
    char net_devices[256];
    ucp_config_t *ucp_config;
    const char *tls;
    strata_status_t status = ucx_choose(params, config, &tls, net_devices, sizeof(net_devices));
    ucs_status_t ucs;

    if (status != STRATA_OK) {
        return status;
    }
    ucs = ucp_config_read(NULL, NULL, &ucp_config);
    if (ucs == UCS_OK && tls[0] != '\0') {
        ucs = ucp_config_modify(ucp_config, "TLS", tls);
    }
    if (ucs == UCS_OK && net_devices[0] != '\0') {
        ucs = ucp_config_modify(ucp_config, "NET_DEVICES", net_devices);
    }
    if (ucs == UCS_OK) {
        ucs = ucp_init(&ucp_params, ucp_config, context_p);
    }
    if (ucp_config != NULL) {
        ucp_config_release(ucp_config);
    }
    if (ucs != UCS_OK) {
        UTIL_LOG_ERROR("ucx: rail %d: ucp_init with TLS '%s', devices '%s': %s", params->rail,
                       tls[0] ? tls : "(UCX's default)",
                       net_devices[0] ? net_devices : "(UCX's default)", ucs_status_string(ucs));
        return ucs == UCS_ERR_NO_DEVICE ? STRATA_ERR_UNSUPPORTED : STRATA_ERR_TRANSPORT;
    }
    return STRATA_OK;
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
