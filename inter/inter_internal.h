/*
 * Inside the inter layer: engine, rails, requests and their operations.
 */
#ifndef STRATA_INTER_INTERNAL_H
#define STRATA_INTER_INTERNAL_H

#include "engine.h"
#include "inter_rate.h"
#include "transport.h"
#include "util/util.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define INTER_RX_SLOTS      64  /* receive buffers per rail, where messages alone use them */
/* Where every immediate also consumes one (FI_RX_CQ_DATA): at most this many bytes of them. */
#define INTER_RX_POOL_MAX_BYTES (64u << 20)
#define INTER_TX_SLOTS      64  /* send buffers per rail */
#define INTER_RDESC_MAGIC   0x52444553u /* "RDES" */
#define INTER_BARRIER_SLOTS 4096
#define INTER_BARRIER_GROUPS 64

/* The two top bits of an immediate say whose it is. */
#define INTER_IMM_TYPE_SHIFT 30
#define INTER_IMM_USER       0u
#define INTER_IMM_BARRIER    1u
#define INTER_IMM_VALUE_MASK ((1u << INTER_IMM_TYPE_SHIFT) - 1)

typedef enum inter_msg_type {
    INTER_MSG_HEARTBEAT = 1,
    INTER_MSG_USER      = 2,
    INTER_MSG_LEAVING   = 3, /* the sender is closing its endpoints (inter_leave.c) */
    INTER_MSG_LEFT_ACK  = 4  /* everything the leaver sent on this rail before it was read */
} inter_msg_type_t;

/* Precedes every message on the wire. */
typedef struct inter_msg_header {
    uint32_t magic;
    uint16_t type;
    uint16_t rail;
    int32_t  src;
    uint32_t length;
    uint32_t channel; /* user messages: 0, the caller's; others: a channel of the library's */
} inter_msg_header_t;

#define INTER_MSG_MAGIC 0x4d534731u /* "MSG1" */

/** What a message that landed in a receive buffer says, once checked. */
typedef struct inter_msg_view {
    int              src;     /* the sending rank, < the world size */
    inter_msg_type_t type;    /* INTER_MSG_USER, or another type (carries nothing) */
    const void      *payload; /* in the buffer, after the header */
    size_t           length;  /* of the payload, inside the message */
    uint32_t         channel;
} inter_msg_view_t;

/**
 * A message of length bytes in buf, from a rank of world_size: true and its view where the
 * header is whole and says where it is from and how long it is truthfully; false for
 * anything else (dropped). Pure: a message goes through nothing else before this
 * (inter_proxy.c; tests/fuzz/fuzz_peer_address.c).
 */
bool inter_msg_parse(const void *buf, size_t length, int world_size, inter_msg_view_t *view);

typedef enum inter_op_kind {
    INTER_OP_WRITE,
    INTER_OP_READ,
    INTER_OP_SEND,
    INTER_OP_RX,       /* a receive buffer of the pool */
    INTER_OP_HEARTBEAT, /* a heartbeat sent with a completion (req NULL) */
    INTER_OP_FLUSH      /* a work ring's loopback read (req NULL, ring set) */
} inter_op_kind_t;

typedef struct inter_request_priv inter_request_priv_t;

/* One posted transport operation; the transport's context space comes first. */
typedef struct inter_op {
    char                   context[INTER_CONTEXT_SPACE];
    inter_request_t       *req;
    struct inter_op       *next;     /* proxy: its peer's queue of operations to post */
    struct inter_op       *sibling;  /* the request's next operation (pooled ops are chained) */
    inter_op_kind_t        kind;
    int                    rail;
    int                    peer;
    void                  *lbuf;
    size_t                 len;
    void                  *desc;
    uint64_t               raddr;
    uint64_t               rkey;
    bool                   with_imm;
    uint32_t               imm;
    int                    slot;     /* send: tx slot used, -1 none yet; ring: its slot */
    struct inter_ring     *ring;     /* a work ring's command, else NULL (req is set) */
    uint32_t               counter;  /* ring: the completion counter it raises */
    inter_rate_stamp_t     stamp;    /* rate control: taken when posted, used at completion */
    bool                   paced;    /* held back by its peer's window at least once */
    bool                   uncancellable; /* goes whatever a cancel says (inter_list.c) */
} inter_op_t;

