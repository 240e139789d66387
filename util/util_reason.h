/*
 * The one way a reason travels with an error across layers: a function that can fail for
 * a reason its caller should show takes a buffer of UTIL_REASON_LEN bytes (named err, why
 * or reason), writes one line into it with util_reason, logs nothing itself unless its
 * contract says so, and returns a status. The caller decides whether and where to print it.
 */
#ifndef STRATA_UTIL_UTIL_REASON_H
#define STRATA_UTIL_UTIL_REASON_H

#include "util_compiler.h"

#include <stdarg.h>
#include <stddef.h>

/* Bytes of every reason buffer, terminator included. */
#define UTIL_REASON_LEN 512

/** Formats one line into reason (UTIL_REASON_LEN bytes), truncating what does not fit. */
void util_reason(char *reason, const char *fmt, ...) UTIL_PRINTF(2, 3);

/** The same from a va_list, for functions that format their callers' reasons. */
void util_vreason(char *reason, const char *fmt, va_list ap) UTIL_PRINTF(2, 0);

#endif
