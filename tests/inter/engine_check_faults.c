/*
 * The engine check's faults: a peer killed mid-transfer, ranks quiet for longer than the
 * peer timeout, STRATA_INTER_SHARED_MEMORY=no honoured or refused, and engines destroyed
 * as soon as a barrier returns.
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

/* What the leaving test counts in the library's log, from any thread. */
static struct {
    pthread_mutex_t lock;
    int             unanswered; /* destroys that gave up waiting for answers */
    int             peer_lines; /* warnings about a peer */
    char            first[512];
} g_leave_log = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void leave_log(strata_log_level_t level, const char *line, void *arg)
{
    bool unanswered = strstr(line, "yet to answer") != NULL;
    bool peer_line  = level <= STRATA_LOG_LEVEL_WARN && strstr(line, "peer") != NULL &&
                     strstr(line, "has left") == NULL;

    (void)arg;
    if (unanswered || peer_line) {
        pthread_mutex_lock(&g_leave_log.lock);
        g_leave_log.unanswered += unanswered;
        g_leave_log.peer_lines += peer_line;
        if (g_leave_log.first[0] == '\0') {
            snprintf(g_leave_log.first, sizeof(g_leave_log.first), "%s", line);
        }
        pthread_mutex_unlock(&g_leave_log.lock);
    }
    if (level <= STRATA_LOG_LEVEL_WARN) {
        fprintf(stderr, "%s\n", line);
    }
}

/* Whether every other rank said it is leaving, waiting up to bound_ns. */
static bool peers_left(uint64_t bound_ns)
{
    uint64_t deadline = util_clock_now_ns() + bound_ns;

    for (int p = 0; p < g_world; ++p) {
        while (p != g_rank && !inter_engine_peer_left(g_engine, p)) {
            if (util_clock_now_ns() > deadline) {
                return false;
            }
            usleep(1000);
        }
    }
    return true;
}

/* Rank 0, whose peers left: a barrier with them fails at once, not at the peer timeout, and
 * once they are silent past the timeout they are failed, without a warning. */
static void stay_after_peers_left(void)
{
    inter_engine_params_t params;
    strata_status_t status;
    uint64_t start, took;

    CHECK(inter_engine_params_from_env(&params) == STRATA_OK, "params");
    CHECK(peers_left(WAIT_NS), "rank 0 did not hear every peer leave");
    start  = util_clock_now_ns();
    status = inter_engine_barrier(g_engine, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, g_world, WAIT_NS);
    took   = util_clock_now_ns() - start;
    CHECK(status == STRATA_ERR_PEER_FAILED && took < UTIL_NSEC_PER_SEC,
          "a barrier with peers that left: %s after %.0f ms", strata_status_string(status),
          (double)took / 1e6);
    usleep((useconds_t)(params.peer_timeout_ns * 3 / 2 / 1000));
    for (int p = 1; p < g_world; ++p) {
        CHECK(inter_engine_peer_failed(g_engine, p), "peer %d, silent past the peer timeout "
              "after it left, is not failed", p);
    }
}

/*
 * `times` engines in turn, each destroyed as soon as a barrier over every rank returns: the
 * others must still see that barrier complete (the destroy waits until they have read what
 * it sent); the destroys that waited out their bound for the peers' answers are counted
 * (none over a transport that delivers what it was given before the close). Then one more,
 * which every rank but 0 leaves after the barrier while rank 0 stays (its answers end
 * their waits): see stay_after_peers_left. No warning names a peer throughout.
 */
int leave_test(int times)
{
    strata_status_t status;

    util_log_set_level(STRATA_LOG_LEVEL_INFO); /* the destroys' "yet to answer" lines */
    util_log_set_handler(leave_log, NULL);
    for (int i = 0; i <= times; ++i) {
        connect_engine();
        status = inter_engine_barrier(g_engine, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, g_world, WAIT_NS);
        CHECK(status == STRATA_OK, "engine %d: the barrier before its destroy: %s", i,
              strata_status_string(status));
        if (i == times && g_rank == 0) {
            stay_after_peers_left();
        }
        inter_engine_destroy(g_engine);
    }
    util_log_set_handler(NULL, NULL);
    CHECK(g_leave_log.peer_lines == 0, "%d warnings named a peer; the first: %s",
          g_leave_log.peer_lines, g_leave_log.first);
    printf("rank %d: left %d engines as soon as a barrier returned, every barrier complete, "
           "%d destroys waited out the bound for answers%s\n", g_rank, times + 1,
           g_leave_log.unanswered,
           g_rank == 0 ? "; peers that left refused at once, failed quietly later" : "");
    return 0;
}
