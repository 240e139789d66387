/*
 * The libfabric transport's internals shared by its files: the transport object, the
 * mapping of libfabric's return codes, and the data path (ofi_data.c) that the operations
 * table in ofi_transport.c names.
 */
#ifndef STRATA_INTER_OFI_INTERNAL_H
#define STRATA_INTER_OFI_INTERNAL_H

#include "inter/transport.h"

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include <stdatomic.h>
#include <stdint.h>

typedef struct ofi_transport {
    inter_transport_t  base;
    struct fi_info    *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av     *av;
    struct fid_cq     *cq;
    struct fid_ep     *ep;
    uint64_t           mr_mode;
    atomic_int         live_mrs;   /* registrations not yet closed (teardown order) */
    char               provider[32]; /* STRATA_INTER_PROVIDER */
    /* Device memory by dma-buf (FI_MR_DMABUF, libfabric 1.20 on) where no peer-memory
     * module pins it; NULL: registered by address (FI_HMEM) only. */
    inter_dmabuf_fn_t  dmabuf_fn;
    void              *dmabuf_ctx;
} ofi_transport_t;

ofi_transport_t *ofi_of(inter_transport_t *tp);

/** libfabric's return code (0 or a negative FI_E*) as a status. */
strata_status_t ofi_status(ssize_t rc);

/* ofi_transport.c: fi_close, said when it fails. */
void ofi_close_fid(struct fid *fid, const char *what, const char *name);

/* ofi_memory.c: registration, and whether device memory goes by dma-buf (at open). */
void            ofi_choose_dmabuf(ofi_transport_t *ofi, const inter_transport_params_t *params);
strata_status_t ofi_mem_register(inter_transport_t *tp, void *addr, size_t len,
                                 inter_mem_kind_t kind, int device, uint64_t requested_key,
                                 inter_tmr_t *mr);
void            ofi_mem_deregister(inter_transport_t *tp, inter_tmr_t *mr);

/* ofi_data.c: the operations table's post, inject, post_recv and poll. */
strata_status_t ofi_post(inter_transport_t *tp, const inter_post_t *posts, int count,
                         int *posted_p);
strata_status_t ofi_inject(inter_transport_t *tp, uint64_t peer, const void *buf, size_t len);
strata_status_t ofi_post_recv(inter_transport_t *tp, void *buf, size_t len, void *desc,
                              void *context);
strata_status_t ofi_poll(inter_transport_t *tp, inter_cqe_t *cqes, int max, int *count_p);

#endif
