/*
 * Built-in bootstrap: a TCP star around rank 0 (strata_bootstrap_tcp_create; the launchers'
 * variables are read in api_bootstrap_env.c). With a shared secret, rank 0 and each joining rank
 * prove to each other that they know it (HMAC-SHA256 over both sides' nonces) before rank 0
 * counts the connection as a rank; the secret itself never crosses the network.
 */
#include "api/api.h"
#include "api/src/api_bootstrap.h"
#include "util/util_file.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define API_BOOTSTRAP_MAGIC   0x53545241u /* "STRA" */
#define API_BOOTSTRAP_VERSION 3u          /* 3: the rank proves first, bound to its connection */
#define API_HELLO_NS          (2 * UTIL_NSEC_PER_SEC)
#define API_NONCE_LEN         32
#define API_SECRET_MAX        4096

/* Rank 0's answers to a hello. */
#define API_ANSWER_REFUSED   0
#define API_ANSWER_ACCEPTED  1 /* with a secret: followed by rank 0's MAC */
#define API_ANSWER_CHALLENGE 2 /* followed by rank 0's nonce; the rank proves first */

typedef struct api_bootstrap_hello {
    uint32_t      magic;
    uint32_t      version;
    int32_t       rank;
    int32_t       world_size;
    uint32_t      secret;   /* 1: this rank has a secret and wants rank 0's proof of it */
    uint32_t      reserved;
    unsigned char nonce[API_NONCE_LEN];
} api_bootstrap_hello_t;

/*
 * With a secret, after the hello and rank 0's nonce, each side proves it with
 *   HMAC(secret, label | its nonce | the other's | hello | the rank's end of the connection)
 * the rank first ("strata-bootstrap-rank"), then rank 0 ("strata-bootstrap-root") with its
 * acceptance. The rank's end (address and port, as it sees its socket and as rank 0 sees
 * the peer) binds the proofs to the one connection: a process that relays a rank to rank 0
 * holds two connections, and the rank's proof does not match the second.
 */
typedef struct api_bootstrap_endpoint {
    uint8_t  family; /* 4 or 6; an IPv4-mapped IPv6 address counts as 4 */
    uint8_t  pad;
    uint16_t port;   /* network order */
    uint8_t  addr[16];
} api_bootstrap_endpoint_t;

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
    unsigned char     *secret;    /* during the rendezvous only; NULL without one */
    size_t             secret_len;
    api_bootstrap_check_fn_t check; /* asked while a collective waits (a communicator's) */
    void                    *check_arg;
} api_tcp_bootstrap_t;

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
    {.name = "BOOTSTRAP_SECRET", .default_value = "",
     .doc = "Shared secret every rank must prove to join (HMAC challenge; never sent).",
     .type = UTIL_CONFIG_STRING, .offset = offsetof(api_bootstrap_config_t, secret)},
    {.name = "BOOTSTRAP_SECRET_FILE", .default_value = "",
     .doc = "File holding that secret (trailing newlines dropped); keep it mode 0600.",
     .type = UTIL_CONFIG_STRING, .offset = offsetof(api_bootstrap_config_t, secret_file)},
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

/* The communicator's verdict on its peers, when one watches this bootstrap. */
static strata_status_t api_bootstrap_check(void *ctx)
{
    api_tcp_bootstrap_t *bs = api_tcp_of(ctx);

    return bs->check != NULL ? bs->check(bs->check_arg) : STRATA_OK;
}

static strata_status_t api_bootstrap_lost(api_tcp_bootstrap_t *bs, int peer,
                                          strata_status_t status, const char *what)
{
    /* A connection lost because some rank failed: say that, as every rank will. */
    if (status != STRATA_OK && status != STRATA_ERR_PEER_FAILED &&
        api_bootstrap_check(bs) == STRATA_ERR_PEER_FAILED) {
        status = STRATA_ERR_PEER_FAILED;
    }
    UTIL_LOG_ERROR("bootstrap: %s rank %d failed: %s", what, peer,
                   status == STRATA_ERR_TIMEOUT       ? "timed out"
                   : status == STRATA_ERR_PEER_FAILED ? "a rank has failed (gave up early)"
                                                      : "connection lost");
    return (status == STRATA_ERR_TIMEOUT || status == STRATA_ERR_PEER_FAILED)
               ? status : STRATA_ERR_BOOTSTRAP;
}

