/*
 * Device-producer work rings: commands that kernel blocks (or host threads) publish in a
 * util_work_ring_t are read by the proxy in ticket order, checked, and posted whole as RDMA
 * writes or reads (their completions, counts and credit: inter_ring_counts.c). Everything
 * here except attach, detach and stats runs on the proxy thread.
 */
#include "inter_internal.h"

#include <stdlib.h>
#include <string.h>

#define INTER_RING_BATCH 64 /* commands read from one ring per proxy loop */

void inter_ring_free(inter_ring_t *ring)
{
    if (ring != NULL) {
        free(ring->remote);
        free(ring->peers);
        free(ring->ops);
        free(ring->done);
        free(ring->counts);
        free(ring->dirty);
        free(ring->is_dirty);
        free(ring->held);
        free(ring->held_counts);
        free(ring);
    }
}

/* A ring's peers: engine ranks, each once. */
static bool inter_ring_peers_valid(const inter_engine_t *engine, const inter_ring_params_t *p)
{
    for (int i = 0; i < p->num_peers; ++i) {
        if (p->peers[i] < 0 || p->peers[i] >= engine->params.world_size) {
            return false;
        }
        for (int j = 0; j < i; ++j) {
            if (p->peers[j] == p->peers[i]) {
                return false;
            }
        }
    }
    return p->peers == NULL || p->num_peers >= 1;
}

static strata_status_t inter_ring_check_params(const inter_engine_t *engine,
                                               const inter_ring_params_t *p)
{
    if (p == NULL || p->mem == NULL || p->slots < 2 || p->slots > 65536 ||
        (p->slots & (p->slots - 1)) != 0 || p->num_regions < 1 ||
        p->num_regions > INTER_RING_MAX_REGIONS ||
        (uint64_t)p->imm_base + p->num_imms > INTER_IMM_MAX) {
        UTIL_LOG_ERROR("engine: work ring of %u slots (a power of two, 2..65536), %d regions "
                       "(1..%d), immediates %u + %u (at most %u)", p ? p->slots : 0,
                       p ? p->num_regions : 0, INTER_RING_MAX_REGIONS, p ? p->imm_base : 0,
                       p ? p->num_imms : 0, INTER_IMM_MAX);
        return STRATA_ERR_INVALID;
    }
    if (!inter_ring_peers_valid(engine, p)) {
        UTIL_LOG_ERROR("engine: work ring over %d peers that are not distinct ranks of the "
                       "engine's %d", p->num_peers, engine->params.world_size);
        return STRATA_ERR_INVALID;
    }
    for (int r = 0; r < p->num_regions; ++r) {
        if (p->regions[r] == NULL || p->remote[r] == NULL ||
            p->region_offsets[r] > p->regions[r]->len) {
            UTIL_LOG_ERROR("engine: work ring region %d has no registration or descriptors", r);
            return STRATA_ERR_INVALID;
        }
    }
    return STRATA_OK;
}

inter_ring_t *inter_ring_new(const inter_engine_t *engine, const inter_ring_params_t *p)
{
    size_t world = p->peers != NULL ? (size_t)p->num_peers : (size_t)engine->params.world_size;
    size_t counts = (size_t)p->num_counters + p->num_imms + 1;
    inter_ring_t *ring = calloc(1, sizeof(*ring));

    if (ring == NULL) {
        return NULL;
    }
    ring->remote = calloc((size_t)p->num_regions * world, sizeof(inter_rdesc_t));
    ring->peers    = calloc(world, sizeof(int));
    ring->ops      = calloc(p->slots, sizeof(inter_op_t));
    ring->done     = calloc(p->slots, sizeof(bool));
    ring->counts   = calloc(counts, sizeof(uint64_t));
    ring->dirty    = calloc(counts, sizeof(uint32_t));
    ring->is_dirty = calloc(counts, sizeof(bool));
    if (p->flush_by_read) {
        ring->held        = calloc(counts, sizeof(uint32_t));
        ring->held_counts = calloc(counts, sizeof(uint64_t));
    }
    if (ring->remote == NULL || ring->peers == NULL || ring->ops == NULL || ring->done == NULL ||
        ring->counts == NULL || ring->dirty == NULL || ring->is_dirty == NULL ||
        (p->flush_by_read && (ring->held == NULL || ring->held_counts == NULL))) {
        inter_ring_free(ring);
        return NULL;
    }
    ring->num_peers = (int)world;
    for (size_t i = 0; i < world; ++i) {
        ring->peers[i] = p->peers != NULL ? p->peers[i] : (int)i;
    }
    ring->flush_by_read = p->flush_by_read;
    ring->mem         = p->mem;
    ring->mask        = p->slots - 1;
    ring->num_regions = p->num_regions;
    ring->host_stamps = p->host_stamps;
    ring->flush_fn    = p->flush_fn;
    ring->flush_ctx   = p->flush_ctx;
    for (int r = 0; r < p->num_regions; ++r) {
        ring->regions[r]        = p->regions[r];
        ring->region_offsets[r] = p->region_offsets[r];
        memcpy(ring->remote + (size_t)r * world, p->remote[r], world * sizeof(inter_rdesc_t));
    }
    return ring;
}

