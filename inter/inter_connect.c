/*
 * The engine's address exchange and connection: the blob each rank publishes (its rails'
 * addresses, its control region, its stripe settings and transport), the checks a peer's
 * blob must pass, the connection of every peer's rails, and the wait until every peer is
 * wired or has failed.
 */
#include "inter_internal.h"

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

/* After the header, INTER_RAIL_SLOTS slots of a uint32_t length and addr_size bytes. */
static size_t inter_blob_slot_size(const inter_engine_t *engine)
{
    /* 8-byte multiples: the blobs of every rank lie end to end, each header aligned. */
    return UTIL_ALIGN_UP(sizeof(uint32_t) + engine->rails[0].tp->addr_size, sizeof(uint64_t));
}

static uint8_t *inter_blob_slot(const void *blob, size_t slot_size, int rail)
{
    return (uint8_t *)blob + sizeof(inter_blob_header_t) + (size_t)rail * slot_size;
}

size_t inter_engine_address_size(const inter_engine_t *engine)
{
    return sizeof(inter_blob_header_t) + INTER_RAIL_SLOTS * inter_blob_slot_size(engine);
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
    const inter_blob_header_t *header = blob;
    size_t slot_size = inter_blob_slot_size(engine);
    strata_status_t status;
    uint32_t len;

    if (header->magic != INTER_BLOB_MAGIC ||
        strncmp(header->transport, engine->ops->name, sizeof(header->transport)) != 0 ||
        header->addr_size != engine->rails[0].tp->addr_size) {
        UTIL_LOG_ERROR("engine: rank %d runs transport %.16s (addresses of %llu bytes), this "
                       "rank %s (%zu): STRATA_INTER_TRANSPORT and the transport's settings "
                       "must match on every rank", peer,
                       header->magic == INTER_BLOB_MAGIC ? header->transport : "?",
                       (unsigned long long)header->addr_size, engine->ops->name,
                       engine->rails[0].tp->addr_size);
        return STRATA_ERR_CONFIG;
    }
    if (header->num_rails < 1 || header->num_rails > INTER_MAX_RAILS ||
        header->stripe_min_chunk != engine->params.stripe_min_chunk ||
        header->stripe_max_chunks != engine->params.stripe_max_chunks ||
        header->msg_size != engine->params.msg_size) {
        UTIL_LOG_ERROR("engine: rank %d's engine is configured differently (rails %u, stripe "
                       "%llu x %u, messages %u): STRATA_INTER_* must match on every rank", peer,
                       header->num_rails, (unsigned long long)header->stripe_min_chunk,
                       header->stripe_max_chunks, header->msg_size);
        return STRATA_ERR_INVALID;
    }
    engine->peer_info[peer].num_rails = (int)header->num_rails;
    engine->peer_info[peer].ctrl      = header->ctrl;
    engine->peer_info[peer].local     = header->has_local && inter_same_node(engine, peer) &&
                                        engine->rails[INTER_LOCAL_RAIL].tp != NULL;
    /* Rail r talks to the peer's rail r; rails beyond the peer's count go unused for it,
     * and the same-node transport serves peers of this node that have it too. */
    INTER_FOR_EACH_RAIL(engine, r) {
        const uint8_t *slot = inter_blob_slot(blob, slot_size, r);

        if (r == INTER_LOCAL_RAIL ? !engine->peer_info[peer].local
                                  : r >= (int)header->num_rails) {
            continue;
        }
        memcpy(&len, slot, sizeof(len));
        if (len > header->addr_size) {
            UTIL_LOG_ERROR("engine: rank %d's rail %d address is %u bytes, more than %llu",
                           peer, r, len, (unsigned long long)header->addr_size);
            return STRATA_ERR_INVALID;
        }
        status = engine->ops->insert_peer(engine->rails[r].tp, slot + sizeof(len), len,
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
