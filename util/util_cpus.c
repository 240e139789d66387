/*
 * CPU lists in the kernel's list form, turned into CPU sets.
 */
#include "util_cpus.h"

#include <ctype.h>
#include <stdlib.h>

/* One CPU number at *p, which moves past it; -1 if there is none or it is too large. */
static long util_cpus_number(const char **p)
{
    char *end;
    long cpu;

    if (!isdigit((unsigned char)**p)) {
        return -1;
    }
    cpu = strtol(*p, &end, 10);
    *p  = end;
    return cpu < CPU_SETSIZE ? cpu : -1;
}

strata_status_t util_cpus_parse(const char *list, cpu_set_t *set_p)
{
    const char *p = list;
    cpu_set_t set;

    CPU_ZERO(&set);
    if (list == NULL) {
        return STRATA_ERR_INVALID;
    }
    for (;;) {
        long first, last;

        while (*p == ' ') {
            ++p;
        }
        first = last = util_cpus_number(&p);
        if (first >= 0 && *p == '-') {
            ++p;
            last = util_cpus_number(&p);
        }
        if (first < 0 || last < first) {
            return STRATA_ERR_INVALID;
        }
        for (long cpu = first; cpu <= last; ++cpu) {
            CPU_SET((int)cpu, &set);
        }
        while (*p == ' ') {
            ++p;
        }
        if (*p != ',') {
            break;
        }
        ++p;
    }
    if (*p == '\n') {
        ++p;
    }
    if (*p != '\0') {
        return STRATA_ERR_INVALID;
    }
    *set_p = set;
    return STRATA_OK;
}
