/*
 * Policy files and fixed mode files: JSON, read and written with jansson, every key checked
 * (type, range, no unknown keys) with an error naming the file and the key. The format is
 * in docs/adaptive.md.
 */
#include "adapt.h"
#include "util/util.h"

#include <errno.h>
#include <stdio.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define ADAPT_POLICY_FORMAT "strata-policy"
#define ADAPT_MODES_FORMAT  "strata-modes"
#define ADAPT_FILE_VERSION  1
/* Far above any real file (a mode file lists at most every expert once). */
#define ADAPT_FILE_MAX_BYTES ((size_t)16 << 20)

static const char *const adapt_tier_keys[ADAPT_TIERS] = {"intra", "inter"};
static const char *const adapt_mode_keys[ADAPT_MODES] = {"push", "pull"};

static strata_status_t adapt_file_error(const char *name, const char *key, const char *what)
{
    UTIL_LOG_ERROR("adaptive: %s: %s %s", name, key, what);
    return STRATA_ERR_PARSE;
}

/* Every key of obj must be one of the NULL-terminated allowed. */
static strata_status_t adapt_only_keys(const char *name, const char *path, json_t *obj,
                                       const char *const *allowed)
{
    const char *key;
    json_t *value;
    char where[128];

    json_object_foreach(obj, key, value) {
        bool known = false;

        for (int i = 0; allowed[i] != NULL && !known; ++i) {
            known = strcmp(key, allowed[i]) == 0;
        }
        if (!known) {
            snprintf(where, sizeof(where), "%s%s", path, key);
            return adapt_file_error(name, where, "is not a known key");
        }
    }
    (void)value;
    return STRATA_OK;
}

/* An optional number at obj[key] into *out, scaled; absent keeps *out. */
static strata_status_t adapt_get_number(const char *name, const char *path, json_t *obj,
                                        const char *key, double scale, double *out)
{
    json_t *value = json_object_get(obj, key);
    char where[128];

    if (value == NULL) {
        return STRATA_OK;
    }
    snprintf(where, sizeof(where), "%s%s", path, key);
    if (!json_is_number(value)) {
        return adapt_file_error(name, where, "must be a number");
    }
    *out = json_number_value(value) * scale;
    return STRATA_OK;
}

static strata_status_t adapt_parse_link(const char *name, const char *path, json_t *obj,
                                        adapt_link_t *link)
{
    static const char *const keys[] = {"alpha_us", "beta_GBps", NULL};
    strata_status_t status;

    if (!json_is_object(obj)) {
        return adapt_file_error(name, path, "must be an object");
    }
    if ((status = adapt_only_keys(name, path, obj, keys)) != STRATA_OK ||
        (status = adapt_get_number(name, path, obj, "alpha_us", 1e-6, &link->alpha_s)) !=
            STRATA_OK) {
        return status;
    }
    return adapt_get_number(name, path, obj, "beta_GBps", 1e9, &link->beta_Bps);
}

static strata_status_t adapt_parse_model(const char *name, json_t *obj, adapt_model_t *model)
{
    static const char *const keys[] = {"intra", "inter", NULL};
    static const char *const tier_keys[] = {"push", "pull", "pull_rtt_us", NULL};
    strata_status_t status = adapt_only_keys(name, "model.", obj, keys);
    char path[64];

    for (int t = 0; t < ADAPT_TIERS && status == STRATA_OK; ++t) {
        json_t *tier = json_object_get(obj, adapt_tier_keys[t]);

        if (tier == NULL) {
            continue;
        }
        snprintf(path, sizeof(path), "model.%s.", adapt_tier_keys[t]);
        if (!json_is_object(tier)) {
            return adapt_file_error(name, path, "must be an object");
        }
        status = adapt_only_keys(name, path, tier, tier_keys);
        for (int m = 0; m < ADAPT_MODES && status == STRATA_OK; ++m) {
            json_t *link = json_object_get(tier, adapt_mode_keys[m]);
            char link_path[80];

            snprintf(link_path, sizeof(link_path), "%s%s.", path, adapt_mode_keys[m]);
            if (link != NULL) {
                status = adapt_parse_link(name, link_path, link, &model->link[t][m]);
            }
        }
        if (status == STRATA_OK) {
            status = adapt_get_number(name, path, tier, "pull_rtt_us", 1e-6,
                                      &model->pull_rtt_s[t]);
        }
    }
    return status;
}

/* The header every file of ours starts with. */
static strata_status_t adapt_check_format(const char *name, json_t *root, const char *format)
{
    json_t *f = json_object_get(root, "format"), *v = json_object_get(root, "version");
    char need[64];

    if (!json_is_string(f) || strcmp(json_string_value(f), format) != 0) {
        snprintf(need, sizeof(need), "must be \"%s\"", format);
        return adapt_file_error(name, "format", need);
    }
    if (!json_is_integer(v) || json_integer_value(v) != ADAPT_FILE_VERSION) {
        return adapt_file_error(name, "version", "must be 1");
    }
    return STRATA_OK;
}

