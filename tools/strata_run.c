/*
 * strata-run: a local launcher for development and tests. Starts N ranks with the launcher
 * variables strata_bootstrap_from_env reads, optionally spread over K simulated nodes
 * (network namespaces) whose links it may shape (strata_run_link.c), forwards their output
 * with a rank prefix, stops the whole job when a rank fails or the time limit passes, and
 * always removes the namespaces it made.
 * Production jobs use Slurm, mpirun or torchrun.
 */
#include "strata_run.h"
#include "tool_cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define RUN_MAX_RANKS     256
#define RUN_GRACE_SECONDS 3
#define RUN_TOOL            "strata-run"
#define RUN_DEFAULT_TIMEOUT 300.0
#define RUN_MIN_TIMEOUT     0.001
#define RUN_MAX_TIMEOUT     1e7
#define RUN_EXIT_SETUP    3
#define RUN_EXIT_TIMEOUT  124

typedef struct run_rank {
    pid_t        pid;     /* also its process group */
    bool         running;
    bool         may_fail; /* --allow-fail: its failure neither counts nor stops the job */
    int          status;  /* exit code, or 128 + signal */
    run_stream_t streams[2];
} run_rank_t;

typedef struct run_job {
    int         num_ranks;
    int         num_nodes;  /* 0: no namespaces */
    double      timeout;
    char      **argv;
    run_rank_t  ranks[RUN_MAX_RANKS];
    run_netns_t netns;
    run_link_t  link;
    uint16_t    port;
} run_job_t;

static volatile sig_atomic_t run_signal;

static void run_on_signal(int sig)
{
    run_signal = sig;
}

static double run_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: strata-run -n N [--nodes K [--link-rate R [--link-delay T]]]\n"
            "                  [--timeout SEC] [--allow-fail RANK]... -- CMD [ARG]...\n"
            "       strata-run --cleanup\n"
            "       strata-run -h | -V\n"
            "Start N ranks of CMD on this machine with RANK, WORLD_SIZE, LOCAL_RANK,\n"
            "LOCAL_WORLD_SIZE, STRATA_BOOTSTRAP_ADDR and STRATA_BOOTSTRAP_PORT set (and, with\n"
            "--link-rate, STRATA_RUN_LINK_RATE: the rate in bit/s).\n"
            "\n"
            "  -n, --ranks N        ranks to start (1..%d)\n"
            "  -k, --nodes K        simulate K nodes (1..%d, dividing N) as network namespaces\n"
            "                       joined by veth pairs (198.18.0.0/15 addresses inside them;\n"
            "                       needs root); ranks are spread in blocks,\n"
            "                       STRATA_NODE_NAME=node<k>\n"
            "      --link-rate R    shape both directions of every node's link with tc, R in\n"
            "                       tc's units (100mbit, 1gbit; 1mbit..100gbit): a token bucket\n"
            "                       (tbf) on eth0 in the node and on n<k> in the hub, burst 1 ms\n"
            "                       and a drop-tail queue of 20 ms at R (16 KiB..1 MiB and\n"
            "                       64 KiB..32 MiB); needs --nodes and tc (iproute2)\n"
            "      --link-delay T   also delay each direction of every link by T with netem\n"
            "                       (500us, 2ms; up to 1s; the token bucket under it): a path\n"
            "                       between two nodes crosses two links, 2 T one way; needs\n"
            "                       --link-rate and a kernel with sch_netem\n"
            "  -t, --timeout SEC    stop the job after SEC seconds (default %g), exit 124\n"
            "  -a, --allow-fail R   rank R may fail (e.g. a test kills it) without stopping the job;\n"
            "                       once the other ranks end, it is stopped (all ranks allowed\n"
            "                       to fail: the job waits for every one)\n"
            "      --cleanup        start nothing: remove what ranks of any launcher that died\n"
            "                       left in /dev/shm (libfabric shm's regions, named\n"
            "                       <pid>:...), only where that process is gone and the file\n"
            "                       is this user's (root: anyone's); strata-run does this for\n"
            "                       its own ranks after every job\n"
            "  -h, --help           this text\n"
            "  -V, --version        strata-run's version (it links no libstrata: strata-info\n"
            "                       shows the library's build options)\n"
            "\n"
            "Output lines are prefixed with [r<rank>]. Where strata-run's stderr is a terminal,\n"
            "rank 0's is one too (a pseudo-terminal), so a line it redraws in place (a tool's\n"
            "progress line) shows there after its prefix.\n"
            "\n"
            "When a rank fails, the others are stopped (SIGTERM, then SIGKILL after %d s).\n"
            "Exit status: 0 when every rank succeeded, else the first failure's (128+signal\n"
            "for a signal, 127 when CMD cannot be run), 124 on timeout, 2 bad usage, 3 the job\n"
            "could not be set up (namespaces, links, a port).\n"
            "Shared-memory files the ranks left in /dev/shm (libfabric's shm, named after their\n"
            "pids) go too.\n"
            "\n"
            "With --link-rate, the queue of every hub port (the traffic into a node, where an\n"
            "incast waits) is read every 10 ms while the job runs, and one line per node\n"
            "follows the job's output:\n"
            "  strata-run: link n<k>: rate R, delay T, mean backlog M bytes, max backlog B bytes\n"
            "    (P packets), drops D\n"
            "M is the mean of the samples, B the largest, P the packets queued then, D the\n"
            "packets the queue dropped over the job.\n",
            RUN_MAX_RANKS, RUN_MAX_NODES, RUN_DEFAULT_TIMEOUT, RUN_GRACE_SECONDS);
}

