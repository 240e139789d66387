/*
 * The communicator: who is where (nodes, local ranks), which device backend and GPU each
 * rank uses, and which NICs that GPU drives.
 */
#include "api/api.h"
#include "api_comm.h"
#include "api_gpu.h"
#include "intra/intra.h"
#include "topo/topo.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


typedef struct api_comm_config {
    char   *node_name;
    int64_t gpu;
} api_comm_config_t;

static const util_config_field_t api_comm_config_fields[] = {
    {.name = "NODE_NAME", .default_value = "",
     .doc = "Name of this rank's node: ranks with equal names share a node (default: the "
            "host name).",
     .type = UTIL_CONFIG_STRING, .offset = offsetof(api_comm_config_t, node_name)},
    {.name = "GPU", .default_value = "-1",
     .doc = "The GPU this rank drives, among those the runtime shows the process (-1: the "
            "one current on the thread that creates the communicator, else the launcher's "
            "local rank's turn).",
     .type = UTIL_CONFIG_INT, .offset = offsetof(api_comm_config_t, gpu)},
};

const util_config_table_t api_comm_config_table = {
    .layer       = "comm",
    .fields      = api_comm_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(api_comm_config_fields),
    .struct_size = sizeof(api_comm_config_t),
};


/* This rank's node name: config->node_name, STRATA_NODE_NAME, else the host name; true
 * where it was given (a simulated node, say) rather than the host's. */
static bool api_comm_node_name(const strata_config_t *config, char *name)
{
    api_comm_config_t env;
    bool given;

    name[0] = '\0';
    if (config && (config->field_mask & STRATA_CONFIG_FIELD_NODE_NAME) && config->node_name) {
        snprintf(name, API_NODE_NAME_LEN, "%s", config->node_name);
    } else if (util_config_read(&api_comm_config_table, &env) == STRATA_OK) {
        snprintf(name, API_NODE_NAME_LEN, "%s", env.node_name);
        util_config_release(&api_comm_config_table, &env);
    }
    given = name[0] != '\0';
    if (name[0] == '\0' && gethostname(name, API_NODE_NAME_LEN - 1) != 0) {
        snprintf(name, API_NODE_NAME_LEN, "localhost");
    }
    name[API_NODE_NAME_LEN - 1] = '\0';
    return given;
}

/* STRATA_TOPO_FILE (or config->topo_file), with STRATA_TOPO_OVERLAY applied when set. */
static strata_status_t api_comm_open_topology(strata_comm_t *comm, const strata_config_t *config)
{
    const topo_overlay_report_t *overlay;
    const char *file = NULL;
    char err[UTIL_REASON_LEN];
    strata_status_t status;

    if (config && (config->field_mask & STRATA_CONFIG_FIELD_TOPO_FILE)) {
        file = config->topo_file;
    }
    status = topo_open(file, &comm->topo, err);
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("topology: %s", err);
        return status;
    }
    overlay = topo_overlay(comm->topo);
    if (overlay != NULL) {
        UTIL_LOG_INFO("topology: overlay %s applied by PCI bus id: %d GPUs and %d NICs matched, "
                      "%d of its devices not on this machine", overlay->path,
                      overlay->matched_gpus, overlay->matched_nics, overlay->unmatched);
    }
    return topo_rail_plan_create(comm->topo, &comm->plan);
}

static void api_comm_fill_info(const strata_comm_t *comm, const char *node_name,
                               api_rank_info_t *info)
{
    memset(info, 0, sizeof(*info));
    snprintf(info->node_name, sizeof(info->node_name), "%s", node_name);
    info->pid      = (int32_t)getpid();
    info->num_gpus = topo_num_gpus(comm->topo);
    for (int n = 0; n < topo_num_nics(comm->topo); ++n) {
        info->num_rdma_nics += topo_nic_is_rdma(topo_nic(comm->topo, n));
    }
}

bool api_rank_info_valid(const api_rank_info_t *info)
{
    return memchr(info->node_name, '\0', sizeof(info->node_name)) != NULL &&
           info->node_name[0] != '\0' && info->num_gpus >= 0 && info->num_rdma_nics >= 0;
}

