/*
 * libibverbs transport: one RC queue pair per peer on one port of an InfiniBand or RoCE
 * device (ConnectX first), a shared receive queue and one completion queue; discovery,
 * opening, registration and teardown. Connecting (RTR, RTS) is verbs_connect.c, the data
 * path verbs_data.c.
 */
#include "inter/verbs/verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define VERBS_MIN_SRQ     64   /* the engine posts at least INTER_RX_SLOTS receives */
#define VERBS_MAX_RD_ATOM 16   /* reads in flight per QP asked for, at most */

extern const inter_transport_ops_t verbs_transport_ops;

static const util_config_field_t verbs_config_fields[] = {
    {.name = "VERBS_GID_INDEX", .default_value = "-1",
     .doc = "GID table index (-1: on RoCE the first RoCE v2 GID holding an IPv4 address, else "
            "the first RoCE v2, else RoCE v1; on InfiniBand 0).",
     .type = UTIL_CONFIG_INT, .offset = offsetof(verbs_config_t, gid_index)},
    {.name = "VERBS_TRAFFIC_CLASS", .default_value = "0",
     .doc = "Traffic class of the GRH of every packet (0..255; RoCE: the DSCP shifted left by 2).",
     .type = UTIL_CONFIG_INT, .offset = offsetof(verbs_config_t, traffic_class)},
    {.name = "VERBS_SL", .default_value = "0",
     .doc = "Service level of the connections (0..15).",
     .type = UTIL_CONFIG_INT, .offset = offsetof(verbs_config_t, service_level)},
    {.name = "VERBS_TIMEOUT", .default_value = "18",
     .doc = "Local ACK timeout exponent: a try waits 4.096 us x 2^n (1..31; 18: about 1.07 s).",
     .type = UTIL_CONFIG_INT, .offset = offsetof(verbs_config_t, timeout)},
    {.name = "VERBS_RETRY_COUNT", .default_value = "7",
     .doc = "Tries after the first before an unacknowledged request fails its QP (0..7).",
     .type = UTIL_CONFIG_INT, .offset = offsetof(verbs_config_t, retry_count)},
    {.name = "VERBS_SQ_DEPTH", .default_value = "256",
     .doc = "Work requests in flight per queue pair (one queue pair per peer and rail).",
     .type = UTIL_CONFIG_INT, .offset = offsetof(verbs_config_t, sq_depth)},
    {.name = "VERBS_SRQ_DEPTH", .default_value = "4096",
     .doc = "Receives the shared receive queue holds (every landing immediate consumes one).",
     .type = UTIL_CONFIG_INT, .offset = offsetof(verbs_config_t, srq_depth)},
    {.name = "VERBS_INLINE_SIZE", .default_value = "64",
     .doc = "Bytes a send may carry inline, without a registered buffer (0: no inject).",
     .type = UTIL_CONFIG_INT, .offset = offsetof(verbs_config_t, inline_size)},
};

const util_config_table_t verbs_config_table = {
    .layer       = "inter verbs",
    .fields      = verbs_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(verbs_config_fields),
    .struct_size = sizeof(verbs_config_t),
};

static strata_status_t verbs_config_check(const verbs_config_t *c)
{
    if (c->gid_index < -1 || c->gid_index > 65535 || c->traffic_class < 0 ||
        c->traffic_class > 255 || c->service_level < 0 || c->service_level > 15 ||
        c->timeout < 1 || c->timeout > 31 || c->retry_count < 0 || c->retry_count > 7 ||
        c->sq_depth < 16 || c->sq_depth > 65536 || c->srq_depth < VERBS_MIN_SRQ ||
        c->srq_depth > (1 << 20) || c->inline_size < 0 || c->inline_size > 1024) {
        UTIL_LOG_ERROR("verbs: STRATA_VERBS_GID_INDEX %lld (-1..65535), TRAFFIC_CLASS %lld "
                       "(0..255), SL %lld (0..15), TIMEOUT %lld (1..31), RETRY_COUNT %lld "
                       "(0..7), SQ_DEPTH %lld (16..65536), SRQ_DEPTH %lld (%d..1048576), "
                       "INLINE_SIZE %lld (0..1024): a value is out of range",
                       (long long)c->gid_index, (long long)c->traffic_class,
                       (long long)c->service_level, (long long)c->timeout,
                       (long long)c->retry_count, (long long)c->sq_depth,
                       (long long)c->srq_depth, VERBS_MIN_SRQ, (long long)c->inline_size);
        return STRATA_ERR_CONFIG;
    }
    return STRATA_OK;
}

