/*
 * strata-info: version, build options, device backends and transports compiled in (and
 * the transport a communicator would take here, and why), and with -c every configuration
 * variable with its default and meaning.
 */
#include "api/api.h"
#include "inter/transport.h"
#include "intra/intra.h"

#include <getopt.h>
#include <stdio.h>

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: strata-info [-c] [-h]\n"
            "Print strata's version and build options.\n"
            "  -c, --config   also list every STRATA_* variable: default, type, meaning\n"
            "  -h, --help     this text\n");
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

static void print_config(void)
{
    for (size_t i = 0; i < api_num_config_tables; ++i) {
        printf("\n# %s\n", api_config_tables[i]->layer);
        util_config_print(api_config_tables[i], stdout);
    }
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"config", no_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt, show_config = 0;

    while ((opt = getopt_long(argc, argv, "ch", options, NULL)) != -1) {
        switch (opt) {
        case 'c': show_config = 1; break;
        case 'h': usage(stdout); return 0;
        default:  usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "strata-info: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    api_config_warn_unknown();
    printf("strata %s\n", strata_get_version_string());
    printf("build: %s\n", strata_get_build_options());
    printf("device backends:");
    for (size_t i = 0; i < intra_device_count(); ++i) {
        const intra_device_ops_t *ops = intra_device_get(i);
        char reason[INTRA_REASON_LEN] = "";

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
