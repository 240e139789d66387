/*
 * The proxy thread: takes requests off the submission ring, queues their operations by
 * peer and has them posted (inter_post.c), polls every rail's completion queue, counts
 * immediates, matches messages to receives, sends heartbeats and fails silent peers.
 * A round of it (inter_proxy_step) runs under the engine's progress lock: on the progress
 * thread (STRATA_INTER_PROGRESS=thread, or while work rings are attached), or on whichever
 * thread waits (caller), with the thread then beating only once per heartbeat interval.
 * inter_proxy_drain runs at destroy, once nothing else can.
 */
#include "inter_internal.h"
#include "util/util_cpus.h"

#include <linux/futex.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define INTER_PROXY_CQ_BATCH 32
/* A proxy that found nothing to do this many loops in a row naps instead of yielding: where
 * threads outnumber cores, spinning proxies take the cores the ranks' own work needs. The
 * nap bounds the delay it adds to the first arrival after a quiet spell. */
#define INTER_PROXY_IDLE_LOOPS 2000
#define INTER_PROXY_NAP_NS     (50 * UTIL_NSEC_PER_USEC)

static void inter_active_push(inter_engine_t *engine, inter_request_t *req)
{
    req->next_active = engine->active;
    engine->active   = req;
}

void inter_op_finished(inter_op_t *op, strata_status_t status)
{
    inter_request_t *req = op->req;

    if (status != STRATA_OK && req->status == STRATA_OK) {
        req->status = status;
    }
    if (req->extents != NULL && inter_list_op_done(req->engine, op)) {
        return; /* filled with the list's next chunk and queued again */
    }
    if (++req->ops_finished == req->num_ops) {
        inter_request_finish(req, req->status);
    }
}

/* --- Messages -------------------------------------------------------------------------- */

static bool inter_recv_matches(const inter_request_t *req, int src, uint32_t channel)
{
    return req->channel == channel && (req->peer == -1 || req->peer == src);
}

static void inter_recv_complete(inter_request_t *req, int src, const void *data, size_t len)
{
    strata_status_t status = STRATA_OK;

    if (len > req->cap) {
        UTIL_LOG_ERROR("engine: message of %zu bytes from rank %d into a %zu-byte receive", len,
                       src, req->cap);
        status = STRATA_ERR_INVALID;
        len    = req->cap;
    }
    if (len > 0) {
        memcpy(req->buf, data, len);
    }
    req->length = len;
    req->source = src;
    inter_request_finish(req, status);
}

static void inter_deliver(inter_engine_t *engine, int src, uint32_t channel, const void *data,
                          size_t len)
{
    inter_request_t **link = &engine->recvs, *req;
    inter_unexpected_t *msg, **tail;

    for (; (req = *link) != NULL; link = &req->next_recv) {
        if (inter_recv_matches(req, src, channel)) {
            *link = req->next_recv;
            inter_recv_complete(req, src, data, len);
            return;
        }
    }
    msg = malloc(sizeof(*msg) + len);
    if (msg == NULL) {
        /* Dropping it would leave the receive meant for it waiting forever. */
        inter_proxy_fail_peer(engine, src, "out of memory keeping a message from it");
        return;
    }
    msg->next    = NULL;
    msg->src     = src;
    msg->channel = channel;
    msg->length  = len;
    memcpy(msg->data, data, len);
    for (tail = &engine->unexpected; *tail != NULL; tail = &(*tail)->next) {
    }
    *tail = msg;
}

static void inter_post_user_recv(inter_engine_t *engine, inter_request_t *req)
{
    inter_unexpected_t **link = &engine->unexpected, *msg;
    inter_request_t **tail;

    if (atomic_load(&req->cancelled)) {
        /* cancelled before it was taken: the sweep its cancel made due may have run
         * already, without it in the list, and none other is due before the heartbeat */
        inter_request_finish(req, STRATA_ERR_CANCELLED);
        return;
    }

    for (; (msg = *link) != NULL; link = &msg->next) {
        if (inter_recv_matches(req, msg->src, msg->channel)) {
            *link = msg->next;
            inter_recv_complete(req, msg->src, msg->data, msg->length);
            free(msg);
            return;
        }
    }
    if (req->peer >= 0 && inter_engine_peer_failed(engine, req->peer)) {
        inter_request_finish(req, STRATA_ERR_PEER_FAILED);
        return;
    }
    for (tail = &engine->recvs; *tail != NULL; tail = &(*tail)->next_recv) {
    }
    req->next_recv = NULL;
    *tail          = req;
}

/* --- Immediates ------------------------------------------------------------------------- */

