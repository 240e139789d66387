/*
 * api: what the built-in bootstrap's two files share: its STRATA_BOOTSTRAP_* settings
 * (read by api_bootstrap.c for the rendezvous, by api_bootstrap_env.c for the launchers).
 */
#ifndef STRATA_API_SRC_API_BOOTSTRAP_H
#define STRATA_API_SRC_API_BOOTSTRAP_H

#include <stdint.h>

/* The STRATA_BOOTSTRAP_* settings (api_bootstrap_config_table, api/api.h). */
typedef struct api_bootstrap_config {
    char    *addr;
    int64_t  port;
    uint64_t timeout_ns;
    char    *secret;
    char    *secret_file;
} api_bootstrap_config_t;

/** STRATA_BOOTSTRAP_TIMEOUT, which bounds every collective of a bootstrap strata makes (its
 *  default where the variable is unreadable). */
uint64_t api_bootstrap_timeout_ns(void);

#endif
