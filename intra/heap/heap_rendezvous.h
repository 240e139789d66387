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
 * Every local rank ends with every rank's card, and the descriptors of fd-backed regions in
 * fds (cards[own] and fds[own] are the caller's own, filled in before). Local rank 0 admits
 * only processes of its user that prove p->secret, each handshake beside the others; a
 * rank that died ends the wait through p->peer_check.
 */
strata_status_t heap_exchange(const intra_heap_params_t *p, heap_card_t *cards, int *fds);

#endif
