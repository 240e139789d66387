/*
 * Who may join a node's symmetric heap: a process of another user, or one without the
 * object's secret, that reaches the rendezvous first is refused and logged and the job
 * still forms; idle connections hold no rank up; a rendezvous held by another user, or by
 * a process without the secret, gets nothing of a joining rank's region; and the cards a
 * rank with the secret may send are checked before the heap uses them.
 */
#include "intra/heap/heap_rendezvous.h"
#include "intra/host/host_device.h"
#include "util/util.h"

#include <grp.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "intra/heap_ranks.h"

#define NOBODY 65534 /* an unused uid: 'nobody' */

static int refusals;
static char refusal_line[1024];

static void count_refusals(strata_log_level_t level, const char *line, void *arg)
{
    (void)level;
    (void)arg;
    if (strstr(line, "refused a connection") != NULL) {
        ++refusals;
        snprintf(refusal_line, sizeof(refusal_line), "%s", line);
    }
}

/* Become 'nobody' (the tests run as root); false when that is not possible. */
static bool become_nobody(void)
{
    return setgroups(0, NULL) == 0 && setgid(NOBODY) == 0 && setuid(NOBODY) == 0 &&
           geteuid() == NOBODY;
}

static void skip_unless_root(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "needs root, to run a process as another user (uid %d)\n", NOBODY);
        skip();
    }
}

/* The job's rendezvous address under key, as the heap names it. */
static socklen_t rendezvous(const char *key, struct sockaddr_un *addr)
{
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    snprintf(addr->sun_path + 1, sizeof(addr->sun_path) - 1, "strata-heap-%s", key);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(addr->sun_path + 1));
}

/*
 * An intruder that reaches rank 0 before local rank 1: another user's process, which must
 * learn nothing (not even the challenge), or local rank 1 with a wrong secret, which must
 * not get in. Exit code 0: it was kept out; 1: it got something.
 */
static int intruder_main(const char *key, bool other_user)
{
    intra_heap_params_t p = {.device = &host_device_ops, .local_rank = 1, .local_size = 2,
                             .size = 3 * DATA_BYTES, .job_key = key, .timeout_ns = WAIT_NS};
    uint64_t deadline = util_clock_now_ns() + WAIT_NS;
    struct sockaddr_un addr;
    socklen_t len = rendezvous(key, &addr);
    intra_heap_t *heap;
    char buf[256];
    int sock;

    util_log_set_level(STRATA_LOG_LEVEL_ERROR);
    if (other_user) {
        if (!become_nobody() || (sock = socket(AF_UNIX, SOCK_STREAM, 0)) < 0) {
            return 2;
        }
        while (connect(sock, (struct sockaddr *)&addr, len) != 0) {
            if (util_clock_now_ns() > deadline) {
                return 3;
            }
            usleep(10000);
        }
        return recv(sock, buf, sizeof(buf), 0) > 0 ? 1 : 0;
    }
    memcpy(p.secret, test_secret, sizeof(p.secret));
    p.secret[0] ^= 1;
    if (intra_heap_create(&p, &heap) == STRATA_OK) {
        intra_heap_destroy(heap);
        return 1;
    }
    return 0;
}

/* Rank 0 of 2 that must see exactly one refusal naming reason; exit code 0 when it did. */
static int watched_root(const char *key, const char *reason)
{
    int code;

    util_log_set_level(STRATA_LOG_LEVEL_WARN);
    util_log_set_handler(count_refusals, NULL);
    code = rank_main(0, 2, key);
    if (code != 0) {
        return code;
    }
    if (refusals != 1 || strstr(refusal_line, reason) == NULL) {
        fprintf(stderr, "rank 0 logged %d refusals, the last: %s\n", refusals, refusal_line);
        return 30;
    }
    return 0;
}

static pid_t spawn(int (*fn)(const char *, bool), const char *key, bool flag)
{
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(30);
        _exit(fn(key, flag));
    }
    return pid;
}

