/*
 * strata-info: version, build options, device backends and transports compiled in (and
 * the transport a communicator would take here, and why), and with -c every configuration
 * variable with its default and meaning. --check says what a communicator would choose on
 * this machine, step by step, without creating one.
 */
#include "strata_info.h"
#include "api/api.h"
#include "api/src/api_gpu.h"
#include "inter/transport.h"
#include "intra/intra.h"
#include "topo/topo.h"
#include "tool_cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: strata-info [-c | --check]\n"
            "       strata-info -h | -V\n");
    info_moe_memory_usage(out);
    fprintf(out,
            "Print strata's version and build options, the device backends and transports\n"
            "built in, and the transport a communicator would take here and why.\n"
            "\n"
            "  -c, --config   also list every STRATA_* variable: default, type, meaning, and\n"
            "                 the value a set one takes (or why it is refused)\n"
            "      --check    instead, what a communicator would choose on this machine, and\n"
            "                 why: topology, device backend and GPU (of LOCAL_RANK, else 0),\n"
            "                 transport, rails, progress. Creates none: no bootstrap, no peers.\n"
            "                 Exit 0 when one could be created, 1 with the reason when not\n"
            "  -h, --help     this text\n"
            "  -V, --version  strata's version and build options, on one line\n"
            "\n"
            "Exit status: 0 done, 1 --check found no communicator could be created (or\n"
            "--moe-memory no object of that shape), 2 bad usage.\n");
}

/* The transports strata knows: built or not, how each probes here, and what a
 * communicator would take (STRATA_INTER_TRANSPORT, auto by default) and why. */
static void print_transports(void)
{
    inter_engine_params_t engine;
    inter_transport_params_t params = {.world_size = 1, .msg_bytes = 4096};
    const inter_transport_ops_t *pick = NULL;
    char why[256];

    printf("transports:\n");
    for (int i = 0; inter_transport_known(i) != NULL; ++i) {
        const inter_transport_ops_t *ops = inter_transport_find(inter_transport_known(i));
        inter_probe_t probe = {0};

        if (ops == NULL) {
            printf("  %-6s not built in\n", inter_transport_known(i));
            continue;
        }
        ops->probe(&params, &probe);
        printf("  %-6s %s (score %d)\n", ops->name, probe.why, probe.score);
    }
    if (inter_engine_params_from_env(&engine) != STRATA_OK) {
        printf("transport: none (STRATA_INTER_* is invalid; see above)\n");
        return;
    }
    params.iface = engine.iface;
    if (inter_transport_select(engine.transport, &params, &pick, why, sizeof(why)) == STRATA_OK) {
        printf("transport: %s (%s)\n", pick->name, why);
    } else {
        printf("transport: none for STRATA_INTER_TRANSPORT=%s (see above)\n", engine.transport);
    }
}

/* --- --check: what a communicator would choose here, and why --------------------------- */

typedef struct info_check {
    int                          local_rank;   /* LOCAL_RANK, else 0 */
    int                          local_size;   /* LOCAL_WORLD_SIZE, else local_rank + 1 */
    topo_t                      *topo;
    topo_rail_plan_t            *plan;
    const intra_device_ops_t    *device;
    int                          gpu;          /* in the topology; -1: none */
    inter_engine_params_t        engine;
    bool                         rails_asked;  /* STRATA_INTER_RAILS set, not 0 */
    const inter_transport_ops_t *transport;    /* NULL: none could be chosen */
    char                         failure[512]; /* the first reason none could be created */
} info_check_t;

/* Print "what: none (reason)" and keep the first such reason for the last line. */
static void check_fail(info_check_t *check, const char *what, const char *fmt, ...)
{
    char reason[384];
    va_list args;

    va_start(args, fmt);
    vsnprintf(reason, sizeof(reason), fmt, args);
    va_end(args);
    printf("%s: none (%s)\n", what, reason);
    if (check->failure[0] == '\0') {
        snprintf(check->failure, sizeof(check->failure), "%s: %s", what, reason);
    }
}

/* A launcher's variable: an integer >= min, or fallback when unset; false otherwise. */
static bool check_env_int(const char *name, int fallback, int min, int *value_p)
{
    const char *text = util_config_foreign(name);
    char *end;
    long value;

    if (text == NULL) {
        *value_p = fallback;
        return true;
    }
    errno = 0;
    value = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < min || value > INT_MAX) {
        return false;
    }
    *value_p = (int)value;
    return true;
}

/* The rank to check, as torchrun and strata-run name it. A communicator numbers local
 * ranks itself (the ranks that share a node name, in rank order); these stand in. */
