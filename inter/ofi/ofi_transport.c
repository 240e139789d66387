/*
 * libfabric transport: FI_EP_RDM endpoints with FI_MSG and FI_RMA, write with remote CQ data
 * as the immediate, honouring the provider's mr_mode (FI_MR_LOCAL, VIRT_ADDR, PROV_KEY,
 * ALLOCATED, ENDPOINT). One code path for efa, verbs;ofi_rxm, tcp;ofi_rxm and shm. This
 * file opens, describes and closes it and registers memory; ofi_data.c posts and polls.
 */
#include "inter/ofi/ofi_internal.h"
#include "inter/ofi/ofi_select.h"
#include "util/util.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#if OFI_HEADERS_VERSION >= FI_VERSION(1, 18)
#include <rdma/fi_ext.h> /* FI_OPT_EFA_EMULATED_{READ,WRITE} */
#endif

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OFI_ADDR_BYTES   96 /* fi_getname's largest (efa's GID and QPN, sockaddr_in6) */
#define OFI_MR_MODES     (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY | FI_MR_ALLOCATED | \
                          FI_MR_ENDPOINT)


typedef struct ofi_config {
    char *provider;
} ofi_config_t;

static const util_config_field_t ofi_config_fields[] = {
    {.name = "INTER_PROVIDER", .default_value = "auto",
     .doc = "libfabric provider of the ofi transport: auto (efa, then verbs, then tcp), tcp, "
            "shm, verbs or efa.",
     .type = UTIL_CONFIG_STRING, .offset = offsetof(ofi_config_t, provider)},
};

const util_config_table_t ofi_config_table = {
    .layer       = "inter ofi",
    .fields      = ofi_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(ofi_config_fields),
    .struct_size = sizeof(ofi_config_t),
};

/* STRATA_INTER_PROVIDER into provider; asked_p: the user set it to something but auto. */
static strata_status_t ofi_read_provider(char *provider, size_t size, bool *asked_p)
{
    ofi_config_t config;
    strata_status_t status = util_config_read(&ofi_config_table, &config);

    if (status != STRATA_OK) {
        return status;
    }
    if (strlen(config.provider) >= size || config.provider[0] == '\0') {
        UTIL_LOG_ERROR("ofi: STRATA_INTER_PROVIDER '%s' is not a provider (auto, tcp, shm, "
                       "verbs or efa)", config.provider);
        status = STRATA_ERR_CONFIG;
    } else {
        snprintf(provider, size, "%s", config.provider);
        if (asked_p != NULL) {
            *asked_p = strcmp(provider, "auto") != 0;
        }
    }
    util_config_release(&ofi_config_table, &config);
    return status;
}

/* libfabric provider names for strata's provider setting, in "auto" preference order. */
static const char *const ofi_auto_order[] = {"efa", "verbs;ofi_rxm", "tcp;ofi_rxm"};

/* hmem: also ask that device memory can be registered (FI_HMEM, with FI_MR_HMEM). */
static struct fi_info *ofi_hints(const char *prov_name, bool hmem)
{
    const char *fabric = ofi_select_fabric_name(prov_name);
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
    /* Ask for the fabric by name where a provider has several (efa before efa-direct). */
    hints->fabric_attr->name      = fabric ? strdup(fabric) : NULL;
    if (hints->fabric_attr->prov_name == NULL || (fabric && hints->fabric_attr->name == NULL)) {
        fi_freeinfo(hints);
        return NULL;
    }
    return hints;
}