/* Requests of one write or read of at most this many bytes, and work ring commands of at
 * most this many, take a peer's express lane: they wait neither for its window nor behind
 * its other operations (inter_queue.c). */
#define INTER_EXPRESS_BYTES 4096

typedef struct inter_op_lane {
    inter_op_t *head, *tail;
} inter_op_lane_t;

/* One peer's operations to post: small writes and reads first (express), then the rest;
 * each lane in submission order. */
typedef struct inter_op_queue {
    inter_op_lane_t express, bulk;
} inter_op_queue_t;

/*
 * The operations waiting to be posted (inter_queue.c): a queue per peer, each of its two
 * lanes in submission order, and the turns of the peers that have some. Proxy-owned.
 */
typedef struct inter_queues {
    inter_op_queue_t *peers;   /* [world] */
    int              *turns;   /* ring of world slots: peers waiting for their turn */
    bool             *listed;  /* [world] in turns, or taking its turn now */
    int               first;   /* turns[first] goes next */
    int               waiting; /* peers in turns */
    int               world;
} inter_queues_t;

/*
 * Rate control towards one peer (inter_pace.c): the proxy's estimator, and the figures it
 * publishes for inter_engine_peer_rate, which any thread may read.
 */
typedef struct inter_peer_pace {
    inter_rate_t     rate;      /* proxy-owned */
    _Atomic uint64_t rate_bits; /* rate.rate_Bps's bits */
    _Atomic uint64_t rtt_ns, window, in_flight, paced;
} inter_peer_pace_t;

typedef enum inter_req_type {
    INTER_REQ_RMA,    /* writes and reads: ops[] posted as they are */
    INTER_REQ_SEND,
    INTER_REQ_RECV,
    INTER_REQ_NOTIFY,
    INTER_REQ_RING    /* attach or detach a work ring (the proxy owns the list) */
} inter_req_type_t;

/* A chunk of a list write: chunk `chunk` of extent `extent` (extent UINT32_MAX: none). */
typedef struct inter_list_chunk {
    uint32_t extent, chunk;
} inter_list_chunk_t;

struct inter_request {
    /* The atomics come first: taking a request from the pool resets them atomically and
     * clears the rest, as a late inter_request_free of its last holder may still read them. */
    atomic_int             done;      /* proxy publishes status with release */
    atomic_bool            cancelled;
    atomic_bool            released;  /* the user gave it back */
    strata_status_t        status;
    inter_req_type_t       type;
    inter_engine_t        *engine;
    uint32_t               num_ops;
    uint32_t               ops_posted;
    uint32_t               ops_finished;
    inter_op_t            *ops;       /* the first of num_ops, chained by sibling, in order */
    struct inter_request  *next_active; /* proxy: requests it still holds */
    /* send/recv */
    int                    peer;
    void                  *buf;
    size_t                 cap;
    size_t                 length;
    int                    source;
    const int             *source_ranks; /* where set: source reported as source_ranks[source] */
    uint32_t               channel;   /* messages of that channel only (0: the user's) */
    struct inter_request  *next_recv;
    /* notify */
    uint32_t               imm;
    uint64_t               count;
    inter_imm_fn_t         fn;
    void                  *arg;
    /* ring */
    struct inter_ring     *ring;
    bool                   attach;
    /* list write (inter_list.c): the extents, owned; the next chunk to fill; the data
     * operations (the first data_ops of ops; the immediates' follow, one per rail); the
     * chunk each rail's immediate carries (extent UINT32_MAX: none) */
    inter_extent_t        *extents;
    uint32_t               num_extents;
    uint32_t               next_extent, next_chunk, extent_chunks;
    uint32_t               data_ops, data_retired;
    const inter_mr_t      *lmr;
    inter_rdesc_t          rdesc;
    inter_list_chunk_t     held[INTER_MAX_RAILS];
};

