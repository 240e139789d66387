/*
 * The MoE step across nodes, written as kernels: the two tiers meet in them. Kernel blocks
 * pack each row bound for another node once into the registered network area and post
 * transfer commands into the engine's work ring (util/util_work_ring.h); the proxy turns
 * them into RDMA writes and reads. Arrivals are known from the ring's immediate counts,
 * local completions from its counters, and a dead peer from its failure word, so no kernel
 * waits past its bound. Received entries stay where the network put them: the node's
 * dispatch reads them there, and expert outputs are written once, by their owners, where
 * they leave from. Single source like the node's kernels: host C, CUDA and HIP.
 *
 * A step across nodes, per rank (the scheduler launches them in this order, with the intra
 * tier's dispatch, sources and combine between):
 *   NET_SEND    per peer: order its entries (Push, then Pull), pack them, post the header
 *               and round one;
 *   NET_RECV    one thread: read every header, grant round two and read Pull entries,
 *               send our own round two when granted, wait for all the data;
 *   NET_INDEX   per peer: check every received record, and tell the node's kernels where
 *               each token is, which experts it has, and where its terms go;
 *   NET_RETURN  per peer: post the terms of its tokens back in one write (node-reduce,
 *               from combine_recv: post our tokens' weights, then once the peer's are in,
 *               one weighted partial row per token of its, in one write);
 *   NET_TERMS   one thread: wait for our tokens' terms and for our own transfers.
 * Every counter it waits on only grows: a wait is for a running total, nothing is reset.
 * With the streamed exchange a step's dispatch is NET_SEND, NET_RECV, NET_INDEX and the
 * node's dispatch once per round, each for a slice of every rank's own tokens; a later
 * round's NET_SEND waits for our transfers, sends its headers, and writes each peer's
 * round one once that peer's header of the round (its credit) has come. Its combine is
 * NET_RETURN, NET_TERMS and the reduce once per round: NET_RETURN gathers the round's
 * terms where their owners published them and sends every peer a block, even an empty
 * one, which is also that peer's credit.
 */
#ifndef STRATA_INTRA_NET_KERNELS_H
#define STRATA_INTRA_NET_KERNELS_H

/* The bodies, for the files that compile them (through moe_kernels.h). */
#include "net_dispatch.h"
#include "net_combine.h"

#endif