/* What one provider offers for the rail: a copy of the entry picked, and how it was. */
static strata_status_t ofi_getinfo_provider(const inter_transport_params_t *params,
                                            const char *prov_name, bool hmem, uint32_t version,
                                            struct fi_info **info_p, ofi_pick_t *how_p,
                                            char *devices, size_t devices_size)
{
    struct fi_info *hints = ofi_hints(prov_name, hmem), *list = NULL, *pick = NULL, *dup;
    ofi_pick_t how;
    int rc;

    if (hints == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    rc = fi_getinfo(version, NULL, NULL, 0, hints, &list);
    fi_freeinfo(hints);
    if (rc != 0) {
        UTIL_LOG_DEBUG("ofi: fi_getinfo for %s: %s", prov_name, fi_strerror(-rc));
        return STRATA_ERR_NOT_FOUND;
    }
    how = ofi_select_pick(list, prov_name, params->iface, params->required, &pick);
    if (how == OFI_PICK_FALLBACK) {
        ofi_select_devices(list, prov_name, devices, devices_size);
    }
    dup = (how == OFI_PICK_NONE) ? NULL : fi_dupinfo(pick); /* one entry, without next */
    fi_freeinfo(list);
    if (how == OFI_PICK_NONE) {
        return STRATA_ERR_NOT_FOUND;
    }
    if (dup == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    *info_p = dup;
    *how_p  = how;
    return STRATA_OK;
}

/* The first provider (in "auto" order) that has the device asked for; else the first that
 * has any usable entry, unless the device is required. */
static strata_status_t ofi_getinfo(const inter_transport_params_t *params, const char *provider,
                                   bool hmem, uint32_t version, struct fi_info **info_p)
{
    const char *single[1] = {ofi_select_provider_name(provider)};
    const char *const *names = single;
    size_t num_names = 1;
    struct fi_info *fallback = NULL, *info;
    char devices[256], fallback_devices[256] = "";
    strata_status_t status;
    ofi_pick_t how;

    if (strcmp(provider, "auto") == 0) {
        names     = ofi_auto_order;
        num_names = UTIL_ARRAY_SIZE(ofi_auto_order);
    }
    for (size_t i = 0; i < num_names; ++i) {
        status = ofi_getinfo_provider(params, names[i], hmem, version, &info, &how, devices,
                                      sizeof(devices));
        if (status == STRATA_ERR_NO_MEMORY) {
            fi_freeinfo(fallback);
            return status;
        }
        if (status == STRATA_OK && how != OFI_PICK_FALLBACK) {
            fi_freeinfo(fallback);
            *info_p = info;
            return STRATA_OK;
        }
        if (status == STRATA_OK && fallback == NULL) {
            fallback = info;
            snprintf(fallback_devices, sizeof(fallback_devices), "%s", devices);
        } else if (status == STRATA_OK) {
            fi_freeinfo(info);
        }
    }
    if (fallback != NULL) {
        /* Every rank's rails would share one NIC: say so, naming what there is. */
        UTIL_LOG_WARN("rail %d: no %s device '%s' (from the rail plan); %s offers %s, so "
                      "the rail uses %s", params->rail, provider, params->iface,
                      fallback->fabric_attr->prov_name,
                      fallback_devices[0] ? fallback_devices : "none",
                      fallback->domain_attr->name);
        *info_p = fallback;
        return STRATA_OK;
    }
    if (hmem) {
        return STRATA_ERR_UNSUPPORTED; /* the caller asks again without device memory */
    }
    UTIL_LOG_ERROR("ofi: no libfabric provider '%s'%s%s with RDM endpoints, RMA, messages and "
                   "remote CQ data (API %u.%u)", provider,
                   (params->iface && params->iface[0]) ? " on device " : "",
                   (params->iface && params->iface[0]) ? params->iface : "", FI_MAJOR(version),
                   FI_MINOR(version));
    return STRATA_ERR_UNSUPPORTED;
}

/* fi_close, said when it fails: a provider refuses (-FI_EBUSY) to close what is in use. */
void ofi_close_fid(struct fid *fid, const char *what, const char *name)
{
    int rc = fi_close(fid);

    if (rc != 0) {
        UTIL_LOG_WARN("ofi: closing the %s of %s failed: %s", what, name, fi_strerror(-rc));
    }
}

static void ofi_shutdown(inter_transport_t *tp)
{
    ofi_transport_t *ofi = ofi_of(tp);
    int live = atomic_load(&ofi->live_mrs);

    if (ofi->ep == NULL) {
        return;
    }
    if (live > 0) {
        /* fi_mr(3): an endpoint's registrations (FI_MR_ENDPOINT) close before it. */
        UTIL_LOG_ERROR("ofi: closing the endpoint of %s with %d registrations still open",
                       tp->name, live);
    }
    ofi_close_fid(&ofi->ep->fid, "endpoint", tp->name);
    ofi->ep = NULL;
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
        ofi_close_fid(&ofi->cq->fid, "completion queue", tp->name);
    }
    if (ofi->av) {
        ofi_close_fid(&ofi->av->fid, "address vector", tp->name);
    }
    if (ofi->domain) {
        ofi_close_fid(&ofi->domain->fid, "domain", tp->name);
    }
    if (ofi->fabric) {
        ofi_close_fid(&ofi->fabric->fid, "fabric", tp->name);
    }
    fi_freeinfo(ofi->info);
    free(ofi);
}

/* Fabric, domain, address vector, completion queue and endpoint, bound, not yet enabled. */
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
    if (rc != 0 && ofi->cq != NULL && ofi->ep == NULL && /* fi_endpoint refused */
        (ofi->info->tx_attr->op_flags & FI_DELIVERY_COMPLETE)) {
        /* Completion at delivery is rate control's wish, not a need: do without it. */
        UTIL_LOG_WARN("ofi: %s refused completion at delivery (%s); rate control measures "
                      "completion at this host", ofi->info->fabric_attr->prov_name,
                      fi_strerror(-rc));
        ofi->info->tx_attr->op_flags &= ~(uint64_t)FI_DELIVERY_COMPLETE;
        rc = fi_endpoint(ofi->domain, ofi->info, &ofi->ep, NULL);
    }
    if (rc == 0) {
        rc = fi_ep_bind(ofi->ep, &ofi->av->fid, 0);
    }
    if (rc == 0) {
        rc = fi_ep_bind(ofi->ep, &ofi->cq->fid, FI_TRANSMIT | FI_RECV);
    }
    return rc;
}

