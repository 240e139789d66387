/*
 * strata: one communicator for Mixture-of-Experts expert-parallel traffic.
 * Public API: version, configuration, bootstrap and communicator here; point-to-point in
 * <strata/p2p.h> and MoE in <strata/moe.h>, included at the end (status codes, dtypes and
 * log levels in <strata/types.h>, included here).
 */
#ifndef STRATA_STRATA_H
#define STRATA_STRATA_H

#include <strata/types.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_VERSION_MAJOR 0
#define STRATA_VERSION_MINOR 1
#define STRATA_VERSION_PATCH 0
/** Single number for compile-time comparisons: 0xMMmmpp. */
#define STRATA_VERSION_CODE(major, minor, patch) (((major) << 16) | ((minor) << 8) | (patch))
#define STRATA_VERSION \
    STRATA_VERSION_CODE(STRATA_VERSION_MAJOR, STRATA_VERSION_MINOR, STRATA_VERSION_PATCH)

/** Version of the library actually loaded (may differ from the header's). */
STRATA_API void strata_get_version(unsigned *major_p, unsigned *minor_p, unsigned *patch_p);

/** "0.1.0", static storage. */
STRATA_API const char *strata_get_version_string(void);

/** Build options compiled into the library, e.g. "cuda=off hip=off verbs=on ucx=on sanitize=none". */
STRATA_API const char *strata_get_build_options(void);

/**
 * Why the last call failed: the message of the last error the library logged on the
 * calling thread (what follows "error: " in the log line, with the bad value, the rank or
 * the call to make instead), whatever the log level or handler; "" when none was logged
 * since strata_clear_last_error. The thread's own copy: valid until its next strata call.
 * Errors found on the library's own threads (a peer that failed) reach the caller as the
 * status of its next call, logged there too.
 */
STRATA_API const char *strata_get_last_error(void);

/** Forget the calling thread's last error (before a call whose failure is to be explained). */
STRATA_API void strata_clear_last_error(void);

/** Bits of strata_config_t::field_mask: which fields the caller set. */
enum strata_config_field {
    STRATA_CONFIG_FIELD_LOG_LEVEL = 1u << 0,
    STRATA_CONFIG_FIELD_TOPO_FILE = 1u << 1,
    STRATA_CONFIG_FIELD_NODE_NAME = 1u << 2,
    STRATA_CONFIG_FIELD_GPU       = 1u << 3
};

/**
 * Communicator configuration. Only fields named in field_mask are read; every other field
 * comes from its STRATA_* environment variable or, failing that, its default (see
 * `strata-info -c`). New fields are only ever appended, so a caller built against an older
 * header keeps working.
 */
typedef struct strata_config {
    uint64_t           field_mask;
    strata_log_level_t log_level; /**< STRATA_LOG_LEVEL */
    const char        *topo_file; /**< STRATA_TOPO_FILE: topology file instead of live discovery */
    const char        *node_name; /**< STRATA_NODE_NAME: ranks with equal names share a node
                                       (default: the host name) */
    /** STRATA_GPU: the GPU this rank drives, among those the runtime shows the process.
     *  Default: the GPU current on the thread that creates the communicator (CUDA: where
     *  the caller called cudaSetDevice), else the launcher's local rank's turn. */
    int                gpu;
} strata_config_t;

/* --- Bootstrap ------------------------------------------------------------------------ */

/**
 * Gather size bytes from every rank: recv_buf receives world_size blocks in rank order.
 * Called by every rank with the same size; must not return before all blocks are in.
 */
typedef strata_status_t (*strata_allgather_fn_t)(void *ctx, const void *send_buf,
                                                 void *recv_buf, size_t size);
typedef strata_status_t (*strata_barrier_fn_t)(void *ctx);

/**
 * How ranks find each other. A framework may fill one from what it already has
 * (torch.distributed, MPI) and keep ownership; the built-in ones below are created and
 * destroyed by strata. Callbacks are called from the thread that calls strata, one at a time.
 */
typedef struct strata_bootstrap {
    int                   rank;
    int                   world_size;
    strata_allgather_fn_t allgather;
    strata_barrier_fn_t   barrier;
    void                 *ctx;
} strata_bootstrap_t;

/**
 * Built-in TCP rendezvous: rank 0 listens on port (every address), the others connect to
 * root_addr:port,
 * retrying until timeout_ms (0: STRATA_BOOTSTRAP_TIMEOUT) — then STRATA_ERR_TIMEOUT naming
 * the address. Every collective is bounded by the same timeout; a rank that disappears gives
 * STRATA_ERR_BOOTSTRAP on the others. Once a communicator's engine runs over it, a rank the
 * engine declares failed (heartbeats) ends the collectives with STRATA_ERR_PEER_FAILED
 * within the engine's peer timeout. With STRATA_BOOTSTRAP_SECRET (or the file named by
 * STRATA_BOOTSTRAP_SECRET_FILE) rank 0 and each rank prove to each other that they know the
 * secret before the rank is admitted; it is never sent (docs/security.md).
 * STRATA_ERR_CONFIG for an unreadable or empty secret, or both variables set.
 */