/* Whether the user set any STRATA_VERBS_* variable to other than its default. */
static bool verbs_config_asked(const verbs_config_t *config)
{
    char err[UTIL_REASON_LEN];
    verbs_config_t defaults;

    for (size_t i = 0; i < UTIL_ARRAY_SIZE(verbs_config_fields); ++i) {
        const util_config_field_t *field = &verbs_config_fields[i];
        char *slot = (char *)&defaults + field->offset;

        if (util_config_parse_value(field, field->default_value, slot, err) != STRATA_OK ||
            memcmp(slot, (const char *)config + field->offset, sizeof(int64_t)) != 0) {
            return true;
        }
    }
    return false;
}

/* --- Discovery ------------------------------------------------------------------------- */

static void verbs_query_info(struct ibv_device *device, verbs_dev_info_t *info)
{
    struct ibv_device_attr attr;
    struct ibv_port_attr port;
    struct ibv_context *ctx;

    memset(info, 0, sizeof(*info));
    snprintf(info->name, sizeof(info->name), "%s", ibv_get_device_name(device));
    info->transport = device->transport_type;
    ctx = ibv_open_device(device);
    if (ctx == NULL) {
        UTIL_LOG_DEBUG("verbs: opening %s: %s", info->name, strerror(errno));
        return;
    }
    if (ibv_query_device(ctx, &attr) == 0) {
        info->opened    = true;
        info->vendor_id = attr.vendor_id;
        info->num_ports = UTIL_MIN((int)attr.phys_port_cnt, VERBS_MAX_PORTS);
        for (int p = 0; p < info->num_ports; ++p) {
            if (ibv_query_port(ctx, (uint8_t)(p + 1), &port) == 0) {
                info->active[p]     = port.state == IBV_PORT_ACTIVE;
                info->link_layer[p] = port.link_layer;
            }
        }
    }
    ibv_close_device(ctx);
}

/* Every device ibv_get_device_list gives, queried; the list stays for opening. */
static int verbs_scan(struct ibv_device ***list_p, verbs_dev_info_t *infos, int *err_p)
{
    int num = 0;
    struct ibv_device **list;

    errno   = 0;
    list    = ibv_get_device_list(&num);
    *err_p  = list == NULL ? errno : 0; /* ENOSYS: the kernel has no RDMA support */
    *list_p = list;
    num     = list == NULL ? 0 : UTIL_MIN(num, VERBS_MAX_DEVICES);
    for (int i = 0; i < num; ++i) {
        verbs_query_info(list[i], &infos[i]);
    }
    return num;
}

