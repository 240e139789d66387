/*
 * Declarative configuration table: typed parsers, environment lookup, unknown-variable
 * warnings with the closest known name.
 */
#include "util_config.h"
#include "util_compiler.h"
#include "util_log.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern char **environ;

#define UTIL_CONFIG_NAME_MAX 128

typedef struct util_config_unit {
    const char *suffix;
    uint64_t    multiplier;
} util_config_unit_t;

static const util_config_unit_t util_config_size_units[] = {
    {"", 1}, {"b", 1},
    {"k", 1ull << 10}, {"kb", 1ull << 10}, {"kib", 1ull << 10},
    {"m", 1ull << 20}, {"mb", 1ull << 20}, {"mib", 1ull << 20},
    {"g", 1ull << 30}, {"gb", 1ull << 30}, {"gib", 1ull << 30},
    {"t", 1ull << 40}, {"tb", 1ull << 40}, {"tib", 1ull << 40},
};

static const util_config_unit_t util_config_time_units[] = {
    {"ns", 1}, {"us", 1000ull}, {"ms", 1000000ull}, {"s", 1000000000ull},
    {"min", 60ull * 1000000000ull},
};

/* Messages quote the value as given: control characters (a newline in an environment
 * value) would split the one log line, so they show as '?'. */
static void util_config_one_line(char *message)
{
    for (; *message != '\0'; ++message) {
        if ((unsigned char)*message < 0x20 || *message == 0x7f) {
            *message = '?';
        }
    }
}

static bool util_config_lookup_unit(const util_config_unit_t *units, size_t num_units,
                                    const char *suffix, uint64_t *multiplier_p)
{
    for (size_t i = 0; i < num_units; ++i) {
        if (strcasecmp(units[i].suffix, suffix) == 0) {
            *multiplier_p = units[i].multiplier;
            return true;
        }
    }
    return false;
}

/* "<unsigned integer><unit>" with the unit looked up in units; overflow is an error. */
static strata_status_t util_config_parse_scaled(const char *text, const util_config_unit_t *units,
                                                size_t num_units, const char *what,
                                                uint64_t *value_p, char *err)
{
    uint64_t multiplier;
    unsigned long long number;
    char *end;

    if (!isdigit((unsigned char)text[0])) {
        util_reason(err, "'%s' is not a %s (expected a number, e.g. %s)", text, what,
                    (units == util_config_time_units) ? "10ms" : "64k");
        return STRATA_ERR_CONFIG;
    }
    errno  = 0;
    number = strtoull(text, &end, 10);
    if (errno == ERANGE) {
        util_reason(err, "'%s' is too large for a %s", text, what);
        return STRATA_ERR_CONFIG;
    }
    if (!util_config_lookup_unit(units, num_units, end, &multiplier)) {
        util_reason(err, "'%s' has an unknown %s unit '%s'", text, what, end);
        return STRATA_ERR_CONFIG;
    }
    if (number > UINT64_MAX / multiplier) {
        util_reason(err, "'%s' is too large for a %s", text, what);
        return STRATA_ERR_CONFIG;
    }
    *value_p = (uint64_t)number * multiplier;
    return STRATA_OK;
}

static strata_status_t util_config_parse_int(const char *text, int64_t *value_p, char *err)
{
    long long number;
    char *end;

    errno  = 0;
    number = strtoll(text, &end, 10);
    if (end == text || *end != '\0') {
        util_reason(err, "'%s' is not an integer", text);
        return STRATA_ERR_CONFIG;
    }
    if (errno == ERANGE) {
        util_reason(err, "'%s' is out of range for an integer", text);
        return STRATA_ERR_CONFIG;
    }
    *value_p = number;
    return STRATA_OK;
}

