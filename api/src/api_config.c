/*
 * The registry of configuration tables, one per layer that has settings.
 */
#include "adaptive/adapt_moe.h"
#include "api/api.h"
#include "intra/intra.h"
#include "inter/engine.h"
#include "scheduler/sched.h"
#include "topo/topo.h"

#include <pthread.h>

/* Read by the Python package (python/strata), never by the library: in the registry so that
 * strata-info -c documents it and setting it draws no unknown-variable warning. */
typedef struct api_python_config {
    char *library_path;
} api_python_config_t;

static const util_config_field_t api_python_config_fields[] = {
    {.name = "LIBRARY_PATH", .default_value = "",
     .doc = "Python package only: libstrata's file, or a directory holding libstrata.so* "
            "(default: the dynamic loader's path).",
     .type = UTIL_CONFIG_STRING, .offset = offsetof(api_python_config_t, library_path)},
};

/* Set by strata-run for its ranks, read by strata-bench, never by the library: in the
 * registry for the same reasons. */
typedef struct api_run_config {
    uint64_t link_rate;
} api_run_config_t;

static const util_config_field_t api_run_config_fields[] = {
    {.name = "RUN_LINK_RATE", .default_value = "0",
     .doc = "Set by strata-run --link-rate for its ranks: the links' rate in bit/s, which "
            "strata-bench moe sets its steps against (0: not shaped).",
     .type = UTIL_CONFIG_SIZE, .offset = offsetof(api_run_config_t, link_rate)},
};

static const util_config_table_t api_run_config_table = {
    .layer       = "strata-run",
    .fields      = api_run_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(api_run_config_fields),
    .struct_size = sizeof(api_run_config_t),
};

static const util_config_table_t api_python_config_table = {
    .layer       = "python",
    .fields      = api_python_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(api_python_config_fields),
    .struct_size = sizeof(api_python_config_t),
};

const util_config_table_t *const api_config_tables[] = {
    &util_log_config_table,
    &topo_config_table,
    &intra_config_table,
    &inter_config_table,
    &ofi_config_table,
#ifdef STRATA_HAVE_VERBS
    &verbs_config_table,
#endif
#ifdef STRATA_HAVE_UCX
    &ucx_config_table,
#endif
#ifdef STRATA_HAVE_CHAOS
    &chaos_config_table,
#endif
    &sched_moe_config_table,
    &adapt_config_table,
    &api_bootstrap_config_table,
    &api_comm_config_table,
    &api_python_config_table,
    &api_run_config_table,
};

const size_t api_num_config_tables = UTIL_ARRAY_SIZE(api_config_tables);

static void api_config_warn_unknown_once(void)
{
    util_config_warn_unknown(api_config_tables, api_num_config_tables);
}

void api_config_warn_unknown(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, api_config_warn_unknown_once);
}