void inter_ring_init_mem(const inter_ring_params_t *p)
{
    util_work_ring_t *mem = p->mem;

    memset(mem, 0, util_work_ring_bytes(p->slots, p->num_counters, p->num_imms));
    mem->magic        = UTIL_WORK_RING_MAGIC;
    mem->slots        = p->slots;
    mem->num_counters = p->num_counters;
    mem->num_imms     = p->num_imms;
    mem->imm_base     = p->imm_base;
    /* Release: the zeroed slots and counters before producers may use them. */
    atomic_store_explicit(inter_ring_word(&mem->credit), p->slots, memory_order_release);
}

/* Attach and detach go through the submission ring: only the proxy changes its lists. */
static strata_status_t inter_ring_request(inter_engine_t *engine, inter_ring_t *ring, bool attach)
{
    uint64_t deadline = util_clock_now_ns() + 2 * engine->params.peer_timeout_ns;
    inter_request_t *req;
    strata_status_t status;

    /* Every request may be in flight a while: wait for one rather than fail a detach. */
    status = inter_request_take_wait(engine, INTER_REQ_RING, 0, deadline, &req);
    if (status != STRATA_OK) {
        return status;
    }
    req->ring   = ring;
    req->attach = attach;
    status = inter_request_submit(engine, req);
    if (status != STRATA_OK) {
        return status;
    }
    status = inter_request_wait(req, 2 * engine->params.peer_timeout_ns);
    inter_request_free(req);
    return status;
}