static strata_status_t api_bootstrap_send(api_tcp_bootstrap_t *bs, int fd, const void *buf,
                                          size_t len, uint64_t deadline)
{
    return util_sock_send_all_checked(fd, buf, len, deadline,
                                      bs->check ? api_bootstrap_check : NULL, bs);
}

static strata_status_t api_bootstrap_recv(api_tcp_bootstrap_t *bs, int fd, void *buf,
                                          size_t len, uint64_t deadline)
{
    return util_sock_recv_all_checked(fd, buf, len, deadline,
                                      bs->check ? api_bootstrap_check : NULL, bs);
}

/* Root: gather every block, then send the whole buffer back to every rank. */
static strata_status_t api_bootstrap_root_allgather(api_tcp_bootstrap_t *bs, char *recv_buf,
                                                    size_t size, uint64_t deadline)
{
    api_bootstrap_header_t header;
    strata_status_t status;

    for (int peer = 1; peer < bs->base.world_size; ++peer) {
        status = api_bootstrap_recv(bs, bs->peer_fds[peer], &header, sizeof(header), deadline);
        if (status == STRATA_OK) {
            if (header.magic != API_BOOTSTRAP_MAGIC || header.seq != bs->seq ||
                header.size != size) {
                UTIL_LOG_ERROR("bootstrap: rank %d is in another collective (seq %u size %llu, "
                               "expected seq %u size %zu)", peer, header.seq,
                               (unsigned long long)header.size, bs->seq, size);
                return STRATA_ERR_BOOTSTRAP;
            }
            status = api_bootstrap_recv(bs, bs->peer_fds[peer], recv_buf + (size_t)peer * size,
                                        size, deadline);
        }
        if (status != STRATA_OK) {
            return api_bootstrap_lost(bs, peer, status, "gathering from");
        }
    }
    for (int peer = 1; peer < bs->base.world_size; ++peer) {
        status = api_bootstrap_send(bs, bs->peer_fds[peer], recv_buf,
                                    size * (size_t)bs->base.world_size, deadline);
        if (status != STRATA_OK) {
            return api_bootstrap_lost(bs, peer, status, "sending to");
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
        status = api_bootstrap_send(bs, bs->root_fd, &header, sizeof(header), deadline);
        if (status == STRATA_OK && size > 0) {
            status = api_bootstrap_send(bs, bs->root_fd, send_buf, size, deadline);
        }
        if (status == STRATA_OK) {
            status = api_bootstrap_recv(bs, bs->root_fd, recv_buf,
                                        size * (size_t)bs->base.world_size, deadline);
        }
        if (status != STRATA_OK) {
            status = api_bootstrap_lost(bs, 0, status, "exchange with");
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

/* Root's answer to a hello, and what may follow it. */
static strata_status_t api_bootstrap_answer(int fd, uint8_t answer, uint64_t deadline)
{
    return util_sock_send_all(fd, &answer, 1, deadline);
}

/* An address as the proofs bind it: IPv4 (mapped or not) as 4 bytes, IPv6 as 16. */
static void api_bootstrap_endpoint_of(const struct sockaddr_storage *ss,
                                      api_bootstrap_endpoint_t *ep)
{
    memset(ep, 0, sizeof(*ep));
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)ss;

        ep->family = 4;
        ep->port   = in->sin_port;
        memcpy(ep->addr, &in->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;

        ep->port = in6->sin6_port;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            ep->family = 4;
            memcpy(ep->addr, &in6->sin6_addr.s6_addr[12], 4);
        } else {
            ep->family = 6;
            memcpy(ep->addr, &in6->sin6_addr, 16);
        }
    }
}

/* The rank's end of the connection fd: its own socket (rank) or its peer (rank 0). */
static bool api_bootstrap_rank_end(int fd, bool at_rank, api_bootstrap_endpoint_t *ep)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int rc = at_rank ? getsockname(fd, (struct sockaddr *)&ss, &len)
                     : getpeername(fd, (struct sockaddr *)&ss, &len);

    if (rc != 0) {
        return false;
    }
    api_bootstrap_endpoint_of(&ss, ep);
    return ep->family != 0;
}

static void api_bootstrap_mac(const api_tcp_bootstrap_t *bs, const char *label,
                              const unsigned char *own, const unsigned char *theirs,
                              const api_bootstrap_hello_t *hello,
                              const api_bootstrap_endpoint_t *rank_end, unsigned char *mac)
{
    api_bootstrap_hello_t bound = *hello;
    const void *parts[5] = {label, own, theirs, &bound, rank_end};
    size_t lens[5] = {strlen(label), API_NONCE_LEN, API_NONCE_LEN, sizeof(bound),
                      sizeof(*rank_end)};

    memset(bound.nonce, 0, sizeof(bound.nonce)); /* a part of its own already */
    util_hmac_sha256(bs->secret, bs->secret_len, parts, lens, 5, mac);
}

/* "a.b.c.d:port" of the other end of fd, for the log. */
static void api_bootstrap_peer_name(int fd, char *name, size_t size)
{
    struct sockaddr_storage addr;
    socklen_t len = sizeof(addr);
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;

    if (getpeername(fd, (struct sockaddr *)&addr, &len) == 0) {
        if (addr.ss_family == AF_INET) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)&addr)->sin_addr, host, sizeof(host));
            port = ntohs(((struct sockaddr_in *)&addr)->sin_port);
        } else if (addr.ss_family == AF_INET6) {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&addr)->sin6_addr, host, sizeof(host));
            port = ntohs(((struct sockaddr_in6 *)&addr)->sin6_port);
        }
    }
    snprintf(name, size, "%s:%u", host, port);
}