/* A work ring as the proxy sees it (inter_ring.c). */
struct inter_ring {
    struct inter_ring *next;          /* proxy: attached, or retired with commands in flight */
    util_work_ring_t  *mem;
    uint32_t           mask;
    uint64_t           consumed;      /* proxy: next ticket to read */
    uint64_t           retired;       /* proxy: tickets completed, in order */
    uint32_t           in_flight;     /* proxy: consumed, not completed (queued ones too) */
    bool               detached;      /* proxy: never touch mem again */
    bool               failed;
    int                num_regions;
    const inter_mr_t  *regions[INTER_RING_MAX_REGIONS];
    size_t             region_offsets[INTER_RING_MAX_REGIONS];
    inter_rdesc_t     *remote;        /* [num_regions][num_peers] */
    int                num_peers;
    int               *peers;         /* [num_peers] the engine's rank of each ring peer */
    bool               host_stamps;
    inter_op_t        *ops;           /* [slots] */
    bool              *done;          /* [slots] */
    /* The counts as the proxy keeps them: counters, then immediates; those changed since
     * they were last published are listed in dirty. */
    uint64_t          *counts;        /* [num_counters + num_imms] */
    uint32_t          *dirty;         /* indices into counts */
    bool              *is_dirty;
    uint32_t           num_dirty;
    void             (*flush_fn)(void *ctx);
    void              *flush_ctx;
    /* Flush by loopback read (inter_ring_params_t.flush_by_read). The counts dirty when a
     * flush began are held, with their values then, until its reads have all completed. */
    bool               flush_by_read;
    uint32_t           flush_rails;    /* network rails that wrote since the last flush began */
    uint32_t           flush_unposted; /* rails of the flush under way not posted yet */
    uint32_t           flush_waiting;  /* its reads in flight */
    uint32_t           num_held;
    uint32_t          *held;           /* indices into counts */
    uint64_t          *held_counts;    /* their values when the flush began */
    inter_op_t         flush_ops[INTER_MAX_RAILS];
    _Atomic uint64_t   commands, stamped, delay_ns, max_delay_ns, flushes;
};

#define INTER_CTRL_FLUSH 2

/* Rail slots: the network rails 0..num_rails-1, then the same-node transport, if open. */
#define INTER_LOCAL_RAIL INTER_MAX_RAILS
#define INTER_RAIL_SLOTS (INTER_MAX_RAILS + 1)

typedef struct inter_rail {
    inter_transport_t *tp;           /* NULL: slot not open */
    uint64_t          *peers;        /* [world] transport handle of each rank */
    char              *rx_pool;
    inter_tmr_t        rx_mr;
    inter_op_t        *rx_ops;       /* [num_rx] */
    int                num_rx;
    char              *tx_pool;
    inter_tmr_t        tx_mr;
    int                tx_free[INTER_TX_SLOTS];
    int                num_tx_free;
} inter_rail_t;

struct inter_mr {
    struct inter_mr *prev, *next; /* the engine's live registrations (mr_lock) */
    void       *addr;
    size_t      len;
    int         num_rails;  /* network rails registered (slots 0..num_rails-1) */
    bool        has_local;  /* registered on the same-node transport too */
    inter_tmr_t tmr[INTER_RAIL_SLOTS];
};

/* An unexpected message, kept until a matching recv is posted. */
typedef struct inter_unexpected {
    struct inter_unexpected *next;
    int                      src;
    uint32_t                 channel;
    size_t                   length;
    char                     data[];
} inter_unexpected_t;

typedef struct inter_peer_info {
    int           num_rails;
    bool          local;    /* on this node, reached through the same-node transport */
    inter_rdesc_t ctrl; /* its barrier landing word */
} inter_peer_info_t;

/*
 * What submission takes instead of allocating (inter_pool.c): requests, operations and send
 * copies, sized at creation. Any submitting thread takes; the proxy gives back when it
 * frees a request (inter_sweep); both sides are lock-free. The proxy sweeps at heartbeats,
 * and sooner once enough requests are done and given back, or a submission found a pool
 * empty (STRATA_ERR_BUSY).
 */
