/*
 * The built-in bootstrap configured from a launcher's environment: rank and world size from
 * Open MPI, MPICH's Hydra, torchrun or Slurm (or a world of one), rank 0's address and port
 * from STRATA_BOOTSTRAP_*, torchrun's MASTER_* or Slurm's node list and ids; and the
 * launcher's local rank, which picks a communicator's GPU.
 */
#include "api/api.h"
#include "api/src/api_bootstrap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool api_hostlist_first(const char *list, char *host, size_t size)
{
    size_t prefix, digits;
    const char *open, *end, *suffix;
    int written;

    if (list == NULL || list[0] == '\0' || list[0] == ',' || list[0] == '[') {
        return false;
    }
    prefix = strcspn(list, ",[");
    if (list[prefix] != '[') { /* "host1,host2": the first name as it is */
        written = snprintf(host, size, "%.*s", (int)prefix, list);
        return written > 0 && (size_t)written < size;
    }
    open   = list + prefix + 1;
    digits = strspn(open, "0123456789");
    end    = strchr(open, ']');
    if (digits == 0 || end == NULL || (open[digits] != '-' && open[digits] != ',' &&
                                       open[digits] != ']')) {
        return false;
    }
    /* "node[01-04,07]-ib,gpu5": prefix, the first number as written (zeros kept), suffix. */
    suffix  = end + 1;
    written = snprintf(host, size, "%.*s%.*s%.*s", (int)prefix, list, (int)digits, open,
                       (int)strcspn(suffix, ","), suffix);
    return written > 0 && (size_t)written < size;
}

/* Slurm starts rank 0 on the first node of the step: its name is rank 0's address. */
static const char *api_slurm_root(char *host, size_t size)
{
    const char *list = util_config_foreign("SLURM_STEP_NODELIST");

    if (list == NULL) {
        list = util_config_foreign("SLURM_JOB_NODELIST");
    }
    if (list == NULL || !api_hostlist_first(list, host, size)) {
        UTIL_LOG_WARN("bootstrap: Slurm's node list '%s' names no first host", list ? list : "");
        return NULL;
    }
    return host;
}

/* A port every rank of a Slurm step derives alike: 20000 + (job id + step id) % 20000. */
static long api_slurm_port(void)
{
    const char *job  = util_config_foreign("SLURM_JOB_ID");
    const char *step = util_config_foreign("SLURM_STEP_ID");
    long id = (job ? strtol(job, NULL, 10) : 0) % 20000 + (step ? strtol(step, NULL, 10) : 0);

    return job == NULL ? 0 : 20000 + (id < 0 ? -id : id) % 20000;
}

/* What each launcher tells a process about its place in the job. */
typedef struct api_launcher {
    const char *rank;       /* rank in the job */
    const char *size;       /* ranks in the job */
    const char *local_rank; /* rank among the job's processes on this host */
    const char *name;
} api_launcher_t;

/* mpirun, Hydra and torchrun inside a Slurm allocation inherit SLURM_PROCID: theirs win. */
static const api_launcher_t api_launchers[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "Open MPI"},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPICH/Hydra"},
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun"},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "Slurm"},
};

/* The first launcher whose rank and size are both set; NULL where none is. */
static const api_launcher_t *api_env_launcher(void)
{
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(api_launchers); ++i) {
        if (util_config_foreign(api_launchers[i].rank) != NULL &&
            util_config_foreign(api_launchers[i].size) != NULL) {
            return &api_launchers[i];
        }
    }
    return NULL;
}