/*
 * Root: the rest of one hello, under deadline: with a secret, our nonce, the rank's proof,
 * and (*proven) ours to send with the acceptance. Returns NULL to admit the connection as
 * hello->rank (unless that rank joined already), or why it is refused. Runs on a
 * handshake's own thread: it reads nothing the accepting thread writes.
 */
static const char *api_bootstrap_admit(api_tcp_bootstrap_t *bs, int fd,
                                       const api_bootstrap_hello_t *hello, uint64_t deadline,
                                       bool *proven, unsigned char *root_mac)
{
    unsigned char nonce[API_NONCE_LEN], mac[UTIL_SHA256_LEN], expect[UTIL_SHA256_LEN];
    api_bootstrap_endpoint_t rank_end;

    *proven = false;
    if (hello->magic != API_BOOTSTRAP_MAGIC || hello->version != API_BOOTSTRAP_VERSION ||
        hello->world_size != bs->base.world_size || hello->rank <= 0 ||
        hello->rank >= bs->base.world_size) {
        return "not this job, or another version";
    }
    if (bs->secret == NULL) {
        return hello->secret ? "it has a bootstrap secret and rank 0 has none" : NULL;
    }
    if (!hello->secret) {
        return "it has no bootstrap secret (STRATA_BOOTSTRAP_SECRET[_FILE])";
    }
    if (util_random_bytes(nonce, sizeof(nonce)) != STRATA_OK ||
        !api_bootstrap_rank_end(fd, false, &rank_end)) {
        return "no random nonce or peer address for it";
    }
    if (api_bootstrap_answer(fd, API_ANSWER_CHALLENGE, deadline) != STRATA_OK ||
        util_sock_send_all(fd, nonce, sizeof(nonce), deadline) != STRATA_OK ||
        util_sock_recv_all(fd, mac, sizeof(mac), deadline) != STRATA_OK) {
        return "it did not answer the challenge";
    }
    /* The rank proves first: rank 0 is no oracle for whoever sends a hello. */
    api_bootstrap_mac(bs, "strata-bootstrap-rank", hello->nonce, nonce, hello, &rank_end, expect);
    if (!util_crypto_equal(mac, expect, sizeof(mac))) {
        return "it does not know the bootstrap secret, or its connection is relayed (by "
               "another process, or a NAT that changes the rank's address)";
    }
    api_bootstrap_mac(bs, "strata-bootstrap-root", nonce, hello->nonce, hello, &rank_end,
                      root_mac);
    *proven = true;
    return NULL;
}