static void verbs_probe(const inter_transport_params_t *params, inter_probe_t *probe)
{
    verbs_dev_info_t *infos = calloc(VERBS_MAX_DEVICES, sizeof(*infos));
    struct ibv_device **list = NULL;
    verbs_config_t config;
    verbs_dev_spec_t spec;
    int num, err, index, port;
    bool fallback;
    char msg[UTIL_REASON_LEN];

    probe->score = INTER_PROBE_NONE;
    if (infos == NULL) {
        snprintf(probe->why, sizeof(probe->why), "out of memory");
        return;
    }
    if (util_config_read_quiet(&verbs_config_table, &config, msg) != STRATA_OK ||
        verbs_config_check(&config) != STRATA_OK) {
        snprintf(probe->why, sizeof(probe->why), "a STRATA_VERBS_* variable is invalid");
        free(infos);
        return;
    }
    num = verbs_scan(&list, infos, &err);
    if (num == 0 && (params->iface == NULL || params->iface[0] == '\0')) {
        verbs_no_device_line(err, probe->why, sizeof(probe->why));
    } else if (verbs_spec_parse(params->iface, &spec, msg, sizeof(msg)) != STRATA_OK ||
               verbs_select_device(infos, num, &spec, params->required, &index, &port,
                                   &fallback, msg, sizeof(msg)) != STRATA_OK) {
        snprintf(probe->why, sizeof(probe->why), "%.*s", (int)sizeof(probe->why) - 1, msg);
    } else {
        probe->score = verbs_dev_score(&infos[index], msg, sizeof(msg));
        if (probe->score > INTER_PROBE_NONE && verbs_config_asked(&config)) {
            probe->score = INTER_PROBE_ASKED; /* the user tuned this transport */
            snprintf(probe->why, sizeof(probe->why), "STRATA_VERBS_* set; %.*s",
                     (int)sizeof(probe->why) - 24, msg);
        } else {
            snprintf(probe->why, sizeof(probe->why), "%.*s", (int)sizeof(probe->why) - 1, msg);
        }
    }
    if (list != NULL) {
        ibv_free_device_list(list);
    }
    free(infos);
}

/* --- Opening ----------------------------------------------------------------------------- */

/* The GID of the port: a RoCE v2 one on Ethernet (verbs_select_gid), index 0 on IB. */
static strata_status_t verbs_choose_gid(verbs_transport_t *vt, const struct ibv_port_attr *port)
{
    verbs_gid_info_t *gids = calloc((size_t)UTIL_MAX(port->gid_tbl_len, 1), sizeof(*gids));
    struct ibv_gid_entry entry;
    int num = 0, rc;

    if (gids == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    for (int i = 0; i < port->gid_tbl_len; ++i) {
        rc = ibv_query_gid_ex(vt->ctx, vt->port, (uint32_t)i, &entry, 0);
        if (rc != 0) {
            continue; /* ENODATA: an empty entry */
        }
        gids[num].index = entry.gid_index;
        gids[num].type  = entry.gid_type;
        memcpy(gids[num].raw, entry.gid.raw, sizeof(gids[num].raw));
        ++num;
    }
    if (vt->link_layer == IBV_LINK_LAYER_ETHERNET) {
        vt->gid_index = verbs_select_gid(gids, num, (int)vt->config.gid_index);
    } else {
        vt->gid_index = vt->config.gid_index >= 0 ? (int)vt->config.gid_index : 0;
    }
    for (int i = 0; i < num; ++i) {
        if (vt->gid_index >= 0 && gids[i].index == (uint32_t)vt->gid_index) {
            memcpy(vt->gid.raw, gids[i].raw, sizeof(vt->gid.raw));
            if (gids[i].type == IBV_GID_TYPE_ROCE_V1) {
                UTIL_LOG_WARN("verbs: %s uses RoCE v1 GID %d: not routable between subnets",
                              vt->base.name, vt->gid_index);
            }
        }
    }
    free(gids);
    if (vt->gid_index < 0 && vt->link_layer == IBV_LINK_LAYER_ETHERNET) {
        UTIL_LOG_ERROR("verbs: %s has no usable RoCE GID%s (is an IP address set on its "
                       "network interface?)", vt->base.name,
                       vt->config.gid_index >= 0 ? " at STRATA_VERBS_GID_INDEX" : "");
        return STRATA_ERR_UNSUPPORTED;
    }
    return STRATA_OK;
}

static struct ibv_qp *verbs_create_qp(verbs_transport_t *vt, uint32_t *inline_p)
{
    struct ibv_qp_init_attr init = {
        .send_cq = vt->cq, .recv_cq = vt->cq, .srq = vt->srq, .qp_type = IBV_QPT_RC,
        .sq_sig_all = 0,
        .cap = {.max_send_wr = vt->sq_depth, .max_send_sge = 1,
                .max_inline_data = (uint32_t)vt->config.inline_size},
    };
    struct ibv_qp_attr attr = {
        .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = vt->port,
        .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ,
    };
    struct ibv_qp *qp = ibv_create_qp(vt->pd, &init);
    int rc;

    if (qp == NULL) {
        UTIL_LOG_ERROR("verbs: %s: ibv_create_qp (RC, %u requests, %lld bytes inline): %s",
                       vt->base.name, vt->sq_depth, (long long)vt->config.inline_size,
                       strerror(errno));
        return NULL;
    }
    rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                      IBV_QP_ACCESS_FLAGS);
    if (rc != 0) {
        UTIL_LOG_ERROR("verbs: %s: QP %u to INIT: %s", vt->base.name, qp->qp_num, strerror(rc));
        ibv_destroy_qp(qp);
        return NULL;
    }
    *inline_p = UTIL_MIN(*inline_p, init.cap.max_inline_data);
    return qp;
}