/* A TCP port free on this machine now; inside fresh namespaces every port is free. */
static uint16_t run_pick_port(void)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(addr);
    uint16_t port = 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd >= 0 && bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 &&
        getsockname(fd, (struct sockaddr *)&addr, &len) == 0) {
        port = ntohs(addr.sin_port);
    }
    if (fd >= 0) {
        close(fd);
    }
    return port;
}

static int run_node_of(const run_job_t *job, int rank)
{
    int per_node = job->num_ranks / (job->num_nodes ? job->num_nodes : 1);

    return rank / per_node;
}

static void run_set_env(const run_job_t *job, int rank)
{
    int nodes = job->num_nodes ? job->num_nodes : 1;
    int per_node = job->num_ranks / nodes, node = run_node_of(job, rank);
    char value[64];

    snprintf(value, sizeof(value), "%d", rank);
    setenv("RANK", value, 1);
    snprintf(value, sizeof(value), "%d", job->num_ranks);
    setenv("WORLD_SIZE", value, 1);
    snprintf(value, sizeof(value), "%d", rank % per_node);
    setenv("LOCAL_RANK", value, 1);
    snprintf(value, sizeof(value), "%d", per_node);
    setenv("LOCAL_WORLD_SIZE", value, 1);
    setenv("STRATA_BOOTSTRAP_ADDR", job->num_nodes ? job->netns.addr[0] : "127.0.0.1", 1);
    snprintf(value, sizeof(value), "%u", job->port);
    setenv("STRATA_BOOTSTRAP_PORT", value, 1);
    if (job->num_nodes) {
        snprintf(value, sizeof(value), "node%d", node);
        setenv("STRATA_NODE_NAME", value, 1);
    }
    if (job->link.rate_bps > 0) { /* what a benchmark sets its steps against */
        snprintf(value, sizeof(value), "%llu", (unsigned long long)job->link.rate_bps);
        setenv("STRATA_RUN_LINK_RATE", value, 1);
    }
}

/* Variables of other launchers that strata_bootstrap_from_env would read before ours (or
 * instead of them: Slurm's local id where torchrun's rank is ours). */
static const char *const run_foreign_vars[] = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID",
    "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "PMIX_RANK",
};

