/*
 * Engine lifecycle: rails, buffer pools, teardown, idling; the stripe of a write. The
 * settings are in inter_config.c, the address exchange and connection in inter_connect.c,
 * peer failures in inter_failure.c, registrations in inter_memory.c.
 */
#include "inter_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

int inter_rx_pool_slots(bool rx_cq_data, size_t rx_size, size_t slot_size)
{
    size_t fit = INTER_RX_POOL_MAX_BYTES / (slot_size ? slot_size : 1);

    if (!rx_cq_data) {
        return INTER_RX_SLOTS;
    }
    /* Immediates that find no posted buffer are lost (or stall the sender on RNR). */
    return (int)UTIL_MAX((size_t)INTER_RX_SLOTS, UTIL_MIN(rx_size, fit));
}

/* Receive and send pools of one rail, registered once. */
static strata_status_t inter_rail_pools(inter_engine_t *engine, inter_rail_t *rail)
{
    size_t bytes;
    strata_status_t status;

    rail->num_rx  = inter_rx_pool_slots(rail->tp->rx_cq_data, rail->tp->rx_size,
                                        engine->slot_size);
    bytes         = engine->slot_size * (size_t)rail->num_rx;
    rail->rx_ops  = calloc((size_t)rail->num_rx, sizeof(*rail->rx_ops));
    rail->rx_pool = util_alloc_aligned(4096, bytes);
    rail->tx_pool = util_alloc_aligned(4096, engine->slot_size * INTER_TX_SLOTS);
    if (rail->rx_ops == NULL || rail->rx_pool == NULL || rail->tx_pool == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    if (rail->tp->rx_cq_data) {
        UTIL_LOG_INFO("engine: %s: every immediate consumes a receive; %d posted (%zu bytes)",
                      rail->tp->name, rail->num_rx, bytes);
    }
    status = engine->ops->mem_register(rail->tp, rail->rx_pool, bytes, INTER_MEM_HOST, 0,
                                       atomic_fetch_add(&engine->key_counter, 1), &rail->rx_mr);
    if (status == STRATA_OK) {
        status = engine->ops->mem_register(rail->tp, rail->tx_pool,
                                           engine->slot_size * INTER_TX_SLOTS, INTER_MEM_HOST, 0,
                                           atomic_fetch_add(&engine->key_counter, 1),
                                           &rail->tx_mr);
    }
    for (int i = 0; i < INTER_TX_SLOTS; ++i) {
        rail->tx_free[i] = i;
    }
    rail->num_tx_free = INTER_TX_SLOTS;
    return status;
}

void inter_engine_rail_params(const inter_engine_params_t *params, int rail,
                              inter_transport_params_t *tp_params_p)
{
    const char *iface = params->iface;
    const char *device = rail < INTER_MAX_RAILS ? params->rail_devices[rail] : "";

    *tp_params_p = (inter_transport_params_t){
        .rank          = params->rank,
        .world_size    = params->world_size,
        .iface         = (iface[0] || !device[0]) ? iface : device,
        .required      = iface[0] != '\0',
        .rail          = rail,
        .device_memory = params->device_memory,
        .msg_bytes     = sizeof(inter_msg_header_t) + params->msg_size, /* a slot */
        .shared_memory = !params->forbid_shared_memory,
        .delivery_complete = params->rate_control,
        .dmabuf_fn     = params->dmabuf_fn,
        .dmabuf_ctx    = params->dmabuf_ctx};
}

/* What rail r's transport is opened with. */
static inter_transport_params_t inter_rail_params(const inter_engine_t *engine, int r)
{
    inter_transport_params_t tp_params;

    inter_engine_rail_params(&engine->params, r, &tp_params);
    return tp_params;
}

/* The transport STRATA_INTER_TRANSPORT names, or auto's pick, probed for rail 0. */
static strata_status_t inter_choose_transport(inter_engine_t *engine)
{
    inter_transport_params_t tp_params = inter_rail_params(engine, 0);
    char why[256];
    strata_status_t status = inter_transport_select(engine->params.transport, &tp_params,
                                                    &engine->ops, why, sizeof(why));

    if (status == STRATA_OK) {
        UTIL_LOG_INFO("engine: transport %s (%s)", engine->ops->name, why);
    }
    return status;
}

/* Whether another rank shares this rank's node (by the caller's node map). */
static bool inter_has_node_peers(const inter_engine_t *engine)
{
    for (int p = 0; engine->rank_node != NULL && p < engine->params.world_size; ++p) {
        if (p != engine->params.rank &&
            engine->rank_node[p] == engine->rank_node[engine->params.rank]) {
            return true;
        }
    }
    return false;
}

/*
 * The same-node transport: peers on this node exchange through shared memory (libfabric
 * shm) instead of the network stack, where the network transport is not already that, the
 * transport has such a path, and it registers the memory the engine will be asked to.
 * Where none opens, same-node peers use the network rails, as before.
 */
static strata_status_t inter_open_local_rail(inter_engine_t *engine)
{
    inter_rail_t *rail = &engine->rails[INTER_LOCAL_RAIL];
    inter_transport_params_t tp_params = inter_rail_params(engine, INTER_LOCAL_RAIL);
    strata_status_t status;

    /* ucx and verbs choose their own path to a peer on the same host. */
    if (strcmp(engine->ops->name, "ofi") != 0 || engine->params.same_node_network ||
        engine->params.forbid_shared_memory || !inter_has_node_peers(engine) ||
        strncmp(engine->rails[0].tp->name, "ofi shm", 7) == 0) {
        return STRATA_OK;
    }
    tp_params.iface     = "";
    tp_params.required  = false;
    tp_params.same_node = true;
    status = engine->ops->open(&tp_params, &rail->tp);
    if (status != STRATA_OK) {
        UTIL_LOG_INFO("engine: no same-node transport (%s): peers on this node use the "
                      "network rails", strata_status_string(status));
        return STRATA_OK;
    }
    if (engine->params.device_memory != INTER_MEM_HOST && !rail->tp->hmem) {
        UTIL_LOG_INFO("engine: %s cannot register device memory: peers on this node use the "
                      "network rails", rail->tp->name);
        engine->ops->close(rail->tp);
        rail->tp = NULL;
        return STRATA_OK;
    }
    UTIL_LOG_INFO("engine: peers on this node go through %s", rail->tp->name);
    rail->peers = calloc((size_t)engine->params.world_size, sizeof(uint64_t));
    return rail->peers ? inter_rail_pools(engine, rail) : STRATA_ERR_NO_MEMORY;
}

static strata_status_t inter_open_rails(inter_engine_t *engine)
{
    strata_status_t status = inter_choose_transport(engine);

    for (int r = 0; r < engine->params.num_rails && status == STRATA_OK; ++r) {
        inter_rail_t *rail = &engine->rails[r];
        inter_transport_params_t tp_params = inter_rail_params(engine, r);

        status = engine->ops->open(&tp_params, &rail->tp);
        if (status != STRATA_OK) {
            break;
        }
        engine->num_rails++;
        rail->peers = calloc((size_t)engine->params.world_size, sizeof(uint64_t));
        status = rail->peers ? inter_rail_pools(engine, rail) : STRATA_ERR_NO_MEMORY;
    }
    if (status == STRATA_OK) {
        status = inter_open_local_rail(engine);
    }
    return status;
}

/*
 * Heartbeats go on rail 0 by inject, which needs no buffer or completion, where the
 * provider injects a header's worth; else (or when asked) by a send from the rail's
 * registered buffers, one per peer at a time.
 */
static strata_status_t inter_heartbeat_setup(inter_engine_t *engine)
{
    const inter_transport_t *tp = engine->rails[0].tp;
    size_t world = (size_t)engine->params.world_size;

    engine->beat_ops = calloc(world, sizeof(*engine->beat_ops));
    if (engine->beat_ops == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    for (size_t p = 0; p < world; ++p) {
        engine->beat_ops[p] = (inter_op_t){.kind = INTER_OP_HEARTBEAT, .peer = (int)p,
                                           .slot = -1};
    }
    engine->beat_by_send = engine->params.heartbeat_path == INTER_HEARTBEAT_SEND ||
                           tp->inject_size < sizeof(inter_msg_header_t);
    if (engine->params.heartbeat_path == INTER_HEARTBEAT_AUTO && engine->beat_by_send) {
        UTIL_LOG_INFO("engine: %s injects %zu bytes, less than a %zu-byte heartbeat: "
                      "heartbeats go as registered sends", tp->name, tp->inject_size,
                      sizeof(inter_msg_header_t));
    }
    return STRATA_OK;
}

strata_status_t inter_engine_create(const inter_engine_params_t *params, inter_engine_t **engine_p)
{
    strata_status_t status = inter_engine_params_check(params);
    inter_engine_t *engine;
    size_t world;

    if (status != STRATA_OK) {
        return status;
    }
    engine = calloc(1, sizeof(*engine));
    if (engine == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    world             = (size_t)params->world_size;
    engine->params    = *params;
    engine->params.num_rails = params->num_rails ? params->num_rails : 1;
    engine->params.max_requests = params->max_requests ? params->max_requests
                                                        : INTER_REQUESTS_DEFAULT;
    engine->slot_size = sizeof(inter_msg_header_t) + params->msg_size;
    atomic_init(&engine->key_counter, 1);
    pthread_mutex_init(&engine->mr_lock, NULL);
    pthread_mutex_init(&engine->watch_lock, NULL);
    pthread_mutex_init(&engine->barrier_lock, NULL);
    pthread_mutex_init(&engine->progress_lock, NULL);
    engine->caller_progress = inter_choose_progress(params);
    engine->peer_info   = calloc(world, sizeof(*engine->peer_info));
    engine->peer_failed = calloc(world, sizeof(*engine->peer_failed));
    engine->last_seen   = calloc(world, sizeof(*engine->last_seen));
    engine->heard       = calloc(world, sizeof(*engine->heard));
    if (params->rank_node != NULL && (engine->rank_node = malloc(world * sizeof(int))) != NULL) {
        memcpy(engine->rank_node, params->rank_node, world * sizeof(int));
    }
    engine->params.rank_node = NULL; /* the caller's array: only the copy is kept */
    engine->ctrl        = util_alloc_aligned(64, 64);
    if (!engine->peer_info || !engine->peer_failed || !engine->last_seen || !engine->heard ||
        !engine->ctrl ||
        /* Every request in the ring is a pooled one: it never fills. */
        util_ring_init(&engine->ring, engine->params.max_requests) != STRATA_OK) {
        status = STRATA_ERR_NO_MEMORY;
        goto err;
    }
    memset(engine->ctrl, 0, 64);
    status = inter_open_rails(engine);
    if (status == STRATA_OK) {
        inter_avoid_caller_stalls(engine);
    }
    if (status == STRATA_OK) {
        status = inter_pools_create(engine); /* sized by the rails opened */
    }
    if (status == STRATA_OK) {
        status = inter_heartbeat_setup(engine);
    }
    if (status == STRATA_OK) {
        status = inter_leave_setup(engine);
    }
    if (status == STRATA_OK) {
        status = inter_queues_init(&engine->pending, params->world_size);
    }
    if (status == STRATA_OK) {
        status = inter_pace_create(engine); /* floors from the rails opened */
    }
    if (status == STRATA_OK) {
        status = inter_engine_mem_register(engine, engine->ctrl, 64, &engine->ctrl_mr);
    }
    if (status != STRATA_OK) {
        goto err;
    }
    *engine_p = engine;
    return STRATA_OK;

err:
    inter_engine_destroy(engine);
    return status;
}

/* Every registration still open, the engine's own pools included (destroy, proxy stopped). */
static void inter_close_registrations(inter_engine_t *engine)
{
    while (engine->mrs != NULL) {
        inter_engine_mem_deregister(engine, engine->mrs); /* unlinks it */
    }
    engine->ctrl_mr = NULL;
    INTER_FOR_EACH_RAIL(engine, r) {
        inter_rail_t *rail = &engine->rails[r];

        engine->ops->mem_deregister(rail->tp, &rail->rx_mr);
        engine->ops->mem_deregister(rail->tp, &rail->tx_mr);
    }
}

void inter_engine_destroy(inter_engine_t *engine)
{
    if (engine == NULL) {
        return;
    }
    if (engine->connected) {
        struct timespec deadline;

        inter_engine_leave(engine); /* the peers have read what this rank sent */
        inter_proxy_stop(engine);
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 1 + (time_t)(engine->params.peer_timeout_ns / UTIL_NSEC_PER_SEC);
        if (pthread_timedjoin_np(engine->proxy, NULL, &deadline) != 0) {
            /* Stuck inside the transport: closing it under the thread would crash. */
            UTIL_LOG_ERROR("engine: the proxy thread is stuck in the transport; leaving the "
                           "engine to process exit");
            pthread_detach(engine->proxy);
            return;
        }
    }
    /* Registrations first: a provider that binds them to the endpoint (FI_MR_ENDPOINT)
     * refuses to close it while they are open (fi_mr(3)). A peer's access to a closed
     * registration fails at the peer and leaves this endpoint as it was. */
    inter_close_registrations(engine);
    /* Then the endpoints: after that no provider holds an operation's context or buffer,
     * so the requests, and the memory operations may still have reached, can go. */
    INTER_FOR_EACH_RAIL(engine, r) {
        engine->ops->shutdown(engine->rails[r].tp);
    }
    inter_proxy_drain(engine); /* every request back into the pools */
    inter_pools_destroy(engine);
    inter_queues_cleanup(&engine->pending);
    inter_pace_destroy(engine);
    while (engine->late_release != NULL) {
        inter_late_release_t *late = engine->late_release;

        engine->late_release = late->next;
        late->free_fn(late->ptr);
        free(late);
    }
    INTER_FOR_EACH_RAIL(engine, r) {
        inter_rail_t *rail = &engine->rails[r];

        engine->ops->close(rail->tp);
        free(rail->rx_ops);
        free(rail->rx_pool);
        free(rail->tx_pool);
        free(rail->peers);
    }
    if (engine->ring.slots != NULL) {
        util_ring_cleanup(&engine->ring);
    }
    pthread_mutex_destroy(&engine->mr_lock);
    inter_engine_unwatch_all(engine);
    pthread_mutex_destroy(&engine->watch_lock);
    pthread_mutex_destroy(&engine->barrier_lock);
    pthread_mutex_destroy(&engine->progress_lock);
    free(engine->ctrl);
    free(engine->beat_ops);
    free(engine->peer_info);
    free(engine->peer_failed);
    free(engine->last_seen);
    free(engine->heard);
    inter_leave_cleanup(engine);
    free(engine->rank_node);
    free(engine);
}

int inter_engine_numa_node(const inter_engine_t *engine)
{
    return engine->params.proxy_numa_node;
}

int inter_engine_num_rails(const inter_engine_t *engine)
{
    return engine->num_rails;
}

const char *inter_engine_transport_name(const inter_engine_t *engine)
{
    return engine->rails[0].tp->name;
}

const char *inter_engine_peer_transport_name(const inter_engine_t *engine, int peer)
{
    if (peer < 0 || peer >= engine->params.world_size) {
        return "none";
    }
    return engine->rails[inter_rail_for(engine, peer, 0)].tp->name;
}

bool inter_engine_has_read(const inter_engine_t *engine)
{
    return engine->rails[0].tp->has_read;
}

/* Yield-spin this long before sleeping: longer than a round trip, far shorter than a bulk
 * transfer, whose waiter then leaves its core to the proxies. */
#define INTER_SPIN_NS (100 * UTIL_NSEC_PER_USEC)
/* Caller progress: how long a waiter spins (progressing) before it naps, and naps. */
#define INTER_CALLER_SPIN_NS (2 * UTIL_NSEC_PER_MSEC)
#define INTER_CALLER_NAP_NS  (50 * UTIL_NSEC_PER_USEC)

void inter_engine_idle(inter_engine_t *engine, uint64_t *spin_until, unsigned seq)
{
    struct timespec nap = {.tv_sec = 0, .tv_nsec = (long)UTIL_NSEC_PER_MSEC};
    uint64_t now, spin = INTER_SPIN_NS;

    if (engine->caller_progress) {
        if (inter_engine_progress(engine) > 0) {
            *spin_until = 0; /* something moved: spin again before sleeping */
            return;
        }
        /* A transfer under way completes nothing for a while, yet its bytes move only when
         * this thread progresses: spin longer. Nobody wakes a caller that sleeps, so the
         * nap is short, and progress follows it. */
        spin        = INTER_CALLER_SPIN_NS;
        nap.tv_nsec = (long)INTER_CALLER_NAP_NS;
    }
    now = util_clock_now_ns();
    if (*spin_until == 0) {
        *spin_until = now + spin;
    }
    if (now < *spin_until) {
        sched_yield();
        return;
    }
    /* The proxy bumps wake_seq after every batch of completions: if anything completed since
     * the caller read seq, the futex returns at once; the wake itself is only a shortcut. */
    atomic_fetch_add(&engine->sleepers, 1);
    syscall(SYS_futex, &engine->wake_seq, FUTEX_WAIT_PRIVATE, seq, &nap, NULL, 0);
    atomic_fetch_sub(&engine->sleepers, 1);
}

void inter_engine_wake(inter_engine_t *engine)
{
    /* Publishes "something changed" (release) after the change; sleepers compare it. */
    atomic_fetch_add_explicit(&engine->wake_seq, 1, memory_order_release);
    if (atomic_load(&engine->sleepers) > 0) {
        syscall(SYS_futex, &engine->wake_seq, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
    }
}

bool inter_engine_wedged(inter_engine_t *engine)
{
    uint64_t pulse = atomic_load_explicit(&engine->proxy_pulse, memory_order_acquire);
    uint64_t now = util_clock_now_ns();
    int target;

    if (!engine->connected || now < pulse || now - pulse < engine->params.peer_timeout_ns) {
        return false;
    }
    /* Only the proxy fails peers (with everything that involves them); it does so for this
     * one if it ever comes back. Until then waiters report the failure themselves. */
    target = atomic_load(&engine->proxy_target);
    if (target >= 0) {
        atomic_store(&engine->wedged_on, target);
    }
    return true;
}

void inter_engine_stripe(const inter_engine_t *engine, int peer, inter_stripe_params_t *stripe)
{
    /* Rails between this rank and peer: the fewer of the two, so both sides count alike;
     * one, the same-node transport, for a peer of this node that both sides reach so. */
    stripe->num_rails  = engine->peer_info[peer].local
                             ? 1
                             : (uint32_t)UTIL_MIN(engine->num_rails,
                                                  engine->peer_info[peer].num_rails);
    stripe->min_chunk  = engine->params.stripe_min_chunk;
    stripe->max_chunks = engine->params.stripe_max_chunks;
}

uint32_t inter_engine_write_chunks(const inter_engine_t *engine, int peer, size_t len)
{
    inter_stripe_params_t stripe;
    uint32_t chunks = 0;

    if (peer < 0 || peer >= engine->params.world_size) {
        return 0;
    }
    inter_engine_stripe(engine, peer, &stripe);
    return (inter_stripe_num_chunks(&stripe, len, &chunks) == STRATA_OK) ? chunks : 0;
}

uint64_t inter_engine_chunk_bytes(const inter_engine_t *engine)
{
    uint64_t max = engine->rails[0].tp->max_rma_size;

    return UTIL_MIN(engine->params.stripe_min_chunk, max);
}