/* Nodes numbered in order of their first rank; local ranks in rank order within a node. */
static strata_status_t api_comm_map_nodes(strata_comm_t *comm, const api_rank_info_t *infos)
{
    comm->rank_node  = calloc((size_t)comm->size, sizeof(int));
    comm->rank_local = calloc((size_t)comm->size, sizeof(int));
    comm->node_size  = calloc((size_t)comm->size, sizeof(int));
    comm->all_ranks  = calloc((size_t)comm->size, sizeof(int));
    if (!comm->rank_node || !comm->rank_local || !comm->node_size || !comm->all_ranks) {
        return STRATA_ERR_NO_MEMORY;
    }
    for (int r = 0; r < comm->size; ++r) {
        if (!api_rank_info_valid(&infos[r])) {
            UTIL_LOG_ERROR("comm: rank %d sent malformed rank information (a node name "
                           "without an end, or negative counts)", r);
            return STRATA_ERR_BOOTSTRAP;
        }
        comm->all_ranks[r] = r;
    }
    for (int r = 0; r < comm->size; ++r) {
        int node = -1;

        for (int q = 0; q < r && node < 0; ++q) {
            if (strcmp(infos[q].node_name, infos[r].node_name) == 0) {
                node = comm->rank_node[q];
            }
        }
        if (node < 0) {
            node = comm->num_nodes++;
        }
        comm->rank_node[r]  = node;
        comm->rank_local[r] = comm->node_size[node]++;
        if (infos[r].num_gpus != infos[0].num_gpus && comm->rank == 0) {
            UTIL_LOG_WARN("rank %d sees %d GPUs, rank 0 sees %d: topologies differ", r,
                          infos[r].num_gpus, infos[0].num_gpus);
        }
    }
    return STRATA_OK;
}

/* Whether the engine has declared a rank failed: STRATA_ERR_PEER_FAILED, logged once. */
static strata_status_t api_comm_check_peers(void *arg)
{
    strata_comm_t *comm = arg;

    for (int r = 0; comm->engine != NULL && r < comm->size; ++r) {
        if (r != comm->rank && api_peer_failed(comm, r)) {
            if (!comm->peer_failure_logged) {
                comm->peer_failure_logged = true;
                UTIL_LOG_ERROR("comm: rank %d has failed: no collective of this communicator "
                               "can complete", r);
            }
            return STRATA_ERR_PEER_FAILED;
        }
    }
    return STRATA_OK;
}

strata_status_t api_comm_allgather(strata_comm_t *comm, const void *send_buf, void *recv_buf,
                                   size_t size)
{
    strata_status_t status = api_comm_check_peers(comm);

    if (comm->bootstrap == NULL) {
        UTIL_LOG_ERROR("comm: an exchange among the ranks after strata_comm_destroy");
        return STRATA_ERR_INVALID;
    }
    if (status == STRATA_OK) {
        status = comm->bootstrap->allgather(comm->bootstrap->ctx, send_buf, recv_buf, size);
    }
    if (status != STRATA_OK && status != STRATA_ERR_PEER_FAILED && comm->engine != NULL) {
        /* Rank 0 may have given up on a failed rank a little before our engine declares it:
         * give the engine its heartbeat bound to say so, as every rank's answer should. */
        uint64_t until = util_clock_now_ns() + inter_engine_peer_timeout_ns(comm->engine);

        while (api_comm_check_peers(comm) == STRATA_OK && util_clock_now_ns() < until) {
            usleep(10000);
        }
        if (api_comm_check_peers(comm) != STRATA_OK) {
            status = STRATA_ERR_PEER_FAILED;
        }
    }
    return status;
}

strata_status_t api_comm_allgather_fn(void *comm, const void *send_buf, void *recv_buf,
                                      size_t size)
{
    return api_comm_allgather(comm, send_buf, recv_buf, size);
}

