/*
 * Run under strata-run: every rank bootstraps from the launcher's environment, creates a
 * communicator and checks the node and local-rank layout against what the launcher set.
 * With --die RANK, that rank exits after creation and the others must see the bootstrap
 * fail (not hang) and exit 0. With --stop-in-moe RANK, that rank stops (SIGSTOP) as the
 * others enter strata_moe_create, which must fail with STRATA_ERR_PEER_FAILED within the
 * engine's heartbeat bound, not at the bootstrap's timeout; rank 0 then kills the stopped
 * one. Then the point-to-point API: a write with immediate to the next rank, checked byte
 * for byte, a message, and a barrier. With --comm-first, a MoE object is then destroyed
 * after its communicator. Prints one line per rank.
 */
#include <strata/strata.h>

#include "common/log_capture.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "comm_check: " __VA_ARGS__); \
            fprintf(stderr, "\n"); \
            exit(1); \
        } \
    } while (0)

#define P2P_BYTES (256u * 1024)
#define P2P_LEN   200000u
#define P2P_IMM   11u
#define WAIT_MS   20000u

static unsigned char pattern(int rank, size_t i)
{
    return (unsigned char)((rank * 131 + i * 7 + (i >> 9)) & 0xff);
}

/* Write to the next rank, check what the previous one wrote, exchange a message. */
static void point_to_point(strata_comm_t *comm, strata_bootstrap_t *bs)
{
    int rank = strata_comm_rank(comm), size = strata_comm_size(comm);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    unsigned char *src = malloc(P2P_BYTES), *dst = calloc(1, P2P_BYTES), msg[64] = {0};
    strata_mem_desc_t mine, *all = calloc((size_t)size, sizeof(*all));
    strata_mem_t *src_mem, *dst_mem;
    strata_request_t *req, *recv;
    strata_status_t status;

    CHECK(src && dst && all, "memory");
    for (size_t i = 0; i < P2P_BYTES; ++i) {
        src[i] = pattern(rank, i);
    }
    CHECK(strata_mem_register(comm, src, P2P_BYTES, &src_mem) == STRATA_OK, "register src");
    CHECK(strata_mem_register(comm, dst, P2P_BYTES, &dst_mem) == STRATA_OK, "register dst");
    strata_mem_descriptor(dst_mem, &mine);
    CHECK(bs->allgather(bs->ctx, &mine, all, sizeof(mine)) == STRATA_OK, "descriptors");

    status = strata_write(comm, next, src_mem, 1000, &all[next], 3000, P2P_LEN, STRATA_WRITE_IMM,
                          P2P_IMM, &req);
    CHECK(status == STRATA_OK, "strata_write: %s", strata_status_string(status));
    status = strata_imm_wait(comm, P2P_IMM, strata_write_imm_count(comm, prev, P2P_LEN), prev,
                             WAIT_MS);
    CHECK(status == STRATA_OK, "strata_imm_wait: %s", strata_status_string(status));
    CHECK(strata_request_wait(req, WAIT_MS) == STRATA_OK, "write completion");
    strata_request_free(req);
    for (size_t i = 0; i < P2P_LEN; ++i) {
        CHECK(dst[3000 + i] == pattern(prev, 1000 + i), "byte %zu from rank %d", i, prev);
    }
    CHECK(dst[2999] == 0 && dst[3000 + P2P_LEN] == 0, "write spilled outside its range");
    log_capture_start();
    CHECK(strata_write(comm, size, src_mem, 0, &all[0], 0, 8, 0, 0, &req) == STRATA_ERR_INVALID,
          "unknown peer accepted");
    log_capture_stop();
    CHECK(log_captured("engine: unknown peer", "(ranks are 0..", NULL),
          "the refusal of an unknown peer did not say so");

    CHECK(strata_recv(comm, prev, msg, sizeof(msg), &recv) == STRATA_OK, "recv");
    CHECK(strata_send(comm, next, &rank, sizeof(rank), &req) == STRATA_OK, "send");
    CHECK(strata_request_wait(recv, WAIT_MS) == STRATA_OK, "recv completion");
    CHECK(strata_request_length(recv) == sizeof(int) && *(int *)msg == prev &&
              strata_request_source(recv) == prev, "message");
    CHECK(strata_request_wait(req, WAIT_MS) == STRATA_OK, "send completion");
    strata_request_free(req);
    strata_request_free(recv);

    CHECK(strata_barrier(comm, WAIT_MS) == STRATA_OK, "barrier");
    strata_mem_deregister(comm, src_mem);
    strata_mem_deregister(comm, dst_mem);
    free(src);
    free(dst);
    free(all);
}

/* A MoE object with peers on other nodes (its network buffers registered with the engine),
 * destroyed after its communicator: the object must keep what it runs on. */
