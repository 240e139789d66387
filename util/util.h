/*
 * util: the base services every strata layer uses. Other layers include only this header.
 */
#ifndef STRATA_UTIL_UTIL_H
#define STRATA_UTIL_UTIL_H

#include "util_compiler.h"
#include "util_log.h"
#include "util_config.h"
#include "util_clock.h"
#include "util_histogram.h"
#include "util_sock.h"
#include "util_crypto.h"
#include "util_ring.h"
#include "util_freelist.h"
#include "util_file.h"
#include "util_reason.h"

#endif
