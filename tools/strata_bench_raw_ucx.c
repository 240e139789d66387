/*
 * The baseline of strata-bench p2p over UCX: the write with immediate as the ucx transport
 * builds it (ucp_put_nbx, ucp_ep_flush_nbx, then an active message carrying the immediate),
 * written directly against ucp on the same transports and devices: no ring, no proxy thread.
 */
#include "strata_bench.h"

#include <ucp/api/ucp.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RAW_UCX_AM_IMM 7
#define RAW_UCX_SLOTS  (BENCH_WINDOW * 4)

/* One write: put, then its flush, then its immediate. */
typedef struct raw_ucx_slot {
    struct bench_raw_ucx *raw;
    uint32_t              imm;
    bool                  flushed;
} raw_ucx_slot_t;

struct bench_raw_ucx {
    ucp_context_h  context;
    ucp_worker_h   worker;
    ucp_ep_h       ep;
    ucp_mem_h      memh;
    ucp_rkey_h     rkey;
    char          *buf;
    size_t         buf_size;
    uint64_t       peer_base;
    raw_ucx_slot_t slots[RAW_UCX_SLOTS];
    uint64_t       posted;      /* writes posted */
    uint64_t       imm_sent;    /* writes whose immediate went (in order) */
    uint64_t       outstanding; /* writes whose immediate has not completed */
    uint64_t       imm_seen;    /* immediates from the peer */
    bool           failed;
};

typedef struct raw_ucx_card {
    uint8_t  addr[1024];
    uint64_t addr_len;
    uint8_t  rkey[256];
    uint64_t rkey_len;
    uint64_t base;
} raw_ucx_card_t;

static ucs_status_t raw_ucx_imm_handler(void *arg, const void *header, size_t header_length,
                                        void *data, size_t length,
                                        const ucp_am_recv_param_t *param)
{
    ((bench_raw_ucx_t *)arg)->imm_seen++;
    return UCS_OK;
}

static void raw_ucx_peer_failed(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)arg;
    (void)ep;
    (void)status; /* the operations in flight fail, and say so */
}

static void raw_ucx_flushed(void *request, ucs_status_t status, void *user_data)
{
    raw_ucx_slot_t *slot = user_data;

    slot->flushed = true;
    slot->raw->failed |= status != UCS_OK;
    ucp_request_free(request);
}

static void raw_ucx_imm_done(void *request, ucs_status_t status, void *user_data)
{
    bench_raw_ucx_t *raw = user_data;

    raw->outstanding--;
    raw->failed |= status != UCS_OK;
    ucp_request_free(request);
}

/* Progress, then send the immediates of flushed writes, in order. */
static strata_status_t raw_ucx_progress(bench_raw_ucx_t *raw)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_FLAGS,
        .cb.send      = raw_ucx_imm_done,
        .user_data    = raw,
        .flags        = UCP_AM_SEND_FLAG_EAGER,
    };

    ucp_worker_progress(raw->worker);
    while (raw->imm_sent < raw->posted && raw->slots[raw->imm_sent % RAW_UCX_SLOTS].flushed) {
        raw_ucx_slot_t *slot = &raw->slots[raw->imm_sent % RAW_UCX_SLOTS];
        ucs_status_ptr_t request = ucp_am_send_nbx(raw->ep, RAW_UCX_AM_IMM, &slot->imm,
                                                   sizeof(slot->imm), NULL, 0, &param);

        if (UCS_PTR_IS_ERR(request)) {
            return STRATA_ERR_TRANSPORT;
        }
        if (request == NULL) {
            raw->outstanding--;
        }
        raw->imm_sent++;
    }
    return raw->failed ? STRATA_ERR_TRANSPORT : STRATA_OK;
}

