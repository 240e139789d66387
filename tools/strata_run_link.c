/*
 * Shaped links for strata-run's simulated nodes: tc gives both directions of every node's
 * link a token bucket (and netem for a delay), and the launcher samples the queue of each
 * hub port, where the traffic into a node, an incast's, waits for the link.
 */
#include "strata_run.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/gen_stats.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <math.h>
#include <net/if.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define RUN_LINK_MIN_RATE     1e6   /* 1mbit */
#define RUN_LINK_MAX_RATE     100e9 /* 100gbit */
#define RUN_LINK_MAX_DELAY_US 1000000u
/* The token bucket's queue (its limit) holds this many milliseconds at the link rate, a
 * switch port's buffer scaled to the rate; its burst, the bytes it may send back to back. */
#define RUN_LINK_QUEUE_MS     20
#define RUN_LINK_QUEUE_MIN    (64u << 10)
#define RUN_LINK_QUEUE_MAX    (32u << 20)
#define RUN_LINK_BURST_MS     1
#define RUN_LINK_BURST_MIN    (16u << 10)
#define RUN_LINK_BURST_MAX    (1u << 20)
#define RUN_LINK_NETEM_MIN    1000u /* packets netem may hold while it delays them */
#define RUN_LINK_FRAME        1514u
/* tc handles are hexadecimal: "10:" is major 0x10. netem, when there is one, is "1:". */
#define RUN_LINK_TBF_HANDLE   "10:"
#define RUN_LINK_TBF_ID       0x00100000u
#define RUN_LINK_SAMPLE_S     0.010
#define RUN_LINK_RECV_TIMEOUT_US 200000
#define RUN_LINK_NUM_LEN      24
#define RUN_LINK_TC_MAX_ARGS  24

typedef struct run_unit {
    const char *name;
    double      scale;
} run_unit_t;

/* tc(8), "RATES" and "TIMES"; tc reads the units without regard to case, and so do we. */
static const run_unit_t run_rate_units[] = {
    {"bit", 1.0},      {"kbit", 1e3},    {"mbit", 1e6},    {"gbit", 1e9},    {"tbit", 1e12},
    {"kibit", 0x1p10}, {"mibit", 0x1p20}, {"gibit", 0x1p30}, {"tibit", 0x1p40},
    {"bps", 8.0},      {"kbps", 8e3},    {"mbps", 8e6},    {"gbps", 8e9},    {"tbps", 8e12},
    {"kibps", 0x1p13}, {"mibps", 0x1p23}, {"gibps", 0x1p33}, {"tibps", 0x1p43},
};

static const run_unit_t run_time_units[] = { /* to microseconds */
    {"s", 1e6},   {"sec", 1e6},   {"secs", 1e6}, {"ms", 1e3}, {"msec", 1e3},
    {"msecs", 1e3}, {"us", 1.0}, {"usec", 1.0}, {"usecs", 1.0},
};

void run_link_init(run_link_t *link)
{
    memset(link, 0, sizeof(*link));
    link->nl_fd = -1;
}

/* "<decimal number><unit>", the unit one of units; false for anything else. */
static bool run_parse_scaled(const char *text, const run_unit_t *units, size_t num_units,
                             double *value_p)
{
    size_t digits = strspn(text, "0123456789.");
    double number;
    char *end;

    if (digits == 0 || !isdigit((unsigned char)text[0])) {
        return false;
    }
    errno  = 0;
    number = strtod(text, &end);
    if (end != text + digits || errno != 0 || !isfinite(number)) {
        return false;
    }
    for (size_t i = 0; i < num_units; ++i) {
        if (strcasecmp(end, units[i].name) == 0) {
            *value_p = number * units[i].scale;
            return true;
        }
    }
    return false;
}