/* Queue sizes within the device's limits: the completion queue holds a completion for
 * every request any send queue and the receive queue can hold, so it cannot overrun. */
static strata_status_t verbs_size_queues(verbs_transport_t *vt, const struct ibv_device_attr *dev,
                                         uint32_t *srq_p, int *cqe_p)
{
    uint64_t qps = (uint64_t)vt->world + 1, srq, sq, cqe;

    srq = UTIL_MIN((uint64_t)vt->config.srq_depth, (uint64_t)dev->max_srq_wr);
    sq  = UTIL_MIN((uint64_t)vt->config.sq_depth, (uint64_t)dev->max_qp_wr);
    if (srq + qps * sq > (uint64_t)dev->max_cqe && (uint64_t)dev->max_cqe > srq) {
        sq = ((uint64_t)dev->max_cqe - srq) / qps;
    }
    cqe = srq + qps * sq;
    if (srq < VERBS_MIN_SRQ || sq < 16 || cqe > (uint64_t)dev->max_cqe) {
        UTIL_LOG_ERROR("verbs: %s: %llu queue pairs of %llu requests and a receive queue of "
                       "%llu do not fit the device (%d completions, %d receives, %d requests "
                       "per queue)", vt->base.name, (unsigned long long)qps,
                       (unsigned long long)sq, (unsigned long long)srq, dev->max_cqe,
                       dev->max_srq_wr, dev->max_qp_wr);
        return STRATA_ERR_UNSUPPORTED;
    }
    vt->sq_depth = (uint32_t)sq;
    *srq_p       = (uint32_t)srq;
    *cqe_p       = (int)cqe;
    return STRATA_OK;
}

/* Protection domain, completion queue, shared receive queue and one QP per rank (and the
 * receiving half of the loopback pair), all in INIT. */
static strata_status_t verbs_create_queues(verbs_transport_t *vt, const struct ibv_device_attr *dev)
{
    struct ibv_srq_init_attr srq_init = {.attr = {.max_sge = 1}};
    uint32_t inline_size = (uint32_t)vt->config.inline_size;
    strata_status_t status;
    int cqe;

    if ((status = verbs_size_queues(vt, dev, &srq_init.attr.max_wr, &cqe)) != STRATA_OK) {
        return status;
    }
    vt->pd = ibv_alloc_pd(vt->ctx);
    vt->cq = vt->pd ? ibv_create_cq(vt->ctx, cqe, NULL, NULL, 0) : NULL;
    vt->srq = vt->cq ? ibv_create_srq(vt->pd, &srq_init) : NULL;
    if (vt->srq == NULL) {
        UTIL_LOG_ERROR("verbs: %s: creating the %s: %s", vt->base.name,
                       !vt->pd ? "protection domain" : !vt->cq ? "completion queue"
                                                                : "shared receive queue",
                       strerror(errno));
        return STRATA_ERR_TRANSPORT;
    }
    for (int p = 0; p < vt->world; ++p) {
        if ((vt->peers[p].qp = verbs_create_qp(vt, &inline_size)) == NULL) {
            return STRATA_ERR_TRANSPORT;
        }
    }
    if ((vt->self_rx = verbs_create_qp(vt, &inline_size)) == NULL) {
        return STRATA_ERR_TRANSPORT;
    }
    vt->base.rx_size     = srq_init.attr.max_wr; /* as the device rounded it */
    vt->base.inject_size = inline_size;
    vt->max_rd_atomic      = (uint32_t)UTIL_MIN(dev->max_qp_init_rd_atom, VERBS_MAX_RD_ATOM);
    vt->max_dest_rd_atomic = (uint32_t)UTIL_MIN(dev->max_qp_rd_atom, VERBS_MAX_RD_ATOM);
    vt->signal_every       = UTIL_MAX(vt->sq_depth / 2, 1u);
    return STRATA_OK;
}