/* In the child: join the node, wire the pipes, become a process group, exec. */
static void run_child(const run_job_t *job, int rank, int out_pipe[2], int err_pipe[2],
                      pid_t launcher)
{
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

    setpgid(0, 0);
    /* Die with the launcher, even if it is killed outright; it may already be gone. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) {
        _exit(RUN_EXIT_SETUP);
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL); /* the launcher ignores it; exec would keep that */
    if (devnull >= 0) {
        dup2(devnull, STDIN_FILENO); /* a background group reading the terminal would stop */
    }
    for (size_t i = 0; i < sizeof(run_foreign_vars) / sizeof(run_foreign_vars[0]); ++i) {
        unsetenv(run_foreign_vars[i]);
    }
    if (job->num_nodes && !run_netns_enter(&job->netns, run_node_of(job, rank))) {
        fprintf(stderr, "strata-run: rank %d cannot enter its node's namespace: %s\n", rank,
                strerror(errno));
        _exit(RUN_EXIT_SETUP);
    }
    run_set_env(job, rank);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    close(out_pipe[0]);
    close(out_pipe[1]);
    close(err_pipe[0]);
    close(err_pipe[1]);
    execvp(job->argv[0], job->argv);
    fprintf(stderr, "strata-run: cannot run %s: %s\n", job->argv[0], strerror(errno));
    _exit(127);
}

static bool run_start_rank(run_job_t *job, int rank)
{
    run_rank_t *r = &job->ranks[rank];
    int out_pipe[2], err_pipe[2];
    bool err_tty;
    pid_t launcher;

    if (pipe2(out_pipe, O_CLOEXEC) != 0) {
        return false;
    }
    err_tty = rank == 0 && isatty(STDERR_FILENO) && run_open_tty(err_pipe);
    if (!err_tty && pipe2(err_pipe, O_CLOEXEC) != 0) {
        close(out_pipe[0]);
        close(out_pipe[1]);
        return false;
    }
    fflush(NULL);
    launcher = getpid();
    r->pid   = fork();
    if (r->pid < 0) {
        close(out_pipe[0]);
        close(out_pipe[1]);
        close(err_pipe[0]);
        close(err_pipe[1]);
        return false;
    }
    if (r->pid == 0) {
        run_child(job, rank, out_pipe, err_pipe, launcher);
    }
    setpgid(r->pid, r->pid); /* also here, so a kill before the child runs still finds it */
    close(out_pipe[1]);
    close(err_pipe[1]);
    r->running    = true;
    r->streams[0] = (run_stream_t){.fd = out_pipe[0], .out = stdout};
    r->streams[1] = (run_stream_t){.fd = err_pipe[0], .out = stderr, .tty = err_tty};
    return true;
}

static void run_pump_output(run_job_t *job, int timeout_ms)
{
    struct pollfd pfds[RUN_MAX_RANKS * 2];
    run_stream_t *owners[RUN_MAX_RANKS * 2];
    int ranks[RUN_MAX_RANKS * 2], n = 0;

    for (int r = 0; r < job->num_ranks; ++r) {
        for (int s = 0; s < 2; ++s) {
            if (job->ranks[r].streams[s].fd >= 0) {
                pfds[n]   = (struct pollfd){.fd = job->ranks[r].streams[s].fd, .events = POLLIN};
                owners[n] = &job->ranks[r].streams[s];
                ranks[n++] = r;
            }
        }
    }
    if (n == 0) {
        usleep((useconds_t)timeout_ms * 1000);
        return;
    }
    if (poll(pfds, (nfds_t)n, timeout_ms) <= 0) {
        return;
    }
    for (int i = 0; i < n; ++i) {
        if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
            run_stream_drain(ranks[i], owners[i]);
        }
    }
}

/* Reap finished ranks; return the rank that just failed (and counts), or -1. */
static int run_reap(run_job_t *job)
{
    int failed = -1, status;
    pid_t pid;

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int r = 0; r < job->num_ranks; ++r) {
            run_rank_t *rank = &job->ranks[r];

            if (rank->pid != pid || !rank->running) {
                continue;
            }
            rank->running = false;
            rank->status  = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            if (rank->status != 0 && !rank->may_fail && failed < 0) {
                failed = r;
            }
        }
    }
    return failed;
}

