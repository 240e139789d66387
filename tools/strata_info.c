/*
 * strata-info: version, build options, device backends compiled in, and
 * with -c every configuration variable with its default and meaning.
 */
#include "api/api.h"
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
    if (show_config) {
        print_config();
    }
    return 0;
}