typedef struct inter_pools {
    inter_request_t      *requests;      /* [free_requests.capacity] */
    inter_op_t           *ops;           /* [free_ops.capacity] */
    char                 *copies;        /* [free_copies.capacity] of copy_size bytes */
    size_t                copy_size;     /* msg_size, rounded up to a cache line */
    util_freelist_t       free_requests, free_ops, free_copies;
    uint64_t              sweep_batch;   /* reclaimable requests that are worth a sweep */
    atomic_uint_fast64_t  reclaimable;   /* requests a sweep would free (seen both done
                                          * and given back) or finish (cancelled receives) */
    uint64_t              swept;         /* proxy: reclaimable when it last swept */
    atomic_bool           starved;       /* a submission found a pool empty */
} inter_pools_t;

/* Memory whose release waits for the endpoints' shutdown (inter_engine_mem_release_late);
 * its registration stays on the engine's list and is closed with the others. */
typedef struct inter_late_release {
    struct inter_late_release *next;
    inter_mr_t                *mr;
    void                      *ptr;
    void                     (*free_fn)(void *ptr);
} inter_late_release_t;

/* A word the proxy stores STRATA_ERR_PEER_FAILED into when one of ranks fails (NULL: any). */
typedef struct inter_watch {
    int32_t *word; /* NULL: the entry is free */
    int     *ranks;
    int      num_ranks;
} inter_watch_t;

struct inter_engine {
    inter_engine_params_t  params;
    const inter_transport_ops_t *ops;
    int                    num_rails;
    inter_rail_t           rails[INTER_RAIL_SLOTS]; /* network rails, then INTER_LOCAL_RAIL */
    size_t                 slot_size;   /* header + msg_size */
    inter_peer_info_t     *peer_info;   /* [world] */
    atomic_bool           *peer_failed; /* [world] */
    uint64_t              *last_seen;   /* [world] proxy: last message time */
    atomic_bool           *heard;       /* [world] a message came since connect (proxy sets) */
    atomic_int             peers_heard; /* peers with heard[] set (connect waits for all) */
    int                   *rank_node;   /* [world] node of each rank, NULL: unknown */
    util_ring_t            ring;        /* submissions; holds every pooled request */
    inter_pools_t          pools;
    pthread_t              proxy;
    atomic_bool            running;
    bool                   connected;
    atomic_uint_fast64_t   key_counter;
    pthread_mutex_t        mr_lock;     /* registrations from several threads */
    pthread_mutex_t        watch_lock;  /* the failure watches, set by users, read by the proxy */
    inter_watch_t          watches[INTER_MAX_FAILURE_WATCHES];
    inter_mr_t            *mrs;         /* live registrations, closed first at destroy */
    bool                   beat_by_send; /* proxy: heartbeats by send (see inter_heartbeat) */
    inter_op_t            *beat_ops;    /* [world] heartbeat sends, slot -1 when none is out */
    /* Held for each round of progress; the fields below, "proxy-owned", are touched only
     * by whoever holds it: the progress thread, or a waiting caller in caller mode. */
    pthread_mutex_t        progress_lock;
    bool                   caller_progress; /* waiters progress; the thread only beats */
    atomic_uint            rings_live;    /* work rings attached or retiring: run flat out */
    /* proxy-owned */
    inter_queues_t         pending;     /* operations waiting to be posted, per peer */
    inter_peer_pace_t     *pace;        /* [world] rate control towards each peer */
    inter_request_t       *active;
    inter_request_t       *recvs;       /* posted user receives, in order */
    inter_unexpected_t    *unexpected;
    inter_request_t       *notify[INTER_IMM_MAX];
    uint64_t               next_heartbeat;
    uint64_t               last_step;     /* clock of the last round of progress */
    /* shared */
    _Atomic uint64_t       imm_count[INTER_IMM_MAX];
    _Atomic uint64_t       barrier_count[INTER_BARRIER_SLOTS];
    /* Barrier sequence per group of ranks (keyed by a hash of the sorted members). */
    pthread_mutex_t        barrier_lock;
    uint64_t               barrier_keys[INTER_BARRIER_GROUPS];
    uint32_t               barrier_seqs[INTER_BARRIER_GROUPS];
    int                    num_barrier_groups;
    /* The proxy's pulse: a proxy stuck inside the transport (shm spins forever on a lock a
     * dead peer held) is seen by waiters, who fail instead of hanging. */
    _Atomic uint64_t       proxy_pulse;   /* clock of the proxy's last loop */
    atomic_int             wedged_on;     /* peer a waiter saw the proxy stuck on, -1 none */
    inter_op_t            *rx_retry;      /* proxy: receive buffers whose re-post failed */
    bool                   rail_broken[INTER_RAIL_SLOTS]; /* proxy: its CQ cannot be read */
    bool                   connect_failed;
    /* Waiters spin briefly, then sleep on wake_seq; the proxy bumps it and wakes them
     * after completions, so sleeping waiters leave the cores to the proxies. */
    atomic_uint            wake_seq;
    atomic_int             sleepers;
    atomic_int             proxy_target;  /* peer the proxy is posting to, -1 none */
    /* [0] barrier landing word, [1] barrier source, [INTER_CTRL_FLUSH] where work rings'
     * loopback reads land (never read) */
    uint64_t              *ctrl;
    inter_mr_t            *ctrl_mr;
    struct inter_late_release *late_release; /* freed after the endpoints, at destroy */
    struct inter_ring     *rings;         /* proxy: attached work rings */
    struct inter_ring     *retired_rings; /* proxy: detached ones with commands in flight */
    /* Leaving (inter_leave.c): set by destroy's thread, then the handshake's state. */
    atomic_bool            leaving;       /* destroy asks the peers to answer */
    atomic_bool            leave_started; /* set by the proxy once the LEAVINGs are owed */
    atomic_bool            leave_owing;   /* a message below is yet to go */
    atomic_bool           *peer_left;     /* [world] it said it is leaving */
    atomic_uint           *leave_acks;    /* [world] its answers to this rank's LEAVING */
    atomic_uint           *leave_asked;   /* [world] the answers waited for: rails it went on */
    uint32_t              *leave_owed;    /* [world] proxy-owned: rails LEAVING is yet to go on */
    uint32_t              *acks_owed;     /* [world] proxy-owned: rails owed a LEFT_ACK */
    uint32_t              *rails_used;    /* [world] proxy-owned: rails an operation went on */
};