static strata_status_t adapt_parse_policy(const char *name, json_t *root,
                                          adapt_policy_params_t *p)
{
    static const char *const keys[] = {"format", "version", "model", "alpha", "margin",
                                       "noise_k", "dwell", "initial", NULL};
    json_t *model = json_object_get(root, "model"), *dwell = json_object_get(root, "dwell");
    json_t *initial = json_object_get(root, "initial");
    strata_status_t status;

    if ((status = adapt_check_format(name, root, ADAPT_POLICY_FORMAT)) != STRATA_OK ||
        (status = adapt_only_keys(name, "", root, keys)) != STRATA_OK) {
        return status;
    }
    if (model != NULL && !json_is_object(model)) {
        return adapt_file_error(name, "model", "must be an object");
    }
    if ((model != NULL && (status = adapt_parse_model(name, model, &p->model)) != STRATA_OK) ||
        (status = adapt_get_number(name, "", root, "alpha", 1.0, &p->alpha)) != STRATA_OK ||
        (status = adapt_get_number(name, "", root, "margin", 1.0, &p->margin)) != STRATA_OK ||
        (status = adapt_get_number(name, "", root, "noise_k", 1.0, &p->noise_k)) != STRATA_OK) {
        return status;
    }
    if (dwell != NULL) {
        if (!json_is_integer(dwell) || json_integer_value(dwell) < 1 ||
            json_integer_value(dwell) > 1000000) {
            return adapt_file_error(name, "dwell", "must be a whole number of steps, 1..1000000");
        }
        p->dwell = (int)json_integer_value(dwell);
    }
    if (initial != NULL) {
        const char *mode = json_is_string(initial) ? json_string_value(initial) : "";

        if (strcmp(mode, "push") != 0 && strcmp(mode, "pull") != 0) {
            return adapt_file_error(name, "initial", "must be \"push\" or \"pull\"");
        }
        p->initial = strcmp(mode, "push") == 0 ? ADAPT_MODE_PUSH : ADAPT_MODE_PULL;
    }
    return STRATA_OK;
}

/* Parse the document, then fill a copy of the defaults so that a bad file changes nothing. */
static strata_status_t adapt_policy_from_json(json_t *root, const char *name,
                                              adapt_policy_params_t *params_p)
{
    adapt_policy_params_t params;
    strata_status_t status;

    if (!json_is_object(root)) {
        return adapt_file_error(name, "the document", "must be a JSON object");
    }
    adapt_policy_defaults(&params);
    status = adapt_parse_policy(name, root, &params);
    if (status == STRATA_OK) {
        status = adapt_policy_check(&params, name);
    }
    if (status == STRATA_OK) {
        *params_p = params;
    }
    return status;
}

static strata_status_t adapt_json_error(const char *name, const json_error_t *error)
{
    if (error->line > 0) {
        UTIL_LOG_ERROR("adaptive: %s:%d:%d: %s", name, error->line, error->column, error->text);
    } else {
        UTIL_LOG_ERROR("adaptive: %s", error->text); /* it names the file */
    }
    return json_error_code(error) == json_error_cannot_open_file ? STRATA_ERR_NOT_FOUND
                                                                  : STRATA_ERR_PARSE;
}

/* A parsed document (NULL: error says why) into params; the document is released. */
static strata_status_t adapt_policy_take(json_t *root, const json_error_t *error,
                                         const char *name, adapt_policy_params_t *params_p)
{
    strata_status_t status;

    if (root == NULL) {
        return adapt_json_error(name, error);
    }
    status = adapt_policy_from_json(root, name, params_p);
    json_decref(root);
    return status;
}

strata_status_t adapt_policy_parse(const char *text, const char *name,
                                   adapt_policy_params_t *params_p)
{
    json_error_t error;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &error);

    return adapt_policy_take(root, &error, name, params_p);
}

/* The document in the file at path, or NULL with *status_p saying why (logged). */
static json_t *adapt_json_load(const char *path, strata_status_t *status_p)
{
    char err[UTIL_FILE_ERR_LEN], *text;
    json_error_t error;
    json_t *root;
    size_t size;

    *status_p = util_file_read(path, ADAPT_FILE_MAX_BYTES, &text, &size, err);
    if (*status_p != STRATA_OK) {
        UTIL_LOG_ERROR("adaptive: %s", err);
        return NULL;
    }
    root = json_loadb(text, size, JSON_REJECT_DUPLICATES, &error);
    free(text);
    if (root == NULL) {
        *status_p = adapt_json_error(path, &error);
    }
    return root;
}