static strata_status_t util_config_parse_real(const char *text, double *value_p, char *err)
{
    double number;
    char *end;

    if (strcasecmp(text, "auto") == 0) {
        *value_p = NAN; /* the field's user decides */
        return STRATA_OK;
    }
    errno  = 0;
    number = strtod(text, &end);
    if (end == text || *end != '\0' || isspace((unsigned char)text[0])) {
        util_reason(err, "'%s' is not a number", text);
        return STRATA_ERR_CONFIG;
    }
    if (errno == ERANGE || !isfinite(number)) {
        util_reason(err, "'%s' is not a finite number", text);
        return STRATA_ERR_CONFIG;
    }
    *value_p = number;
    return STRATA_OK;
}

static strata_status_t util_config_parse_bool(const char *text, bool *value_p, char *err)
{
    static const char *const yes[] = {"y", "yes", "on", "true", "1"};
    static const char *const no[]  = {"n", "no", "off", "false", "0"};

    for (size_t i = 0; i < UTIL_ARRAY_SIZE(yes); ++i) {
        if (strcasecmp(text, yes[i]) == 0) {
            *value_p = true;
            return STRATA_OK;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *value_p = false;
            return STRATA_OK;
        }
    }
    util_reason(err, "'%s' is not a boolean (use yes/no, on/off, true/false, 1/0)", text);
    return STRATA_ERR_CONFIG;
}

static strata_status_t util_config_parse_enum(const util_config_field_t *field, const char *text,
                                              int *value_p, char *err)
{
    size_t len = 0;

    for (int i = 0; field->enum_names[i] != NULL; ++i) {
        if (strcasecmp(text, field->enum_names[i]) == 0) {
            *value_p = i;
            return STRATA_OK;
        }
    }
    len += (size_t)snprintf(err, UTIL_REASON_LEN, "'%s' is not one of:", text);
    for (int i = 0; field->enum_names[i] != NULL && len < UTIL_REASON_LEN; ++i) {
        len += (size_t)snprintf(err + len, UTIL_REASON_LEN - len, " %s",
                                field->enum_names[i]);
    }
    return STRATA_ERR_CONFIG;
}

static strata_status_t util_config_parse_typed(const util_config_field_t *field,
                                              const char *text, void *dst, char *err)
{
    strata_status_t status;
    uint64_t u64;
    int64_t i64;
    double real;
    bool flag;
    int index;
    char *copy;

    switch (field->type) {
    case UTIL_CONFIG_INT:
        status = util_config_parse_int(text, &i64, err);
        if (status == STRATA_OK) {
            memcpy(dst, &i64, sizeof(i64));
        }
        return status;
    case UTIL_CONFIG_SIZE:
        status = util_config_parse_scaled(text, util_config_size_units,
                                          UTIL_ARRAY_SIZE(util_config_size_units), "size", &u64,
                                          err);
        if (status == STRATA_OK) {
            memcpy(dst, &u64, sizeof(u64));
        }
        return status;
    case UTIL_CONFIG_TIME:
        status = util_config_parse_scaled(text, util_config_time_units,
                                          UTIL_ARRAY_SIZE(util_config_time_units), "time", &u64,
                                          err);
        if (status == STRATA_OK) {
            memcpy(dst, &u64, sizeof(u64));
        }
        return status;
    case UTIL_CONFIG_BOOL:
        status = util_config_parse_bool(text, &flag, err);
        if (status == STRATA_OK) {
            memcpy(dst, &flag, sizeof(flag));
        }
        return status;
    case UTIL_CONFIG_ENUM:
        status = util_config_parse_enum(field, text, &index, err);
        if (status == STRATA_OK) {
            memcpy(dst, &index, sizeof(index));
        }
        return status;
    case UTIL_CONFIG_STRING:
        copy = strdup(text);
        if (copy == NULL) {
            util_reason(err, "out of memory copying a string value");
            return STRATA_ERR_NO_MEMORY;
        }
        memcpy(dst, &copy, sizeof(copy));
        return STRATA_OK;
    case UTIL_CONFIG_REAL:
        status = util_config_parse_real(text, &real, err);
        if (status == STRATA_OK) {
            memcpy(dst, &real, sizeof(real));
        }
        return status;
    }
    util_reason(err, "field has an unknown type %d", (int)field->type);
    return STRATA_ERR_INTERNAL;
}

