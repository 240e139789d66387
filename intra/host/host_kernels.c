/*
 * The MoE kernels compiled as host C: one call runs one block, with one thread in it.
 * Built with -ffp-contract=off so that combine's fp32 sums round as on the GPUs.
 */
#include "host_device.h"
#include "intra/kernels/moe_kernels.h"

void host_moe_run_block(intra_moe_kernel_t kernel, const intra_moe_args_t *args,
                        unsigned block, unsigned num_blocks)
{
    kernel_grid_t grid = {.block = block, .num_blocks = num_blocks, .thread = 0,
                          .num_threads = 1};

    kernel_host_block = block;

    switch (kernel) {
    case INTRA_MOE_KERNEL_DISPATCH:
        intra_moe_dispatch_body(args, grid);
        break;
    case INTRA_MOE_KERNEL_COMBINE:
        intra_moe_combine_body(args, grid);
        break;
    case INTRA_MOE_KERNEL_REDUCE:
        intra_moe_reduce_body(args, grid);
        break;
    case INTRA_MOE_KERNEL_SOURCES:
        intra_moe_sources_body(args, grid);
        break;
    case INTRA_MOE_KERNEL_PULL_INTO:
        intra_moe_pull_into_body(args, grid);
        break;
    case INTRA_MOE_KERNEL_COMBINE_ROUND:
        intra_moe_combine_round_body(args, grid);
        break;
    case INTRA_MOE_KERNEL_NET_SEND:
        intra_net_send_body(args, grid);
        break;
    case INTRA_MOE_KERNEL_NET_RECV:
        intra_net_recv_body(args, grid);
        break;
    case INTRA_MOE_KERNEL_NET_INDEX:
        intra_net_index_body(args, grid);
        break;
    case INTRA_MOE_KERNEL_NET_RETURN:
        intra_net_return_body(args, grid);
        break;
    case INTRA_MOE_KERNEL_NET_TERMS:
        intra_net_terms_body(args, grid);
        break;
    case INTRA_MOE_KERNEL_EXPERT_WAIT:
        intra_moe_expert_wait_body(args, grid);
        break;
    case INTRA_MOE_KERNELS:
        break;
    }
}
