/*
 * Two ucx transports talking, one per process over tcp on loopback (test_ucx_transport.c):
 * a side opens its transport, swaps addresses with the other over a socket pair and posts
 * its receives; its completions are logged in order, to wait and count on.
 */
#ifndef STRATA_TESTS_UCX_PAIR_H
#define STRATA_TESTS_UCX_PAIR_H

#include "inter/transport.h"
#include "util/util.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include <cmocka.h>

extern const inter_transport_ops_t ucx_transport_ops;

#define OPS        (&ucx_transport_ops)
#define NUM_CTX    512
#define REGION     (64 * 1024)  /* the target's buffer holds NUM_WRITES regions */
#define NUM_WRITES 48
#define MSG_BYTES  4096
#define NUM_RX     16

/* Whether this process is the child of run_pair. */
extern bool g_child;

/* In the child a failed check exits 1 (the parent asserts on the exit status). */
#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, g_child ? "child" : "parent"); \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            if (g_child) {                                                                 \
                _exit(1);                                                                  \
            }                                                                              \
            fail();                                                                        \
        }                                                                                  \
    } while (0)

typedef struct ctx {
    _Alignas(64) char space[INTER_CONTEXT_SPACE];
    int id;
} ctx_t;

typedef struct side {
    inter_transport_t *tp;
    uint64_t           self, other;
    int                sock;
    ctx_t              ctx[NUM_CTX];
    char               rx[NUM_RX][MSG_BYTES];
    /* What poll brought, in order. */
    inter_cqe_t        cqes[4096];
    int                num_cqes;
    pthread_mutex_t    lock; /* where a poller thread fills cqes */
} side_t;

/* Write or read all of len bytes on the socket, or fail the check. */
void xwrite(int fd, const void *buf, size_t len);
void xread(int fd, void *buf, size_t len);
/* The transport's open params for one of the two ranks. */
inter_transport_params_t params_for(int rank, const char *iface, bool shared_memory);

/* Open, swap addresses over the socket, insert both (in rank order), post receives. */
void side_open(side_t *s, int rank, int sock);
void side_close(side_t *s);
/* Poll once into the log; returns how many came. */
int  side_poll(side_t *s);
/* Completions of kind and status in the log. */
int  side_count(side_t *s, inter_cqe_kind_t kind, strata_status_t status);
/* Poll until count completions of kind and status came, or seconds passed. */
bool side_wait(side_t *s, inter_cqe_kind_t kind, strata_status_t status, int count,
               double seconds);
/* Read one byte from the socket, progressing meanwhile (a peer's reads and rkey requests
 * need this side's progress, as the engine's proxy gives it). */
char side_read_byte(side_t *s);

/* Byte i of write number write, and the length of write number i. */
unsigned char pattern(int write, size_t i);
size_t        write_len(int i);

/* Runs fn in a child on one end of a socket pair, the parent's fn on the other. */
void run_pair(void (*parent_fn)(int sock), void (*child_fn)(int sock));

#endif