/*
 * One connection's handshake in progress. Each runs on a thread of its own, within its own
 * API_HELLO_NS, so that connections which never speak (or speak slowly) hold up nobody: the
 * accepting thread goes on taking connections and settles each handshake as it ends.
 */
typedef struct api_handshake {
    struct api_handshake *next;
    api_tcp_bootstrap_t  *bs;
    pthread_t             thread;
    int                   fd;
    uint64_t              deadline;
    api_bootstrap_hello_t hello;
    const char           *refusal; /* NULL: admitted as hello.rank */
    bool                  proven;  /* root_mac goes with the acceptance */
    unsigned char         root_mac[UTIL_SHA256_LEN];
    atomic_bool           done;
} api_handshake_t;

#define API_MAX_HANDSHAKES 256 /* at once; more connections wait in the listen queue */

static void *api_bootstrap_handshake(void *arg)
{
    api_handshake_t *h = arg;

    if (util_sock_recv_all(h->fd, &h->hello, sizeof(h->hello), h->deadline) != STRATA_OK) {
        h->refusal = "no hello";
    } else {
        h->refusal = api_bootstrap_admit(h->bs, h->fd, &h->hello, h->deadline, &h->proven,
                                         h->root_mac);
    }
    atomic_store_explicit(&h->done, true, memory_order_release);
    return NULL;
}

/* A handshake for the connection fd, on its thread; false (fd closed) if none could start. */
static bool api_bootstrap_start_handshake(api_tcp_bootstrap_t *bs, int fd, uint64_t deadline,
                                          api_handshake_t **list)
{
    api_handshake_t *h = calloc(1, sizeof(*h));

    if (h != NULL) {
        *h = (api_handshake_t){.bs = bs, .fd = fd, .next = *list,
                               .deadline = UTIL_MIN(deadline, util_clock_now_ns() + API_HELLO_NS)};
        atomic_init(&h->done, false);
        if (pthread_create(&h->thread, NULL, api_bootstrap_handshake, h) == 0) {
            *list = h;
            return true;
        }
        free(h);
    }
    UTIL_LOG_WARN("bootstrap: no thread for a connection's handshake; closing it");
    util_sock_close(fd);
    return false;
}

/* An ended handshake: refused (logged, told, closed) or the rank admitted. Returns 1 when a
 * rank joined. */
static int api_bootstrap_settle(api_tcp_bootstrap_t *bs, api_handshake_t *h)
{
    const char *refusal = h->refusal;
    char who[INET6_ADDRSTRLEN + 8];

    if (refusal == NULL && bs->peer_fds[h->hello.rank] >= 0) {
        refusal = "a rank seen twice";
    }
    if (refusal != NULL) {
        api_bootstrap_peer_name(h->fd, who, sizeof(who));
        UTIL_LOG_WARN("bootstrap: refused a connection from %s (rank %d of %d, version %u): %s",
                      who, h->hello.rank, h->hello.world_size, h->hello.version, refusal);
        /* tell it now rather than at its timeout */
        api_bootstrap_answer(h->fd, API_ANSWER_REFUSED, h->deadline);
        util_sock_close(h->fd);
        return 0;
    }
    if (api_bootstrap_answer(h->fd, API_ANSWER_ACCEPTED, h->deadline) != STRATA_OK ||
        (h->proven && util_sock_send_all(h->fd, h->root_mac, sizeof(h->root_mac), h->deadline) !=
                          STRATA_OK)) {
        util_sock_close(h->fd); /* gone already: it may come back and say hello again */
        return 0;
    }
    bs->peer_fds[h->hello.rank] = h->fd;
    return 1;
}

