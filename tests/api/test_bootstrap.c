/*
 * The TCP rendezvous with real processes on loopback: allgather and barrier results, a
 * root that never appears, a rank that dies mid-collective, launcher variables. With a
 * shared secret: a process without it that connects first is refused and logged and the job
 * still forms; a rank does not join a rank 0 that cannot prove the secret, and the secret
 * never crosses the wire; the secret from a file. The launcher's local rank, beside its rank
 * and size, picks a communicator's GPU, and a disagreement with the node grouping is logged.
 */
#include "api/api.h"

#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/log_capture.h"
#include "common/one_rank.h"

#define MAX_RANKS 8

/* A port nobody listens on right now (the kernel's pick, released again). */
static uint16_t free_port(void)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
    close(fd);
    return ntohs(addr.sin_port);
}

typedef int (*rank_fn_t)(int rank, int world, uint16_t port);

/* Run fn in `world` child processes; return each one's exit status in codes. */
static void run_ranks(int world, rank_fn_t fn, int *codes)
{
    uint16_t port = free_port();
    pid_t pids[MAX_RANKS];

    for (int r = 0; r < world; ++r) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            alarm(30); /* a hung child must not hang the suite */
            _exit(fn(r, world, port));
        }
    }
    for (int r = 0; r < world; ++r) {
        int status;

        assert_int_equal(waitpid(pids[r], &status, 0), pids[r]);
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
}

/* Allgather blocks of several sizes, each rank's block a pattern of (rank, round). */
static int allgather_rounds(int rank, int world, uint16_t port)
{
    static const size_t sizes[] = {1, 8, 1000, 65536, 0, 3};
    strata_bootstrap_t *bs;
    unsigned char *send, *recv;

    if (strata_bootstrap_tcp_create("127.0.0.1", port, rank, world, 10000, &bs) != STRATA_OK) {
        return 10;
    }
    send = malloc(65536);
    recv = malloc(65536 * (size_t)world);
    for (size_t round = 0; round < sizeof(sizes) / sizeof(sizes[0]); ++round) {
        for (size_t i = 0; i < sizes[round]; ++i) {
            send[i] = (unsigned char)(rank * 31 + round * 7 + i);
        }
        if (bs->allgather(bs->ctx, send, recv, sizes[round]) != STRATA_OK) {
            return 11;
        }
        for (int r = 0; r < world; ++r) {
            for (size_t i = 0; i < sizes[round]; ++i) {
                if (recv[(size_t)r * sizes[round] + i] != (unsigned char)(r * 31 + round * 7 + i)) {
                    return 12;
                }
            }
        }
        if (bs->barrier(bs->ctx) != STRATA_OK) {
            return 13;
        }
    }
    free(send);
    free(recv);
    strata_bootstrap_destroy(bs);
    return 0;
}

static void test_allgather_2_and_4_ranks(void **state)
{
    int codes[MAX_RANKS];

    (void)state;
    for (int world = 1; world <= 4; world *= 2) {
        run_ranks(world, allgather_rounds, codes);
        for (int r = 0; r < world; ++r) {
            if (codes[r] != 0) {
                fail_msg("world %d: rank %d exited %d", world, r, codes[r]);
            }
        }
    }
}

/* Rank 1 alone: nobody listens; it must give up with a timeout close to the one asked. */
static int lonely_rank(int rank, int world, uint16_t port)
{
    strata_bootstrap_t *bs = NULL;
    uint64_t start = util_clock_now_ns(), elapsed;
    strata_status_t status;

    (void)rank;
    (void)world;
    status = strata_bootstrap_tcp_create("127.0.0.1", port, 1, 2, 300, &bs);
    elapsed = util_clock_now_ns() - start;
    if (status != STRATA_ERR_TIMEOUT || bs != NULL) {
        return 20;
    }
    return (elapsed >= 250 * UTIL_NSEC_PER_MSEC && elapsed < 3 * UTIL_NSEC_PER_SEC) ? 0 : 21;
}

static void test_root_never_appears(void **state)
{
    int codes[1];

    (void)state;
    util_log_set_level(STRATA_LOG_LEVEL_ERROR);
    run_ranks(1, lonely_rank, codes);
    assert_int_equal(codes[0], 0);
}

