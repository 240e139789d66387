/*
 * api: what the public layer offers the tools: the list of every layer's config table.
 */
#ifndef STRATA_API_API_H
#define STRATA_API_API_H

#include "util/util.h"

extern const util_config_table_t api_bootstrap_config_table;
extern const util_config_table_t api_comm_config_table;

/** Every STRATA_* variable strata reads, table by table, for strata-info -c and warnings. */
extern const util_config_table_t *const api_config_tables[];
extern const size_t api_num_config_tables;

/** Warn, once per process, about STRATA_* variables no table knows (naming the closest). */
void api_config_warn_unknown(void);

#endif