static int exit_code(pid_t pid)
{
    int status;

    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int root_refusing_other_user(const char *key, bool unused)
{
    (void)unused;
    return watched_root(key, "another user");
}

static int root_refusing_no_secret(const char *key, bool unused)
{
    (void)unused;
    return watched_root(key, "secret");
}

static int real_rank_1(const char *key, bool unused)
{
    (void)unused;
    return rank_main(1, 2, key);
}

/* The intruder reaches rank 0 first and is kept out; the real rank 1 then gets in. */
static void run_intruder_first(bool other_user)
{
    char key[64];
    pid_t root, intruder, rank1;
    int code;

    snprintf(key, sizeof(key), "test-intruder-%d-%d", (int)getpid(), other_user);
    root = spawn(other_user ? root_refusing_other_user : root_refusing_no_secret, key, false);
    intruder = spawn(intruder_main, key, other_user);
    code     = exit_code(intruder); /* refused before the real rank starts */
    rank1    = spawn(real_rank_1, key, false);
    if (code != 0) {
        fail_msg("the intruder (%s) %s (code %d)", other_user ? "another user" : "no secret",
                 code == 1 ? "got something from rank 0" : "could not be set up", code);
    }
    code = exit_code(rank1);
    if (code != 0) {
        fail_msg("the real rank 1 ended with code %d after the intruder", code);
    }
    code = exit_code(root);
    if (code != 0) {
        fail_msg("rank 0 ended with code %d (30: the refusal was not logged)", code);
    }
}

/* Eight connections to the rendezvous that never say anything (any process of the user
 * can open them); exits 0 after holding them a while. */
static int idler_main(const char *key, bool unused)
{
    struct sockaddr_un addr;
    socklen_t len = rendezvous(key, &addr);
    uint64_t deadline = util_clock_now_ns() + WAIT_NS;
    int socks[8];

    (void)unused;
    for (int i = 0; i < 8; ++i) {
        socks[i] = socket(AF_UNIX, SOCK_STREAM, 0);
        while (socks[i] < 0 || connect(socks[i], (struct sockaddr *)&addr, len) != 0) {
            if (util_clock_now_ns() > deadline) {
                return 3;
            }
            usleep(10000);
        }
    }
    sleep(6);
    return 0;
}

static int plain_root(const char *key, bool unused)
{
    (void)unused;
    return rank_main(0, 2, key);
}

/* Idle connections queued before local rank 1's: its handshake runs beside theirs (each
 * waits 2 s at most, on its own), so it joins at once; one after the other, eight of them
 * held it for 16 s, past its own wait. */
static void test_idle_connections_hold_nobody_up(void **state)
{
    char key[64];
    pid_t root, idler, rank1;
    uint64_t start;
    int code;

    (void)state;
    snprintf(key, sizeof(key), "test-idle-%d", (int)getpid());
    root  = spawn(plain_root, key, false);
    idler = spawn(idler_main, key, false);
    usleep(500000); /* the idle connections are in by now */
    start = util_clock_now_ns();
    rank1 = spawn(real_rank_1, key, false);
    code  = exit_code(rank1);
    if (code != 0 || util_clock_now_ns() - start > 4 * UTIL_NSEC_PER_SEC) {
        fail_msg("local rank 1 ended with code %d after %.1f s behind 8 idle connections", code,
                 (double)(util_clock_now_ns() - start) / 1e9);
    }
    assert_int_equal(exit_code(root), 0);
    assert_int_equal(exit_code(idler), 0);
}

static void test_other_user_is_refused(void **state)
{
    (void)state;
    skip_unless_root();
    run_intruder_first(true);
}

static void test_wrong_secret_is_refused(void **state)
{
    (void)state;
    run_intruder_first(false);
}

/* Another user listens on the job's rendezvous name first and reports whether a rank gave it
 * anything: exit code 0 nothing, 1 bytes or a descriptor arrived. */
/* One message from sock into buf; -1 on error or end; *fd_seen_p: a descriptor came with it. */
static ssize_t recv_watching_fds(int sock, char *buf, size_t len, bool *fd_seen_p)
{
    union {
        struct cmsghdr hdr;
        char           space[CMSG_SPACE(sizeof(int) * 8)];
    } control;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = &control,
                         .msg_controllen = sizeof(control)};
    ssize_t got = recvmsg(sock, &msg, 0);

    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); got >= 0 && c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        *fd_seen_p = *fd_seen_p || c->cmsg_type == SCM_RIGHTS;
    }
    return got > 0 ? got : -1;
}

/*
 * A process that holds the job's rendezvous name first: another user's (other_user), or one
 * of the job's user without the object's secret, which sends a challenge, takes the rank's
 * proof and answers with a forged one. Exit code 0: the rank gave it nothing of its region
 * (no card, no descriptor); 1: it did.
 */
