/*
 * The built-in bootstrap's rendezvous: rank 0 accepts connections, each handshake on a thread
 * of its own; with a shared secret, each joining rank proves it first and rank 0 in turn
 * (HMAC-SHA256 over both nonces, the hello and the rank's end of the connection) before rank
 * 0 counts the connection as a rank; the secret itself never crosses the network.
 */
#include "api/src/api_bootstrap_tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

    const char *refusal = api_bootstrap_hello_refusal(hello, bs->base.world_size,
                                                      bs->secret != NULL);

    *proven = false;
    if (refusal != NULL || bs->secret == NULL) {
        return refusal;
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

strata_status_t api_bootstrap_root_start(api_tcp_bootstrap_t *bs, const char *addr, uint16_t port)
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

strata_status_t api_bootstrap_join(api_tcp_bootstrap_t *bs, const char *addr, uint16_t port)
{
    api_bootstrap_hello_t hello = {.magic = API_BOOTSTRAP_MAGIC, .version = API_BOOTSTRAP_VERSION,
                                   .rank = bs->base.rank, .world_size = bs->base.world_size,
                                   .secret = bs->secret != NULL};
    uint64_t deadline = api_bootstrap_deadline(bs);
    const char *failure = NULL;
    strata_status_t status;
    uint8_t answer = API_ANSWER_REFUSED;
    bool prove = false;

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
    if (status == STRATA_OK) {
        failure = api_bootstrap_answer_refusal(answer, bs->secret != NULL, &prove);
    }
    if (status == STRATA_OK && failure == NULL && prove) {
        failure = api_bootstrap_prove(bs, &hello, deadline, &answer);
    }
    if (status != STRATA_OK || failure != NULL || answer != API_ANSWER_ACCEPTED) {
        UTIL_LOG_ERROR("bootstrap: rank 0 at %s:%u %s: rank %d of %d not joining (another job "
                       "on that port, a different world size or secret, or this rank taken "
                       "twice)", addr, port, failure != NULL ? failure : "did not answer",
                       bs->base.rank, bs->base.world_size);
        return status == STRATA_ERR_TIMEOUT ? STRATA_ERR_TIMEOUT : STRATA_ERR_BOOTSTRAP;
    }
    return STRATA_OK;
}
