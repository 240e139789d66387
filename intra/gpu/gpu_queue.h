/*
 * The GPU backend body's queues and streams (included by gpu_device.h, once, after its
 * memory and device parts): a queue's own non-blocking stream, or the caller's with an event
 * ordering the change; uploads staged through pinned memory in two halves; reads, fills and
 * kernel launches on the queue's stream; whether a stream is being captured.
 */
#ifndef GPU_OPS
#error "include gpu_device.h, not this file"
#endif

static void gpu_staging_release(gpu_staging_t *st)
{
    for (int h = 0; h < 2; ++h) {
        gpu_host_free(st->half[h]);
        st->half[h] = NULL;
    }
    st->half_size = 0; /* the next upload allocates again */
}

/* Both halves of size bytes (pinned; the device address is not needed). */
static strata_status_t gpu_staging_alloc(gpu_staging_t *st, size_t size)
{
    void *device;

    for (int h = 0; h < 2; ++h) {
        strata_status_t status = gpu_host_alloc(size, -1, (void **)&st->half[h], &device);

        if (status != STRATA_OK) {
            gpu_staging_release(st);
            return status;
        }
    }
    st->half_size   = size;
    st->used        = 0;
    st->current     = 0;
    st->recorded[0] = st->recorded[1] = false;
    return STRATA_OK;
}

static void gpu_queue_destroy(intra_queue_t *queue)
{
    if (queue == NULL) {
        return;
    }
    if (queue->own != NULL) {
        gpu_status(gpuStreamSynchronize(queue->stream), "stream synchronize");
        gpu_status(gpuStreamDestroy(queue->own), "stream destroy");
    }
    for (int h = 0; h < 2; ++h) {
        if (queue->staging.done[h] != NULL) {
            gpu_status(gpuEventDestroy(queue->staging.done[h]), "event destroy");
        }
    }
    if (queue->order != NULL) {
        gpu_status(gpuEventDestroy(queue->order), "event destroy");
    }
    gpu_staging_release(&queue->staging);
    free(queue);
}