strata_status_t util_config_parse_value(const util_config_field_t *field, const char *text,
                                        void *dst, char *err)
{
    strata_status_t status = util_config_parse_typed(field, text, dst, err);

    if (status != STRATA_OK) {
        util_config_one_line(err);
    }
    return status;
}

static void util_config_env_name(const util_config_field_t *field, char *buf, size_t size)
{
    snprintf(buf, size, "%s%s", UTIL_CONFIG_ENV_PREFIX, field->name);
}

static void util_config_release_field(const util_config_field_t *field, void *config)
{
    char **str;

    if (field->type == UTIL_CONFIG_STRING) {
        str = (char **)((char *)config + field->offset);
        free(*str);
        *str = NULL;
    }
}

void util_config_value_release(const util_config_field_t *field, util_config_value_t *value)
{
    if (field->type == UTIL_CONFIG_STRING) {
        free(value->str);
    }
    *value = (util_config_value_t){0};
}

void util_config_release(const util_config_table_t *table, void *config)
{
    if (config == NULL) {
        return;
    }
    for (size_t i = 0; i < table->num_fields; ++i) {
        util_config_release_field(&table->fields[i], config);
    }
}

strata_status_t util_config_read(const util_config_table_t *table, void *config)
{
    char err[UTIL_REASON_LEN];
    strata_status_t status = util_config_read_quiet(table, config, err);

    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("%s", err);
    }
    return status;
}

strata_status_t util_config_read_quiet(const util_config_table_t *table, void *config, char *err)
{
    char name[UTIL_CONFIG_NAME_MAX], reason[UTIL_REASON_LEN];
    const util_config_field_t *field;
    strata_status_t status;
    const char *text;

    memset(config, 0, table->struct_size);
    for (size_t i = 0; i < table->num_fields; ++i) {
        field = &table->fields[i];
        util_config_env_name(field, name, sizeof(name));
        text = getenv(name);
        if (text == NULL) {
            text = field->default_value;
        }
        status = util_config_parse_value(field, text, (char *)config + field->offset, reason);
        if (status != STRATA_OK) {
            util_reason(err, "%.100s=%.100s: %.250s", name, text, reason);
            util_config_one_line(err);
            util_config_release(table, config);
            return status;
        }
    }
    return STRATA_OK;
}

strata_status_t util_config_set(const util_config_table_t *table, void *config,
                                const char *name, const char *text)
{
    char err[UTIL_REASON_LEN];
    const util_config_field_t *field;
    strata_status_t status;
    void *dst;

    for (size_t i = 0; i < table->num_fields; ++i) {
        field = &table->fields[i];
        if (strcmp(field->name, name) != 0) {
            continue;
        }
        dst = (char *)config + field->offset;
        if (field->type == UTIL_CONFIG_STRING) {
            char *old = *(char **)dst;
            status    = util_config_parse_value(field, text, dst, err);
            if (status == STRATA_OK) {
                free(old);
            }
        } else {
            status = util_config_parse_value(field, text, dst, err);
        }
        if (status != STRATA_OK) {
            char message[UTIL_REASON_LEN];

            snprintf(message, sizeof(message), "%s%.100s=%.100s: %.250s",
                     UTIL_CONFIG_ENV_PREFIX, name, text, err);
            util_config_one_line(message);
            UTIL_LOG_ERROR("%s", message);
        }
        return status;
    }
    UTIL_LOG_ERROR("no configuration variable %s%s in %s", UTIL_CONFIG_ENV_PREFIX, name,
                   table->layer);
    return STRATA_ERR_INVALID;
}