static void inter_notify_check(inter_engine_t *engine, uint32_t imm)
{
    inter_request_t *req = engine->notify[imm];

    if (req == NULL) {
        return;
    }
    if (inter_counter_take(&engine->imm_count[imm], req->count)) {
        engine->notify[imm] = NULL;
        req->fn(req->arg, imm, STRATA_OK);
        inter_request_finish(req, STRATA_OK);
    }
}

static void inter_imm_arrived(inter_engine_t *engine, uint32_t imm, int rail)
{
    uint32_t type = imm >> INTER_IMM_TYPE_SHIFT, value = imm & INTER_IMM_VALUE_MASK;

    if (type == INTER_IMM_BARRIER) {
        atomic_fetch_add_explicit(&engine->barrier_count[value % INTER_BARRIER_SLOTS], 1,
                                  memory_order_release);
    } else if (type == INTER_IMM_USER && value < INTER_IMM_MAX &&
               !inter_ring_imm(engine, value, rail)) {
        /* Proxy publishes the arrival (release); waiters acquire the count. */
        atomic_fetch_add_explicit(&engine->imm_count[value], 1, memory_order_release);
        inter_notify_check(engine, value);
    }
}

static void inter_add_notify(inter_engine_t *engine, inter_request_t *req)
{
    inter_request_t *old = engine->notify[req->imm];

    if (old != NULL) {
        UTIL_LOG_ERROR("engine: immediate %u already has a callback", req->imm);
        req->fn(req->arg, req->imm, STRATA_ERR_BUSY);
        inter_request_finish(req, STRATA_ERR_BUSY);
        return;
    }
    if (req->peer >= 0 && inter_engine_peer_failed(engine, req->peer)) {
        req->fn(req->arg, req->imm, STRATA_ERR_PEER_FAILED);
        inter_request_finish(req, STRATA_ERR_PEER_FAILED);
        return;
    }
    engine->notify[req->imm] = req;
    inter_notify_check(engine, req->imm);
}

/* --- Submission --------------------------------------------------------------------------- */

static void inter_accept(inter_engine_t *engine, inter_request_t *req)
{
    inter_active_push(engine, req);
    switch (req->type) {
    case INTER_REQ_RECV:
        inter_post_user_recv(engine, req);
        return;
    case INTER_REQ_NOTIFY:
        inter_add_notify(engine, req);
        return;
    case INTER_REQ_RING:
        inter_ring_accept(engine, req);
        return;
    case INTER_REQ_RMA:
    case INTER_REQ_SEND:
        for (inter_op_t *op = req->ops; op != NULL; op = op->sibling) {
            op->req = req;
            if (req->extents == NULL) {
                inter_queues_push(&engine->pending, op);
            }
        }
        if (req->extents != NULL) {
            inter_list_accept(engine, req); /* its immediates wait for its data */
        }
        return;
    }
}

static void inter_sweep(inter_engine_t *engine);

static int inter_pop_submissions(inter_engine_t *engine)
{
    inter_request_t *req;
    int n = 0;

    if (inter_pools_sweep_due(engine)) {
        inter_sweep(engine); /* room in the pools before the heartbeat's sweep */
    }
    while (n < 256 && (req = util_ring_pop(&engine->ring)) != NULL) {
        inter_accept(engine, req);
        ++n;
    }
    return n;
}

/* --- Completions -------------------------------------------------------------------------- */

/* Give a receive buffer back to the transport; keep it for a later try if it is refused. */
static void inter_repost_rx(inter_engine_t *engine, inter_op_t *op)
{
    inter_rail_t *rail = &engine->rails[op->rail];
    strata_status_t status;

    status = engine->ops->post_recv(rail->tp, op->lbuf, op->len, op->desc, op);
    if (status != STRATA_OK) {
        if (status != STRATA_ERR_BUSY) {
            UTIL_LOG_DEBUG("engine: re-posting a receive buffer on rail %d: %s", op->rail,
                           strata_status_string(status));
        }
        op->next         = engine->rx_retry;
        engine->rx_retry = op;
    }
}

static int inter_retry_rx(inter_engine_t *engine)
{
    inter_op_t *list = engine->rx_retry, *op;
    int n = 0;

    engine->rx_retry = NULL;
    while ((op = list) != NULL) {
        list = op->next;
        inter_repost_rx(engine, op); /* back on the list if refused again */
        ++n;
    }
    return n;
}