static bool check_local_rank(info_check_t *check)
{
    const char *rank = util_config_foreign("LOCAL_RANK");
    const char *size = util_config_foreign("LOCAL_WORLD_SIZE");

    if (!check_env_int("LOCAL_RANK", 0, 0, &check->local_rank) ||
        !check_env_int("LOCAL_WORLD_SIZE", UTIL_MIN(check->local_rank, INT_MAX - 1) + 1, 1,
                       &check->local_size) ||
        check->local_rank >= check->local_size) {
        check_fail(check, "local rank", "LOCAL_RANK=%s and LOCAL_WORLD_SIZE=%s: they must be "
                   "integers, 0 <= rank < size", rank ? rank : "(unset)",
                   size ? size : "(unset)");
        return false;
    }
    printf("local rank: %d of %d (LOCAL_RANK %s, LOCAL_WORLD_SIZE %s)\n", check->local_rank,
           check->local_size, rank ? rank : "unset", size ? size : "unset");
    return true;
}

static const char *check_gpu_model(const topo_gpu_t *gpu)
{
    return gpu->model[0] ? gpu->model : "(model not in the topology)";
}

static void check_print_gpus(const topo_t *topo)
{
    int num_gpus = topo_num_gpus(topo), same = 0;

    if (num_gpus == 0) {
        printf("gpus: 0 (none in the topology)\n");
        return;
    }
    for (int g = 0; g < num_gpus; ++g) {
        same += strcmp(topo_gpu(topo, g)->model, topo_gpu(topo, 0)->model) == 0;
    }
    printf("gpus: %d (%s %s%s)\n", num_gpus, topo_vendor_name(topo_gpu(topo, 0)->vendor),
           check_gpu_model(topo_gpu(topo, 0)), same == num_gpus ? "" : " and other models");
}

static void check_print_nics(const topo_t *topo)
{
    int num_nics = topo_num_nics(topo);

    printf("nics: %d (", num_nics);
    if (num_nics == 0) {
        printf("none in the topology");
    }
    for (int n = 0; n < num_nics; ++n) {
        const topo_nic_t *nic = topo_nic(topo, n);

        printf("%s%s %s", n ? ", " : "", nic->name[0] ? nic->name : nic->busid,
               topo_nic_kind_name(nic->kind));
    }
    printf(")\n");
}

/* An NCCL topology overlay the communicator applies (STRATA_TOPO_OVERLAY, or an overlay
 * named by STRATA_TOPO_FILE) changes the rails: say which and what it matched. */
static void check_print_overlay(const topo_t *topo)
{
    const topo_overlay_report_t *overlay = topo_overlay(topo);

    if (overlay != NULL) {
        printf("topology overlay: %s (%d GPUs and %d NICs matched by PCI bus id, %d of its "
               "devices not here)\n", overlay->path, overlay->matched_gpus,
               overlay->matched_nics, overlay->unmatched);
    }
}

/* The topology a communicator opens (STRATA_TOPO_FILE, else discovery) and its rail plan. */
static bool check_topology(info_check_t *check)
{
    char err[UTIL_REASON_LEN];
    strata_status_t status = topo_open(NULL, &check->topo, err);

    if (status != STRATA_OK) {
        check_fail(check, "topology", "%s", err);
        return false;
    }
    if (topo_source(check->topo) == TOPO_SOURCE_DISCOVERY) {
        printf("topology: this machine (discovered by hwloc; STRATA_TOPO_FILE unset)\n");
    } else {
        printf("topology: %s (STRATA_TOPO_FILE, %s)\n", topo_description(check->topo),
               topo_source_name(topo_source(check->topo)));
    }
    check_print_overlay(check->topo);
    check_print_gpus(check->topo);
    check_print_nics(check->topo);
    status = topo_rail_plan_create(check->topo, &check->plan);
    if (status != STRATA_OK) {
        check_fail(check, "rail plan", "%s", strata_status_string(status));
        return false;
    }
    return true;
}

/* The backend (api_gpu_backend's choice) and the GPU of the local rank (api_gpu_pick). */
static void check_device(info_check_t *check)
{
    char why[UTIL_REASON_LEN], reason[UTIL_REASON_LEN] = "";
    const topo_gpu_t *gpu;

    check->device = api_gpu_backend_explain(check->topo, why);
    printf("device backend: %s (%s)\n", check->device->name, why);
    api_gpu_request_t request = {.local_rank = check->local_rank, .ordinal = -1};
    api_gpu_t picked = {.topo_gpu = -1, .ordinal = -1};

    check->gpu = -1;
    if (api_gpu_pick(check->device, check->topo, &request, &picked, reason) != STRATA_OK) {
        check_fail(check, "gpu", "%s", reason);
        return;
    }
    check->gpu = picked.topo_gpu;
    if (check->gpu < 0) {
        printf("gpu: none (the topology has no GPU)\n");
        return;
    }
    gpu = topo_gpu(check->topo, check->gpu);
    if (check->device->device_select == NULL) {
        printf("gpu: %d (%s %s; local rank %d takes the topology's %d GPUs in turn)\n",
               check->gpu, gpu->busid, check_gpu_model(gpu), check->local_rank,
               topo_num_gpus(check->topo));
    } else {
        printf("gpu: %d (%s %s; local rank %d's turn among the GPUs the %s runtime shows, "
               "found in the topology by PCI address; STRATA_GPU, or a GPU the caller made "
               "current, takes its place)\n", check->gpu, gpu->busid,
               check_gpu_model(gpu), check->local_rank, check->device->name);
    }
}