/* The next open rail slot after r (start with -1), network rails first; -1 after the last. */
static inline int inter_next_rail(const inter_engine_t *engine, int r)
{
    while (++r < INTER_RAIL_SLOTS) {
        if (engine->rails[r].tp != NULL) {
            return r;
        }
    }
    return -1;
}

#define INTER_FOR_EACH_RAIL(engine, r) \
    for (int r = inter_next_rail((engine), -1); r >= 0; r = inter_next_rail((engine), r))

/* The rail slot that carries chunk rail `chunk_rail` of a transfer with peer. */
static inline int inter_rail_for(const inter_engine_t *engine, int peer, uint32_t chunk_rail)
{
    return engine->peer_info[peer].local ? INTER_LOCAL_RAIL : (int)chunk_rail;
}

/** Counter consumption: take count if at least count are there (compare-exchange). */
static inline bool inter_counter_take(_Atomic uint64_t *counter, uint64_t count)
{
    uint64_t seen = atomic_load_explicit(counter, memory_order_acquire);

    while (seen >= count) {
        if (atomic_compare_exchange_weak_explicit(counter, &seen, seen - count,
                                                  memory_order_acq_rel, memory_order_acquire)) {
            return true;
        }
    }
    return false;
}

/** Wake waiters sleeping on the engine (after anything they may wait for changed). */
void inter_engine_wake(inter_engine_t *engine);
/** Store STRATA_ERR_PEER_FAILED into every failure word watching peer (the proxy, as it
 *  fails); forget every watch (the engine's destroy). */
void inter_engine_announce_failure(inter_engine_t *engine, int peer);
void inter_engine_unwatch_all(inter_engine_t *engine);

/* inter_leave.c: the handshake at destroy (the thread that destroys: inter_engine_leave;
 * the proxy: the rest). */
strata_status_t inter_leave_setup(inter_engine_t *engine);
void  inter_leave_cleanup(inter_engine_t *engine);
/* Tell every live peer this rank is leaving; wait (bounded) until each answered. */
void  inter_engine_leave(inter_engine_t *engine);
void  inter_leave_on_message(inter_engine_t *engine, int src, inter_msg_type_t type, int rail);
int   inter_leave_progress(inter_engine_t *engine); /* owed messages out; how many went */

