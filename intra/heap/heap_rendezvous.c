/*
 * The node's rendezvous of a symmetric heap: an abstract unix socket that local rank 0
 * listens on; it admits only processes of its user that prove the object's secret (both
 * ways, before anything of a region is handed over), then hands every rank every card and
 * descriptor.
 */
#include "intra/heap/heap_rendezvous.h"
#include "util/util.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

/* The node's rendezvous: an abstract unix socket name, nothing in the file system. */
static socklen_t heap_address(const char *job_key, struct sockaddr_un *addr)
{
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    snprintf(addr->sun_path + 1, sizeof(addr->sun_path) - 1, "strata-heap-%s", job_key);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(addr->sun_path + 1));
}

/*
 * The handshake, after local rank 0 (the root) has accepted a connection from a process of
 * its own user, and the joining rank has checked that the listener is of its user too.
 * Both sides prove the secret over both nonces before either hands over anything:
 *   root -> rank: heap_challenge_t (the root's fresh nonce)
 *   rank -> root: heap_hello_t (the rank's fresh nonce, its proof)
 *   root -> rank: heap_answer_t (the root's proof)
 *   rank -> root: heap_join_t, with the region's descriptor
 *   root -> rank: every rank's card, every descriptor, and its proof of them
 * The proofs are HMAC-SHA256 under the object's secret, over a label per message (so that
 * none can be replayed as another), both nonces in the order of the message's sender, and
 * what the message carries.
 */
#define HEAP_MAGIC    0x53544850u /* "STHP" */
#define HEAP_HELLO_NS (2 * UTIL_NSEC_PER_SEC)
#define HEAP_NONCE_LEN 32

typedef struct heap_challenge {
    uint32_t      magic;
    uint32_t      pad;
    unsigned char nonce[HEAP_NONCE_LEN];
} heap_challenge_t;

typedef struct heap_hello {
    uint32_t      magic;
    uint32_t      pad;
    unsigned char nonce[HEAP_NONCE_LEN];  /* the rank's */
    unsigned char proof[UTIL_SHA256_LEN]; /* HMAC("strata-heap-hello" | rank's | root's nonce) */
} heap_hello_t;

typedef struct heap_answer {
    uint32_t      magic;
    uint32_t      pad;
    unsigned char proof[UTIL_SHA256_LEN]; /* HMAC("strata-heap-answer" | root's | rank's) */
} heap_answer_t;

typedef struct heap_join {
    heap_card_t   card;
    unsigned char proof[UTIL_SHA256_LEN]; /* HMAC("strata-heap-join" | rank's | root's | card) */
} heap_join_t;

/* One side's proof: the label, the sender's nonce, the receiver's, then data (may be NULL). */
static void heap_prove(const intra_heap_params_t *p, const char *label, const void *own_nonce,
                       const void *their_nonce, const void *data, size_t len,
                       unsigned char proof[UTIL_SHA256_LEN])
{
    const void *parts[4] = {label, own_nonce, their_nonce, data};
    size_t lens[4] = {strlen(label), HEAP_NONCE_LEN, HEAP_NONCE_LEN, data != NULL ? len : 0};

    util_hmac_sha256(p->secret, sizeof(p->secret), parts, lens, data != NULL ? 4 : 3, proof);
}