bool inter_msg_parse(const void *buf, size_t length, int world_size, inter_msg_view_t *view)
{
    inter_msg_header_t header;

    if (length < sizeof(header)) {
        return false;
    }
    memcpy(&header, buf, sizeof(header));
    if (header.magic != INTER_MSG_MAGIC || header.src < 0 || header.src >= world_size ||
        header.length > length - sizeof(header)) {
        return false;
    }
    *view = (inter_msg_view_t){.src = header.src, .type = (inter_msg_type_t)header.type,
                               .payload = (const char *)buf + sizeof(header),
                               .length = header.length, .channel = header.channel};
    return true;
}

static void inter_on_message(inter_engine_t *engine, inter_op_t *rx, size_t length)
{
    inter_msg_view_t msg;

    if (!inter_msg_parse(rx->lbuf, length, engine->params.world_size, &msg)) {
        UTIL_LOG_WARN("engine: dropped a malformed message of %zu bytes on rail %d", length,
                      rx->rail);
        return;
    }
    engine->last_seen[msg.src] = util_clock_now_ns();
    if (!atomic_load_explicit(&engine->heard[msg.src], memory_order_relaxed)) {
        atomic_store_explicit(&engine->heard[msg.src], true, memory_order_release);
        atomic_fetch_add_explicit(&engine->peers_heard, 1, memory_order_release);
        inter_engine_wake(engine); /* inter_engine_connect waits for every peer */
    }
    if (msg.type == INTER_MSG_USER) {
        inter_deliver(engine, msg.src, msg.channel, msg.payload, msg.length);
    } else if (msg.type == INTER_MSG_LEAVING || msg.type == INTER_MSG_LEFT_ACK) {
        inter_leave_on_message(engine, msg.src, msg.type, rx->rail);
    }
}

/* A transport error, or a cancellation nobody asked for (the provider tore down the
 * connection), means the peer is gone. */
static bool inter_means_peer_gone(const inter_op_t *op, strata_status_t status)
{
    return status == STRATA_ERR_TRANSPORT ||
           (status == STRATA_ERR_CANCELLED && (op->req == NULL || !atomic_load(&op->req->cancelled)));
}

/* A heartbeat send came back: its buffer is free, and the next beat may go. */
static void inter_on_heartbeat(inter_engine_t *engine, inter_op_t *op, strata_status_t status)
{
    inter_rail_t *rail = &engine->rails[op->rail];

    rail->tx_free[rail->num_tx_free++] = op->slot;
    op->slot                           = -1;
    if (inter_means_peer_gone(op, status)) {
        inter_proxy_fail_peer(engine, op->peer, "a heartbeat to it failed");
    }
}

static void inter_on_local(inter_engine_t *engine, inter_op_t *op, strata_status_t status,
                           uint64_t now)
{
    if (op->kind == INTER_OP_FLUSH) {
        inter_ring_flush_done(engine, op, status); /* paced by nothing, owed to no request */
        return;
    }
    if (op->kind != INTER_OP_HEARTBEAT) {
        inter_pace_completed(engine, op, status, now); /* every write, read and send */
    }
    if (op->ring != NULL) {
        inter_ring_op_done(engine, op, status);
        return;
    }
    if (op->kind == INTER_OP_HEARTBEAT) {
        inter_on_heartbeat(engine, op, status);
        return;
    }
    if (op->kind == INTER_OP_SEND && op->slot >= 0) {
        inter_rail_t *rail = &engine->rails[op->rail];

        rail->tx_free[rail->num_tx_free++] = op->slot;
        op->slot                           = -1;
    }
    op->req->ops_posted--; /* back from the transport */
    if (inter_means_peer_gone(op, status)) {
        inter_proxy_fail_peer(engine, op->peer, "an operation to it failed");
        status = STRATA_ERR_PEER_FAILED;
    }
    inter_op_finished(op, status);
}

/* A completion queue that cannot be read: nothing on this rail will complete again. */
static void inter_break_rail(inter_engine_t *engine, int r)
{
    engine->rail_broken[r] = true;
    UTIL_LOG_ERROR("engine: rail %d's completion queue failed; failing every peer", r);
    for (int p = 0; p < engine->params.world_size; ++p) {
        inter_proxy_fail_peer(engine, p, "its rail broke");
    }
}

static void inter_on_cqe(inter_engine_t *engine, int rail, const inter_cqe_t *cqe, uint64_t now)
{
    inter_op_t *op = cqe->context;

    if (cqe->kind == INTER_CQE_IMM && cqe->status == STRATA_OK) {
        inter_imm_arrived(engine, cqe->imm, rail);
    }
    if (op == NULL) {
        return;
    }
    /* What was posted decides, not the flags: providers may leave error flags empty. */
    if (op->kind != INTER_OP_RX) {
        inter_on_local(engine, op, cqe->status, now);
        return;
    }
    if (cqe->kind == INTER_CQE_RECV && cqe->status == STRATA_OK) {
        inter_on_message(engine, op, cqe->length);
    }
    if (cqe->status != STRATA_ERR_CANCELLED) {
        inter_repost_rx(engine, op); /* FI_RX_CQ_DATA immediates consume a buffer too */
    }
}