/* Rank 2 of 3 joins, then dies before the first collective: the others fail, not hang. */
static int dies_mid_collective(int rank, int world, uint16_t port)
{
    strata_bootstrap_t *bs;
    int value = rank, all[MAX_RANKS];
    strata_status_t status;

    if (strata_bootstrap_tcp_create("127.0.0.1", port, rank, world, 2000, &bs) != STRATA_OK) {
        return 30;
    }
    if (rank == 2) {
        _exit(0);
    }
    status = bs->allgather(bs->ctx, &value, all, sizeof(value));
    if (status == STRATA_OK) {
        return 31;
    }
    strata_bootstrap_destroy(bs);
    return (status == STRATA_ERR_BOOTSTRAP || status == STRATA_ERR_TIMEOUT) ? 0 : 32;
}

static void test_rank_dies(void **state)
{
    int codes[3];

    (void)state;
    run_ranks(3, dies_mid_collective, codes);
    assert_int_equal(codes[0], 0);
    assert_int_equal(codes[1], 0);
    assert_int_equal(codes[2], 0);
}

/* Rank 0 of 2 and a stray rank that believes in 3 ranks: refused at once, not at its timeout;
 * the real rank 1 then completes the rendezvous. */
static int mismatched_world(int rank, int world, uint16_t port)
{
    strata_bootstrap_t *bs = NULL;
    uint64_t start = util_clock_now_ns();
    strata_status_t status;

    (void)world;
    if (rank == 2) {
        status = strata_bootstrap_tcp_create("127.0.0.1", port, 1, 3, 10000, &bs);
        if (status != STRATA_ERR_BOOTSTRAP || bs != NULL) {
            return 40;
        }
        return (util_clock_now_ns() - start < 5 * UTIL_NSEC_PER_SEC) ? 0 : 41;
    }
    if (rank == 1) {
        sleep(2); /* after the stray one has been refused */
    }
    status = strata_bootstrap_tcp_create("127.0.0.1", port, rank, 2, 10000, &bs);
    if (status != STRATA_OK) {
        return 42;
    }
    status = bs->barrier(bs->ctx);
    strata_bootstrap_destroy(bs);
    return (status == STRATA_OK) ? 0 : 43;
}

static void test_refused_quickly(void **state)
{
    int codes[3];

    (void)state;
    run_ranks(3, mismatched_world, codes);
    for (int r = 0; r < 3; ++r) {
        if (codes[r] != 0) {
            fail_msg("process %d exited %d", r, codes[r]);
        }
    }
}

/* --- The shared secret ------------------------------------------------------------------- */

#define SECRET "correct horse battery staple"

static int refusals;
static char last_line[1024];

static void watch_log(strata_log_level_t level, const char *line, void *arg)
{
    (void)level;
    (void)arg;
    if (strstr(line, "refused a connection") != NULL) {
        ++refusals;
    }
    snprintf(last_line, sizeof(last_line), "%s", line);
}

/* Claim rank 1 of 2 by hand, saying we have the secret, and answer rank 0's challenge (its
 * nonce, and no proof of its own: the rank proves first) with a guess: 0 when refused, 1
 * when let in. */
static int guessing_intruder(uint16_t port)
{
    uint32_t hello[14] = {0x53545241u, 3, 1, 2, 1}; /* magic, version, rank, world, secret */
    unsigned char answer = 0, nonce[32], guess[32];
    int fd = -1;

    if (util_sock_connect("127.0.0.1", port, util_clock_now_ns() + 5 * UTIL_NSEC_PER_SEC,
                          &fd) != STRATA_OK ||
        send(fd, hello, sizeof(hello), 0) != (ssize_t)sizeof(hello) ||
        recv(fd, &answer, 1, MSG_WAITALL) != 1 || answer != 2 ||
        recv(fd, nonce, sizeof(nonce), MSG_WAITALL) != (ssize_t)sizeof(nonce)) {
        return 55;
    }
    memset(guess, 0x42, sizeof(guess));
    if (send(fd, guess, sizeof(guess), MSG_NOSIGNAL) != (ssize_t)sizeof(guess)) {
        return 56;
    }
    answer = 0;
    if (recv(fd, &answer, 1, MSG_WAITALL) != 1) {
        answer = 0; /* closed: refused */
    }
    close(fd);
    return answer == 0 ? 0 : 1;
}

/* Rank 0 and 1 with the secret; processes 2 (no secret), 3 (another secret) and 4 (a guess
 * at the proof) claim rank 1 first and must be refused at once; rank 0 must log each, and
 * the job forms. */