/* Levenshtein distance, case-insensitive, bounded to names of UTIL_CONFIG_NAME_MAX. */
static size_t util_config_edit_distance(const char *a, const char *b)
{
    size_t row[UTIL_CONFIG_NAME_MAX + 1];
    size_t la = strlen(a), lb = strlen(b);
    size_t diag, up, cost;

    if (la > UTIL_CONFIG_NAME_MAX || lb > UTIL_CONFIG_NAME_MAX) {
        return SIZE_MAX;
    }
    for (size_t j = 0; j <= lb; ++j) {
        row[j] = j;
    }
    for (size_t i = 1; i <= la; ++i) {
        diag   = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; ++j) {
            up     = row[j];
            cost   = (tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1])) ? 0 : 1;
            row[j] = UTIL_MIN(UTIL_MIN(row[j] + 1, row[j - 1] + 1), diag + cost);
            diag   = up;
        }
    }
    return row[lb];
}

const char *util_config_closest_name(const util_config_table_t *const *tables,
                                     size_t num_tables, const char *name, char *buf,
                                     size_t buf_size)
{
    char candidate[UTIL_CONFIG_NAME_MAX];
    size_t best = SIZE_MAX, distance, limit;

    /* Suggest only names a typo away: at most a third of the name may differ. */
    limit = UTIL_MAX(strlen(name) / 3, 2);
    for (size_t t = 0; t < num_tables; ++t) {
        for (size_t i = 0; i < tables[t]->num_fields; ++i) {
            util_config_env_name(&tables[t]->fields[i], candidate, sizeof(candidate));
            distance = util_config_edit_distance(name, candidate);
            if (distance < best && distance <= limit) {
                best = distance;
                snprintf(buf, buf_size, "%s", candidate);
            }
        }
    }
    return (best == SIZE_MAX) ? NULL : buf;
}

static bool util_config_is_known(const util_config_table_t *const *tables, size_t num_tables,
                                 const char *name, size_t name_len)
{
    char candidate[UTIL_CONFIG_NAME_MAX];

    for (size_t t = 0; t < num_tables; ++t) {
        for (size_t i = 0; i < tables[t]->num_fields; ++i) {
            util_config_env_name(&tables[t]->fields[i], candidate, sizeof(candidate));
            if (strlen(candidate) == name_len && strncmp(candidate, name, name_len) == 0) {
                return true;
            }
        }
    }
    return false;
}

int util_config_warn_unknown(const util_config_table_t *const *tables, size_t num_tables)
{
    char name[UTIL_CONFIG_NAME_MAX];
    char suggestion[UTIL_CONFIG_NAME_MAX];
    size_t prefix_len = strlen(UTIL_CONFIG_ENV_PREFIX);
    const char *eq;
    int unknown = 0;

    for (char **env = environ; env != NULL && *env != NULL; ++env) {
        if (strncmp(*env, UTIL_CONFIG_ENV_PREFIX, prefix_len) != 0 ||
            strncmp(*env, UTIL_CONFIG_TEST_PREFIX, strlen(UTIL_CONFIG_TEST_PREFIX)) == 0) {
            continue;
        }
        eq = strchr(*env, '=');
        if (eq == NULL || util_config_is_known(tables, num_tables, *env, (size_t)(eq - *env))) {
            continue;
        }
        snprintf(name, sizeof(name), "%.*s", (int)(eq - *env), *env);
        ++unknown;
        if (util_config_closest_name(tables, num_tables, name, suggestion, sizeof(suggestion))) {
            UTIL_LOG_WARN("unknown variable %s (did you mean %s?)", name, suggestion);
        } else {
            UTIL_LOG_WARN("unknown variable %s (strata-info -c lists them all)", name);
        }
    }
    return unknown;
}

const char *util_config_foreign(const char *name)
{
    return getenv(name);
}