static void comm_destroyed_first(strata_comm_t *comm, strata_bootstrap_t *bs)
{
    strata_moe_params_t p = {.num_experts = 2 * strata_comm_size(comm), .topk = 2, .hidden = 64,
                             .dtype = STRATA_DTYPE_FP32, .combine_dtype = STRATA_DTYPE_FP32,
                             .max_tokens = 4, .mode = STRATA_MOE_MODE_PUSH};
    strata_moe_t *moe = NULL;
    strata_status_t status = strata_moe_create(comm, &p, &moe);

    CHECK(status == STRATA_OK, "moe_create: %s", strata_status_string(status));
    CHECK(bs->barrier(bs->ctx) == STRATA_OK, "barrier");
    log_capture_start();
    strata_comm_destroy(comm);
    log_capture_stop();
    CHECK(log_captured("destroyed with 1 MoE object alive", NULL, NULL), "no warning");
    strata_moe_destroy(moe);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One rank stops while the others create an MoE object: they must give up early. */
static void stop_in_moe(strata_comm_t *comm, strata_bootstrap_t *bs, int stopped)
{
    strata_moe_params_t params = {.num_experts = 2 * strata_comm_size(comm), .topk = 2,
                                  .hidden = 128, .dtype = STRATA_DTYPE_FP32,
                                  .combine_dtype = STRATA_DTYPE_FP32, .max_tokens = 16};
    int rank = strata_comm_rank(comm), size = strata_comm_size(comm);
    int *pids = calloc((size_t)size, sizeof(int)), pid = (int)getpid();
    strata_status_t status;
    strata_moe_t *moe = NULL;
    double start;

    CHECK(bs->allgather(bs->ctx, &pid, pids, sizeof(pid)) == STRATA_OK, "pid exchange");
    if (rank == stopped) {
        raise(SIGSTOP); /* rank 0 kills it once the others have given up */
        CHECK(0, "rank %d was continued", rank);
    }
    start  = now_s();
    status = strata_moe_create(comm, &params, &moe);
    CHECK(status == STRATA_ERR_PEER_FAILED, "strata_moe_create with rank %d stopped: %s",
          stopped, strata_status_string(status));
    printf("rank %d saw rank %d stop: %s after %.1f s\n", rank, stopped,
           strata_status_string(status), now_s() - start);
    if (rank == 0) {
        kill((pid_t)pids[stopped], SIGKILL);
    }
    free(pids);
}

static int env_int(const char *name)
{
    const char *value = getenv(name);

    CHECK(value != NULL, "%s is not set", name);
    return atoi(value);
}

int main(int argc, char **argv)
{
    int die = (argc == 3 && strcmp(argv[1], "--die") == 0) ? atoi(argv[2]) : -1;
    bool comm_first = argc == 2 && strcmp(argv[1], "--comm-first") == 0;
    int stop = (argc == 3 && strcmp(argv[1], "--stop-in-moe") == 0) ? atoi(argv[2]) : -1;
    strata_bootstrap_t *bs;
    strata_comm_t *comm;
    strata_status_t status;
    int rank, size, local_size, expect_nodes, *all;

    status = strata_bootstrap_from_env(&bs);
    CHECK(status == STRATA_OK, "bootstrap: %s", strata_status_string(status));
    status = strata_comm_create(NULL, bs, &comm);
    CHECK(status == STRATA_OK, "comm_create: %s", strata_status_string(status));

    rank       = strata_comm_rank(comm);
    size       = strata_comm_size(comm);
    local_size = env_int("LOCAL_WORLD_SIZE");
    expect_nodes = getenv("STRATA_NODE_NAME") ? size / local_size : 1;
    CHECK(rank == env_int("RANK") && size == env_int("WORLD_SIZE"), "rank %d of %d", rank, size);
    CHECK(strata_comm_num_nodes(comm) == expect_nodes, "%d nodes, expected %d",
          strata_comm_num_nodes(comm), expect_nodes);
    if (expect_nodes > 1) {
        CHECK(strata_comm_local_rank(comm) == env_int("LOCAL_RANK"), "local rank %d",
              strata_comm_local_rank(comm));
        CHECK(strata_comm_local_size(comm) == local_size, "local size %d",
              strata_comm_local_size(comm));
        CHECK(strata_comm_node(comm) == rank / local_size, "node %d", strata_comm_node(comm));
    }
    CHECK(strata_comm_node_rank(comm, strata_comm_node(comm), strata_comm_local_rank(comm)) ==
              rank, "node_rank does not map back");

    if (stop >= 0) {
        stop_in_moe(comm, bs, stop);
        strata_comm_destroy(comm);
        strata_bootstrap_destroy(bs);
        return 0;
    }
    if (rank == die) {
        _exit(3); /* gone without a word, as a crashed rank is */
    }
    all = calloc((size_t)size, sizeof(int));
    status = bs->allgather(bs->ctx, &rank, all, sizeof(int));
    if (die >= 0) {
        CHECK(status != STRATA_OK, "allgather succeeded although rank %d died", die);
        printf("rank %d saw rank %d's death: %s\n", rank, die, strata_status_string(status));
    } else {
        CHECK(status == STRATA_OK, "allgather: %s", strata_status_string(status));
        for (int r = 0; r < size; ++r) {
            CHECK(all[r] == r, "allgather slot %d holds %d", r, all[r]);
        }
        point_to_point(comm, bs);
        printf("rank %d of %d: node %d of %d, local rank %d of %d, device %s, transport %s\n",
               rank, size, strata_comm_node(comm), strata_comm_num_nodes(comm),
               strata_comm_local_rank(comm), strata_comm_local_size(comm),
               strata_comm_device_backend(comm), strata_comm_transport(comm));
    }
    free(all);
    if (comm_first) {
        comm_destroyed_first(comm, bs);
        printf("rank %d: MoE object destroyed after its communicator\n", rank);
        comm = NULL;
    }
    strata_comm_destroy(comm);
    strata_bootstrap_destroy(bs);
    return 0;
}
