/*
 * The node's rendezvous of a symmetric heap (heap_rendezvous.c): how each local rank's region
 * is described to the others, and the exchange of those descriptions through local rank 0.
 */
#ifndef STRATA_INTRA_HEAP_RENDEZVOUS_H
#define STRATA_INTRA_HEAP_RENDEZVOUS_H

#include "intra/heap/heap.h"
#include "intra/intra.h"

#include <stdint.h>

/* What a rank tells the others about its region. */
typedef struct heap_card {
    int32_t       rank;
    int32_t       has_fd;
    uint64_t      size;
    unsigned char handle[INTRA_REGION_HANDLE_LEN];
    char          bus_id[INTRA_BUS_ID_LEN]; /* the rank's GPU; "" on the host */
} heap_card_t;

/**
 * Local rank 0: why the card of a rank joining is refused (NULL: accepted): a local rank
 * other than 0, a region like ours (like: has_fd and size), with the nfds descriptors that
 * go with it, and a bus id that ends. Pure (tests/fuzz/fuzz_heap_cards.c).
 */
const char *heap_card_refusal(const heap_card_t *card, const heap_card_t *like, int local_size,
                              int nfds);

/**
 * A joining rank: why the local_size cards local rank 0 sent are refused (NULL: accepted):
 * each in its rank's place, each region like ours (own), each bus id ending. Pure.
 */
const char *heap_cards_refusal(const heap_card_t *cards, int local_size, const heap_card_t *own);

/**
 * Every local rank ends with every rank's card, and the descriptors of fd-backed regions in
 * fds (cards[own] and fds[own] are the caller's own, filled in before). Local rank 0 admits
 * only processes of its user that prove p->secret, each handshake beside the others; a
 * rank that died ends the wait through p->peer_check.
 */
strata_status_t heap_exchange(const intra_heap_params_t *p, heap_card_t *cards, int *fds);

#endif
