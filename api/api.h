/*
 * api: what the public layer offers the tools (the list of every layer's config table) and
 * its files each other (the bootstrap's failure check).
 */
#ifndef STRATA_API_API_H
#define STRATA_API_API_H

#include "util/util.h"

#include <strata/strata.h>

#include <stdbool.h>
#include <stddef.h>

extern const util_config_table_t api_bootstrap_config_table;
extern const util_config_table_t api_comm_config_table;

/** Every STRATA_* variable strata reads, table by table, for strata-info -c and warnings. */
extern const util_config_table_t *const api_config_tables[];
extern const size_t api_num_config_tables;

/** Asked while the built-in bootstrap waits in a collective: anything but STRATA_OK ends
 * the wait with that status (a communicator says STRATA_ERR_PEER_FAILED). */
typedef strata_status_t (*api_bootstrap_check_fn_t)(void *arg);

/**
 * Have the built-in TCP bootstrap ask check(arg) every UTIL_SOCK_CHECK_NS while it waits;
 * check NULL removes arg's check. Does nothing to a bootstrap the caller filled in.
 */
void api_bootstrap_set_check(strata_bootstrap_t *bootstrap, api_bootstrap_check_fn_t check,
                             void *arg);

/**
 * The first host of a Slurm host list ("node[01-04,07]-ib,gpu5" gives "node01-ib") into
 * host (size bytes); false for a list it cannot read or a name that does not fit.
 */
bool api_hostlist_first(const char *list, char *host, size_t size);

/**
 * The local rank the launcher that strata_bootstrap_from_env reads gave this process:
 * OMPI_COMM_WORLD_LOCAL_RANK (Open MPI), MPI_LOCALRANKID (MPICH/Hydra), LOCAL_RANK
 * (torchrun), SLURM_LOCALID (Slurm), each read only beside its launcher's rank and size.
 * false where that launcher gives none, where its rank and size are not rank and world
 * (the communicator's ranks are not the launcher's processes: a caller's own bootstrap),
 * or where it gives a value that is not a local rank (a warning names it). var_p: the
 * variable it came from.
 */
bool api_env_local_rank(int rank, int world, int *local_rank_p, const char **var_p);

/** Warn, once per process, about STRATA_* variables no table knows (naming the closest). */
void api_config_warn_unknown(void);

#endif
