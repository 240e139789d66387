/*
 * What a work ring's producers and waiters learn from the proxy: completions and arriving
 * immediates raise the ring's counts, which are published into the ring's memory after
 * each round of polling (directly, or once a loopback read on every rail that wrote has
 * flushed the NIC's writes), and completed commands give their slots back as credit, in
 * ticket order. Proxy thread only.
 */
#include "inter_internal.h"

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