bool run_link_parse_rate(run_link_t *link, const char *text)
{
    double bps;

    if (strlen(text) >= sizeof(link->rate_text) ||
        !run_parse_scaled(text, run_rate_units,
                          sizeof(run_rate_units) / sizeof(run_rate_units[0]), &bps)) {
        fprintf(stderr, "strata-run: --link-rate '%s' is not a rate: a number and one of tc's "
                        "units (kbit, mbit, gbit, kbps, mbps, gbps, mibit, ...), e.g. 100mbit or "
                        "1gbit\n", text);
        return false;
    }
    if (bps < RUN_LINK_MIN_RATE || bps > RUN_LINK_MAX_RATE) {
        fprintf(stderr, "strata-run: --link-rate %s is out of range (1mbit to 100gbit)\n", text);
        return false;
    }
    link->rate_bps = (uint64_t)llround(bps);
    snprintf(link->rate_text, sizeof(link->rate_text), "%s", text);
    return true;
}

bool run_link_parse_delay(run_link_t *link, const char *text)
{
    double us;

    if (strlen(text) >= sizeof(link->delay_text) ||
        !run_parse_scaled(text, run_time_units,
                          sizeof(run_time_units) / sizeof(run_time_units[0]), &us)) {
        fprintf(stderr, "strata-run: --link-delay '%s' is not a time: a number and one of tc's "
                        "units (us, ms, s), e.g. 500us or 2ms\n", text);
        return false;
    }
    if (!(us <= (double)RUN_LINK_MAX_DELAY_US) || (us > 0 && llround(us) == 0)) {
        fprintf(stderr, "strata-run: --link-delay %s is out of range (0, or 1us to 1s)\n", text);
        return false;
    }
    link->delay_us = (uint64_t)llround(us);
    snprintf(link->delay_text, sizeof(link->delay_text), "%s", text);
    return true;
}

bool run_link_check_tc(void)
{
    static const char *const argv[] = {"tc", "-V", NULL};
    int status = run_exec(argv, true);

    if (status == 127) {
        fprintf(stderr, "strata-run: --link-rate needs tc (iproute2), which cannot be run "
                        "here\n");
    } else if (status != 0) {
        fprintf(stderr, "strata-run: 'tc -V' failed (status %d)\n", status);
    }
    return status == 0;
}

static uint64_t run_link_clamp(uint64_t value, uint64_t lo, uint64_t hi)
{
    return value < lo ? lo : value > hi ? hi : value;
}

static uint64_t run_link_burst(const run_link_t *link)
{
    return run_link_clamp(link->rate_bps / 8 / 1000 * RUN_LINK_BURST_MS, RUN_LINK_BURST_MIN,
                          RUN_LINK_BURST_MAX);
}

static uint64_t run_link_limit(const run_link_t *link)
{
    return run_link_clamp(link->rate_bps / 8 / 1000 * RUN_LINK_QUEUE_MS, RUN_LINK_QUEUE_MIN,
                          RUN_LINK_QUEUE_MAX);
}

/* Packets netem may hold: twice the full-size frames the delay covers at the rate. */
static uint64_t run_link_netem_limit(const run_link_t *link)
{
    uint64_t frames = link->rate_bps / 8 * link->delay_us / 1000000 / RUN_LINK_FRAME;

    return 2 * frames > RUN_LINK_NETEM_MIN ? 2 * frames : RUN_LINK_NETEM_MIN;
}

/* netem at the root of dev's egress in namespace ns, delaying every packet. */
static bool run_link_add_netem(const run_link_t *link, const char *ns, const char *dev)
{
    char delay[RUN_LINK_NUM_LEN], limit[RUN_LINK_NUM_LEN];
    const char *argv[] = {"tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:",
                          "netem", "delay", delay, "limit", limit, NULL};

    snprintf(delay, sizeof(delay), "%lluus", (unsigned long long)link->delay_us);
    snprintf(limit, sizeof(limit), "%llu", (unsigned long long)run_link_netem_limit(link));
    if (run_exec(argv, false) != 0) {
        fprintf(stderr, "strata-run: cannot add netem (--link-delay %s) to %s in %s; does the "
                        "kernel have sch_netem (CONFIG_NET_SCH_NETEM)?\n", link->delay_text, dev,
                ns);
        return false;
    }
    return true;
}

