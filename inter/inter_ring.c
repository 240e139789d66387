/*
 * Device-producer work rings: commands that kernel blocks (or host threads) publish in a
 * util_work_ring_t are read by the proxy in ticket order, checked, and posted whole as RDMA
 * writes or reads; their completions raise the ring's counters and give credit back.
 * Everything here except attach, detach and stats runs on the proxy thread.
 */
#include "inter_internal.h"

#include <stdlib.h>
#include <string.h>

#define INTER_RING_BATCH 64 /* commands read from one ring per proxy loop */

static _Atomic uint64_t *inter_ring_word(uint64_t *word)
{
    return (_Atomic uint64_t *)word;
}

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

static void inter_ring_set_failure(inter_ring_t *ring, strata_status_t status)
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

int inter_ring_progress(inter_engine_t *engine)
{
    int work = 0;

    for (inter_ring_t *ring = engine->rings; ring != NULL; ring = ring->next) {
        work += inter_ring_drain(engine, ring);
    }
    return work;
}

/* Credit back every command completed in ticket order. */
static void inter_ring_retire(inter_ring_t *ring)
{
    uint64_t before = ring->retired;

    while (ring->retired < ring->consumed && ring->done[ring->retired & ring->mask]) {
        ring->retired++;
    }
    if (ring->retired != before && !ring->detached) {
        /* Release: the slots are free again; producers acquire credit before writing. */
        atomic_store_explicit(inter_ring_word(&ring->mem->credit), ring->retired + ring->mask + 1,
                              memory_order_release);
    }
}

/* The network wrote into the ring's memory through rail: the next flush reads on it. The
 * same-node transport's writes are the CPU's or the GPU's own copies, which need none. */
static void inter_ring_note_write(inter_ring_t *ring, int rail)
{
    if (rail >= 0 && rail < INTER_MAX_RAILS) {
        ring->flush_rails |= 1u << rail;
    }
}

/* One more of count i (counters first, then immediates), published by inter_ring_publish. */
static void inter_ring_count(inter_ring_t *ring, uint32_t i)
{
    ring->counts[i] += 1;
    if (!ring->is_dirty[i]) {
        ring->is_dirty[i]             = true;
        ring->dirty[ring->num_dirty++] = i;
    }
}

void inter_ring_op_done(inter_engine_t *engine, inter_op_t *op, strata_status_t status)
{
    inter_ring_t *ring = op->ring;
    ring->in_flight--;
    ring->done[op->slot] = true;
    if (status != STRATA_OK) {
        if (status == STRATA_ERR_TRANSPORT || status == STRATA_ERR_CANCELLED) {
            inter_proxy_fail_peer(engine, op->peer, "a work ring command to it failed");
        }
        inter_ring_set_failure(ring, STRATA_ERR_PEER_FAILED);
    } else {
        inter_ring_count(ring, op->counter);
        if (op->kind == INTER_OP_READ) {
            inter_ring_note_write(ring, op->rail); /* the NIC wrote what it read here */
        }
    }
    inter_ring_retire(ring);
}

void inter_ring_op_posted(inter_op_t *op)
{
    inter_ring_note_delay(op->ring, &util_work_ring_cmds(op->ring->mem)[op->slot]);
}

void inter_ring_op_dropped(inter_op_t *op)
{
    inter_ring_t *ring = op->ring;

    ring->in_flight--;
    ring->done[op->slot] = true;
    inter_ring_retire(ring);
}

bool inter_ring_imm(inter_engine_t *engine, uint32_t value, int rail)
{
    for (inter_ring_t *ring = engine->rings; ring != NULL; ring = ring->next) {
        const util_work_ring_t *mem = ring->mem;

        if (value >= mem->imm_base && value - mem->imm_base < mem->num_imms) {
            inter_ring_count(ring, mem->num_counters + (value - mem->imm_base));
            inter_ring_note_write(ring, rail);
            return true;
        }
    }
    return false;
}

/* Release: the data a count stands for before the count; waiters acquire. */
static void inter_ring_store(inter_ring_t *ring, uint32_t i, uint64_t count)
{
    uint32_t counters = ring->mem->num_counters;
    uint64_t *word = i < counters ? &util_work_ring_counters(ring->mem)[i]
                                  : &util_work_ring_imms(ring->mem)[i - counters];

    atomic_store_explicit(inter_ring_word(word), count, memory_order_release);
}

/* Raise every dirty count (i is counter i, or immediate i - num_counters) to its value. */
static void inter_ring_publish_dirty(inter_ring_t *ring)
{
    for (uint32_t d = 0; d < ring->num_dirty; ++d) {
        uint32_t i = ring->dirty[d];

        inter_ring_store(ring, i, ring->counts[i]);
        ring->is_dirty[i] = false;
    }
    ring->num_dirty = 0;
}

