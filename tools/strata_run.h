/*
 * strata-run internals: simulated nodes as network namespaces.
 */
#ifndef STRATA_TOOLS_STRATA_RUN_H
#define STRATA_TOOLS_STRATA_RUN_H

#include <stdbool.h>

#define RUN_MAX_NODES   64
#define RUN_NETNS_LEN   48
#define RUN_ADDR_LEN    32

/** K namespaces joined by veth pairs to a bridge in a hub namespace. */
typedef struct run_netns {
    int  num_nodes;
    char hub[RUN_NETNS_LEN];
    char node[RUN_MAX_NODES][RUN_NETNS_LEN];
    char addr[RUN_MAX_NODES][RUN_ADDR_LEN]; /* 198.18.0.<k+1>, benchmarking range */
    bool created[RUN_MAX_NODES + 1];        /* node namespaces, then the hub */
} run_netns_t;

/** Create the namespaces; on failure removes what it made and prints why. */
bool run_netns_create(run_netns_t *netns, int num_nodes);

/** Remove every namespace this job made; safe to call twice. */
void run_netns_destroy(run_netns_t *netns);

/** Remove namespaces that launchers killed outright (no cleanup) left behind. */
void run_netns_remove_stale(void);

/** In a child: move into node k's namespace. false (with errno) on failure. */
bool run_netns_enter(const run_netns_t *netns, int node);

/** Move this thread into the named namespace (under /var/run/netns). false with errno. */
bool run_netns_join(const char *name);

/**
 * Run argv[0] with argv (no shell; searched in PATH), its stdout discarded when quiet, and
 * wait for it: its exit status, 127 when it cannot be run, -1 when it could not be started
 * or was killed.
 */
int run_exec(const char *const *argv, bool quiet);

#endif