/* The token bucket of dev's egress in namespace ns: under netem if there is one, else at
 * the root. Its queue is a byte fifo of run_link_limit() bytes that drops at the tail. */
static bool run_link_add_tbf(const run_link_t *link, const char *ns, const char *dev)
{
    char rate[RUN_LINK_NUM_LEN], burst[RUN_LINK_NUM_LEN], limit[RUN_LINK_NUM_LEN];
    const char *argv[RUN_LINK_TC_MAX_ARGS] = {"tc", "-n", ns, "qdisc", "add", "dev", dev};
    int argc = 7;

    snprintf(rate, sizeof(rate), "%llubit", (unsigned long long)link->rate_bps);
    snprintf(burst, sizeof(burst), "%llu", (unsigned long long)run_link_burst(link));
    snprintf(limit, sizeof(limit), "%llu", (unsigned long long)run_link_limit(link));
    if (link->delay_us > 0) {
        argv[argc++] = "parent";
        argv[argc++] = "1:1";
    } else {
        argv[argc++] = "root";
    }
    for (const char *const *arg = (const char *const[]){"handle", RUN_LINK_TBF_HANDLE, "tbf",
                                                        "rate", rate, "burst", burst, "limit",
                                                        limit, NULL};
         *arg != NULL; ++arg) {
        argv[argc++] = *arg;
    }
    argv[argc] = NULL;
    if (run_exec(argv, false) != 0) {
        fprintf(stderr, "strata-run: cannot add a token bucket (tbf, --link-rate %s) to %s in "
                        "%s\n", link->rate_text, dev, ns);
        return false;
    }
    return true;
}

static bool run_link_shape_dev(const run_link_t *link, const char *ns, const char *dev)
{
    return (link->delay_us == 0 || run_link_add_netem(link, ns, dev)) &&
           run_link_add_tbf(link, ns, dev);
}

/*
 * A rtnetlink socket inside the hub namespace (a socket stays in the namespace it was made
 * in), and the hub ports' interface indexes, looked up there too. Reading the counters
 * `tc -s qdisc show` prints through it costs microseconds where running tc costs
 * milliseconds of CPU, which the ranks on this machine would lose every sample.
 */
static bool run_link_open_sampler(run_link_t *link, const run_netns_t *netns)
{
    struct timeval timeout = {.tv_usec = RUN_LINK_RECV_TIMEOUT_US};
    int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC), err = 0;
    char port[16];

    if (self < 0 || !run_netns_join(netns->hub)) {
        fprintf(stderr, "strata-run: cannot enter the hub's namespace to read its queues: %s\n",
                strerror(errno));
        if (self >= 0) {
            close(self);
        }
        return false;
    }
    link->nl_fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    err         = link->nl_fd < 0 ? errno : 0;
    link->num_queues = netns->num_nodes;
    for (int k = 0; k < netns->num_nodes && err == 0; ++k) {
        snprintf(port, sizeof(port), "n%d", k);
        link->queue[k].ifindex = (int)if_nametoindex(port);
        err = link->queue[k].ifindex == 0 ? errno : 0;
    }
    if (setns(self, CLONE_NEWNET) != 0) {
        int back = errno;

        fprintf(stderr, "strata-run: cannot return from the hub's namespace: %s\n",
                strerror(back));
        err = err ? err : back;
    }
    close(self);
    if (err == 0 && setsockopt(link->nl_fd, SOL_SOCKET, SO_RCVTIMEO, &timeout,
                               sizeof(timeout)) != 0) {
        err = errno;
    }
    if (err != 0) {
        fprintf(stderr, "strata-run: cannot read the queues of the hub's ports: %s\n",
                strerror(err));
        if (link->nl_fd >= 0) {
            close(link->nl_fd);
            link->nl_fd = -1;
        }
        return false;
    }
    return true;
}

