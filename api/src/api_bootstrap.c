/*
 * Built-in bootstrap: a TCP star around rank 0, and its configuration from the launcher's
 * environment (torchrun, Slurm, Open MPI).
 */
#include "api/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API_BOOTSTRAP_MAGIC   0x53545241u /* "STRA" */
#define API_BOOTSTRAP_VERSION 1u
#define API_HELLO_NS          (2 * UTIL_NSEC_PER_SEC)

typedef struct api_bootstrap_hello {
    uint32_t magic;
    uint32_t version;
    int32_t  rank;
    int32_t  world_size;
} api_bootstrap_hello_t;

/* Precedes every block a rank sends for a collective. */
typedef struct api_bootstrap_header {
    uint32_t magic;
    uint32_t seq;
    uint64_t size;
} api_bootstrap_header_t;

typedef struct api_tcp_bootstrap {
    strata_bootstrap_t base;
    uint64_t           timeout_ns;
    uint32_t           seq;       /* collectives done so far; every rank counts alike */
    int                root_fd;   /* non-root: the connection to rank 0 */
    int               *peer_fds;  /* root: connection of each rank (index 0 unused) */
} api_tcp_bootstrap_t;

typedef struct api_bootstrap_config {
    char    *addr;
    int64_t  port;
    uint64_t timeout_ns;
} api_bootstrap_config_t;

static const util_config_field_t api_bootstrap_config_fields[] = {
    {.name = "BOOTSTRAP_ADDR", .default_value = "",
     .doc = "Address of rank 0's rendezvous (default: MASTER_ADDR).",
     .type = UTIL_CONFIG_STRING, .offset = offsetof(api_bootstrap_config_t, addr)},
    {.name = "BOOTSTRAP_PORT", .default_value = "0",
     .doc = "Port of rank 0's rendezvous (0: MASTER_PORT + 1).",
     .type = UTIL_CONFIG_INT, .offset = offsetof(api_bootstrap_config_t, port)},
    {.name = "BOOTSTRAP_TIMEOUT", .default_value = "30s",
     .doc = "Longest wait for the rendezvous and for each bootstrap collective.",
     .type = UTIL_CONFIG_TIME, .offset = offsetof(api_bootstrap_config_t, timeout_ns)},
};

const util_config_table_t api_bootstrap_config_table = {
    .layer       = "bootstrap",
    .fields      = api_bootstrap_config_fields,
    .num_fields  = UTIL_ARRAY_SIZE(api_bootstrap_config_fields),
    .struct_size = sizeof(api_bootstrap_config_t),
};

static api_tcp_bootstrap_t *api_tcp_of(void *ctx)
{
    return (api_tcp_bootstrap_t *)ctx;
}

static uint64_t api_bootstrap_deadline(const api_tcp_bootstrap_t *bs)
{
    return util_clock_now_ns() + bs->timeout_ns;
}

static strata_status_t api_bootstrap_lost(int peer, strata_status_t status, const char *what)
{
    UTIL_LOG_ERROR("bootstrap: %s rank %d failed: %s", what, peer,
                   (status == STRATA_ERR_TIMEOUT) ? "timed out" : "connection lost");
    return (status == STRATA_ERR_TIMEOUT) ? STRATA_ERR_TIMEOUT : STRATA_ERR_BOOTSTRAP;
}

/* Root: gather every block, then send the whole buffer back to every rank. */
static strata_status_t api_bootstrap_root_allgather(api_tcp_bootstrap_t *bs, char *recv_buf,
                                                    size_t size, uint64_t deadline)
{
    api_bootstrap_header_t header;
    strata_status_t status;

    for (int peer = 1; peer < bs->base.world_size; ++peer) {
        status = util_sock_recv_all(bs->peer_fds[peer], &header, sizeof(header), deadline);
        if (status == STRATA_OK) {
            if (header.magic != API_BOOTSTRAP_MAGIC || header.seq != bs->seq ||
                header.size != size) {
                UTIL_LOG_ERROR("bootstrap: rank %d is in another collective (seq %u size %llu, "
                               "expected seq %u size %zu)", peer, header.seq,
                               (unsigned long long)header.size, bs->seq, size);
                return STRATA_ERR_BOOTSTRAP;
            }
            status = util_sock_recv_all(bs->peer_fds[peer], recv_buf + (size_t)peer * size,
                                        size, deadline);
        }
        if (status != STRATA_OK) {
            return api_bootstrap_lost(peer, status, "gathering from");
        }
    }
    for (int peer = 1; peer < bs->base.world_size; ++peer) {
        status = util_sock_send_all(bs->peer_fds[peer], recv_buf,
                                    size * (size_t)bs->base.world_size, deadline);
        if (status != STRATA_OK) {
            return api_bootstrap_lost(peer, status, "sending to");
        }
    }
    return STRATA_OK;
}