/* First of the launchers' variable pairs that is set; none: a world of one. */
static bool api_env_rank(int *rank_p, int *world_p, const char **source_p)
{
    const api_launcher_t *launcher = api_env_launcher();
    const char *rank, *world;
    char *end1, *end2;
    long r, w;

    if (launcher == NULL) {
        UTIL_LOG_INFO("bootstrap: no launcher variables (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/"
                      "SIZE, RANK/WORLD_SIZE or SLURM_PROCID/NTASKS): running as rank 0 of 1");
        *rank_p   = 0;
        *world_p  = 1;
        *source_p = "no launcher";
        return true;
    }
    rank  = util_config_foreign(launcher->rank);
    world = util_config_foreign(launcher->size);
    r     = strtol(rank, &end1, 10);
    w     = strtol(world, &end2, 10);
    if (*end1 != '\0' || *end2 != '\0' || rank[0] == '\0' || world[0] == '\0' || w <= 0 ||
        w > INT32_MAX || r < 0 || r >= w) {
        UTIL_LOG_ERROR("bootstrap: %s=%s %s=%s is not a rank of a job", launcher->rank, rank,
                       launcher->size, world);
        return false;
    }
    *rank_p   = (int)r;
    *world_p  = (int)w;
    *source_p = launcher->name;
    return true;
}

/* Whether the launcher's rank and size variables say rank of world: the communicator's
 * ranks are the launcher's processes (not, say, threads of one process a caller's own
 * bootstrap made ranks of). */
static bool api_env_is_launcher_rank(const api_launcher_t *launcher, int rank, int world)
{
    const char *r = util_config_foreign(launcher->rank);
    const char *w = util_config_foreign(launcher->size);
    char *end1, *end2;
    long r_value = strtol(r, &end1, 10), w_value = strtol(w, &end2, 10);

    return r[0] != '\0' && w[0] != '\0' && *end1 == '\0' && *end2 == '\0' &&
           r_value == rank && w_value == world;
}

bool api_env_local_rank(int rank, int world, int *local_rank_p, const char **var_p)
{
    const api_launcher_t *launcher = api_env_launcher();
    const char *value = launcher ? util_config_foreign(launcher->local_rank) : NULL;
    char *end;
    long local;

    if (value == NULL || !api_env_is_launcher_rank(launcher, rank, world)) {
        return false;
    }
    local = strtol(value, &end, 10);
    if (value[0] == '\0' || *end != '\0' || local < 0 || local > INT32_MAX) {
        UTIL_LOG_WARN("comm: %s=%s is not a local rank: the node grouping picks the GPU",
                      launcher->local_rank, value);
        return false;
    }
    *local_rank_p = (int)local;
    *var_p        = launcher->local_rank;
    return true;
}

STRATA_API strata_status_t strata_bootstrap_from_env(strata_bootstrap_t **bootstrap_p)
{
    api_bootstrap_config_t config;
    const char *addr, *master_port, *source;
    char slurm_host[256];
    strata_status_t status;
    int rank, world;
    long port;

    if (!api_env_rank(&rank, &world, &source)) {
        return STRATA_ERR_INVALID;
    }
    status = util_config_read(&api_bootstrap_config_table, &config);
    if (status != STRATA_OK) {
        return status;
    }
    addr        = config.addr[0] ? config.addr : util_config_foreign("MASTER_ADDR");
    master_port = util_config_foreign("MASTER_PORT");
    port        = config.port ? (long)config.port
                              : (master_port ? strtol(master_port, NULL, 10) + 1 : 0);
    if (strcmp(source, "Slurm") == 0 && world > 1) {
        if (addr == NULL || addr[0] == '\0') {
            addr = api_slurm_root(slurm_host, sizeof(slurm_host));
        }
        port = port > 0 ? port : api_slurm_port();
    }
    if (world > 1 && (addr == NULL || addr[0] == '\0' || port <= 0 || port > 65535)) {
        UTIL_LOG_ERROR("bootstrap: rank %d of %d (%s) needs rank 0's address and port: set "
                       "STRATA_BOOTSTRAP_ADDR and STRATA_BOOTSTRAP_PORT (or MASTER_ADDR and "
                       "MASTER_PORT; under Slurm, SLURM_STEP_NODELIST and SLURM_JOB_ID give "
                       "them)", rank, world, source);
        status = STRATA_ERR_INVALID;
    } else {
        status = strata_bootstrap_tcp_create(addr ? addr : "", (uint16_t)port, rank, world,
                                             config.timeout_ns / UTIL_NSEC_PER_MSEC,
                                             bootstrap_p);
    }
    util_config_release(&api_bootstrap_config_table, &config);
    return status;
}