bool run_link_shape(run_link_t *link, const run_netns_t *netns)
{
    char port[16];

    for (int k = 0; k < netns->num_nodes; ++k) {
        snprintf(port, sizeof(port), "n%d", k);
        if (!run_link_shape_dev(link, netns->node[k], "eth0") ||
            !run_link_shape_dev(link, netns->hub, port)) {
            return false;
        }
    }
    if (!run_link_open_sampler(link, netns)) {
        return false;
    }
    printf("strata-run: every node's link shaped both ways (eth0 in the node, n<k> in the hub): "
           "%stbf rate %s burst %llu limit %llu bytes (%d ms at the rate)\n",
           link->delay_us ? "netem delay " : "", link->rate_text,
           (unsigned long long)run_link_burst(link), (unsigned long long)run_link_limit(link),
           RUN_LINK_QUEUE_MS);
    if (link->delay_us) {
        printf("strata-run: netem delay %s (limit %llu packets) at the root, the token bucket "
               "under it\n", link->delay_text, (unsigned long long)run_link_netem_limit(link));
    }
    fflush(stdout);
    return true;
}

int run_link_wait_ms(const run_link_t *link, double now, int max_ms)
{
    double ms;

    if (link->nl_fd < 0) {
        return max_ms;
    }
    ms = ceil((link->next_sample - now) * 1e3);
    return ms <= 0 ? 0 : ms >= max_ms ? max_ms : (int)ms;
}

static run_link_queue_t *run_link_queue_of(run_link_t *link, int ifindex)
{
    for (int k = 0; k < link->num_queues; ++k) {
        if (link->queue[k].ifindex == ifindex) {
            return &link->queue[k];
        }
    }
    return NULL;
}

/* TCA_STATS2's queue counters (nested TCA_STATS_QUEUE); false when absent. */
static bool run_link_queue_stats(const struct rtattr *stats2, struct gnet_stats_queue *queue_p)
{
    int len = (int)RTA_PAYLOAD(stats2);

    for (const struct rtattr *rta = RTA_DATA(stats2); RTA_OK(rta, len); rta = RTA_NEXT(rta, len)) {
        if (rta->rta_type == TCA_STATS_QUEUE && RTA_PAYLOAD(rta) >= sizeof(*queue_p)) {
            memcpy(queue_p, RTA_DATA(rta), sizeof(*queue_p));
            return true;
        }
    }
    return false;
}

/* One qdisc of the dump: the token bucket of a hub port updates that port's figures. */
static void run_link_note(run_link_t *link, const struct nlmsghdr *nh)
{
    const struct tcmsg *tcm = NLMSG_DATA(nh);
    int len = (int)nh->nlmsg_len - (int)NLMSG_LENGTH(sizeof(*tcm));
    run_link_queue_t *queue = run_link_queue_of(link, tcm->tcm_ifindex);
    struct gnet_stats_queue stats = {0};
    bool tbf = false, counted = false;

    if (queue == NULL || tcm->tcm_handle != RUN_LINK_TBF_ID) {
        return;
    }
    for (const struct rtattr *rta = TCA_RTA(tcm); RTA_OK(rta, len); rta = RTA_NEXT(rta, len)) {
        if (rta->rta_type == TCA_KIND) {
            tbf = RTA_PAYLOAD(rta) == sizeof("tbf") && memcmp(RTA_DATA(rta), "tbf", 4) == 0;
        } else if (rta->rta_type == TCA_STATS2) {
            counted = run_link_queue_stats(rta, &stats);
        }
    }
    if (!tbf || !counted) {
        return;
    }
    queue->seen = true;
    queue->sum_backlog += stats.backlog;
    queue->num_samples += 1;
    if (stats.backlog > queue->max_backlog) {
        queue->max_backlog = stats.backlog;
        queue->max_packets = stats.qlen;
    }
    queue->drops = stats.drops;
}