/* Settle the handshakes that ended (all of them, waiting, with wait_all), each once. */
static int api_bootstrap_settle_ended(api_tcp_bootstrap_t *bs, api_handshake_t **list,
                                      bool wait_all, int *running_p)
{
    int joined = 0;

    for (api_handshake_t **link = list, *h; (h = *link) != NULL;) {
        if (!wait_all && !atomic_load_explicit(&h->done, memory_order_acquire)) {
            link = &h->next;
            continue;
        }
        pthread_join(h->thread, NULL); /* within its own deadline */
        *link = h->next;
        --*running_p;
        if (wait_all) {
            util_sock_close(h->fd); /* the rendezvous is over without it */
        } else {
            joined += api_bootstrap_settle(bs, h);
        }
        free(h);
    }
    return joined;
}

/* Root: accept until every other rank has said hello, each rank once; handshakes run side
 * by side. */
static strata_status_t api_bootstrap_accept_all(api_tcp_bootstrap_t *bs, int listen_fd,
                                                uint64_t deadline)
{
    api_handshake_t *handshakes = NULL;
    strata_status_t status = STRATA_OK;
    int joined = 1, running = 0, fd;

    while (joined < bs->base.world_size) {
        uint64_t now = util_clock_now_ns(), slice = now + 10 * UTIL_NSEC_PER_MSEC;

        if (now > deadline) {
            UTIL_LOG_ERROR("bootstrap: only %d of %d ranks joined before the timeout", joined,
                           bs->base.world_size);
            status = STRATA_ERR_TIMEOUT;
            break;
        }
        if (running < API_MAX_HANDSHAKES) {
            status = util_sock_accept(listen_fd, UTIL_MIN(slice, deadline), &fd);
            if (status == STRATA_OK) {
                running += api_bootstrap_start_handshake(bs, fd, deadline, &handshakes);
            } else if (status != STRATA_ERR_TIMEOUT) {
                status = STRATA_ERR_BOOTSTRAP;
                break;
            }
            status = STRATA_OK;
        } else {
            util_sleep_ns(slice - now);
        }
        joined += api_bootstrap_settle_ended(bs, &handshakes, false, &running);
    }
    api_bootstrap_settle_ended(bs, &handshakes, true, &running);
    return status;
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

/* A joining rank with a secret, after rank 0's challenge: our proof over both nonces and
 * our end of the connection, then rank 0's acceptance and its proof. NULL when proven. */
static const char *api_bootstrap_prove(api_tcp_bootstrap_t *bs,
                                       const api_bootstrap_hello_t *hello, uint64_t deadline,
                                       uint8_t *answer_p)
{
    unsigned char nonce[API_NONCE_LEN], mac[UTIL_SHA256_LEN], expect[UTIL_SHA256_LEN];
    api_bootstrap_endpoint_t rank_end;

    if (util_sock_recv_all(bs->root_fd, nonce, sizeof(nonce), deadline) != STRATA_OK ||
        !api_bootstrap_rank_end(bs->root_fd, true, &rank_end)) {
        return "did not send its challenge";
    }
    api_bootstrap_mac(bs, "strata-bootstrap-rank", hello->nonce, nonce, hello, &rank_end, mac);
    if (util_sock_send_all(bs->root_fd, mac, sizeof(mac), deadline) != STRATA_OK ||
        util_sock_recv_all(bs->root_fd, answer_p, 1, deadline) != STRATA_OK) {
        return "went away during the challenge";
    }
    if (*answer_p != API_ANSWER_ACCEPTED) {
        return "refused this rank's proof (a different secret, or a relayed connection)";
    }
    api_bootstrap_mac(bs, "strata-bootstrap-root", nonce, hello->nonce, hello, &rank_end, expect);
    if (util_sock_recv_all(bs->root_fd, mac, sizeof(mac), deadline) != STRATA_OK ||
        !util_crypto_equal(mac, expect, sizeof(expect))) {
        *answer_p = API_ANSWER_REFUSED;
        return "does not know the bootstrap secret";
    }
    return NULL;
}

static strata_status_t api_bootstrap_join(api_tcp_bootstrap_t *bs, const char *addr,
                                          uint16_t port)
{
    api_bootstrap_hello_t hello = {.magic = API_BOOTSTRAP_MAGIC, .version = API_BOOTSTRAP_VERSION,
                                   .rank = bs->base.rank, .world_size = bs->base.world_size,
                                   .secret = bs->secret != NULL};
    uint64_t deadline = api_bootstrap_deadline(bs);
    const char *failure = NULL;
    strata_status_t status;
    uint8_t answer = API_ANSWER_REFUSED;

    status = util_random_bytes(hello.nonce, sizeof(hello.nonce));
    if (status != STRATA_OK) {
        return status;
    }
    status = util_sock_connect(addr, port, deadline, &bs->root_fd);
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("bootstrap: rank %d could not reach rank 0 at %s:%u", bs->base.rank, addr,
                       port);
        return status;
    }
    status = util_sock_send_all(bs->root_fd, &hello, sizeof(hello), deadline);
    if (status == STRATA_OK) {
        status = util_sock_recv_all(bs->root_fd, &answer, 1, deadline);
    }
    if (status == STRATA_OK && answer == API_ANSWER_CHALLENGE && bs->secret != NULL) {
        failure = api_bootstrap_prove(bs, &hello, deadline, &answer);
    } else if (status == STRATA_OK && answer == API_ANSWER_ACCEPTED && bs->secret != NULL) {
        failure = "accepted this rank without proving the bootstrap secret (it has none)";
    } else if (status == STRATA_OK && answer == API_ANSWER_CHALLENGE) {
        failure = "wants a bootstrap secret and this rank has none";
    }
    if (status != STRATA_OK || failure != NULL || answer != API_ANSWER_ACCEPTED) {
        UTIL_LOG_ERROR("bootstrap: rank 0 at %s:%u %s: rank %d of %d not joining (another job "
                       "on that port, a different world size or secret, or this rank taken "
                       "twice)", addr, port,
                       failure != NULL ? failure : status == STRATA_OK ? "refused" : "did not answer",
                       bs->base.rank, bs->base.world_size);
        return status == STRATA_ERR_TIMEOUT ? STRATA_ERR_TIMEOUT : STRATA_ERR_BOOTSTRAP;
    }
    return STRATA_OK;
}

