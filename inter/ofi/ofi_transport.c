/*
 * libfabric transport: FI_EP_RDM endpoints with FI_MSG and FI_RMA, write with remote CQ data
 * as the immediate, honouring the provider's mr_mode (FI_MR_LOCAL, VIRT_ADDR, PROV_KEY,
 * ALLOCATED, ENDPOINT). One code path for efa, verbs;ofi_rxm, tcp;ofi_rxm and shm.
 */
#include "inter/transport.h"
#include "util/util.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1.10: the first API whose fi_mr_attr carries the memory's iface (FI_HMEM). */
#define OFI_VERSION      FI_VERSION(1, 10)
#define OFI_CQ_BATCH     32
#define OFI_MR_MODES     (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED | \
                          FI_MR_ENDPOINT)

typedef struct ofi_transport {
    inter_transport_t  base;
    struct fi_info    *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av     *av;
    struct fid_cq     *cq;
    struct fid_ep     *ep;
    uint64_t           mr_mode;
    bool               rx_cq_data; /* remote CQ data consumes a posted receive */
} ofi_transport_t;

static ofi_transport_t *ofi_of(inter_transport_t *tp)
{
    return util_container_of(tp, ofi_transport_t, base);
}

static strata_status_t ofi_status(ssize_t rc)
{
    switch (rc) {
    case 0:            return STRATA_OK;
    case -FI_EAGAIN:   return STRATA_ERR_BUSY;
    case -FI_ENOMEM:   return STRATA_ERR_NO_MEMORY;
    case -FI_EINVAL:   return STRATA_ERR_INVALID;
    case -FI_ENOSYS:
    case -FI_EOPNOTSUPP: return STRATA_ERR_UNSUPPORTED;
    case -FI_ECANCELED: return STRATA_ERR_CANCELLED;
    case -FI_ETIMEDOUT: return STRATA_ERR_TIMEOUT;
    default:           return STRATA_ERR_TRANSPORT;
    }
}

/* libfabric provider names for strata's provider setting, in "auto" preference order. */
static const char *const ofi_auto_order[] = {"efa", "verbs;ofi_rxm", "tcp;ofi_rxm"};

static const char *ofi_provider_name(const char *provider)
{
    if (strcmp(provider, "tcp") == 0) {
        return "tcp;ofi_rxm";
    }
    if (strcmp(provider, "verbs") == 0) {
        return "verbs;ofi_rxm";
    }
    return provider; /* "shm", "efa", or a libfabric name given as is */
}

/* hmem: also ask that device memory can be registered (FI_HMEM, with FI_MR_HMEM). */
static struct fi_info *ofi_hints(const char *prov_name, bool hmem)
{
    struct fi_info *hints = fi_allocinfo();

    if (hints == NULL) {
        return NULL;
    }
    hints->ep_attr->type          = FI_EP_RDM;
    hints->caps                   = FI_MSG | FI_RMA | (hmem ? FI_HMEM : 0);
    hints->mode                   = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
    hints->domain_attr->mr_mode   = OFI_MR_MODES | (hmem ? FI_MR_HMEM : 0);
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->domain_attr->av_type   = FI_AV_TABLE;
    hints->fabric_attr->prov_name = strdup(prov_name);
    if (hints->fabric_attr->prov_name == NULL) {
        fi_freeinfo(hints);
        return NULL;
    }
    return hints;
}

/* Preference among entries when no device is named: off loopback first, then IPv4. */
static int ofi_default_rank(const struct fi_info *info)
{
    const char *domain = info->domain_attr->name ? info->domain_attr->name : "";

    return (strcmp(domain, "lo") == 0 ? 2 : 0) + (info->addr_format == FI_SOCKADDR_IN ? 0 : 1);
}

/* The entry for the device asked for; else (unless required) the preferred default. */
static struct fi_info *ofi_pick(struct fi_info *list, const char *iface, bool required)
{
    struct fi_info *best = NULL;

    for (struct fi_info *cur = list; cur != NULL; cur = cur->next) {
        const char *domain = cur->domain_attr->name ? cur->domain_attr->name : "";

        if (cur->domain_attr->cq_data_size < sizeof(uint32_t)) {
            continue; /* no room for the immediate */
        }
        if (iface && iface[0] && strcmp(domain, iface) == 0) {
            return cur;
        }
        if (best == NULL || ofi_default_rank(cur) < ofi_default_rank(best)) {
            best = cur;
        }
    }
    return (iface && iface[0] && required) ? NULL : best;
}