static strata_status_t raw_ucx_write(void *ctx, size_t len, uint32_t imm)
{
    bench_raw_ucx_t *raw = ctx;
    ucp_request_param_t none = {.op_attr_mask = 0}, flush = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send      = raw_ucx_flushed,
    };
    raw_ucx_slot_t *slot;
    ucs_status_ptr_t request;
    strata_status_t status = STRATA_OK;

    while (raw->outstanding >= BENCH_WINDOW && status == STRATA_OK) {
        status = raw_ucx_progress(raw);
    }
    if (status != STRATA_OK) {
        return status;
    }
    request = ucp_put_nbx(raw->ep, raw->buf, len, raw->peer_base, raw->rkey, &none);
    if (UCS_PTR_IS_ERR(request)) {
        return STRATA_ERR_TRANSPORT;
    }
    if (request != NULL) {
        ucp_request_free(request);
    }
    slot  = &raw->slots[raw->posted % RAW_UCX_SLOTS];
    *slot = (raw_ucx_slot_t){.raw = raw, .imm = imm};
    flush.user_data = slot;
    request = ucp_ep_flush_nbx(raw->ep, &flush);
    if (UCS_PTR_IS_ERR(request)) {
        return STRATA_ERR_TRANSPORT;
    }
    slot->flushed = request == NULL;
    raw->posted++;
    raw->outstanding++;
    return raw_ucx_progress(raw);
}

static strata_status_t raw_ucx_flush(void *ctx)
{
    bench_raw_ucx_t *raw = ctx;
    strata_status_t status = STRATA_OK;

    while (raw->outstanding > 0 && status == STRATA_OK) {
        status = raw_ucx_progress(raw);
    }
    return status;
}

static strata_status_t raw_ucx_wait_imm(void *ctx, size_t len, uint32_t imm, uint64_t count)
{
    bench_raw_ucx_t *raw = ctx;
    strata_status_t status = STRATA_OK;

    (void)len;
    (void)imm;
    while (raw->imm_seen < count && status == STRATA_OK) {
        status = raw_ucx_progress(raw);
    }
    raw->imm_seen -= count;
    return status;
}

/* Context and worker on the transports and devices the engine's rail took. */
static ucs_status_t raw_ucx_open(bench_raw_ucx_t *raw, const char *tls, const char *devices)
{
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features   = UCP_FEATURE_RMA | UCP_FEATURE_AM};
    ucp_worker_params_t worker_params = {.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                         .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_am_handler_param_t handler = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                      UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = RAW_UCX_AM_IMM, .cb = raw_ucx_imm_handler, .arg = raw};
    ucp_mem_map_params_t map = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        .address = raw->buf, .length = raw->buf_size};
    char tls_self[96];
    ucp_config_t *config;
    ucs_status_t status = ucp_config_read(NULL, NULL, &config);

    snprintf(tls_self, sizeof(tls_self), "%s,self", tls);
    if (status == UCS_OK) {
        status = ucp_config_modify(config, "TLS", tls_self);
    }
    if (status == UCS_OK && strcmp(devices, "-") != 0) {
        status = ucp_config_modify(config, "NET_DEVICES", devices);
    }
    if (status == UCS_OK) {
        status = ucp_init(&params, config, &raw->context);
    }
    ucp_config_release(config);
    if (status == UCS_OK) {
        status = ucp_worker_create(raw->context, &worker_params, &raw->worker);
    }
    if (status == UCS_OK) {
        status = ucp_worker_set_am_recv_handler(raw->worker, &handler);
    }
    if (status == UCS_OK) {
        status = ucp_mem_map(raw->context, &map, &raw->memh);
    }
    return status;
}

/* This side's worker address, registration and rkey, for the peer. */
static ucs_status_t raw_ucx_card(bench_raw_ucx_t *raw, raw_ucx_card_t *card)
{
    ucp_address_t *addr;
    void *rkey;
    size_t addr_len, rkey_len;
    ucs_status_t status = ucp_worker_get_address(raw->worker, &addr, &addr_len);

    if (status != UCS_OK) {
        return status;
    }
    status = ucp_rkey_pack(raw->context, raw->memh, &rkey, &rkey_len);
    if (status == UCS_OK && (addr_len > sizeof(card->addr) || rkey_len > sizeof(card->rkey))) {
        status = UCS_ERR_BUFFER_TOO_SMALL;
    }
    if (status == UCS_OK) {
        memcpy(card->addr, addr, addr_len);
        memcpy(card->rkey, rkey, rkey_len);
        card->addr_len = addr_len;
        card->rkey_len = rkey_len;
        card->base     = (uint64_t)(uintptr_t)raw->buf;
        ucp_rkey_buffer_release(rkey);
    }
    ucp_worker_release_address(raw->worker, addr);
    return status;
}

