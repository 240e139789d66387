/*
 * Adaptive policy files (adaptive/adapt_file.c, docs/adaptive.md): parsed; a policy that
 * parses is in range, saves and loads back to the same file, and drives a small policy
 * for a few steps without crashing.
 */
#include "fuzz_input.h"

#include "adaptive/adapt.h"
#include "util/util.h"

#define FUZZ_EXPERTS 8
#define FUZZ_NODES   2

/* The saved form of params, read into a malloc'd string. */
static char *fuzz_policy_saved(const adapt_policy_params_t *params)
{
    char path[64], *text = NULL;
    int fd = fuzz_input_file(NULL, 0, path, sizeof(path));
    off_t size;

    if (fd < 0) {
        return NULL;
    }
    FUZZ_CHECK(adapt_policy_save(path, params) == STRATA_OK);
    size = lseek(fd, 0, SEEK_END);
    if (size >= 0 && (text = calloc(1, (size_t)size + 1)) != NULL) {
        FUZZ_CHECK(pread(fd, text, (size_t)size, 0) == size);
    }
    close(fd);
    return text;
}

static void fuzz_policy_run(const adapt_policy_params_t *params)
{
    static const int owner_node[FUZZ_EXPERTS] = {0, 0, 0, 0, 1, 1, 1, 1};
    int32_t tokens[FUZZ_EXPERTS * FUZZ_NODES];
    adapt_policy_t *policy;

    if (adapt_policy_create(params, FUZZ_EXPERTS, FUZZ_NODES, owner_node, 7168.0, &policy) !=
        STRATA_OK) {
        return;
    }
    for (int step = 0; step < 4; ++step) {
        for (int i = 0; i < FUZZ_EXPERTS * FUZZ_NODES; ++i) {
            tokens[i] = (i * 37 + step * 11) % 200;
        }
        adapt_policy_step(policy, tokens);
        for (int e = 0; e < FUZZ_EXPERTS; ++e) {
            adapt_mode_t mode = adapt_policy_mode(policy, e);

            FUZZ_CHECK(mode == ADAPT_MODE_PUSH || mode == ADAPT_MODE_PULL);
        }
    }
    adapt_policy_destroy(policy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_input_text(data, size), *saved, *resaved;
    adapt_policy_params_t params, again;

    if (text == NULL) {
        return 0;
    }
    if (adapt_policy_parse(text, "fuzz.json", &params) == STRATA_OK) {
        FUZZ_CHECK(adapt_policy_check(&params, "fuzz") == STRATA_OK);
        saved = fuzz_policy_saved(&params);
        if (saved != NULL) {
            FUZZ_CHECK(adapt_policy_parse(saved, "saved.json", &again) == STRATA_OK);
            resaved = fuzz_policy_saved(&again);
            FUZZ_CHECK(resaved == NULL || strcmp(saved, resaved) == 0);
            free(resaved);
            free(saved);
        }
        fuzz_policy_run(&params);
    }
    free(text);
    return 0;
}
