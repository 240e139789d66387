/*
 * Host queues: a pool of worker threads, one per kernel block beyond the first (the
 * caller runs block 0). A launch hands every worker the kernel and its arguments and waits
 * for all of them, so a launch is complete when it returns. Given a host stream
 * (host_stream.c), the queue enqueues its launches and copies there instead, and they run
 * after the call returns, in order.
 */
#include "host_device.h"
#include "intra/kernels/moe_format.h"
#include "util/util.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct intra_queue {
    unsigned           num_blocks;
    pthread_t         *workers;     /* num_blocks - 1 */
    unsigned           num_started;
    pthread_mutex_t    lock;
    pthread_cond_t     start;       /* generation moved on, or stopping */
    pthread_cond_t     done;        /* running reached zero */
    uint64_t           generation;  /* launches so far */
    unsigned           running;     /* workers still in the current launch */
    bool               stopping;
    intra_moe_kernel_t kernel;
    intra_moe_args_t   args;
    host_stream_t     *stream;      /* the caller's, held, or NULL: launches complete on
                                       return */
};

typedef struct host_worker_arg {
    intra_queue_t *queue;
    unsigned       block;
} host_worker_arg_t;

static void *host_worker_main(void *arg)
{
    host_worker_arg_t self = *(host_worker_arg_t *)arg;
    intra_queue_t *queue = self.queue;
    uint64_t seen = 0;

    free(arg);
    pthread_mutex_lock(&queue->lock);
    for (;;) {
        while (queue->generation == seen && !queue->stopping) {
            pthread_cond_wait(&queue->start, &queue->lock);
        }
        if (queue->stopping) {
            break;
        }
        seen = queue->generation;
        pthread_mutex_unlock(&queue->lock);
        /* args and kernel do not change until every worker has counted itself out */
        host_moe_run_block(queue->kernel, &queue->args, self.block, queue->num_blocks);
        pthread_mutex_lock(&queue->lock);
        if (--queue->running == 0) {
            pthread_cond_signal(&queue->done);
        }
    }
    pthread_mutex_unlock(&queue->lock);
    return NULL;
}

static strata_status_t host_queue_start_workers(intra_queue_t *queue)
{
    for (unsigned b = 1; b < queue->num_blocks; ++b) {
        host_worker_arg_t *arg = malloc(sizeof(*arg));

        if (arg == NULL) {
            return STRATA_ERR_NO_MEMORY;
        }
        arg->queue = queue;
        arg->block = b;
        if (pthread_create(&queue->workers[b - 1], NULL, host_worker_main, arg) != 0) {
            free(arg);
            UTIL_LOG_ERROR("host device: cannot start worker thread %u of a queue", b);
            return STRATA_ERR_NO_MEMORY;
        }
        ++queue->num_started;
    }
    return STRATA_OK;
}