/*
 * STRATA_INTER_SHARED_MEMORY=no: forbid the provider's shared-memory path between ranks of
 * a node (libfabric 1.17's shm can spin forever on a lock a killed peer held). Before
 * fi_enable. Refused where it cannot be honoured, rather than silently ignored.
 */
static strata_status_t ofi_forbid_shared_memory(ofi_transport_t *ofi)
{
    const char *prov = ofi->info->fabric_attr->prov_name;

    if (ofi_select_is_provider(ofi->info, "shm")) {
        UTIL_LOG_ERROR("ofi: STRATA_INTER_SHARED_MEMORY=no, but the provider is shm");
        return STRATA_ERR_UNSUPPORTED;
    }
#if OFI_HEADERS_VERSION >= FI_VERSION(1, 21)
    bool permitted = false;
    int rc = (int)fi_setopt(&ofi->ep->fid, FI_OPT_ENDPOINT, FI_OPT_SHARED_MEMORY_PERMITTED,
                            &permitted, sizeof(permitted));

    if (rc == -FI_ENOPROTOOPT || rc == -FI_EOPNOTSUPP) {
        UTIL_LOG_INFO("ofi: %s has no shared-memory path to forbid", prov);
        return STRATA_OK;
    }
    if (rc != 0) {
        UTIL_LOG_ERROR("ofi: %s refused FI_OPT_SHARED_MEMORY_PERMITTED=false: %s", prov,
                       fi_strerror(-rc));
        return STRATA_ERR_UNSUPPORTED;
    }
    return STRATA_OK;
#else
    UTIL_LOG_ERROR("ofi: STRATA_INTER_SHARED_MEMORY=no needs libfabric 1.21 "
                   "(FI_OPT_SHARED_MEMORY_PERMITTED); strata was built against %d.%d, so %s "
                   "may still use shared memory", FI_MAJOR_VERSION, FI_MINOR_VERSION, prov);
    return STRATA_ERR_UNSUPPORTED;
#endif
}