/* inter_proxy.c */
void *inter_proxy_main(void *arg);
/** The CPUs the proxy thread is started on; false: wherever the process runs. */
bool  inter_proxy_cpus(const inter_engine_t *engine, cpu_set_t *set_p);
/* Stop the progress thread's loop (it is joined after). */
void  inter_proxy_stop(inter_engine_t *engine);
void  inter_proxy_drain(inter_engine_t *engine); /* at destroy: fail and free everything */
/* inter_liveness.c (proxy): fail peer and everything involving it; heartbeats and the peer
 * timeout, once per round of progress. */
void  inter_proxy_fail_peer(inter_engine_t *engine, int peer, const char *why);
void  inter_heartbeat(inter_engine_t *engine, uint64_t now);
/* An operation is over (done, failed or never posted); finish its request after the last. */
void  inter_op_finished(inter_op_t *op, strata_status_t status);

/* inter_post.c (proxy thread) */
/* One operation on its rail's transport. */
strata_status_t inter_post_one(inter_engine_t *engine, const inter_post_t *post);
/* A write or read (of a request or a work ring command) as the transport's descriptor. */
inter_post_t    inter_rma_post(const inter_engine_t *engine, inter_op_t *op);
/* Post what waits in the per-peer queues, the peers in turn, until the transport pushes
 * back. A peer whose window is full keeps its operations, in order, and the others go on.
 * Returns the operations that left the queues. */
int             inter_post_pending(inter_engine_t *engine);

/* inter_config.c: who drives the transports, chosen at creation from the params (logged),
 * then kept off the waiting threads where a rail can stall on a dead peer. */
bool inter_choose_progress(const inter_engine_params_t *params);
void inter_avoid_caller_stalls(inter_engine_t *engine);

/* inter_connect.c: a peer's address blob, checked before anything of it is used. */
typedef struct inter_blob_expect {
    const char *transport;        /* our transport's name */
    uint64_t    addr_size;        /* our rails' address slot */
    uint64_t    stripe_min_chunk;
    uint32_t    stripe_max_chunks;
    uint32_t    msg_size;
} inter_blob_expect_t;

typedef struct inter_blob_view {
    int            num_rails;
    bool           has_local;
    inter_rdesc_t  ctrl;                       /* its barrier landing word */
    const uint8_t *addr[INTER_RAIL_SLOTS];     /* each slot's address, in the blob */
    uint32_t       addr_len[INTER_RAIL_SLOTS]; /* <= the expected addr_size */
} inter_blob_view_t;

/** Bytes of a blob whose address slots hold addr_size bytes each. */
size_t inter_blob_size(uint64_t addr_size);
/**
 * A peer's blob of size bytes, checked whole against what this rank expects: its view on
 * STRATA_OK; STRATA_ERR_CONFIG (another transport or address size) or STRATA_ERR_INVALID
 * (anything else malformed or configured differently) with why (UTIL_REASON_LEN). Pure:
 * peers' bytes go through nothing else before this (tests/fuzz/fuzz_peer_address.c).
 */
strata_status_t inter_blob_parse(const void *blob, size_t size, const inter_blob_expect_t *expect,
                                 inter_blob_view_t *view, char *why);

/* inter_ring.c (proxy thread) */
int  inter_ring_progress(inter_engine_t *engine);           /* post what producers published */
void inter_ring_op_done(inter_engine_t *engine, inter_op_t *op, strata_status_t status);
/* A command that waited in its peer's queue was posted from it: counted in the ring's stats
 * (its slot still holds the command: credit comes back only once it completes). */
void inter_ring_op_posted(inter_op_t *op);
/* A command that waited in its peer's queue leaves it unposted (its ring failed or was
 * detached, or its peer failed): its slot is free, nothing is counted. */