static int intruder_first(int rank, int world, uint16_t port)
{
    strata_bootstrap_t *bs = NULL;
    uint64_t start = util_clock_now_ns();
    strata_status_t status;

    (void)world;
    util_log_set_level(STRATA_LOG_LEVEL_WARN);
    util_log_set_handler(watch_log, NULL);
    if (rank == 4) {
        return guessing_intruder(port);
    }
    if (rank >= 2) {
        if (rank == 2) {
            unsetenv("STRATA_BOOTSTRAP_SECRET");
        } else {
            setenv("STRATA_BOOTSTRAP_SECRET", "not " SECRET, 1);
        }
        status = strata_bootstrap_tcp_create("127.0.0.1", port, 1, 2, 10000, &bs);
        if (status != STRATA_ERR_BOOTSTRAP || bs != NULL) {
            return 50;
        }
        return (util_clock_now_ns() - start < 5 * UTIL_NSEC_PER_SEC) ? 0 : 51;
    }
    setenv("STRATA_BOOTSTRAP_SECRET", SECRET, 1);
    if (rank == 1) {
        sleep(2); /* after the intruders have been refused */
    }
    status = strata_bootstrap_tcp_create("127.0.0.1", port, rank, 2, 10000, &bs);
    if (status != STRATA_OK) {
        return 52;
    }
    status = bs->barrier(bs->ctx);
    strata_bootstrap_destroy(bs);
    if (status != STRATA_OK) {
        return 53;
    }
    if (rank == 0 && refusals != 3) {
        fprintf(stderr, "rank 0 logged %d refusals, not 3; last line: %s\n", refusals, last_line);
        return 54;
    }
    return 0;
}

static void test_secret_keeps_intruders_out(void **state)
{
    int codes[5];

    (void)state;
    run_ranks(5, intruder_first, codes);
    for (int r = 0; r < 5; ++r) {
        if (codes[r] != 0) {
            fail_msg("process %d exited %d", r, codes[r]);
        }
    }
    unsetenv("STRATA_BOOTSTRAP_SECRET");
}

/* A rank 0 that does not know the secret: it answers a hello with a challenge (a nonce),
 * takes the rank's proof, accepts it with a made-up proof of its own, then records all the
 * rank sends. Returns what it read after the rank's proof, or -1. */
static ssize_t fake_root(int listen_fd, char *buf, size_t size)
{
    unsigned char challenge[1 + 32], accepted[1 + 32], proof[32];
    char hello[56]; /* magic, version, rank, world, secret flag, reserved, nonce */
    ssize_t got, total = 0;
    int fd = accept(listen_fd, NULL, NULL);

    if (fd < 0 || recv(fd, hello, sizeof(hello), MSG_WAITALL) != (ssize_t)sizeof(hello)) {
        return -1;
    }
    memset(challenge, 0x5a, sizeof(challenge));
    challenge[0] = 2; /* "challenge", our nonce follows */
    memset(accepted, 0x33, sizeof(accepted));
    accepted[0] = 1; /* "accepted", our (made-up) proof follows */
    if (send(fd, challenge, sizeof(challenge), MSG_NOSIGNAL) != (ssize_t)sizeof(challenge) ||
        recv(fd, proof, sizeof(proof), MSG_WAITALL) != (ssize_t)sizeof(proof) ||
        send(fd, accepted, sizeof(accepted), MSG_NOSIGNAL) != (ssize_t)sizeof(accepted)) {
        return -1;
    }
    while ((got = recv(fd, buf + total, size - (size_t)total, 0)) > 0) {
        total += got;
    }
    close(fd);
    return total;
}