/* The engine's parameters as the communicator makes them: STRATA_INTER_*, then the GPU's. */
static bool check_engine(info_check_t *check)
{
    if (inter_engine_params_from_env(&check->engine) != STRATA_OK) {
        check_fail(check, "engine", "a STRATA_INTER_* variable is invalid: the error line "
                   "above says which");
        return false;
    }
    check->engine.rank       = 0;
    check->engine.world_size = 1;
    check->engine.local_size = check->local_size;
    check->rails_asked       = check->engine.num_rails != 0;
    api_gpu_engine_params(check->device, check->topo, check->plan, check->gpu, &check->engine);
    if (inter_engine_params_check(&check->engine) != STRATA_OK) {
        check_fail(check, "engine", "STRATA_INTER_* values out of range: the error line "
                   "above says which");
        return false;
    }
    return true;
}

/* STRATA_INTER_TRANSPORT's choice, probed with rail 0's parameters as the engine does. */
static bool check_transport(info_check_t *check)
{
    inter_transport_params_t params;
    char why[256] = "";

    inter_engine_rail_params(&check->engine, 0, &params);
    if (inter_transport_select(check->engine.transport, &params, &check->transport, why,
                               sizeof(why)) != STRATA_OK) {
        check_fail(check, "transport", "%s", why);
        return false;
    }
    printf("transport: %s (%s)\n", check->transport->name, why);
    return true;
}

/* How the NIC would reach the GPU's memory (the network area of a MoE object). */
static void check_gpu_memory(const info_check_t *check)
{
    const char *module = inter_peer_memory_module(check->engine.device_memory);

    if (check->engine.device_memory == INTER_MEM_HOST) {
        printf("gpu memory: none (the %s backend)\n", check->device->name);
    } else if (module != NULL) {
        printf("gpu memory: registered through the peer-memory module (%s)\n", module);
    } else if (check->device->mem_export_dmabuf != NULL) {
        printf("gpu memory: registered by dma-buf where the NIC driver takes it (no "
               "peer-memory module; verbs, and libfabric's FI_MR_DMABUF from 1.20), else the "
               "pinned host bounce buffer\n");
    } else {
        printf("gpu memory: the pinned host bounce buffer (no peer-memory module, and the %s "
               "backend exports no dma-buf)\n", check->device->name);
    }
}

/* How many rails, from what: STRATA_INTER_RAILS, else the NICs the plan gives the GPU. */
static void check_rail_count(const info_check_t *check)
{
    const topo_rail_t *rail = (check->gpu >= 0) ? &check->plan->rails[check->gpu] : NULL;
    char nics[INTER_MAX_RAILS * 80] = "";
    size_t used = 0;

    for (int r = 0; rail != NULL && r < rail->num_rails && r < INTER_MAX_RAILS; ++r) {
        const topo_nic_t *nic = topo_nic(check->topo, rail->nics[r]);

        /* A NIC the topology gives no device name (NCCL files of some clouds) cannot be
         * asked for: its rail takes the transport's default device, as with no plan. */
        used += (size_t)snprintf(nics + used, sizeof(nics) - used, "%s%s%s", r ? ", " : "",
                                 nic->name[0] ? nic->name : nic->busid,
                                 nic->name[0] ? "" : " (unnamed)");
        used = UTIL_MIN(used, sizeof(nics) - 1);
    }
    printf("rails: %d (", check->engine.num_rails);
    if (check->rails_asked) {
        printf("STRATA_INTER_RAILS=%d; ", check->engine.num_rails);
    }
    if (rail == NULL) {
        printf("no GPU, so no planned NIC: the transport's default device)\n");
    } else if (rail->num_rails == 0) {
        printf("the rail plan gives GPU %d no NIC: the transport's default device)\n",
               check->gpu);
    } else {
        printf("%sthe rail plan gives GPU %d %s)\n", check->rails_asked ? "" : "one per NIC: ",
               check->gpu, nics);
    }
}