/* Bound every blocking receive on sock by deadline (recvmsg waits past poll otherwise). */
static void heap_bound(int sock, uint64_t deadline)
{
    uint64_t now = util_clock_now_ns(), left = deadline > now ? deadline - now : 1000;
    struct timeval tv = {.tv_sec = (time_t)(left / UTIL_NSEC_PER_SEC),
                         .tv_usec = (suseconds_t)(left % UTIL_NSEC_PER_SEC / 1000)};

    if (tv.tv_sec == 0 && tv.tv_usec == 0) {
        tv.tv_usec = 1;
    }
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* Whether the process at the other end of sock runs as our user; *cred_p says who it is. */
static bool heap_same_user(int sock, struct ucred *cred_p)
{
    socklen_t len = sizeof(*cred_p);

    memset(cred_p, 0, sizeof(*cred_p));
    cred_p->pid = -1;
    return getsockopt(sock, SOL_SOCKET, SO_PEERCRED, cred_p, &len) == 0 &&
           len == sizeof(*cred_p) && cred_p->uid == geteuid();
}

/* Send num_parts buffers in one message with nfds descriptors (none when nfds is 0). */
static bool heap_send(int sock, const struct iovec *iov, int num_parts, const int *fds, int nfds,
                      uint64_t deadline)
{
    char control[CMSG_SPACE(sizeof(int) * INTRA_HEAP_MAX_RANKS)] = {0};
    struct msghdr msg = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)num_parts};
    struct cmsghdr *cmsg;
    size_t total = 0;

    for (int i = 0; i < num_parts; ++i) {
        total += iov[i].iov_len;
    }
    if (nfds > 0) {
        msg.msg_control    = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        cmsg               = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level   = SOL_SOCKET;
        cmsg->cmsg_type    = SCM_RIGHTS;
        cmsg->cmsg_len     = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * (size_t)nfds);
    }
    heap_bound(sock, deadline);
    return util_sock_wait(sock, POLLOUT, deadline) == STRATA_OK &&
           sendmsg(sock, &msg, MSG_NOSIGNAL) == (ssize_t)total;
}

/*
 * Receive exactly len bytes and the descriptors that came with them: true with *nfds_p of
 * them in fds when the bytes are whole and at most max_fds came. Every descriptor received
 * is either handed back in fds or closed.
 */
static bool heap_recv(int sock, void *buf, size_t len, int *fds, int max_fds, int *nfds_p,
                      uint64_t deadline)
{
    char control[CMSG_SPACE(sizeof(int) * INTRA_HEAP_MAX_RANKS)];
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                         .msg_controllen = sizeof(control)};
    bool whole;
    int n = 0;

    *nfds_p = 0;
    heap_bound(sock, deadline);
    if (util_sock_wait(sock, POLLIN, deadline) != STRATA_OK) {
        return false;
    }
    whole = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL) == (ssize_t)len &&
            !(msg.msg_flags & MSG_CTRUNC);
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        int got = c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS
                      ? (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int)) : 0;

        for (int i = 0; i < got; ++i) {
            int fd;

            memcpy(&fd, CMSG_DATA(c) + sizeof(int) * (size_t)i, sizeof(fd));
            if (whole && n < max_fds) {
                fds[n++] = fd;
            } else {
                close(fd);
                whole = false;
            }
        }
    }
    if (!whole) {
        for (int i = 0; i < n; ++i) {
            close(fds[i]);
        }
        return false;
    }
    *nfds_p = n;
    return true;
}

/* Whether a card's bus id ends inside it (it goes to string functions). */
static bool heap_bus_id_ends(const heap_card_t *card)
{
    return memchr(card->bus_id, '\0', sizeof(card->bus_id)) != NULL;
}

const char *heap_card_refusal(const heap_card_t *card, const heap_card_t *like, int local_size,
                              int nfds)
{
    if (card->rank <= 0 || card->rank >= local_size) {
        return "no such local rank";
    }
    if (card->has_fd != like->has_fd || card->size != like->size ||
        nfds != (card->has_fd ? 1 : 0)) {
        return "its region is not like ours";
    }
    return heap_bus_id_ends(card) ? NULL : "its GPU's bus id does not end";
}

const char *heap_cards_refusal(const heap_card_t *cards, int local_size, const heap_card_t *own)
{
    for (int r = 0; r < local_size; ++r) {
        if (cards[r].rank != r) {
            return "sent a card in another rank's place";
        }
        if (cards[r].has_fd != own->has_fd || cards[r].size != own->size) {
            return "sent a region unlike this rank's";
        }
        if (!heap_bus_id_ends(&cards[r])) {
            return "sent a GPU bus id that does not end";
        }
    }
    return NULL;
}