/* The dirty counts wait for the flush that begins now, with their values now. */
static void inter_ring_hold_dirty(inter_ring_t *ring)
{
    for (uint32_t d = 0; d < ring->num_dirty; ++d) {
        uint32_t i = ring->dirty[d];

        ring->held[d]        = i;
        ring->held_counts[d] = ring->counts[i];
        ring->is_dirty[i]    = false;
    }
    ring->num_held  = ring->num_dirty;
    ring->num_dirty = 0;
}

/* A read of region 0's first word on this rank, into the engine's scratch word, on rail. */
static strata_status_t inter_ring_post_flush(inter_engine_t *engine, inter_ring_t *ring, int rail)
{
    int self = engine->params.rank;
    const inter_rdesc_t *rdesc = &ring->remote[self];
    inter_op_t *op = &ring->flush_ops[rail];

    *op = (inter_op_t){.kind = INTER_OP_FLUSH, .rail = rail, .peer = self, .ring = ring,
                       .slot = -1};
    return inter_post_one(engine, &(inter_post_t){
                                      .kind = INTER_POST_READ,
                                      .peer = engine->rails[rail].peers[self],
                                      .buf = &engine->ctrl[INTER_CTRL_FLUSH],
                                      .len = sizeof(uint64_t),
                                      .desc = engine->ctrl_mr->tmr[rail].desc,
                                      .raddr = inter_remote_addr(engine, rail, rdesc, 0),
                                      .rkey = rdesc->keys[rail], .context = op});
}

/* Post the flush's reads not posted yet; a full queue leaves the rest for the next round. */
static void inter_ring_flush_post(inter_engine_t *engine, inter_ring_t *ring)
{
    while (ring->flush_unposted != 0 && !ring->failed) {
        int rail = __builtin_ctz(ring->flush_unposted);
        strata_status_t status = inter_ring_post_flush(engine, ring, rail);

        if (status == STRATA_ERR_BUSY) {
            return;
        }
        ring->flush_unposted &= ~(1u << rail);
        if (status != STRATA_OK) {
            UTIL_LOG_ERROR("engine: posting a work ring's loopback read on rail %d: %s", rail,
                           strata_status_string(status));
            inter_ring_set_failure(ring, STRATA_ERR_TRANSPORT);
            return;
        }
        ring->flush_waiting++;
    }
}

/* A ring flushed by loopback reads: one flush at a time, each holding the counts that were
 * dirty when it began; counts that need none are raised at once only while none is under
 * way, so that no count is ever raised past a value a flush still holds. */
static void inter_ring_publish_by_read(inter_engine_t *engine, inter_ring_t *ring)
{
    if (ring->flush_waiting > 0 || ring->flush_unposted != 0) {
        inter_ring_flush_post(engine, ring);
        return;
    }
    if (ring->num_dirty == 0 || ring->failed) {
        return;
    }
    if (ring->flush_rails == 0) {
        inter_ring_publish_dirty(ring); /* only writes completed: nothing landed here */
        return;
    }
    inter_ring_hold_dirty(ring);
    ring->flush_unposted = ring->flush_rails;
    ring->flush_rails    = 0;
    inter_ring_flush_post(engine, ring);
}

void inter_ring_flush_done(inter_engine_t *engine, inter_op_t *op, strata_status_t status)
{
    inter_ring_t *ring = op->ring;

    (void)engine;
    ring->flush_waiting--;
    if (status != STRATA_OK) {
        UTIL_LOG_ERROR("engine: a work ring's loopback read on rail %d failed: %s", op->rail,
                       strata_status_string(status));
        inter_ring_set_failure(ring, STRATA_ERR_TRANSPORT);
    } else {
        atomic_fetch_add_explicit(&ring->flushes, 1, memory_order_relaxed);
    }
    if (ring->flush_waiting > 0 || ring->flush_unposted != 0 || ring->failed ||
        ring->detached) {
        return;
    }
    for (uint32_t h = 0; h < ring->num_held; ++h) {
        inter_ring_store(ring, ring->held[h], ring->held_counts[h]);
    }
    ring->num_held = 0;
}

/*
 * Raise the counts of what arrived and completed in this round of polling: after one flush
 * where the ring's memory needs it, so that a reader that sees a count sees its data.
 * Detached rings are off the list: their memory is no longer the proxy's to write.
 */
void inter_ring_publish(inter_engine_t *engine)
{
    for (inter_ring_t *ring = engine->rings; ring != NULL; ring = ring->next) {
        if (ring->flush_by_read) {
            inter_ring_publish_by_read(engine, ring);
            continue;
        }
        if (ring->num_dirty == 0) {
            continue;
        }
        if (ring->flush_fn != NULL) {
            ring->flush_fn(ring->flush_ctx);
        }
        inter_ring_publish_dirty(ring);
    }
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
