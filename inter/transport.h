/*
 * The transport interface of the inter-node tier: one ops table per backend (ofi, ucx,
 * verbs), found through the registry at the end of this file. Semantics are those common to ConnectX RC and EFA
 * SRD: reliable, unordered delivery; write with a 32-bit immediate reported at the target;
 * completion known only from completion queues. Called only from the engine's proxy thread,
 * except registration, which may come from any thread.
 */
#ifndef STRATA_INTER_TRANSPORT_H
#define STRATA_INTER_TRANSPORT_H

#include <strata/strata.h>

#include "inter/engine.h"
#include "util/util_config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define INTER_ADDR_MAX 4096 /* bytes of an endpoint address, at most */

typedef struct inter_transport_ops inter_transport_ops_t;

/** Base of every backend's transport object (embedded first). */
typedef struct inter_transport {
    const inter_transport_ops_t *ops;
    char     name[96];       /* e.g. "ofi tcp;ofi_rxm eth0" */
    bool     has_read;       /* RDMA read offered */
    /* A read from this rank to itself goes out through the device and comes back through
     * it, behind every write the device made into local memory before: its completion
     * says those writes are visible (the loopback flush of inter_ring_params_t). */
    bool     loopback_flush;
    /* A call may spin forever on a lock that a peer which died inside the library held
     * (libfabric's shm: its queues live in the peers' shared memory). Only the progress
     * thread may then make calls: it can be left stuck while waiters report the failure. */
    bool     stalls_on_dead_peer;
    bool     virt_addr;      /* remote addresses are virtual addresses, not offsets */
    uint64_t max_msg_size;   /* largest send */
    uint64_t max_rma_size;   /* largest write or read */
    size_t   inject_size;    /* largest message sent without a completion (may be 0) */
    bool     hmem;           /* registers the params' device memory */
    bool     rx_cq_data;     /* every immediate that lands consumes a posted receive */
    size_t   rx_size;        /* receives the endpoint can hold posted */
    /* Bytes address() gives, at most; <= INTER_ADDR_MAX and equal on every rank that opens
     * the same transport with the same world size (the engine allgathers that many). */
    size_t   addr_size;
} inter_transport_t;

/**
 * A dma-buf of device memory [addr, addr + len): *fd_p (the callee's to close once it has
 * registered) and addr's offset in it. What a transport uses to register GPU memory where
 * no peer-memory module pins it.
 */
typedef strata_status_t (*inter_dmabuf_fn_t)(void *ctx, void *addr, size_t len, int *fd_p,
                                             uint64_t *offset_p);

/**
 * The peer-memory module that lets a NIC driver pin GPU memory of kind for ibv_reg_mr on its
 * pointer (nvidia-peermem or the older nv_peer_mem; ROCm's amdkfd): the file that shows it
 * is loaded, or NULL where none is.
 */
const char *inter_peer_memory_module(inter_mem_kind_t kind);

typedef struct inter_transport_params {
    int         rank;       /* this rank, and how many there are (per-peer endpoints) */
    int         world_size;
    const char *iface;    /* interface (tcp) or device to use ("" picks one) */
    bool        required; /* iface must exist; else a missing one falls back to the default */
    int         rail;     /* which rail this is, for names and logs */
    inter_mem_kind_t device_memory; /* device memory to offer registration for, if any */
    size_t      msg_bytes;     /* largest message the engine sends: open refuses less */
    bool        shared_memory; /* the transport may use shared memory within a node */
    /* Open the transport's path for peers on this node only (ofi: the shm provider);
     * STRATA_ERR_UNSUPPORTED where it has none. */
    bool        same_node;
    /* Writes and sends complete once the target has the data, not once it has left this
     * host (ofi: FI_DELIVERY_COMPLETE); the rate controller's signal. Where completion
     * already means that (verbs RC) or cannot (ucx), ignored. */
    bool        delivery_complete;
    /* Exports device memory as a dma-buf, NULL where that cannot be done (verbs). */
    inter_dmabuf_fn_t dmabuf_fn;
    void       *dmabuf_ctx;
} inter_transport_params_t;

/*
 * How well a transport suits this machine, for STRATA_INTER_TRANSPORT=auto: the highest
 * score wins, ties to the earlier transport of the registry. 0: it cannot run here.
 */
#define INTER_PROBE_NONE     0
#define INTER_PROBE_EMULATED 5  /* runs here, but emulates RMA over what it found (ucx on tcp) */
#define INTER_PROBE_FALLBACK 10 /* runs here over a path every host has (tcp) */
#define INTER_PROBE_PORTABLE 20 /* runs here, over what its library found (ucx) */
#define INTER_PROBE_FABRIC   30 /* a fabric this transport serves best (efa on ofi) */
#define INTER_PROBE_NATIVE   40 /* a device this transport drives natively (ConnectX on verbs) */
#define INTER_PROBE_ASKED    50 /* the user set this transport's own variables */

typedef struct inter_probe {
    int  score;
    char why[160]; /* one line: what was found, or why it cannot run */
} inter_probe_t;

/** One registration of a buffer on one transport. */
typedef struct inter_tmr {
    void    *handle; /* backend's object */
    void    *desc;   /* local descriptor for posts, NULL when not needed */
    uint64_t key;    /* remote key */
} inter_tmr_t;

typedef enum inter_cqe_kind {
    INTER_CQE_LOCAL,  /* a write, read or send posted here finished (context set) */
    INTER_CQE_RECV,   /* a message landed in a posted receive buffer (context set) */
    INTER_CQE_IMM     /* a remote write with immediate landed here (context: a consumed
                         receive buffer when the provider needs one, else NULL) */
} inter_cqe_kind_t;

