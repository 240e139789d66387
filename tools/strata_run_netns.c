/*
 * Simulated nodes for strata-run: a network namespace per node, each with one veth whose
 * peer sits on a bridge in a hub namespace, addresses from 198.18.0.0/15 inside the
 * namespaces only. Nothing is added to the caller's own namespace.
 */
#include "strata_run.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUN_IP_MAX_ARGS 16

int run_exec(const char *const *argv, bool quiet)
{
    int status, devnull;
    pid_t pid;

    pid = fork();
    if (pid < 0) {
        return -1;
    }
    if (pid == 0) {
        devnull = quiet ? open("/dev/null", O_WRONLY | O_CLOEXEC) : -1;
        if (devnull >= 0) {
            dup2(devnull, STDOUT_FILENO);
        }
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            return -1;
        }
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Run `ip ARGS...` (no shell); true when it exits 0. Its stderr goes to ours. */
static bool run_ip(const char *first, ...)
{
    const char *argv[RUN_IP_MAX_ARGS + 2] = {"ip", first};
    int argc = 2;
    va_list ap;

    va_start(ap, first);
    while (argc < RUN_IP_MAX_ARGS && (argv[argc] = va_arg(ap, const char *)) != NULL) {
        ++argc;
    }
    va_end(ap);
    argv[argc] = NULL;
    return run_exec(argv, false) == 0;
}

static bool run_netns_add_node(run_netns_t *netns, int k)
{
    char hub_port[16], cidr[RUN_ADDR_LEN + 4];

    snprintf(hub_port, sizeof(hub_port), "n%d", k);
    snprintf(cidr, sizeof(cidr), "%s/24", netns->addr[k]);
    if (!run_ip("netns", "add", netns->node[k], NULL)) {
        return false;
    }
    netns->created[k] = true;
    return run_ip("-n", netns->hub, "link", "add", hub_port, "type", "veth", "peer", "name",
                  "eth0", "netns", netns->node[k], NULL) &&
           run_ip("-n", netns->hub, "link", "set", hub_port, "master", "br0", "up", NULL) &&
           run_ip("-n", netns->node[k], "addr", "add", cidr, "dev", "eth0", NULL) &&
           run_ip("-n", netns->node[k], "link", "set", "eth0", "up", NULL) &&
           run_ip("-n", netns->node[k], "link", "set", "lo", "up", NULL);
}

bool run_netns_create(run_netns_t *netns, int num_nodes)
{
    int pid = (int)getpid();

    memset(netns, 0, sizeof(*netns));
    netns->num_nodes = num_nodes;
    snprintf(netns->hub, sizeof(netns->hub), "strata-run-%d-hub", pid);
    for (int k = 0; k < num_nodes; ++k) {
        snprintf(netns->node[k], sizeof(netns->node[k]), "strata-run-%d-n%d", pid, k);
        snprintf(netns->addr[k], sizeof(netns->addr[k]), "198.18.0.%d", k + 1);
    }
    if (!run_ip("netns", "add", netns->hub, NULL)) {
        fprintf(stderr, "strata-run: cannot create network namespaces (needs root or "
                        "CAP_NET_ADMIN, and iproute2)\n");
        return false;
    }
    netns->created[RUN_MAX_NODES] = true;
    if (!run_ip("-n", netns->hub, "link", "add", "br0", "type", "bridge", NULL) ||
        !run_ip("-n", netns->hub, "link", "set", "br0", "up", NULL)) {
        fprintf(stderr, "strata-run: cannot create the bridge joining the nodes\n");
        run_netns_destroy(netns);
        return false;
    }
    for (int k = 0; k < num_nodes; ++k) {
        if (!run_netns_add_node(netns, k)) {
            fprintf(stderr, "strata-run: cannot set up the namespace of node %d\n", k);
            run_netns_destroy(netns);
            return false;
        }
    }
    return true;
}

void run_netns_destroy(run_netns_t *netns)
{
    for (int k = 0; k < netns->num_nodes; ++k) {
        if (netns->created[k] && run_ip("netns", "del", netns->node[k], NULL)) {
            netns->created[k] = false;
        }
    }
    if (netns->created[RUN_MAX_NODES] && run_ip("netns", "del", netns->hub, NULL)) {
        netns->created[RUN_MAX_NODES] = false;
    }
}

void run_netns_remove_stale(void)
{
    DIR *dir = opendir("/var/run/netns");
    struct dirent *entry;
    int pid;

    if (dir == NULL) {
        return;
    }
    while ((entry = readdir(dir)) != NULL) {
        /* Ours are strata-run-<launcher pid>-...; a dead launcher (killed outright) left them. */
        if (sscanf(entry->d_name, "strata-run-%d-", &pid) == 1 && pid > 0 &&
            kill(pid, 0) != 0 && errno == ESRCH) {
            fprintf(stderr, "strata-run: removing %s, left by a launcher that is gone\n",
                    entry->d_name);
            run_ip("netns", "del", entry->d_name, NULL);
        }
    }
    closedir(dir);
}

bool run_netns_join(const char *name)
{
    char path[128];
    int fd;
    bool ok;

    snprintf(path, sizeof(path), "/var/run/netns/%s", name);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return false;
    }
    ok = setns(fd, CLONE_NEWNET) == 0;
    close(fd);
    return ok;
}

bool run_netns_enter(const run_netns_t *netns, int node)
{
    return run_netns_join(netns->node[node]);
}