/*
 * CUDA device memory: a provider that moves bytes into it itself (efa's emulated RMA, tcp or
 * shm with FI_HMEM) calls cudaMemcpy from the proxy thread during fi_cq_read, on the legacy
 * stream, behind our spinning kernels: a hang. FI_OPT_CUDA_API_PERMITTED=false (libfabric
 * 1.18) forbids it, as aws-ofi-nccl does; a provider that cannot promise that gets no device
 * memory (the network area then goes through the pinned host bounce buffer). Before
 * fi_enable.
 */
static void ofi_forbid_cuda_calls(ofi_transport_t *ofi)
{
    const char *prov = ofi->info->fabric_attr->prov_name;
#if OFI_HEADERS_VERSION >= FI_VERSION(1, 18)
    bool permitted = false;
    int rc = (int)fi_setopt(&ofi->ep->fid, FI_OPT_ENDPOINT, FI_OPT_CUDA_API_PERMITTED,
                            &permitted, sizeof(permitted));

    if (rc == 0) {
        return;
    }
    UTIL_LOG_WARN("ofi: %s refused FI_OPT_CUDA_API_PERMITTED=false (%s): it may call CUDA "
                  "from the proxy thread, so GPU memory is not registered with it (bounce "
                  "buffer)", prov, fi_strerror(-rc));
#else
    UTIL_LOG_WARN("ofi: built against libfabric %d.%d, which cannot forbid %s to call CUDA "
                  "from the proxy thread (FI_OPT_CUDA_API_PERMITTED, 1.18): GPU memory is not "
                  "registered with it (bounce buffer)", FI_MAJOR_VERSION, FI_MINOR_VERSION, prov);
#endif
    ofi->base.hmem = false;
}

/* A size option of the endpoint (1.22's FI_OPT_MAX_*), or fallback where not offered. */
static uint64_t ofi_size_option(ofi_transport_t *ofi, int option, uint64_t fallback)
{
    size_t value = 0, len = sizeof(value);

    if (option < 0 || fi_getopt(&ofi->ep->fid, FI_OPT_ENDPOINT, option, &value, &len) != 0 ||
        len != sizeof(value)) {
        return fallback;
    }
    return value;
}

/* What the endpoint carries: fi_info's figures, refined by the endpoint where it can. */
static void ofi_read_limits(ofi_transport_t *ofi, ofi_limits_t *limits)
{
    int max_msg = -1, max_rma = -1, inject_msg = -1;

#if OFI_HEADERS_VERSION >= FI_VERSION(1, 22)
    max_msg    = FI_OPT_MAX_MSG_SIZE;
    max_rma    = FI_OPT_MAX_RMA_SIZE;
    inject_msg = FI_OPT_INJECT_MSG_SIZE;
#endif
    ofi_select_limits(ofi->info, limits);
    limits->max_msg_size = ofi_size_option(ofi, max_msg, limits->max_msg_size);
    limits->max_rma_size = ofi_size_option(ofi, max_rma, limits->max_rma_size);
    limits->inject_size  = (size_t)ofi_size_option(ofi, inject_msg, limits->inject_size);
}

