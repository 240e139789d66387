/*
 * strata-run internals: simulated nodes as network namespaces, and the shaping of their
 * links with tc.
 */
#ifndef STRATA_TOOLS_STRATA_RUN_H
#define STRATA_TOOLS_STRATA_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

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

/* --- Shaped links (strata_run_link.c) ------------------------------------------------- */

#define RUN_LINK_TEXT_LEN 32

/** What the queue into one node (its hub port's token bucket) held over the job. */
typedef struct run_link_queue {
    int      ifindex;       /* of n<k> in the hub namespace */
    uint64_t max_backlog;   /* bytes, the largest sampled */
    uint64_t sum_backlog;   /* bytes, over the samples that found the bucket */
    uint64_t num_samples;
    uint32_t max_packets;   /* packets queued at that sample */
    uint32_t drops;         /* packets the bucket dropped, at the last sample */
    bool     seen;          /* a sample found the bucket */
} run_link_queue_t;

/** --link-rate and --link-delay, the qdiscs they give, and the sampling of their queues. */
typedef struct run_link {
    uint64_t         rate_bps;     /* 0: links not shaped */
    uint64_t         delay_us;     /* 0: no netem */
    char             rate_text[RUN_LINK_TEXT_LEN];
    char             delay_text[RUN_LINK_TEXT_LEN];
    int              num_queues;
    run_link_queue_t queue[RUN_MAX_NODES];
    int              nl_fd;        /* rtnetlink socket in the hub namespace; -1: none */
    uint32_t         nl_seq;
    uint64_t         samples;
    double           next_sample;  /* run_now() seconds */
} run_link_t;

/** The link shaping given on the command line, none yet (nl_fd -1). */
void run_link_init(run_link_t *link);

/** Parse --link-rate (tc's rate units) or --link-delay (tc's time units); false after
 *  printing why the value is refused. */
bool run_link_parse_rate(run_link_t *link, const char *text);
bool run_link_parse_delay(run_link_t *link, const char *text);

/** Whether tc can be run here; prints why not. */
bool run_link_check_tc(void);

/**
 * Shape both directions of every node's link of netns, print the qdiscs made, and open
 * the sampler of the hub ports' queues; false after printing why (the namespaces, which
 * the caller removes, take the qdiscs with them).
 */
bool run_link_shape(run_link_t *link, const run_netns_t *netns);

/** Milliseconds until the next sample is due (0: now), at most max_ms. */
int run_link_wait_ms(const run_link_t *link, double now, int max_ms);

/** Sample the hub ports' queues if a sample is due. A failed sample is reported once,
 *  and sampling stops. */
void run_link_sample(run_link_t *link, double now);

/** Take a last sample, print one line per node to out, close the sampler. Tolerates a
 *  link that was never shaped. */
void run_link_report(run_link_t *link, FILE *out);

/* --- The ranks' output (strata_run_output.c) ------------------------------------------ */

#define RUN_LINE_MAX 4096

typedef struct run_stream {
    int    fd;        /* read end of the rank's pipe (or terminal), -1 once closed */
    FILE  *out;       /* where its lines go */
    bool   tty;       /* a terminal: a carriage return starts a line redrawn in place */
    bool   redrawn;   /* the line being read began after a carriage return */
    char   line[RUN_LINE_MAX];
    size_t len;
} run_stream_t;

/**
 * A pseudo-terminal for rank 0's stderr, output processing off (fds[0]: ours, fds[1]: the
 * rank's); false (nothing left open) where one cannot be had.
 */
bool run_open_tty(int fds[2]);

/** Read what a rank's stream has; print its whole lines after "[r<rank>] ", redraw a line
 *  a terminal rank rewrites in place; at end of file flush the rest and close it. */
void run_stream_drain(int rank, run_stream_t *s);

/** Clear the line a terminal rank redraws, if one is shown, before a message of ours. */
void run_clear_redrawn(void);

#endif