/*
 * The secret in the file STRATA_BOOTSTRAP_SECRET_FILE names, into buf (API_SECRET_MAX + 1
 * bytes), without its line end. Only a regular file of a bounded size is read, opened
 * without blocking: a FIFO no one writes would otherwise hold the job past every timeout, and
 * a directory would read as an empty secret.
 */
static strata_status_t api_bootstrap_read_secret_file(const char *path, unsigned char *buf,
                                                      size_t *len_p)
{
    char err[UTIL_FILE_ERR_LEN], *data = NULL;
    size_t len = 0;
    struct stat st;
    strata_status_t status;

    /* Room for "\r\n" after the longest secret; past that, "too long". */
    status = util_file_read(path, API_SECRET_MAX + 2, &data, &len, err);
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("bootstrap: cannot read STRATA_BOOTSTRAP_SECRET_FILE: %s%s", err,
                       status == STRATA_ERR_PARSE ? " (a secret is 1 to 4096 bytes)" : "");
        return STRATA_ERR_CONFIG;
    }
    if (stat(path, &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO))) {
        UTIL_LOG_WARN("bootstrap: %s is open to other users (mode %03o): chmod 600 it", path,
                      (unsigned)(st.st_mode & 0777));
    }
    while (len > 0 && (data[len - 1] == '\n' || data[len - 1] == '\r')) {
        --len; /* `echo secret > file` and the variable then mean the same */
    }
    memcpy(buf, data, UTIL_MIN(len, (size_t)API_SECRET_MAX + 1));
    *len_p = len;
    util_crypto_wipe(data, len);
    free(data);
    return STRATA_OK;
}

