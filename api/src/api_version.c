/*
 * Version and build-option queries, and the calling thread's last error.
 */
#include <strata/strata.h>

#include "util/util_log.h"

#define STRATA_STR2(x) #x
#define STRATA_STR(x)  STRATA_STR2(x)

STRATA_API void strata_get_version(unsigned *major_p, unsigned *minor_p, unsigned *patch_p)
{
    if (major_p) {
        *major_p = STRATA_VERSION_MAJOR;
    }
    if (minor_p) {
        *minor_p = STRATA_VERSION_MINOR;
    }
    if (patch_p) {
        *patch_p = STRATA_VERSION_PATCH;
    }
}

STRATA_API const char *strata_get_version_string(void)
{
    return STRATA_STR(STRATA_VERSION_MAJOR) "." STRATA_STR(STRATA_VERSION_MINOR) "."
           STRATA_STR(STRATA_VERSION_PATCH);
}

STRATA_API const char *strata_get_build_options(void)
{
    return STRATA_BUILD_OPTIONS; /* set by CMake from the STRATA_WITH_* options */
}

STRATA_API const char *strata_get_last_error(void)
{
    return util_log_last_error();
}

STRATA_API void strata_clear_last_error(void)
{
    util_log_clear_last_error();
}