static void test_rank_checks_root_proof(void **state)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(addr);
    int listen_fd = socket(AF_INET, SOCK_STREAM, 0), status;
    char after[4096];
    ssize_t got;
    pid_t child;

    (void)state;
    assert_true(listen_fd >= 0);
    assert_int_equal(bind(listen_fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    assert_int_equal(listen(listen_fd, 4), 0);
    assert_int_equal(getsockname(listen_fd, (struct sockaddr *)&addr, &len), 0);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        strata_bootstrap_t *bs = NULL;

        alarm(30);
        util_log_set_level(STRATA_LOG_LEVEL_ERROR);
        util_log_set_handler(watch_log, NULL);
        setenv("STRATA_BOOTSTRAP_SECRET", SECRET, 1);
        if (strata_bootstrap_tcp_create("127.0.0.1", ntohs(addr.sin_port), 1, 2, 5000, &bs) !=
                STRATA_ERR_BOOTSTRAP ||
            strstr(last_line, "does not know the bootstrap secret") == NULL) {
            fprintf(stderr, "the rank's last words: %s\n", last_line);
            _exit(1);
        }
        _exit(0);
    }
    got = fake_root(listen_fd, after, sizeof(after));
    close(listen_fd);
    assert_int_equal(waitpid(child, &status, 0), child);
    if (got != 0) {
        fail_msg("the rank sent %zd bytes to a rank 0 that did not prove the secret", got);
    }
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Copy what arrives on from to to; false once either end is done. */
static bool relay_some(int from, int to)
{
    char buf[4096];
    ssize_t got = recv(from, buf, sizeof(buf), 0);

    return got > 0 && send(to, buf, (size_t)got, MSG_NOSIGNAL) == got;
}

/* A process between a rank and rank 0: it takes the rank's connection on listen_fd, opens
 * its own to rank 0 at port, and copies bytes both ways until either side closes. */
static void relay(int listen_fd, uint16_t port)
{
    int in = accept(listen_fd, NULL, NULL), out = -1;

    if (in < 0 || util_sock_connect("127.0.0.1", port, util_clock_now_ns() + 5 * UTIL_NSEC_PER_SEC,
                                    &out) != STRATA_OK) {
        _exit(2);
    }
    for (;;) {
        struct pollfd pfd[2] = {{.fd = in, .events = POLLIN}, {.fd = out, .events = POLLIN}};

        if (poll(pfd, 2, 10000) <= 0 || (pfd[0].revents && !relay_some(in, out)) ||
            (pfd[1].revents && !relay_some(out, in))) {
            _exit(0);
        }
    }
}

/*
 * Rank 0 with a secret: while it waits, nobody can take its port in the other address
 * family ([::1]:PORT), and a rank relayed to it by another process (which forwards every
 * byte, as a co-located user could) is refused; the rank itself reaching it directly joins.
 */
static int relayed_rank(int rank, int world, uint16_t port)
{
    strata_bootstrap_t *bs = NULL;
    struct sockaddr_in6 six = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT,
                               .sin6_port = htons(port)};
    struct sockaddr_in relay_addr = {.sin_family = AF_INET,
                                     .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(relay_addr);
    strata_status_t status;
    int fd, listen_fd;
    pid_t relayer;

    (void)world;
    util_log_set_level(STRATA_LOG_LEVEL_WARN);
    util_log_set_handler(watch_log, NULL);
    setenv("STRATA_BOOTSTRAP_SECRET", SECRET, 1);
    if (rank == 0) {
        status = strata_bootstrap_tcp_create("127.0.0.1", port, 0, 2, 15000, &bs);
        if (status != STRATA_OK || bs->barrier(bs->ctx) != STRATA_OK) {
            return 70;
        }
        strata_bootstrap_destroy(bs);
        return refusals == 1 && strstr(last_line, "relayed") != NULL ? 0 : 71;
    }
    usleep(300000); /* rank 0 listens by now */
    fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&six, sizeof(six)) == 0) {
        return 72; /* the IPv6 side of rank 0's port was free to take */
    }
    if (fd >= 0) {
        close(fd);
    }
    listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&relay_addr, sizeof(relay_addr)) ||
        listen(listen_fd, 4) != 0 ||
        getsockname(listen_fd, (struct sockaddr *)&relay_addr, &len) != 0) {
        return 73;
    }
    relayer = fork();
    if (relayer == 0) {
        relay(listen_fd, port);
    }
    close(listen_fd);
    status = strata_bootstrap_tcp_create("127.0.0.1", ntohs(relay_addr.sin_port), 1, 2, 5000, &bs);
    waitpid(relayer, NULL, 0);
    if (status != STRATA_ERR_BOOTSTRAP || bs != NULL) {
        return 74; /* the relayed rank got in */
    }
    status = strata_bootstrap_tcp_create("127.0.0.1", port, 1, 2, 10000, &bs);
    if (status != STRATA_OK || bs->barrier(bs->ctx) != STRATA_OK) {
        return 75;
    }
    strata_bootstrap_destroy(bs);
    return 0;
}

/* Process 2 opens 16 connections to rank 0 that never say anything (any user can); rank 1
 * must still join at once: each handshake waits on its own, 2 s at most, beside the others
 * (one after the other, the 16 held the rendezvous for 32 s). */