static strata_status_t ofi_getinfo(const inter_transport_params_t *params, bool hmem,
                                   struct fi_info **info_p)
{
    const char *single[1], *const *names = single;
    size_t num_names = 1;
    struct fi_info *hints, *list = NULL, *pick;
    int rc = -FI_ENODATA;

    if (strcmp(params->provider, "auto") == 0) {
        names     = ofi_auto_order;
        num_names = UTIL_ARRAY_SIZE(ofi_auto_order);
    } else {
        single[0] = ofi_provider_name(params->provider);
    }
    for (size_t i = 0; i < num_names; ++i) {
        hints = ofi_hints(names[i], hmem);
        if (hints == NULL) {
            return STRATA_ERR_NO_MEMORY;
        }
        rc = fi_getinfo(OFI_VERSION, NULL, NULL, 0, hints, &list);
        fi_freeinfo(hints);
        if (rc == 0 && (pick = ofi_pick(list, params->iface, params->required)) != NULL) {
            struct fi_info *dup = fi_dupinfo(pick);

            fi_freeinfo(list);
            if (dup == NULL) {
                return STRATA_ERR_NO_MEMORY;
            }
            *info_p = dup;
            return STRATA_OK;
        }
        if (rc == 0) {
            fi_freeinfo(list);
        }
    }
    if (hmem) {
        return STRATA_ERR_UNSUPPORTED; /* the caller asks again without device memory */
    }
    UTIL_LOG_ERROR("ofi: no libfabric provider '%s'%s%s with RDM endpoints, RMA, messages and "
                   "remote CQ data (%s)", params->provider,
                   (params->iface && params->iface[0]) ? " on interface " : "",
                   (params->iface && params->iface[0]) ? params->iface : "", fi_strerror(-rc));
    return STRATA_ERR_UNSUPPORTED;
}

static void ofi_shutdown(inter_transport_t *tp)
{
    ofi_transport_t *ofi = ofi_of(tp);

    if (ofi->ep) {
        fi_close(&ofi->ep->fid);
        ofi->ep = NULL;
    }
}

static void ofi_close(inter_transport_t *tp)
{
    ofi_transport_t *ofi;

    if (tp == NULL) {
        return;
    }
    ofi = ofi_of(tp);
    ofi_shutdown(tp);
    if (ofi->cq) {
        fi_close(&ofi->cq->fid);
    }
    if (ofi->av) {
        fi_close(&ofi->av->fid);
    }
    if (ofi->domain) {
        fi_close(&ofi->domain->fid);
    }
    if (ofi->fabric) {
        fi_close(&ofi->fabric->fid);
    }
    fi_freeinfo(ofi->info);
    free(ofi);
}

static int ofi_open_objects(ofi_transport_t *ofi)
{
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_DATA, .wait_obj = FI_WAIT_NONE};
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    int rc;

    /* Room for every completion the endpoint can have outstanding at once. */
    cq_attr.size = ofi->info->tx_attr->size + ofi->info->rx_attr->size;
    rc = fi_fabric(ofi->info->fabric_attr, &ofi->fabric, NULL);
    if (rc == 0) {
        rc = fi_domain(ofi->fabric, ofi->info, &ofi->domain, NULL);
    }
    if (rc == 0) {
        rc = fi_av_open(ofi->domain, &av_attr, &ofi->av, NULL);
    }
    if (rc == 0) {
        rc = fi_cq_open(ofi->domain, &cq_attr, &ofi->cq, NULL);
    }
    if (rc == 0) {
        rc = fi_endpoint(ofi->domain, ofi->info, &ofi->ep, NULL);
    }
    if (rc == 0) {
        rc = fi_ep_bind(ofi->ep, &ofi->av->fid, 0);
    }
    if (rc == 0) {
        rc = fi_ep_bind(ofi->ep, &ofi->cq->fid, FI_TRANSMIT | FI_RECV);
    }
    if (rc == 0) {
        rc = fi_enable(ofi->ep);
    }
    return rc;
}

