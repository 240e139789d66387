/*
 * MoE dispatch and combine between the local ranks of a node, written once over
 * kernel_port.h and compiled as host C, CUDA and HIP. Every rank runs the same kernel and
 * plays both roles at once: source of its tokens and owner of its experts. Each expert is
 * moved in Push form (the source writes rows into the owner's slots) or Pull form (the
 * source publishes, the owner loads), chosen per expert by a bit mask. Completion between
 * ranks is a sequence-number flag per (source, owner) and step; no flag is ever reset.
 *
 * Step protocol (why buffers can be reused without resets): a rank starts dispatch t+1
 * only after its combine t has seen every owner's combine-t flag, and an owner raises that
 * flag only after its dispatch t has finished reading. So no buffer of step t is written
 * for step t+1 while anyone still reads it, provided every rank calls dispatch and
 * combine alternately.
 */
#ifndef STRATA_INTRA_MOE_KERNELS_H
#define STRATA_INTRA_MOE_KERNELS_H

/* Every body, for the files that compile them (host_kernels.c, cuda_kernels.cu,
 * hip_kernels.hip); the shared types alone are moe_format.h. */
#include "moe_dispatch.h"
#include "moe_combine.h"
#include "net_kernels.h"

#endif
