/*
 * A program using strata as an application would, from an installed prefix only: the
 * public header and libstrata (shared or static, as its build chose). It checks that the
 * library it runs with is the version its header names, and prints what it linked.
 */
#include <strata/strata.h>

#include <stdio.h>
#include <string.h>

int main(void)
{
    unsigned major = 0, minor = 0, patch = 0;
    const char *invalid = strata_status_string(STRATA_ERR_INVALID);

    strata_get_version(&major, &minor, &patch);
    if (major != STRATA_VERSION_MAJOR || minor != STRATA_VERSION_MINOR ||
        patch != STRATA_VERSION_PATCH) {
        fprintf(stderr, "consumer: header says %d.%d.%d, library %u.%u.%u\n",
                STRATA_VERSION_MAJOR, STRATA_VERSION_MINOR, STRATA_VERSION_PATCH, major, minor,
                patch);
        return 1;
    }
    if (invalid == NULL || strcmp(invalid, strata_status_string(STRATA_OK)) == 0) {
        fprintf(stderr, "consumer: strata_status_string does not tell statuses apart\n");
        return 1;
    }
    printf("strata %s (%s)\n", strata_get_version_string(), strata_get_build_options());
    return 0;
}