static strata_status_t gpu_queue_create(unsigned num_blocks, intra_queue_t **queue_p)
{
    intra_queue_t *queue;
    strata_status_t status;

    if (num_blocks == 0 || num_blocks > 1024) {
        UTIL_LOG_ERROR("%s device: a queue needs 1 to 1024 blocks, not %u", GPU_NAME, num_blocks);
        return STRATA_ERR_INVALID;
    }
    queue = calloc(1, sizeof(*queue));
    if (queue == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    queue->num_blocks = num_blocks;
    /* Non-blocking: the legacy stream, where a framework's work often runs, does not
     * serialise with ours. */
    status = gpu_status(gpuStreamCreateWithFlags(&queue->own, gpuStreamNonBlocking),
                        "stream create");
    if (status == STRATA_OK) {
        status = gpu_current_device(&queue->device);
    }
    if (status == STRATA_OK) {
        status = gpu_status(gpuEventCreateWithFlags(&queue->order, gpuEventDisableTiming),
                            "event create");
    }
    for (int h = 0; h < 2 && status == STRATA_OK; ++h) {
        status = gpu_status(gpuEventCreateWithFlags(&queue->staging.done[h],
                                                    gpuEventDisableTiming), "event create");
    }
    if (status == STRATA_OK) {
        status = gpu_staging_alloc(&queue->staging, GPU_STAGING_HALF);
    }
    if (status != STRATA_OK) {
        gpu_queue_destroy(queue);
        return status;
    }
    queue->stream = queue->own;
    *queue_p = queue;
    return STRATA_OK;
}

/* A caller's stream must belong to the queue's GPU: kernels launched on another GPU's
 * stream would run there, on memory they cannot reach. */
static strata_status_t gpu_stream_check_device(const intra_queue_t *queue, gpuStream_t stream)
{
#ifdef GPU_STREAM_DEVICE
    int device = -1;
    gpuError_t error = GPU_STREAM_DEVICE(stream, &device);

    if (error != gpuSuccess) {
        UTIL_LOG_ERROR("%s device: %p is not a stream (%s)", GPU_NAME, (void *)stream,
                       gpuGetErrorName(error));
        return STRATA_ERR_INVALID;
    }
    if (device != queue->device) {
        UTIL_LOG_ERROR("%s device: the stream belongs to GPU %d; this object runs on GPU %d",
                       GPU_NAME, device, queue->device);
        return STRATA_ERR_INVALID;
    }
#else
    (void)queue;
    (void)stream;
#endif
    return STRATA_OK;
}

static strata_status_t gpu_queue_set_stream(intra_queue_t *queue, void *stream)
{
    gpuStream_t next = stream != NULL ? (gpuStream_t)stream : queue->own;
    strata_status_t status = STRATA_OK;

    if (next == queue->stream) {
        return STRATA_OK;
    }
    if (stream != NULL) {
        status = gpu_stream_check_device(queue, next);
    }
    /* The next step's kernels reuse step numbers and buffers the last step's may still be
     * using on the old stream: the new stream starts after them. Captured too. */
    if (status == STRATA_OK) {
        status = gpu_status(gpuEventRecord(queue->order, queue->stream), "event record");
    }
    if (status == STRATA_OK) {
        status = gpu_status(gpuStreamWaitEvent(next, queue->order, 0), "stream wait event");
    }
    if (status == STRATA_OK) {
        queue->stream = next;
    }
    return status;
}

static strata_status_t gpu_stream_capturing(void *stream, bool *capturing_p)
{
    gpuStreamCaptureStatus capture = gpuStreamCaptureStatusNone;
    gpuError_t error = gpuStreamIsCapturing((gpuStream_t)stream, &capture);

    if (error != gpuSuccess) {
        UTIL_LOG_ERROR("%s device: is the stream capturing: %s", GPU_NAME,
                       gpuGetErrorName(error));
        return STRATA_ERR_INVALID;
    }
    *capturing_p = capture != gpuStreamCaptureStatusNone;
    return STRATA_OK;
}

static strata_status_t gpu_queue_capturing(const intra_queue_t *queue, bool *capturing_p)
{
    return gpu_stream_capturing(queue->stream, capturing_p);
}

/* Room for size bytes in the staging area: the next half when the current one is full. */
static strata_status_t gpu_staging_take(intra_queue_t *queue, size_t size, char **slot_p)
{
    gpu_staging_t *st = &queue->staging;
    strata_status_t status = STRATA_OK;
    size_t need = (size + 15) & ~(size_t)15;

    if (need > st->half_size) { /* grow: once every copy from the old area has run */
        status = gpu_status(gpuStreamSynchronize(queue->stream), "staging wait");
        if (status == STRATA_OK) {
            gpu_staging_release(st);
            status = gpu_staging_alloc(st, need);
        }
    } else if (st->used + need > st->half_size) {
        status = gpu_status(gpuEventRecord(st->done[st->current], queue->stream),
                            "event record");
        st->recorded[st->current] = status == STRATA_OK;
        st->current ^= 1;
        st->used = 0;
        if (status == STRATA_OK && st->recorded[st->current]) {
            status = gpu_status(gpuEventSynchronize(st->done[st->current]), "staging wait");
        }
    }
    if (status == STRATA_OK) {
        *slot_p = st->half[st->current] + st->used;
        st->used += need;
    }
    return status;
}

static strata_status_t gpu_queue_write(intra_queue_t *queue, void *dst, const void *src,
                                       size_t size)
{
    bool capturing = false;
    strata_status_t status;
    char *slot;

    if (size == 0) {
        return STRATA_OK;
    }
    status = gpu_queue_capturing(queue, &capturing);
    if (status == STRATA_OK && capturing) {
        UTIL_LOG_ERROR("%s device: a copy to the device inside a stream capture: a replay "
                       "would copy stale data", GPU_NAME);
        return STRATA_ERR_UNSUPPORTED;
    }
    if (status == STRATA_OK) {
        status = gpu_staging_take(queue, size, &slot);
    }
    if (status == STRATA_OK) {
        memcpy(slot, src, size);
        status = gpu_status(gpuMemcpyAsync(dst, slot, size, gpuMemcpyHostToDevice,
                                           queue->stream), "async copy to the device");
    }
    return status;
}

static strata_status_t gpu_queue_read(intra_queue_t *queue, void *dst, const void *src,
                                      size_t size)
{
    strata_status_t status = STRATA_OK;

    if (size > 0) {
        status = gpu_status(gpuMemcpyAsync(dst, src, size, gpuMemcpyDeviceToHost,
                                           queue->stream), "async copy from the device");
    }
    return status == STRATA_OK ? gpu_status(gpuStreamSynchronize(queue->stream),
                                            "stream synchronize")
                               : status;
}

static strata_status_t gpu_queue_fill(intra_queue_t *queue, void *dst, int value, size_t size)
{
    return size == 0 ? STRATA_OK
                     : gpu_status(gpuMemsetAsync(dst, value, size, queue->stream),
                                  "async memset");
}

static strata_status_t gpu_stream_create(void **stream_p)
{
    gpuStream_t stream;
    strata_status_t status = gpu_status(gpuStreamCreateWithFlags(&stream, gpuStreamNonBlocking),
                                        "stream create");

    if (status == STRATA_OK) {
        *stream_p = (void *)stream;
    }
    return status;
}

static void gpu_stream_destroy(void *stream)
{
    if (stream != NULL) {
        gpu_status(gpuStreamSynchronize((gpuStream_t)stream), "stream synchronize");
        gpu_status(gpuStreamDestroy((gpuStream_t)stream), "stream destroy");
    }
}

static strata_status_t gpu_stream_synchronize(void *stream)
{
    return gpu_status(gpuStreamSynchronize((gpuStream_t)stream), "stream synchronize");
}

static strata_status_t gpu_moe_launch(intra_queue_t *queue, intra_moe_kernel_t kernel,
                                      const struct intra_moe_args *args)
{
    unsigned blocks = intra_moe_kernel_one_block(kernel) ? 1 : queue->num_blocks;

    return gpu_status(GPU_MOE_LAUNCH(queue->stream, (int)kernel, args, blocks),
                      "MoE kernel launch");
}

static strata_status_t gpu_queue_synchronize(intra_queue_t *queue)
{
    return gpu_status(gpuStreamSynchronize(queue->stream), "stream synchronize");
}