static int run_count_running(const run_job_t *job)
{
    int running = 0;

    for (int r = 0; r < job->num_ranks; ++r) {
        running += job->ranks[r].running;
    }
    return running;
}

static void run_signal_all(run_job_t *job, int sig)
{
    for (int r = 0; r < job->num_ranks; ++r) {
        if (job->ranks[r].running) {
            kill(-job->ranks[r].pid, sig); /* its process group: the rank and its children */
        }
    }
}

/* SIGTERM every rank still running, SIGKILL what is left after the grace period. */
static void run_stop_all(run_job_t *job)
{
    double deadline = run_now() + RUN_GRACE_SECONDS;

    run_signal_all(job, SIGTERM);
    run_signal_all(job, SIGCONT); /* a stopped rank must run to die */
    while (run_count_running(job) > 0 && run_now() < deadline) {
        run_pump_output(job, 50);
        run_reap(job);
    }
    if (run_count_running(job) == 0) {
        return;
    }
    run_signal_all(job, SIGKILL);
    deadline = run_now() + RUN_GRACE_SECONDS;
    while (run_count_running(job) > 0 && run_now() < deadline) {
        run_pump_output(job, 50);
        run_reap(job);
    }
    if (run_count_running(job) > 0) { /* e.g. stuck in the kernel (state D) */
        fprintf(stderr, "strata-run: %d rank(s) survive SIGKILL; leaving them\n",
                run_count_running(job));
        for (int r = 0; r < job->num_ranks; ++r) {
            job->ranks[r].running = false;
        }
    }
}

/*
 * Whether the job is over but for ranks allowed to fail (a test stopped one): every rank
 * not allowed to fail has ended. Where every rank may fail there is no such rank, and the
 * job waits for them all.
 */
static bool run_only_may_fail_left(const run_job_t *job)
{
    bool any_must_finish = false;

    for (int r = 0; r < job->num_ranks; ++r) {
        if (!job->ranks[r].may_fail) {
            any_must_finish = true;
            if (job->ranks[r].running) {
                return false;
            }
        }
    }
    return any_must_finish;
}

static int run_wait(run_job_t *job)
{
    double deadline = run_now() + job->timeout;
    int failed = -1, rc = 0;

    while (run_count_running(job) > 0) {
        run_pump_output(job, run_link_wait_ms(&job->link, run_now(), 100));
        run_link_sample(&job->link, run_now());
        failed = run_reap(job);
        if (failed >= 0) {
            run_clear_redrawn();
            fprintf(stderr, "strata-run: rank %d failed (status %d); stopping the job\n", failed,
                    job->ranks[failed].status);
            rc = job->ranks[failed].status;
            run_stop_all(job);
        } else if (run_signal) {
            run_clear_redrawn();
            fprintf(stderr, "strata-run: signal %d; stopping the job\n", (int)run_signal);
            rc = 128 + run_signal;
            run_stop_all(job);
        } else if (run_now() > deadline) {
            run_clear_redrawn();
            fprintf(stderr, "strata-run: timed out after %g s; stopping the job\n", job->timeout);
            rc = RUN_EXIT_TIMEOUT;
            run_stop_all(job);
        } else if (run_count_running(job) > 0 && run_only_may_fail_left(job)) {
            /* e.g. a rank a test stopped with SIGSTOP: the others are done without it */
            run_clear_redrawn();
            fprintf(stderr, "strata-run: only ranks allowed to fail are left; stopping them\n");
            run_stop_all(job);
        }
    }
    /* Output written just before exit; bounded, since a stray grandchild may hold a pipe. */
    deadline = run_now() + RUN_GRACE_SECONDS;
    for (int r = 0; r < job->num_ranks && run_now() < deadline; ++r) {
        while ((job->ranks[r].streams[0].fd >= 0 || job->ranks[r].streams[1].fd >= 0) &&
               run_now() < deadline) {
            run_pump_output(job, 100);
        }
    }
    run_clear_redrawn();
    return rc;
}