void inter_ring_op_dropped(inter_op_t *op);
/* Counted by a ring: an immediate that landed on rail. */
bool inter_ring_imm(inter_engine_t *engine, uint32_t value, int rail);
/* A ring's loopback read completed (inter_ring_params_t.flush_by_read). */
void inter_ring_flush_done(inter_engine_t *engine, inter_op_t *op, strata_status_t status);
/* A ring as attach makes it (inter_engine_ring_attach), and its memory initialised. */
inter_ring_t *inter_ring_new(const inter_engine_t *engine, const inter_ring_params_t *p);
void inter_ring_init_mem(const inter_ring_params_t *p);
void inter_ring_publish(inter_engine_t *engine);             /* after a round of polling */
/** A ring word producers and the proxy share, as an atomic. */
static inline _Atomic uint64_t *inter_ring_word(uint64_t *word)
{
    return (_Atomic uint64_t *)word;
}
/** Store status into the ring's failure word, once (producers and waiters stop). */
void inter_ring_set_failure(inter_ring_t *ring, strata_status_t status);
/** Fail every attached ring that has peer among its peers (peer failed). */
void inter_ring_fail_peer(inter_engine_t *engine, int peer, strata_status_t status);
void inter_ring_accept(inter_engine_t *engine, inter_request_t *req);
void inter_ring_sweep(inter_engine_t *engine);               /* free retired rings now idle */
void inter_ring_free(inter_ring_t *ring);

/* inter_engine.c */
/**
 * Receive buffers to post on a rail whose messages take slot_size bytes: INTER_RX_SLOTS,
 * or, where every landing immediate consumes one (rx_cq_data), as many as the endpoint
 * holds (rx_size) within INTER_RX_POOL_MAX_BYTES and never fewer.
 */
int inter_rx_pool_slots(bool rx_cq_data, size_t rx_size, size_t slot_size);

/** True (and the peer the proxy was posting to is failed) when the proxy is stuck. */
bool inter_engine_wedged(inter_engine_t *engine);

/**
 * Wait for progress: yield-spin for a while (*spin_until starts at 0), then sleep up to 1 ms unless wake_seq has
 * moved from seq, which the caller read before it last checked its condition.
 */
void inter_engine_idle(inter_engine_t *engine, uint64_t *spin_until, unsigned seq);

/** Striping between this rank and peer (the pair's rails, the engine's chunk bounds). */
void inter_engine_stripe(const inter_engine_t *engine, int peer, inter_stripe_params_t *stripe);

/* inter_pool.c */
strata_status_t inter_pools_create(inter_engine_t *engine);
void            inter_pools_destroy(inter_engine_t *engine);
/**
 * A cleared request of type with num_ops operations (req->ops, chained in order) and, for
 * INTER_REQ_SEND, a send copy of copy_size bytes in req->buf, all from the pools. Any thread.
 * STRATA_ERR_BUSY when a pool has not enough free now (the proxy is asked to sweep: retry
 * after progress); STRATA_ERR_INVALID, with a log line, when num_ops is more than the
 * pool holds at all. Never allocates.
 */
strata_status_t inter_request_take(inter_engine_t *engine, inter_req_type_t type,
                                   uint32_t num_ops, inter_request_t **req_p);
/** inter_request_take, retrying on STRATA_ERR_BUSY until deadline (the engine's own requests). */
strata_status_t inter_request_take_wait(inter_engine_t *engine, inter_req_type_t type,
                                        uint32_t num_ops, uint64_t deadline,
                                        inter_request_t **req_p);
/** Give a request, its operations and its copy back to the pools. Tolerates NULL. */
void            inter_request_destroy(inter_request_t *req);
/** A sweep would free a request (seen done and given back) or finish one (a cancelled
 *  receive): counted towards sweeping before the heartbeat's; soon: sweep at the next
 *  round (a list write's, which holds up to a quarter of the operations). Any thread. */
void            inter_pools_reclaimable(inter_engine_t *engine, bool soon);
/** Proxy: whether enough was given back (or a submitter starves) to sweep before the beat. */
bool            inter_pools_sweep_due(const inter_engine_t *engine);
/** Proxy: a sweep starts; what is reclaimable by now it will find. */
void            inter_pools_sweeping(inter_engine_t *engine);