/* The secret from STRATA_BOOTSTRAP_SECRET or the file STRATA_BOOTSTRAP_SECRET_FILE names. */
static strata_status_t api_bootstrap_read_secret(const api_bootstrap_config_t *config,
                                                 api_tcp_bootstrap_t *bs)
{
    unsigned char buf[API_SECRET_MAX + 1];
    size_t len = 0;
    strata_status_t status;

    if (config->secret[0] != '\0' && config->secret_file[0] != '\0') {
        UTIL_LOG_ERROR("bootstrap: both STRATA_BOOTSTRAP_SECRET and STRATA_BOOTSTRAP_SECRET_FILE "
                       "are set: set one");
        return STRATA_ERR_CONFIG;
    }
    if (config->secret[0] != '\0') {
        len = strlen(config->secret);
        memcpy(buf, config->secret, UTIL_MIN(len, sizeof(buf)));
    } else if (config->secret_file[0] != '\0') {
        status = api_bootstrap_read_secret_file(config->secret_file, buf, &len);
        if (status != STRATA_OK) {
            return status;
        }
    } else {
        return STRATA_OK;
    }
    if (len == 0 || len > API_SECRET_MAX) {
        UTIL_LOG_ERROR("bootstrap: the bootstrap secret is %s (1 to %d bytes)",
                       len == 0 ? "empty" : "too long", API_SECRET_MAX);
        util_crypto_wipe(buf, sizeof(buf));
        return STRATA_ERR_CONFIG;
    }
    bs->secret = malloc(len);
    if (bs->secret == NULL) {
        util_crypto_wipe(buf, sizeof(buf));
        return STRATA_ERR_NO_MEMORY;
    }
    memcpy(bs->secret, buf, len);
    bs->secret_len = len;
    util_crypto_wipe(buf, sizeof(buf));
    return STRATA_OK;
}

static void api_bootstrap_forget_secret(api_tcp_bootstrap_t *bs)
{
    if (bs->secret != NULL) {
        util_crypto_wipe(bs->secret, bs->secret_len);
        free(bs->secret);
        bs->secret = NULL;
    }
}

void api_bootstrap_set_check(strata_bootstrap_t *bootstrap, api_bootstrap_check_fn_t check,
                             void *arg)
{
    api_tcp_bootstrap_t *bs = (api_tcp_bootstrap_t *)bootstrap;

    if (bootstrap == NULL || bootstrap->allgather != api_bootstrap_allgather) {
        return; /* the caller's own: strata cannot interrupt its waits */
    }
    if (check != NULL) {
        bs->check     = check;
        bs->check_arg = arg;
    } else if (bs->check_arg == arg) {
        bs->check     = NULL;
        bs->check_arg = NULL;
    }
}

STRATA_API void strata_bootstrap_destroy(strata_bootstrap_t *bootstrap)
{
    api_tcp_bootstrap_t *bs = (api_tcp_bootstrap_t *)bootstrap;

    if (bs == NULL) {
        return;
    }
    api_bootstrap_forget_secret(bs);
    util_sock_close(bs->root_fd);
    for (int i = 0; bs->peer_fds != NULL && i < bs->base.world_size; ++i) {
        util_sock_close(bs->peer_fds[i]);
    }
    free(bs->peer_fds);
    free(bs);
}

/* The timeout (0: STRATA_BOOTSTRAP_TIMEOUT) and the secret from the environment. */
static strata_status_t api_bootstrap_configure(api_tcp_bootstrap_t *bs, uint64_t timeout_ms)
{
    api_bootstrap_config_t config;
    strata_status_t status;

    status = util_config_read(&api_bootstrap_config_table, &config);
    if (status != STRATA_OK) {
        return status;
    }
    bs->timeout_ns = timeout_ms ? timeout_ms * UTIL_NSEC_PER_MSEC : config.timeout_ns;
    status = api_bootstrap_read_secret(&config, bs);
    if (config.secret != NULL) {
        util_crypto_wipe(config.secret, strlen(config.secret));
    }
    util_config_release(&api_bootstrap_config_table, &config);
    return status;
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
    bs->root_fd = -1;
    status      = api_bootstrap_configure(bs, timeout_ms);
    if (status == STRATA_OK && world_size > 1) {
        status = rank == 0 ? api_bootstrap_root_start(bs, root_addr, port)
                           : api_bootstrap_join(bs, root_addr, port);
    }
    api_bootstrap_forget_secret(bs); /* collectives run on the connections it admitted */
    if (status != STRATA_OK) {
        strata_bootstrap_destroy(&bs->base);
        return status;
    }
    *bootstrap_p = &bs->base;
    return STRATA_OK;
}