/* efa: whether writes and reads go to the device or are emulated by messages. */
static void ofi_log_emulation(ofi_transport_t *ofi, int rail)
{
    if (!ofi_select_is_provider(ofi->info, "efa")) {
        return;
    }
#if OFI_HEADERS_VERSION >= FI_VERSION(1, 18)
    bool write = false, read = false;
    size_t len = sizeof(bool);
    int rc = (int)fi_getopt(&ofi->ep->fid, FI_OPT_ENDPOINT, FI_OPT_EFA_EMULATED_WRITE, &write,
                            &len);

    len = sizeof(bool);
    if (rc == 0) {
        rc = (int)fi_getopt(&ofi->ep->fid, FI_OPT_ENDPOINT, FI_OPT_EFA_EMULATED_READ, &read,
                            &len);
    }
    if (rc != 0) {
        UTIL_LOG_INFO("rail %d: efa does not say whether RDMA is emulated: %s", rail,
                      fi_strerror(-rc));
    } else if (write || read) {
        UTIL_LOG_WARN("rail %d: efa emulates%s%s with messages (no device RDMA on this NIC "
                      "or libfabric): slower, and the target's proxy thread moves the bytes",
                      rail, write ? " writes" : "", read ? (write ? " and reads" : " reads") : "");
    } else {
        UTIL_LOG_INFO("rail %d: efa writes and reads use device RDMA", rail);
    }
#else
    UTIL_LOG_INFO("rail %d: built against libfabric %d.%d, which cannot tell whether efa "
                  "emulates writes and reads (FI_OPT_EFA_EMULATED_*, 1.18)", rail,
                  FI_MAJOR_VERSION, FI_MINOR_VERSION);
#endif
}

/* Options before enabling, the enable itself, then what the endpoint can carry. */
static strata_status_t ofi_enable(ofi_transport_t *ofi, const inter_transport_params_t *params,
                                  ofi_limits_t *limits)
{
    strata_status_t status;
    int rc;

    if (!params->shared_memory && (status = ofi_forbid_shared_memory(ofi)) != STRATA_OK) {
        return status;
    }
    if (ofi->base.hmem && params->device_memory == INTER_MEM_CUDA) {
        ofi_forbid_cuda_calls(ofi);
    }
    rc = fi_enable(ofi->ep);
    if (rc != 0) {
        UTIL_LOG_ERROR("ofi: enabling the endpoint of %s on %s failed: %s",
                       ofi->info->fabric_attr->prov_name, ofi->info->domain_attr->name,
                       fi_strerror(-rc));
        return ofi_status(rc);
    }
    ofi_read_limits(ofi, limits);
    return ofi_select_check_limits(limits, params->msg_bytes, ofi->base.name);
}

static void ofi_describe(ofi_transport_t *ofi, const ofi_limits_t *limits)
{
    ofi->mr_mode            = ofi->info->domain_attr->mr_mode;
    ofi->base.rx_cq_data    = (ofi->info->mode & FI_RX_CQ_DATA) != 0;
    ofi->base.rx_size       = ofi->info->rx_attr->size;
    ofi->base.has_read      = (ofi->info->caps & FI_READ) != 0;
    /* The address inserted for this rank reaches its own endpoint through the provider's
     * device (efa, verbs;ofi_rxm, and tcp's socket, whose copies need no flush anyway). */
    ofi->base.loopback_flush = ofi->base.has_read;
    ofi->base.stalls_on_dead_peer = strcmp(ofi->info->fabric_attr->prov_name, "shm") == 0;
    ofi->base.virt_addr     = (ofi->mr_mode & FI_MR_VIRT_ADDR) != 0;
    ofi->base.max_msg_size  = limits->max_msg_size;
    ofi->base.max_rma_size  = limits->max_rma_size;
    ofi->base.inject_size   = limits->inject_size;
    ofi->base.addr_size     = OFI_ADDR_BYTES;
    snprintf(ofi->base.name, sizeof(ofi->base.name), "ofi %s %s",
             ofi->info->fabric_attr->prov_name, ofi->info->domain_attr->name);
}

