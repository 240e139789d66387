/*
 * The verbs transport's connections: the address a rank publishes (its port path and the
 * QPN it set aside for each rank), and a peer's address taking that rank's QP through RTR
 * to RTS. The loopback pair of a rank's own QPs connects the same way.
 */
#include "inter/verbs/verbs.h"

#include <stdlib.h>
#include <string.h>

#define VERBS_HOP_LIMIT   64   /* RoCE v2: the IP TTL */
#define VERBS_MIN_RNR     12   /* min_rnr_timer code 12: 0.64 ms before a sender retries */
#define VERBS_RNR_FOREVER 7    /* rnr_retry 7: retry without bound (receives run short) */

strata_status_t verbs_address(inter_transport_t *tp, void *addr, size_t *len_p)
{
    verbs_transport_t *vt = verbs_of(tp);
    size_t size = verbs_addr_size(vt->world);
    verbs_addr_t header = {.owner = (uint32_t)vt->rank, .world = (uint32_t)vt->world,
                           .link_layer = vt->link_layer, .port = vt->port,
                           .mtu = (uint8_t)vt->mtu, .lid = vt->lid, .psn = vt->psn};
    uint32_t *qpns;

    if (*len_p < size) {
        UTIL_LOG_ERROR("verbs: %s: an address takes %zu bytes, not %zu", tp->name, size, *len_p);
        return STRATA_ERR_INVALID;
    }
    qpns = malloc((size_t)vt->world * sizeof(*qpns));
    if (qpns == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    memcpy(header.gid, vt->gid.raw, sizeof(header.gid));
    for (int p = 0; p < vt->world; ++p) {
        qpns[p] = p == vt->rank ? vt->self_rx->qp_num : vt->peers[p].qp->qp_num;
    }
    verbs_addr_encode(&header, qpns, addr);
    free(qpns);
    *len_p = size;
    return STRATA_OK;
}

int verbs_peer_of_qpn(const verbs_transport_t *vt, uint32_t qp_num)
{
    if (vt->self_rx != NULL && vt->self_rx->qp_num == qp_num) {
        return vt->rank;
    }
    for (int p = 0; p < vt->world; ++p) {
        if (vt->peers[p].qp != NULL && vt->peers[p].qp->qp_num == qp_num) {
            return p;
        }
    }
    return -1;
}

/* INIT -> RTR -> RTS towards remote_qpn of the rank whose address is remote. */
static strata_status_t verbs_connect_qp(verbs_transport_t *vt, struct ibv_qp *qp,
                                        const verbs_addr_t *remote, uint32_t remote_qpn)
{
    struct ibv_qp_attr rtr = {
        .qp_state = IBV_QPS_RTR, .path_mtu = verbs_path_mtu(vt->mtu, (enum ibv_mtu)remote->mtu),
        .dest_qp_num = remote_qpn, .rq_psn = remote->psn,
        .max_dest_rd_atomic = (uint8_t)vt->max_dest_rd_atomic, .min_rnr_timer = VERBS_MIN_RNR,
        .ah_attr = {.port_num = vt->port, .sl = (uint8_t)vt->config.service_level},
    };
    struct ibv_qp_attr rts = {
        .qp_state = IBV_QPS_RTS, .timeout = (uint8_t)vt->config.timeout,
        .retry_cnt = (uint8_t)vt->config.retry_count, .rnr_retry = VERBS_RNR_FOREVER,
        .sq_psn = vt->psn, .max_rd_atomic = (uint8_t)vt->max_rd_atomic,
    };
    int rc;

    /* RoCE always routes by GRH; InfiniBand by LID within the subnet. */
    if (vt->link_layer == IBV_LINK_LAYER_ETHERNET || remote->lid == 0) {
        rtr.ah_attr.is_global      = 1;
        rtr.ah_attr.grh.sgid_index = (uint8_t)vt->gid_index;
        rtr.ah_attr.grh.hop_limit  = VERBS_HOP_LIMIT;
        rtr.ah_attr.grh.traffic_class = (uint8_t)vt->config.traffic_class;
        memcpy(rtr.ah_attr.grh.dgid.raw, remote->gid, sizeof(remote->gid));
    } else {
        rtr.ah_attr.dlid = remote->lid;
    }
    rc = ibv_modify_qp(qp, &rtr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                     IBV_QP_MIN_RNR_TIMER);
    if (rc == 0) {
        rc = ibv_modify_qp(qp, &rts, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                         IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                         IBV_QP_MAX_QP_RD_ATOMIC);
    }
    if (rc != 0) {
        UTIL_LOG_ERROR("verbs: %s: connecting QP %u to rank %u's QP %u (%s): %s", vt->base.name,
                       qp->qp_num, remote->owner, remote_qpn,
                       qp->state == IBV_QPS_RTR ? "RTS" : "RTR", strerror(rc));
        return STRATA_ERR_TRANSPORT;
    }
    return STRATA_OK;
}

strata_status_t verbs_insert_peer(inter_transport_t *tp, const void *addr, size_t len,
                                  uint64_t *peer_p)
{
    verbs_transport_t *vt = verbs_of(tp);
    strata_status_t status;
    verbs_addr_t remote;
    verbs_peer_t *peer;

    if ((status = verbs_addr_decode(addr, len, &remote)) != STRATA_OK) {
        return status;
    }
    if (remote.world != (uint32_t)vt->world || remote.link_layer != vt->link_layer) {
        UTIL_LOG_ERROR("verbs: %s: rank %u's address is for %u ranks over %s, this rank's "
                       "for %d over %s", tp->name, remote.owner, remote.world,
                       remote.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
                       vt->world,
                       vt->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand");
        return STRATA_ERR_INVALID;
    }
    peer = &vt->peers[remote.owner];
    if (peer->connected) {
        UTIL_LOG_ERROR("verbs: %s: rank %u's address was inserted before", tp->name, remote.owner);
        return STRATA_ERR_INVALID;
    }
    status = verbs_connect_qp(vt, peer->qp, &remote, verbs_addr_qpn(addr, &remote, vt->rank));
    if (status == STRATA_OK && remote.owner == (uint32_t)vt->rank) {
        /* Loopback: the receiving half answers the sending half. */
        status = verbs_connect_qp(vt, vt->self_rx, &remote, peer->qp->qp_num);
        vt->self_rx_connected = status == STRATA_OK;
    }
    if (status != STRATA_OK) {
        return status;
    }
    peer->connected = true;
    *peer_p         = remote.owner;
    return STRATA_OK;
}