/* Root: one connection's challenge and the proofs both ways, then its card and descriptor.
 * Returns the reason to refuse it, or NULL; nonce: the rank's, own: ours, for the cards'
 * proof. Runs on the connection's own thread: it reads only what no thread writes. */
static const char *heap_admit(const intra_heap_params_t *p, int sock, const heap_card_t *cards,
                              heap_join_t *join, int *fd_p, unsigned char nonce[HEAP_NONCE_LEN],
                              unsigned char own[HEAP_NONCE_LEN])
{
    uint64_t deadline = util_clock_now_ns() + HEAP_HELLO_NS; /* a silent caller waits no more */
    heap_challenge_t challenge = {.magic = HEAP_MAGIC};
    heap_answer_t answer = {.magic = HEAP_MAGIC};
    struct iovec iov = {.iov_base = &challenge, .iov_len = sizeof(challenge)};
    unsigned char expect[UTIL_SHA256_LEN];
    const char *refusal;
    heap_hello_t hello;
    int nfds;

    *fd_p = -1;
    if (util_random_bytes(challenge.nonce, sizeof(challenge.nonce)) != STRATA_OK ||
        !heap_send(sock, &iov, 1, NULL, 0, deadline)) {
        return "it went away before the challenge";
    }
    if (!heap_recv(sock, &hello, sizeof(hello), NULL, 0, &nfds, deadline) ||
        hello.magic != HEAP_MAGIC) {
        return "no well-formed answer to the challenge";
    }
    heap_prove(p, "strata-heap-hello", hello.nonce, challenge.nonce, NULL, 0, expect);
    if (!util_crypto_equal(expect, hello.proof, sizeof(expect))) {
        return "it does not know this object's secret";
    }
    heap_prove(p, "strata-heap-answer", challenge.nonce, hello.nonce, NULL, 0, answer.proof);
    iov = (struct iovec){.iov_base = &answer, .iov_len = sizeof(answer)};
    if (!heap_send(sock, &iov, 1, NULL, 0, deadline) ||
        !heap_recv(sock, join, sizeof(*join), fd_p, 1, &nfds, deadline)) {
        return "it went away before it joined";
    }
    heap_prove(p, "strata-heap-join", hello.nonce, challenge.nonce, &join->card,
               sizeof(join->card), expect);
    if (!util_crypto_equal(expect, join->proof, sizeof(expect))) {
        return "its card does not carry this object's proof";
    }
    refusal = heap_card_refusal(&join->card, &cards[0], p->local_size, nfds);
    if (refusal != NULL) {
        return refusal;
    }
    memcpy(nonce, hello.nonce, HEAP_NONCE_LEN);
    memcpy(own, challenge.nonce, HEAP_NONCE_LEN);
    return NULL;
}

/* STRATA_OK while the caller's peer check sees every rank alive (or there is none). */
static strata_status_t heap_peers_alive(const intra_heap_params_t *p)
{
    return p->peer_check != NULL ? p->peer_check(p->peer_check_ctx) : STRATA_OK;
}

/* Wait for a connection on listener until deadline, asking the peer check in between:
 * a rank that died ends the wait at once rather than at the timeout. */
static strata_status_t heap_wait_connection(const intra_heap_params_t *p, int listener,
                                            uint64_t deadline)
{
    strata_status_t status;

    for (;;) {
        uint64_t now = util_clock_now_ns(), slice = now + INTRA_HEAP_CHECK_NS;

        if ((status = heap_peers_alive(p)) != STRATA_OK) {
            return status;
        }
        if (now >= deadline) {
            return STRATA_ERR_TIMEOUT;
        }
        if (util_sock_wait(listener, POLLIN, UTIL_MIN(slice, deadline)) == STRATA_OK) {
            return STRATA_OK;
        }
    }
}

/*
 * One connection's handshake at local rank 0, on a thread of its own (HEAP_HELLO_NS at
 * most), so that connections which never speak hold up no rank: the accepting thread goes
 * on and settles each as it ends.
 */
