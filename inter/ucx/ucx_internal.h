/*
 * Inside the ucx transport: the transport object, its peers, registrations and the rkeys
 * peers fetched from each other, and the state each posted operation keeps in its context.
 * ucx_transport.c opens and closes, ucx_context.c chooses what UCX runs over and names the
 * rail, ucx_memory.c registers and asks peers for rkeys, ucx_memory_owner.c answers them
 * and revokes, ucx_post.c posts and completes.
 */
#ifndef STRATA_INTER_UCX_INTERNAL_H
#define STRATA_INTER_UCX_INTERNAL_H

#include "inter/transport.h"
#include "inter/ucx/ucx_map.h"
#include "util/util.h"

#include <ucp/api/ucp.h>

#include <pthread.h>
#include <stdatomic.h>

/* Bytes address() gives on every rank: a header and the worker address, checked to fit. */
#define UCX_ADDR_SIZE    2048
#define UCX_ADDR_MAGIC   0x31584355u /* "UCX1" */
#define UCX_INJECT_SIZE  64          /* bytes an inject copies */
#define UCX_INJECT_SLOTS 256
#define UCX_CQ_INITIAL   1024        /* completions queued before the queue grows */
#define UCX_TAG          0x5354524154414d53ull /* "STRATAMS": every message */
#define UCX_TAG_MASK     UINT64_MAX
#define UCX_MAX_SIZE     (1ull << 32) /* largest write, read or message offered */

/* Active messages between transports (ids within one worker). */
enum {
    UCX_AM_RKEY_REQ   = 1, /* header ucx_rkey_req_t: send me the rkey of key */
    UCX_AM_RKEY_REP   = 2, /* header ucx_rkey_rep_t, data: the packed rkey */
    UCX_AM_IMM        = 3, /* header uint32_t: a write's immediate, after its bytes */
    UCX_AM_REVOKE     = 4, /* header ucx_revoke_msg_t: key deregistered, drop its rkey */
    UCX_AM_REVOKE_ACK = 5  /* header ucx_revoke_msg_t: dropped */
};

typedef struct ucx_rkey_req {
    uint64_t key;
    uint64_t cookie; /* the asker's handle for the owner, echoed in the reply and revoke */
} ucx_rkey_req_t;

typedef struct ucx_rkey_rep {
    uint64_t key;
    uint64_t cookie;
    int32_t  found;  /* 0: no such registration (never made, or deregistered) */
    uint32_t pad;
} ucx_rkey_rep_t;

typedef struct ucx_revoke_msg {
    uint64_t key;
    uint64_t cookie;
    uint64_t id;     /* the owner's revoke record, echoed in the ack */
} ucx_revoke_msg_t;

typedef enum ucx_op_kind {
    UCX_OP_WRITE = INTER_POST_WRITE,
    UCX_OP_READ  = INTER_POST_READ,
    UCX_OP_SEND  = INTER_POST_SEND,
    UCX_OP_RECV
} ucx_op_kind_t;

struct ucx_transport;
struct ucx_peer;

/* What an operation keeps in the first INTER_CONTEXT_SPACE bytes of its context. */
typedef struct ucx_op {
    struct ucx_op *next;   /* the list it waits on (an rkey, a flush, its immediate) */
    union {
        struct {
            void    *buf;
            size_t   len;
            uint64_t raddr;
            uint64_t key;
        } rma;
        struct {
            struct ucx_op        *prev; /* posted receives, cancelled at shutdown */
            void                 *request;
            struct ucx_transport *ucx;
        } rx;
    } u;
    struct ucx_peer *peer; /* NULL for a receive */
    uint32_t imm;          /* the header of its immediate's active message */
    uint8_t  kind;         /* ucx_op_kind_t */
    uint8_t  with_imm;
} ucx_op_t;

_Static_assert(sizeof(ucx_op_t) <= INTER_CONTEXT_SPACE, "ucx_op_t outgrows the context space");

/* A list of operations linked through next. */
typedef struct ucx_op_list {
    ucx_op_t *head, *tail;
} ucx_op_list_t;

/* A peer's registration as seen here: its rkey once fetched, the operations waiting for it. */
typedef struct ucx_rkey {
    struct ucx_rkey *next_retired;
    struct ucx_peer *peer;
    uint64_t       key;
    ucp_rkey_h     rkey;     /* NULL while the request is out */
    ucx_op_list_t  waiting;
    ucx_rkey_req_t request;  /* the request's header, kept until it is sent */
} ucx_rkey_t;

typedef struct ucx_peer {
    struct ucx_transport *ucx;
    uint64_t         handle;
    ucp_ep_h         ep;
    ucs_status_t     error;     /* UCS_OK until the endpoint fails */
    ucx_map_t        rkeys;     /* key -> ucx_rkey_t */
    ucx_op_list_t    unflushed; /* writes with an immediate waiting for this round's flush */
    struct ucx_peer *next_flush;
    bool             to_flush;
    ucx_rkey_t      *retired;   /* revoked rkeys, destroyed after a flush of the endpoint */
    int              flushed;   /* shutdown: 0 flushing, 1 flushed, -1 failed */
    void            *close_request;
} ucx_peer_t;