STRATA_API strata_status_t strata_bootstrap_tcp_create(const char *root_addr, uint16_t port,
                                                       int rank, int world_size,
                                                       uint64_t timeout_ms,
                                                       strata_bootstrap_t **bootstrap_p);

/**
 * The TCP rendezvous configured from the launcher's environment. Rank and world size from
 * Open MPI (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE), MPICH's Hydra and Intel MPI
 * (PMI_RANK, PMI_SIZE), torchrun (RANK, WORLD_SIZE) or Slurm (SLURM_PROCID, SLURM_NTASKS),
 * in that order (launchers inside a Slurm allocation inherit SLURM_PROCID); none of them:
 * rank 0 of 1, said in one INFO line. The root's address from STRATA_BOOTSTRAP_ADDR or
 * MASTER_ADDR, its port from STRATA_BOOTSTRAP_PORT or MASTER_PORT + 1 (MASTER_PORT itself
 * is torchrun's store); under Slurm, where those are unset, the first host of
 * SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST) and the port 20000 + (SLURM_JOB_ID mod 20000
 * + SLURM_STEP_ID) mod 20000. STRATA_ERR_INVALID names what is missing or wrong.
 */
STRATA_API strata_status_t strata_bootstrap_from_env(strata_bootstrap_t **bootstrap_p);

/** Destroy a built-in bootstrap (never one the caller filled in). Tolerates NULL. */
STRATA_API void strata_bootstrap_destroy(strata_bootstrap_t *bootstrap);

/* --- Communicator -------------------------------------------------------------------- */

typedef struct strata_comm strata_comm_t;

/**
 * Collective over the bootstrap's ranks: exchanges each rank's host identity, devices and
 * topology summary, derives nodes and local ranks (ranks with equal node names, in rank
 * order), and plans the rails of this rank's GPU. The GPU is the launcher's local rank's
 * turn among the GPUs (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, LOCAL_RANK or
 * SLURM_LOCALID, from the launcher strata_bootstrap_from_env reads), else the derived local
 * rank's; a launcher's local rank that differs from the derived one is logged as a warning.
 * config may be NULL (everything from the environment). The bootstrap must outlive the
 * communicator's handle: once strata_comm_destroy returns it may be destroyed, even while
 * MoE objects made on the communicator live on. STRATA_ERR_INVALID for a bad bootstrap or a log_level outside
 * strata_log_level_t.
 */
STRATA_API strata_status_t strata_comm_create(const strata_config_t *config,
                                              strata_bootstrap_t *bootstrap,
                                              strata_comm_t **comm_p);

/**
 * Local teardown (not collective). Tolerates NULL. The handle is dead on return; MoE objects
 * still alive keep what they run on (engine, registered buffers) until the last of them is
 * destroyed, which tears the rest down (a warning says so). The MoE objects should be
 * destroyed first.
 */
STRATA_API void strata_comm_destroy(strata_comm_t *comm);

/**
 * Collective over comm's ranks: a communicator over the ranks that pass the same color
 * (>= 0), numbered by key, then by their rank in comm, as MPI_Comm_split numbers them;
 * *sub_p NULL for color -1. It needs no new rendezvous: its bootstrap runs over comm's
 * engine, on message channels of its own that strata_send and strata_recv on comm never see,
 * so the ranks need reach no port of strata's. It is a communicator like any other, with an
 * engine of its own. It keeps comm's engine while it lives (comm may be destroyed first),
 * and takes each rank's node name and GPU from comm. STRATA_ERR_INVALID for a color below
 * -1; the errors of strata_comm_create.
 */
STRATA_API strata_status_t strata_comm_split(strata_comm_t *comm, int color, int key,
                                             strata_comm_t **sub_p);

/**
 * Collective over the ranks of comm that are alive: after a STRATA_ERR_PEER_FAILED, every
 * surviving rank calls it, and each gets a communicator over the survivors, numbered
 * densely in their order in comm (strata_comm_parent_rank gives a rank's number in comm).
 * The survivors agree on who failed among themselves, over comm's engine: no rank plays a
 * part the others depend on, so rank 0 may be the one that failed, and no new rendezvous
 * is made. The failure sets are flooded in three rounds; a round waits for a silent rank
 * until the engine declares it failed (its peer timeout), and each is bounded by
 * STRATA_BOOTSTRAP_TIMEOUT. A rank that fails during them is left out too, by this shrink
 * or, where it died in the last round and no survivor's engine had declared it failed as
 * that round began, by the next (it is then a member on every survivor, and the new
 * communicator's first exchange with it fails). A rank the others declared failed before
 * the shrink (one that was stopped, then resumed) is sent nothing by them; its engine
 * declares them failed in turn, and its shrink ends with a communicator of itself alone,
 * or STRATA_ERR_TIMEOUT. One that an engine declares failed only as the last round begins
 * ends on a communicator the others do not share, whose exchanges fail. Every call but
 * the refusals below counts as one of comm's splits, whatever its outcome. The new
 * communicator runs on comm's engine
 * (kept while it lives; comm may be destroyed first): nothing connects again, memory
 * registered on comm and the descriptors peers hold of it work on it, and MoE objects are
 * made again on it (strata_moe_recreate). It is made without an exchange once the
 * survivors agree: a rank that fails after that is a failure of the new communicator, whose
 * next collective returns STRATA_ERR_PEER_FAILED; shrink it in turn. Also valid with no
 * rank failed (a copy of comm). While a communicator shrunk from comm is alive, comm
 * refuses to be split or shrunk again (STRATA_ERR_INVALID): shrink the newest.
 */
