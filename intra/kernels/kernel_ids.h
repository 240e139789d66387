/*
 * The kernels a device backend launches, by number: shared by the ops table (intra.h) and
 * the backends' entry-point tables (host_kernels.c, cuda_kernels.cu, hip_kernels.hip).
 */
#ifndef STRATA_INTRA_KERNEL_IDS_H
#define STRATA_INTRA_KERNEL_IDS_H

typedef enum intra_moe_kernel {
    INTRA_MOE_KERNEL_DISPATCH,
    INTRA_MOE_KERNEL_COMBINE,
    INTRA_MOE_KERNEL_REDUCE,     /* no peer involved: sums terms from wherever they landed */
    INTRA_MOE_KERNEL_SOURCES,    /* received rows' sources as the API names them */
    INTRA_MOE_KERNEL_PULL_INTO,  /* exact receive: every row, packed, into the caller's buffers */
    INTRA_MOE_KERNEL_COMBINE_ROUND, /* exact receive in rounds: one round's terms to their places */
    /* The step across nodes (net_kernels.h), in launch order. */
    INTRA_MOE_KERNEL_NET_SEND,
    INTRA_MOE_KERNEL_NET_RECV,
    INTRA_MOE_KERNEL_NET_INDEX,
    INTRA_MOE_KERNEL_NET_RETURN,
    INTRA_MOE_KERNEL_NET_TERMS,
    INTRA_MOE_KERNEL_EXPERT_WAIT, /* on another stream: one expert's rows are all in */
    INTRA_MOE_KERNELS
} intra_moe_kernel_t;

/* Kernels whose work is one thread's (the exchange across nodes): launched as one block,
 * so no other block (on the host backend: no worker thread) is woken for nothing. */
static inline int intra_moe_kernel_one_block(intra_moe_kernel_t kernel)
{
    return kernel == INTRA_MOE_KERNEL_NET_RECV || kernel == INTRA_MOE_KERNEL_NET_TERMS ||
           kernel == INTRA_MOE_KERNEL_EXPERT_WAIT;
}

#endif
