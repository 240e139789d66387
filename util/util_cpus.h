/*
 * CPU lists in the kernel's list form ("0-23,48-71", as sysfs and the topology give them),
 * turned into CPU sets for pinning threads.
 */
#ifndef STRATA_UTIL_CPUS_H
#define STRATA_UTIL_CPUS_H

#include <strata/types.h>

#include <sched.h> /* cpu_set_t: the build defines _GNU_SOURCE */

/**
 * The CPUs of list ("0-3,8,10-11"; spaces and a trailing newline allowed) in *set_p, set only
 * on success. STRATA_ERR_INVALID for an empty list, a malformed one, a range that runs
 * backwards, or a CPU at or past CPU_SETSIZE.
 */
strata_status_t util_cpus_parse(const char *list, cpu_set_t *set_p);

#endif