/* The entry to open: with device memory where asked and offered, else without. */
static strata_status_t ofi_choose(const inter_transport_params_t *params, ofi_transport_t *ofi)
{
    uint32_t version;
    strata_status_t status = ofi_select_api_version(OFI_HEADERS_VERSION, fi_version(), &version);

    if (status != STRATA_OK) {
        return status;
    }
    ofi->base.hmem = params->device_memory != INTER_MEM_HOST &&
                     ofi_getinfo(params, ofi->provider, true, version, &ofi->info) == STRATA_OK;
    status = ofi->base.hmem ? STRATA_OK
                            : ofi_getinfo(params, ofi->provider, false, version, &ofi->info);
    if (status == STRATA_OK && params->delivery_complete) {
        /* The endpoint's default for every write and send: complete at the target. */
        ofi->info->tx_attr->op_flags |= FI_DELIVERY_COMPLETE;
    }
    if (status == STRATA_OK) {
        UTIL_LOG_DEBUG("rail %d: libfabric API %u.%u", params->rail, FI_MAJOR(version),
                       FI_MINOR(version));
    }
    return status;
}

static strata_status_t ofi_open(const inter_transport_params_t *params, inter_transport_t **tp_p)
{
    ofi_transport_t *ofi = calloc(1, sizeof(*ofi));
    strata_status_t status;
    ofi_limits_t limits;
    int rc;

    if (ofi == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    status = ofi_read_provider(ofi->provider, sizeof(ofi->provider), NULL);
    if (params->same_node) {
        snprintf(ofi->provider, sizeof(ofi->provider), "shm"); /* peers on this node only */
    }
    if (status == STRATA_OK) {
        status = ofi_choose(params, ofi);
    }
    if (status != STRATA_OK) {
        free(ofi);
        return status;
    }
    snprintf(ofi->base.name, sizeof(ofi->base.name), "ofi %s %s",
             ofi->info->fabric_attr->prov_name, ofi->info->domain_attr->name);
    rc = ofi_open_objects(ofi);
    if (rc != 0) {
        UTIL_LOG_ERROR("ofi: opening %s failed: %s", ofi->base.name, fi_strerror(-rc));
        ofi_close(&ofi->base);
        return ofi_status(rc);
    }
    status = ofi_enable(ofi, params, &limits);
    if (status != STRATA_OK) {
        ofi_close(&ofi->base);
        return status;
    }
    ofi_describe(ofi, &limits);
    ofi_choose_dmabuf(ofi, params);
    UTIL_LOG_INFO("rail %d: %s, mr_mode 0x%llx, read %s, device memory %s, messages up to %llu "
                  "bytes, inject %zu", params->rail, ofi->base.name,
                  (unsigned long long)ofi->mr_mode, ofi->base.has_read ? "yes" : "no",
                  params->device_memory == INTER_MEM_HOST ? "not asked for"
                  : ofi->dmabuf_fn != NULL ? "registered (FI_HMEM, by dma-buf first)"
                  : ofi->base.hmem         ? "registered (FI_HMEM)"
                                           : "not offered by the provider",
                  (unsigned long long)ofi->base.max_msg_size, ofi->base.inject_size);
    ofi_log_emulation(ofi, params->rail);
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

/* Whether prov_name offers what the engine needs here (any device). */
static bool ofi_provider_present(const char *prov_name, uint32_t version)
{
    struct fi_info *hints = ofi_hints(prov_name, false), *list = NULL;
    bool present;

    if (hints == NULL) {
        return false;
    }
    present = fi_getinfo(version, NULL, NULL, 0, hints, &list) == 0 && list != NULL;
    fi_freeinfo(list);
    fi_freeinfo(hints);
    return present;
}

/* STRATA_INTER_PROVIDER set: asked; else an efa device: the fabric ofi serves best; else
 * tcp, the fallback every host has. */
static void ofi_probe(const inter_transport_params_t *params, inter_probe_t *probe)
{
    char provider[32];
    bool asked = false;
    uint32_t version;

    (void)params;
    probe->score = INTER_PROBE_NONE;
    if (ofi_read_provider(provider, sizeof(provider), &asked) != STRATA_OK ||
        ofi_select_api_version(OFI_HEADERS_VERSION, fi_version(), &version) != STRATA_OK) {
        snprintf(probe->why, sizeof(probe->why), "libfabric %u.%u or STRATA_INTER_PROVIDER "
                 "unusable", FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
        return;
    }
    if (asked) {
        bool present = ofi_provider_present(ofi_select_provider_name(provider), version);

        probe->score = present ? INTER_PROBE_ASKED : INTER_PROBE_NONE;
        snprintf(probe->why, sizeof(probe->why), "STRATA_INTER_PROVIDER=%s%s", provider,
                 present ? "" : ", which libfabric does not offer here");
    } else if (ofi_provider_present("efa", version)) {
        probe->score = INTER_PROBE_FABRIC;
        snprintf(probe->why, sizeof(probe->why), "libfabric's efa provider found an EFA device");
    } else if (ofi_provider_present("tcp;ofi_rxm", version)) {
        probe->score = INTER_PROBE_FALLBACK;
        snprintf(probe->why, sizeof(probe->why), "libfabric %u.%u over tcp (no EFA device)",
                 FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
    } else {
        snprintf(probe->why, sizeof(probe->why), "libfabric offers neither efa nor tcp here");
    }
}

/* Why ofi_getinfo took info's device for params: "the planned mlx5_0", or why not. */
static void ofi_preview_device(const inter_transport_params_t *params,
                               const struct fi_info *info, char *why, size_t why_len)
{
    const char *device = (params->iface != NULL) ? params->iface : "";

    if (device[0] == '\0') {
        snprintf(why, why_len, "no device planned: the provider's preferred one");
    } else if (params->required) {
        snprintf(why, why_len, "STRATA_INTER_IFACE=%s", device);
    } else if (ofi_select_is_device(info, device)) {
        snprintf(why, why_len, "the planned device %s", device);
    } else {
        snprintf(why, why_len, "the planned %s is not offered by this provider: its preferred "
                 "device instead", device);
    }
}

/* The provider and device ofi_open would take for params, chosen by the same ofi_choose,
 * with nothing opened: "tcp;ofi_rxm eth0 (why)". */
static strata_status_t ofi_preview(const inter_transport_params_t *params, char *what,
                                   size_t what_len)
{
    ofi_transport_t ofi = {.info = NULL};
    strata_status_t status = ofi_read_provider(ofi.provider, sizeof(ofi.provider), NULL);
    char why[160];

    if (status != STRATA_OK) {
        snprintf(what, what_len, "STRATA_INTER_PROVIDER is not a provider");
        return status;
    }
    status = ofi_choose(params, &ofi);
    if (status != STRATA_OK) {
        snprintf(what, what_len, "libfabric offers no provider '%s'%s%s that carries the "
                 "engine", ofi.provider, params->required ? " on " : "",
                 params->required ? params->iface : "");
        return status;
    }
    ofi_preview_device(params, ofi.info, why, sizeof(why));
    snprintf(what, what_len, "%s %s (%s%s)", ofi.info->fabric_attr->prov_name,
             ofi.info->domain_attr->name, why,
             ofi.base.hmem ? "; device memory registered" : "");
    fi_freeinfo(ofi.info);
    return STRATA_OK;
}

const inter_transport_ops_t ofi_transport_ops = {
    .name           = "ofi",
    .config         = &ofi_config_table,
    .probe          = ofi_probe,
    .open           = ofi_open,
    .shutdown       = ofi_shutdown,
    .close          = ofi_close,
    .address        = ofi_address,
    .insert_peer    = ofi_insert_peer,
    .mem_register   = ofi_mem_register,
    .mem_deregister = ofi_mem_deregister,
    .post           = ofi_post,
    .inject         = ofi_inject,
    .post_recv      = ofi_post_recv,
    .poll           = ofi_poll,
    .preview        = ofi_preview,
};