strata_status_t api_comm_agree(strata_comm_t *comm, strata_status_t mine, const char *what)
{
    int32_t *all = calloc((size_t)comm->size, sizeof(int32_t));
    int32_t local = (int32_t)mine;
    strata_status_t status;

    if (all == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    status = api_comm_allgather(comm, &local, all, sizeof(local));
    for (int r = 0; r < comm->size && status == STRATA_OK; ++r) {
        if (all[r] != STRATA_OK) {
            if (r != comm->rank) {
                UTIL_LOG_ERROR("%s: rank %d failed: %s", what, r,
                               strata_status_string((strata_status_t)all[r]));
            }
            status = (strata_status_t)all[r];
        }
    }
    free(all);
    return status;
}

/*
 * The local rank that picks this rank's GPU: the launcher's, where it gives one, since it
 * knows which processes share a host even where their node names say otherwise (containers
 * with their own host names, STRATA_NODE_NAME set by hand); else the node grouping's. The
 * grouping still decides which ranks the intra-node tier joins, so a disagreement is worth
 * a warning.
 */
static int api_comm_gpu_local_rank(const strata_comm_t *comm)
{
    int grouped = strata_comm_local_rank(comm), launcher;
    const char *var;

    if (!api_env_local_rank(comm->rank, comm->size, &launcher, &var)) {
        return grouped;
    }
    if (comm->node_name_given) {
        /* Names set on purpose (simulated nodes): a launcher counting the host's ranks
         * disagrees by design. Said once, for the job, not as a warning on every rank. */
        if (comm->rank == 0) {
            UTIL_LOG_INFO("comm: node names are given (STRATA_NODE_NAME or the config): each "
                          "rank's GPU follows the launcher's %s, which may differ from its "
                          "local rank among the ranks of its node name", var);
        }
    } else if (launcher != grouped) {
        UTIL_LOG_WARN("comm: rank %d: the launcher's %s=%d differs from local rank %d of %d "
                      "that grouping by node name gives: the launcher's picks the GPU, the "
                      "grouping which ranks share node memory (do the host names differ "
                      "within a host?)", comm->rank, var, launcher, grouped,
                      strata_comm_local_size(comm));
    }
    return launcher;
}

/*
 * The backend of the node's GPUs and this rank's GPU (api_gpu.c), chosen by the launcher's
 * local rank or the node grouping's (api_comm_gpu_local_rank); without a GPU backend, the
 * host one, and the topology's GPUs in turn for the rails. Agreed by every rank: one
 * that cannot use its GPU fails the communicator everywhere instead of leaving the others
 * waiting for it.
 */
/* The GPU asked for: config->gpu where set, else STRATA_GPU; -1: none. */
static strata_status_t api_comm_requested_gpu(const strata_config_t *config, int *gpu_p)
{
    api_comm_config_t env;
    strata_status_t status;

    if (config && (config->field_mask & STRATA_CONFIG_FIELD_GPU)) {
        *gpu_p = config->gpu < 0 ? -1 : config->gpu;
        return STRATA_OK;
    }
    status = util_config_read(&api_comm_config_table, &env);
    if (status != STRATA_OK) {
        return status;
    }
    *gpu_p = env.gpu < 0 || env.gpu > INT32_MAX ? -1 : (int)env.gpu;
    util_config_release(&api_comm_config_table, &env);
    return STRATA_OK;
}

/*
 * The GPU current on the calling thread before the communicator picks its own: current
 * again once creation is done (api_gpu_leave), where the thread had chosen one.
 */
static void api_comm_caller_gpu(const strata_comm_t *comm, api_gpu_scope_t *caller)
{
    const intra_device_ops_t *ops = comm->device;
    bool chosen = false;
    int current = -1;

    *caller = (api_gpu_scope_t){.ops = ops, .ordinal = -1, .previous = -1};
    if (ops->device_chosen != NULL && ops->device_chosen(&current, &chosen) == STRATA_OK &&
        chosen) {
        caller->previous = current;
    }
}

static strata_status_t api_comm_pick_device(strata_comm_t *comm, const strata_config_t *config,
                                            api_gpu_scope_t *caller)
{
    char reason[UTIL_REASON_LEN] = "";
    api_gpu_request_t request = {.local_rank = api_comm_gpu_local_rank(comm)};
    api_gpu_t gpu = {.topo_gpu = -1, .ordinal = -1};
    strata_status_t status;

    comm->device      = api_gpu_backend(comm->topo);
    comm->gpu         = -1;
    comm->gpu_ordinal = -1;
    api_comm_caller_gpu(comm, caller);
    status = api_comm_requested_gpu(config, &request.ordinal);
    if (status == STRATA_OK) {
        status = api_gpu_pick(comm->device, comm->topo, &request, &gpu, reason);
        if (status != STRATA_OK) {
            UTIL_LOG_ERROR("comm: rank %d cannot use its GPU: %s", comm->rank, reason);
        }
    }
    if (status == STRATA_OK) {
        comm->gpu         = gpu.topo_gpu;
        comm->gpu_ordinal = gpu.ordinal;
        caller->ordinal   = gpu.ordinal;
    }
    return api_comm_agree(comm, status, "comm: choosing GPUs");
}

/*
 * The proxy thread's first act: make the rank's GPU its own. A provider that copies into
 * device memory (emulated RMA, tcp or shm with FI_HMEM) calls the GPU runtime from it, which
 * would otherwise open a context on GPU 0 in every rank.
 */
static void api_comm_proxy_start(void *ctx)
{
    const strata_comm_t *comm = ctx;
    int previous;

    if (comm->gpu_ordinal >= 0 && comm->device->device_use != NULL) {
        (void)comm->device->device_use(comm->gpu_ordinal, &previous); /* logged if it fails */
    }
}

/* The engine's way to GPU memory where no peer-memory module pins it: a dma-buf of it. */
static strata_status_t api_comm_export_dmabuf(void *ctx, void *addr, size_t len, int *fd_p,
                                              uint64_t *offset_p)
{
    const strata_comm_t *comm = ctx;
    char reason[UTIL_REASON_LEN] = "";
    strata_status_t status = comm->device->mem_export_dmabuf(addr, len, fd_p, offset_p, reason);

    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("comm: no dma-buf of %zu bytes of GPU memory for the NIC: %s", len,
                       reason);
    }
    return status;
}

