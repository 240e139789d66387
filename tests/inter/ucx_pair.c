/*
 * Two ucx transports talking, one per process (ucx_pair.h).
 */
#include "inter/ucx_pair.h"

#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>

bool g_child;

void xwrite(int fd, const void *buf, size_t len)
{
    CHECK(write(fd, buf, len) == (ssize_t)len, "socket write");
}

void xread(int fd, void *buf, size_t len)
{
    size_t got = 0;

    while (got < len) {
        ssize_t n = read(fd, (char *)buf + got, len - got);

        CHECK(n > 0, "socket read (the other side exited?)");
        got += (size_t)n;
    }
}

inter_transport_params_t params_for(int rank, const char *iface, bool shared_memory)
{
    return (inter_transport_params_t){.rank = rank, .world_size = 2, .iface = iface,
                                      .required = true, .rail = 0,
                                      .device_memory = INTER_MEM_HOST, .msg_bytes = MSG_BYTES,
                                      .shared_memory = shared_memory};
}

/* Open, swap addresses over the socket, insert both (in rank order), post receives. */
void side_open(side_t *s, int rank, int sock)
{
    inter_transport_params_t params = params_for(rank, "lo", false);
    char mine[INTER_ADDR_MAX], theirs[INTER_ADDR_MAX];
    size_t len = sizeof(mine), their_len;
    uint64_t handles[2];

    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
    s->sock = sock;
    CHECK(OPS->open(&params, &s->tp) == STRATA_OK, "open");
    CHECK(s->tp->addr_size <= INTER_ADDR_MAX, "addr_size %zu", s->tp->addr_size);
    CHECK(OPS->address(s->tp, mine, &len) == STRATA_OK && len <= s->tp->addr_size, "address");
    xwrite(sock, &len, sizeof(len));
    xwrite(sock, mine, len);
    xread(sock, &their_len, sizeof(their_len));
    CHECK(their_len <= sizeof(theirs), "their address");
    xread(sock, theirs, their_len);
    for (int r = 0; r < 2; ++r) {
        CHECK(OPS->insert_peer(s->tp, r == rank ? mine : theirs, r == rank ? len : their_len,
                               &handles[r]) == STRATA_OK, "insert_peer %d", r);
    }
    s->self  = handles[rank];
    s->other = handles[1 - rank];
    for (int i = 0; i < NUM_RX; ++i) {
        s->ctx[NUM_CTX - 1 - i].id = -1 - i;
        CHECK(OPS->post_recv(s->tp, s->rx[i], MSG_BYTES, NULL, &s->ctx[NUM_CTX - 1 - i]) ==
              STRATA_OK, "post_recv");
    }
}

void side_close(side_t *s)
{
    OPS->shutdown(s->tp);
    OPS->close(s->tp);
    pthread_mutex_destroy(&s->lock);
}

/* Poll once into the log; returns how many came. */
int side_poll(side_t *s)
{
    inter_cqe_t cqes[32];
    int n = 0;

    CHECK(OPS->poll(s->tp, cqes, 32, &n) == STRATA_OK, "poll");
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < n && s->num_cqes < (int)UTIL_ARRAY_SIZE(s->cqes); ++i) {
        s->cqes[s->num_cqes++] = cqes[i];
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

int side_count(side_t *s, inter_cqe_kind_t kind, strata_status_t status)
{
    int n = 0;

    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->num_cqes; ++i) {
        n += s->cqes[i].kind == kind && s->cqes[i].status == status;
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* Poll until count completions of kind and status came, or seconds passed. */
bool side_wait(side_t *s, inter_cqe_kind_t kind, strata_status_t status, int count,
               double seconds)
{
    uint64_t end = util_clock_now_ns() + (uint64_t)(seconds * 1e9);

    while (side_count(s, kind, status) < count) {
        if (util_clock_now_ns() > end) {
            return false;
        }
        side_poll(s);
    }
    return true;
}

/* Read one byte from the socket, progressing meanwhile (a peer's reads and rkey requests
 * need this side's progress, as the engine's proxy gives it). */
char side_read_byte(side_t *s)
{
    char byte;

    for (;;) {
        struct timeval tv = {0, 1000};
        fd_set fds;

        FD_ZERO(&fds);
        FD_SET(s->sock, &fds);
        if (select(s->sock + 1, &fds, NULL, NULL, &tv) > 0) {
            break;
        }
        side_poll(s);
    }
    xread(s->sock, &byte, 1);
    return byte;
}

unsigned char pattern(int write, size_t i)
{
    return (unsigned char)((write * 131 + (int)i * 7 + 1) & 0xff);
}

size_t write_len(int i)
{
    static const size_t lens[] = {1, 8, 63, 512, 4096, 8193, 30000, REGION};

    return lens[i % UTIL_ARRAY_SIZE(lens)];
}

/* Runs fn in a child on one end of a socket pair, the parent's fn on the other. */
void run_pair(void (*parent_fn)(int sock), void (*child_fn)(int sock))
{
    int fds[2], status = -1;
    pid_t pid;

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    fflush(NULL); /* the child exits through exit(), flushing only what it wrote */
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        g_child = true;
        alarm(60); /* a parent that failed and left does not leave this one spinning */
        close(fds[0]);
        child_fn(fds[1]);
        exit(0); /* with the leak check of sanitizer builds */
    }
    close(fds[1]);
    parent_fn(fds[0]);
    close(fds[0]);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) || WIFSIGNALED(status));
    if (WIFEXITED(status)) {
        assert_int_equal(WEXITSTATUS(status), 0);
    }
}
