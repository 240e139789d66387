/*
 * libfabric transport: memory registration, host and device (FI_HMEM), by address or, from
 * libfabric 1.20 on, by dma-buf where no peer-memory module lets the provider pin GPU memory.
 */
#include "inter/ofi/ofi_internal.h"
#include "inter/ofi/ofi_select.h"
#include "util/util.h"

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

/*
 * Device memory by dma-buf where the API has FI_MR_DMABUF (1.20 on) and no peer-memory
 * module lets the provider pin GPU memory by its address: open GPU kernel modules, an
 * inbox rdma-core. Where a registration by dma-buf fails, it is made by address after all.
 */
void ofi_choose_dmabuf(ofi_transport_t *ofi, const inter_transport_params_t *params)
{
#if OFI_HEADERS_VERSION >= FI_VERSION(1, 20)
    uint32_t version = 0;

    if (ofi->base.hmem && params->dmabuf_fn != NULL &&
        inter_peer_memory_module(params->device_memory) == NULL &&
        ofi_select_api_version(OFI_HEADERS_VERSION, fi_version(), &version) == STRATA_OK &&
        version >= FI_VERSION(1, 20)) {
        ofi->dmabuf_fn  = params->dmabuf_fn;
        ofi->dmabuf_ctx = params->dmabuf_ctx;
    }
#else
    (void)ofi;
    (void)params; /* libfabric before 1.20 registers device memory by address only */
#endif
}

static enum fi_hmem_iface ofi_iface(inter_mem_kind_t kind)
{
    return kind == INTER_MEM_CUDA ? FI_HMEM_CUDA : kind == INTER_MEM_ROCM ? FI_HMEM_ROCR
                                                                          : FI_HMEM_SYSTEM;
}

/* Bind an FI_MR_ENDPOINT registration to the endpoint; the registration is closed on
 * failure. */
static int ofi_mr_attach(ofi_transport_t *ofi, struct fid_mr *fmr)
{
    int rc = 0;

    if (ofi->mr_mode & FI_MR_ENDPOINT) {
        rc = fi_mr_bind(fmr, &ofi->ep->fid, 0);
        if (rc == 0) {
            rc = fi_mr_enable(fmr);
        }
        if (rc != 0) {
            fi_close(&fmr->fid);
        }
    }
    return rc;
}

/*
 * attr's device memory registered through a dma-buf of it (FI_MR_DMABUF): the provider
 * registers [addr, addr + len) at its virtual address, base_addr + offset. The fd stays open
 * as long as the registration (libfabric does not say a provider may not use it later),
 * kept in the registration's context. A negative FI_E* where it cannot be made.
 */
static int ofi_mr_reg_dmabuf(ofi_transport_t *ofi, struct fi_mr_attr *attr, void *addr,
                             size_t len, struct fid_mr **fmr_p, int *fd_p)
{
#if OFI_HEADERS_VERSION >= FI_VERSION(1, 20)
    uint64_t offset = 0;
    int fd = -1, rc;

    if (ofi->dmabuf_fn(ofi->dmabuf_ctx, addr, len, &fd, &offset) != STRATA_OK) {
        return -FI_EOPNOTSUPP;
    }
    struct fi_mr_dmabuf dmabuf = {.fd = fd, .offset = offset, .len = len,
                                  .base_addr = (char *)addr - offset};
    attr->dmabuf  = &dmabuf;
    attr->context = (void *)(intptr_t)(fd + 1); /* 0 stays "no fd" */
    rc = fi_mr_regattr(ofi->domain, attr, FI_MR_DMABUF, fmr_p);
    if (rc != 0) {
        close(fd);
    } else {
        *fd_p = fd;
    }
    return rc;
#else
    (void)ofi, (void)attr, (void)addr, (void)len, (void)fmr_p, (void)fd_p;
    return -FI_EOPNOTSUPP;
#endif
}

strata_status_t ofi_mem_register(inter_transport_t *tp, void *addr, size_t len,
                                        inter_mem_kind_t kind, int device,
                                        uint64_t requested_key, inter_tmr_t *mr)
{
    ofi_transport_t *ofi = ofi_of(tp);
    struct iovec iov = {.iov_base = addr, .iov_len = len};
    struct fi_mr_attr attr = {
        .iov_count     = 1,
        .access        = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |
                         FI_REMOTE_WRITE,
        .requested_key = requested_key,
        .iface         = ofi_iface(kind),
    };
    struct fid_mr *fmr = NULL;
    int rc = -FI_EOPNOTSUPP, kept_fd = -1;

    if (kind != INTER_MEM_HOST && !tp->hmem) {
        return STRATA_ERR_UNSUPPORTED;
    }
    if (kind == INTER_MEM_CUDA) {
        attr.device.cuda = device;
    } else if (kind == INTER_MEM_ROCM) {
        attr.device.reserved = (uint64_t)device;
    }
    if (kind != INTER_MEM_HOST && ofi->dmabuf_fn != NULL) {
        rc = ofi_mr_reg_dmabuf(ofi, &attr, addr, len, &fmr, &kept_fd);
        if (rc != 0) {
            UTIL_LOG_INFO("ofi: %s could not register %zu bytes of device memory by dma-buf "
                          "(%s); registering them by address", tp->name, len, fi_strerror(-rc));
        }
    }
    if (rc != 0) {
        attr.mr_iov  = &iov;
        attr.context = NULL;
        rc = fi_mr_regattr(ofi->domain, &attr, 0, &fmr);
    }
    if (rc == 0 && (rc = ofi_mr_attach(ofi, fmr)) != 0 && kept_fd >= 0) {
        close(kept_fd); /* the registration is closed already */
    }
    if (rc != 0) {
        UTIL_LOG_ERROR("ofi: registering %zu bytes at %p failed: %s", len, addr, fi_strerror(-rc));
        return ofi_status(rc);
    }
    mr->handle = fmr;
    mr->desc   = fi_mr_desc(fmr);
    mr->key    = fi_mr_key(fmr);
    atomic_fetch_add(&ofi->live_mrs, 1);
    return STRATA_OK;
}

void ofi_mem_deregister(inter_transport_t *tp, inter_tmr_t *mr)
{
    if (mr->handle != NULL) {
        struct fid_mr *fmr = mr->handle;
        intptr_t kept = (intptr_t)fmr->fid.context;

        ofi_close_fid(&fmr->fid, "registration", tp->name);
        if (kept > 0) {
            close((int)(kept - 1));
        }
        mr->handle = NULL;
        atomic_fetch_sub(&ofi_of(tp)->live_mrs, 1);
    }
}
