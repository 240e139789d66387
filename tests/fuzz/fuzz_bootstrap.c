/*
 * What the built-in TCP bootstrap receives before it trusts anything (api/src/
 * api_bootstrap_wire.c): a joining rank's hello at rank 0, rank 0's answer at a joining
 * rank, the header of a rank's block in a collective, and the rank information every rank
 * allgathers when a communicator is created. The first byte picks the frame
 * and says whether this side has a secret; the next bytes set what it expects (world size,
 * collective number and size); the frame is the rest (zeros past the input). A hello that
 * goes on comes from a rank of this world, with a secret exactly where rank 0 has one; an
 * answer lets a rank go on only as rank 0's acceptance, or as the challenge a rank with a
 * secret proves itself to.
 */
#include "fuzz_input.h"

#include "api/src/api_bootstrap_tcp.h"
#include "api/src/api_comm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_hello(const uint8_t *data, size_t size, bool have_secret)
{
    api_bootstrap_hello_t hello;
    size_t at = 0;
    uint16_t world;
    const char *refusal;

    fuzz_take(data, size, &at, &world, sizeof(world));
    fuzz_take(data, size, &at, &hello, sizeof(hello));
    refusal = api_bootstrap_hello_refusal(&hello, 1 + world, have_secret);
    if (refusal == NULL) {
        FUZZ_CHECK(hello.magic == API_BOOTSTRAP_MAGIC && hello.version == API_BOOTSTRAP_VERSION);
        FUZZ_CHECK(hello.rank > 0 && hello.rank <= world && hello.world_size == 1 + world);
        FUZZ_CHECK((hello.secret != 0) == have_secret);
    } else {
        FUZZ_CHECK(strlen(refusal) > 0);
    }
}

static void fuzz_answer(const uint8_t *data, size_t size, bool have_secret)
{
    bool prove = true;
    const char *refusal;

    if (size == 0) {
        return;
    }
    refusal = api_bootstrap_answer_refusal(data[0], have_secret, &prove);
    if (refusal == NULL) {
        FUZZ_CHECK(prove ? data[0] == API_ANSWER_CHALLENGE && have_secret
                         : data[0] == API_ANSWER_ACCEPTED && !have_secret);
    } else {
        FUZZ_CHECK(!prove);
    }
}

static void fuzz_header(const uint8_t *data, size_t size)
{
    api_bootstrap_header_t header;
    size_t at = 0;
    uint32_t seq;
    uint32_t block;

    fuzz_take(data, size, &at, &seq, sizeof(seq));
    fuzz_take(data, size, &at, &block, sizeof(block));
    fuzz_take(data, size, &at, &header, sizeof(header));
    if (api_bootstrap_header_ok(&header, seq, block)) {
        FUZZ_CHECK(header.magic == API_BOOTSTRAP_MAGIC && header.seq == seq &&
                   header.size == block);
    }
}

extern volatile size_t fuzz_name_sink;
volatile size_t fuzz_name_sink;

static void fuzz_rank_info(const uint8_t *data, size_t size)
{
    api_rank_info_t info;
    size_t at = 0;

    fuzz_take(data, size, &at, &info, sizeof(info));
    if (api_rank_info_valid(&info)) { /* what the communicator does next with it */
        fuzz_name_sink = strlen(info.node_name) + (size_t)strcmp(info.node_name, "node0");
        FUZZ_CHECK(info.num_gpus >= 0 && info.num_rdma_nics >= 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bool have_secret;

    if (size < 1) {
        return 0;
    }
    have_secret = (data[0] & 4) != 0;
    switch (data[0] & 3) {
    case 0: fuzz_hello(data + 1, size - 1, have_secret); break;
    case 1: fuzz_answer(data + 1, size - 1, have_secret); break;
    case 2: fuzz_header(data + 1, size - 1); break;
    default: fuzz_rank_info(data + 1, size - 1); break;
    }
    return 0;
}
