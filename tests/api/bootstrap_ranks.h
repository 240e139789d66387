/*
 * The bootstrap tests' jobs: a free port on loopback, and a function run as every rank of a
 * job in child processes (each bounded by an alarm), their exit codes collected.
 */
#ifndef STRATA_TESTS_API_BOOTSTRAP_RANKS_H
#define STRATA_TESTS_API_BOOTSTRAP_RANKS_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

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

#endif