static strata_status_t ofi_open(const inter_transport_params_t *params, inter_transport_t **tp_p)
{
    ofi_transport_t *ofi = calloc(1, sizeof(*ofi));
    strata_status_t status;
    int rc;

    if (ofi == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    ofi->base.hmem = params->device_memory != INTER_MEM_HOST &&
                     ofi_getinfo(params, true, &ofi->info) == STRATA_OK;
    status = ofi->base.hmem ? STRATA_OK : ofi_getinfo(params, false, &ofi->info);
    if (status != STRATA_OK) {
        free(ofi);
        return status;
    }
    rc = ofi_open_objects(ofi);
    if (rc != 0) {
        UTIL_LOG_ERROR("ofi: opening %s on %s failed: %s", ofi->info->fabric_attr->prov_name,
                       ofi->info->domain_attr->name, fi_strerror(-rc));
        ofi_close(&ofi->base);
        return ofi_status(rc);
    }
    ofi->mr_mode            = ofi->info->domain_attr->mr_mode;
    ofi->rx_cq_data         = (ofi->info->mode & FI_RX_CQ_DATA) != 0;
    ofi->base.has_read      = (ofi->info->caps & FI_READ) != 0;
    ofi->base.virt_addr     = (ofi->mr_mode & FI_MR_VIRT_ADDR) != 0;
    ofi->base.max_msg_size  = ofi->info->ep_attr->max_msg_size;
    ofi->base.inject_size   = ofi->info->tx_attr->inject_size;
    snprintf(ofi->base.name, sizeof(ofi->base.name), "ofi %s %s",
             ofi->info->fabric_attr->prov_name, ofi->info->domain_attr->name);
    UTIL_LOG_INFO("rail %d: %s, mr_mode 0x%llx, read %s, device memory %s", params->rail,
                  ofi->base.name, (unsigned long long)ofi->mr_mode,
                  ofi->base.has_read ? "yes" : "no",
                  params->device_memory == INTER_MEM_HOST ? "not asked for"
                  : ofi->base.hmem                        ? "registered (FI_HMEM)"
                                                          : "not offered by the provider");
    *tp_p = &ofi->base;
    return STRATA_OK;
}

static strata_status_t ofi_address(inter_transport_t *tp, void *addr, size_t *len_p)
{
    int rc = fi_getname(&ofi_of(tp)->ep->fid, addr, len_p);

    if (rc != 0) {
        UTIL_LOG_ERROR("ofi: fi_getname: %s", fi_strerror(-rc));
    }
    return ofi_status(rc);
}

static strata_status_t ofi_insert_peer(inter_transport_t *tp, const void *addr, size_t len,
                                       uint64_t *peer_p)
{
    fi_addr_t fi_addr;
    int rc;

    (void)len;
    rc = fi_av_insert(ofi_of(tp)->av, addr, 1, &fi_addr, 0, NULL);
    if (rc != 1) {
        UTIL_LOG_ERROR("ofi: fi_av_insert failed: %s", fi_strerror(rc < 0 ? -rc : FI_EINVAL));
        return STRATA_ERR_TRANSPORT;
    }
    *peer_p = fi_addr;
    return STRATA_OK;
}

static enum fi_hmem_iface ofi_iface(inter_mem_kind_t kind)
{
    return kind == INTER_MEM_CUDA ? FI_HMEM_CUDA : kind == INTER_MEM_ROCM ? FI_HMEM_ROCR
                                                                          : FI_HMEM_SYSTEM;
}

static strata_status_t ofi_mem_register(inter_transport_t *tp, void *addr, size_t len,
                                        inter_mem_kind_t kind, int device,
                                        uint64_t requested_key, inter_tmr_t *mr)
{
    ofi_transport_t *ofi = ofi_of(tp);
    struct iovec iov = {.iov_base = addr, .iov_len = len};
    struct fi_mr_attr attr = {
        .mr_iov        = &iov,
        .iov_count     = 1,
        .access        = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |
                         FI_REMOTE_WRITE,
        .requested_key = requested_key,
        .iface         = ofi_iface(kind),
    };
    struct fid_mr *fmr;
    int rc;

    if (kind != INTER_MEM_HOST && !tp->hmem) {
        return STRATA_ERR_UNSUPPORTED;
    }
    if (kind == INTER_MEM_CUDA) {
        attr.device.cuda = device;
    } else if (kind == INTER_MEM_ROCM) {
        attr.device.reserved = (uint64_t)device;
    }
    rc = fi_mr_regattr(ofi->domain, &attr, 0, &fmr);
    if (rc == 0 && (ofi->mr_mode & FI_MR_ENDPOINT)) {
        rc = fi_mr_bind(fmr, &ofi->ep->fid, 0);
        if (rc == 0) {
            rc = fi_mr_enable(fmr);
        }
        if (rc != 0) {
            fi_close(&fmr->fid);
        }
    }
    if (rc != 0) {
        UTIL_LOG_ERROR("ofi: registering %zu bytes at %p failed: %s", len, addr, fi_strerror(-rc));
        return ofi_status(rc);
    }
    mr->handle = fmr;
    mr->desc   = fi_mr_desc(fmr);
    mr->key    = fi_mr_key(fmr);
    return STRATA_OK;
}

static void ofi_mem_deregister(inter_transport_t *tp, inter_tmr_t *mr)
{
    (void)tp;
    if (mr->handle != NULL) {
        fi_close(&((struct fid_mr *)mr->handle)->fid);
        mr->handle = NULL;
    }
}

static strata_status_t ofi_post_write(inter_transport_t *tp, uint64_t peer, const void *buf,
                                      size_t len, void *desc, uint64_t raddr, uint64_t rkey,
                                      bool with_imm, uint32_t imm, void *context)
{
    ofi_transport_t *ofi = ofi_of(tp);
    ssize_t rc;

    if (with_imm) {
        rc = fi_writedata(ofi->ep, buf, len, desc, imm, peer, raddr, rkey, context);
    } else {
        rc = fi_write(ofi->ep, buf, len, desc, peer, raddr, rkey, context);
    }
    return ofi_status(rc);
}

static strata_status_t ofi_post_read(inter_transport_t *tp, uint64_t peer, void *buf, size_t len,
                                     void *desc, uint64_t raddr, uint64_t rkey, void *context)
{
    return ofi_status(fi_read(ofi_of(tp)->ep, buf, len, desc, peer, raddr, rkey, context));
}

static strata_status_t ofi_post_send(inter_transport_t *tp, uint64_t peer, const void *buf,
                                     size_t len, void *desc, void *context)
{
    return ofi_status(fi_send(ofi_of(tp)->ep, buf, len, desc, peer, context));
}

static strata_status_t ofi_inject(inter_transport_t *tp, uint64_t peer, const void *buf,
                                  size_t len)
{
    return ofi_status(fi_inject(ofi_of(tp)->ep, buf, len, peer));
}

static strata_status_t ofi_post_recv(inter_transport_t *tp, void *buf, size_t len, void *desc,
                                     void *context)
{
    return ofi_status(fi_recv(ofi_of(tp)->ep, buf, len, desc, FI_ADDR_UNSPEC, context));
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
        cqe->context = ofi->rx_cq_data ? entry->op_context : NULL;
    } else if (entry->flags & FI_RECV) {
        cqe->kind = INTER_CQE_RECV;
    } else {
        cqe->kind = INTER_CQE_LOCAL;
    }
}

