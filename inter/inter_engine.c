/*
 * Engine lifecycle: rails, buffer pools, teardown, idling; the stripe of a write. The
 * address exchange and connection are in inter_connect.c, peer failures in
 * inter_failure.c, registrations in inter_memory.c.
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

typedef struct inter_config {
    char    *transport;
    char    *iface;
    int64_t  rails;
    uint64_t heartbeat_ns;
    uint64_t peer_timeout_ns;
    uint64_t msg_size;
    int64_t  requests;
    uint64_t stripe_min;
    int64_t  stripe_max_chunks;
    bool     shared_memory;
    int      chunk_order;
    int      heartbeat_path;
    int      progress;
    int      same_node;
    bool     rate_control;
} inter_config_t;

static const char *const inter_chunk_order_names[] = {"forward", "reverse", NULL};
static const char *const inter_heartbeat_path_names[] = {"auto", "send", NULL};
static const char *const inter_progress_names[] = {"auto", "thread", "caller", NULL};
static const char *const inter_same_node_names[] = {"shm", "network", NULL};

static const util_config_field_t inter_config_fields[] = {
    {.name = "INTER_TRANSPORT", .default_value = "auto",
     .doc = "Network library: auto (verbs on ConnectX, ofi on EFA, ucx where built, else "
            "ofi over tcp), ofi, ucx or verbs.",
     .type = UTIL_CONFIG_STRING, .offset = offsetof(inter_config_t, transport)},
    {.name = "INTER_IFACE", .default_value = "",
     .doc = "Network interface for the tcp provider (default: the first non-loopback one).",
     .type = UTIL_CONFIG_STRING, .offset = offsetof(inter_config_t, iface)},
    {.name = "INTER_RAILS", .default_value = "0",
     .doc = "Endpoints (rails) each rank opens and stripes large writes over (0: one per NIC "
            "the rail plan gives this rank's GPU, at least 1).",
     .type = UTIL_CONFIG_INT, .offset = offsetof(inter_config_t, rails)},
    {.name = "INTER_HEARTBEAT", .default_value = "100ms",
     .doc = "Interval between heartbeats to each peer.",
     .type = UTIL_CONFIG_TIME, .offset = offsetof(inter_config_t, heartbeat_ns)},
    {.name = "INTER_PEER_TIMEOUT", .default_value = "3s",
     .doc = "Silence after which a peer is declared failed.",
     .type = UTIL_CONFIG_TIME, .offset = offsetof(inter_config_t, peer_timeout_ns)},
    {.name = "INTER_MSG_SIZE", .default_value = "64k",
     .doc = "Largest send/recv message.",
     .type = UTIL_CONFIG_SIZE, .offset = offsetof(inter_config_t, msg_size)},
    {.name = "INTER_REQUESTS", .default_value = "1024",
     .doc = "Requests in flight at once; their operations and send copies are pooled to "
            "match at creation, and a submission past them returns STRATA_ERR_BUSY.",
     .type = UTIL_CONFIG_INT, .offset = offsetof(inter_config_t, requests)},
    {.name = "INTER_STRIPE_MIN", .default_value = "256k",
     .doc = "Smallest chunk of a write striped over several rails.",
     .type = UTIL_CONFIG_SIZE, .offset = offsetof(inter_config_t, stripe_min)},
    {.name = "INTER_STRIPE_MAX_CHUNKS", .default_value = "64",
     .doc = "Most chunks (and immediates) one write is cut into.",
     .type = UTIL_CONFIG_INT, .offset = offsetof(inter_config_t, stripe_max_chunks)},
    {.name = "INTER_SHARED_MEMORY", .default_value = "yes",
     .doc = "Let the provider use shared memory between ranks of a node (no: "
            "FI_OPT_SHARED_MEMORY_PERMITTED=false, libfabric 1.21+; refused where unavailable).",
     .type = UTIL_CONFIG_BOOL, .offset = offsetof(inter_config_t, shared_memory)},
    {.name = "INTER_CHUNK_ORDER", .default_value = "forward",
     .doc = "Test mode: reverse posts every write's chunks and pages last first, as EFA "
            "SRD may deliver them (tcp never reorders).",
     .type = UTIL_CONFIG_ENUM, .offset = offsetof(inter_config_t, chunk_order),
     .enum_names = inter_chunk_order_names},
    {.name = "INTER_HEARTBEAT_PATH", .default_value = "auto",
     .doc = "Heartbeats by inject where the provider's inject size allows, else by a "
            "registered send (auto); send always takes the second path.",
     .type = UTIL_CONFIG_ENUM, .offset = offsetof(inter_config_t, heartbeat_path),
     .enum_names = inter_heartbeat_path_names},
    {.name = "INTER_PROGRESS", .default_value = "auto",
     .doc = "Who drives the network: thread (a progress thread polls), caller (the threads "
            "that wait do; the thread only beats, or runs while work rings live), or auto "
            "(caller where the process has fewer than 2 cores per rank of its node).",
     .type = UTIL_CONFIG_ENUM, .offset = offsetof(inter_config_t, progress),
     .enum_names = inter_progress_names},
    {.name = "INTER_SAME_NODE", .default_value = "shm",
     .doc = "How the engine reaches peers on its own node: shm (through shared memory where "
            "the transport has a path: libfabric shm beside a network provider) or network.",
     .type = UTIL_CONFIG_ENUM, .offset = offsetof(inter_config_t, same_node),
     .enum_names = inter_same_node_names},
    {.name = "INTER_RATE_CONTROL", .default_value = "off",
     .doc = "Pace writes, reads, sends and work ring commands to each peer so that the bytes "
            "in flight stay near twice its estimated delivery rate times its base round trip, "
            "plus one chunk per rail (on); off only estimates them.",
     .type = UTIL_CONFIG_BOOL, .offset = offsetof(inter_config_t, rate_control)},
};

const util_config_table_t inter_config_table = {
    .layer       = "inter",
    .fields      = inter_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(inter_config_fields),
    .struct_size = sizeof(inter_config_t),
};

strata_status_t inter_engine_params_from_env(inter_engine_params_t *params)
{
    inter_config_t config;
    strata_status_t status = util_config_read(&inter_config_table, &config);

    if (status != STRATA_OK) {
        return status;
    }
    memset(params, 0, sizeof(*params));
    if (strlen(config.transport) >= sizeof(params->transport) ||
        strlen(config.iface) >= sizeof(params->iface)) {
        UTIL_LOG_ERROR("STRATA_INTER_TRANSPORT '%s' or STRATA_INTER_IFACE '%s' is too long",
                       config.transport, config.iface);
        util_config_release(&inter_config_table, &config);
        return STRATA_ERR_CONFIG;
    }
    snprintf(params->transport, sizeof(params->transport), "%s", config.transport);
    snprintf(params->iface, sizeof(params->iface), "%s", config.iface);
    params->num_rails         = (int)config.rails;
    params->proxy_numa_node   = -1;
    params->heartbeat_ns      = config.heartbeat_ns;
    params->peer_timeout_ns   = config.peer_timeout_ns;
    params->msg_size          = config.msg_size;
    /* Out of range (0 included) is refused at creation, not taken as the default. */
    params->max_requests      = config.requests < 1 || config.requests > INTER_MAX_REQUESTS
                                    ? UINT32_MAX : (uint32_t)config.requests;
    params->stripe_min_chunk  = config.stripe_min;
    params->stripe_max_chunks = (uint32_t)UTIL_MAX(config.stripe_max_chunks, 0);
    params->forbid_shared_memory = !config.shared_memory;
    params->chunk_order       = (inter_chunk_order_t)config.chunk_order;
    params->heartbeat_path    = (inter_heartbeat_path_t)config.heartbeat_path;
    params->progress          = (inter_progress_t)config.progress;
    params->same_node_network = config.same_node == 1;
    params->rate_control      = config.rate_control;
    util_config_release(&inter_config_table, &config);
    return STRATA_OK;
}