typedef struct heap_handshake {
    struct heap_handshake     *next;
    const intra_heap_params_t *p;
    const heap_card_t         *cards; /* cards[0], ours: what a region must be like */
    pthread_t                  thread;
    int                        sock, fd;
    struct ucred               cred;
    heap_join_t                join;
    unsigned char              nonce[HEAP_NONCE_LEN], own[HEAP_NONCE_LEN];
    const char                *refusal; /* NULL: admitted as join.card.rank */
    atomic_bool                done;
} heap_handshake_t;

#define HEAP_MAX_HANDSHAKES 64

static void *heap_handshake_main(void *arg)
{
    heap_handshake_t *h = arg;

    /* Another user's process learns nothing, not even a nonce, and takes no slot. */
    h->refusal = heap_same_user(h->sock, &h->cred)
                     ? heap_admit(h->p, h->sock, h->cards, &h->join, &h->fd, h->nonce, h->own)
                     : "it runs as another user";
    atomic_store_explicit(&h->done, true, memory_order_release);
    return NULL;
}

static bool heap_start_handshake(const intra_heap_params_t *p, const heap_card_t *cards,
                                 int sock, heap_handshake_t **list)
{
    heap_handshake_t *h = calloc(1, sizeof(*h));

    if (h != NULL) {
        *h = (heap_handshake_t){.next = *list, .p = p, .cards = cards, .sock = sock, .fd = -1};
        atomic_init(&h->done, false);
        if (pthread_create(&h->thread, NULL, heap_handshake_main, h) == 0) {
            *list = h;
            return true;
        }
        free(h);
    }
    UTIL_LOG_WARN("heap: no thread for a connection's handshake; closing it");
    close(sock);
    return false;
}

/* Where the root keeps what the admitted ranks gave. */
typedef struct heap_joined {
    heap_card_t  *cards;
    int          *fds;
    int           conns[INTRA_HEAP_MAX_RANKS];
    unsigned char nonces[INTRA_HEAP_MAX_RANKS][HEAP_NONCE_LEN];     /* each rank's */
    unsigned char challenges[INTRA_HEAP_MAX_RANKS][HEAP_NONCE_LEN]; /* ours to each */
} heap_joined_t;

/* An ended handshake: refused (logged, closed) or its rank taken in. 1 when it joined. */
static int heap_settle(const intra_heap_params_t *p, heap_handshake_t *h, heap_joined_t *in)
{
    const char *refusal = h->refusal;
    int rank = h->join.card.rank;

    if (refusal == NULL && in->conns[rank] >= 0) {
        refusal = "a local rank that has joined already";
    }
    if (refusal != NULL) {
        UTIL_LOG_WARN("heap: refused a connection to job %s from pid %d (uid %u; this job "
                      "runs as uid %u): %s", p->job_key, (int)h->cred.pid,
                      (unsigned)h->cred.uid, (unsigned)geteuid(), refusal);
        if (h->fd >= 0) {
            close(h->fd);
        }
        close(h->sock);
        return 0;
    }
    in->conns[rank] = h->sock;
    in->cards[rank] = h->join.card;
    in->fds[rank]   = h->fd;
    memcpy(in->nonces[rank], h->nonce, HEAP_NONCE_LEN);
    memcpy(in->challenges[rank], h->own, HEAP_NONCE_LEN);
    return 1;
}

/* Settle the handshakes that ended; with drop, wait for all and close them unheard. */
static int heap_settle_ended(const intra_heap_params_t *p, heap_handshake_t **list,
                             heap_joined_t *in, bool drop, int *running_p)
{
    int joined = 0;

    for (heap_handshake_t **link = list, *h; (h = *link) != NULL;) {
        if (!drop && !atomic_load_explicit(&h->done, memory_order_acquire)) {
            link = &h->next;
            continue;
        }
        pthread_join(h->thread, NULL); /* within its own HEAP_HELLO_NS */
        *link = h->next;
        --*running_p;
        if (drop) {
            if (h->fd >= 0) {
                close(h->fd);
            }
            close(h->sock);
        } else {
            joined += heap_settle(p, h, in);
        }
        free(h);
    }
    return joined;
}

