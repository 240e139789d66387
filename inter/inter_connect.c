/*
 * The engine's address exchange and connection: the blob each rank publishes (its rails'
 * addresses, its control region, its stripe settings and transport), the checks a peer's
 * blob must pass, the connection of every peer's rails, and the wait until every peer is
 * wired or has failed.
 */
#include "inter_internal.h"
#include "util/util_reason.h"

#include <stdio.h>
#include <string.h>

#define INTER_BLOB_MAGIC 0x494e5452u /* "INTR" */

typedef struct inter_blob_header {
    uint32_t      magic;
    uint32_t      num_rails;
    uint64_t      stripe_min_chunk;
    uint32_t      stripe_max_chunks;
    uint32_t      msg_size;
    inter_rdesc_t ctrl;
    char          transport[16]; /* the transport's name: every rank must have the same */
    uint64_t      addr_size;     /* bytes of each rail's address slot */
    uint32_t      has_local;     /* slot INTER_LOCAL_RAIL holds the same-node address */
    uint32_t      reserved;
} inter_blob_header_t;

/* After the header, INTER_RAIL_SLOTS slots of a uint32_t length and addr_size bytes, each
 * in 8-byte multiples: the blobs of every rank lie end to end, each header aligned. */
static size_t inter_blob_slot_bytes(uint64_t addr_size)
{
    return UTIL_ALIGN_UP(sizeof(uint32_t) + (size_t)addr_size, sizeof(uint64_t));
}

static size_t inter_blob_slot_size(const inter_engine_t *engine)
{
    return inter_blob_slot_bytes(engine->rails[0].tp->addr_size);
}

static uint8_t *inter_blob_slot(const void *blob, size_t slot_size, int rail)
{
    return (uint8_t *)blob + sizeof(inter_blob_header_t) + (size_t)rail * slot_size;
}

size_t inter_blob_size(uint64_t addr_size)
{
    return sizeof(inter_blob_header_t) + INTER_RAIL_SLOTS * inter_blob_slot_bytes(addr_size);
}

size_t inter_engine_address_size(const inter_engine_t *engine)
{
    return inter_blob_size(engine->rails[0].tp->addr_size);
}

strata_status_t inter_blob_parse(const void *blob, size_t size, const inter_blob_expect_t *expect,
                                 inter_blob_view_t *view, char *why)
{
    inter_blob_header_t header;
    size_t slot_size = inter_blob_slot_bytes(expect->addr_size);
    uint32_t len;

    if (expect->addr_size > INTER_ADDR_MAX || size != inter_blob_size(expect->addr_size)) {
        util_reason(why, "an address blob of %zu bytes, not %zu", size,
                    inter_blob_size(expect->addr_size));
        return STRATA_ERR_INVALID;
    }
    memcpy(&header, blob, sizeof(header)); /* the peer's bytes, in no particular alignment */
    if (header.magic != INTER_BLOB_MAGIC ||
        strncmp(header.transport, expect->transport, sizeof(header.transport)) != 0 ||
        header.addr_size != expect->addr_size) {
        util_reason(why, "it runs transport %.16s (addresses of %llu bytes), this rank %s "
                    "(%llu): STRATA_INTER_TRANSPORT and the transport's settings must match on "
                    "every rank", header.magic == INTER_BLOB_MAGIC ? header.transport : "?",
                    (unsigned long long)header.addr_size, expect->transport,
                    (unsigned long long)expect->addr_size);
        return STRATA_ERR_CONFIG;
    }
    if (header.num_rails < 1 || header.num_rails > INTER_MAX_RAILS ||
        header.stripe_min_chunk != expect->stripe_min_chunk ||
        header.stripe_max_chunks != expect->stripe_max_chunks ||
        header.msg_size != expect->msg_size) {
        util_reason(why, "its engine is configured differently (rails %u, stripe %llu x %u, "
                    "messages %u): STRATA_INTER_* must match on every rank", header.num_rails,
                    (unsigned long long)header.stripe_min_chunk, header.stripe_max_chunks,
                    header.msg_size);
        return STRATA_ERR_INVALID;
    }
    if (header.ctrl.magic != INTER_RDESC_MAGIC || header.ctrl.length < 2 * sizeof(uint64_t) ||
        header.ctrl.num_rails != header.num_rails || header.has_local > 1) {
        util_reason(why, "its control region's descriptor is malformed");
        return STRATA_ERR_INVALID;
    }
    memset(view, 0, sizeof(*view));
    view->num_rails = (int)header.num_rails;
    view->has_local = header.has_local != 0;
    view->ctrl      = header.ctrl;
    for (int r = 0; r < INTER_RAIL_SLOTS; ++r) {
        const uint8_t *slot = inter_blob_slot(blob, slot_size, r);

        if (r == INTER_LOCAL_RAIL ? !view->has_local : r >= view->num_rails) {
            continue; /* unused: not read */
        }
        memcpy(&len, slot, sizeof(len));
        if (len == 0 || len > header.addr_size) {
            util_reason(why, "its rail %d address is %u bytes (1 to %llu)", r, len,
                        (unsigned long long)header.addr_size);
            return STRATA_ERR_INVALID;
        }
        view->addr[r]     = slot + sizeof(len);
        view->addr_len[r] = len;
    }
    return STRATA_OK;
}