static strata_status_t api_bootstrap_allgather(void *ctx, const void *send_buf, void *recv_buf,
                                               size_t size)
{
    api_tcp_bootstrap_t *bs = api_tcp_of(ctx);
    api_bootstrap_header_t header = {.magic = API_BOOTSTRAP_MAGIC, .seq = bs->seq, .size = size};
    uint64_t deadline = api_bootstrap_deadline(bs);
    strata_status_t status;

    if (size > 0) {
        memcpy((char *)recv_buf + (size_t)bs->base.rank * size, send_buf, size);
    }
    if (bs->base.rank == 0) {
        status = api_bootstrap_root_allgather(bs, recv_buf, size, deadline);
        if (status != STRATA_OK) {
            /* The star is broken: let every other rank see it now, not at its timeout. */
            for (int peer = 1; peer < bs->base.world_size; ++peer) {
                util_sock_close(bs->peer_fds[peer]);
                bs->peer_fds[peer] = -1;
            }
        }
    } else {
        status = util_sock_send_all(bs->root_fd, &header, sizeof(header), deadline);
        if (status == STRATA_OK && size > 0) {
            status = util_sock_send_all(bs->root_fd, send_buf, size, deadline);
        }
        if (status == STRATA_OK) {
            status = util_sock_recv_all(bs->root_fd, recv_buf, size * (size_t)bs->base.world_size,
                                        deadline);
        }
        if (status != STRATA_OK) {
            status = api_bootstrap_lost(0, status, "exchange with");
        }
    }
    bs->seq++;
    return status;
}

