/*
 * The engine check's faults: a peer killed mid-transfer, ranks quiet for longer than the
 * peer timeout, and STRATA_INTER_SHARED_MEMORY=no honoured or refused.
 */
#include "inter/engine_check.h"

#include <dirent.h>

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
    fflush(stdout); /* seen even where the teardown or exit after it hangs */
    return 0;
}

/* Every rank stays quiet for 2.5 peer timeouts: only heartbeats keep the others from
 * failing it. Then every peer must be alive and a round of writes must go through. */
/* CPU seconds the engine's progress thread has used (from /proc), or -1 if none is found. */
static double progress_thread_cpu(void)
{
    DIR *tasks = opendir("/proc/self/task");
    struct dirent *entry;
    double seconds = -1;

    while (tasks != NULL && seconds < 0 && (entry = readdir(tasks)) != NULL) {
        char path[300], comm[32] = "", stat[1024];
        unsigned long utime, stime;
        FILE *file;

        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", entry->d_name);
        if ((file = fopen(path, "r")) == NULL) {
            continue;
        }
        if (fgets(comm, sizeof(comm), file) == NULL) {
            comm[0] = '\0';
        }
        fclose(file);
        if (strncmp(comm, INTER_PROGRESS_THREAD_NAME, strlen(INTER_PROGRESS_THREAD_NAME)) != 0) {
            continue;
        }
        snprintf(path, sizeof(path), "/proc/self/task/%s/stat", entry->d_name);
        if ((file = fopen(path, "r")) != NULL && fgets(stat, sizeof(stat), file) != NULL &&
            strrchr(stat, ')') != NULL &&
            sscanf(strrchr(stat, ')') + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                   &utime, &stime) == 2) {
            seconds = (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
        }
        if (file != NULL) {
            fclose(file);
        }
    }
    if (tasks != NULL) {
        closedir(tasks);
    }
    return seconds;
}

/* Quiet for 2.5 peer timeouts: heartbeats must keep every peer alive. With caller
 * progress, nothing waits meanwhile, so the progress thread must have only beaten: it may
 * use a few percent of one core at most (a polling one would take most of it). */
int idle_test(void)
{
    inter_engine_params_t params;
    double cpu_before, cpu_used, quiet;

    CHECK(inter_engine_params_from_env(&params) == STRATA_OK, "params");
    CHECK(inter_engine_barrier(g_engine, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, g_world, WAIT_NS) ==
              STRATA_OK, "barrier before the quiet");
    quiet      = (double)params.peer_timeout_ns * 2.5 / 1e9;
    cpu_before = progress_thread_cpu();
    CHECK(cpu_before >= 0, "no thread named %s", INTER_PROGRESS_THREAD_NAME);
    usleep((useconds_t)(quiet * 1e6));
    cpu_used = progress_thread_cpu() - cpu_before;
    for (int p = 0; p < g_world; ++p) {
        CHECK(!inter_engine_peer_failed(g_engine, p), "peer %d failed while all were quiet", p);
    }
    if (inter_engine_caller_progress(g_engine)) {
        CHECK(cpu_used < 0.05 * quiet, "caller progress: the progress thread used %.2f s of "
              "CPU in %.1f s of quiet", cpu_used, quiet);
    }
    round_write(0);
    /* No rank leaves before every rank has made its last check of the round: a peer gone
     * fails the waits of those still checking. */
    CHECK(inter_engine_barrier(g_engine, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, g_world, WAIT_NS) ==
              STRATA_OK, "barrier after the round");
    printf("rank %d: every peer alive after %.1f s of quiet, heartbeats on, progress by %s "
           "(its thread used %.2f s of CPU)\n", g_rank, quiet,
           inter_engine_caller_progress(g_engine) ? "the caller" : "a thread", cpu_used);
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