static strata_status_t verbs_open_port(verbs_transport_t *vt, const inter_transport_params_t *params)
{
    struct ibv_device_attr dev;
    struct ibv_port_attr port;
    strata_status_t status;
    uint32_t psn = 0;
    int rc;

    rc = ibv_query_device(vt->ctx, &dev);
    rc = rc ? rc : ibv_query_port(vt->ctx, vt->port, &port);
    if (rc != 0) {
        UTIL_LOG_ERROR("verbs: %s: querying the device: %s", vt->base.name, strerror(rc));
        return STRATA_ERR_TRANSPORT;
    }
    vt->link_layer = port.link_layer;
    vt->mtu        = port.active_mtu;
    vt->lid        = port.lid;
    if (vt->link_layer == IBV_LINK_LAYER_INFINIBAND && port.lid == 0) {
        UTIL_LOG_ERROR("verbs: %s has no LID (is a subnet manager running?)", vt->base.name);
        return STRATA_ERR_UNSUPPORTED;
    }
    if (params->msg_bytes > port.max_msg_sz) {
        UTIL_LOG_ERROR("verbs: %s carries messages of %u bytes, fewer than the engine's %zu: "
                       "lower STRATA_INTER_MSG_SIZE", vt->base.name, port.max_msg_sz,
                       params->msg_bytes);
        return STRATA_ERR_UNSUPPORTED;
    }
    if ((status = verbs_choose_gid(vt, &port)) != STRATA_OK ||
        (status = verbs_create_queues(vt, &dev)) != STRATA_OK) {
        return status;
    }
    util_random_bytes(&psn, sizeof(psn));
    vt->psn                = psn & 0xffffffu;
    vt->base.has_read      = vt->max_rd_atomic > 0 && vt->max_dest_rd_atomic > 0;
    vt->base.loopback_flush = vt->base.has_read; /* this rank's own pair of QPs, on the HCA */
    vt->base.virt_addr     = true;
    vt->base.max_msg_size  = port.max_msg_sz;
    vt->base.max_rma_size  = port.max_msg_sz;
    vt->base.rx_cq_data    = true; /* a write with immediate consumes a receive */
    vt->base.addr_size     = verbs_addr_size(vt->world);
    if (params->device_memory != INTER_MEM_HOST &&
        inter_peer_memory_module(params->device_memory) == NULL) {
        vt->dmabuf_fn  = params->dmabuf_fn; /* open GPU modules, an inbox rdma-core */
        vt->dmabuf_ctx = params->dmabuf_ctx;
    }
    vt->base.hmem = params->device_memory != INTER_MEM_HOST &&
                    (inter_peer_memory_module(params->device_memory) != NULL ||
                     vt->dmabuf_fn != NULL);
    return STRATA_OK;
}

static void verbs_close(inter_transport_t *tp);