strata_status_t inter_engine_ring_attach(inter_engine_t *engine, const inter_ring_params_t *params,
                                         inter_ring_t **ring_p)
{
    strata_status_t status = inter_ring_check_params(engine, params);
    inter_ring_t *ring;

    if (status != STRATA_OK) {
        return status;
    }
    if (params->flush_by_read && !inter_engine_can_flush_by_read(engine)) {
        UTIL_LOG_ERROR("engine: a work ring asks for flushes by loopback read, which %s "
                       "cannot make", engine->rails[0].tp->name);
        return STRATA_ERR_UNSUPPORTED;
    }
    ring = inter_ring_new(engine, params);
    if (ring == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    inter_ring_init_mem(params);
    status = inter_ring_request(engine, ring, true);
    if (status != STRATA_OK) {
        /* Refused by the proxy (overlapping immediates), or the proxy is stuck: in the
         * latter case it may still take the ring, so it is never freed here. */
        if (status == STRATA_ERR_BUSY) {
            inter_ring_free(ring);
        }
        return status;
    }
    *ring_p = ring;
    return STRATA_OK;
}

void inter_engine_ring_detach(inter_engine_t *engine, inter_ring_t *ring)
{
    strata_status_t status;

    if (ring == NULL) {
        return;
    }
    status = inter_ring_request(engine, ring, false);
    if (status != STRATA_OK) {
        UTIL_LOG_WARN("engine: detaching a work ring: %s; it stays with the engine until its "
                      "destroy", strata_status_string(status));
    }
}

void inter_ring_stats(const inter_ring_t *ring, inter_ring_stats_t *stats_p)
{
    inter_ring_t *r = (inter_ring_t *)ring;

    stats_p->commands     = atomic_load_explicit(&r->commands, memory_order_relaxed);
    stats_p->stamped      = atomic_load_explicit(&r->stamped, memory_order_relaxed);
    stats_p->delay_ns     = atomic_load_explicit(&r->delay_ns, memory_order_relaxed);
    stats_p->max_delay_ns = atomic_load_explicit(&r->max_delay_ns, memory_order_relaxed);
    stats_p->flushes      = atomic_load_explicit(&r->flushes, memory_order_relaxed);
}

bool inter_engine_can_flush_by_read(const inter_engine_t *engine)
{
    for (int r = 0; r < engine->num_rails; ++r) {
        const inter_transport_t *tp = engine->rails[r].tp;

        if (tp == NULL || !tp->has_read || !tp->loopback_flush) {
            return false;
        }
    }
    return engine->num_rails > 0;
}

/* --- Proxy side ----------------------------------------------------------------------------- */

void inter_ring_set_failure(inter_ring_t *ring, strata_status_t status)
{
    if (ring->detached || ring->failed) {
        return;
    }
    ring->failed = true;
    /* Release: producers and waiters that see it stop. */
    atomic_store_explicit((_Atomic int64_t *)&ring->mem->failure, (int64_t)status,
                          memory_order_release);
}

static bool inter_ring_ranges_overlap(const util_work_ring_t *a, const util_work_ring_t *b)
{
    return a->num_imms > 0 && b->num_imms > 0 && a->imm_base < b->imm_base + b->num_imms &&
           b->imm_base < a->imm_base + a->num_imms;
}

static void inter_ring_unlink(inter_ring_t **list, inter_ring_t *ring)
{
    for (inter_ring_t **link = list; *link != NULL; link = &(*link)->next) {
        if (*link == ring) {
            *link = ring->next;
            return;
        }
    }
}

void inter_ring_accept(inter_engine_t *engine, inter_request_t *req)
{
    inter_ring_t *ring = req->ring;

    if (!req->attach) {
        inter_ring_unlink(&engine->rings, ring);
        ring->detached = true;
        ring->next = engine->retired_rings;
        engine->retired_rings = ring;
        inter_request_finish(req, STRATA_OK);
        return;
    }
    for (inter_ring_t *other = engine->rings; other != NULL; other = other->next) {
        if (inter_ring_ranges_overlap(other->mem, ring->mem)) {
            UTIL_LOG_ERROR("engine: a work ring already counts immediates %u..%u",
                           other->mem->imm_base, other->mem->imm_base + other->mem->num_imms - 1);
            inter_request_finish(req, STRATA_ERR_BUSY);
            return;
        }
    }
    ring->next    = engine->rings;
    engine->rings = ring;
    for (int p = 0; p < ring->num_peers; ++p) {
        if (inter_engine_peer_failed(engine, ring->peers[p])) {
            inter_ring_set_failure(ring, STRATA_ERR_PEER_FAILED);
        }
    }
    inter_request_finish(req, STRATA_OK);
}

/* A command that would reach outside its regions is refused whole. */
static bool inter_ring_cmd_valid(const inter_engine_t *engine, const inter_ring_t *ring,
                                 const util_work_cmd_t *cmd)
{
    const util_work_ring_t *mem = ring->mem;
    const inter_mr_t *lmr;
    const inter_rdesc_t *rdesc;
    uint64_t offset;

    if ((cmd->op != UTIL_WORK_WRITE && cmd->op != UTIL_WORK_WRITE_IMM &&
         cmd->op != UTIL_WORK_READ) || cmd->peer < 0 || cmd->peer >= ring->num_peers ||
        cmd->region >= (uint32_t)ring->num_regions || cmd->counter >= mem->num_counters ||
        cmd->length == 0 || cmd->length > engine->rails[0].tp->max_rma_size ||
        (cmd->op == UTIL_WORK_WRITE_IMM && cmd->imm >= INTER_IMM_MAX)) {
        return false;
    }
    lmr   = ring->regions[cmd->region];
    rdesc = &ring->remote[(size_t)cmd->region * (size_t)ring->num_peers + (size_t)cmd->peer];
    offset = ring->region_offsets[cmd->region] + cmd->offset;
    return offset >= cmd->offset && offset <= lmr->len && cmd->length <= lmr->len - offset &&
           rdesc->magic == INTER_RDESC_MAGIC && cmd->remote_offset <= rdesc->length &&
           cmd->length <= rdesc->length - cmd->remote_offset;
}

static void inter_ring_fill_op(const inter_engine_t *engine, inter_ring_t *ring, inter_op_t *op,
                               const util_work_cmd_t *cmd, uint64_t ticket)
{
    const inter_mr_t *lmr = ring->regions[cmd->region];
    const inter_rdesc_t *rdesc = &ring->remote[(size_t)cmd->region * (size_t)ring->num_peers +
                                               (size_t)cmd->peer];
    int peer = ring->peers[cmd->peer], rail;
    inter_stripe_params_t stripe;

    inter_engine_stripe(engine, peer, &stripe);
    rail = inter_rail_for(engine, peer, (uint32_t)(ticket % stripe.num_rails));
    *op = (inter_op_t){
        .kind     = cmd->op == UTIL_WORK_READ ? INTER_OP_READ : INTER_OP_WRITE,
        .rail     = rail,
        .peer     = peer,
        .lbuf     = (char *)lmr->addr + ring->region_offsets[cmd->region] + cmd->offset,
        .len      = cmd->length,
        .desc     = lmr->tmr[rail].desc,
        .raddr    = inter_remote_addr(engine, rail, rdesc, cmd->remote_offset),
        .rkey     = rdesc->keys[rail],
        .with_imm = cmd->op == UTIL_WORK_WRITE_IMM,
        .imm      = (INTER_IMM_USER << INTER_IMM_TYPE_SHIFT) | cmd->imm,
        .slot     = (int)(ticket & ring->mask),
        .ring     = ring,
        .counter  = cmd->counter,
    };
}

static void inter_ring_note_delay(inter_ring_t *ring, const util_work_cmd_t *cmd)
{
    uint64_t now = util_clock_now_ns(), delay, max;

    atomic_fetch_add_explicit(&ring->commands, 1, memory_order_relaxed);
    if (!ring->host_stamps || cmd->stamp == 0 || cmd->stamp > now) {
        return;
    }
    delay = now - cmd->stamp;
    atomic_fetch_add_explicit(&ring->stamped, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&ring->delay_ns, delay, memory_order_relaxed);
    max = atomic_load_explicit(&ring->max_delay_ns, memory_order_relaxed);
    if (delay > max) {
        atomic_store_explicit(&ring->max_delay_ns, delay, memory_order_relaxed);
    }
}

/* Whether the command after ticket is published already and goes to the same peer: the
 * producer has more for that peer behind this one, so rate control does not count its
 * samples as the application's pace. */
static bool inter_ring_has_more(inter_ring_t *ring, uint64_t ticket, int peer)
{
    util_work_cmd_t *next = &util_work_ring_cmds(ring->mem)[(ticket + 1) & ring->mask];

    /* Acquire: the command's fields after its sequence number, as in inter_ring_drain. */
    return atomic_load_explicit(inter_ring_word(&next->seq), memory_order_acquire) == ticket + 2 &&
           next->peer == peer;
}

/*
 * Rate control holds a command as it holds a request's operations: where its peer's window
 * is full, or where operations to that peer are queued already (whose order it keeps),
 * the command joins that peer's queue and the proxy posts it from there (inter_proxy.c)
 * when the window opens. The ring itself is never held: commands to other peers go on.
 * Small commands take the express lane.
 */
static bool inter_ring_must_queue(const inter_engine_t *engine, const inter_op_t *op)
{
    if (inter_queues_head(&engine->pending, op->peer) != NULL) {
        return true;
    }
    return !inter_op_express(op) && !inter_pace_admits(engine, op->peer, 0);
}

/* Post up to a batch of published commands; false when the ring cannot go on. */
static int inter_ring_drain(inter_engine_t *engine, inter_ring_t *ring)
{
    util_work_cmd_t *cmds = util_work_ring_cmds(ring->mem);
    int posted = 0;

    while (posted < INTER_RING_BATCH && !ring->failed) {
        uint64_t ticket = ring->consumed;
        util_work_cmd_t *slot = &cmds[ticket & ring->mask];
        util_work_cmd_t cmd;
        inter_op_t *op = &ring->ops[ticket & ring->mask];
        strata_status_t status;
        inter_post_t post;
        uint64_t now;

        /* Acquire: pairs with the producer's release of seq after the command. */
        if (atomic_load_explicit(inter_ring_word(&slot->seq), memory_order_acquire) != ticket + 1) {
            break;
        }
        if (ticket - ring->retired > ring->mask) {
            /* Published without credit: its slot's op may still wait in a peer's queue. */
            UTIL_LOG_ERROR("engine: work ring command %llu published past the credit given "
                           "(%llu); the ring is failed", (unsigned long long)ticket,
                           (unsigned long long)(ring->retired + ring->mask + 1));
            inter_ring_set_failure(ring, STRATA_ERR_INVALID);
            break;
        }
        cmd = *slot;
        if (!inter_ring_cmd_valid(engine, ring, &cmd)) {
            UTIL_LOG_ERROR("engine: work ring command %llu (op %u to rank %d, region %u, %llu "
                           "bytes at %llu -> %llu, counter %u) is not valid; the ring is failed",
                           (unsigned long long)ticket, cmd.op, cmd.peer, cmd.region,
                           (unsigned long long)cmd.length, (unsigned long long)cmd.offset,
                           (unsigned long long)cmd.remote_offset, cmd.counter);
            inter_ring_set_failure(ring, STRATA_ERR_INVALID);
            break;
        }
        if (inter_engine_peer_failed(engine, ring->peers[cmd.peer])) {
            inter_ring_set_failure(ring, STRATA_ERR_PEER_FAILED);
            break;
        }
        inter_ring_fill_op(engine, ring, op, &cmd, ticket);
        if (inter_ring_must_queue(engine, op)) {
            /* Its peer's window is full, or operations to that peer wait already: it waits
             * with them, in that peer's queue, and the ring goes on to other peers. */
            inter_queues_push(&engine->pending, op);
        } else {
            atomic_store_explicit(&engine->proxy_target, op->peer, memory_order_relaxed);
            now    = util_clock_now_ns();
            post   = inter_rma_post(engine, op);
            status = inter_post_one(engine, &post);
            atomic_store_explicit(&engine->proxy_target, -1, memory_order_relaxed);
            if (status == STRATA_ERR_BUSY) {
                break; /* the transport's queue is full: the same ticket next loop */
            }
            if (status != STRATA_OK) {
                inter_proxy_fail_peer(engine, op->peer, "posting a work ring command failed");
                break;
            }
            inter_ring_note_delay(ring, &cmd);
            inter_pace_posted(engine, op, inter_ring_has_more(ring, ticket, cmd.peer), now);
        }
        ring->done[ticket & ring->mask] = false;
        ring->in_flight++;
        ring->consumed++;
        posted++;
    }
    return posted;
}

void inter_ring_op_posted(inter_op_t *op)
{
    inter_ring_note_delay(op->ring, &util_work_ring_cmds(op->ring->mem)[op->slot]);
}

int inter_ring_progress(inter_engine_t *engine)
{
    int work = 0;

    for (inter_ring_t *ring = engine->rings; ring != NULL; ring = ring->next) {
        work += inter_ring_drain(engine, ring);
    }
    return work;
}

void inter_ring_fail_peer(inter_engine_t *engine, int peer, strata_status_t status)
{
    for (inter_ring_t *ring = engine->rings; ring != NULL; ring = ring->next) {
        for (int p = 0; p < ring->num_peers; ++p) {
            if (ring->peers[p] == peer) {
                inter_ring_set_failure(ring, status);
                break;
            }
        }
    }
}

void inter_ring_sweep(inter_engine_t *engine)
{
    inter_ring_t **link = &engine->retired_rings, *ring;

    while ((ring = *link) != NULL) {
        if (ring->in_flight == 0 && ring->flush_waiting == 0) {
            *link = ring->next;
            inter_ring_free(ring);
        } else {
            link = &ring->next;
        }
    }
}
