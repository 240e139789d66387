/*
 * The host device backend: "device" memory is host memory and kernels run as threads, so
 * the intra-node algorithms run, and are tested, on machines without a GPU.
 */
#ifndef STRATA_INTRA_HOST_DEVICE_H
#define STRATA_INTRA_HOST_DEVICE_H

#include "intra/intra.h"

extern const intra_device_ops_t host_device_ops;

/* host_queue.c: launches run block 0 on the caller and the others on worker threads, and
 * return when every block has finished. */
strata_status_t host_queue_create(unsigned num_blocks, intra_queue_t **queue_p);
void            host_queue_destroy(intra_queue_t *queue);
strata_status_t host_moe_launch(intra_queue_t *queue, intra_moe_kernel_t kernel,
                                const struct intra_moe_args *args);
strata_status_t host_queue_synchronize(intra_queue_t *queue);
strata_status_t host_queue_set_stream(intra_queue_t *queue, void *stream);

/* host_kernels.c: one block of a MoE kernel, the single-source body compiled as C. */
void host_moe_run_block(intra_moe_kernel_t kernel, const struct intra_moe_args *args,
                        unsigned block, unsigned num_blocks);

#endif