/* Who was given a registration's rkey: revoked at deregistration. */
typedef struct ucx_fetcher {
    ucp_ep_h ep;     /* the endpoint the request came on */
    uint64_t cookie;
} ucx_fetcher_t;

/* One registration here (inter_tmr_t.handle). */
typedef struct ucx_mr {
    uint64_t       key;
    ucp_mem_h      memh;
    void          *rkey_buf;
    size_t         rkey_len;
    ucx_fetcher_t *fetchers;
    int            num_fetchers, max_fetchers;
} ucx_mr_t;

/* A deregistration waiting for the peers that held the rkey to drop it. */
typedef struct ucx_revoke_wait {
    int remaining;
} ucx_revoke_wait_t;

/* One revoke to one fetcher (lock): queued, then sent, then acked. */
typedef struct ucx_revoke {
    struct ucx_revoke *next;
    ucx_revoke_msg_t   msg;
    ucp_ep_h           ep;
    ucx_revoke_wait_t *wait; /* NULL once the deregistration stopped waiting */
    bool               sent;
} ucx_revoke_t;

/* Something sent from the proxy's side outside UCX's callbacks (an rkey reply, a revoke's
 * ack), freed when the send completes. */
typedef struct ucx_reply {
    struct ucx_reply *next;
    ucp_ep_h          ep;
    unsigned          am_id;
    union {
        ucx_rkey_rep_t   rkey;
        ucx_revoke_msg_t revoke;
    } header;
    size_t            header_len;
    size_t            data_len;
    char              data[]; /* the packed rkey */
} ucx_reply_t;

/* A buffer an inject copies into, free again when its send completes. */
typedef struct ucx_inject_slot {
    struct ucx_transport *ucx;
    int                   index;
    char                  data[UCX_INJECT_SIZE];
} ucx_inject_slot_t;

typedef struct ucx_transport {
    inter_transport_t base;
    ucp_context_h     context;
    ucp_worker_h      worker;
    ucp_address_t    *address;          /* what address() gives (network only, where asked) */
    size_t            address_len;
    ucp_address_t    *self_address;     /* the full one, for the endpoint to this worker */
    int               rail;
    uint64_t          timeout_ns;       /* STRATA_UCX_TIMEOUT */
    char              lane_tls[48];     /* what the endpoints to peers use, for the name */
    char              lane_devices[40];
    bool              shut;
    /* The worker and everything below up to the lock: one thread at a time, whoever holds
     * progress_lock (the engine's progress in poll and post, or a deregistration driving
     * its revokes when no one else progresses). */
    pthread_mutex_t   progress_lock;
    ucx_peer_t      **peers;
    size_t            num_peers, max_peers;
    inter_cqe_t      *cq;               /* completions not yet polled, a ring */
    size_t            cq_head, cq_count, cq_size;
    bool              cq_broken;
    ucx_op_list_t     ready;            /* their rkey came: post them */
    ucx_op_list_t     flushed;          /* their write is at the target: send the immediate */
    ucx_peer_t       *flush_list;       /* peers with unflushed writes */
    ucx_reply_t      *replies, **replies_tail;
    ucx_op_t         *rx_posted;        /* posted receives */
    size_t            in_flight;        /* UCX requests whose callback is still to come */
    ucx_inject_slot_t *inject_slots;
    int               inject_free[UCX_INJECT_SLOTS];
    int               num_inject_free;
    /* Shared with registering threads (lock). */
    pthread_mutex_t   lock;
    pthread_cond_t    revoked;          /* a revoke was acked or given up */
    ucx_map_t         mrs;              /* key -> ucx_mr_t */
    uint64_t          last_key;         /* keys are never reused */
    ucx_revoke_t     *revokes;          /* queued and sent, until acked */
    uint64_t          next_revoke_id;
    atomic_int        revokes_unsent;   /* deregistration publishes, the proxy consumes */
    bool              retire_pending;   /* proxy: some peer has retired rkeys */
} ucx_transport_t;

static inline ucx_transport_t *ucx_of(inter_transport_t *tp)
{
    return util_container_of(tp, ucx_transport_t, base);
}

static inline void ucx_op_list_push(ucx_op_list_t *list, ucx_op_t *op)
{
    op->next = NULL;
    if (list->tail != NULL) {
        list->tail->next = op;
    } else {
        list->head = op;
    }
    list->tail = op;
}

/* Append a chain (head .. tail linked through next) to a list. */
static inline void ucx_op_list_append(ucx_op_list_t *list, ucx_op_t *head)
{
    for (ucx_op_t *op = head, *next; op != NULL; op = next) {
        next = op->next;
        ucx_op_list_push(list, op);
    }
}

static inline ucx_op_t *ucx_op_list_take(ucx_op_list_t *list)
{
    ucx_op_t *head = list->head;

    list->head = list->tail = NULL;
    return head;
}