/* Local rank 0: take connections until every rank joined, their handshakes side by side. */
static strata_status_t heap_accept_all(const intra_heap_params_t *p, int listener,
                                       heap_joined_t *in, uint64_t deadline)
{
    heap_handshake_t *handshakes = NULL;
    strata_status_t status = STRATA_OK;
    int joined = 1, running = 0, sock;

    while (joined < p->local_size) {
        uint64_t slice = util_clock_now_ns() + 10 * UTIL_NSEC_PER_MSEC;

        if (util_clock_now_ns() >= deadline) {
            status = STRATA_ERR_TIMEOUT;
        } else if (running < HEAP_MAX_HANDSHAKES) {
            status = heap_wait_connection(p, listener, UTIL_MIN(slice, deadline));
            if (status == STRATA_OK) {
                sock = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
                status = sock >= 0 ? STRATA_OK : STRATA_ERR_IO;
                running += sock >= 0 && heap_start_handshake(p, in->cards, sock, &handshakes);
            } else if (status == STRATA_ERR_TIMEOUT) {
                status = STRATA_OK; /* none in this slice */
            }
        } else {
            util_sleep_ns(10 * UTIL_NSEC_PER_MSEC);
            status = heap_peers_alive(p);
        }
        if (status != STRATA_OK) {
            UTIL_LOG_ERROR("heap: only %d of %d local ranks joined: %s", joined, p->local_size,
                           status == STRATA_ERR_PEER_FAILED ? "a rank failed"
                           : status == STRATA_ERR_TIMEOUT   ? "timed out"
                                                            : strata_status_string(status));
            break;
        }
        joined += heap_settle_ended(p, &handshakes, in, false, &running);
    }
    heap_settle_ended(p, &handshakes, in, true, &running);
    return status;
}

