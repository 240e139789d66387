/*
 * The baseline of strata-bench p2p: the same write-with-immediate patterns written
 * directly against libfabric — no ring, no proxy thread, no striping.
 */
#include "strata_bench.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bench_raw {
    struct fi_info    *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av     *av;
    struct fid_cq     *cq;
    struct fid_ep     *ep;
    struct fid_mr     *mr;
    char              *buf;
    size_t             buf_size;
    fi_addr_t          peer;
    uint64_t           peer_base;
    uint64_t           peer_key;
    uint64_t           outstanding;  /* local completions still to come */
    uint64_t           posted;       /* writes posted, to cycle the contexts */
    uint64_t           imm_seen;     /* remote completions counted */
    struct fi_context2 ctx[BENCH_WINDOW * 4];
};

typedef struct bench_raw_card {
    uint8_t  addr[96];
    uint64_t addr_len;
    uint64_t base;
    uint64_t key;
} bench_raw_card_t;

static int bench_raw_poll(bench_raw_t *raw)
{
    struct fi_cq_data_entry entries[16];
    struct fi_cq_err_entry err = {0};
    ssize_t n = fi_cq_read(raw->cq, entries, 16);

    if (n == -FI_EAGAIN) {
        return 0;
    }
    if (n == -FI_EAVAIL) {
        fi_cq_readerr(raw->cq, &err, 0);
        fprintf(stderr, "strata-bench raw: completion error %s\n", fi_strerror(err.err));
        return -1;
    }
    if (n < 0) {
        return -1;
    }
    for (ssize_t i = 0; i < n; ++i) {
        if (entries[i].flags & FI_REMOTE_CQ_DATA) {
            raw->imm_seen++;
        } else {
            raw->outstanding--;
        }
    }
    return (int)n;
}

strata_status_t bench_raw_write_at(bench_raw_t *raw, size_t loff, size_t roff, size_t len,
                                   uint32_t imm)
{
    uint64_t raddr = ((raw->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? raw->peer_base : 0) +
                     roff;
    ssize_t rc;

    while (raw->outstanding >= BENCH_WINDOW) {
        if (bench_raw_poll(raw) < 0) {
            return STRATA_ERR_TRANSPORT;
        }
    }
    for (;;) {
        rc = fi_writedata(raw->ep, raw->buf + loff, len, fi_mr_desc(raw->mr), imm, raw->peer,
                          raddr, raw->peer_key, &raw->ctx[raw->posted % (BENCH_WINDOW * 4)]);
        if (rc != -FI_EAGAIN) {
            break;
        }
        if (bench_raw_poll(raw) < 0) {
            return STRATA_ERR_TRANSPORT;
        }
    }
    if (rc != 0) {
        return STRATA_ERR_TRANSPORT;
    }
    raw->outstanding++;
    raw->posted++;
    return STRATA_OK;
}

static strata_status_t bench_raw_write(void *ctx, size_t len, uint32_t imm)
{
    return bench_raw_write_at(ctx, 0, 0, len, imm);
}

static strata_status_t bench_raw_flush(void *ctx)
{
    bench_raw_t *raw = ctx;

    while (raw->outstanding > 0) {
        if (bench_raw_poll(raw) < 0) {
            return STRATA_ERR_TRANSPORT;
        }
    }
    return STRATA_OK;
}

static strata_status_t bench_raw_wait_imm(void *ctx, size_t len, uint32_t imm, uint64_t count)
{
    bench_raw_t *raw = ctx;

    (void)len;
    (void)imm;
    while (raw->imm_seen < count) {
        if (bench_raw_poll(raw) < 0) {
            return STRATA_ERR_TRANSPORT;
        }
    }
    raw->imm_seen -= count;
    return STRATA_OK;
}

static int bench_raw_open(bench_raw_t *raw, const char *prov, const char *iface)
{
    struct fi_info *hints = fi_allocinfo(), *list = NULL;
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_DATA};
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    int rc;

    hints->ep_attr->type          = FI_EP_RDM;
    hints->caps                   = FI_MSG | FI_RMA;
    hints->mode                   = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode   = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_PROV_KEY |
                                    FI_MR_ALLOCATED | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->fabric_attr->prov_name = strdup(prov);
    rc = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &list);
    fi_freeinfo(hints);
    if (rc != 0) {
        return rc;
    }
    for (struct fi_info *cur = list; cur; cur = cur->next) {
        if (!iface || !iface[0] || strcmp(cur->domain_attr->name, iface) == 0) {
            raw->info = fi_dupinfo(cur);
            break;
        }
    }
    fi_freeinfo(list);
    if (raw->info == NULL) {
        return -FI_ENODATA;
    }
    if ((rc = fi_fabric(raw->info->fabric_attr, &raw->fabric, NULL)) ||
        (rc = fi_domain(raw->fabric, raw->info, &raw->domain, NULL)) ||
        (rc = fi_av_open(raw->domain, &av_attr, &raw->av, NULL)) ||
        (rc = fi_cq_open(raw->domain, &cq_attr, &raw->cq, NULL)) ||
        (rc = fi_endpoint(raw->domain, raw->info, &raw->ep, NULL)) ||
        (rc = fi_ep_bind(raw->ep, &raw->av->fid, 0)) ||
        (rc = fi_ep_bind(raw->ep, &raw->cq->fid, FI_TRANSMIT | FI_RECV)) ||
        (rc = fi_enable(raw->ep))) {
        return rc;
    }
    rc = fi_mr_reg(raw->domain, raw->buf, raw->buf_size,
                   FI_WRITE | FI_READ | FI_REMOTE_WRITE | FI_REMOTE_READ, 0, 7, 0, &raw->mr, NULL);
    if (rc == 0 && (raw->info->domain_attr->mr_mode & FI_MR_ENDPOINT)) {
        rc = fi_mr_bind(raw->mr, &raw->ep->fid, 0);
        rc = rc ? rc : fi_mr_enable(raw->mr);
    }
    return rc;
}