/* inter_queue.c (proxy) */
strata_status_t inter_queues_init(inter_queues_t *queues, int world);
void            inter_queues_cleanup(inter_queues_t *queues); /* tolerates a cleared one */
/** Whether op goes in its peer's express lane (and past the peer's window). */
bool            inter_op_express(const inter_op_t *op);
/** op at the end of its lane of op->peer's queue; the peer waits for a turn if it was not. */
void            inter_queues_push(inter_queues_t *queues, inter_op_t *op);
/** The first operation of peer's queue (express lane first), NULL when it is empty; the
 *  operations after it in its lane follow through next. */
inter_op_t     *inter_queues_head(const inter_queues_t *queues, int peer);
/** The first operation leaves peer's queue. */
void            inter_queues_pop(inter_queues_t *queues, int peer);
/** The peer whose turn it is (taken out of the turns), -1 when none waits. */
int             inter_queues_next(inter_queues_t *queues);
/** Peer's turn is over: it waits for another after the others if its queue is not empty. */
void            inter_queues_end_turn(inter_queues_t *queues, int peer);
/** Peers waiting for a turn. */
int             inter_queues_waiting(const inter_queues_t *queues);
/** Every queue emptied, nobody waiting (destroy, once the endpoints are shut down). */
void            inter_queues_clear(inter_queues_t *queues);

/* inter_pace.c */
strata_status_t inter_pace_create(inter_engine_t *engine);
void            inter_pace_destroy(inter_engine_t *engine);
/** Rate control towards peer from scratch, its floor one chunk per rail of the pair. */
void            inter_pace_reset(inter_engine_t *engine, int peer);
/** Proxy: whether the next operation to peer may go, bytes_ahead being posted with it. */
bool            inter_pace_admits(const inter_engine_t *engine, int peer, uint64_t bytes_ahead);
/** Proxy: the window holds op back (counted once per operation). */
void            inter_pace_hold(inter_engine_t *engine, inter_op_t *op);
/** Proxy: op was posted at now; more_queued, more for its peer waits right behind it. */
void            inter_pace_posted(inter_engine_t *engine, inter_op_t *op, bool more_queued,
                                  uint64_t now);
/** Proxy: op (a write, read or send, a work ring's command too) completed with status. */
void            inter_pace_completed(inter_engine_t *engine, const inter_op_t *op,
                                     strata_status_t status, uint64_t now);

/* inter_ops.c */
strata_status_t inter_request_submit(inter_engine_t *engine, inter_request_t *req);
void             inter_request_finish(inter_request_t *req, strata_status_t status);
/* Bad input is refused with one log line (see engine.h). */
strata_status_t inter_check_peer(inter_engine_t *engine, int peer);
strata_status_t inter_check_local(const inter_mr_t *lmr, size_t off, size_t len);
strata_status_t inter_check_remote(const inter_engine_t *engine, int peer,
                                   const inter_rdesc_t *rdesc, size_t off, size_t len);
strata_status_t inter_check_length(const inter_engine_t *engine, size_t len);
strata_status_t inter_check_imm(bool with_imm, uint32_t imm);
/** op becomes a write or read of len bytes on rail (with_imm: imm as the user's). */
void            inter_fill_rma(const inter_engine_t *engine, inter_op_t *op,
                               inter_op_kind_t kind, int peer, int rail, const inter_mr_t *lmr,
                               size_t loff, const inter_rdesc_t *rdesc, size_t roff, size_t len,
                               bool with_imm, uint32_t imm);

/* inter_list.c */
/** Proxy: a list write's data operation op finished: true where it was filled with the next
 *  chunk and queued again; otherwise it is done for good, and once every data operation is,
 *  the immediates go (or, after an error, count as finished unposted). */
bool            inter_list_op_done(inter_engine_t *engine, inter_op_t *op);
/** Proxy: a list write arrives: its data operations queued (none: its immediates). */
void            inter_list_accept(inter_engine_t *engine, inter_request_t *req);

static inline uint64_t inter_remote_addr(const inter_engine_t *engine, int rail,
                                         const inter_rdesc_t *rdesc, size_t offset)
{
    return engine->rails[rail].tp->virt_addr ? rdesc->base + offset : rdesc->mr_offset + offset;
}

#endif
