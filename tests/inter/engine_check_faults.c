/*
 * The engine check's faults: a peer killed mid-transfer, ranks quiet for longer than the
 * peer timeout, and STRATA_INTER_SHARED_MEMORY=no honoured or refused.
 */
#include "inter/engine_check.h"

/* Rank `victim` dies while the others write to it and wait on its writes. */
int kill_test(int victim)
{
    inter_engine_params_t params;
    uint64_t start, elapsed, bound;
    inter_request_t *req;
    strata_status_t status;
    int written = 0;

    /* The bound: the configured peer timeout, plus slack for a loaded 2-core machine. */
    CHECK(inter_engine_params_from_env(&params) == STRATA_OK, "params");
    bound = params.peer_timeout_ns + 4 * UTIL_NSEC_PER_SEC;
    CHECK(inter_engine_barrier(g_engine, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, g_world, WAIT_NS) ==
              STRATA_OK, "barrier before the kill");
    if (g_rank == victim) {
        usleep(200000);
        _exit(9); /* mid-transfer, no goodbye */
    }
    start = util_clock_now_ns();
    for (;;) {
        status = inter_engine_write(g_engine, victim, g_src_mr, 0, &g_dst_desc[victim],
                                    (size_t)g_rank * SLOT, SLOT, true, 300, &req);
        if (status == STRATA_ERR_PEER_FAILED) {
            break;
        }
        CHECK(status == STRATA_OK, "write to the victim: %s", strata_status_string(status));
        status = inter_request_wait(req, WAIT_NS);
        inter_request_free(req);
        if (status == STRATA_ERR_PEER_FAILED) {
            break;
        }
        CHECK(status == STRATA_OK, "write to the victim ended %s", strata_status_string(status));
        ++written;
        CHECK(util_clock_now_ns() - start < WAIT_NS, "never noticed the death");
    }
    status = inter_engine_imm_wait(g_engine, 301, 1, victim, WAIT_NS);
    CHECK(status == STRATA_ERR_PEER_FAILED, "wait on the dead: %s", strata_status_string(status));
    elapsed = util_clock_now_ns() - start;
    CHECK(elapsed < bound, "took %.2f s to notice", (double)elapsed / 1e9);
    printf("rank %d: peer %d failed after %d writes, noticed in %.2f s\n", g_rank, victim,
           written, (double)elapsed / 1e9);
    return 0;
}

/* Every rank stays quiet for 2.5 peer timeouts: only heartbeats keep the others from
 * failing it. Then every peer must be alive and a round of writes must go through. */
int idle_test(void)
{
    inter_engine_params_t params;

    CHECK(inter_engine_params_from_env(&params) == STRATA_OK, "params");
    CHECK(inter_engine_barrier(g_engine, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, g_world, WAIT_NS) ==
              STRATA_OK, "barrier before the quiet");
    usleep((useconds_t)(params.peer_timeout_ns * 5 / 2 / 1000));
    for (int p = 0; p < g_world; ++p) {
        CHECK(!inter_engine_peer_failed(g_engine, p), "peer %d failed while all were quiet", p);
    }
    round_write(0);
    printf("rank %d: every peer alive after %.1f s of quiet, heartbeats on\n", g_rank,
           (double)params.peer_timeout_ns * 2.5 / 1e9);
    return 0;
}

/* STRATA_INTER_SHARED_MEMORY=no: libfabric 1.21 headers offer the option (the shm
 * provider itself never can); elsewhere creation must refuse, not ignore it. UCX always
 * can (it leaves out its shared-memory transports), unless STRATA_UCX_TLS names one. */
int forbid_shm_test(void)
{
    inter_engine_params_t params;
    inter_engine_t *engine = NULL;
    const char *provider = getenv("STRATA_INTER_PROVIDER") ? getenv("STRATA_INTER_PROVIDER")
                                                           : "auto";
    const char *tls = getenv("STRATA_UCX_TLS") ? getenv("STRATA_UCX_TLS") : "";
    strata_status_t status, refused = STRATA_ERR_UNSUPPORTED;
    bool can;

    CHECK(inter_engine_params_from_env(&params) == STRATA_OK, "params");
    CHECK(params.forbid_shared_memory, "run with STRATA_INTER_SHARED_MEMORY=no");
    params.rank       = g_rank;
    params.world_size = g_world;
    can    = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION) >= FI_VERSION(1, 21) &&
             strcmp(provider, "shm") != 0;
    if (strcmp(params.transport, "ucx") == 0) {
        provider = "ucx";
        can      = tls[0] == '^' || (strstr(tls, "posix") == NULL && strstr(tls, "sysv") == NULL &&
                                     strstr(tls, "cma") == NULL && strstr(tls, "shm") == NULL);
        refused  = STRATA_ERR_CONFIG; /* a setting that contradicts another */
    }
    status = inter_engine_create(&params, &engine);
    CHECK(can ? status == STRATA_OK : status == refused,
          "forbidding shared memory over %s (libfabric headers %d.%d): %s", provider,
          FI_MAJOR_VERSION, FI_MINOR_VERSION, strata_status_string(status));
    if (engine != NULL && strcmp(provider, "ucx") == 0) {
        /* Network transports only: the name lists what UCX uses. */
        const char *name = inter_engine_transport_name(engine);

        CHECK(strstr(name, "posix") == NULL && strstr(name, "sysv") == NULL &&
              strstr(name, "cma") == NULL, "shared memory forbidden, yet %s", name);
    }
    inter_engine_destroy(engine);
    printf("rank %d: shared memory %s over %s, as expected\n", g_rank,
           can ? "forbidden" : "cannot be forbidden: creation refused", provider);
    return 0;
}
