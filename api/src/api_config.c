/*
 * The registry of configuration tables, one per layer that has settings.
 */
#include "adaptive/adapt.h"
#include "api/api.h"
#include "intra/intra.h"
#include "inter/engine.h"
#include "scheduler/sched.h"
#include "topo/topo.h"

#include <pthread.h>

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
    &sched_moe_config_table,
    &adapt_config_table,
    &api_bootstrap_config_table,
    &api_comm_config_table,
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
