/*
 * Streams of the host backend: what is enqueued on one (kernel launches, copies, fills,
 * waits for another stream) runs in order on a thread of its own, after the call that
 * enqueued it has returned, as on a GPU. Objects launched on them are stream-ordered the
 * way they are on CUDA and HIP, so those paths run, and are tested, without a GPU.
 */
#include "host_device.h"
#include "intra/kernels/moe_format.h"
#include "util/util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef enum host_task_kind {
    HOST_TASK_LAUNCH,
    HOST_TASK_COPY,
    HOST_TASK_FILL,
    HOST_TASK_WAIT,
    HOST_TASK_RELEASE,
} host_task_kind_t;

/* Memory freed once every stream that had work queued when its free was asked has run
 * that work (host_streams_free): one hold per such stream, and the caller's. */
typedef struct host_release {
    atomic_uint holds;
    void       *ptr;
} host_release_t;

typedef struct host_task {
    host_task_kind_t   kind;
    struct host_task  *next;
    /* launch */
    intra_moe_kernel_t kernel;
    intra_moe_args_t   args;
    intra_queue_t     *pool;       /* the stream's workers for this launch's blocks */
    /* copy (from data, the source as it was when enqueued) and fill */
    void              *dst;
    void              *data;
    size_t             size, capacity;
    int                value;
    /* wait: until after has completed mark tasks */
    host_stream_t     *after;
    uint64_t           mark;
    /* release: one hold of it */
    host_release_t    *release;
} host_task_t;

struct host_stream {
    host_stream_t  *next_live; /* in host_streams_live */
    pthread_t       thread;
    pthread_mutex_t lock;
    pthread_cond_t  wake;      /* a task was added, or stopping */
    pthread_cond_t  progress;  /* completed moved on */
    host_task_t    *head, *tail;
    host_task_t    *spare;     /* finished tasks, reused */
    uint64_t        enqueued;  /* tasks so far */
    uint64_t        completed; /* of those, finished */
    bool            stopping;
    bool            capturing;
    intra_queue_t **pools;     /* workers, one pool per block count launched so far */
    unsigned        num_pools;
    /* The struct lives while anything holds it: its creator until host_stream_destroy,
     * each queue on it, each wait for it still queued (a CUDA event stays valid after its
     * stream is destroyed, and so does what waits for it here). */
    atomic_uint     refs;
    bool            destroyed; /* its thread has ended: nothing more may be enqueued */
};

/* The streams that exist: a pointer a caller passes is used only once found here, so a
 * stream of another backend, or a destroyed one, is refused rather than read. */
static pthread_mutex_t host_streams_lock = PTHREAD_MUTEX_INITIALIZER;
static host_stream_t  *host_streams_live;

host_stream_t *host_stream_of(void *stream)
{
    host_stream_t *s;

    pthread_mutex_lock(&host_streams_lock);
    for (s = host_streams_live; s != NULL && s != stream; s = s->next_live) {
    }
    pthread_mutex_unlock(&host_streams_lock);
    return s;
}

void host_stream_ref(host_stream_t *s)
{
    atomic_fetch_add(&s->refs, 1);
}