static int idle_sockets_first(int rank, int world, uint16_t port)
{
    strata_bootstrap_t *bs = NULL;
    uint64_t start;
    int fds[16];

    (void)world;
    util_log_set_level(STRATA_LOG_LEVEL_ERROR);
    if (rank == 2) {
        usleep(100000);
        for (int i = 0; i < 16; ++i) {
            if (util_sock_connect("127.0.0.1", port, util_clock_now_ns() + 5 * UTIL_NSEC_PER_SEC,
                                  &fds[i]) != STRATA_OK) {
                return 60;
            }
        }
        sleep(6);
        return 0;
    }
    if (rank == 1) {
        usleep(400000); /* after the idle sockets are queued */
    }
    start = util_clock_now_ns();
    if (strata_bootstrap_tcp_create("127.0.0.1", port, rank, 2, 20000, &bs) != STRATA_OK ||
        bs->barrier(bs->ctx) != STRATA_OK) {
        return 61;
    }
    strata_bootstrap_destroy(bs);
    return rank == 1 && util_clock_now_ns() - start > 3 * UTIL_NSEC_PER_SEC ? 62 : 0;
}

static void test_idle_sockets_hold_nobody_up(void **state)
{
    int codes[3];

    (void)state;
    unsetenv("STRATA_BOOTSTRAP_SECRET");
    run_ranks(3, idle_sockets_first, codes);
    if (codes[0] != 0 || codes[1] != 0 || codes[2] != 0) {
        fail_msg("rank 0 exited %d, rank 1 %d (62: it joined after more than 3 s), the idle "
                 "sockets' process %d", codes[0], codes[1], codes[2]);
    }
}

static void test_relay_and_squatter_refused(void **state)
{
    int codes[2];

    (void)state;
    run_ranks(2, relayed_rank, codes);
    unsetenv("STRATA_BOOTSTRAP_SECRET");
    if (codes[0] != 0 || codes[1] != 0) {
        fail_msg("rank 0 exited %d (71: no refusal naming a relay), rank 1 %d (72: [::1] was "
                 "free, 74: the relayed rank got in)", codes[0], codes[1]);
    }
}

/* The secret from a file (its newline dropped) matches the variable; both at once are refused. */
static int secret_from_file(int rank, int world, uint16_t port)
{
    char path[64];
    strata_bootstrap_t *bs = NULL;
    strata_status_t status;
    FILE *f;

    snprintf(path, sizeof(path), "/tmp/strata-test-secret-%d", (int)getpid());
    util_log_set_level(STRATA_LOG_LEVEL_ERROR);
    if (rank == 0) {
        f = fopen(path, "w");
        if (f == NULL || fprintf(f, "%s\n", SECRET) < 0 || fclose(f) != 0) {
            return 60;
        }
        setenv("STRATA_BOOTSTRAP_SECRET_FILE", path, 1);
        setenv("STRATA_BOOTSTRAP_SECRET", SECRET, 1);
        if (strata_bootstrap_tcp_create("127.0.0.1", port, 0, world, 5000, &bs) !=
            STRATA_ERR_CONFIG) {
            return 61;
        }
        unsetenv("STRATA_BOOTSTRAP_SECRET");
    } else {
        setenv("STRATA_BOOTSTRAP_SECRET", SECRET, 1);
    }
    status = strata_bootstrap_tcp_create("127.0.0.1", port, rank, world, 5000, &bs);
    if (rank == 0) {
        unlink(path);
    }
    if (status != STRATA_OK) {
        return 62;
    }
    status = bs->barrier(bs->ctx);
    strata_bootstrap_destroy(bs);
    return status == STRATA_OK ? 0 : 63;
}

static void test_secret_file(void **state)
{
    int codes[2];

    (void)state;
    run_ranks(2, secret_from_file, codes);
    assert_int_equal(codes[0], 0);
    assert_int_equal(codes[1], 0);
}

/* A secret file that is not a regular file is refused at once: a FIFO no one writes held
 * the rank forever, past every timeout (alarm ends the test if it does), and a directory
 * read as an empty secret. */
static void test_secret_file_not_regular(void **state)
{
    char fifo[64], dir[64];
    strata_bootstrap_t *bs = NULL;

    (void)state;
    snprintf(fifo, sizeof(fifo), "/tmp/strata-test-fifo-%d", (int)getpid());
    snprintf(dir, sizeof(dir), "/tmp/strata-test-dir-%d", (int)getpid());
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(mkdir(dir, 0700), 0);
    unsetenv("STRATA_BOOTSTRAP_SECRET");
    alarm(20);
    log_capture_start();
    setenv("STRATA_BOOTSTRAP_SECRET_FILE", fifo, 1);
    assert_int_equal(strata_bootstrap_tcp_create(NULL, 0, 0, 1, 100, &bs), STRATA_ERR_CONFIG);
    setenv("STRATA_BOOTSTRAP_SECRET_FILE", dir, 1);
    assert_int_equal(strata_bootstrap_tcp_create(NULL, 0, 0, 1, 100, &bs), STRATA_ERR_CONFIG);
    log_capture_stop();
    alarm(0);
    unsetenv("STRATA_BOOTSTRAP_SECRET_FILE");
    unlink(fifo);
    rmdir(dir);
    assert_null(bs);
    assert_true(log_captured("STRATA_BOOTSTRAP_SECRET_FILE", "not a regular file but a FIFO",
                             NULL));
    assert_true(log_captured("STRATA_BOOTSTRAP_SECRET_FILE", "not a regular file but a "
                             "directory", NULL));
}