strata_status_t inter_engine_address(const inter_engine_t *engine, void *blob)
{
    inter_blob_header_t *header = blob;
    size_t slot_size = inter_blob_slot_size(engine);
    strata_status_t status;
    uint32_t len32;
    size_t len;

    memset(blob, 0, inter_engine_address_size(engine));
    header->magic             = INTER_BLOB_MAGIC;
    header->num_rails         = (uint32_t)engine->num_rails;
    header->stripe_min_chunk  = engine->params.stripe_min_chunk;
    header->stripe_max_chunks = engine->params.stripe_max_chunks;
    header->msg_size          = (uint32_t)engine->params.msg_size;
    header->addr_size         = engine->rails[0].tp->addr_size;
    snprintf(header->transport, sizeof(header->transport), "%s", engine->ops->name);
    header->has_local         = engine->rails[INTER_LOCAL_RAIL].tp != NULL;
    inter_engine_mem_descriptor(engine->ctrl_mr, &header->ctrl);
    INTER_FOR_EACH_RAIL(engine, r) {
        uint8_t *slot = inter_blob_slot(blob, slot_size, r);

        len    = engine->rails[r].tp->addr_size;
        status = engine->ops->address(engine->rails[r].tp, slot + sizeof(len32), &len);
        if (status != STRATA_OK) {
            return status;
        }
        len32 = (uint32_t)len;
        memcpy(slot, &len32, sizeof(len32));
    }
    return STRATA_OK;
}

static bool inter_same_node(const inter_engine_t *engine, int peer)
{
    return engine->rank_node != NULL && peer != engine->params.rank &&
           engine->rank_node[peer] == engine->rank_node[engine->params.rank];
}

static strata_status_t inter_connect_peer(inter_engine_t *engine, int peer, const void *blob)
{
    inter_blob_expect_t expect = {.transport = engine->ops->name,
                                  .addr_size = engine->rails[0].tp->addr_size,
                                  .stripe_min_chunk  = engine->params.stripe_min_chunk,
                                  .stripe_max_chunks = engine->params.stripe_max_chunks,
                                  .msg_size = (uint32_t)engine->params.msg_size};
    char why[UTIL_REASON_LEN];
    inter_blob_view_t view;
    strata_status_t status;

    status = inter_blob_parse(blob, inter_engine_address_size(engine), &expect, &view, why);
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("engine: rank %d's address: %s", peer, why);
        return status;
    }
    engine->peer_info[peer].num_rails = view.num_rails;
    engine->peer_info[peer].ctrl      = view.ctrl;
    engine->peer_info[peer].local     = view.has_local && inter_same_node(engine, peer) &&
                                        engine->rails[INTER_LOCAL_RAIL].tp != NULL;
    /* Rail r talks to the peer's rail r; rails beyond the peer's count go unused for it,
     * and the same-node transport serves peers of this node that have it too. */
    INTER_FOR_EACH_RAIL(engine, r) {
        if (r == INTER_LOCAL_RAIL ? !engine->peer_info[peer].local : r >= view.num_rails) {
            continue;
        }
        status = engine->ops->insert_peer(engine->rails[r].tp, view.addr[r], view.addr_len[r],
                                          &engine->rails[r].peers[peer]);
        if (status != STRATA_OK) {
            return status;
        }
    }
    return STRATA_OK;
}

static strata_status_t inter_post_rx_pool(inter_engine_t *engine, int r)
{
    inter_rail_t *rail = &engine->rails[r];
    strata_status_t status;

    for (int i = 0; i < rail->num_rx; ++i) {
        inter_op_t *op = &rail->rx_ops[i];

        memset(op, 0, sizeof(*op));
        op->kind = INTER_OP_RX;
        op->rail = r;
        op->slot = i;
        op->lbuf = rail->rx_pool + (size_t)i * engine->slot_size;
        op->len  = engine->slot_size;
        op->desc = rail->rx_mr.desc;
        status   = engine->ops->post_recv(rail->tp, op->lbuf, op->len, op->desc, op);
        if (status != STRATA_OK) {
            UTIL_LOG_ERROR("engine: posting receive buffers on rail %d failed: %s", r,
                           strata_status_string(status));
            return status;
        }
    }
    return STRATA_OK;
}

