/*
 * The built-in bootstrap's checks of what arrives on its sockets, before any of it is used:
 * a joining rank's hello (at rank 0), rank 0's answer to it (at the rank), and the header
 * of each block of a collective (at rank 0). Pure functions of the bytes and of what this
 * side expects, so that the fuzz target tests/fuzz/fuzz_bootstrap.c drives them as the
 * handshake and the collectives do.
 */
#include "api/src/api_bootstrap_tcp.h"

const char *api_bootstrap_hello_refusal(const api_bootstrap_hello_t *hello, int world_size,
                                        bool have_secret)
{
    if (hello->magic != API_BOOTSTRAP_MAGIC || hello->version != API_BOOTSTRAP_VERSION ||
        hello->world_size != world_size || hello->rank <= 0 || hello->rank >= world_size) {
        return "not this job, or another version";
    }
    if (!have_secret) {
        return hello->secret ? "it has a bootstrap secret and rank 0 has none" : NULL;
    }
    return hello->secret ? NULL : "it has no bootstrap secret (STRATA_BOOTSTRAP_SECRET[_FILE])";
}

const char *api_bootstrap_answer_refusal(uint8_t answer, bool have_secret, bool *prove_p)
{
    *prove_p = false;
    switch (answer) {
    case API_ANSWER_CHALLENGE:
        *prove_p = have_secret;
        return have_secret ? NULL : "wants a bootstrap secret and this rank has none";
    case API_ANSWER_ACCEPTED:
        return have_secret ? "accepted this rank without proving the bootstrap secret (it has "
                             "none)"
                           : NULL;
    case API_ANSWER_REFUSED:
        return "refused";
    default:
        return "answered with something that is no answer";
    }
}

bool api_bootstrap_header_ok(const api_bootstrap_header_t *header, uint32_t seq, size_t size)
{
    return header->magic == API_BOOTSTRAP_MAGIC && header->seq == seq && header->size == size;
}