static void test_invalid_arguments(void **state)
{
    strata_bootstrap_t *bs = NULL;

    (void)state;
    assert_int_equal(strata_bootstrap_tcp_create("127.0.0.1", 1, 2, 2, 100, &bs),
                     STRATA_ERR_INVALID);
    assert_int_equal(strata_bootstrap_tcp_create("127.0.0.1", 1, -1, 2, 100, &bs),
                     STRATA_ERR_INVALID);
    assert_int_equal(strata_bootstrap_tcp_create(NULL, 1, 0, 2, 100, &bs), STRATA_ERR_INVALID);
    assert_int_equal(strata_bootstrap_tcp_create("127.0.0.1", 0, 0, 2, 100, &bs),
                     STRATA_ERR_INVALID);
    assert_null(bs);
    assert_int_equal(strata_bootstrap_tcp_create(NULL, 0, 0, 1, 100, &bs), STRATA_OK);
    strata_bootstrap_destroy(bs);
    strata_bootstrap_destroy(NULL);
}

static void test_from_env(void **state)
{
    strata_bootstrap_t *bs = NULL;

    (void)state;
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");
    unsetenv("SLURM_STEP_NODELIST");
    unsetenv("SLURM_JOB_NODELIST");
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_STEP_ID");
    /* No launcher: a world of one. */
    assert_int_equal(strata_bootstrap_from_env(&bs), STRATA_OK);
    assert_int_equal(bs->rank, 0);
    assert_int_equal(bs->world_size, 1);
    strata_bootstrap_destroy(bs);
    bs = NULL;
    /* MPICH's Hydra, and a bad rank refused. */
    setenv("PMI_RANK", "0", 1);
    setenv("PMI_SIZE", "1", 1);
    assert_int_equal(strata_bootstrap_from_env(&bs), STRATA_OK);
    assert_int_equal(bs->world_size, 1);
    strata_bootstrap_destroy(bs);
    bs = NULL;
    setenv("PMI_RANK", "3", 1);
    setenv("PMI_SIZE", "2", 1);
    assert_int_equal(strata_bootstrap_from_env(&bs), STRATA_ERR_INVALID);
    assert_null(bs);
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");

    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "1", 1);
    assert_int_equal(strata_bootstrap_from_env(&bs), STRATA_OK); /* one rank needs no root */
    assert_int_equal(bs->rank, 0);
    assert_int_equal(bs->world_size, 1);
    strata_bootstrap_destroy(bs);

    setenv("OMPI_COMM_WORLD_RANK", "1", 1); /* Slurm's pair is read first */
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("SLURM_PROCID", "one", 1);
    assert_int_equal(strata_bootstrap_from_env(&bs), STRATA_ERR_INVALID);
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");
    bs = NULL;
    assert_int_equal(strata_bootstrap_from_env(&bs), STRATA_ERR_INVALID); /* no address */
    assert_null(bs);
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_SIZE");
}

/* Slurm: rank 0's address is the first host of the step's node list, the port one that
 * every rank derives from the job and step ids. Two ranks of a step, as threads. */
static void test_hostlist_first(void **state)
{
    static const char *const cases[][2] = {
        {"node[01-04,07]", "node01"},       {"node[01-04,07]-ib,gpu5", "node01-ib"},
        {"gpu7,gpu8", "gpu7"},              {"h[3],x[1-2]", "h3"},
        {"127.0.0.[1-4]", "127.0.0.1"},     {"solo", "solo"},
    };
    static const char *const bad[] = {"", ",a", "[1-2]", "n[a-b]", "n[1-2", "n[1x]"};
    char host[64];

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        assert_true(api_hostlist_first(cases[i][0], host, sizeof(host)));
        assert_string_equal(host, cases[i][1]);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        assert_false(api_hostlist_first(bad[i], host, sizeof(host)));
    }
    assert_false(api_hostlist_first("averylongname", host, 8)); /* does not fit */
}

/* One rank of a Slurm step of two, in its own process: the address and port come from
 * the step's variables alone; every rank must see both ranks. */