strata_status_t bench_raw_create(strata_bootstrap_t *bs, const char *provider, const char *iface,
                                 size_t buf_size, bench_raw_t **raw_p, bench_path_t *path)
{
    bench_raw_card_t mine = {0}, all[2];
    bench_raw_t *raw = calloc(1, sizeof(*raw));
    size_t len = sizeof(mine.addr);
    int rc;

    if (raw == NULL || (raw->buf = util_alloc_aligned(4096, buf_size)) == NULL) {
        free(raw);
        return STRATA_ERR_NO_MEMORY;
    }
    raw->buf_size = buf_size;
    memset(raw->buf, 0x5a, buf_size);
    rc = bench_raw_open(raw, provider, iface);
    if (rc == 0) {
        rc = fi_getname(&raw->ep->fid, mine.addr, &len);
    }
    if (rc != 0) {
        fprintf(stderr, "strata-bench raw: %s\n", fi_strerror(-rc));
        bench_raw_destroy(raw);
        return STRATA_ERR_TRANSPORT;
    }
    mine.addr_len = len;
    mine.base     = (uint64_t)(uintptr_t)raw->buf;
    mine.key      = fi_mr_key(raw->mr);
    if (bs->allgather(bs->ctx, &mine, all, sizeof(mine)) != STRATA_OK ||
        fi_av_insert(raw->av, all[1 - bs->rank].addr, 1, &raw->peer, 0, NULL) != 1) {
        bench_raw_destroy(raw);
        return STRATA_ERR_TRANSPORT;
    }
    raw->peer_base = all[1 - bs->rank].base;
    raw->peer_key  = all[1 - bs->rank].key;
    *path = (bench_path_t){.name = "raw libfabric", .ctx = raw, .write = bench_raw_write,
                           .flush = bench_raw_flush, .wait_imm = bench_raw_wait_imm};
    *raw_p = raw;
    return STRATA_OK;
}

void bench_raw_destroy(bench_raw_t *raw)
{
    if (raw == NULL) {
        return;
    }
    if (raw->mr) {
        fi_close(&raw->mr->fid);
    }
    if (raw->ep) {
        fi_close(&raw->ep->fid);
    }
    if (raw->cq) {
        fi_close(&raw->cq->fid);
    }
    if (raw->av) {
        fi_close(&raw->av->fid);
    }
    if (raw->domain) {
        fi_close(&raw->domain->fid);
    }
    if (raw->fabric) {
        fi_close(&raw->fabric->fid);
    }
    fi_freeinfo(raw->info);
    free(raw->buf);
    free(raw);
}