void host_stream_unref(host_stream_t *s)
{
    if (atomic_fetch_sub(&s->refs, 1) != 1) {
        return;
    }
    while (s->spare != NULL) {
        host_task_t *t = s->spare;

        s->spare = t->next;
        free(t->data);
        free(t);
    }
    pthread_cond_destroy(&s->progress);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static void host_stream_wait_for(host_stream_t *after, uint64_t mark)
{
    pthread_mutex_lock(&after->lock);
    while (after->completed < mark) {
        pthread_cond_wait(&after->progress, &after->lock);
    }
    pthread_mutex_unlock(&after->lock);
}

void host_stream_finish(host_stream_t *s)
{
    uint64_t mark;

    pthread_mutex_lock(&s->lock);
    mark = s->enqueued;
    pthread_mutex_unlock(&s->lock);
    host_stream_wait_for(s, mark);
}

static void host_release_drop(host_release_t *r)
{
    if (atomic_fetch_sub(&r->holds, 1) == 1) {
        free(r->ptr);
        free(r);
    }
}

static void host_stream_run(const host_task_t *t)
{
    switch (t->kind) {
    case HOST_TASK_LAUNCH:
        host_moe_launch(t->pool, t->kernel, &t->args);
        break;
    case HOST_TASK_COPY:
        memcpy(t->dst, t->data, t->size);
        break;
    case HOST_TASK_FILL:
        memset(t->dst, t->value, t->size);
        break;
    case HOST_TASK_WAIT:
        host_stream_wait_for(t->after, t->mark);
        host_stream_unref(t->after); /* its hold, taken by host_stream_wait */
        break;
    case HOST_TASK_RELEASE:
        host_release_drop(t->release);
        break;
    }
}

static void *host_stream_main(void *arg)
{
    host_stream_t *s = arg;

    pthread_mutex_lock(&s->lock);
    for (;;) {
        host_task_t *t;

        while (s->head == NULL && !s->stopping) {
            pthread_cond_wait(&s->wake, &s->lock);
        }
        if (s->head == NULL) {
            break; /* stopping, and nothing left */
        }
        t = s->head;
        pthread_mutex_unlock(&s->lock);
        host_stream_run(t); /* the task stays at the head until it has run */
        /* Release: what the task wrote before what the next writes, as a GPU stream's
         * copies land in order; another process may be reading them. */
        atomic_thread_fence(memory_order_release);
        pthread_mutex_lock(&s->lock);
        s->head = t->next;
        if (s->head == NULL) {
            s->tail = NULL;
        }
        t->next  = s->spare;
        s->spare = t;
        ++s->completed;
        pthread_cond_broadcast(&s->progress);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

strata_status_t host_stream_create(void **stream_p)
{
    host_stream_t *s = calloc(1, sizeof(*s));

    if (s == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->progress, NULL);
    atomic_init(&s->refs, 1);
    if (pthread_create(&s->thread, NULL, host_stream_main, s) != 0) {
        UTIL_LOG_ERROR("host device: cannot start a stream's thread");
        pthread_cond_destroy(&s->progress);
        pthread_cond_destroy(&s->wake);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return STRATA_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&host_streams_lock);
    s->next_live      = host_streams_live;
    host_streams_live = s;
    pthread_mutex_unlock(&host_streams_lock);
    *stream_p = s;
    return STRATA_OK;
}

/* Runs what was enqueued, then ends the thread. The struct stays while a queue is still on
 * the stream or another stream's wait for it is queued: those find it finished, and a
 * queue's later launches on it are refused. */
void host_stream_destroy(void *stream)
{
    host_stream_t *s = host_stream_of(stream);

    if (s == NULL) {
        return;
    }
    host_stream_finish(s); /* a free deferred for its work finds it listed until then */
    pthread_mutex_lock(&host_streams_lock);
    for (host_stream_t **p = &host_streams_live; *p != NULL; p = &(*p)->next_live) {
        if (*p == s) {
            *p = s->next_live;
            break;
        }
    }
    pthread_mutex_unlock(&host_streams_lock);
    pthread_mutex_lock(&s->lock);
    s->stopping  = true;
    s->destroyed = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    for (unsigned i = 0; i < s->num_pools; ++i) {
        host_queue_destroy(s->pools[i]);
    }
    free(s->pools);
    s->pools     = NULL;
    s->num_pools = 0;
    host_stream_unref(s);
}

/* Every live stream has run what was enqueued on it so far: the host backend's device
 * synchronize. Each is held while waited for, so that one destroyed meanwhile stays. */
strata_status_t host_streams_synchronize(void)
{
    host_stream_t **held;
    size_t n = 0, i = 0;

    pthread_mutex_lock(&host_streams_lock);
    for (host_stream_t *s = host_streams_live; s != NULL; s = s->next_live) {
        ++n;
    }
    held = malloc((n > 0 ? n : 1) * sizeof(*held));
    for (host_stream_t *s = host_streams_live; s != NULL && held != NULL; s = s->next_live) {
        host_stream_ref(s);
        held[i++] = s;
    }
    pthread_mutex_unlock(&host_streams_lock);
    if (held == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    while (i > 0) {
        host_stream_finish(held[--i]);
        host_stream_unref(held[i]);
    }
    free(held);
    return STRATA_OK;
}

strata_status_t host_stream_synchronize(void *stream)
{
    host_stream_t *s = host_stream_of(stream);

    if (s == NULL) {
        UTIL_LOG_ERROR("host device: %p is not a stream of the host backend", stream);
        return STRATA_ERR_INVALID;
    }
    host_stream_finish(s);
    return STRATA_OK;
}

bool host_stream_is_capturing(host_stream_t *s)
{
    bool capturing;

    pthread_mutex_lock(&s->lock);
    capturing = s->capturing;
    pthread_mutex_unlock(&s->lock);
    return capturing;
}

strata_status_t host_stream_capturing(void *stream, bool *capturing_p)
{
    host_stream_t *s = host_stream_of(stream);

    if (s == NULL) {
        return STRATA_ERR_INVALID;
    }
    *capturing_p = host_stream_is_capturing(s);
    return STRATA_OK;
}

void host_stream_set_capturing(void *stream, bool capturing)
{
    host_stream_t *s = host_stream_of(stream);

    if (s != NULL) {
        pthread_mutex_lock(&s->lock);
        s->capturing = capturing;
        pthread_mutex_unlock(&s->lock);
    }
}

/* A task to fill in, with room for data bytes; NULL if memory ran out. */
static host_task_t *host_stream_task(host_stream_t *s, host_task_kind_t kind, size_t data)
{
    host_task_t *t;

    pthread_mutex_lock(&s->lock);
    t = s->spare;
    if (t != NULL) {
        s->spare = t->next;
    }
    pthread_mutex_unlock(&s->lock);
    if (t == NULL && (t = calloc(1, sizeof(*t))) == NULL) {
        return NULL;
    }
    if (data > t->capacity) {
        void *grown = realloc(t->data, data);

        if (grown == NULL) {
            free(t->data);
            free(t);
            return NULL;
        }
        t->data     = grown;
        t->capacity = data;
    }
    t->kind = kind;
    t->next = NULL;
    return t;
}

/* A task that was not enqueued after all, back among the spares. */
static void host_stream_recycle(host_stream_t *s, host_task_t *t)
{
    pthread_mutex_lock(&s->lock);
    t->next  = s->spare;
    s->spare = t;
    pthread_mutex_unlock(&s->lock);
}

/* t queued on s; STRATA_ERR_INVALID, t back among the spares, where s was destroyed
 * meanwhile (a caller that uses a stream while it destroys it: no thread would run t). */
static strata_status_t host_stream_push(host_stream_t *s, host_task_t *t)
{
    pthread_mutex_lock(&s->lock);
    if (s->destroyed) {
        t->next  = s->spare;
        s->spare = t;
        pthread_mutex_unlock(&s->lock);
        UTIL_LOG_ERROR("host device: work for stream %p, which was destroyed", (void *)s);
        return STRATA_ERR_INVALID;
    }
    if (s->tail != NULL) {
        s->tail->next = t;
    } else {
        s->head = t;
    }
    s->tail = t;
    ++s->enqueued;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    return STRATA_OK;
}

/*
 * The stream's pool of workers for launches of num_blocks blocks, made on first use by the
 * enqueuing thread (so that a failure reaches the caller) and kept until the stream goes:
 * launches already enqueued may still be running on the others.
 */
static strata_status_t host_stream_pool(host_stream_t *s, unsigned num_blocks,
                                        intra_queue_t **pool_p)
{
    intra_queue_t **grown, *pool;
    strata_status_t status;

    for (unsigned i = 0; i < s->num_pools; ++i) {
        if (host_queue_blocks(s->pools[i]) == num_blocks) {
            *pool_p = s->pools[i];
            return STRATA_OK;
        }
    }
    grown = realloc(s->pools, (s->num_pools + 1) * sizeof(*grown));
    if (grown == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    s->pools = grown;
    status   = host_queue_create(num_blocks, &pool);
    if (status == STRATA_OK) {
        s->pools[s->num_pools++] = pool;
        *pool_p = pool;
    }
    return status;
}

strata_status_t host_stream_launch(host_stream_t *s, intra_moe_kernel_t kernel,
                                   const intra_moe_args_t *args, unsigned num_blocks)
{
    host_task_t *t = host_stream_task(s, HOST_TASK_LAUNCH, 0);
    strata_status_t status;

    if (t == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    /* Only enqueuing threads touch the pools; the stream's thread uses the task's. A
     * destroyed stream's pools are gone (host_stream_push refuses the task below). */
    pthread_mutex_lock(&s->lock);
    status = s->destroyed ? STRATA_OK
                          : host_stream_pool(s, intra_moe_kernel_one_block(kernel) ? 1
                                                                                   : num_blocks,
                                             &t->pool);
    pthread_mutex_unlock(&s->lock);
    if (status != STRATA_OK) {
        host_stream_recycle(s, t);
        return status;
    }
    t->kernel = kernel;
    t->args   = *args;
    return host_stream_push(s, t);
}

strata_status_t host_stream_copy(host_stream_t *s, void *dst, const void *src, size_t size)
{
    host_task_t *t = host_stream_task(s, HOST_TASK_COPY, size);

    if (t == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    memcpy(t->data, src, size); /* src may change once we return */
    t->dst  = dst;
    t->size = size;
    return host_stream_push(s, t);
}

strata_status_t host_stream_fill(host_stream_t *s, void *dst, int value, size_t size)
{
    host_task_t *t = host_stream_task(s, HOST_TASK_FILL, 0);

    if (t == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    t->dst   = dst;
    t->value = value;
    t->size  = size;
    return host_stream_push(s, t);
}

strata_status_t host_stream_wait(host_stream_t *s, host_stream_t *after)
{
    host_task_t *t;
    strata_status_t status;

    if (after == s) {
        return STRATA_OK;
    }
    if ((t = host_stream_task(s, HOST_TASK_WAIT, 0)) == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&after->lock);
    t->mark = after->enqueued; /* an event recorded on after, now */
    pthread_mutex_unlock(&after->lock);
    host_stream_ref(after); /* until the wait has run, even where after is destroyed first */
    t->after = after;
    if ((status = host_stream_push(s, t)) != STRATA_OK) {
        host_stream_unref(after);
    }
    return status;
}

static bool host_stream_busy(host_stream_t *s)
{
    bool busy;

    pthread_mutex_lock(&s->lock);
    busy = s->completed < s->enqueued;
    pthread_mutex_unlock(&s->lock);
    return busy;
}

/* s holds r until it has run what it has queued now; false if no task could be made. */
static bool host_stream_hold(host_stream_t *s, host_release_t *r)
{
    host_task_t *t = host_stream_task(s, HOST_TASK_RELEASE, 0);

    if (t == NULL) {
        return false;
    }
    atomic_fetch_add(&r->holds, 1);
    t->release = r;
    if (host_stream_push(s, t) != STRATA_OK) { /* a listed stream is not destroyed meanwhile */
        host_release_drop(r);
        return false;
    }
    return true;
}

/*
 * free(ptr) once every stream has run the work queued on it so far, as cudaFree waits for
 * the device: a copy or kernel queued earlier may still write there. The caller does not
 * wait (a stream's kernel may be waiting for another rank that this thread drives): the
 * streams with work queued free it when they reach the point of this call. Only where
 * memory for that runs out does the caller wait for the stream.
 */
void host_streams_free(void *ptr)
{
    host_release_t *r = malloc(sizeof(*r));

    if (r != NULL) {
        atomic_init(&r->holds, 1);
        r->ptr = ptr;
    }
    /* listed streams are not destroyed meanwhile; one being destroyed ran its work first */
    pthread_mutex_lock(&host_streams_lock);
    for (host_stream_t *s = host_streams_live; s != NULL; s = s->next_live) {
        if (host_stream_busy(s) && (r == NULL || !host_stream_hold(s, r))) {
            host_stream_finish(s);
        }
    }
    pthread_mutex_unlock(&host_streams_lock);
    if (r != NULL) {
        host_release_drop(r);
    } else {
        free(ptr);
    }
}