/* The device and port params name, opened; its line logged. */
static strata_status_t verbs_open_device(verbs_transport_t *vt,
                                         const inter_transport_params_t *params)
{
    verbs_dev_info_t *infos = calloc(VERBS_MAX_DEVICES, sizeof(*infos));
    struct ibv_device **list = NULL;
    strata_status_t status = STRATA_ERR_NO_MEMORY;
    verbs_dev_spec_t spec;
    int num, err, index = 0, port = 0;
    bool fallback = false;
    char msg[320];

    if (infos == NULL) {
        return status;
    }
    num    = verbs_scan(&list, infos, &err);
    if (num == 0) {
        UTIL_LOG_DEBUG("verbs: ibv_get_device_list: %s", err ? strerror(err) : "empty");
    }
    status = verbs_spec_parse(params->iface, &spec, msg, sizeof(msg));
    if (status == STRATA_OK) {
        status = verbs_select_device(infos, num, &spec, params->required, &index, &port,
                                     &fallback, msg, sizeof(msg));
    }
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("verbs: rail %d: %s", params->rail, msg);
    } else if (fallback) {
        UTIL_LOG_WARN("verbs: rail %d (from the rail plan): %s", params->rail, msg);
    }
    if (status == STRATA_OK) {
        vt->port = (uint8_t)port;
        snprintf(vt->base.name, sizeof(vt->base.name), "verbs %s:%d", infos[index].name, port);
        vt->ctx = ibv_open_device(list[index]);
        if (vt->ctx == NULL) {
            UTIL_LOG_ERROR("verbs: opening %s: %s", infos[index].name, strerror(errno));
            status = STRATA_ERR_TRANSPORT;
        }
    }
    if (list != NULL) {
        ibv_free_device_list(list); /* an opened context outlives the list */
    }
    free(infos);
    return status;
}