static int slurm_rank(int rank, int world, uint16_t port)
{
    strata_bootstrap_t *bs = NULL;
    char id[16];
    int ranks[2] = {-1, -1};

    (void)port; /* derived from the job and step ids instead */
    snprintf(id, sizeof(id), "%d", rank);
    setenv("SLURM_PROCID", id, 1);
    snprintf(id, sizeof(id), "%d", world);
    setenv("SLURM_NTASKS", id, 1);
    if (strata_bootstrap_from_env(&bs) != STRATA_OK) {
        return 10;
    }
    if (bs->rank != rank || bs->allgather(bs->ctx, &rank, ranks, sizeof(int)) != STRATA_OK ||
        ranks[0] != 0 || ranks[1] != 1) {
        strata_bootstrap_destroy(bs);
        return 11;
    }
    strata_bootstrap_destroy(bs);
    return 0;
}

static void test_from_env_slurm(void **state)
{
    char job[16];
    int codes[2];

    (void)state;
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("PMI_RANK");
    unsetenv("RANK");
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
    unsetenv("STRATA_BOOTSTRAP_ADDR");
    unsetenv("STRATA_BOOTSTRAP_PORT");
    setenv("SLURM_STEP_NODELIST", "127.0.0.[1-2]", 1);
    snprintf(job, sizeof(job), "%d", (int)getpid()); /* another port for every run */
    setenv("SLURM_JOB_ID", job, 1);
    setenv("SLURM_STEP_ID", "3", 1);
    run_ranks(2, slurm_rank, codes);
    assert_int_equal(codes[0], 0);
    assert_int_equal(codes[1], 0);
    unsetenv("SLURM_STEP_NODELIST");
    unsetenv("SLURM_JOB_ID");
    unsetenv("SLURM_STEP_ID");
}

/* Every launcher's rank, size and local rank variables, and the ones torchrun sets. */
static const char *const launcher_vars[] = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK",             "PMI_SIZE",             "MPI_LOCALRANKID",
    "RANK",                 "WORLD_SIZE",           "LOCAL_RANK",
    "SLURM_PROCID",         "SLURM_NTASKS",         "SLURM_LOCALID",
};

/* The GPU a one-rank communicator over an 8-GPU topology picks (the host backend takes
 * the topology's GPUs in turn: GPU = local rank). */
static int gpu_of_one_rank_comm(void)
{
    strata_config_t config = {.field_mask = STRATA_CONFIG_FIELD_TOPO_FILE,
                              .topo_file  = STRATA_TEST_FIXTURES "/nvswitch-8gpu-8nic.nccl.xml"};
    strata_comm_t *comm = NULL;
    int gpu;

    assert_int_equal(strata_comm_create(&config, &one_rank, &comm), STRATA_OK);
    assert_int_equal(strata_comm_local_rank(comm), 0); /* the grouping's, whatever the launcher */
    gpu = strata_comm_gpu(comm);
    strata_comm_destroy(comm);
    return gpu;
}

/* Each launcher's local rank picks the GPU, read only beside that launcher's rank and size,
 * and only where those are the communicator's (the first launcher found wins, as for the
 * rank); the grouping (local rank 0 of 1) gives
 * way with a warning naming both; a value that is no local rank is ignored, with a warning. */
