/*
 * Fixed mode files (adapt_mask_load, STRATA_MOE_MODE=fixed): the first input byte picks the
 * object's expert count, the rest is the file. A mask that loads has no bit past the last
 * expert, and a refused file leaves the caller's mask as it was.
 */
#include "fuzz_input.h"

#include "adaptive/adapt.h"

#define FUZZ_MAX_EXPERTS 256

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t mask[FUZZ_MAX_EXPERTS / 64 + 1], before[FUZZ_MAX_EXPERTS / 64 + 1];
    int experts, words, fd;
    char path[64];

    if (size < 1) {
        return 0;
    }
    experts = 1 + data[0] % FUZZ_MAX_EXPERTS;
    words   = (experts + 63) / 64;
    fd      = fuzz_input_file(data + 1, size - 1, path, sizeof(path));
    if (fd < 0) {
        return 0;
    }
    memset(mask, 0xa5, sizeof(mask));
    memcpy(before, mask, sizeof(mask));
    if (adapt_mask_load(path, experts, mask) == STRATA_OK) {
        for (int e = experts; e < words * 64; ++e) {
            FUZZ_CHECK(((mask[e / 64] >> (e % 64)) & 1u) == 0);
        }
        FUZZ_CHECK(memcmp(&mask[words], &before[words], sizeof(mask) - (size_t)words * 8) == 0);
    } else {
        FUZZ_CHECK(memcmp(mask, before, sizeof(mask)) == 0);
    }
    close(fd);
    return 0;
}