/* Each rail as the transport would open it, where it can say so before opening. */
static void check_rails(info_check_t *check)
{
    for (int r = 0; r < check->engine.num_rails; ++r) {
        inter_transport_params_t params;
        char what[320], label[16];

        inter_engine_rail_params(&check->engine, r, &params);
        snprintf(label, sizeof(label), "rail %d", r);
        if (check->transport->preview == NULL) {
            printf("%s: %s %s (%s does not say more before it opens)\n", label,
                   check->transport->name, params.iface[0] ? params.iface : "default device",
                   check->transport->name);
        } else if (check->transport->preview(&params, what, sizeof(what)) != STRATA_OK) {
            check_fail(check, label, "%s: %s", check->transport->name, what);
        } else {
            printf("%s: %s %s\n", label, check->transport->name, what);
        }
    }
}

static void check_progress(const info_check_t *check)
{
    static const char *const modes[] = {"auto", "thread", "caller"};
    int cores = inter_engine_cores(), ranks = UTIL_MAX(check->engine.local_size, 1);
    bool caller = inter_engine_progress_by_caller(&check->engine, cores);

    if (check->engine.progress != INTER_PROGRESS_AUTO) {
        printf("progress: %s (STRATA_INTER_PROGRESS=%s)\n", caller ? "caller" : "thread",
               modes[check->engine.progress]);
        return;
    }
    printf("progress: %s (auto: %d core%s for %d rank%s of this node, %s 2 per rank)\n",
           caller ? "caller" : "thread", cores, cores == 1 ? "" : "s", ranks,
           ranks == 1 ? "" : "s", caller ? "fewer than" : "at least");
}

/* strata-info --check: every step a communicator takes on this rank but the bootstrap and
 * the peers, each said as "what: choice (why)"; 0 when one would be created, 1 when not. */
static int info_check(void)
{
    info_check_t check = {.gpu = -1};
    bool ok;

    printf("strata: %s (%s)\n", strata_get_version_string(), strata_get_build_options());
    ok = check_local_rank(&check) && check_topology(&check);
    if (ok) {
        check_device(&check);
        ok = check_engine(&check);
    }
    if (ok) {
        bool transport = check_transport(&check);

        check_rail_count(&check);
        if (transport) {
            check_rails(&check);
        }
        check_gpu_memory(&check);
        check_progress(&check);
    }
    topo_rail_plan_destroy(check.plan);
    topo_destroy(check.topo);
    if (check.failure[0] != '\0') {
        printf("communicator: none (%s)\n", check.failure);
        return 1;
    }
    printf("communicator: can be created (as far as one rank can tell: no bootstrap, no "
           "peers)\n");
    return 0;
}

static void print_config(void)
{
    for (size_t i = 0; i < api_num_config_tables; ++i) {
        printf("\n# %s\n", api_config_tables[i]->layer);
        util_config_print(api_config_tables[i], stdout);
    }
}

int main(int argc, char **argv)
{
    enum { OPT_CHECK = 256 };
    static const struct option options[] = {
        {"config", no_argument, NULL, 'c'},
        {"check", no_argument, NULL, OPT_CHECK},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int opt, show_config = 0, check = 0;

    if (argc > 1 && strcmp(argv[1], "--moe-memory") == 0) {
        return info_moe_memory(argc - 1, argv + 1);
    }

    while ((opt = getopt_long(argc, argv, ":chV", options, NULL)) != -1) {
        switch (opt) {
        case 'c': show_config = 1; break;
        case OPT_CHECK: check = 1; break;
        case 'h': usage(stdout); return 0;
        case 'V':
            tool_print_version("strata-info", strata_get_version_string(),
                               strata_get_build_options());
            return 0;
        default:  return tool_option_error("strata-info", argv, options, opt);
        }
    }
    if (optind < argc) {
        return tool_usage_error("strata-info", "unexpected argument '%s'", argv[optind]);
    }
    if (check && show_config) {
        return tool_usage_error("strata-info", "--check and --config are separate runs");
    }
    api_config_warn_unknown();
    if (check) {
        return info_check();
    }
    printf("strata %s\n", strata_get_version_string());
    printf("build: %s\n", strata_get_build_options());
    printf("device backends:");
    for (size_t i = 0; i < intra_device_count(); ++i) {
        const intra_device_ops_t *ops = intra_device_get(i);
        char reason[UTIL_REASON_LEN] = "";

        if (ops->probe(reason) == STRATA_OK) {
            printf(" %s", ops->name);
        } else {
            printf(" %s (unusable here: %s)", ops->name, reason);
        }
    }
    printf("\n");
    print_transports();
    if (show_config) {
        print_config();
    }
    return 0;
}