strata_status_t inter_engine_params_check(const inter_engine_params_t *p)
{
    if (p->world_size <= 0 || p->rank < 0 || p->rank >= p->world_size || p->num_rails < 0 ||
        p->num_rails > INTER_MAX_RAILS || p->msg_size == 0 || p->msg_size > (64u << 20) ||
        p->max_requests > INTER_MAX_REQUESTS ||
        p->heartbeat_ns == 0 || p->peer_timeout_ns <= p->heartbeat_ns ||
        p->stripe_min_chunk == 0 || p->stripe_min_chunk > (1ull << 40) ||
        p->stripe_max_chunks == 0 || p->transport[0] == '\0' ||
        (p->chunk_order != INTER_CHUNK_FORWARD && p->chunk_order != INTER_CHUNK_REVERSE) ||
        (p->heartbeat_path != INTER_HEARTBEAT_AUTO && p->heartbeat_path != INTER_HEARTBEAT_SEND) ||
        p->progress < INTER_PROGRESS_AUTO || p->progress > INTER_PROGRESS_CALLER ||
        p->local_size < 0) {
        UTIL_LOG_ERROR("engine: invalid parameters: rank %d of %d, %d rails (1..%d), message "
                       "size %zu, requests %u (1..%u), heartbeat %llu ns, peer timeout %llu ns "
                       "(must exceed the heartbeat), stripe %llu bytes x %u, chunk order %d, "
                       "heartbeat path %d, progress %d, %d local ranks",
                       p->rank, p->world_size, p->num_rails, INTER_MAX_RAILS, p->msg_size,
                       p->max_requests, INTER_MAX_REQUESTS,
                       (unsigned long long)p->heartbeat_ns, (unsigned long long)p->peer_timeout_ns,
                       (unsigned long long)p->stripe_min_chunk, p->stripe_max_chunks,
                       (int)p->chunk_order, (int)p->heartbeat_path, (int)p->progress,
                       p->local_size);
        return STRATA_ERR_INVALID;
    }
    return STRATA_OK;
}