/* ucx_transport.c */
extern const inter_transport_ops_t ucx_transport_ops;

/** The transport's settings (STRATA_UCX_*). */
typedef struct ucx_config {
    char    *tls;        /* UCX_TLS syntax; empty: UCX's choice */
    uint64_t timeout_ns; /* longest wait for peers */
} ucx_config_t;

/** The completion status of a UCX status: OK, CANCELLED or TRANSPORT. */
strata_status_t ucx_cqe_status(ucs_status_t status);

/* ucx_context.c */
/** Whether a UCX_TLS list names a shared-memory transport (an exclusion list never does). */
bool ucx_names_shared_memory(const char *tls);
/** A rail's UCP context, with the transports and devices the params and settings ask for. */
strata_status_t ucx_context_create(const inter_transport_params_t *params,
                                   const ucx_config_t *config, ucp_context_h *context_p);
/** The transports and network devices a context uses, comma-separated. */
void ucx_context_resources(ucp_context_h context, char *tls, size_t tls_size, char *devices,
                           size_t devices_size);
/** Add the transports and devices an endpoint's lanes use to the rail's name. */
void ucx_name_from_lanes(ucx_transport_t *ucx, ucp_ep_h ep);

/* ucx_post.c */
/** Complete an operation that will not go (a failed peer, an unknown key). */
void ucx_op_fail(ucx_transport_t *ucx, ucx_op_t *op, strata_status_t status);
/** Post a write or read whose rkey is known; errors come back as its completion. */
void ucx_rma_issue(ucx_transport_t *ucx, ucx_op_t *op, ucp_rkey_h rkey);
/** Cancel every posted receive (shutdown). */
void ucx_cancel_receives(ucx_transport_t *ucx);
/** The handler of immediates' active messages. */
ucs_status_t ucx_imm_handler(void *arg, const void *header, size_t header_length, void *data,
                             size_t length, const ucp_am_recv_param_t *param);
strata_status_t ucx_post(inter_transport_t *tp, const inter_post_t *posts, int count,
                         int *posted_p);
strata_status_t ucx_inject(inter_transport_t *tp, uint64_t peer, const void *buf, size_t len);
strata_status_t ucx_post_recv(inter_transport_t *tp, void *buf, size_t len, void *desc,
                              void *context);
strata_status_t ucx_poll(inter_transport_t *tp, inter_cqe_t *cqes, int max, int *count_p);
/** One round of progress and the work callbacks left, completions staying queued
 *  (progress_lock held); returns whether anything happened. */
int ucx_progress_round(ucx_transport_t *ucx);

/* ucx_memory.c */
strata_status_t ucx_memory_init(ucx_transport_t *ucx);
/** Free what the rkey exchange keeps (close, after the worker is gone). */
void ucx_memory_cleanup(ucx_transport_t *ucx);
strata_status_t ucx_mem_register(inter_transport_t *tp, void *addr, size_t len,
                                 inter_mem_kind_t kind, int device, uint64_t requested_key,
                                 inter_tmr_t *mr);
void ucx_mem_deregister(inter_transport_t *tp, inter_tmr_t *mr);
/** A write or read to (peer, key): issued now, or once the owner sent the rkey. */
void ucx_rma_start(ucx_transport_t *ucx, ucx_op_t *op);
/** A peer's endpoint failed: what waits for its rkeys fails, revokes to it are over. */
void ucx_memory_peer_failed(ucx_transport_t *ucx, ucx_peer_t *peer);
/** Fail what waits for a peer's rkeys and destroy them (shutdown, before its endpoint
 *  closes). */
void ucx_peer_rkeys_release(ucx_transport_t *ucx, ucx_peer_t *peer);
/** Proxy side: destroy the rkeys their owners revoked once a flush says no operation of
 *  this side uses them; returns how many peers' lists went. */
int  ucx_rkeys_retire(ucx_transport_t *ucx);
/** Free a peer's rkey entries (close, after the worker is gone). */
void ucx_peer_rkeys_free(ucx_peer_t *peer);
/** The handlers of the rkey exchange's active messages. */
strata_status_t ucx_memory_set_handlers(ucx_transport_t *ucx);

/* ucx_memory_owner.c */
/** Proxy side: send queued rkey replies, revokes and acks; returns how many went. */
int  ucx_memory_progress(ucx_transport_t *ucx);
/** Give up every revoke (shutdown): deregistrations stop waiting. */
void ucx_revokes_abandon(ucx_transport_t *ucx);
/** The owner's active message handlers: a peer asks for an rkey; a peer dropped a revoked
 *  one. */
ucs_status_t ucx_rkey_req_handler(void *arg, const void *header, size_t header_length,
                                  void *data, size_t length, const ucp_am_recv_param_t *param);
ucs_status_t ucx_revoke_ack_handler(void *arg, const void *header, size_t header_length,
                                    void *data, size_t length,
                                    const ucp_am_recv_param_t *param);

#endif
