/*
 * The engine's settings: the STRATA_INTER_* variables into its params and their checks, and
 * who drives the transports (a progress thread, or the threads that wait).
 */
#include "inter_internal.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
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
            "ofi over tcp), ofi, ucx or verbs (test builds: also chaos:ofi and so on).",
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

bool inter_choose_progress(const inter_engine_params_t *params)
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
void inter_avoid_caller_stalls(inter_engine_t *engine)
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
