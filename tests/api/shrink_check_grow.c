/*
 * shrink_check's growing back: the survivors' rank 0 starts a replacement process, which
 * joins through strata_comm_expand's rendezvous; the MoE object is recreated with every
 * expert back on its first rank, and every process steps again.
 */
#include "api/shrink_check.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define GROWN_STEP 1000 /* the steps after the expand count from here, on every process */

typedef struct rendezvous {
    char     addr[64];
    uint32_t port;
} rendezvous_t;

/* This node's address on the engine's interface (loopback where it is lo). */
static void node_addr(char *addr, size_t len)
{
    const char *iface = getenv("STRATA_INTER_IFACE");
    struct ifaddrs *ifs;

    snprintf(addr, len, "127.0.0.1");
    if (iface == NULL || !strcmp(iface, "lo") || getifaddrs(&ifs) != 0) {
        return;
    }
    for (struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
        if (i->ifa_addr != NULL && i->ifa_addr->sa_family == AF_INET &&
            !strcmp(i->ifa_name, iface)) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, addr,
                      (socklen_t)len);
            break;
        }
    }
    freeifaddrs(ifs);
}

static uint32_t free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
              getsockname(fd, (struct sockaddr *)&sa, &len) == 0,
          "no free port");
    close(fd);
    return ntohs(sa.sin_port);
}

/* Rank 0 of comm picks the rendezvous and sends it to the others. */
static void share_rendezvous(strata_comm_t *comm, rendezvous_t *rv)
{
    strata_request_t *req;

    if (strata_comm_rank(comm) == 0) {
        node_addr(rv->addr, sizeof(rv->addr));
        rv->port = free_port();
        for (int r = 1; r < strata_comm_size(comm); ++r) {
            CHECK(strata_send(comm, r, rv, sizeof(*rv), &req) == STRATA_OK &&
                      strata_request_wait(req, WAIT_MS) == STRATA_OK,
                  "sending the rendezvous to rank %d", r);
            strata_request_free(req);
        }
        return;
    }
    CHECK(strata_recv(comm, 0, rv, sizeof(*rv), &req) == STRATA_OK &&
              strata_request_wait(req, WAIT_MS) == STRATA_OK,
          "receiving the rendezvous");
    strata_request_free(req);
}

/* This program again, with --join: the replacement of the victim. */
static pid_t start_joiner(int argc, char **argv, const rendezvous_t *rv, int rank)
{
    char port[16], as[16];
    char *args[64];
    int n = 0;
    pid_t pid;

    snprintf(port, sizeof(port), "%u", rv->port);
    snprintf(as, sizeof(as), "%d", rank);
    for (int i = 0; i < argc && n < 58; ++i) {
        args[n++] = argv[i];
    }
    args[n++] = "--join";
    args[n++] = (char *)rv->addr;
    args[n++] = port;
    args[n++] = as;
    args[n]   = NULL;
    pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        execv("/proc/self/exe", args);
        _exit(127);
    }
    return pid;
}

/* The replacement: joins the survivors' expanded communicator in the victim's place. */
int run_joiner(const options_t *o)
{
    int first_of[256], n = o->join_rank; /* the survivors */
    strata_bootstrap_t *bs;
    strata_comm_t *comm;
    strata_moe_t *moe = NULL;

    g_first_rank = o->victim;
    CHECK(n > 0 && n < 256, "joining as rank %d", n);
    CHECK(strata_bootstrap_tcp_create(o->join_addr, (uint16_t)o->join_port, n, n + 1, 0, &bs) ==
              STRATA_OK,
          "the rendezvous at %s:%d", o->join_addr, o->join_port);
    CHECK(strata_comm_create(NULL, bs, &comm) == STRATA_OK, "joining the job");
    for (int r = 0; r < n; ++r) {
        first_of[r] = r < o->victim ? r : r + 1;
    }
    first_of[n] = o->victim;
    g_experts   = EXPERTS_PER_RANK * (n + 1);
    if (o->moe) {
        CHECK(moe_back(&moe, comm, first_of) == STRATA_OK, "recreating the MoE object");
    }
    for (int i = 0; i < o->steps; ++i) {
        CHECK(job_step(comm, moe, first_of, GROWN_STEP + i, o) == STRATA_OK,
              "step %d after joining", i);
    }
    printf("joined as rank %d: grew back to %d ranks\n", n, n + 1);
    strata_barrier(comm, WAIT_MS);
    strata_moe_destroy(moe);
    strata_comm_destroy(comm);
    strata_bootstrap_destroy(bs);
    return 0;
}

/* The survivors take a replacement in: rendezvous, expand, the experts back where they
 * were, steps. The joiner's pid on rank 0, else -1. */
pid_t grow_back(strata_comm_t **comm, strata_moe_t **moe, int *first_of, int argc,
                       char **argv, const options_t *o)
{
    int n = strata_comm_size(*comm);
    strata_comm_t *grown;
    pid_t joiner = -1;
    rendezvous_t rv;

    share_rendezvous(*comm, &rv);
    if (strata_comm_rank(*comm) == 0) {
        joiner = start_joiner(argc, argv, &rv, n);
    }
    CHECK(strata_comm_expand(*comm, 1, rv.addr, (uint16_t)rv.port, &grown) == STRATA_OK,
          "strata_comm_expand at %s:%u", rv.addr, rv.port);
    CHECK(strata_comm_size(grown) == n + 1 && strata_comm_rank(grown) == strata_comm_rank(*comm),
          "expanded to rank %d of %d", strata_comm_rank(grown), strata_comm_size(grown));
    first_of[n] = o->victim;
    if (*moe != NULL) {
        CHECK(moe_back(moe, grown, first_of) == STRATA_OK, "recreating the MoE object");
    }
    strata_comm_destroy(*comm);
    *comm = grown;
    for (int i = 0; i < o->steps; ++i) {
        CHECK(job_step(grown, *moe, first_of, GROWN_STEP + i, o) == STRATA_OK,
              "step %d after the expand", i);
    }
    printf("grew back to %d ranks\n", n + 1);
    return joiner;
}