strata_status_t bench_raw_ucx_create(strata_bootstrap_t *bs, const char *tls,
                                     const char *devices, size_t buf_size,
                                     bench_raw_ucx_t **raw_p, bench_path_t *path)
{
    bench_raw_ucx_t *raw = calloc(1, sizeof(*raw));
    raw_ucx_card_t *cards = calloc(3, sizeof(*cards)), *mine = &cards[2], *peer;
    /* Peer failure handling, as the transport asks for: UCX then picks the same lanes. */
    ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                               UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                               UCP_EP_PARAM_FIELD_ERR_HANDLER,
                                 .err_mode       = UCP_ERR_HANDLING_MODE_PEER,
                                 .err_handler.cb = raw_ucx_peer_failed};
    ucs_status_t status;

    if (raw == NULL || cards == NULL ||
        (raw->buf = util_alloc_aligned(4096, buf_size)) == NULL) {
        free(raw);
        free(cards);
        return STRATA_ERR_NO_MEMORY;
    }
    raw->buf_size = buf_size;
    memset(raw->buf, 0x5a, buf_size);
    status = raw_ucx_open(raw, tls, devices);
    if (status == UCS_OK) {
        status = raw_ucx_card(raw, mine);
    }
    if (status == UCS_OK && bs->allgather(bs->ctx, mine, cards, sizeof(*mine)) != STRATA_OK) {
        status = UCS_ERR_IO_ERROR;
    }
    peer = &cards[1 - bs->rank];
    if (status == UCS_OK) {
        ep_params.address = (const ucp_address_t *)peer->addr;
        status = ucp_ep_create(raw->worker, &ep_params, &raw->ep);
    }
    if (status == UCS_OK) {
        status = ucp_ep_rkey_unpack(raw->ep, peer->rkey, &raw->rkey);
    }
    raw->peer_base = peer->base;
    free(cards);
    if (status != UCS_OK) {
        fprintf(stderr, "strata-bench raw ucp: %s\n", ucs_status_string(status));
        bench_raw_ucx_destroy(raw);
        return STRATA_ERR_TRANSPORT;
    }
    *path = (bench_path_t){.name = "raw ucp (put, flush, active message)", .ctx = raw,
                           .write = raw_ucx_write, .flush = raw_ucx_flush,
                           .wait_imm = raw_ucx_wait_imm};
    *raw_p = raw;
    return STRATA_OK;
}

void bench_raw_ucx_destroy(bench_raw_ucx_t *raw)
{
    if (raw == NULL) {
        return;
    }
    if (raw->rkey != NULL) {
        ucp_rkey_destroy(raw->rkey);
    }
    if (raw->ep != NULL) {
        ucp_request_param_t param = {.op_attr_mask = 0}; /* flush: both sides are done */
        ucs_status_ptr_t request = ucp_ep_close_nbx(raw->ep, &param);

        while (UCS_PTR_IS_PTR(request) && ucp_request_check_status(request) == UCS_INPROGRESS) {
            ucp_worker_progress(raw->worker);
        }
        if (UCS_PTR_IS_PTR(request)) {
            ucp_request_free(request);
        }
    }
    if (raw->memh != NULL) {
        ucp_mem_unmap(raw->context, raw->memh);
    }
    if (raw->worker != NULL) {
        ucp_worker_destroy(raw->worker);
    }
    if (raw->context != NULL) {
        ucp_cleanup(raw->context);
    }
    free(raw->buf);
    free(raw);
}