static strata_status_t verbs_open(const inter_transport_params_t *params, inter_transport_t **tp_p)
{
    verbs_transport_t *vt;
    strata_status_t status;
    int flags;

    if (params->world_size < 1 || params->rank < 0 || params->rank >= params->world_size) {
        UTIL_LOG_ERROR("verbs: rank %d of %d", params->rank, params->world_size);
        return STRATA_ERR_INVALID;
    }
    if (verbs_addr_size(params->world_size) > INTER_ADDR_MAX) {
        UTIL_LOG_ERROR("verbs: an address holds a QPN per rank: %d ranks take %zu bytes, more "
                       "than the engine's %d (at most %d ranks)", params->world_size,
                       verbs_addr_size(params->world_size), INTER_ADDR_MAX,
                       (INTER_ADDR_MAX - VERBS_ADDR_HEADER) / 4);
        return STRATA_ERR_UNSUPPORTED;
    }
    vt = calloc(1, sizeof(*vt));
    if (vt == NULL || (vt->peers = calloc((size_t)params->world_size, sizeof(*vt->peers))) == NULL) {
        free(vt);
        return STRATA_ERR_NO_MEMORY;
    }
    vt->base.ops = &verbs_transport_ops;
    vt->rank     = params->rank;
    vt->world    = params->world_size;
    pthread_mutex_init(&vt->mr_lock, NULL);
    status = util_config_read(&verbs_config_table, &vt->config); /* no strings to release */
    status = status == STRATA_OK ? verbs_config_check(&vt->config) : status;
    status = status == STRATA_OK ? verbs_open_device(vt, params) : status;
    status = status == STRATA_OK ? verbs_open_port(vt, params) : status;
    if (status != STRATA_OK) {
        verbs_close(&vt->base);
        return status;
    }
    /* Async events are read by poll without blocking. */
    flags = fcntl(vt->ctx->async_fd, F_GETFL);
    if (flags < 0 || fcntl(vt->ctx->async_fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        UTIL_LOG_WARN("verbs: %s: async events stay unread: %s", vt->base.name, strerror(errno));
        vt->next_async_ns = UINT64_MAX;
    }
    UTIL_LOG_INFO("rail %d: %s, %s, MTU %d, GID index %d, %d queue pairs of %u requests, "
                  "%zu receives, inline %zu, read %s, device memory %s", params->rail,
                  vt->base.name, vt->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
                  128 << vt->mtu, vt->gid_index, vt->world + 1, vt->sq_depth, vt->base.rx_size,
                  vt->base.inject_size, vt->base.has_read ? "yes" : "no",
                  params->device_memory == INTER_MEM_HOST ? "not asked for"
                  : vt->dmabuf_fn != NULL ? "registered (dma-buf)"
                  : vt->base.hmem         ? "registered (peer memory)"
                                          : "not offered (no peer memory, no dma-buf)");
    *tp_p = &vt->base;
    return STRATA_OK;
}

/* --- Registration ---------------------------------------------------------------------------- */

/*
 * GPU memory through a dma-buf of it: where no peer-memory module pins GPU memory for
 * ibv_reg_mr (open GPU kernel modules, an inbox rdma-core). NULL with errno set on failure.
 */
static struct ibv_mr *verbs_reg_dmabuf(verbs_transport_t *vt, void *addr, size_t len,
                                       int access)
{
    struct ibv_mr *mr;
    uint64_t offset = 0;
    int fd = -1, err;

    if (vt->dmabuf_fn(vt->dmabuf_ctx, addr, len, &fd, &offset) != STRATA_OK) {
        errno = ENOTSUP; /* the exporter logged why */
        return NULL;
    }
    mr  = ibv_reg_dmabuf_mr(vt->pd, offset, len, (uint64_t)(uintptr_t)addr, fd, access);
    err = errno;
    close(fd); /* the registration holds the buffer */
    errno = err;
    return mr;
}

/*
 * requested_key cannot be honoured: the device chooses rkeys. GPU memory goes through
 * ibv_reg_mr where a peer-memory module was found at open, else through a dma-buf of it
 * (tp->hmem either way). Not with relaxed ordering: a completion could then overtake the
 * data it stands for on the way to GPU memory, and only the MoE network area is guarded by
 * a flush; the point-to-point API's buffers are not.
 */
static strata_status_t verbs_mem_register(inter_transport_t *tp, void *addr, size_t len,
                                          inter_mem_kind_t kind, int device,
                                          uint64_t requested_key, inter_tmr_t *mr)
{
    verbs_transport_t *vt = verbs_of(tp);
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    verbs_mr_t *vmr;
    int err;

    (void)device;
    (void)requested_key;
    if (kind != INTER_MEM_HOST && !tp->hmem) {
        return STRATA_ERR_UNSUPPORTED;
    }
    vmr = calloc(1, sizeof(*vmr));
    if (vmr == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    if (kind == INTER_MEM_HOST) {
        vmr->mr = ibv_reg_mr(vt->pd, addr, len, access);
    } else if (vt->dmabuf_fn != NULL) {
        vmr->mr = verbs_reg_dmabuf(vt, addr, len, access);
    } else {
        vmr->mr = ibv_reg_mr(vt->pd, addr, len, access);
    }
    if (vmr->mr == NULL) {
        err = errno;
        UTIL_LOG_ERROR("verbs: %s: registering %zu bytes of %s memory at %p%s: %s", tp->name,
                       len, kind == INTER_MEM_HOST ? "host" : "GPU", addr,
                       kind != INTER_MEM_HOST && vt->dmabuf_fn != NULL ? " by dma-buf" : "",
                       strerror(err));
        free(vmr);
        return err == ENOMEM ? STRATA_ERR_NO_MEMORY
               : err == ENOTSUP || err == EOPNOTSUPP ? STRATA_ERR_UNSUPPORTED
                                                     : STRATA_ERR_TRANSPORT;
    }
    pthread_mutex_lock(&vt->mr_lock);
    vmr->next = vt->mrs;
    if (vt->mrs != NULL) {
        vt->mrs->prev = vmr;
    }
    vt->mrs = vmr;
    pthread_mutex_unlock(&vt->mr_lock);
    mr->handle = vmr;
    mr->desc   = vmr->mr; /* posts read the lkey from it */
    mr->key    = vmr->mr->rkey;
    return STRATA_OK;
}

static void verbs_mr_release(verbs_transport_t *vt, verbs_mr_t *vmr)
{
    int rc = ibv_dereg_mr(vmr->mr);

    if (rc != 0) {
        UTIL_LOG_WARN("verbs: closing a registration of %s failed: %s", vt->base.name,
                      strerror(rc));
    }
    free(vmr);
}

static void verbs_mem_deregister(inter_transport_t *tp, inter_tmr_t *mr)
{
    verbs_transport_t *vt = verbs_of(tp);
    verbs_mr_t *vmr = mr->handle;

    if (vmr == NULL) {
        return;
    }
    pthread_mutex_lock(&vt->mr_lock);
    if (vmr->prev != NULL) {
        vmr->prev->next = vmr->next;
    } else {
        vt->mrs = vmr->next;
    }
    if (vmr->next != NULL) {
        vmr->next->prev = vmr->prev;
    }
    pthread_mutex_unlock(&vt->mr_lock);
    verbs_mr_release(vt, vmr);
    mr->handle = NULL;
    mr->desc   = NULL;
}

/* --- Teardown -------------------------------------------------------------------------------- */

static void verbs_destroy_qp(verbs_transport_t *vt, struct ibv_qp **qp_p)
{
    int rc;

    if (*qp_p == NULL) {
        return;
    }
    rc = ibv_destroy_qp(*qp_p);
    if (rc != 0) {
        UTIL_LOG_WARN("verbs: closing QP %u of %s failed: %s", (*qp_p)->qp_num, vt->base.name,
                      strerror(rc));
    }
    *qp_p = NULL;
}

/*
 * Every QP to the error state (the device stops work on it and flushes what was posted),
 * then destroyed: from then on the device reaches no buffer the engine gave. Completions
 * still queued are never read (poll refuses after this).
 */
static void verbs_shutdown(inter_transport_t *tp)
{
    verbs_transport_t *vt = verbs_of(tp);
    struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};

    if (vt->shut) {
        return;
    }
    vt->shut = true;
    for (int p = 0; p <= vt->world; ++p) {
        struct ibv_qp **qp = p < vt->world ? &vt->peers[p].qp : &vt->self_rx;
        int rc = *qp ? ibv_modify_qp(*qp, &err, IBV_QP_STATE) : 0;

        if (rc != 0) {
            UTIL_LOG_DEBUG("verbs: %s: QP %u to ERR: %s", tp->name, (*qp)->qp_num, strerror(rc));
        }
        verbs_destroy_qp(vt, qp);
    }
}

static void verbs_close(inter_transport_t *tp)
{
    verbs_transport_t *vt;
    int rc, left = 0;

    if (tp == NULL) {
        return;
    }
    vt = verbs_of(tp);
    if (vt->peers != NULL) {
        verbs_shutdown(tp);
    }
    if (vt->srq != NULL && (rc = ibv_destroy_srq(vt->srq)) != 0) {
        UTIL_LOG_WARN("verbs: closing the shared receive queue of %s failed: %s", tp->name,
                      strerror(rc));
    }
    if (vt->cq != NULL && (rc = ibv_destroy_cq(vt->cq)) != 0) {
        UTIL_LOG_WARN("verbs: closing the completion queue of %s failed: %s", tp->name,
                      strerror(rc));
    }
    while (vt->mrs != NULL) {
        verbs_mr_t *vmr = vt->mrs;

        vt->mrs = vmr->next;
        verbs_mr_release(vt, vmr);
        ++left;
    }
    if (left > 0) {
        UTIL_LOG_ERROR("verbs: closing %s with %d registrations still open", tp->name, left);
    }
    if (vt->pd != NULL && (rc = ibv_dealloc_pd(vt->pd)) != 0) {
        UTIL_LOG_WARN("verbs: closing the protection domain of %s failed: %s", tp->name,
                      strerror(rc));
    }
    if (vt->ctx != NULL && ibv_close_device(vt->ctx) != 0) {
        UTIL_LOG_WARN("verbs: closing the device of %s failed", tp->name);
    }
    pthread_mutex_destroy(&vt->mr_lock);
    free(vt->peers);
    free(vt);
}

const inter_transport_ops_t verbs_transport_ops = {
    .name           = "verbs",
    .config         = &verbs_config_table,
    .probe          = verbs_probe,
    .open           = verbs_open,
    .shutdown       = verbs_shutdown,
    .close          = verbs_close,
    .address        = verbs_address,
    .insert_peer    = verbs_insert_peer,
    .mem_register   = verbs_mem_register,
    .mem_deregister = verbs_mem_deregister,
    .post           = verbs_post,
    .inject         = verbs_inject,
    .post_recv      = verbs_post_recv,
    .poll           = verbs_poll,
};