static int ofi_poll_error(ofi_transport_t *ofi, inter_cqe_t *cqe)
{
    struct fi_cq_err_entry err = {0};
    ssize_t rc = fi_cq_readerr(ofi->cq, &err, 0);

    if (rc < 0) {
        return (rc == -FI_EAGAIN) ? 0 : (int)STRATA_ERR_TRANSPORT;
    }
    UTIL_LOG_DEBUG("ofi: completion error: %s (provider: %s)", fi_strerror(err.err),
                   fi_cq_strerror(ofi->cq, err.prov_errno, err.err_data, NULL, 0));
    cqe->kind    = (err.flags & FI_RECV) ? INTER_CQE_RECV : INTER_CQE_LOCAL;
    cqe->context = err.op_context;
    cqe->length  = err.len;
    cqe->imm     = 0;
    cqe->status  = (err.err == FI_ECANCELED) ? STRATA_ERR_CANCELLED : STRATA_ERR_TRANSPORT;
    return 1;
}

static int ofi_poll(inter_transport_t *tp, inter_cqe_t *cqes, int max)
{
    ofi_transport_t *ofi = ofi_of(tp);
    struct fi_cq_data_entry entries[OFI_CQ_BATCH];
    ssize_t rc = fi_cq_read(ofi->cq, entries, (size_t)UTIL_MIN(max, OFI_CQ_BATCH));

    if (rc == -FI_EAGAIN) {
        return 0;
    }
    if (rc == -FI_EAVAIL) {
        return ofi_poll_error(ofi, &cqes[0]);
    }
    if (rc < 0) {
        UTIL_LOG_ERROR("ofi: fi_cq_read: %s", fi_strerror((int)-rc));
        return (int)STRATA_ERR_TRANSPORT;
    }
    for (ssize_t i = 0; i < rc; ++i) {
        ofi_fill_cqe(ofi, &entries[i], &cqes[i]);
    }
    return (int)rc;
}

const inter_transport_ops_t ofi_transport_ops = {
    .name           = "ofi",
    .open           = ofi_open,
    .shutdown       = ofi_shutdown,
    .close          = ofi_close,
    .address        = ofi_address,
    .insert_peer    = ofi_insert_peer,
    .mem_register   = ofi_mem_register,
    .mem_deregister = ofi_mem_deregister,
    .post_write     = ofi_post_write,
    .post_read      = ofi_post_read,
    .post_send      = ofi_post_send,
    .inject         = ofi_inject,
    .post_recv      = ofi_post_recv,
    .poll           = ofi_poll,
};
