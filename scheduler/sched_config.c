/*
 * The MoE object's configuration: the STRATA_MOE_* variables, and the mode, route and
 * other choices resolved from them and the params.
 */
#include "sched_internal.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

typedef struct sched_moe_config {
    int      route;
    int64_t  flat_tokens;
    int64_t  spec_tokens;
    char    *mode;
    bool     pull_read;
    uint64_t timeout_ns;
    int      net_memory;
    int      flush;
    int      combine;
    int64_t  ring_slots;
    double   capacity_factor;
    int      exchange;
    uint64_t window_bytes;
} sched_moe_config_t;

static const char *const sched_route_names[] = {"auto", "flat", "hierarchical", NULL};
static const char *const sched_net_memory_names[] = {"auto", "heap", "bounce", NULL};
static const char *const sched_flush_names[] = {"auto", "device", "read", NULL};
static const char *const sched_combine_names[] = {"exact", "node-reduce", NULL};
static const char *const sched_exchange_names[] = {"auto", "worst-case", "streamed", NULL};

static const util_config_field_t sched_moe_config_fields[] = {
    {.name = "MOE_ROUTE", .default_value = "auto",
     .doc = "How tokens cross nodes: flat (straight to each rank), hierarchical (once per "
            "node, fanned out there), or auto (flat up to STRATA_MOE_FLAT_TOKENS tokens).",
     .type = UTIL_CONFIG_ENUM, .offset = offsetof(sched_moe_config_t, route),
     .enum_names = sched_route_names},
    {.name = "MOE_FLAT_TOKENS", .default_value = "128",
     .doc = "auto route: the largest max_tokens that still takes the flat route.",
     .type = UTIL_CONFIG_INT, .offset = offsetof(sched_moe_config_t, flat_tokens)},
    {.name = "MOE_SPEC_TOKENS", .default_value = "32",
     .doc = "Tokens per destination sent in round one of dispatch, before the counts are "
            "known; the rest follow in round two.",
     .type = UTIL_CONFIG_INT, .offset = offsetof(sched_moe_config_t, spec_tokens)},
    {.name = "MOE_MODE", .default_value = "push",
     .doc = "How experts move where the params leave it open: push, pull, adaptive (each "
            "expert's owner switches it from routing statistics), or fixed:<file> (a "
            "per-expert mask file, docs/adaptive.md).",
     .type = UTIL_CONFIG_STRING, .offset = offsetof(sched_moe_config_t, mode)},
    {.name = "MOE_PULL_READ", .default_value = "on",
     .doc = "Pull across nodes by RDMA read where the transport has it (off: ask the "
            "sender to push).",
     .type = UTIL_CONFIG_BOOL, .offset = offsetof(sched_moe_config_t, pull_read)},
    {.name = "MOE_TIMEOUT", .default_value = "60s",
     .doc = "Bound on each wait of a MoE step for live peers (a dead peer fails the step "
            "within STRATA_INTER_PEER_TIMEOUT).",
     .type = UTIL_CONFIG_TIME, .offset = offsetof(sched_moe_config_t, timeout_ns)},
    {.name = "MOE_NET_MEMORY", .default_value = "auto",
     .doc = "Where the network area lives: heap (the node's symmetric heap, registered with "
            "the transport: device memory on GPUs), bounce (a pinned host buffer the kernels "
            "write through), or auto (heap where the transport can register it).",
     .type = UTIL_CONFIG_ENUM, .offset = offsetof(sched_moe_config_t, net_memory),
     .enum_names = sched_net_memory_names},
    {.name = "MOE_FLUSH", .default_value = "auto",
     .doc = "How the network's writes into GPU memory are made visible to the kernels before "
            "they hear of them: device (the GPU's own flush, CUDA's "
            "cudaDeviceFlushGPUDirectRDMAWrites), read (a loopback RDMA read on each rail that "
            "wrote, which any verbs or libfabric NIC can make), or auto (device where the GPU "
            "has it, else read). Where neither can be made, the network area goes in the "
            "bounce buffer.",
     .type = UTIL_CONFIG_ENUM, .offset = offsetof(sched_moe_config_t, flush),
     .enum_names = sched_flush_names},
    {.name = "MOE_RING_SLOTS", .default_value = "1024",
     .doc = "Commands the work ring from the kernels to the proxy holds (a power of two, "
            "2..65536); kernels wait for room where more are in flight.",
     .type = UTIL_CONFIG_INT, .offset = offsetof(sched_moe_config_t, ring_slots)},
    {.name = "MOE_COMBINE", .default_value = "exact",
     .doc = "How combine sums a token's terms across nodes: exact (every term returns to the "
            "token's rank, summed in fp32 in k order) or node-reduce (hierarchical route: "
            "each node sums its terms and returns one row per token, fewer bytes; an object "
            "on the flat route or a GPU backend combines exactly).",
     .type = UTIL_CONFIG_ENUM, .offset = offsetof(sched_moe_config_t, combine),
     .enum_names = sched_combine_names},
    {.name = "MOE_CAPACITY_FACTOR", .default_value = "auto",
     .doc = "Where params.capacity is 0: the rows kept for each expert as this factor times "
            "its mean load (max_tokens x topk / experts, times the world size), rounded up; "
            "rows past it are dropped and reported (STRATA_ERR_CAPACITY). 0: the most an "
            "expert can receive, max_tokens times the world size, which never drops a row. "
            "auto: 2 on the streamed exchange, 0 on the worst-case one.",
     .type = UTIL_CONFIG_REAL, .offset = offsetof(sched_moe_config_t, capacity_factor)},
    {.name = "MOE_EXCHANGE", .default_value = "auto",
     .doc = "How a step's rows cross the network where params.exchange leaves it open: "
            "worst-case (areas for every peer's every token, one pass), streamed (rounds "
            "of a slice of every rank's tokens through areas of STRATA_MOE_WINDOW_BYTES), "
            "or auto (streamed for an object that receives exactly, which keeps every row "
            "either way; worst-case for one that receives into its experts' blocks, whose "
            "default capacity the exchange decides).",
     .type = UTIL_CONFIG_ENUM, .offset = offsetof(sched_moe_config_t, exchange),
     .enum_names = sched_exchange_names},
    {.name = "MOE_WINDOW_BYTES", .default_value = "256m",
     .doc = "Streamed exchange: the bytes per rank of a round's network areas (round one, "
            "overflow, two staging buffers, and two buffers each of the terms returned to "
            "peers and to this rank); a round takes as many of each rank's tokens as they "
            "hold, at least one.",
     .type = UTIL_CONFIG_SIZE, .offset = offsetof(sched_moe_config_t, window_bytes)},
};

