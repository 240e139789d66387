/*
 * strata_status_string: the one table of status names; util_reason, the one way to write
 * the reason that goes with a status (util_reason.h).
 */
#include <strata/types.h>

#include "util_reason.h"

#include <stdarg.h>
#include <stdio.h>

void util_reason(char *reason, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    util_vreason(reason, fmt, ap);
    va_end(ap);
}

void util_vreason(char *reason, const char *fmt, va_list ap)
{
    vsnprintf(reason, UTIL_REASON_LEN, fmt, ap);
}

STRATA_API const char *strata_status_string(strata_status_t status)
{
    switch (status) {
    case STRATA_OK:              return "success";
    case STRATA_INPROGRESS:      return "operation in progress";
    case STRATA_ERR_INVALID:     return "invalid argument";
    case STRATA_ERR_NO_MEMORY:   return "out of memory";
    case STRATA_ERR_UNSUPPORTED: return "operation not supported";
    case STRATA_ERR_TIMEOUT:     return "timed out";
    case STRATA_ERR_CANCELLED:   return "cancelled";
    case STRATA_ERR_NOT_FOUND:   return "not found";
    case STRATA_ERR_IO:          return "input/output error";
    case STRATA_ERR_INTERNAL:    return "internal error";
    case STRATA_ERR_BUSY:        return "resource busy";
    case STRATA_ERR_PEER_FAILED: return "peer failed";
    case STRATA_ERR_TRANSPORT:   return "transport error";
    case STRATA_ERR_BOOTSTRAP:   return "bootstrap failed";
    case STRATA_ERR_PARSE:       return "parse error";
    case STRATA_ERR_TOPOLOGY:    return "topology error";
    case STRATA_ERR_CONFIG:      return "invalid configuration";
    case STRATA_ERR_CAPACITY:    return "capacity exceeded";
    case STRATA_ERR_LAST:        break;
    }
    return "unknown status";
}
