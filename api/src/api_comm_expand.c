/*
 * strata_comm_expand: new processes join a running job. They cannot reach the existing
 * ranks' engines before they know them, so the join is a rendezvous: the communicator's
 * rank 0 listens for the built-in TCP bootstrap, its ranks keep their numbers, and the
 * joiners take the next ones. The new communicator owns that bootstrap.
 */
#include "api/src/api_comm.h"
#include "util/util.h"

STRATA_API strata_status_t strata_comm_expand(strata_comm_t *comm, int num_joiners,
                                              const char *root_addr, uint16_t port,
                                              strata_comm_t **expanded_p)
{
    strata_bootstrap_t *bootstrap = NULL;
    strata_config_t config;
    strata_status_t status;

    if (comm == NULL || expanded_p == NULL || root_addr == NULL || comm->bootstrap == NULL ||
        num_joiners < 0 || num_joiners > INT32_MAX - comm->size) {
        UTIL_LOG_ERROR("strata_comm_expand: %s",
                       comm == NULL || expanded_p == NULL || root_addr == NULL
                           ? "NULL communicator, address or result"
                       : comm->bootstrap == NULL ? "the communicator was destroyed"
                                                 : "a bad number of joining ranks");
        return STRATA_ERR_INVALID;
    }
    *expanded_p = NULL;
    status = strata_bootstrap_tcp_create(root_addr, port, comm->rank, comm->size + num_joiners,
                                         0, &bootstrap);
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("strata_comm_expand: the rendezvous of %d ranks and %d joining at %s:%u "
                       "failed: %s", comm->size, num_joiners, root_addr, (unsigned)port,
                       strata_status_string(status));
        return status;
    }
    config = api_comm_inherited_config(comm);
    status = api_comm_create(&config, bootstrap, false, expanded_p);
    if (status != STRATA_OK) {
        strata_bootstrap_destroy(bootstrap);
        return status;
    }
    (*expanded_p)->owned_bootstrap = bootstrap;
    UTIL_LOG_INFO("comm expand: %d ranks and %d joined", comm->size, num_joiners);
    return STRATA_OK;
}
