/*
 * What the node's heap rendezvous receives from another process, once the secret is proven
 * (intra/heap/heap_rendezvous.c): at local rank 0, a joining rank's card and how many
 * descriptors came with it; at a joining rank, every rank's card from local rank 0. The
 * first byte picks the side, the second sets the node's ranks; the cards are the rest
 * (zeros past the input). Accepted cards have ranks in place, regions like ours, and bus
 * ids that end: string functions read them next, and ASan watches them do it.
 */
#include "fuzz_input.h"

#include "intra/heap/heap_rendezvous.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

extern volatile size_t fuzz_bus_id_sink;
volatile size_t fuzz_bus_id_sink;

static const heap_card_t fuzz_ours = {.rank = 0, .has_fd = 1, .size = 1u << 21};

/* What the heap does next with a card's bus id (heap_check_gpus). */
static void fuzz_use(const heap_card_t *card)
{
    fuzz_bus_id_sink = strlen(card->bus_id) + (size_t)strcasecmp(card->bus_id, "0000:18:00.0");
}

static void fuzz_join(const uint8_t *data, size_t size, int local_size)
{
    size_t at = 0;
    heap_card_t card;
    uint8_t nfds;

    fuzz_take(data, size, &at, &nfds, sizeof(nfds));
    fuzz_take(data, size, &at, &card, sizeof(card));
    if (heap_card_refusal(&card, &fuzz_ours, local_size, nfds % 3) == NULL) {
        FUZZ_CHECK(card.rank > 0 && card.rank < local_size);
        FUZZ_CHECK(card.size == fuzz_ours.size && card.has_fd == fuzz_ours.has_fd);
        fuzz_use(&card);
    }
}

static void fuzz_cards(const uint8_t *data, size_t size, int local_size)
{
    heap_card_t cards[INTRA_HEAP_MAX_RANKS];
    size_t at = 0;

    fuzz_take(data, size, &at, cards, sizeof(cards[0]) * (size_t)local_size);
    if (heap_cards_refusal(cards, local_size, &fuzz_ours) == NULL) {
        for (int r = 0; r < local_size; ++r) {
            FUZZ_CHECK(cards[r].rank == r && cards[r].size == fuzz_ours.size);
            fuzz_use(&cards[r]);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int local_size;

    if (size < 2) {
        return 0;
    }
    local_size = 1 + data[1] % INTRA_HEAP_MAX_RANKS;
    if (data[0] & 1) {
        fuzz_cards(data + 2, size - 2, local_size);
    } else {
        fuzz_join(data + 2, size - 2, local_size);
    }
    return 0;
}