/* The inter-node engine: one rail per NIC the rail plan gives this GPU, addresses exchanged. */
static strata_status_t api_comm_start_engine(strata_comm_t *comm)
{
    inter_engine_params_t params;
    char *mine = NULL, *all = NULL;
    strata_status_t status;
    size_t blob_size;

    status = inter_engine_params_from_env(&params);
    if (status != STRATA_OK) {
        return status;
    }
    params.rank       = comm->rank;
    params.world_size = comm->size;
    params.local_size = strata_comm_local_size(comm);
    params.rank_node  = comm->rank_node;
    api_gpu_engine_params(comm->device, comm->topo, comm->plan, comm->gpu, &params);
    params.proxy_start_fn  = api_comm_proxy_start;
    params.proxy_start_ctx = comm;
    if (comm->device->mem_export_dmabuf != NULL) {
        params.dmabuf_fn  = api_comm_export_dmabuf;
        params.dmabuf_ctx = comm;
    }
    status = inter_engine_create(&params, &comm->engine);
    if (status != STRATA_OK) {
        return status;
    }
    blob_size = inter_engine_address_size(comm->engine);
    mine      = malloc(blob_size);
    all       = malloc(blob_size * (size_t)comm->size);
    if (mine == NULL || all == NULL) {
        status = STRATA_ERR_NO_MEMORY;
    } else {
        status = inter_engine_address(comm->engine, mine);
    }
    if (status == STRATA_OK) {
        status = comm->bootstrap->allgather(comm->bootstrap->ctx, mine, all, blob_size);
    }
    if (status == STRATA_OK) {
        /* Agreed: a rank returns only once every rank has heard from all of its peers, so
         * none leaves (or exits) while another is still waiting to hear from it. */
        status = api_comm_agree(comm, inter_engine_connect(comm->engine, all),
                                "comm: connecting the engines");
    }
    if (status == STRATA_OK) {
        /* From now on heartbeats run: a rank that stops ends every wait of the built-in
         * bootstrap within the heartbeat bound, not at its timeout. */
        api_bootstrap_set_check(comm->bootstrap, api_comm_check_peers, comm);
    }
    free(mine);
    free(all);
    return status;
}

STRATA_API strata_status_t strata_comm_create(const strata_config_t *config,
                                              strata_bootstrap_t *bootstrap,
                                              strata_comm_t **comm_p)
{
    return api_comm_create(config, bootstrap, true, comm_p);
}