static void test_launcher_local_rank_picks_gpu(void **state)
{
    static const struct {
        const char *set[6]; /* variable, value pairs */
        int         gpu;
        const char *warning; /* expected in a warning; NULL: none */
    } cases[] = {
        {{"RANK", "0", "WORLD_SIZE", "1", "LOCAL_RANK", "3"}, 3,
         "LOCAL_RANK=3 differs from local rank 0 of 1"},
        {{"OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "1",
          "OMPI_COMM_WORLD_LOCAL_RANK", "5"}, 5, "OMPI_COMM_WORLD_LOCAL_RANK=5 differs"},
        {{"PMI_RANK", "0", "PMI_SIZE", "1", "MPI_LOCALRANKID", "2"}, 2,
         "MPI_LOCALRANKID=2 differs"},
        {{"SLURM_PROCID", "0", "SLURM_NTASKS", "1", "SLURM_LOCALID", "6"}, 6,
         "SLURM_LOCALID=6 differs"},
        {{"RANK", "0", "WORLD_SIZE", "1", "LOCAL_RANK", "0"}, 0, NULL}, /* they agree */
        {{"RANK", "0", "WORLD_SIZE", "1", "LOCAL_RANK", "two"}, 0,
         "LOCAL_RANK=two is not a local rank"},
        {{"RANK", "0", "WORLD_SIZE", "1", "LOCAL_RANK", "-1"}, 0,
         "LOCAL_RANK=-1 is not a local rank"},
        /* torchrun's rank wins over Slurm's, so Slurm's local id is not read */
        {{"RANK", "0", "WORLD_SIZE", "1", "SLURM_LOCALID", "4"}, 0, NULL},
        /* a local rank without its launcher's rank and size is not read */
        {{"LOCAL_RANK", "3", NULL}, 0, NULL},
        /* nor where the communicator's ranks are not the launcher's processes (a caller's
         * own bootstrap, here rank 0 of 1 under torchrun's rank 0 of 4) */
        {{"RANK", "0", "WORLD_SIZE", "4", "LOCAL_RANK", "3"}, 0, NULL},
        {{"RANK", "2", "WORLD_SIZE", "4", "LOCAL_RANK", "3"}, 0, NULL},
    };

    (void)state;
    util_log_set_level(STRATA_LOG_LEVEL_WARN); /* earlier tests quiet it */
    setenv("STRATA_INTER_PROVIDER", "tcp", 1);
    setenv("STRATA_INTER_IFACE", "lo", 1);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
        int gpu;

        for (size_t v = 0; v < sizeof(launcher_vars) / sizeof(launcher_vars[0]); ++v) {
            unsetenv(launcher_vars[v]);
        }
        for (size_t v = 0; v + 1 < 6 && cases[i].set[v] != NULL; v += 2) {
            setenv(cases[i].set[v], cases[i].set[v + 1], 1);
        }
        log_capture_start();
        gpu = gpu_of_one_rank_comm();
        log_capture_stop();
        if (gpu != cases[i].gpu) {
            print_error("case %zu (%s=%s): GPU %d, expected %d\n", i, cases[i].set[0],
                        cases[i].set[1], gpu, cases[i].gpu);
        }
        assert_int_equal(gpu, cases[i].gpu);
        if (cases[i].warning != NULL) {
            assert_true(log_captured(cases[i].warning, NULL, NULL));
        }
        for (int l = 0; cases[i].warning == NULL && l < log_capture.count; ++l) {
            assert_null(strstr(log_capture.lines[l], "differs from local rank"));
            assert_null(strstr(log_capture.lines[l], "is not a local rank"));
        }
    }
    for (size_t v = 0; v < sizeof(launcher_vars) / sizeof(launcher_vars[0]); ++v) {
        unsetenv(launcher_vars[v]);
    }
}

/* Node names given on purpose (simulated nodes): the launcher's local rank still picks the
 * GPU, and its disagreement with the grouping is said once, at info level, not warned. */
static void test_given_node_names_do_not_warn(void **state)
{
    int gpu;

    (void)state;
    util_log_set_level(STRATA_LOG_LEVEL_INFO);
    setenv("STRATA_INTER_PROVIDER", "tcp", 1);
    setenv("STRATA_INTER_IFACE", "lo", 1);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("LOCAL_RANK", "3", 1);
    setenv("STRATA_NODE_NAME", "node1", 1);
    log_capture_start();
    gpu = gpu_of_one_rank_comm();
    log_capture_stop();
    unsetenv("STRATA_NODE_NAME");
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("LOCAL_RANK");
    util_log_set_level(STRATA_LOG_LEVEL_WARN);
    assert_int_equal(gpu, 3);
    assert_true(log_captured("node names are given", "LOCAL_RANK", NULL));
    for (int l = 0; l < log_capture.count; ++l) {
        assert_null(strstr(log_capture.lines[l], "differs from local rank"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allgather_2_and_4_ranks),
        cmocka_unit_test(test_root_never_appears),
        cmocka_unit_test(test_rank_dies),
        cmocka_unit_test(test_refused_quickly),
        cmocka_unit_test(test_secret_keeps_intruders_out),
        cmocka_unit_test(test_rank_checks_root_proof),
        cmocka_unit_test(test_relay_and_squatter_refused),
        cmocka_unit_test(test_idle_sockets_hold_nobody_up),
        cmocka_unit_test(test_secret_file),
        cmocka_unit_test(test_secret_file_not_regular),
        cmocka_unit_test(test_invalid_arguments),
        cmocka_unit_test(test_from_env),
        cmocka_unit_test(test_hostlist_first),
        cmocka_unit_test(test_from_env_slurm),
        cmocka_unit_test(test_launcher_local_rank_picks_gpu),
        cmocka_unit_test(test_given_node_names_do_not_warn),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
