/*
 * What a peer sends the engine, before anything of it is used: its address blob
 * (inter_blob_parse), the messages that land in receive buffers (inter_msg_parse) and,
 * where strata has verbs, the verbs transport's address (verbs_addr_decode and the QPNs
 * read from it). The first byte picks the parser: its top bit a message, else bit 0 the
 * blob (0) or the verbs address (1). For the engine blob the second byte sets the address
 * size this rank expects, and the rest fills the blob (zeros after the input); for a
 * message it sets the world size, and the rest is the message. An accepted blob's slots lie
 * inside it, none longer than the address size; an accepted message comes from a rank of
 * the world and its payload lies inside it; a decoded verbs address holds as many QPNs as
 * it claims.
 */
#include "fuzz_input.h"

#include "inter/inter_internal.h"
#ifdef FUZZ_VERBS
#include "inter/verbs/verbs.h"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_quiet(strata_log_level_t level, const char *line, void *arg)
{
    (void)level, (void)line, (void)arg;
}

static void fuzz_engine_blob(const uint8_t *data, size_t size)
{
    inter_blob_expect_t expect = {.transport = "ofi", .addr_size = 8u + data[0] % 121u,
                                  .stripe_min_chunk = 262144, .stripe_max_chunks = 16,
                                  .msg_size = 65536};
    size_t blob_size = inter_blob_size(expect.addr_size);
    uint8_t *blob = calloc(1, blob_size);
    char why[UTIL_REASON_LEN];
    inter_blob_view_t view;

    if (blob == NULL) {
        return;
    }
    memcpy(blob, data + 1, size - 1 < blob_size ? size - 1 : blob_size);
    if (inter_blob_parse(blob, blob_size, &expect, &view, why) == STRATA_OK) {
        FUZZ_CHECK(view.num_rails >= 1 && view.num_rails <= INTER_MAX_RAILS);
        for (int r = 0; r < INTER_RAIL_SLOTS; ++r) {
            if (view.addr[r] == NULL) {
                continue;
            }
            FUZZ_CHECK(view.addr_len[r] >= 1 && view.addr_len[r] <= expect.addr_size);
            FUZZ_CHECK(view.addr[r] > blob && view.addr[r] + view.addr_len[r] <= blob + blob_size);
        }
    } else {
        FUZZ_CHECK(strlen(why) > 0);
    }
    free(blob);
}

extern volatile uint8_t fuzz_payload_sink;
volatile uint8_t fuzz_payload_sink;

static void fuzz_engine_message(const uint8_t *data, size_t size)
{
    int world_size = 1 + data[0];
    inter_msg_view_t view;
    uint8_t sum = 0;

    if (!inter_msg_parse(data + 1, size - 1, world_size, &view)) {
        return;
    }
    FUZZ_CHECK(view.src >= 0 && view.src < world_size);
    FUZZ_CHECK((const uint8_t *)view.payload >= data + 1 + sizeof(inter_msg_header_t));
    FUZZ_CHECK((const uint8_t *)view.payload + view.length <= data + size);
    for (size_t i = 0; i < view.length; ++i) { /* the payload, read as delivery copies it */
        sum ^= ((const uint8_t *)view.payload)[i];
    }
    fuzz_payload_sink = sum;
}

#ifdef FUZZ_VERBS
extern volatile uint32_t fuzz_qpn_sink;
volatile uint32_t fuzz_qpn_sink;

static void fuzz_verbs_address(const uint8_t *data, size_t size)
{
    uint32_t qpns = 0;
    verbs_addr_t addr;

    if (verbs_addr_decode(data, size, &addr) != STRATA_OK) {
        return;
    }
    FUZZ_CHECK(addr.world >= 1 && addr.owner < addr.world);
    FUZZ_CHECK(size >= verbs_addr_size((int)addr.world));
    for (uint32_t r = 0; r < addr.world; ++r) { /* every QPN it claims, read (ASan watches) */
        qpns |= verbs_addr_qpn(data, &addr, (int)r);
    }
    fuzz_qpn_sink = qpns; /* the reads stay in the program */
    FUZZ_CHECK(verbs_addr_qpn(data, &addr, (int)addr.world) == 0); /* past its world: none */
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    util_log_set_handler(fuzz_quiet, NULL); /* refusals are the point, not news */
    if (size < 2) {
        return 0;
    }
    if (data[0] & 0x80) {
        fuzz_engine_message(data + 1, size - 1);
    } else if ((data[0] & 1) == 0) {
        fuzz_engine_blob(data + 1, size - 1);
    }
#ifdef FUZZ_VERBS
    else {
        fuzz_verbs_address(data + 1, size - 1);
    }
#endif
    return 0;
}