strata_status_t host_queue_create(unsigned num_blocks, intra_queue_t **queue_p)
{
    intra_queue_t *queue;
    strata_status_t status;

    if (num_blocks == 0 || num_blocks > 1024) {
        UTIL_LOG_ERROR("host device: a queue needs 1 to 1024 blocks, not %u", num_blocks);
        return STRATA_ERR_INVALID;
    }
    queue = calloc(1, sizeof(*queue));
    if (queue == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    queue->workers = calloc(num_blocks, sizeof(*queue->workers));
    if (queue->workers == NULL) {
        free(queue);
        return STRATA_ERR_NO_MEMORY;
    }
    queue->num_blocks = num_blocks;
    pthread_mutex_init(&queue->lock, NULL);
    pthread_cond_init(&queue->start, NULL);
    pthread_cond_init(&queue->done, NULL);
    status = host_queue_start_workers(queue);
    if (status != STRATA_OK) {
        host_queue_destroy(queue);
        return status;
    }
    *queue_p = queue;
    return STRATA_OK;
}

void host_queue_destroy(intra_queue_t *queue)
{
    if (queue == NULL) {
        return;
    }
    if (queue->stream != NULL) { /* what we enqueued there may still touch our memory */
        host_stream_finish(queue->stream);
        host_stream_unref(queue->stream);
    }
    pthread_mutex_lock(&queue->lock);
    queue->stopping = true;
    pthread_cond_broadcast(&queue->start);
    pthread_mutex_unlock(&queue->lock);
    for (unsigned i = 0; i < queue->num_started; ++i) {
        pthread_join(queue->workers[i], NULL);
    }
    pthread_cond_destroy(&queue->done);
    pthread_cond_destroy(&queue->start);
    pthread_mutex_destroy(&queue->lock);
    free(queue->workers);
    free(queue);
}

unsigned host_queue_blocks(const intra_queue_t *queue)
{
    return queue->num_blocks;
}

strata_status_t host_moe_launch(intra_queue_t *queue, intra_moe_kernel_t kernel,
                                const intra_moe_args_t *args)
{
    if (queue->stream != NULL) {
        return host_stream_launch(queue->stream, kernel, args, queue->num_blocks);
    }
    if (intra_moe_kernel_one_block(kernel)) {
        host_moe_run_block(kernel, args, 0, 1); /* on the caller; the workers sleep on */
        return STRATA_OK;
    }
    pthread_mutex_lock(&queue->lock);
    queue->kernel  = kernel;
    queue->args    = *args;
    queue->running = queue->num_blocks - 1;
    ++queue->generation;
    pthread_cond_broadcast(&queue->start);
    pthread_mutex_unlock(&queue->lock);

    host_moe_run_block(kernel, &queue->args, 0, queue->num_blocks);

    pthread_mutex_lock(&queue->lock);
    while (queue->running > 0) {
        pthread_cond_wait(&queue->done, &queue->lock);
    }
    pthread_mutex_unlock(&queue->lock);
    return STRATA_OK;
}

strata_status_t host_queue_synchronize(intra_queue_t *queue)
{
    /* Without a stream, launches return complete. */
    if (queue->stream != NULL) {
        host_stream_finish(queue->stream);
    }
    return STRATA_OK;
}

/*
 * From now on the queue enqueues on stream (NULL: runs on the caller). What is enqueued
 * there runs after what the queue enqueued before, wherever that was: the new stream waits
 * for the old one as a GPU stream waits for an event recorded on the old one; leaving
 * streams, the caller waits for the old one.
 */
strata_status_t host_queue_set_stream(intra_queue_t *queue, void *stream)
{
    host_stream_t *next = NULL;
    strata_status_t status = STRATA_OK;

    if (stream != NULL && (next = host_stream_of(stream)) == NULL) {
        UTIL_LOG_ERROR("host device: %p is not a stream of the host backend (made by "
                       "strata_comm_stream_create)", stream);
        return STRATA_ERR_INVALID;
    }
    if (next == queue->stream) {
        return STRATA_OK;
    }
    if (queue->stream != NULL && next != NULL) {
        status = host_stream_wait(next, queue->stream);
    } else if (queue->stream != NULL) {
        host_stream_finish(queue->stream);
    }
    if (status != STRATA_OK) {
        return status;
    }
    if (next != NULL) {
        host_stream_ref(next);
    }
    if (queue->stream != NULL) {
        host_stream_unref(queue->stream);
    }
    queue->stream = next;
    return STRATA_OK;
}

strata_status_t host_queue_write(intra_queue_t *queue, void *dst, const void *src, size_t size)
{
    if (size == 0) {
        return STRATA_OK;
    }
    if (queue->stream != NULL) {
        if (host_stream_is_capturing(queue->stream)) {
            UTIL_LOG_ERROR("host device: a copy to the device inside a stream capture: a "
                           "replay would copy stale data");
            return STRATA_ERR_UNSUPPORTED;
        }
        return host_stream_copy(queue->stream, dst, src, size);
    }
    memmove(dst, src, size);
    return STRATA_OK;
}

strata_status_t host_queue_read(intra_queue_t *queue, void *dst, const void *src, size_t size)
{
    strata_status_t status = host_queue_synchronize(queue);

    if (status == STRATA_OK && size > 0) {
        memmove(dst, src, size);
    }
    return status;
}

strata_status_t host_queue_fill(intra_queue_t *queue, void *dst, int value, size_t size)
{
    if (size == 0) {
        return STRATA_OK;
    }
    if (queue->stream != NULL) {
        return host_stream_fill(queue->stream, dst, value, size);
    }
    memset(dst, value, size);
    return STRATA_OK;
}

strata_status_t host_queue_capturing(const intra_queue_t *queue, bool *capturing_p)
{
    *capturing_p = queue->stream != NULL && host_stream_is_capturing(queue->stream);
    return STRATA_OK;
}