typedef struct inter_cqe {
    inter_cqe_kind_t kind;
    strata_status_t  status;
    void            *context;
    size_t           length;
    uint32_t         imm;
} inter_cqe_t;

typedef enum inter_post_kind {
    INTER_POST_WRITE, /* buf -> raddr at the peer, with an immediate when with_imm */
    INTER_POST_READ,  /* raddr at the peer -> buf */
    INTER_POST_SEND   /* buf to one of the peer's posted receives */
} inter_post_kind_t;

/** One operation to post; context comes back in its local completion. */
typedef struct inter_post {
    inter_post_kind_t kind;
    uint64_t  peer;     /* handle from insert_peer */
    void     *buf;      /* local: source of a write or send, destination of a read */
    size_t    len;
    void     *desc;     /* buf's registration descriptor (inter_tmr_t.desc) */
    uint64_t  raddr;    /* write, read: remote address or offset (see virt_addr) */
    uint64_t  rkey;
    bool      with_imm; /* write */
    uint32_t  imm;
    void     *context;  /* starts with INTER_CONTEXT_SPACE bytes the transport may use */
} inter_post_t;

struct inter_transport_ops {
    const char *name; /* "ofi", "ucx", "verbs": a value of STRATA_INTER_TRANSPORT */
    /** The transport's own STRATA_* variables (NULL: none); strata-info lists them. */
    const util_config_table_t *config;
    /** Whether and how well it runs on this machine (no endpoint is opened). */
    void (*probe)(const inter_transport_params_t *params, inter_probe_t *probe);
    strata_status_t (*open)(const inter_transport_params_t *params, inter_transport_t **tp_p);
    /** Close the endpoint: the transport touches no posted context or buffer after this.
     *  Registrations made on it are released first (FI_MR_ENDPOINT providers insist). */
    void (*shutdown)(inter_transport_t *tp);
    /** Release everything (after the registrations made on it are released). */
    void (*close)(inter_transport_t *tp);
    strata_status_t (*address)(inter_transport_t *tp, void *addr, size_t *len_p);
    /** Make a peer's address usable; *peer_p is the handle posts take. */
    strata_status_t (*insert_peer)(inter_transport_t *tp, const void *addr, size_t len,
                                   uint64_t *peer_p);
    /** Memory of kind (device: on GPU `device`); device kinds only where tp->hmem. */
    strata_status_t (*mem_register)(inter_transport_t *tp, void *addr, size_t len,
                                    inter_mem_kind_t kind, int device, uint64_t requested_key,
                                    inter_tmr_t *mr);
    void (*mem_deregister)(inter_transport_t *tp, inter_tmr_t *mr);
    /**
     * Post count operations in order. *posted_p says how many went (all on STRATA_OK);
     * STRATA_ERR_BUSY: the queue filled after *posted_p (progress and post the rest);
     * another status: the operation at *posted_p failed, and none after it was posted.
     */
    strata_status_t (*post)(inter_transport_t *tp, const inter_post_t *posts, int count,
                            int *posted_p);
    /** Small message without completion (len <= inject_size). */
    strata_status_t (*inject)(inter_transport_t *tp, uint64_t peer, const void *buf, size_t len);
    strata_status_t (*post_recv)(inter_transport_t *tp, void *buf, size_t len, void *desc,
                                 void *context);
    /** Up to max completions into cqes, how many in *count_p. An error status means the
     *  completion queue cannot be read any more (the rail is broken). */
    strata_status_t (*poll)(inter_transport_t *tp, inter_cqe_t *cqes, int max, int *count_p);
    /** Optional (NULL: the transport cannot say before opening): what open would take for
     *  params, found as open finds it, opening nothing; one line "choice (why)" into what
     *  ("tcp;ofi_rxm eth0 (the planned device eth0)"). An error status when open would
     *  fail, and what says why. */
    strata_status_t (*preview)(const inter_transport_params_t *params, char *what,
                               size_t what_len);
};

/** Space a backend needs at the start of every posted context (libfabric's FI_CONTEXT2). */
#define INTER_CONTEXT_SPACE 64

/* --- Registry (inter_transport.c) -------------------------------------------------------- */

/** The transport of that name if it is compiled in; NULL otherwise (or for NULL). */
const inter_transport_ops_t *inter_transport_find(const char *name);

/** Every transport strata knows, built or not, in auto's tie order; NULL past the end. */
const char *inter_transport_known(int index);

/** The index-th transport compiled in; NULL past the end. */
const inter_transport_ops_t *inter_transport_built(int index);

/**
 * The transport `choice` names ("auto" or a name), probed on this machine; for auto the
 * best probe. why says what decided, or on failure what is wrong. STRATA_ERR_CONFIG for
 * an unknown name, STRATA_ERR_UNSUPPORTED for one not built in or that cannot run here;
 * both logged with the alternatives.
 */
strata_status_t inter_transport_select(const char *choice, const inter_transport_params_t *params,
                                       const inter_transport_ops_t **ops_p, char *why,
                                       size_t why_len);

/**
 * What the engine opens rail `rail` with (inter_engine.c; pure): STRATA_INTER_IFACE where
 * set (then required), else the rail's planned device; iface points into params.
 */
void inter_engine_rail_params(const inter_engine_params_t *params, int rail,
                              inter_transport_params_t *tp_params_p);

#endif
