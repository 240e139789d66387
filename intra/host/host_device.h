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
strata_status_t host_queue_write(intra_queue_t *queue, void *dst, const void *src, size_t size);
strata_status_t host_queue_read(intra_queue_t *queue, void *dst, const void *src, size_t size);
strata_status_t host_queue_fill(intra_queue_t *queue, void *dst, int value, size_t size);
strata_status_t host_queue_capturing(const intra_queue_t *queue, bool *capturing_p);
/* The blocks each launch of the queue runs. */
unsigned        host_queue_blocks(const intra_queue_t *queue);

/* host_stream.c: streams whose work runs on a thread of their own, in order, after the
 * call that enqueued it returned. host_stream_of finds a live stream by its address (NULL:
 * none). Copies take src as it is when they are enqueued. host_stream_wait makes s wait for
 * what was enqueued on after so far. A queue on a stream holds it (host_stream_ref, unref),
 * so that it stays, finished, if the caller destroys it first; work enqueued on a
 * destroyed stream is refused (STRATA_ERR_INVALID). */
typedef struct host_stream host_stream_t;
strata_status_t host_stream_create(void **stream_p);
void            host_stream_destroy(void *stream);
strata_status_t host_stream_synchronize(void *stream);
strata_status_t host_stream_capturing(void *stream, bool *capturing_p);
host_stream_t  *host_stream_of(void *stream);
void            host_stream_ref(host_stream_t *s);
void            host_stream_unref(host_stream_t *s);
/* What s has enqueued so far has run (at once where it was destroyed). */
void            host_stream_finish(host_stream_t *s);
bool            host_stream_is_capturing(host_stream_t *s);
/* Every live stream has run what was enqueued on it so far. */
strata_status_t host_streams_synchronize(void);
strata_status_t host_stream_launch(host_stream_t *s, intra_moe_kernel_t kernel,
                                   const struct intra_moe_args *args, unsigned num_blocks);
strata_status_t host_stream_copy(host_stream_t *s, void *dst, const void *src, size_t size);
strata_status_t host_stream_fill(host_stream_t *s, void *dst, int value, size_t size);
strata_status_t host_stream_wait(host_stream_t *s, host_stream_t *after);
/* free(ptr) once every stream has run what was enqueued on it so far; no wait. */
void            host_streams_free(void *ptr);
/**
 * Make the stream report that it is being captured, as a CUDA stream does between
 * cudaStreamBeginCapture and cudaStreamEndCapture (its work still runs): how the library's
 * refusals of host waits inside a capture are tested without a GPU.
 */
void            host_stream_set_capturing(void *stream, bool capturing);

/* host_kernels.c: one block of a MoE kernel, the single-source body compiled as C. */
void host_moe_run_block(intra_moe_kernel_t kernel, const struct intra_moe_args *args,
                        unsigned block, unsigned num_blocks);

#endif
