/*
 * Inside the verbs transport: the address blob, the choice of device, port and GID, and
 * the mapping of work completions, as plain functions the unit test drives without a
 * device; and the transport object that verbs_transport.c, verbs_connect.c and
 * verbs_data.c share.
 */
#ifndef STRATA_INTER_VERBS_H
#define STRATA_INTER_VERBS_H

#include "inter/transport.h"
#include "util/util.h"

#include <infiniband/verbs.h>

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VERBS_MAX_PORTS   8   /* ports of one device looked at (ConnectX has 1 or 2) */
#define VERBS_MAX_DEVICES 64
#define VERBS_NAME_MAX    64  /* IBV_SYSFS_NAME_MAX */
#define VERBS_VENDOR_MELLANOX 0x02c9u /* IEEE OUI that ConnectX devices report (mlx4, mlx5) */
#define VERBS_VENDOR_AMAZON   0x1d0fu /* efa */

/* --- Address blob (verbs_addr.c) --------------------------------------------------------- */

/*
 * What a rank tells every other about one rail, in network byte order on the wire: its
 * port's path (GID, LID, link layer, MTU), the first PSN of its QPs, its own rank and the
 * world size, then one QPN per rank: entry p is the QP this rank set aside for rank p
 * (for itself: the receiving half of its loopback pair).
 */
#define VERBS_ADDR_MAGIC   0x56524231u /* "VRB1" */
#define VERBS_ADDR_HEADER  44          /* bytes before the QPNs */

typedef struct verbs_addr {
    uint32_t owner;      /* rank whose address this is */
    uint32_t world;      /* QPNs that follow */
    uint8_t  link_layer; /* IBV_LINK_LAYER_INFINIBAND or IBV_LINK_LAYER_ETHERNET */
    uint8_t  port;
    uint8_t  mtu;        /* enum ibv_mtu */
    uint16_t lid;
    uint32_t psn;        /* 24 bits */
    uint8_t  gid[16];
} verbs_addr_t;

/** Bytes of the blob for a world of that many ranks. */
size_t verbs_addr_size(int world);

/** Write addr and its world QPNs into buf (verbs_addr_size(addr->world) bytes). */
void verbs_addr_encode(const verbs_addr_t *addr, const uint32_t *qpns, void *buf);

/** Read the header of a blob of len bytes; STRATA_ERR_INVALID (logged) if it is not one. */
strata_status_t verbs_addr_decode(const void *buf, size_t len, verbs_addr_t *addr_p);

/** The QPN the blob's owner set aside for rank (blob already decoded to addr). */
uint32_t verbs_addr_qpn(const void *buf, const verbs_addr_t *addr, int rank);

/* --- Devices, ports and GIDs (verbs_select.c) ------------------------------------------- */

typedef enum verbs_dev_class {
    VERBS_DEV_CONNECTX, /* mlx4/mlx5: RC, write with immediate, SRQ: driven natively */
    VERBS_DEV_OTHER_RC, /* another InfiniBand-transport device (rxe, bnxt_re, irdma RoCE) */
    VERBS_DEV_EFA,      /* SRD and UD only: no RC QPs, so not for this transport */
    VERBS_DEV_NO_RC     /* iWARP, usnic, ...: not an InfiniBand transport */
} verbs_dev_class_t;

/** What discovery learnt of one device (filled from ibv_* queries, or by tests). */
typedef struct verbs_dev_info {
    char     name[VERBS_NAME_MAX];
    uint32_t vendor_id;
    int      transport;                  /* enum ibv_transport_type */
    int      num_ports;                  /* looked at: min(phys_port_cnt, VERBS_MAX_PORTS) */
    bool     active[VERBS_MAX_PORTS];    /* port i + 1 is IBV_PORT_ACTIVE */
    uint8_t  link_layer[VERBS_MAX_PORTS];
    bool     opened;                     /* the device could be opened and queried */
} verbs_dev_info_t;

/** A device named as "mlx5_0" or "mlx5_0:1"; port 0 when none is given. */
typedef struct verbs_dev_spec {
    char name[VERBS_NAME_MAX];
    int  port;
} verbs_dev_spec_t;

/** Parse text (may be NULL or ""); STRATA_ERR_CONFIG with the reason in err if malformed. */
strata_status_t verbs_spec_parse(const char *text, verbs_dev_spec_t *spec_p, char *err,
                                 size_t err_len);

verbs_dev_class_t verbs_dev_classify(const verbs_dev_info_t *dev);

/** Score (INTER_PROBE_*) of one device for this transport, with a line saying why. */
int verbs_dev_score(const verbs_dev_info_t *dev, char *why, size_t why_len);

/**
 * The device and port to open among devs. spec names one (empty: the best-scoring device
 * with an active port, the first on ties). A named device that is absent is
 * STRATA_ERR_CONFIG when required, else the rail falls back to the best device
 * (*fallback_p true). A named port that is absent or not active, or no usable device at
 * all: STRATA_ERR_CONFIG when one was named, else STRATA_ERR_UNSUPPORTED. msg says what
 * was decided or why not, naming the devices present.
 */
strata_status_t verbs_select_device(const verbs_dev_info_t *devs, int num_devs,
                                    const verbs_dev_spec_t *spec, bool required, int *index_p,
                                    int *port_p, bool *fallback_p, char *msg, size_t msg_len);

/** The line for a machine where ibv_get_device_list found nothing (errno err, or 0). */
void verbs_no_device_line(int err, char *msg, size_t msg_len);

/** One GID table entry as discovery read it. */
typedef struct verbs_gid_info {
    uint32_t index;
    uint32_t type; /* IBV_GID_TYPE_* */
    uint8_t  raw[16];
} verbs_gid_info_t;