static int squatter_main(const char *key, bool other_user)
{
    struct sockaddr_un addr;
    socklen_t len = rendezvous(key, &addr);
    char buf[4096];
    bool fd_seen = false;
    int listener, sock;
    ssize_t got;

    listener = socket(AF_UNIX, SOCK_STREAM, 0);
    if ((other_user && !become_nobody()) || listener < 0 ||
        bind(listener, (struct sockaddr *)&addr, len) != 0 || listen(listener, 4) != 0) {
        return 2;
    }
    if (write(STDOUT_FILENO, "L", 1) != 1 || (sock = accept(listener, NULL, NULL)) < 0) {
        return 3;
    }
    /* A challenge as rank 0 sends it (magic "STHP", 4 bytes unused, a nonce of 32 bytes);
     * the rank may be gone already. */
    memset(buf, 0, 40);
    memcpy(buf, &(uint32_t){0x53544850u}, sizeof(uint32_t));
    (void)send(sock, buf, 40, MSG_NOSIGNAL);
    if (other_user) {
        return recv(sock, buf, sizeof(buf), 0) > 0 ? 1 : 0;
    }
    /* The rank's proof: its nonce and an HMAC, 72 bytes, and nothing of its region. */
    got = recv_watching_fds(sock, buf, 72, &fd_seen);
    if (got != 72 || fd_seen) {
        return 1;
    }
    memset(buf + 4, 0, 36); /* magic kept, a forged proof */
    (void)send(sock, buf, 40, MSG_NOSIGNAL);
    got = recv_watching_fds(sock, buf, sizeof(buf), &fd_seen);
    return got > 0 || fd_seen ? 1 : 0;
}

/* The rank refuses the squatter (STRATA_ERR_BOOTSTRAP) before giving it its region. */
static void run_squatter_first(bool other_user)
{
    intra_heap_params_t p = {.device = &host_device_ops, .local_rank = 1, .local_size = 2,
                             .size = 4096, .timeout_ns = WAIT_NS};
    int pipefd[2], saved, code;
    intra_heap_t *heap = NULL;
    char key[64], byte;
    pid_t squatter;

    util_log_set_level(STRATA_LOG_LEVEL_ERROR);
    snprintf(key, sizeof(key), "test-squatter-%d-%d", (int)getpid(), other_user);
    p.job_key = key;
    memcpy(p.secret, test_secret, sizeof(p.secret));
    assert_int_equal(pipe(pipefd), 0);
    saved = dup(STDOUT_FILENO);
    dup2(pipefd[1], STDOUT_FILENO); /* the squatter says "L" once it listens */
    squatter = spawn(squatter_main, key, other_user);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    close(pipefd[1]);
    assert_int_equal(read(pipefd[0], &byte, 1), 1);
    close(pipefd[0]);
    assert_int_equal(intra_heap_create(&p, &heap), STRATA_ERR_BOOTSTRAP);
    assert_null(heap);
    code = exit_code(squatter);
    if (code != 0) {
        fail_msg("the squatter (%s) ended with code %d (1: the rank gave it its card or "
                 "region)", other_user ? "another user" : "no secret", code);
    }
}

static void test_rendezvous_held_by_another_user(void **state)
{
    (void)state;
    skip_unless_root();
    run_squatter_first(true);
}

/* The same user's process without the secret, answering the rank's proof with a forged one:
 * the rank's card and region descriptor went out with its first answer before. */
static void test_rendezvous_held_without_the_secret(void **state)
{
    (void)state;
    run_squatter_first(false);
}

/* The cards a rank with the secret may send: each checked before the heap uses it (a bus id
 * goes to string functions, a rank indexes arrays, a size maps a region). */
static void test_cards_checked(void **state)
{
    const heap_card_t ours = {.rank = 0, .has_fd = 1, .size = 4096, .bus_id = ""};
    heap_card_t card = {.rank = 2, .has_fd = 1, .size = 4096, .bus_id = "0000:18:00.0"};
    heap_card_t cards[3] = {ours, ours, ours};

    (void)state;
    assert_null(heap_card_refusal(&card, &ours, 3, 1));
    assert_non_null(heap_card_refusal(&card, &ours, 2, 1)); /* no rank 2 on this node */
    assert_non_null(heap_card_refusal(&card, &ours, 3, 0)); /* its descriptor missing */
    card.size = 8192;
    assert_non_null(heap_card_refusal(&card, &ours, 3, 1));
    card.size = 4096;
    memset(card.bus_id, 'a', sizeof(card.bus_id)); /* no end */
    assert_non_null(heap_card_refusal(&card, &ours, 3, 1));

    cards[1].rank = 1;
    cards[2].rank = 2;
    assert_null(heap_cards_refusal(cards, 3, &ours));
    cards[2].rank = 1; /* in another rank's place */
    assert_non_null(heap_cards_refusal(cards, 3, &ours));
    cards[2].rank = 2;
    memset(cards[2].bus_id, 'b', sizeof(cards[2].bus_id));
    assert_non_null(heap_cards_refusal(cards, 3, &ours));
    cards[2].bus_id[0] = '\0';
    cards[1].has_fd    = 0;
    assert_non_null(heap_cards_refusal(cards, 3, &ours));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_connections_hold_nobody_up),
        cmocka_unit_test(test_other_user_is_refused),
        cmocka_unit_test(test_wrong_secret_is_refused),
        cmocka_unit_test(test_rendezvous_held_by_another_user),
        cmocka_unit_test(test_rendezvous_held_without_the_secret),
        cmocka_unit_test(test_cards_checked),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