strata_status_t adapt_policy_load(const char *path, adapt_policy_params_t *params_p)
{
    strata_status_t status;
    json_t *root = adapt_json_load(path, &status);

    if (root == NULL) {
        return status;
    }
    status = adapt_policy_from_json(root, path, params_p);
    json_decref(root);
    return status;
}

static json_t *adapt_link_json(const adapt_link_t *link)
{
    return json_pack("{s:f, s:f}", "alpha_us", link->alpha_s * 1e6, "beta_GBps",
                     link->beta_Bps * 1e-9);
}

static json_t *adapt_policy_json(const adapt_policy_params_t *p)
{
    json_t *model = json_object();

    for (int t = 0; model != NULL && t < ADAPT_TIERS; ++t) {
        json_t *tier = json_pack("{s:o, s:o, s:f}",
                                 "push", adapt_link_json(&p->model.link[t][ADAPT_MODE_PUSH]),
                                 "pull", adapt_link_json(&p->model.link[t][ADAPT_MODE_PULL]),
                                 "pull_rtt_us", p->model.pull_rtt_s[t] * 1e6);

        if (tier == NULL || json_object_set_new(model, adapt_tier_keys[t], tier) != 0) {
            json_decref(model);
            return NULL;
        }
    }
    if (model == NULL) {
        return NULL;
    }
    return json_pack("{s:s, s:i, s:o, s:f, s:f, s:f, s:i, s:s}", "format", ADAPT_POLICY_FORMAT,
                     "version", ADAPT_FILE_VERSION, "model", model, "alpha", p->alpha,
                     "margin", p->margin, "noise_k", p->noise_k, "dwell", p->dwell, "initial",
                     adapt_mode_keys[p->initial]);
}

strata_status_t adapt_policy_save(const char *path, const adapt_policy_params_t *params)
{
    strata_status_t status = adapt_policy_check(params, path);
    json_t *root;

    if (status != STRATA_OK) {
        return status;
    }
    root = adapt_policy_json(params);
    if (root == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    errno = 0;
    if (json_dump_file(root, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) !=
        0) {
        UTIL_LOG_ERROR("adaptive: writing the policy file %s failed%s%s", path,
                       errno != 0 ? ": " : "", errno != 0 ? strerror(errno) : "");
        status = STRATA_ERR_IO;
    }
    json_decref(root);
    return status;
}

static strata_status_t adapt_parse_mask(const char *name, json_t *root, int num_experts,
                                        uint64_t *mask)
{
    static const char *const keys[] = {"format", "version", "num_experts", "pull", NULL};
    json_t *count = json_object_get(root, "num_experts"), *pull = json_object_get(root, "pull");
    strata_status_t status;
    size_t i;
    json_t *id;

    if ((status = adapt_check_format(name, root, ADAPT_MODES_FORMAT)) != STRATA_OK ||
        (status = adapt_only_keys(name, "", root, keys)) != STRATA_OK) {
        return status;
    }
    if (!json_is_integer(count) || json_integer_value(count) != num_experts) {
        UTIL_LOG_ERROR("adaptive: %s: num_experts must be the object's %d experts", name,
                       num_experts);
        return STRATA_ERR_PARSE;
    }
    if (!json_is_array(pull)) {
        return adapt_file_error(name, "pull", "must be an array of expert ids");
    }
    json_array_foreach(pull, i, id) {
        json_int_t e = json_is_integer(id) ? json_integer_value(id) : -1;

        if (e < 0 || e >= num_experts || ((mask[e / 64] >> (e % 64)) & 1u)) {
            UTIL_LOG_ERROR("adaptive: %s: pull[%zu] is not a new expert id in 0..%d", name, i,
                           num_experts - 1);
            return STRATA_ERR_PARSE;
        }
        mask[e / 64] |= UINT64_C(1) << (e % 64);
    }
    return STRATA_OK;
}

strata_status_t adapt_mask_load(const char *path, int num_experts, uint64_t *mask)
{
    size_t words = (size_t)(num_experts + 63) / 64;
    strata_status_t status;
    json_t *root = adapt_json_load(path, &status);
    uint64_t *parsed;

    if (root == NULL) {
        return status;
    }
    parsed = calloc(words, sizeof(uint64_t));
    status = parsed == NULL       ? STRATA_ERR_NO_MEMORY
             : !json_is_object(root) ? adapt_file_error(path, "the document",
                                                        "must be a JSON object")
                                     : adapt_parse_mask(path, root, num_experts, parsed);
    if (status == STRATA_OK) {
        memcpy(mask, parsed, words * sizeof(uint64_t));
    }
    free(parsed);
    json_decref(root);
    return status;
}