int inter_engine_cores(void)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        return (int)UTIL_MAX(sysconf(_SC_NPROCESSORS_ONLN), 1);
    }
    return UTIL_MAX(CPU_COUNT(&set), 1);
}

/* Auto: caller where a polling thread per rank would have to share cores with the ranks
 * themselves, so that every hand-off would wait for the scheduler. */
bool inter_engine_progress_by_caller(const inter_engine_params_t *params, int cores)
{
    if (params->progress != INTER_PROGRESS_AUTO) {
        return params->progress == INTER_PROGRESS_CALLER;
    }
    return cores < 2 * UTIL_MAX(params->local_size, 1);
}

static bool inter_choose_progress(const inter_engine_params_t *params)
{
    int cores = inter_engine_cores(), ranks = UTIL_MAX(params->local_size, 1);
    bool caller = inter_engine_progress_by_caller(params, cores);

    if (params->progress == INTER_PROGRESS_AUTO) {
        UTIL_LOG_INFO("engine: progress by %s (auto: %d core%s for %d rank%s of this node)",
                      caller ? "the waiting threads" : "a progress thread", cores,
                      cores == 1 ? "" : "s", ranks, ranks == 1 ? "" : "s");
    }
    return caller;
}

/*
 * Waiting threads must not call into a transport that can stall forever on a dead peer: a
 * waiter stuck there never returns to report the failure. The progress thread takes the
 * calls instead; where it is stuck, waiters see its pulse stop and fail the peer
 * (inter_engine_wedged). STRATA_INTER_PROGRESS=caller is kept, with a warning.
 */
static void inter_avoid_caller_stalls(inter_engine_t *engine)
{
    if (!engine->caller_progress) {
        return;
    }
    INTER_FOR_EACH_RAIL(engine, r) {
        const inter_transport_t *tp = engine->rails[r].tp;

        if (!tp->stalls_on_dead_peer) {
            continue;
        }
        if (engine->params.progress == INTER_PROGRESS_CALLER) {
            UTIL_LOG_WARN("engine: STRATA_INTER_PROGRESS=caller over %s: a peer that dies inside "
                          "it can stall a waiting thread forever", tp->name);
            return;
        }
        UTIL_LOG_INFO("engine: progress by a progress thread after all: %s can stall forever "
                      "on a peer that died inside it, and only that thread may be left stuck",
                      tp->name);
        engine->caller_progress = false;
        return;
    }
}

bool inter_engine_caller_progress(const inter_engine_t *engine)
{
    return engine->caller_progress;
}

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
    pthread_mutex_destroy(&engine->watch_lock);
    pthread_mutex_destroy(&engine->barrier_lock);
    pthread_mutex_destroy(&engine->progress_lock);
    free(engine->ctrl);
    free(engine->beat_ops);
    free(engine->peer_info);
    free(engine->peer_failed);
    free(engine->last_seen);
    free(engine->heard);
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