STRATA_API strata_status_t strata_comm_shrink(strata_comm_t *comm, strata_comm_t **shrunk_p);

/**
 * Collective over comm's ranks and num_joiners new processes: a communicator over comm's
 * ranks, numbered as in comm, and the joiners after them (ranks size .. size +
 * num_joiners - 1). Each joiner makes its communicator as any rank does:
 * strata_bootstrap_tcp_create(root_addr, port, its rank, size + num_joiners, ...), then
 * strata_comm_create. Rank 0 of comm listens on port (every address); root_addr is how the
 * others and the joiners reach it. The rendezvous is bounded by STRATA_BOOTSTRAP_TIMEOUT.
 * The new communicator has an engine of its own and owns its bootstrap; comm stays as it
 * is (destroy it once the new one is made). MoE objects move to it with
 * strata_moe_recreate, the joiners passing NULL for the old object.
 */
STRATA_API strata_status_t strata_comm_expand(strata_comm_t *comm, int num_joiners,
                                              const char *root_addr, uint16_t port,
                                              strata_comm_t **expanded_p);

/** A rank's number in the communicator this one was split or shrunk from; -1 for one made
 *  by strata_comm_create or strata_comm_expand, or a rank out of range. */
STRATA_API int strata_comm_parent_rank(const strata_comm_t *comm, int rank);

/* Queries. Each tolerates NULL: indices and ranks are then -1, counts 0, names "". */
STRATA_API int strata_comm_rank(const strata_comm_t *comm);
STRATA_API int strata_comm_size(const strata_comm_t *comm);
STRATA_API int strata_comm_node(const strata_comm_t *comm);       /**< 0..num_nodes-1 */
STRATA_API int strata_comm_num_nodes(const strata_comm_t *comm);
STRATA_API int strata_comm_local_rank(const strata_comm_t *comm); /**< rank within the node */
STRATA_API int strata_comm_local_size(const strata_comm_t *comm);
/** Global rank of local rank local_rank on node node, -1 if none. */
STRATA_API int strata_comm_node_rank(const strata_comm_t *comm, int node, int local_rank);
/** The device backend this rank uses: "host", "cuda" or "hip". */
STRATA_API const char *strata_comm_device_backend(const strata_comm_t *comm);
/** Index of this rank's GPU among the node's GPUs (the topology's order), -1 without one. */
STRATA_API int strata_comm_gpu(const strata_comm_t *comm);
/** The runtime's number for this rank's GPU: what cudaSetDevice / hipSetDevice take and a
 *  framework's tensors name (torch's cuda:N). It differs from strata_comm_gpu where the
 *  process sees only some of the node's GPUs (CUDA_VISIBLE_DEVICES) or the runtime orders
 *  them otherwise. -1 without one. */
STRATA_API int strata_comm_gpu_ordinal(const strata_comm_t *comm);

/**
 * A stream of the communicator's device backend, for callers that have none of their own
 * (a framework passes its current stream to strata_moe_set_stream instead): a non-blocking
 * cudaStream_t or hipStream_t of the rank's GPU; on the host backend, a stream whose work
 * (the kernels of the objects set to it) runs on a thread of its own, in order, after the
 * call that enqueued it returned, as on a GPU. Destroy it once no object uses it.
 */
STRATA_API strata_status_t strata_comm_stream_create(strata_comm_t *comm, void **stream_p);
/** Waits for the stream's work first; tolerates NULL. */
STRATA_API void strata_comm_stream_destroy(strata_comm_t *comm, void *stream);
/** Wait on the host for everything enqueued on stream, by strata or anyone else. */
STRATA_API strata_status_t strata_comm_stream_synchronize(strata_comm_t *comm, void *stream);
/** How many NICs this rank's GPU drives (its rails); 0 without GPU or RDMA NIC. */
STRATA_API int strata_comm_num_rails(const strata_comm_t *comm);
/** The inter-node transport in use, e.g. "ofi tcp;ofi_rxm eth0". */
STRATA_API const char *strata_comm_transport(const strata_comm_t *comm);

#ifdef __cplusplus
}
#endif

/* The API's other parts, by responsibility; each includes this header first. */
#include <strata/p2p.h>
#include <strata/moe.h>

#endif /* STRATA_STRATA_H */