const util_config_table_t sched_moe_config_table = {
    .layer       = "moe",
    .fields      = sched_moe_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(sched_moe_config_fields),
    .struct_size = sizeof(sched_moe_config_t),
};

/* The mode and its file, from the params or else STRATA_MOE_MODE. */
static strata_status_t sched_resolve_mode(sched_moe_t *moe, const char *text)
{
    static const char fixed[] = "fixed:";
    const char *file = moe->params.mode_file;
    sched_modes_t *m = &moe->modes;

    m->mode = moe->params.mode;
    if (moe->params.receive == STRATA_MOE_RECEIVE_EXACT) {
        m->mode = STRATA_MOE_MODE_PUSH; /* reported so; the intra tier moves rows its way */
        return STRATA_OK;
    }
    if (m->mode == STRATA_MOE_MODE_DEFAULT) {
        if (file != NULL) {
            UTIL_LOG_WARN("moe: mode_file %s is ignored: the mode comes from STRATA_MOE_MODE "
                          "(set params.mode to adaptive or fixed to use it)", file);
        }
        file = NULL;
        if (strcmp(text, "push") == 0 || strcmp(text, "pull") == 0) {
            m->mode = strcmp(text, "push") == 0 ? STRATA_MOE_MODE_PUSH : STRATA_MOE_MODE_PULL;
        } else if (strcmp(text, "adaptive") == 0) {
            m->mode = STRATA_MOE_MODE_ADAPTIVE;
        } else if (strncmp(text, fixed, sizeof(fixed) - 1) == 0 && text[sizeof(fixed) - 1]) {
            m->mode = STRATA_MOE_MODE_FIXED;
            file    = text + sizeof(fixed) - 1;
        } else {
            UTIL_LOG_ERROR("moe: STRATA_MOE_MODE=%s is not push, pull, adaptive or "
                           "fixed:<file>", text);
            return STRATA_ERR_CONFIG;
        }
    } else if (m->mode < STRATA_MOE_MODE_PUSH || m->mode > STRATA_MOE_MODE_FIXED ||
               (m->mode == STRATA_MOE_MODE_FIXED && file == NULL)) {
        UTIL_LOG_ERROR("moe: mode %d%s", (int)m->mode,
                       m->mode == STRATA_MOE_MODE_FIXED ? " needs a mode_file"
                                                        : " is not a strata_moe_mode_t");
        return STRATA_ERR_INVALID;
    }
    if (file != NULL && (m->mode_file = strdup(file)) == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    return STRATA_OK;
}

/* Whether the object streams: params.exchange, else STRATA_MOE_EXCHANGE (entry of
 * sched_exchange_names), whose auto streams the exact receive. That receive drops nothing
 * on either exchange, so only the memory differs (bounded by the window when streamed); the
 * blocks' default capacity follows the exchange (sched_choose), so theirs stays worst-case. */
static bool sched_exchange_streamed(const strata_moe_params_t *params, int variable)
{
    if (params->exchange != STRATA_MOE_EXCHANGE_DEFAULT) {
        return params->exchange == STRATA_MOE_EXCHANGE_STREAMED;
    }
    return variable == 0 ? params->receive == STRATA_MOE_RECEIVE_EXACT : variable == 2;
}

/* The choices the variables make for params: route, round one, combine, network memory. */
static strata_status_t sched_choose(const sched_moe_config_t *config,
                                    const strata_moe_params_t *params, sched_choices_t *c)
{
    if (config->spec_tokens < 0 || config->spec_tokens > INT32_MAX / 2 ||
        config->flat_tokens < 0) {
        UTIL_LOG_ERROR("moe: STRATA_MOE_SPEC_TOKENS=%" PRId64 " and STRATA_MOE_FLAT_TOKENS=%"
                       PRId64 " must not be negative", config->spec_tokens,
                       config->flat_tokens);
        return STRATA_ERR_CONFIG;
    }
    if (config->ring_slots < 2 || config->ring_slots > 65536 ||
        (config->ring_slots & (config->ring_slots - 1)) != 0) {
        UTIL_LOG_ERROR("moe: STRATA_MOE_RING_SLOTS=%" PRId64 " must be a power of two, "
                       "2..65536", config->ring_slots);
        return STRATA_ERR_CONFIG;
    }
    if (!isnan(config->capacity_factor) &&
        !(config->capacity_factor >= 0.0 && config->capacity_factor <= SCHED_MAX_LOAD_FACTOR)) {
        UTIL_LOG_ERROR("moe: STRATA_MOE_CAPACITY_FACTOR=%g must be 0..%.0f",
                       config->capacity_factor, SCHED_MAX_LOAD_FACTOR);
        return STRATA_ERR_CONFIG;
    }
    if (config->window_bytes == 0) {
        UTIL_LOG_ERROR("moe: STRATA_MOE_WINDOW_BYTES=0: a window holds at least one token");
        return STRATA_ERR_CONFIG;
    }
    c->ring_slots = (uint32_t)config->ring_slots;
    c->route = params->route;
    if (c->route == STRATA_MOE_ROUTE_DEFAULT) {
        c->route = config->route == 1 ? STRATA_MOE_ROUTE_FLAT
                   : config->route == 2 ? STRATA_MOE_ROUTE_HIERARCHICAL
                   : params->max_tokens <= config->flat_tokens ? STRATA_MOE_ROUTE_FLAT
                                                               : STRATA_MOE_ROUTE_HIERARCHICAL;
    }
    c->combine          = params->combine;
    c->combine_from_env = params->combine == STRATA_MOE_COMBINE_DEFAULT;
    if (c->combine == STRATA_MOE_COMBINE_DEFAULT) {
        c->combine = config->combine == 1 ? STRATA_MOE_COMBINE_NODE_REDUCE
                                          : STRATA_MOE_COMBINE_EXACT;
    }
    c->spec_tokens = (int)UTIL_MIN(config->spec_tokens, (int64_t)params->max_tokens);
    c->streamed    = sched_exchange_streamed(params, config->exchange);
    c->window_bytes = config->window_bytes;
    /* the streamed exchange's areas hold rounds, not the worst case: its experts' blocks
     * follow the load too, unless the variable asks otherwise */
    c->capacity_factor = !isnan(config->capacity_factor) ? config->capacity_factor
                         : c->streamed                   ? STRATA_MOE_STREAMED_CAPACITY_FACTOR
                                                         : 0.0;
    c->net_memory  = config->net_memory;
    c->flush       = (sched_flush_t)config->flush;
    return STRATA_OK;
}

strata_status_t sched_read_choices(const strata_moe_params_t *params, sched_choices_t *c)
{
    sched_moe_config_t config;
    strata_status_t status = util_config_read(&sched_moe_config_table, &config);

    if (status != STRATA_OK) {
        return status;
    }
    status = sched_choose(&config, params, c);
    util_config_release(&sched_moe_config_table, &config);
    return status;
}

strata_status_t sched_default_capacity_of(const strata_moe_params_t *params, int world_size,
                                          int *capacity_p)
{
    strata_moe_params_t p = *params;
    sched_choices_t choices;
    strata_status_t status = sched_read_choices(&p, &choices);

    if (status == STRATA_OK) {
        p.capacity = 0;
        status     = sched_default_capacity(&p, world_size, &choices);
    }
    if (status == STRATA_OK) {
        *capacity_p = p.capacity;
    }
    return status;
}

/* The mode, the route, round one's size and the other STRATA_MOE_* choices. */
strata_status_t sched_resolve_config(sched_moe_t *moe, sched_choices_t *c)
{
    sched_moe_config_t config;
    strata_status_t status = util_config_read(&sched_moe_config_table, &config);

    if (status != STRATA_OK) {
        return status;
    }
    status = sched_resolve_mode(moe, config.mode);
    if (status == STRATA_OK) {
        status = sched_choose(&config, &moe->params, c);
    }
    util_config_release(&sched_moe_config_table, &config);
    if (status != STRATA_OK) {
        return status;
    }
    moe->pull_read  = config.pull_read && inter_engine_has_read(moe->world.engine);
    moe->timeout_ns = config.timeout_ns;
    return STRATA_OK;
}

void sched_combine_fallback(sched_choices_t *c, const sched_geometry_t *geo,
                            const intra_device_ops_t *device)
{
    bool flat = geo->route != STRATA_MOE_ROUTE_HIERARCHICAL;
    bool host = device == NULL || device->memory == INTRA_MEMORY_HOST;

    if (!c->combine_from_env || c->combine != STRATA_MOE_COMBINE_NODE_REDUCE ||
        geo->num_peers == 0 || (!flat && host)) {
        return;
    }
    UTIL_LOG_INFO("moe: STRATA_MOE_COMBINE=node-reduce does not apply to this object (%s): it "
                  "combines exactly", flat ? "flat route" : device->name);
    c->combine = STRATA_MOE_COMBINE_EXACT;
}

/* Whether node-reduce combine can run where it was asked for; logs why not. */
strata_status_t sched_combine_supported(const sched_geometry_t *geo, strata_moe_combine_t combine,
                                        const intra_device_ops_t *device)
{
    if (combine != STRATA_MOE_COMBINE_NODE_REDUCE || geo->num_peers == 0) {
        return STRATA_OK; /* on one node every term is summed where its token is */
    }
    if (geo->route != STRATA_MOE_ROUTE_HIERARCHICAL) {
        UTIL_LOG_ERROR("moe: node-reduce combine needs the hierarchical route, and this "
                       "object's is flat (max_tokens %d): set STRATA_MOE_ROUTE=hierarchical "
                       "or params.route, or STRATA_MOE_COMBINE=exact", geo->max_tokens);
        return STRATA_ERR_UNSUPPORTED;
    }
    if (device != NULL && device->memory != INTRA_MEMORY_HOST) {
        UTIL_LOG_ERROR("moe: node-reduce combine runs on the host backend only in this "
                       "version, not on %s: set STRATA_MOE_COMBINE=exact", device->name);
        return STRATA_ERR_UNSUPPORTED;
    }
    return STRATA_OK;
}

strata_status_t sched_resolve_combine(sched_moe_t *moe)
{
    sched_geometry_t *geo = &moe->geo;
    strata_status_t status = sched_combine_supported(geo, moe->params.combine, moe->world.device);

    geo->node_reduce = status == STRATA_OK &&
                       moe->params.combine == STRATA_MOE_COMBINE_NODE_REDUCE &&
                       geo->num_peers > 0;
    return status;
}
