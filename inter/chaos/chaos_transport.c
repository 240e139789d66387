/*
 * The chaos transport (STRATA_INTER_TRANSPORT=chaos:<inner>), built into test and fuzz builds
 * only: another transport (ofi, ucx or verbs) wrapped so that it behaves as the least
 * ordered fabric the transport interface allows (transport.h: reliable, unordered delivery).
 * Over tcp, which delivers everything in order, it shows whether the layers above rely on
 * an order that EFA's SRD or a multi-path fabric does not keep:
 *
 *   - every write, read, send and inject waits a random time (up to STRATA_CHAOS_DELAY)
 *     before it reaches the inner transport, so operations to the same peer overtake one
 *     another; writes and reads are also cut into up to four pieces, posted in any order;
 *   - a write with an immediate is cut the same way, but its immediate rides on its last
 *     piece, posted only once every other piece has completed: its data is always there
 *     before its immediate, never after (the one order the interface promises);
 *   - completions come back in random order, some held over to later polls and several
 *     reported at once; a post sometimes answers "busy".
 *
 * Sends and injects keep their order among themselves: the engine's messages are matched in
 * order, as they are on every transport strata has. Receives go straight to the inner
 * transport; the immediates that land are reported in random order, the messages in theirs.
 * Everything random comes from STRATA_CHAOS_SEED (logged at open; 0 takes one from the
 * clock), mixed with the rank and the rail, so a failing run can be replayed.
 *
 * This file: the settings, the ops tables, opening and closing, and the calls that pass
 * straight through; chaos_ops.c: the operations held back, and the completions.
 */
#include "inter/chaos/chaos_internal.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct chaos_config {
    int64_t  seed;
    uint64_t delay_ns;
} chaos_config_t;

static const util_config_field_t chaos_config_fields[] = {
    {.name = "CHAOS_SEED", .default_value = "0",
     .doc = "Test builds, chaos transport: the seed of its delays, splits and orders (0: one "
            "from the clock, logged).",
     .type = UTIL_CONFIG_INT, .offset = offsetof(chaos_config_t, seed)},
    {.name = "CHAOS_DELAY", .default_value = "200us",
     .doc = "Test builds, chaos transport: the longest an operation is held back.",
     .type = UTIL_CONFIG_TIME, .offset = offsetof(chaos_config_t, delay_ns)},
};

const util_config_table_t chaos_config_table = {
    .layer       = "inter chaos",
    .fields      = chaos_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(chaos_config_fields),
    .struct_size = sizeof(chaos_config_t),
};

/* --- What passes straight through ---------------------------------------------------------- */

static strata_status_t chaos_address(inter_transport_t *tp, void *addr, size_t *len_p)
{
    return chaos_of(tp)->inner_ops->address(chaos_of(tp)->inner, addr, len_p);
}

static strata_status_t chaos_insert_peer(inter_transport_t *tp, const void *addr, size_t len,
                                         uint64_t *peer_p)
{
    return chaos_of(tp)->inner_ops->insert_peer(chaos_of(tp)->inner, addr, len, peer_p);
}

static strata_status_t chaos_mem_register(inter_transport_t *tp, void *addr, size_t len,
                                          inter_mem_kind_t kind, int device,
                                          uint64_t requested_key, inter_tmr_t *mr)
{
    return chaos_of(tp)->inner_ops->mem_register(chaos_of(tp)->inner, addr, len, kind, device,
                                                 requested_key, mr);
}

static void chaos_mem_deregister(inter_transport_t *tp, inter_tmr_t *mr)
{
    chaos_of(tp)->inner_ops->mem_deregister(chaos_of(tp)->inner, mr);
}

/* --- Opening and closing ------------------------------------------------------------------- */

static void chaos_shutdown(inter_transport_t *tp)
{
    chaos_transport_t *ct = chaos_of(tp);

    pthread_mutex_lock(&ct->lock);
    ct->inner_ops->shutdown(ct->inner);
    chaos_free_held(ct);
    pthread_mutex_unlock(&ct->lock);
}

static void chaos_close(inter_transport_t *tp)
{
    chaos_transport_t *ct = chaos_of(tp);

    UTIL_LOG_INFO("chaos: %s: %llu operations handed over in %llu pieces, %llu of them after "
                  "a later one; completions held back on %llu polls", ct->inner->name,
                  (unsigned long long)ct->num_ops, (unsigned long long)ct->num_pieces,
                  (unsigned long long)ct->num_overtaken, (unsigned long long)ct->num_held_polls);
    ct->inner_ops->close(ct->inner);
    chaos_free_held(ct);
    free(ct->done.cqes);
    free(ct->msgs.cqes);
    pthread_mutex_destroy(&ct->lock);
    free(ct);
}

