/*
 * The bootstrap's shared secret, against real processes on loopback: processes without it
 * (none, another, a guess at the proof) that connect first are refused and logged and the job
 * still forms; a rank does not join a rank 0 that cannot prove the secret, and gives it
 * nothing past its own proof; a process relaying a rank to rank 0 is refused, and nobody can
 * take the IPv6 side of rank 0's port; idle connections hold nobody up; the secret from a
 * file, and a file that is no regular file refused at once.
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

#include "api/bootstrap_ranks.h"
#include "common/log_capture.h"

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_secret_keeps_intruders_out),
        cmocka_unit_test(test_rank_checks_root_proof),
        cmocka_unit_test(test_relay_and_squatter_refused),
        cmocka_unit_test(test_idle_sockets_hold_nobody_up),
        cmocka_unit_test(test_secret_file),
        cmocka_unit_test(test_secret_file_not_regular),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