static int inter_poll_rail(inter_engine_t *engine, int r)
{
    inter_cqe_t cqes[INTER_PROXY_CQ_BATCH];
    uint64_t now;
    int n = 0;

    if (engine->rail_broken[r]) {
        return 0;
    }
    if (engine->ops->poll(engine->rails[r].tp, cqes, INTER_PROXY_CQ_BATCH, &n) != STRATA_OK) {
        inter_break_rail(engine, r);
        return 0;
    }
    now = util_clock_now_ns(); /* when this batch of completions was seen */
    for (int i = 0; i < n; ++i) {
        inter_on_cqe(engine, r, &cqes[i], now);
    }
    return n;
}

/* Cancelled receives leave the matching list; they complete STRATA_ERR_CANCELLED. */
static void inter_sweep_cancelled_recvs(inter_engine_t *engine)
{
    inter_request_t **link = &engine->recvs;

    while (*link != NULL) {
        if (atomic_load(&(*link)->cancelled)) {
            inter_request_finish(*link, STRATA_ERR_CANCELLED);
            *link = (*link)->next_recv;
        } else {
            link = &(*link)->next_recv;
        }
    }
}

/* Free requests the user gave back once nothing of theirs is with the transport: back
 * into the pools. */
static void inter_sweep(inter_engine_t *engine)
{
    inter_request_t **link = &engine->active, *req;

    inter_pools_sweeping(engine);
    inter_sweep_cancelled_recvs(engine);

    while ((req = *link) != NULL) {
        bool in_recv_list = req->type == INTER_REQ_RECV && !atomic_load(&req->done);

        if (atomic_load_explicit(&req->released, memory_order_acquire) &&
            atomic_load(&req->done) && req->ops_posted == 0 && !in_recv_list &&
            req->ops_finished == req->num_ops) {
            *link = req->next_active;
            inter_request_destroy(req);
        } else {
            link = &req->next_active;
        }
    }
}

/* Work rings attached, or retiring with commands in flight: their producers (kernels)
 * wait on no thread of ours, so the progress thread must run flat out while there are any. */
