/*
 * strata-topo: what strata sees of a machine — GPUs, NICs, NUMA nodes, links, PCIe paths —
 * and which NICs each GPU will use. Live discovery, or a topology file with --file.
 */
#include "strata_topo.h"
#include "tool_cli.h"
#include "api/api.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

/* Exit codes (docs/strata-topo.md). */
enum {
    EXIT_TOPO_OK       = 0,
    EXIT_TOPO_LOAD     = 1, /* the topology could not be discovered or read */
    EXIT_TOPO_USAGE    = 2,
    EXIT_TOPO_INTERNAL = 3  /* out of memory, or output could not be written */
};

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: strata-topo [--file PATH] [--overlay PATH] [--json]\n"
            "Show the GPUs, NICs, NUMA nodes and links strata sees, the PCIe path between\n"
            "every GPU and NIC, and the NICs (rails) each GPU will use.\n"
            "\n"
            "  -f, --file PATH  read a topology file (hwloc XML or NCCL topology XML) instead\n"
            "                   of discovering this machine; STRATA_TOPO_FILE does the same\n"
            "  -o, --overlay PATH  apply an NCCL topology overlay (NCCL_TOPO_FILE style) onto\n"
            "                   the topology, matching devices by PCI bus id;\n"
            "                   STRATA_TOPO_OVERLAY does the same\n"
            "  -j, --json       print JSON (layout: docs/strata-topo.md)\n"
            "  -h, --help       this text\n"
            "  -V, --version    strata's version and build options\n"
            "\n"
            "Exit status: 0 shown, 1 topology could not be read, 2 bad usage, 3 internal error.\n");
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"file", required_argument, NULL, 'f'},
        {"overlay", required_argument, NULL, 'o'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    char err[UTIL_REASON_LEN];
    const char *file = NULL, *overlay = NULL;
    topo_rail_plan_t *plan;
    strata_status_t status;
    bool json = false;
    topo_t *topo;
    int opt;

    while ((opt = getopt_long(argc, argv, ":f:o:jhV", options, NULL)) != -1) {
        switch (opt) {
        case 'f': file = optarg; break;
        case 'o': overlay = optarg; break;
        case 'j': json = true; break;
        case 'h': usage(stdout); return EXIT_TOPO_OK;
        case 'V':
            tool_print_version("strata-topo", strata_get_version_string(),
                               strata_get_build_options());
            return EXIT_TOPO_OK;
        default:  return tool_option_error("strata-topo", argv, options, opt);
        }
    }
    if (optind < argc) {
        return tool_usage_error("strata-topo", "unexpected argument '%s'", argv[optind]);
    }
    api_config_warn_unknown();

    status = topo_open_with_overlay(file, overlay, &topo, err);
    if (status != STRATA_OK) {
        fprintf(stderr, "strata-topo: %s\n", err);
        return (status == STRATA_ERR_NO_MEMORY) ? EXIT_TOPO_INTERNAL : EXIT_TOPO_LOAD;
    }
    status = topo_rail_plan_create(topo, &plan);
    if (status != STRATA_OK) {
        fprintf(stderr, "strata-topo: rail plan: %s\n", strata_status_string(status));
        topo_destroy(topo);
        return EXIT_TOPO_INTERNAL;
    }
    if (json) {
        status = strata_topo_print_json(topo, plan, stdout);
    } else {
        strata_topo_print_table(topo, plan, stdout);
    }
    if (fflush(stdout) != 0 && status == STRATA_OK) {
        status = STRATA_ERR_IO;
    }
    topo_rail_plan_destroy(plan);
    topo_destroy(topo);
    if (status != STRATA_OK) {
        fprintf(stderr, "strata-topo: writing output: %s\n", strata_status_string(status));
        return EXIT_TOPO_INTERNAL;
    }
    return EXIT_TOPO_OK;
}