strata_status_t api_comm_create(const strata_config_t *config, strata_bootstrap_t *bootstrap,
                                bool log_as_rank, strata_comm_t **comm_p)
{
    char node_name[API_NODE_NAME_LEN];
    api_rank_info_t info, *infos = NULL;
    api_gpu_scope_t caller;
    strata_status_t status;
    strata_comm_t *comm;

    if (bootstrap == NULL || comm_p == NULL || bootstrap->allgather == NULL ||
        bootstrap->barrier == NULL || bootstrap->world_size <= 0 || bootstrap->rank < 0 ||
        bootstrap->rank >= bootstrap->world_size) {
        UTIL_LOG_ERROR("comm: invalid bootstrap (rank %d of %d, callbacks %s)",
                       bootstrap ? bootstrap->rank : -1, bootstrap ? bootstrap->world_size : 0,
                       (bootstrap && bootstrap->allgather && bootstrap->barrier) ? "set"
                                                                                 : "missing");
        return STRATA_ERR_INVALID;
    }
    if (config && (config->field_mask & STRATA_CONFIG_FIELD_LOG_LEVEL)) {
        if ((int)config->log_level < STRATA_LOG_LEVEL_ERROR ||
            config->log_level > STRATA_LOG_LEVEL_TRACE) {
            UTIL_LOG_ERROR("comm: log_level %d is not a strata_log_level_t (%d..%d)",
                           (int)config->log_level, STRATA_LOG_LEVEL_ERROR,
                           STRATA_LOG_LEVEL_TRACE);
            return STRATA_ERR_INVALID;
        }
        util_log_set_level(config->log_level);
    }
    if (log_as_rank) {
        util_log_set_rank(bootstrap->rank);
    }
    api_config_warn_unknown();

    comm = calloc(1, sizeof(*comm));
    if (comm == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    atomic_init(&comm->refs, 1); /* the caller's; each MoE object adds its own */
    atomic_init(&comm->split_children, 0);
    atomic_init(&comm->engine_sharers, 0);
    comm->moe_imm_base = STRATA_MOE_IMM_BASE;
    comm->gpu         = -1;
    comm->gpu_ordinal = -1;
    comm->bootstrap = bootstrap;
    comm->rank      = bootstrap->rank;
    comm->size      = bootstrap->world_size;
    comm->node_name_given = api_comm_node_name(config, node_name);
    snprintf(comm->node_name, sizeof(comm->node_name), "%s", node_name);

    status = api_comm_open_topology(comm, config);
    if (status != STRATA_OK) {
        goto err_comm;
    }
    infos = calloc((size_t)comm->size, sizeof(*infos));
    if (infos == NULL) {
        status = STRATA_ERR_NO_MEMORY;
        goto err_comm;
    }
    api_comm_fill_info(comm, node_name, &info);
    status = bootstrap->allgather(bootstrap->ctx, &info, infos, sizeof(info));
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("comm: exchanging rank information failed: %s",
                       strata_status_string(status));
        goto err_comm;
    }
    status = api_comm_map_nodes(comm, infos);
    if (status != STRATA_OK) {
        goto err_comm;
    }
    status = api_comm_pick_device(comm, config, &caller);
    if (status == STRATA_OK) {
        status = api_comm_start_engine(comm);
    }
    api_gpu_leave(&caller); /* the caller's GPU is current again */
    if (status != STRATA_OK) {
        goto err_comm;
    }
    UTIL_LOG_INFO("comm: rank %d of %d on node %d (%s), local rank %d of %d, device %s, GPU %d, "
                  "%d rails", comm->rank, comm->size, strata_comm_node(comm), node_name,
                  strata_comm_local_rank(comm), strata_comm_local_size(comm), comm->device->name,
                  comm->gpu, strata_comm_num_rails(comm));
    free(infos);
    *comm_p = comm;
    return STRATA_OK;

err_comm:
    free(infos);
    strata_comm_destroy(comm);
    return status;
}