static void inter_note_rings(inter_engine_t *engine)
{
    unsigned live = engine->rings != NULL || engine->retired_rings != NULL;

    if (atomic_exchange_explicit(&engine->rings_live, live, memory_order_acq_rel) != live &&
        live) {
        syscall(SYS_futex, &engine->rings_live, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
}

/* One round of progress; the caller holds engine->progress_lock. Returns the work done. */
static int inter_proxy_step(inter_engine_t *engine)
{
    uint64_t now = util_clock_now_ns();
    int work, completions = 0, wedged;

    atomic_store_explicit(&engine->proxy_pulse, now, memory_order_release);
    if (now - engine->last_step > engine->params.peer_timeout_ns / 2) {
        /* Progress stalled here: the silence was ours, not the peers'. */
        for (int p = 0; p < engine->params.world_size; ++p) {
            engine->last_seen[p] = now;
        }
    }
    engine->last_step = now;
    wedged            = atomic_exchange(&engine->wedged_on, -1);
    if (wedged >= 0) {
        inter_proxy_fail_peer(engine, wedged, "the transport was stuck on it");
    }
    work = inter_pop_submissions(engine);
    work += inter_ring_progress(engine);
    work += inter_retry_rx(engine);
    work += inter_post_pending(engine);
    INTER_FOR_EACH_RAIL(engine, r) {
        completions += inter_poll_rail(engine, r);
    }
    work += inter_leave_progress(engine); /* answers to what this round heard, too */
    inter_ring_publish(engine); /* what the kernels wait for, after this round */
    work += completions;
    if (completions > 0) {
        inter_engine_wake(engine); /* immediates counted, requests finished */
    }
    now = util_clock_now_ns();
    if (now >= engine->next_heartbeat) {
        inter_heartbeat(engine, now);
        inter_sweep(engine);
        inter_ring_sweep(engine);
        engine->next_heartbeat = now + engine->params.heartbeat_ns;
    }
    inter_note_rings(engine);
    return work;
}

int inter_engine_progress(inter_engine_t *engine)
{
    int work;

    if (!atomic_load_explicit(&engine->running, memory_order_acquire) ||
        pthread_mutex_trylock(&engine->progress_lock) != 0) {
        return 0; /* another thread is progressing (or the engine is going) */
    }
    work = inter_proxy_step(engine);
    pthread_mutex_unlock(&engine->progress_lock);
    return work;
}

/* Caller progress with no work ring: sleep until the next heartbeat is due, or until a
 * ring is attached (or the engine stops), then one round unless a caller is in one. */
static void inter_proxy_beat(inter_engine_t *engine)
{
    struct timespec nap = {
        .tv_sec  = (time_t)(engine->params.heartbeat_ns / UTIL_NSEC_PER_SEC),
        .tv_nsec = (long)(engine->params.heartbeat_ns % UTIL_NSEC_PER_SEC)};

    syscall(SYS_futex, &engine->rings_live, FUTEX_WAIT_PRIVATE, 0, &nap, NULL, 0);
    inter_engine_progress(engine);
}

/*
 * The proxy on the CPUs nearest its NIC and GPU (params.proxy_cpus), as far as the process
 * may run there: a memory access of the NIC's or the GPU's then does not cross sockets. A
 * list that shares no CPU with the process's (a container's share, a topology file of
 * another machine) leaves the thread where it would be: false.
 */
bool inter_proxy_cpus(const inter_engine_t *engine, cpu_set_t *set_p)
{
    const char *list = engine->params.proxy_cpus;
    cpu_set_t near, allowed;

    if (list[0] == '\0') {
        return false;
    }
    if (util_cpus_parse(list, &near) != STRATA_OK) {
        UTIL_LOG_WARN("engine: the proxy's CPUs \"%s\" are not a CPU list: not pinned", list);
        return false;
    }
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
        return false;
    }
    CPU_AND(set_p, &near, &allowed);
    if (CPU_COUNT(set_p) == 0) {
        UTIL_LOG_INFO("engine: the CPUs nearest the NIC (%s) are none this process may use: "
                      "the proxy is not pinned", list);
        return false;
    }
    UTIL_LOG_DEBUG("engine: the proxy runs on %d CPUs of %s", CPU_COUNT(set_p), list);
    return true;
}

void *inter_proxy_main(void *arg)
{
    inter_engine_t *engine = arg;
    unsigned idle = 0;
    int work;

    if (engine->params.proxy_start_fn != NULL) {
        engine->params.proxy_start_fn(engine->params.proxy_start_ctx);
    }
    while (atomic_load_explicit(&engine->running, memory_order_acquire)) {
        if (engine->caller_progress &&
            !atomic_load_explicit(&engine->rings_live, memory_order_acquire)) {
            inter_proxy_beat(engine);
            continue;
        }
        pthread_mutex_lock(&engine->progress_lock);
        work = inter_proxy_step(engine);
        pthread_mutex_unlock(&engine->progress_lock);
        idle = work == 0 ? idle + 1 : 0;
        if (idle > INTER_PROXY_IDLE_LOOPS) {
            util_sleep_ns(INTER_PROXY_NAP_NS);
        } else if (work == 0) {
            sched_yield();
        }
    }
    return NULL;
}

void inter_proxy_stop(inter_engine_t *engine)
{
    atomic_store_explicit(&engine->running, false, memory_order_release);
    atomic_store(&engine->rings_live, 1); /* a beating thread wakes and sees running false */
    syscall(SYS_futex, &engine->rings_live, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void inter_free_rings(inter_ring_t *list)
{
    while (list != NULL) {
        inter_ring_t *ring = list;

        list = ring->next;
        inter_ring_free(ring);
    }
}

void inter_proxy_drain(inter_engine_t *engine)
{
    inter_request_t *req;
    inter_unexpected_t *msg;

    if (engine->ring.slots != NULL) {
        while ((req = util_ring_pop(&engine->ring)) != NULL) {
            inter_active_push(engine, req);
        }
    }
    for (uint32_t imm = 0; imm < INTER_IMM_MAX; ++imm) {
        if ((req = engine->notify[imm]) != NULL) {
            engine->notify[imm] = NULL;
            req->fn(req->arg, imm, STRATA_ERR_CANCELLED);
        }
    }
    while ((req = engine->active) != NULL) {
        engine->active = req->next_active;
        inter_request_destroy(req);
    }
    while ((msg = engine->unexpected) != NULL) {
        engine->unexpected = msg->next;
        free(msg);
    }
    engine->recvs = NULL;
    inter_queues_clear(&engine->pending);
    /* The endpoints are shut down: no ring command can complete any more. */
    inter_free_rings(engine->rings);
    inter_free_rings(engine->retired_rings);
    engine->rings = engine->retired_rings = NULL;
}
