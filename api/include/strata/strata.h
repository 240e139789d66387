/*
 * strata: one communicator for Mixture-of-Experts expert-parallel traffic.
 * Public API: status codes, version, configuration.
 */
#ifndef STRATA_STRATA_H
#define STRATA_STRATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(STRATA_BUILDING_LIBRARY) && defined(__GNUC__)
#define STRATA_API __attribute__((visibility("default")))
#else
#define STRATA_API
#endif

#define STRATA_VERSION_MAJOR 0
#define STRATA_VERSION_MINOR 1
#define STRATA_VERSION_PATCH 0
/** Single number for compile-time comparisons: 0xMMmmpp. */
#define STRATA_VERSION_CODE(major, minor, patch) (((major) << 16) | ((minor) << 8) | (patch))
#define STRATA_VERSION \
    STRATA_VERSION_CODE(STRATA_VERSION_MAJOR, STRATA_VERSION_MINOR, STRATA_VERSION_PATCH)

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

/** Version of the library actually loaded (may differ from the header's). */
STRATA_API void strata_get_version(unsigned *major_p, unsigned *minor_p, unsigned *patch_p);

/** "0.1.0", static storage. */
STRATA_API const char *strata_get_version_string(void);

/** Build options compiled into the library, e.g. "cuda=off hip=off verbs=on ucx=on sanitize=none". */
STRATA_API const char *strata_get_build_options(void);

typedef enum strata_log_level {
    STRATA_LOG_LEVEL_ERROR = 0,
    STRATA_LOG_LEVEL_WARN  = 1,
    STRATA_LOG_LEVEL_INFO  = 2,
    STRATA_LOG_LEVEL_DEBUG = 3,
    STRATA_LOG_LEVEL_TRACE = 4
} strata_log_level_t;

/** Bits of strata_config_t::field_mask: which fields the caller set. */
enum strata_config_field {
    STRATA_CONFIG_FIELD_LOG_LEVEL = 1u << 0,
    STRATA_CONFIG_FIELD_TOPO_FILE = 1u << 1
};

/**
 * Communicator configuration. Only fields named in field_mask are read; every other field
 * comes from its STRATA_* environment variable or, failing that, its default (see
 * `strata-info -c`). New fields are only ever appended, so a caller built against an older
 * header keeps working.
 */
typedef struct strata_config {
    uint64_t           field_mask;
    strata_log_level_t log_level; /**< STRATA_LOG_LEVEL */
    const char        *topo_file; /**< STRATA_TOPO_FILE: topology file instead of live discovery */
} strata_config_t;

#ifdef __cplusplus
}
#endif

#endif /* STRATA_STRATA_H */