/*
 * libfabric's shm provider names its regions /dev/shm/<pid>:<...>; a rank that dies (or
 * whose transport is left open because it is stuck) leaves them behind. Remove those of
 * this job's ranks, found by their pids, once every rank is gone.
 */
static void run_remove_shm_leftovers(const run_job_t *job)
{
    DIR *dir = opendir("/dev/shm");
    struct dirent *entry;
    char path[512];
    int pid, used;

    if (dir == NULL) {
        return;
    }
    while ((entry = readdir(dir)) != NULL) {
        used = 0;
        if (sscanf(entry->d_name, "%d:%n", &pid, &used) != 1 || used == 0) {
            continue;
        }
        for (int r = 0; r < job->num_ranks; ++r) {
            if (job->ranks[r].pid == pid && !job->ranks[r].running) {
                snprintf(path, sizeof(path), "/dev/shm/%s", entry->d_name);
                unlink(path);
            }
        }
    }
    closedir(dir);
}

/*
 * --cleanup: every /dev/shm entry of libfabric's shm provider (named "<pid>:...") whose
 * process is gone, owned by this user (any, for root). A pid taken by another process since
 * keeps its file: only the gone are cleaned up after. Returns how many were removed.
 */
static int run_cleanup_shm(void)
{
    DIR *dir = opendir("/dev/shm");
    struct dirent *entry;
    struct stat st;
    char path[512];
    int pid, used, removed = 0;

    if (dir == NULL) {
        return 0;
    }
    while ((entry = readdir(dir)) != NULL) {
        used = 0;
        if (sscanf(entry->d_name, "%d:%n", &pid, &used) != 1 || used == 0 || pid <= 0) {
            continue;
        }
        snprintf(path, sizeof(path), "/dev/shm/%s", entry->d_name);
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
            (geteuid() != 0 && st.st_uid != geteuid()) ||
            kill((pid_t)pid, 0) == 0 || errno != ESRCH) {
            continue;
        }
        if (unlink(path) == 0) {
            printf("strata-run: removed %s (%lld bytes; pid %d is gone)\n", path,
                   (long long)st.st_size, pid);
            removed++;
        }
    }
    closedir(dir);
    return removed;
}

/* One option into job; false after a message naming the mistake. */
static bool run_option(run_job_t *job, int opt, const char *arg)
{
    int rank;

    switch (opt) {
    case 'n': return tool_parse_int(RUN_TOOL, "-n", arg, 1, RUN_MAX_RANKS, &job->num_ranks);
    case 'k': return tool_parse_int(RUN_TOOL, "--nodes", arg, 1, RUN_MAX_NODES,
                                    &job->num_nodes);
    case 't': return tool_parse_double(RUN_TOOL, "--timeout", arg, RUN_MIN_TIMEOUT,
                                       RUN_MAX_TIMEOUT, &job->timeout);
    case 'a':
        if (!tool_parse_int(RUN_TOOL, "--allow-fail", arg, 0, RUN_MAX_RANKS - 1, &rank)) {
            return false;
        }
        job->ranks[rank].may_fail = true;
        return true;
    case 'R': return run_link_parse_rate(&job->link, arg);
    case 'D': return run_link_parse_delay(&job->link, arg);
    default:  return false;
    }
}

/* What the options say together; the usage exit code after naming what does not fit. */
static int run_check_options(const run_job_t *job, int argc, char **argv)
{
    if (job->num_ranks == 0) {
        return tool_usage_error(RUN_TOOL, "no -n: give the number of ranks to start");
    }
    if (optind >= argc) {
        return tool_usage_error(RUN_TOOL, "no command: give it after --");
    }
    if (job->num_nodes > 0 && job->num_ranks % job->num_nodes != 0) {
        return tool_usage_error(RUN_TOOL, "-n %d is not a multiple of --nodes %d",
                                job->num_ranks, job->num_nodes);
    }
    for (int r = job->num_ranks; r < RUN_MAX_RANKS; ++r) {
        if (job->ranks[r].may_fail) {
            return tool_usage_error(RUN_TOOL, "--allow-fail %d: the job has ranks 0..%d", r,
                                    job->num_ranks - 1);
        }
    }
    if (job->link.delay_text[0] != '\0' && job->link.rate_bps == 0) {
        return tool_usage_error(RUN_TOOL, "--link-delay needs --link-rate");
    }
    if (job->link.rate_bps > 0 && job->num_nodes == 0) {
        return tool_usage_error(RUN_TOOL, "--link-rate shapes the links of simulated nodes: "
                                "it needs --nodes");
    }
    return 0;
}