static strata_status_t api_bootstrap_barrier(void *ctx)
{
    api_tcp_bootstrap_t *bs = api_tcp_of(ctx);
    char token = 0, *all = malloc((size_t)bs->base.world_size);
    strata_status_t status;

    if (all == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    status = api_bootstrap_allgather(ctx, &token, all, 1);
    free(all);
    return status;
}

/* Root's answer to a hello: 1 accepted, 0 refused. */
static strata_status_t api_bootstrap_answer(int fd, uint8_t accepted)
{
    return util_sock_send_all(fd, &accepted, 1, util_clock_now_ns() + API_HELLO_NS);
}

/* Root: accept until every other rank has said hello, each rank once. */
static strata_status_t api_bootstrap_accept_all(api_tcp_bootstrap_t *bs, int listen_fd,
                                                uint64_t deadline)
{
    api_bootstrap_hello_t hello;
    strata_status_t status;
    int joined = 1, fd;

    while (joined < bs->base.world_size) {
        status = util_sock_accept(listen_fd, deadline, &fd);
        if (status != STRATA_OK) {
            UTIL_LOG_ERROR("bootstrap: only %d of %d ranks joined before the timeout", joined,
                           bs->base.world_size);
            return (status == STRATA_ERR_TIMEOUT) ? STRATA_ERR_TIMEOUT : STRATA_ERR_BOOTSTRAP;
        }
        memset(&hello, 0, sizeof(hello));
        /* A stray connection that never speaks must not hold up the rendezvous. */
        status = util_sock_recv_all(fd, &hello, sizeof(hello),
                                    UTIL_MIN(deadline, util_clock_now_ns() + API_HELLO_NS));
        if (status != STRATA_OK || hello.magic != API_BOOTSTRAP_MAGIC ||
            hello.version != API_BOOTSTRAP_VERSION || hello.world_size != bs->base.world_size ||
            hello.rank <= 0 || hello.rank >= bs->base.world_size ||
            bs->peer_fds[hello.rank] >= 0) {
            UTIL_LOG_WARN("bootstrap: refused a connection (rank %d of %d, version %u): not "
                          "this job, or a rank seen twice", hello.rank, hello.world_size,
                          hello.version);
            api_bootstrap_answer(fd, 0); /* tell it now rather than at its timeout */
            util_sock_close(fd);
            continue;
        }
        if (api_bootstrap_answer(fd, 1) != STRATA_OK) {
            util_sock_close(fd); /* gone already: it may come back and say hello again */
            continue;
        }
        bs->peer_fds[hello.rank] = fd;
        ++joined;
    }
    return STRATA_OK;
}

static strata_status_t api_bootstrap_root_start(api_tcp_bootstrap_t *bs, const char *addr,
                                                uint16_t port)
{
    uint64_t deadline = api_bootstrap_deadline(bs);
    strata_status_t status;
    uint16_t bound;
    int listen_fd;

    bs->peer_fds = malloc((size_t)bs->base.world_size * sizeof(int));
    if (bs->peer_fds == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    for (int i = 0; i < bs->base.world_size; ++i) {
        bs->peer_fds[i] = -1;
    }
    /* Every address: the one others were told may resolve differently here (127.0.1.1). */
    (void)addr;
    status = util_sock_listen(NULL, port, &listen_fd, &bound);
    if (status != STRATA_OK) {
        return status;
    }
    status = api_bootstrap_accept_all(bs, listen_fd, deadline);
    util_sock_close(listen_fd);
    return status;
}

static strata_status_t api_bootstrap_join(api_tcp_bootstrap_t *bs, const char *addr,
                                          uint16_t port)
{
    api_bootstrap_hello_t hello = {.magic = API_BOOTSTRAP_MAGIC, .version = API_BOOTSTRAP_VERSION,
                                   .rank = bs->base.rank, .world_size = bs->base.world_size};
    uint64_t deadline = api_bootstrap_deadline(bs);
    strata_status_t status;

    status = util_sock_connect(addr, port, deadline, &bs->root_fd);
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("bootstrap: rank %d could not reach rank 0 at %s:%u", bs->base.rank, addr,
                       port);
        return status;
    }
    uint8_t accepted = 0;

    status = util_sock_send_all(bs->root_fd, &hello, sizeof(hello), deadline);
    if (status == STRATA_OK) {
        status = util_sock_recv_all(bs->root_fd, &accepted, 1, deadline);
    }
    if (status != STRATA_OK || accepted != 1) {
        UTIL_LOG_ERROR("bootstrap: rank 0 at %s:%u %s rank %d of %d (another job on that "
                       "port, a different world size, or this rank taken twice)", addr, port,
                       status == STRATA_OK ? "refused" : "did not answer", bs->base.rank,
                       bs->base.world_size);
        return status == STRATA_ERR_TIMEOUT ? STRATA_ERR_TIMEOUT : STRATA_ERR_BOOTSTRAP;
    }
    return STRATA_OK;
}

STRATA_API void strata_bootstrap_destroy(strata_bootstrap_t *bootstrap)
{
    api_tcp_bootstrap_t *bs = (api_tcp_bootstrap_t *)bootstrap;

    if (bs == NULL) {
        return;
    }
    util_sock_close(bs->root_fd);
    for (int i = 0; bs->peer_fds != NULL && i < bs->base.world_size; ++i) {
        util_sock_close(bs->peer_fds[i]);
    }
    free(bs->peer_fds);
    free(bs);
}

static uint64_t api_bootstrap_default_timeout_ns(void)
{
    api_bootstrap_config_t config;
    uint64_t timeout = 30 * UTIL_NSEC_PER_SEC;

    if (util_config_read(&api_bootstrap_config_table, &config) == STRATA_OK) {
        timeout = config.timeout_ns;
        util_config_release(&api_bootstrap_config_table, &config);
    }
    return timeout;
}

STRATA_API strata_status_t strata_bootstrap_tcp_create(const char *root_addr, uint16_t port,
                                                       int rank, int world_size,
                                                       uint64_t timeout_ms,
                                                       strata_bootstrap_t **bootstrap_p)
{
    api_tcp_bootstrap_t *bs;
    strata_status_t status;

    if (bootstrap_p == NULL || world_size <= 0 || rank < 0 || rank >= world_size ||
        (world_size > 1 && (root_addr == NULL || root_addr[0] == '\0' || port == 0))) {
        UTIL_LOG_ERROR("bootstrap: invalid arguments: rank %d of %d, root '%s' port %u", rank,
                       world_size, root_addr ? root_addr : "(null)", port);
        return STRATA_ERR_INVALID;
    }
    bs = calloc(1, sizeof(*bs));
    if (bs == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    bs->base = (strata_bootstrap_t){.rank = rank, .world_size = world_size,
                                    .allgather = api_bootstrap_allgather,
                                    .barrier = api_bootstrap_barrier, .ctx = bs};
    bs->root_fd    = -1;
    bs->timeout_ns = timeout_ms ? timeout_ms * UTIL_NSEC_PER_MSEC
                                : api_bootstrap_default_timeout_ns();
    if (world_size == 1) {
        status = STRATA_OK;
    } else if (rank == 0) {
        status = api_bootstrap_root_start(bs, root_addr, port);
    } else {
        status = api_bootstrap_join(bs, root_addr, port);
    }
    if (status != STRATA_OK) {
        strata_bootstrap_destroy(&bs->base);
        return status;
    }
    *bootstrap_p = &bs->base;
    return STRATA_OK;
}

/* First of the launchers' variable pairs that is set. */
static bool api_env_rank(int *rank_p, int *world_p, const char **source_p)
{
    /* mpirun and torchrun inside a Slurm allocation inherit SLURM_PROCID: theirs win. */
    static const char *const pairs[][3] = {
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI"},
        {"RANK", "WORLD_SIZE", "torchrun"},
        {"SLURM_PROCID", "SLURM_NTASKS", "Slurm"},
    };
    const char *rank, *world;
    char *end1, *end2;
    long r, w;

    for (size_t i = 0; i < UTIL_ARRAY_SIZE(pairs); ++i) {
        rank  = util_config_foreign(pairs[i][0]);
        world = util_config_foreign(pairs[i][1]);
        if (rank == NULL || world == NULL) {
            continue;
        }
        r = strtol(rank, &end1, 10);
        w = strtol(world, &end2, 10);
        if (*end1 != '\0' || *end2 != '\0' || rank[0] == '\0' || world[0] == '\0' || w <= 0 ||
            w > INT32_MAX || r < 0 || r >= w) {
            UTIL_LOG_ERROR("bootstrap: %s=%s %s=%s is not a rank of a job", pairs[i][0], rank,
                           pairs[i][1], world);
            return false;
        }
        *rank_p   = (int)r;
        *world_p  = (int)w;
        *source_p = pairs[i][2];
        return true;
    }
    UTIL_LOG_ERROR("bootstrap: no launcher variables (RANK/WORLD_SIZE, SLURM_PROCID/"
                   "SLURM_NTASKS or OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE)");
    return false;
}

STRATA_API strata_status_t strata_bootstrap_from_env(strata_bootstrap_t **bootstrap_p)
{
    api_bootstrap_config_t config;
    const char *addr, *master_port, *source;
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
    if (world > 1 && (addr == NULL || addr[0] == '\0' || port <= 0 || port > 65535)) {
        UTIL_LOG_ERROR("bootstrap: rank %d of %d (%s) needs rank 0's address and port: set "
                       "STRATA_BOOTSTRAP_ADDR and STRATA_BOOTSTRAP_PORT (or MASTER_ADDR and "
                       "MASTER_PORT)", rank, world, source);
        status = STRATA_ERR_INVALID;
    } else {
        status = strata_bootstrap_tcp_create(addr ? addr : "", (uint16_t)port, rank, world,
                                             config.timeout_ns / UTIL_NSEC_PER_MSEC,
                                             bootstrap_p);
    }
    util_config_release(&api_bootstrap_config_table, &config);
    return status;
}
