/*
 * STRATA_* values (util/util_config.c): the input is "NAME=value" for any variable of any
 * layer's table (api_config_tables). A value that parses formats back to text that parses
 * to the same value (what strata-info -c prints can be set again); the closest-name hint
 * takes any name.
 */
#include "fuzz_input.h"

#include "api/api.h"
#include "util/util.h"

#include <math.h>

#define FUZZ_VALUE_MAX 4096

static const util_config_field_t *fuzz_field(const char *name)
{
    for (size_t t = 0; t < api_num_config_tables; ++t) {
        const util_config_table_t *table = api_config_tables[t];

        for (size_t f = 0; f < table->num_fields; ++f) {
            if (strcmp(table->fields[f].name, name) == 0) {
                return &table->fields[f];
            }
        }
    }
    return NULL;
}

static bool fuzz_value_equal(const util_config_field_t *field, const util_config_value_t *a,
                             const util_config_value_t *b)
{
    switch (field->type) {
    case UTIL_CONFIG_INT:    return a->i64 == b->i64;
    case UTIL_CONFIG_SIZE:
    case UTIL_CONFIG_TIME:   return a->u64 == b->u64;
    case UTIL_CONFIG_BOOL:   return a->flag == b->flag;
    case UTIL_CONFIG_ENUM:   return a->index == b->index;
    case UTIL_CONFIG_STRING: return strcmp(a->str, b->str) == 0;
    case UTIL_CONFIG_REAL:   return a->real == b->real || (isnan(a->real) && isnan(b->real));
    }
    return false;
}

static void fuzz_config_value(const util_config_field_t *field, const char *text)
{
    char err[UTIL_REASON_LEN], formatted[FUZZ_VALUE_MAX + 64];
    util_config_value_t value = {0}, again = {0};

    if (util_config_parse_value(field, text, &value, err) != STRATA_OK) {
        FUZZ_CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
        return;
    }
    util_config_format_value(field, &value, formatted, sizeof(formatted));
    if (util_config_parse_value(field, formatted, &again, err) != STRATA_OK) {
        fprintf(stderr, "%s: '%s' parsed, its formatted form '%s' did not: %s\n", field->name,
                text, formatted, err);
        abort();
    }
    FUZZ_CHECK(fuzz_value_equal(field, &value, &again));
    util_config_value_release(field, &value);
    util_config_value_release(field, &again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text, *value, hint[256];
    const util_config_field_t *field;

    if (size > FUZZ_VALUE_MAX || (text = fuzz_input_text(data, size)) == NULL) {
        return 0;
    }
    value = strchr(text, '=');
    if (value != NULL) {
        *value++ = '\0';
        field = fuzz_field(text);
        if (field != NULL) {
            fuzz_config_value(field, value);
        } else {
            /* every field's parser on the value, as if the name were right */
            for (size_t t = 0; t < api_num_config_tables; ++t) {
                for (size_t f = 0; f < api_config_tables[t]->num_fields; ++f) {
                    fuzz_config_value(&api_config_tables[t]->fields[f], value);
                }
            }
        }
    }
    (void)util_config_closest_name(api_config_tables, api_num_config_tables, text, hint,
                                   sizeof(hint));
    free(text);
    return 0;
}