static const char *util_config_type_name(util_config_type_t type)
{
    switch (type) {
    case UTIL_CONFIG_INT:    return "integer";
    case UTIL_CONFIG_SIZE:   return "size";
    case UTIL_CONFIG_TIME:   return "time";
    case UTIL_CONFIG_BOOL:   return "bool";
    case UTIL_CONFIG_ENUM:   return "enum";
    case UTIL_CONFIG_STRING: return "string";
    case UTIL_CONFIG_REAL:   return "number";
    }
    return "?";
}

void util_config_format_value(const util_config_field_t *field, const void *src, char *buf,
                              size_t buf_size)
{
    const char *str;
    uint64_t u64;
    int64_t i64;
    double real;
    bool flag;
    int index;

    switch (field->type) {
    case UTIL_CONFIG_INT:
        memcpy(&i64, src, sizeof(i64));
        snprintf(buf, buf_size, "%" PRId64, i64);
        return;
    case UTIL_CONFIG_SIZE:
        memcpy(&u64, src, sizeof(u64));
        snprintf(buf, buf_size, "%" PRIu64, u64);
        return;
    case UTIL_CONFIG_TIME:
        memcpy(&u64, src, sizeof(u64));
        snprintf(buf, buf_size, "%" PRIu64 "ns", u64);
        return;
    case UTIL_CONFIG_BOOL:
        memcpy(&flag, src, sizeof(flag));
        snprintf(buf, buf_size, "%s", flag ? "yes" : "no");
        return;
    case UTIL_CONFIG_ENUM:
        memcpy(&index, src, sizeof(index));
        for (int i = 0; i <= index; ++i) {
            if (index < 0 || field->enum_names[i] == NULL) {
                snprintf(buf, buf_size, "?");
                return;
            }
        }
        snprintf(buf, buf_size, "%s", field->enum_names[index]);
        return;
    case UTIL_CONFIG_STRING:
        memcpy(&str, src, sizeof(str));
        snprintf(buf, buf_size, "%s", str ? str : "");
        return;
    case UTIL_CONFIG_REAL:
        memcpy(&real, src, sizeof(real));
        if (isnan(real)) {
            snprintf(buf, buf_size, "auto");
            return;
        }
        snprintf(buf, buf_size, "%.17g", real); /* reads back as the same double */
        return;
    }
    snprintf(buf, buf_size, "?");
}

/* Where the environment sets the field: the value it takes, as the library reads it (a
 * size in bytes, a time in ns), or why it is refused. */
static void util_config_print_set(const util_config_field_t *field, FILE *stream)
{
    char name[UTIL_CONFIG_NAME_MAX], reason[UTIL_REASON_LEN], text[256];
    util_config_value_t value = {0};
    const char *set;

    util_config_env_name(field, name, sizeof(name));
    if ((set = getenv(name)) == NULL) {
        return;
    }
    if (util_config_parse_value(field, set, &value, reason) != STRATA_OK) {
        snprintf(text, sizeof(text), "%.100s", set);
        util_config_one_line(text);
        fprintf(stream, "    set: '%s', refused: %s\n", text, reason);
        return;
    }
    util_config_format_value(field, &value, text, sizeof(text));
    util_config_one_line(text);
    fprintf(stream, "    set: %s\n", text);
    util_config_value_release(field, &value);
}

void util_config_print(const util_config_table_t *table, FILE *stream)
{
    const util_config_field_t *field;

    for (size_t i = 0; i < table->num_fields; ++i) {
        field = &table->fields[i];
        fprintf(stream, "%s%s=%s\n    [%s] %s\n", UTIL_CONFIG_ENV_PREFIX, field->name,
                field->default_value, util_config_type_name(field->type), field->doc);
        util_config_print_set(field, stream);
        if (field->type == UTIL_CONFIG_ENUM) {
            fprintf(stream, "    values:");
            for (int v = 0; field->enum_names[v] != NULL; ++v) {
                fprintf(stream, " %s", field->enum_names[v]);
            }
            fprintf(stream, "\n");
        }
    }
}