/* Read one message batch of the dump; 1 when its end came, 0 for more, -1 with errno. */
static int run_link_read(run_link_t *link)
{
    static union {
        struct nlmsghdr nh;
        char            bytes[64 << 10];
    } buf;
    struct iovec iov = {.iov_base = &buf, .iov_len = sizeof(buf)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    ssize_t got = recvmsg(link->nl_fd, &msg, 0);
    int len = (int)got;

    if (got < 0 || (msg.msg_flags & MSG_TRUNC)) {
        errno = got < 0 ? errno : EMSGSIZE;
        return -1;
    }
    for (const struct nlmsghdr *nh = &buf.nh; NLMSG_OK(nh, len); nh = NLMSG_NEXT(nh, len)) {
        if (nh->nlmsg_seq != link->nl_seq) {
            continue; /* the rest of a dump given up on earlier */
        }
        if (nh->nlmsg_type == NLMSG_DONE) {
            return 1;
        }
        if (nh->nlmsg_type == NLMSG_ERROR) {
            errno = -((const struct nlmsgerr *)NLMSG_DATA(nh))->error;
            return -1;
        }
        if (nh->nlmsg_type == RTM_NEWQDISC) {
            run_link_note(link, nh);
        }
    }
    return 0;
}

/* Every qdisc of the hub, as `tc -s qdisc show` asks for them: RTM_GETQDISC, dumped. */
static bool run_link_dump(run_link_t *link)
{
    struct {
        struct nlmsghdr nh;
        struct tcmsg    tcm;
    } req = {
        .nh  = {.nlmsg_len = sizeof(req), .nlmsg_type = RTM_GETQDISC,
                .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP, .nlmsg_seq = ++link->nl_seq},
        .tcm = {.tcm_family = AF_UNSPEC},
    };
    int done = 0;

    if (send(link->nl_fd, &req, sizeof(req), 0) != (ssize_t)sizeof(req)) {
        return false;
    }
    while (done == 0) {
        done = run_link_read(link);
        if (done < 0 && errno == EINTR) {
            done = 0;
        }
    }
    return done > 0;
}

/* One sample; a failure is reported and ends the sampling. */
static void run_link_take_sample(run_link_t *link)
{
    if (!run_link_dump(link)) {
        fprintf(stderr, "strata-run: reading the queues of the shaped links failed (%s); no "
                        "more samples\n", strerror(errno));
        close(link->nl_fd);
        link->nl_fd = -1;
        return;
    }
    link->samples++;
}

void run_link_sample(run_link_t *link, double now)
{
    if (link->nl_fd < 0 || now < link->next_sample) {
        return;
    }
    link->next_sample = now + RUN_LINK_SAMPLE_S;
    run_link_take_sample(link);
}

void run_link_report(run_link_t *link, FILE *out)
{
    run_link_queue_t *queue;

    if (link->rate_bps == 0 || link->num_queues == 0) {
        return;
    }
    if (link->nl_fd >= 0) {
        run_link_take_sample(link); /* the queues as the job ended */
    }
    fprintf(out, "strata-run: queues into the nodes (token buckets of the hub ports), %llu "
                 "samples, one every %.0f ms:\n",
            (unsigned long long)link->samples, RUN_LINK_SAMPLE_S * 1e3);
    for (int k = 0; k < link->num_queues; ++k) {
        queue = &link->queue[k];
        fprintf(out, "strata-run: link n%d: rate %s, delay %s, ", k, link->rate_text,
                link->delay_text[0] ? link->delay_text : "0ms");
        if (queue->seen) {
            fprintf(out, "mean backlog %llu bytes, max backlog %llu bytes (%u packets), "
                    "drops %u\n", (unsigned long long)(queue->sum_backlog / queue->num_samples),
                    (unsigned long long)queue->max_backlog, queue->max_packets, queue->drops);
        } else {
            fprintf(out, "backlog not sampled\n");
        }
    }
    fflush(out);
    if (link->nl_fd >= 0) {
        close(link->nl_fd);
        link->nl_fd = -1;
    }
}
