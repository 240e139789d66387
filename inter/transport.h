/*
 * The transport interface of the inter-node tier: one ops table per backend (ofi today;
 * verbs and ucx plug in the same way). Semantics are those common to ConnectX RC and EFA
 * SRD: reliable, unordered delivery; write with a 32-bit immediate reported at the target;
 * completion known only from completion queues. Called only from the engine's proxy thread,
 * except registration, which may come from any thread.
 */
#ifndef STRATA_INTER_TRANSPORT_H
#define STRATA_INTER_TRANSPORT_H

#include <strata/strata.h>

#include "inter/engine.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define INTER_ADDR_MAX 96 /* bytes of an endpoint address */

typedef struct inter_transport_ops inter_transport_ops_t;

/** Base of every backend's transport object (embedded first). */
typedef struct inter_transport {
    const inter_transport_ops_t *ops;
    char     name[96];       /* e.g. "ofi tcp;ofi_rxm eth0" */
    bool     has_read;       /* RDMA read offered */
    bool     virt_addr;      /* remote addresses are virtual addresses, not offsets */
    uint64_t max_msg_size;   /* largest send */
    uint64_t max_rma_size;   /* largest write or read */
    size_t   inject_size;    /* largest message sent without a completion (may be 0) */
    bool     hmem;           /* registers the params' device memory */
    bool     rx_cq_data;     /* every immediate that lands consumes a posted receive */
    size_t   rx_size;        /* receives the endpoint can hold posted */
} inter_transport_t;

typedef struct inter_transport_params {
    const char *provider; /* "auto", "tcp", "shm", "verbs", "efa" */
    const char *iface;    /* interface (tcp) or device to use ("" picks one) */
    bool        required; /* iface must exist; else a missing one falls back to the default */
    int         rail;     /* which rail this is, for names and logs */
    inter_mem_kind_t device_memory; /* device memory to offer registration for, if any */
    size_t      msg_bytes;     /* largest message the engine sends: open refuses less */
    bool        shared_memory; /* the provider may use shared memory within a node */
} inter_transport_params_t;

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

struct inter_transport_ops {
    const char *name;
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
    /* Posts: STRATA_OK, STRATA_ERR_BUSY (queue full: progress and retry) or an error. */
    strata_status_t (*post_write)(inter_transport_t *tp, uint64_t peer, const void *buf,
                                  size_t len, void *desc, uint64_t raddr, uint64_t rkey,
                                  bool with_imm, uint32_t imm, void *context);
    strata_status_t (*post_read)(inter_transport_t *tp, uint64_t peer, void *buf, size_t len,
                                 void *desc, uint64_t raddr, uint64_t rkey, void *context);
    strata_status_t (*post_send)(inter_transport_t *tp, uint64_t peer, const void *buf,
                                 size_t len, void *desc, void *context);
    /** Small message without completion (len <= inject_size). */
    strata_status_t (*inject)(inter_transport_t *tp, uint64_t peer, const void *buf, size_t len);
    strata_status_t (*post_recv)(inter_transport_t *tp, void *buf, size_t len, void *desc,
                                 void *context);
    /** Up to max completions; returns how many, or a negative status. */
    int (*poll)(inter_transport_t *tp, inter_cqe_t *cqes, int max);
};

/** Space a backend needs at the start of every posted context (libfabric's FI_CONTEXT2). */
#define INTER_CONTEXT_SPACE 64

/** The transports compiled in; NULL name finds none. */
const inter_transport_ops_t *inter_transport_find(const char *name);

#endif