/**
 * The GID index to use on an Ethernet (RoCE) port: wanted if >= 0 (it must be listed),
 * else the first RoCE v2 GID holding an IPv4 address, else the first RoCE v2 one, else
 * the first RoCE v1 one. -1 when none fits.
 */
int verbs_select_gid(const verbs_gid_info_t *gids, int num_gids, int wanted);

/** Path MTU of a connection: the smaller of both ports' active MTUs. */
enum ibv_mtu verbs_path_mtu(enum ibv_mtu local, enum ibv_mtu remote);

/* --- Completions (verbs_data.c) ------------------------------------------------------------ */

typedef enum verbs_ctx_kind {
    VERBS_CTX_TX = 0x7854,     /* the engine's write, read or send */
    VERBS_CTX_RX = 0x7852,     /* the engine's receive buffer (SRQ) */
    VERBS_CTX_INJECT = 0x7849  /* this transport's own, for injected sends */
} verbs_ctx_kind_t;

/* What the transport keeps in the first bytes of every posted context (wr_id points here;
 * the engine's contexts are inter_op_t, aligned for pointers). */
typedef struct verbs_ctx {
    uint32_t kind; /* verbs_ctx_kind_t */
    uint32_t peer; /* TX, INJECT: the peer's index */
    uint64_t seq;  /* TX, INJECT: the peer's send-queue count once this was posted */
} verbs_ctx_t;

_Static_assert(sizeof(verbs_ctx_t) <= INTER_CONTEXT_SPACE, "verbs context too large");

/** The status a work completion's status maps to. */
strata_status_t verbs_wc_status(enum ibv_wc_status status);

/** The completion the engine sees for wc, whose wr_id pointed at ctx. */
void verbs_wc_to_cqe(const struct ibv_wc *wc, const verbs_ctx_t *ctx, inter_cqe_t *cqe);

/* --- The transport object (verbs_transport.c, verbs_connect.c, verbs_data.c) -------------- */

typedef struct verbs_peer {
    struct ibv_qp *qp;
    uint64_t       posted;        /* work requests posted on the send queue, ever */
    uint64_t       retired;       /* of which the queue has freed (a later signaled one done) */
    uint64_t       last_signaled; /* posted count at the last signaled request */
    bool           connected;
    bool           failed;        /* an error completion: later posts fail at once */
    bool           inject_out;    /* inject_ctx is signaled and not yet completed */
    verbs_ctx_t    inject_ctx;
} verbs_peer_t;

typedef struct verbs_mr {
    struct verbs_mr *prev, *next; /* live registrations (mr_lock) */
    struct ibv_mr   *mr;
} verbs_mr_t;

typedef struct verbs_config {
    int64_t gid_index;
    int64_t traffic_class;
    int64_t service_level;
    int64_t timeout;
    int64_t retry_count;
    int64_t sq_depth;
    int64_t srq_depth;
    int64_t inline_size;
} verbs_config_t;

typedef struct verbs_transport {
    inter_transport_t   base;
    verbs_config_t      config;
    int                 rank, world;
    struct ibv_context *ctx;
    struct ibv_pd      *pd;
    struct ibv_cq      *cq;
    struct ibv_srq     *srq;
    verbs_peer_t       *peers;       /* [world]; peers[rank] sends to self_rx */
    struct ibv_qp      *self_rx;     /* receiving half of the loopback pair */
    bool                self_rx_connected;
    uint8_t             port;
    uint8_t             link_layer;
    enum ibv_mtu        mtu;
    uint16_t            lid;
    int                 gid_index;
    union ibv_gid       gid;
    uint32_t            psn;
    uint32_t            sq_depth;
    uint32_t            max_rd_atomic;  /* reads in flight per QP, as initiator */
    uint32_t            max_dest_rd_atomic;
    uint64_t            signal_every;   /* an inject is signaled after this many unsignaled */
    uint64_t            next_async_ns;  /* when poll next reads the device's async events */
    bool                shut;
    pthread_mutex_t     mr_lock;
    verbs_mr_t         *mrs;
    /* GPU memory registers through a dma-buf (no peer-memory module), exported by this */
    inter_dmabuf_fn_t   dmabuf_fn;
    void               *dmabuf_ctx;
} verbs_transport_t;

static inline verbs_transport_t *verbs_of(inter_transport_t *tp)
{
    return util_container_of(tp, verbs_transport_t, base);
}

/* verbs_connect.c: addresses and connections. */
/** The peer whose QP has number qp_num (the loopback pair's receiver: this rank); -1. */
int verbs_peer_of_qpn(const verbs_transport_t *vt, uint32_t qp_num);
/** This rank's address: its port path and the QPN it set aside for each rank. */
strata_status_t verbs_address(inter_transport_t *tp, void *addr, size_t *len_p);
/** Connect the QP set aside for the rank whose address this is (and, for this rank's own
 *  address, the loopback pair). */
strata_status_t verbs_insert_peer(inter_transport_t *tp, const void *addr, size_t len,
                                  uint64_t *peer_p);

/* verbs_data.c: the ops of the data path. */
strata_status_t verbs_post(inter_transport_t *tp, const inter_post_t *posts, int count,
                           int *posted_p);
strata_status_t verbs_inject(inter_transport_t *tp, uint64_t peer, const void *buf, size_t len);
strata_status_t verbs_post_recv(inter_transport_t *tp, void *buf, size_t len, void *desc,
                                void *context);
strata_status_t verbs_poll(inter_transport_t *tp, inter_cqe_t *cqes, int max, int *count_p);

#endif
