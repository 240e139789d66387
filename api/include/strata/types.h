/*
 * strata's basic types: the status every call returns and its names, the element types of
 * MoE rows, the log levels. The library's bottom layer (util) needs these and nothing more
 * of the public API, so they live here; <strata/strata.h> includes this header.
 */
#ifndef STRATA_TYPES_H
#define STRATA_TYPES_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(STRATA_BUILDING_LIBRARY) && defined(__GNUC__)
#define STRATA_API __attribute__((visibility("default")))
#else
#define STRATA_API
#endif

/**
 * Result of every strata call. STRATA_OK is zero, STRATA_INPROGRESS positive,
 * errors negative and grouped by scope: -1..-19 generic, -20..-39 communication,
 * -40..-59 topology and configuration, -60..-79 MoE.
 */
typedef enum strata_status {
    STRATA_OK               = 0,
    STRATA_INPROGRESS       = 1,

    STRATA_ERR_INVALID      = -1,  /**< an argument or input value is invalid */
    STRATA_ERR_NO_MEMORY    = -2,  /**< an allocation failed */
    STRATA_ERR_UNSUPPORTED  = -3,  /**< the operation is not offered by this build or backend */
    STRATA_ERR_TIMEOUT      = -4,  /**< a bounded wait expired */
    STRATA_ERR_CANCELLED    = -5,  /**< the request was cancelled */
    STRATA_ERR_NOT_FOUND    = -6,  /**< a named object or file does not exist */
    STRATA_ERR_IO           = -7,  /**< reading or writing a file or socket failed */
    STRATA_ERR_INTERNAL     = -8,  /**< a bug: an invariant did not hold */
    STRATA_ERR_BUSY         = -9,  /**< the resource is in use; try again */

    STRATA_ERR_PEER_FAILED  = -20, /**< a peer died or went silent past the heartbeat bound */
    STRATA_ERR_TRANSPORT    = -21, /**< the transport (libfabric, verbs, UCX) reported an error */
    STRATA_ERR_BOOTSTRAP    = -22, /**< the rendezvous between ranks failed */

    STRATA_ERR_PARSE        = -40, /**< a file or value could not be parsed */
    STRATA_ERR_TOPOLOGY     = -41, /**< topology discovery or import failed */
    STRATA_ERR_CONFIG       = -42, /**< a configuration value is out of range or malformed */

    STRATA_ERR_CAPACITY     = -60, /**< a receive capacity would be exceeded */

    STRATA_ERR_LAST         = -100
} strata_status_t;

/** Name and one-line meaning of a status, e.g. "invalid argument". Never NULL. */
STRATA_API const char *strata_status_string(strata_status_t status);

/** Element types of MoE tokens and expert outputs. */
typedef enum strata_dtype {
    STRATA_DTYPE_BF16     = 0,
    STRATA_DTYPE_FP16     = 1,
    STRATA_DTYPE_FP32     = 2,
    STRATA_DTYPE_FP8_E4M3 = 3, /**< with one fp32 scale per 128 columns */
} strata_dtype_t;

typedef enum strata_log_level {
    STRATA_LOG_LEVEL_ERROR = 0,
    STRATA_LOG_LEVEL_WARN  = 1,
    STRATA_LOG_LEVEL_INFO  = 2,
    STRATA_LOG_LEVEL_DEBUG = 3,
    STRATA_LOG_LEVEL_TRACE = 4
} strata_log_level_t;

#ifdef __cplusplus
}
#endif

#endif
