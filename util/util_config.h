/*
 * Declarative configuration: each layer describes its STRATA_* variables in a table
 * (name, default as text, one-line doc, typed parser, offset into its config struct).
 * This module is the only code in strata that reads the environment.
 */
#ifndef STRATA_UTIL_CONFIG_H
#define STRATA_UTIL_CONFIG_H

#include <strata/types.h>

#include "util_reason.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define UTIL_CONFIG_ENV_PREFIX "STRATA_"
/** Variables under this prefix belong to strata's test suite and are never warned about. */
#define UTIL_CONFIG_TEST_PREFIX "STRATA_TEST_"

/** Field types and the C type each is stored as. */
typedef enum util_config_type {
    UTIL_CONFIG_INT,    /**< int64_t; decimal, optional sign */
    UTIL_CONFIG_SIZE,   /**< uint64_t bytes; "4096", "8k", "64KiB", "1m", "2g" (binary units) */
    UTIL_CONFIG_TIME,   /**< uint64_t nanoseconds; "10ms", "2s", "500us", "100ns", "1min" */
    UTIL_CONFIG_BOOL,   /**< bool; y/yes/on/true/1 or n/no/off/false/0 */
    UTIL_CONFIG_ENUM,   /**< int index into enum_names; case-insensitive */
    UTIL_CONFIG_STRING, /**< char *, owned by the struct: free with util_config_release */
    UTIL_CONFIG_REAL    /**< double; a finite decimal number, e.g. "2", "1.5", "2e-1", or
                             "auto", stored as NAN: the field's doc says what it gives */
} util_config_type_t;

/** One value of any field type, held outside a table's struct (util_config_parse_value's
 *  dst): the member the field's type names. */
typedef union util_config_value {
    int64_t  i64;   /* INT */
    uint64_t u64;   /* SIZE, TIME */
    bool     flag;  /* BOOL */
    int      index; /* ENUM */
    char    *str;   /* STRING: owned, free with util_config_value_release */
    double   real;  /* REAL */
} util_config_value_t;

typedef struct util_config_field {
    const char         *name;          /**< without the STRATA_ prefix, e.g. "LOG_LEVEL" */
    const char         *default_value; /**< text parsed like an environment value */
    const char         *doc;           /**< one line */
    util_config_type_t  type;
    size_t              offset;        /**< into the layer's config struct */
    const char *const  *enum_names;    /**< UTIL_CONFIG_ENUM only; NULL-terminated */
} util_config_field_t;

typedef struct util_config_table {
    const char                *layer;  /**< shown by strata-info -c */
    const util_config_field_t *fields;
    size_t                     num_fields;
    size_t                     struct_size;
} util_config_table_t;

/** The logging module's table (STRATA_LOG_LEVEL). */
extern const util_config_table_t util_log_config_table;

/**
 * Parse one value into dst (the field's storage). On error writes a one-line reason to
 * err (UTIL_REASON_LEN bytes) and leaves dst untouched.
 */
strata_status_t util_config_parse_value(const util_config_field_t *field, const char *text,
                                        void *dst, char *err);

/**
 * Fill config (table->struct_size bytes) from STRATA_<name> or the defaults. A malformed
 * variable is logged with its name and value and gives STRATA_ERR_CONFIG; config is then
 * left with nothing to release.
 */
strata_status_t util_config_read(const util_config_table_t *table, void *config);

/** util_config_read that logs nothing: the reason goes to err (UTIL_REASON_LEN). */
strata_status_t util_config_read_quiet(const util_config_table_t *table, void *config, char *err);

/** Free what a parsed value holds (a string's copy); the value is zeroed. */
void util_config_value_release(const util_config_field_t *field, util_config_value_t *value);

/** Free what util_config_read allocated (strings). Tolerates a zeroed struct. */
void util_config_release(const util_config_table_t *table, void *config);

/** Set one field by name (without prefix) from text, e.g. for a public config struct. */
strata_status_t util_config_set(const util_config_table_t *table, void *config,
                                const char *name, const char *text);

/**
 * Warn once about each STRATA_* variable in the environment that no table knows, naming
 * the closest known variable. Returns the number of unknown variables.
 */
int util_config_warn_unknown(const util_config_table_t *const *tables, size_t num_tables);

/** Closest known full variable name to `name` (or NULL if none is close). */
const char *util_config_closest_name(const util_config_table_t *const *tables,
                                     size_t num_tables, const char *name,
                                     char *buf, size_t buf_size);

/**
 * A variable strata reads but does not own (a launcher's RANK, SLURM_PROCID, ...); NULL
 * when unset. Kept here so that this module stays the only reader of the environment.
 */
const char *util_config_foreign(const char *name);

/** Print every variable of table: name, default, type, doc, and where the environment sets
 *  it the value that takes (or why it is refused); the allowed values of an enum. */
void util_config_print(const util_config_table_t *table, FILE *stream);

/** Format a value of the field from its storage as text that parses back to it (what
 *  util_config_print shows a set variable taking). */
void util_config_format_value(const util_config_field_t *field, const void *src,
                              char *buf, size_t buf_size);

#endif