/* Local rank 0: collect every rank's card, then hand all of them to every rank. */
static strata_status_t heap_gather_root(const intra_heap_params_t *p, int listener,
                                        heap_card_t *cards, int *fds, uint64_t deadline)
{
    heap_joined_t *in = calloc(1, sizeof(*in));
    strata_status_t status;

    if (in == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    in->cards = cards;
    in->fds   = fds;
    for (int i = 0; i < p->local_size; ++i) {
        in->conns[i] = -1;
    }
    status = heap_accept_all(p, listener, in, deadline);
    for (int r = 1; r < p->local_size && status == STRATA_OK; ++r) {
        unsigned char proof[UTIL_SHA256_LEN];
        struct iovec iov[2] = {{.iov_base = cards, .iov_len = sizeof(*cards) * (size_t)p->local_size},
                               {.iov_base = proof, .iov_len = sizeof(proof)}};

        heap_prove(p, "strata-heap-cards", in->challenges[r], in->nonces[r], cards,
                   iov[0].iov_len, proof);
        if (!heap_send(in->conns[r], iov, 2, fds, cards[0].has_fd ? p->local_size : 0, deadline)) {
            UTIL_LOG_ERROR("heap: cannot hand the regions to local rank %d", r);
            status = STRATA_ERR_IO;
        }
    }
    for (int r = 1; r < p->local_size; ++r) {
        if (in->conns[r] >= 0) {
            close(in->conns[r]);
        }
    }
    free(in);
    return status;
}

/* A joining rank: connect to local rank 0, retrying until it listens, and check its user. */
static strata_status_t heap_connect_root(const intra_heap_params_t *p, uint64_t deadline,
                                         int *sock_p)
{
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr;
    socklen_t len = heap_address(p->job_key, &addr);
    struct ucred cred;

    if (sock < 0) {
        UTIL_LOG_ERROR("heap: cannot create a unix socket: %s", strerror(errno));
        return STRATA_ERR_IO;
    }
    while (connect(sock, (struct sockaddr *)&addr, len) != 0) {
        strata_status_t alive = heap_peers_alive(p);

        if (alive != STRATA_OK) {
            UTIL_LOG_ERROR("heap: a rank failed while this one waited for local rank 0 of job "
                           "%s to listen", p->job_key);
            close(sock);
            return alive;
        }
        if ((errno != ECONNREFUSED && errno != ENOENT && errno != EAGAIN) ||
            util_clock_now_ns() > deadline) {
            UTIL_LOG_ERROR("heap: local rank 0 of job %s never answered: %s", p->job_key,
                           strerror(errno));
            close(sock);
            return STRATA_ERR_TIMEOUT;
        }
        usleep(10000);
    }
    if (!heap_same_user(sock, &cred)) {
        /* Whoever holds the name first owns it: the job cannot form on this node. */
        UTIL_LOG_ERROR("heap: the rendezvous of job %s is held by pid %d of uid %u, not by "
                       "this user (uid %u): not joining it", p->job_key, (int)cred.pid,
                       (unsigned)cred.uid, (unsigned)geteuid());
        close(sock);
        return STRATA_ERR_BOOTSTRAP;
    }
    *sock_p = sock;
    return STRATA_OK;
}

/*
 * A joining rank: the root's challenge, our proof over both nonces, and the root's proof
 * over both: until it has proved the secret, the root gets nothing of this rank's region.
 * nonce: ours, root_nonce: the root's, for the proofs still to come.
 */
static strata_status_t heap_prove_both_ways(const intra_heap_params_t *p, int sock,
                                            uint64_t deadline, unsigned char *nonce,
                                            unsigned char *root_nonce)
{
    heap_challenge_t challenge;
    heap_hello_t hello = {.magic = HEAP_MAGIC};
    heap_answer_t answer;
    struct iovec iov = {.iov_base = &hello, .iov_len = sizeof(hello)};
    unsigned char expect[UTIL_SHA256_LEN];
    int nfds = 0;

    if (!heap_recv(sock, &challenge, sizeof(challenge), NULL, 0, &nfds, deadline) ||
        challenge.magic != HEAP_MAGIC || util_random_bytes(hello.nonce, HEAP_NONCE_LEN) != STRATA_OK) {
        UTIL_LOG_ERROR("heap: local rank 0 of job %s sent no challenge", p->job_key);
        return STRATA_ERR_BOOTSTRAP;
    }
    heap_prove(p, "strata-heap-hello", hello.nonce, challenge.nonce, NULL, 0, hello.proof);
    if (!heap_send(sock, &iov, 1, NULL, 0, deadline) ||
        !heap_recv(sock, &answer, sizeof(answer), NULL, 0, &nfds, deadline) ||
        answer.magic != HEAP_MAGIC) {
        UTIL_LOG_ERROR("heap: local rank 0 of job %s did not answer this rank's proof (it "
                       "refuses ranks without this object's secret)", p->job_key);
        return STRATA_ERR_BOOTSTRAP;
    }
    heap_prove(p, "strata-heap-answer", challenge.nonce, hello.nonce, NULL, 0, expect);
    if (!util_crypto_equal(expect, answer.proof, sizeof(expect))) {
        UTIL_LOG_ERROR("heap: the process at the rendezvous of job %s does not know this "
                       "object's secret: not handing it this rank's region", p->job_key);
        return STRATA_ERR_BOOTSTRAP;
    }
    memcpy(nonce, hello.nonce, HEAP_NONCE_LEN);
    memcpy(root_nonce, challenge.nonce, HEAP_NONCE_LEN);
    return STRATA_OK;
}

static strata_status_t heap_gather_peer(const intra_heap_params_t *p, heap_card_t *cards,
                                        int *fds, uint64_t deadline)
{
    int own = p->local_rank, own_fd = fds[own], got[INTRA_HEAP_MAX_RANKS], nfds = 0, sock;
    int expect_fds = cards[own].has_fd ? p->local_size : 0;
    heap_card_t own_card = cards[own];
    heap_join_t join = {.card = cards[own]};
    unsigned char proof[UTIL_SHA256_LEN], expect[UTIL_SHA256_LEN];
    unsigned char nonce[HEAP_NONCE_LEN], root_nonce[HEAP_NONCE_LEN];
    struct iovec iov = {.iov_base = &join, .iov_len = sizeof(join)};
    struct iovec back[2] = {{.iov_base = cards, .iov_len = sizeof(*cards) * (size_t)p->local_size},
                            {.iov_base = proof, .iov_len = sizeof(proof)}};
    strata_status_t status;
    const char *refusal;
    bool proven;
    char *all;

    status = heap_connect_root(p, deadline, &sock);
    if (status != STRATA_OK) {
        return status;
    }
    status = heap_prove_both_ways(p, sock, deadline, nonce, root_nonce);
    if (status != STRATA_OK) {
        close(sock);
        return heap_peers_alive(p) != STRATA_OK ? heap_peers_alive(p) : status;
    }
    status = STRATA_ERR_BOOTSTRAP;
    heap_prove(p, "strata-heap-join", nonce, root_nonce, &join.card, sizeof(join.card),
               join.proof);
    all = malloc(back[0].iov_len + back[1].iov_len);
    if (all != NULL && heap_send(sock, &iov, 1, &own_fd, own_card.has_fd ? 1 : 0, deadline) &&
        heap_recv(sock, all, back[0].iov_len + back[1].iov_len, got, expect_fds, &nfds,
                  deadline)) {
        memcpy(cards, all, back[0].iov_len);
        memcpy(proof, all + back[0].iov_len, sizeof(proof));
        heap_prove(p, "strata-heap-cards", root_nonce, nonce, cards, back[0].iov_len, expect);
        proven  = util_crypto_equal(expect, proof, sizeof(proof));
        refusal = !proven            ? "sent cards without this object's proof"
                  : nfds != expect_fds ? "sent the wrong number of descriptors"
                                       : heap_cards_refusal(cards, p->local_size, &own_card);
        if (refusal == NULL) {
            memcpy(fds, got, sizeof(int) * (size_t)nfds);
            status = STRATA_OK;
        } else {
            UTIL_LOG_ERROR("heap: local rank 0 of job %s %s: not using its regions",
                           p->job_key, refusal);
            for (int i = 0; i < nfds; ++i) {
                close(got[i]);
            }
        }
        if (status == STRATA_OK && own_card.has_fd) {
            close(fds[own]); /* our own region came back as a second descriptor */
        }
    } else if (heap_peers_alive(p) != STRATA_OK) {
        UTIL_LOG_ERROR("heap: local rank 0 of job %s gave up the exchange: a rank failed",
                       p->job_key);
        status = heap_peers_alive(p);
    } else {
        UTIL_LOG_ERROR("heap: exchanging regions with local rank 0 of job %s failed",
                       p->job_key);
    }
    free(all);
    cards[own] = own_card;
    fds[own]   = own_fd;
    if (status != STRATA_OK) {
        for (int r = 0; r < p->local_size; ++r) {
            if (r != own) {
                fds[r] = -1; /* closed above, or never received */
            }
        }
    }
    close(sock);
    return status;
}

/* Every rank ends with every rank's card (and descriptor, for fd-backed regions). */
strata_status_t heap_exchange(const intra_heap_params_t *p, heap_card_t *cards, int *fds)
{
    uint64_t deadline = util_clock_now_ns() + p->timeout_ns;
    struct sockaddr_un addr;
    socklen_t len = heap_address(p->job_key, &addr);
    strata_status_t status;
    int listener;

    if (p->local_size == 1) {
        return STRATA_OK;
    }
    if (p->local_rank != 0) {
        return heap_gather_peer(p, cards, fds, deadline);
    }
    listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0 || bind(listener, (struct sockaddr *)&addr, len) != 0 ||
        listen(listener, INTRA_HEAP_MAX_RANKS) != 0) {
        UTIL_LOG_ERROR("heap: cannot listen for the node's ranks (job %s): %s%s", p->job_key,
                       strerror(errno), errno == EADDRINUSE ? " (another process holds the "
                                                              "rendezvous' name)" : "");
        if (listener >= 0) {
            close(listener);
        }
        return STRATA_ERR_IO;
    }
    status = heap_gather_root(p, listener, cards, fds, deadline);
    close(listener);
    return status;
}
