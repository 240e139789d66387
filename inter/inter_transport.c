/*
 * The transport registry: the transports compiled in, and the choice among them
 * (STRATA_INTER_TRANSPORT). auto probes each one on this machine and takes the best score:
 * a transport whose own variables the user set, then verbs on a ConnectX-class device,
 * ofi on an EFA device, ucx where it is built, and ofi over tcp last.
 */
#include "inter/transport.h"
#include "util/util.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

extern const inter_transport_ops_t ofi_transport_ops;
#ifdef STRATA_HAVE_UCX
extern const inter_transport_ops_t ucx_transport_ops;
#endif
#ifdef STRATA_HAVE_VERBS
extern const inter_transport_ops_t verbs_transport_ops;
#endif
#ifdef STRATA_HAVE_CHAOS
extern const inter_transport_ops_t chaos_ofi_transport_ops;
#ifdef STRATA_HAVE_UCX
extern const inter_transport_ops_t chaos_ucx_transport_ops;
#endif
#ifdef STRATA_HAVE_VERBS
extern const inter_transport_ops_t chaos_verbs_transport_ops;
#endif
#endif

/* Auto's tie order: the first of equal scores wins. */
static const inter_transport_ops_t *const inter_transports[] = {
#ifdef STRATA_HAVE_VERBS
    &verbs_transport_ops,
#endif
    &ofi_transport_ops,
#ifdef STRATA_HAVE_UCX
    &ucx_transport_ops,
#endif
};

/* Test builds: each transport wrapped in the chaos transport (inter/chaos), by name only;
 * auto never picks one. */
static const inter_transport_ops_t *const inter_chaos_transports[] = {
#ifdef STRATA_HAVE_CHAOS
    &chaos_ofi_transport_ops,
#ifdef STRATA_HAVE_UCX
    &chaos_ucx_transport_ops,
#endif
#ifdef STRATA_HAVE_VERBS
    &chaos_verbs_transport_ops,
#endif
#endif
    NULL,
};

/* Every transport strata has, built here or not. */
static const char *const inter_transport_names[] = {"verbs", "ofi", "ucx"};

const inter_transport_ops_t *inter_transport_built(int index)
{
    if (index < 0 || index >= (int)UTIL_ARRAY_SIZE(inter_transports)) {
        return NULL;
    }
    return inter_transports[index];
}

const char *inter_transport_known(int index)
{
    if (index < 0 || index >= (int)UTIL_ARRAY_SIZE(inter_transport_names)) {
        return NULL;
    }
    return inter_transport_names[index];
}

const inter_transport_ops_t *inter_transport_find(const char *name)
{
    for (int i = 0; name != NULL && inter_transport_built(i) != NULL; ++i) {
        if (strcmp(inter_transport_built(i)->name, name) == 0) {
            return inter_transport_built(i);
        }
    }
    for (int i = 0; name != NULL && inter_chaos_transports[i] != NULL; ++i) {
        if (strcmp(inter_chaos_transports[i]->name, name) == 0) {
            return inter_chaos_transports[i];
        }
    }
    return NULL;
}

static bool inter_transport_is_known(const char *name)
{
    for (int i = 0; inter_transport_known(i) != NULL; ++i) {
        if (strcmp(inter_transport_known(i), name) == 0) {
            return true;
        }
    }
    return false;
}

/* "ofi, ucx": the names of the transports compiled in. */
static void inter_transport_built_list(char *out, size_t size)
{
    size_t used = 0;

    out[0] = '\0';
    for (int i = 0; inter_transport_built(i) != NULL && used < size; ++i) {
        used += (size_t)snprintf(out + used, size - used, "%s%s", i ? ", " : "",
                                 inter_transport_built(i)->name);
    }
}

/* The named transport, if it is built and can run here. */
static strata_status_t inter_transport_select_named(const char *choice,
                                                    const inter_transport_params_t *params,
                                                    const inter_transport_ops_t **ops_p,
                                                    char *why, size_t why_len)
{
    const inter_transport_ops_t *ops = inter_transport_find(choice);
    char built[64];
    inter_probe_t probe = {0};

    inter_transport_built_list(built, sizeof(built));
    if (ops == NULL) {
        bool known = inter_transport_is_known(choice);

        snprintf(why, why_len, "STRATA_INTER_TRANSPORT=%s: %s; this build has %s (or auto)",
                 choice, known ? "that transport is not built in" : "no such transport",
                 built);
        UTIL_LOG_ERROR("engine: %s", why);
        return known ? STRATA_ERR_UNSUPPORTED : STRATA_ERR_CONFIG;
    }
    ops->probe(params, &probe);
    if (probe.score <= INTER_PROBE_NONE) {
        snprintf(why, why_len, "STRATA_INTER_TRANSPORT=%s cannot run here: %s; this build "
                 "has %s (or auto)", choice, probe.why, built);
        UTIL_LOG_ERROR("engine: %s", why);
        return STRATA_ERR_UNSUPPORTED;
    }
    snprintf(why, why_len, "asked for: %s", probe.why);
    *ops_p = ops;
    return STRATA_OK;
}

strata_status_t inter_transport_select(const char *choice, const inter_transport_params_t *params,
                                       const inter_transport_ops_t **ops_p, char *why,
                                       size_t why_len)
{
    const inter_transport_ops_t *best = NULL;
    inter_probe_t probe, best_probe = {0};

    if (choice == NULL || strcmp(choice, "auto") != 0) {
        return inter_transport_select_named(choice ? choice : "", params, ops_p, why, why_len);
    }
    for (int i = 0; inter_transport_built(i) != NULL; ++i) {
        const inter_transport_ops_t *ops = inter_transport_built(i);

        probe = (inter_probe_t){0};
        ops->probe(params, &probe);
        UTIL_LOG_DEBUG("engine: transport %s scores %d: %s", ops->name, probe.score, probe.why);
        if (probe.score > best_probe.score) {
            best       = ops;
            best_probe = probe;
        }
    }
    if (best == NULL) {
        snprintf(why, why_len, "no transport can run here (auto); the last one probed: %s",
                 probe.why);
        UTIL_LOG_ERROR("engine: %s", why);
        return STRATA_ERR_UNSUPPORTED;
    }
    snprintf(why, why_len, "auto: %s", best_probe.why);
    *ops_p = best;
    return STRATA_OK;
}

const char *inter_peer_memory_module(inter_mem_kind_t kind)
{
    static const char *const cuda[] = {"/sys/kernel/mm/memory_peers/nv_mem/version",
                                       "/sys/module/nvidia_peermem/version", NULL};
    static const char *const rocm[] = {"/sys/kernel/mm/memory_peers/amdkfd/version", NULL};
    const char *const *paths = kind == INTER_MEM_CUDA ? cuda : kind == INTER_MEM_ROCM ? rocm
                                                                                      : NULL;

    for (int i = 0; paths != NULL && paths[i] != NULL; ++i) {
        if (access(paths[i], F_OK) == 0) {
            return paths[i];
        }
    }
    return NULL;
}