static strata_status_t chaos_read_config(chaos_config_t *config)
{
    strata_status_t status = util_config_read(&chaos_config_table, config);

    if (status == STRATA_OK && config->seed == 0) {
        config->seed = (int64_t)(util_clock_now_ns() ^ ((uint64_t)getpid() << 32));
    }
    return status;
}

static strata_status_t chaos_open(const inter_transport_ops_t *inner_ops,
                                  const inter_transport_params_t *params,
                                  inter_transport_t **tp_p)
{
    chaos_config_t config;
    chaos_transport_t *ct;
    strata_status_t status = chaos_read_config(&config);

    if (status != STRATA_OK) {
        return status;
    }
    if ((ct = calloc(1, sizeof(*ct))) == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    status = inner_ops->open(params, &ct->inner);
    if (status != STRATA_OK) {
        free(ct);
        return status;
    }
    ct->base           = *ct->inner;
    ct->base.ops       = NULL; /* set by the ops table's open */
    ct->inner_ops      = inner_ops;
    ct->max_delay_ns   = config.delay_ns;
    ct->rng            = (uint64_t)config.seed ^ ((uint64_t)params->rank << 20) ^
                         (uint64_t)(params->rail + 1);
    ct->waiting_tail   = &ct->waiting;
    pthread_mutex_init(&ct->lock, NULL);
    snprintf(ct->base.name, sizeof(ct->base.name), "chaos %.80s", ct->inner->name);
    UTIL_LOG_INFO("chaos: rail %d over %s, seed %lld (STRATA_CHAOS_SEED replays it), "
                  "operations held up to %llu us", params->rail, ct->inner->name,
                  (long long)config.seed, (unsigned long long)(config.delay_ns / 1000));
    *tp_p = &ct->base;
    return STRATA_OK;
}

static void chaos_probe(const inter_transport_ops_t *inner_ops,
                        const inter_transport_params_t *params, inter_probe_t *probe)
{
    inner_ops->probe(params, probe);
}

/*
 * One ops table per inner transport: the registry finds "chaos:ofi" as it finds "ofi". The
 * table's own functions know their inner transport; the rest reach it through the object.
 */
#define CHAOS_WRAP(inner)                                                                      \
    extern const inter_transport_ops_t inner##_transport_ops;                                  \
    extern const inter_transport_ops_t chaos_##inner##_transport_ops;                          \
    static void chaos_probe_##inner(const inter_transport_params_t *params,                    \
                                    inter_probe_t *probe)                                      \
    {                                                                                          \
        chaos_probe(&inner##_transport_ops, params, probe);                                    \
    }                                                                                          \
    static strata_status_t chaos_open_##inner(const inter_transport_params_t *params,          \
                                              inter_transport_t **tp_p)                        \
    {                                                                                          \
        strata_status_t status = chaos_open(&inner##_transport_ops, params, tp_p);             \
                                                                                               \
        if (status == STRATA_OK) {                                                             \
            (*tp_p)->ops = &chaos_##inner##_transport_ops;                                     \
        }                                                                                      \
        return status;                                                                         \
    }                                                                                          \
    const inter_transport_ops_t chaos_##inner##_transport_ops = {                              \
        .name           = "chaos:" #inner,                                                     \
        .config         = &chaos_config_table,                                                 \
        .probe          = chaos_probe_##inner,                                                 \
        .open           = chaos_open_##inner,                                                  \
        .shutdown       = chaos_shutdown,                                                      \
        .close          = chaos_close,                                                         \
        .address        = chaos_address,                                                       \
        .insert_peer    = chaos_insert_peer,                                                   \
        .mem_register   = chaos_mem_register,                                                  \
        .mem_deregister = chaos_mem_deregister,                                                \
        .post           = chaos_post,                                                          \
        .inject         = chaos_inject,                                                        \
        .post_recv      = chaos_post_recv,                                                     \
        .poll           = chaos_poll,                                                          \
        .preview        = NULL,                                                                \
    };

CHAOS_WRAP(ofi)
#ifdef STRATA_HAVE_UCX
CHAOS_WRAP(ucx)
#endif
#ifdef STRATA_HAVE_VERBS
CHAOS_WRAP(verbs)
#endif