/* The teardown proper, once neither the caller nor a MoE object holds the communicator. */
static void api_comm_free(strata_comm_t *comm)
{
    api_gpu_scope_t scope;

    strata_comm_t *owner = comm->engine_owner;

    api_bootstrap_set_check(comm->bootstrap, NULL, comm);
    if (owner == NULL) {
        api_gpu_enter(comm->device, comm->gpu_ordinal, &scope); /* registered GPU memory goes */
        inter_engine_destroy(comm->engine); /* before the topology its rail names come from */
        api_gpu_leave(&scope);
        topo_rail_plan_destroy(comm->plan);
        topo_destroy(comm->topo);
    }
    free(comm->rank_node);
    free(comm->rank_local);
    free(comm->node_size);
    free(comm->all_ranks);
    free(comm->engine_ranks);
    free(comm->parent_ranks);
    free(comm->rank_of_engine);
    free(comm);
    if (owner != NULL) { /* the engine, topology and plan it lent */
        atomic_fetch_sub_explicit(&owner->engine_sharers, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&owner->split_children, 1, memory_order_relaxed);
        api_comm_release(owner);
    }
}

void api_comm_hold(strata_comm_t *comm)
{
    atomic_fetch_add_explicit(&comm->refs, 1, memory_order_relaxed);
}

void api_comm_release(strata_comm_t *comm)
{
    /* acq_rel: every holder's last use of the communicator happens before its teardown. */
    if (atomic_fetch_sub_explicit(&comm->refs, 1, memory_order_acq_rel) == 1) {
        api_comm_free(comm);
    }
}

STRATA_API void strata_comm_destroy(strata_comm_t *comm)
{
    int objects;

    if (comm == NULL) {
        return;
    }
    objects = atomic_load_explicit(&comm->refs, memory_order_relaxed) - 1 -
              atomic_load_explicit(&comm->split_children, memory_order_relaxed);
    if (objects > 0) {
        UTIL_LOG_WARN("comm: destroyed with %d MoE object%s alive: its engine and buffers stay "
                      "until the last of them is destroyed", objects, objects == 1 ? "" : "s");
    }
    /* The caller may destroy the bootstrap next, while MoE objects still hold the rest: they
     * never use it again (only their creation does), and nothing may reach it. */
    api_bootstrap_set_check(comm->bootstrap, NULL, comm);
    comm->bootstrap = NULL;
    if (comm->split_bootstrap != NULL) { /* ours, over the parent's engine */
        api_split_bootstrap_destroy(comm->split_bootstrap);
        comm->split_bootstrap = NULL;
    }
    strata_bootstrap_destroy(comm->owned_bootstrap); /* strata_comm_expand's */
    comm->owned_bootstrap = NULL;
    api_comm_release(comm);
}

STRATA_API int strata_comm_rank(const strata_comm_t *comm) { return comm ? comm->rank : -1; }
STRATA_API int strata_comm_size(const strata_comm_t *comm) { return comm ? comm->size : 0; }
STRATA_API int strata_comm_num_nodes(const strata_comm_t *comm) { return comm ? comm->num_nodes : 0; }
STRATA_API int strata_comm_gpu(const strata_comm_t *comm) { return comm ? comm->gpu : -1; }

STRATA_API int strata_comm_gpu_ordinal(const strata_comm_t *comm)
{
    return comm ? comm->gpu_ordinal : -1;
}

STRATA_API int strata_comm_node(const strata_comm_t *comm)
{
    return comm ? comm->rank_node[comm->rank] : -1;
}

STRATA_API int strata_comm_local_rank(const strata_comm_t *comm)
{
    return comm ? comm->rank_local[comm->rank] : -1;
}

STRATA_API int strata_comm_local_size(const strata_comm_t *comm)
{
    return comm ? comm->node_size[strata_comm_node(comm)] : 0;
}

STRATA_API int strata_comm_node_rank(const strata_comm_t *comm, int node, int local_rank)
{
    for (int r = 0; comm != NULL && r < comm->size; ++r) {
        if (comm->rank_node[r] == node && comm->rank_local[r] == local_rank) {
            return r;
        }
    }
    return -1;
}

STRATA_API const char *strata_comm_device_backend(const strata_comm_t *comm)
{
    return comm ? comm->device->name : "";
}

STRATA_API const char *strata_comm_transport(const strata_comm_t *comm)
{
    return comm ? inter_engine_transport_name(comm->engine) : "";
}

STRATA_API int strata_comm_num_rails(const strata_comm_t *comm)
{
    return (comm != NULL && comm->gpu >= 0) ? comm->plan->rails[comm->gpu].num_rails : 0;
}