/* The command line into job: 0, or the exit status (0 too after --help or --version,
 * with *done_p set). */
static int run_parse(run_job_t *job, int argc, char **argv, bool *done_p)
{
    static const struct option options[] = {
        {"ranks", required_argument, NULL, 'n'},
        {"nodes", required_argument, NULL, 'k'},
        {"timeout", required_argument, NULL, 't'},
        {"allow-fail", required_argument, NULL, 'a'},
        {"link-rate", required_argument, NULL, 'R'},
        {"link-delay", required_argument, NULL, 'D'},
        {"cleanup", no_argument, NULL, 'C'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int opt, rc;

    *done_p      = false;
    job->timeout = RUN_DEFAULT_TIMEOUT;
    /* '+': the options end at the command, whose own options are its business. */
    while ((opt = getopt_long(argc, argv, "+:n:k:t:a:hV", options, NULL)) != -1) {
        if (opt == 'h' || opt == 'V') {
            if (opt == 'h') {
                usage(stdout);
            } else {
                tool_print_version(RUN_TOOL, STRATA_RUN_VERSION, NULL);
            }
            *done_p = true;
            return 0;
        }
        if (opt == '?' || opt == ':') {
            return tool_option_error(RUN_TOOL, argv, options, opt);
        }
        if (opt == 'C') {
            if (argc != 2) {
                return tool_usage_error(RUN_TOOL, "--cleanup takes no other option or command");
            }
            printf("strata-run: %d leftover file(s) removed from /dev/shm\n", run_cleanup_shm());
            *done_p = true;
            return 0;
        }
        if (!run_option(job, opt, optarg)) {
            return TOOL_EXIT_USAGE;
        }
    }
    rc = run_check_options(job, argc, argv);
    if (rc == 0) {
        job->argv = &argv[optind];
    }
    return rc;
}

int main(int argc, char **argv)
{
    static run_job_t job;
    struct sigaction sa = {.sa_handler = run_on_signal};
    bool done;
    int rc;

    run_link_init(&job.link);
    rc = run_parse(&job, argc, argv, &done);
    if (rc != 0 || done) {
        return rc;
    }
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    job.port = run_pick_port();
    if (job.port == 0) {
        fprintf(stderr, "strata-run: no free TCP port for the rendezvous\n");
        return RUN_EXIT_SETUP;
    }
    if (job.num_nodes > 0) {
        run_netns_remove_stale();
    }
    if (job.link.rate_bps > 0 && !run_link_check_tc()) {
        return RUN_EXIT_SETUP;
    }
    if (job.num_nodes > 0 && !run_netns_create(&job.netns, job.num_nodes)) {
        return RUN_EXIT_SETUP;
    }
    if (job.link.rate_bps > 0 && !run_link_shape(&job.link, &job.netns)) {
        run_netns_destroy(&job.netns);
        return RUN_EXIT_SETUP;
    }
    for (int r = 0; r < job.num_ranks; ++r) {
        job.ranks[r].streams[0].fd = job.ranks[r].streams[1].fd = -1;
    }
    for (int r = 0; r < job.num_ranks && rc == 0; ++r) {
        if (!run_start_rank(&job, r)) {
            fprintf(stderr, "strata-run: cannot start rank %d: %s\n", r, strerror(errno));
            rc = RUN_EXIT_SETUP;
            run_stop_all(&job);
        }
    }
    if (rc == 0) {
        rc = run_wait(&job);
    }
    run_link_report(&job.link, stdout);
    run_remove_shm_leftovers(&job);
    run_netns_destroy(&job.netns);
    return rc;
}