/* The first peer neither heard from nor failed, else the first failed one, else -1. */
static int inter_unwired_peer(const inter_engine_t *engine, bool *failed_p)
{
    int failed = -1;

    for (int p = 0; p < engine->params.world_size; ++p) {
        if (p == engine->params.rank || atomic_load(&engine->heard[p])) {
            continue;
        }
        if (!inter_engine_peer_failed(engine, p)) {
            *failed_p = false;
            return p;
        }
        failed = failed < 0 ? p : failed;
    }
    *failed_p = failed >= 0;
    return failed;
}

/* The proxy thread, started on its CPUs (inter_proxy_cpus) from its first instruction. */
static int inter_proxy_start(inter_engine_t *engine)
{
    pthread_attr_t attr;
    cpu_set_t cpus;
    int rc;

    if (pthread_attr_init(&attr) != 0) {
        return -1;
    }
    if (inter_proxy_cpus(engine, &cpus)) {
        (void)pthread_attr_setaffinity_np(&attr, sizeof(cpus), &cpus);
    }
    rc = pthread_create(&engine->proxy, &attr, inter_proxy_main, engine);
    pthread_attr_destroy(&attr);
    return rc;
}

/* Waits until a message (a heartbeat at least) came from every peer: the provider's
 * connections to all of them are then made, both ways, before any caller's traffic. None
 * is left half-made when a rank closes its endpoint soon after: a connection request the
 * provider accepted but had not reported by then is lost with what it allocated for it,
 * and the peer that sent it waits on it. A peer not heard within the peer timeout failed. */
static strata_status_t inter_wait_wired(inter_engine_t *engine)
{
    int others = engine->params.world_size - 1, peer;
    uint64_t deadline = util_clock_now_ns() + engine->params.peer_timeout_ns, spin_until = 0;
    bool failed = false;

    for (;;) {
        unsigned seq = atomic_load_explicit(&engine->wake_seq, memory_order_acquire);

        if (atomic_load_explicit(&engine->peers_heard, memory_order_acquire) >= others) {
            return STRATA_OK;
        }
        peer = inter_unwired_peer(engine, &failed);
        if (failed || util_clock_now_ns() >= deadline) {
            break;
        }
        inter_engine_idle(engine, &spin_until, seq);
    }
    UTIL_LOG_ERROR("engine: rank %d %s while connecting", peer,
                   failed ? "failed" : "was not heard from within the peer timeout");
    return STRATA_ERR_PEER_FAILED;
}

strata_status_t inter_engine_connect(inter_engine_t *engine, const void *blobs)
{
    size_t blob_size = inter_engine_address_size(engine);
    strata_status_t status = STRATA_OK;
    uint64_t now = util_clock_now_ns();

    if (engine->connected || engine->connect_failed) {
        UTIL_LOG_ERROR("engine: connect called again (after %s)",
                       engine->connected ? "success" : "a failure");
        return STRATA_ERR_INVALID;
    }
    for (int peer = 0; peer < engine->params.world_size && status == STRATA_OK; ++peer) {
        status = inter_connect_peer(engine, peer, (const char *)blobs + (size_t)peer * blob_size);
        engine->last_seen[peer] = now;
        inter_pace_reset(engine, peer); /* the pair's rails are known now */
    }
    INTER_FOR_EACH_RAIL(engine, r) {
        if (status == STRATA_OK) {
            status = inter_post_rx_pool(engine, r);
        }
    }
    if (status != STRATA_OK) {
        engine->connect_failed = true; /* receive buffers may be posted: no second try */
        return status;
    }
    engine->next_heartbeat = now;
    engine->last_step      = now;
    atomic_store(&engine->proxy_pulse, now);
    atomic_store(&engine->proxy_target, -1);
    atomic_store(&engine->wedged_on, -1);
    atomic_store(&engine->running, true);
    if (inter_proxy_start(engine) != 0) {
        atomic_store(&engine->running, false);
        engine->connect_failed = true;
        UTIL_LOG_ERROR("engine: cannot start the proxy thread");
        return STRATA_ERR_NO_MEMORY;
    }
    pthread_setname_np(engine->proxy, INTER_PROGRESS_THREAD_NAME); /* for ps, top, tests */
    engine->connected = true;
    return inter_wait_wired(engine);
}
