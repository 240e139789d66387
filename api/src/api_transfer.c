/*
 * Weight transfer plans: the pieces every rank agreed on, checked once; this rank's sends
 * grouped per (tensor, destination) with adjacent pieces merged, each group one list write
 * with the tensor's immediate; what this rank awaits per tensor. A round submits the groups
 * destinations interleaved, within a bound of bytes in flight, and waits for them.
 */
#include "api/api.h"
#include "api_comm.h"
#include "api_list.h"

#include <stdlib.h>
#include <string.h>

#define API_TRANSFER_INFLIGHT ((uint64_t)64 << 20) /* bytes in flight per rail */
#define API_TRANSFER_REQUESTS 64                   /* list writes in flight at most */

/* What this rank sends one destination of one tensor: one list write. */
typedef struct api_transfer_group {
    int             dst;
    uint32_t        tensor;
    inter_extent_t *extents;
    uint32_t        count;
    uint64_t        bytes;
} api_transfer_group_t;

struct strata_transfer_plan {
    strata_comm_t        *comm;
    const inter_mr_t     *lmr;
    uint32_t              num_tensors, imm_base;
    inter_rdesc_t        *descs;     /* [size] every rank's region */
    api_transfer_group_t *groups;    /* this rank's, in submission order */
    size_t                num_groups;
    uint64_t             *expect;    /* [num_tensors] immediates this rank awaits a round */
    bool                 *landed;    /* [num_tensors] waited for in this round */
    uint64_t              rounds;
};

/* What every rank sends the others at creation. */
typedef struct api_transfer_card {
    uint64_t      digest; /* of the pieces, num_tensors and imm_base */
    inter_rdesc_t desc;   /* its region (magic 0: none) */
} api_transfer_card_t;

static uint64_t api_transfer_digest(const strata_transfer_piece_t *pieces, size_t n,
                                    uint32_t num_tensors, uint32_t imm_base)
{
    uint64_t h = 1469598103934665603ull ^ num_tensors ^ ((uint64_t)imm_base << 32);

    for (size_t i = 0; i < n; ++i) {
        uint64_t words[6] = {pieces[i].tensor, (uint64_t)pieces[i].src_rank, pieces[i].src_offset,
                             (uint64_t)pieces[i].dst_rank, pieces[i].dst_offset,
                             pieces[i].length};

        for (int w = 0; w < 6; ++w) {
            h = (h ^ words[w]) * 1099511628211ull;
        }
    }
    return h;
}

/* Piece i is a transfer between known ranks inside both regions; one line if not. */
static bool api_piece_valid(const strata_transfer_plan_t *plan, const strata_transfer_piece_t *p,
                            size_t i)
{
    int size = plan->comm->size;
    const inter_rdesc_t *src, *dst;

    if (p->tensor >= plan->num_tensors || p->src_rank < 0 || p->src_rank >= size ||
        p->dst_rank < 0 || p->dst_rank >= size || p->src_rank == p->dst_rank ||
        p->length == 0) {
        UTIL_LOG_ERROR("transfer plan: piece %zu (tensor %u, rank %d -> rank %d, %zu bytes): "
                       "tensors are 0..%u, ranks 0..%d and different, lengths positive", i,
                       p->tensor, p->src_rank, p->dst_rank, p->length, plan->num_tensors - 1,
                       size - 1);
        return false;
    }
    src = &plan->descs[p->src_rank];
    dst = &plan->descs[p->dst_rank];
    if (p->src_offset > src->length || p->length > src->length - p->src_offset ||
        p->dst_offset > dst->length || p->length > dst->length - p->dst_offset) {
        UTIL_LOG_ERROR("transfer plan: piece %zu (tensor %u): [%zu, +%zu) of rank %d's region "
                       "(%llu bytes) to [%zu, +%zu) of rank %d's (%llu bytes) does not fit", i,
                       p->tensor, p->src_offset, p->length, p->src_rank,
                       (unsigned long long)src->length, p->dst_offset, p->length, p->dst_rank,
                       (unsigned long long)dst->length);
        return false;
    }
    return true;
}

/* No destination byte is written by two pieces; one line naming two that overlap. */
static strata_status_t api_pieces_disjoint(const strata_transfer_piece_t *pieces, size_t n)
{
    api_dst_range_t *ranges = malloc(n * sizeof(*ranges));
    strata_status_t status;

    if (ranges == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; ++i) {
        ranges[i] = (api_dst_range_t){.rank = pieces[i].dst_rank,
                                      .offset = pieces[i].dst_offset,
                                      .length = pieces[i].length, .entry = i};
    }
    status = api_ranges_disjoint("transfer plan", ranges, n, "pieces");
    free(ranges);
    return status;
}

/* Every piece valid, and no destination byte written twice. */
static strata_status_t api_plan_check(const strata_transfer_plan_t *plan,
                                      const strata_transfer_piece_t *pieces, size_t n)
{
    for (size_t i = 0; i < n; ++i) {
        if (!api_piece_valid(plan, &pieces[i], i)) {
            return STRATA_ERR_INVALID;
        }
    }
    return api_pieces_disjoint(pieces, n);
}

/* One of this rank's pieces, by its place in the group order: tensor, destination, then as
 * listed. */
typedef struct api_piece_ref {
    uint32_t tensor;
    int      dst;
    size_t   piece;
} api_piece_ref_t;

static int api_ref_order(const void *a, const void *b)
{
    const api_piece_ref_t *x = a, *y = b;

    if (x->tensor != y->tensor) {
        return x->tensor < y->tensor ? -1 : 1;
    }
    if (x->dst != y->dst) {
        return x->dst < y->dst ? -1 : 1;
    }
    return (x->piece > y->piece) - (x->piece < y->piece);
}

/* Piece p into group g, cut into extents of at most API_LIST_MERGE_MAX bytes. */
static void api_group_add(api_transfer_group_t *g, const strata_transfer_piece_t *p)
{
    for (size_t done = 0; done < p->length;) {
        size_t len = UTIL_MIN(p->length - done, API_LIST_MERGE_MAX);

        api_extent_append(g->extents, &g->count, p->src_offset + done, p->dst_offset + done,
                          len);
        g->bytes += len;
        done += len;
    }
}

/* The group of refs[first..end): its extents sized for its pieces, filled. */
static strata_status_t api_group_make(api_transfer_group_t *g, const api_piece_ref_t *refs,
                                      size_t first, size_t end,
                                      const strata_transfer_piece_t *pieces)
{
    size_t extents = 0;

    for (size_t i = first; i < end; ++i) {
        extents += (pieces[refs[i].piece].length + API_LIST_MERGE_MAX - 1) / API_LIST_MERGE_MAX;
    }
    *g = (api_transfer_group_t){.dst = refs[first].dst, .tensor = refs[first].tensor,
                                .extents = malloc(extents * sizeof(inter_extent_t))};
    if (g->extents == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    for (size_t i = first; i < end; ++i) {
        api_group_add(g, &pieces[refs[i].piece]);
    }
    return STRATA_OK;
}

/* This rank's sends, one group per (tensor, destination) in that order, so consecutive
 * groups go to different destinations. */
static strata_status_t api_plan_groups(strata_transfer_plan_t *plan,
                                       const strata_transfer_piece_t *pieces, size_t n)
{
    api_piece_ref_t *refs = malloc((n > 0 ? n : 1) * sizeof(*refs));
    strata_status_t status = STRATA_OK;
    size_t mine = 0;

    plan->groups = calloc(n > 0 ? n : 1, sizeof(*plan->groups));
    if (refs == NULL || plan->groups == NULL) {
        free(refs);
        return STRATA_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; ++i) {
        if (pieces[i].src_rank == plan->comm->rank) {
            refs[mine++] = (api_piece_ref_t){.tensor = pieces[i].tensor,
                                             .dst = pieces[i].dst_rank, .piece = i};
        }
    }
    qsort(refs, mine, sizeof(*refs), api_ref_order);
    for (size_t first = 0, end; first < mine && status == STRATA_OK; first = end) {
        for (end = first + 1; end < mine && refs[end].tensor == refs[first].tensor &&
                              refs[end].dst == refs[first].dst;
             ++end) {
        }
        status = api_group_make(&plan->groups[plan->num_groups++], refs, first, end, pieces);
    }
    free(refs);
    return status;
}

/* Immediates this rank awaits per tensor a round: one per rail from each source that sends
 * it pieces of that tensor (a list write per source and tensor). */
static strata_status_t api_plan_expect(strata_transfer_plan_t *plan,
                                       const strata_transfer_piece_t *pieces, size_t n)
{
    int me = plan->comm->rank, size = plan->comm->size;
    uint8_t *seen = calloc((size_t)plan->num_tensors * (size_t)size, 1);

    plan->expect = calloc(plan->num_tensors, sizeof(*plan->expect));
    plan->landed = calloc(plan->num_tensors, sizeof(*plan->landed));
    if (seen == NULL || plan->expect == NULL || plan->landed == NULL) {
        free(seen);
        return STRATA_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; ++i) {
        const strata_transfer_piece_t *p = &pieces[i];
        uint8_t *first = &seen[(size_t)p->tensor * (size_t)size + (size_t)p->src_rank];

        if (p->dst_rank == me && !*first) {
            *first = 1;
            plan->expect[p->tensor] += inter_engine_list_imm_count(
                plan->comm->engine, api_engine_rank(plan->comm, p->src_rank));
        }
    }
    free(seen);
    return STRATA_OK;
}

/* Every rank's digest and region; CONFIG where a rank's digest differs from ours. */
static strata_status_t api_plan_exchange(strata_transfer_plan_t *plan, uint64_t digest)
{
    strata_comm_t *comm = plan->comm;
    api_transfer_card_t mine = {.digest = digest}, *all = calloc((size_t)comm->size,
                                                                 sizeof(*all));
    strata_status_t status;

    if (all == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    if (plan->lmr != NULL) {
        inter_engine_mem_descriptor(plan->lmr, &mine.desc);
    }
    status = api_comm_allgather(comm, &mine, all, sizeof(mine));
    for (int r = 0; r < comm->size && status == STRATA_OK; ++r) {
        if (all[r].digest != digest) {
            UTIL_LOG_ERROR("transfer plan: rank %d passed other pieces, tensor count or "
                           "imm_base than rank %d: every rank must pass the same", r,
                           comm->rank);
            status = STRATA_ERR_CONFIG;
        }
        plan->descs[r] = all[r].desc;
    }
    free(all);
    return status;
}

STRATA_API void strata_transfer_plan_destroy(strata_transfer_plan_t *plan)
{
    if (plan == NULL) {
        return;
    }
    for (size_t i = 0; plan->groups != NULL && i < plan->num_groups; ++i) {
        free(plan->groups[i].extents);
    }
    free(plan->groups);
    free(plan->descs);
    free(plan->expect);
    free(plan->landed);
    free(plan);
}

STRATA_API strata_status_t strata_transfer_plan_create(strata_comm_t *comm, strata_mem_t *region,
                                                       const strata_transfer_piece_t *pieces,
                                                       size_t num_pieces, uint32_t num_tensors,
                                                       uint32_t imm_base,
                                                       strata_transfer_plan_t **plan_p)
{
    strata_transfer_plan_t *plan;
    strata_status_t status;

    if (comm == NULL || plan_p == NULL || pieces == NULL || num_pieces == 0 ||
        num_tensors == 0 || imm_base >= STRATA_MOE_IMM_BASE ||
        num_tensors > STRATA_MOE_IMM_BASE - imm_base) {
        UTIL_LOG_ERROR("strata_transfer_plan_create: %zu pieces of %u tensors from immediate "
                       "%u (NULL communicator, pieces or result? the immediates must end "
                       "below STRATA_MOE_IMM_BASE, %u)", num_pieces, num_tensors, imm_base,
                       STRATA_MOE_IMM_BASE);
        return STRATA_ERR_INVALID;
    }
    plan = calloc(1, sizeof(*plan));
    if (plan == NULL || (plan->descs = calloc((size_t)comm->size, sizeof(*plan->descs))) == NULL) {
        free(plan);
        return STRATA_ERR_NO_MEMORY;
    }
    *plan = (strata_transfer_plan_t){.comm = comm, .descs = plan->descs,
                                     .lmr = (const inter_mr_t *)(uintptr_t)region,
                                     .num_tensors = num_tensors, .imm_base = imm_base};
    status = api_plan_exchange(plan, api_transfer_digest(pieces, num_pieces, num_tensors,
                                                         imm_base));
    if (status == STRATA_OK) {
        status = api_plan_check(plan, pieces, num_pieces);
    }
    if (status == STRATA_OK) {
        status = api_plan_groups(plan, pieces, num_pieces);
    }
    if (status == STRATA_OK) {
        status = api_plan_expect(plan, pieces, num_pieces);
    }
    status = api_comm_agree(comm, status, "transfer plan"); /* no rank goes on alone */
    if (status != STRATA_OK) {
        strata_transfer_plan_destroy(plan);
        return status;
    }
    *plan_p = plan;
    return STRATA_OK;
}

/* List writes in flight, oldest first. */
typedef struct api_inflight {
    inter_request_t *reqs[API_TRANSFER_REQUESTS];
    uint64_t         bytes[API_TRANSFER_REQUESTS];
    unsigned         head, count;
    uint64_t         total;
} api_inflight_t;

/* Wait for the oldest write until deadline. */
static strata_status_t api_wait_oldest(const api_inflight_t *f, uint64_t deadline)
{
    uint64_t now = util_clock_now_ns();

    return inter_request_wait(f->reqs[f->head], now < deadline ? deadline - now : 0);
}

static void api_forget_oldest(api_inflight_t *f)
{
    inter_request_free(f->reqs[f->head]);
    f->total -= f->bytes[f->head];
    f->head = (f->head + 1) % API_TRANSFER_REQUESTS;
    f->count--;
}

/* Past the deadline: every write in flight is cancelled (the chunks not yet posted stay
 * unposted), then waited for until the chunks posted have ended, so that once the round
 * returns nothing reads the source region. The transport ends each of those within the peer
 * timeout, with the peer's failure at worst; one that does not is logged. */
static void api_cancel_inflight(strata_transfer_plan_t *plan, api_inflight_t *f)
{
    inter_engine_t *engine = plan->comm->engine;
    uint64_t deadline = util_clock_now_ns() + inter_engine_peer_timeout_ns(engine);
    unsigned lent = 0;

    for (unsigned i = 0; i < f->count; ++i) {
        inter_request_cancel(f->reqs[(f->head + i) % API_TRANSFER_REQUESTS]);
    }
    while (f->count > 0) {
        lent += api_wait_oldest(f, deadline) == STRATA_ERR_TIMEOUT;
        api_forget_oldest(f);
    }
    if (lent > 0) {
        UTIL_LOG_ERROR("transfer plan: %u writes cancelled at the round's deadline had not "
                       "ended a peer timeout later: they may still read the source region",
                       lent);
    }
}

/* The oldest write's end (STRATA_ERR_TIMEOUT: it was still in flight at the deadline, and
 * is still in the list). */
static strata_status_t api_retire_oldest(api_inflight_t *f, uint64_t deadline)
{
    strata_status_t status = api_wait_oldest(f, deadline);

    if (status != STRATA_ERR_TIMEOUT) {
        api_forget_oldest(f);
    }
    return status;
}

/* The engine's pools were full: our oldest write ends, or, with none of ours in flight,
 * others' requests come back a little later. */
static strata_status_t api_wait_room(api_inflight_t *f, uint64_t deadline)
{
    if (f->count > 0) {
        return api_retire_oldest(f, deadline);
    }
    if (util_clock_now_ns() >= deadline) {
        return STRATA_ERR_TIMEOUT;
    }
    util_sleep_ns(10 * UTIL_NSEC_PER_USEC);
    return STRATA_OK;
}

/* Group g as one list write (its extents copied: the engine owns what it is given). */
static strata_status_t api_submit_group(strata_transfer_plan_t *plan,
                                        const api_transfer_group_t *g, inter_request_t **req_p)
{
    inter_extent_t *copy = malloc(g->count * sizeof(*copy));

    if (copy == NULL) {
        return STRATA_ERR_NO_MEMORY;
    }
    memcpy(copy, g->extents, g->count * sizeof(*copy));
    return inter_engine_write_list(plan->comm->engine, api_engine_rank(plan->comm, g->dst),
                                   plan->lmr, &plan->descs[g->dst],
                                   copy, g->count, true, plan->imm_base + g->tensor, req_p);
}

/* This rank's groups, at most API_TRANSFER_REQUESTS and API_TRANSFER_INFLIGHT per rail in
 * flight; the first error, after every write in flight ended (past the deadline, once
 * cancelled). */
static strata_status_t api_plan_send(strata_transfer_plan_t *plan, uint64_t deadline)
{
    uint64_t budget = API_TRANSFER_INFLIGHT *
                      (uint64_t)UTIL_MAX(inter_engine_num_rails(plan->comm->engine), 1);
    strata_status_t status = STRATA_OK, ended;
    api_inflight_t f = {.count = 0};
    size_t g = 0;

    while (g < plan->num_groups && status == STRATA_OK) {
        const api_transfer_group_t *group = &plan->groups[g];
        inter_request_t *req;

        if (f.count == API_TRANSFER_REQUESTS || (f.count > 0 && f.total + group->bytes > budget)) {
            status = api_retire_oldest(&f, deadline);
            continue;
        }
        status = api_submit_group(plan, group, &req);
        if (status == STRATA_ERR_BUSY) { /* the pools are full: ours come back, or others' */
            status = api_wait_room(&f, deadline);
            continue;
        }
        if (status == STRATA_OK) {
            unsigned at = (f.head + f.count++) % API_TRANSFER_REQUESTS;

            f.reqs[at]  = req;
            f.bytes[at] = group->bytes;
            f.total += group->bytes;
            ++g;
        }
    }
    while (f.count > 0) {
        ended  = api_retire_oldest(&f, deadline);
        status = status == STRATA_OK ? ended : status;
        if (ended == STRATA_ERR_TIMEOUT) {
            api_cancel_inflight(plan, &f); /* every one of them, the oldest included */
        }
    }
    return status;
}

static uint64_t api_deadline(uint64_t timeout_ms)
{
    uint64_t now = util_clock_now_ns();

    return timeout_ms > (UINT64_MAX - now) / UTIL_NSEC_PER_MSEC
               ? UINT64_MAX : now + timeout_ms * UTIL_NSEC_PER_MSEC;
}

STRATA_API strata_status_t strata_transfer_plan_execute(strata_transfer_plan_t *plan,
                                                        uint64_t timeout_ms)
{
    if (plan == NULL) {
        UTIL_LOG_ERROR("strata_transfer_plan_execute: NULL plan");
        return STRATA_ERR_INVALID;
    }
    plan->rounds++;
    memset(plan->landed, 0, plan->num_tensors * sizeof(*plan->landed));
    return api_plan_send(plan, api_deadline(timeout_ms));
}

STRATA_API strata_status_t strata_transfer_plan_wait_tensor(strata_transfer_plan_t *plan,
                                                            uint32_t tensor,
                                                            uint64_t timeout_ms)
{
    strata_status_t status;

    if (plan == NULL || plan->rounds == 0 || tensor >= plan->num_tensors ||
        plan->expect[tensor] == 0) {
        UTIL_LOG_ERROR("strata_transfer_plan_wait_tensor: tensor %u %s", tensor,
                       plan == NULL ? "of a NULL plan"
                       : plan->rounds == 0 ? "before strata_transfer_plan_execute"
                       : tensor >= plan->num_tensors ? "is not one of the plan's"
                                                     : "has no piece landing on this rank");
        return STRATA_ERR_INVALID;
    }
    if (plan->landed[tensor]) {
        return STRATA_OK;
    }
    status = api_imm_wait(plan->comm, plan->imm_base + tensor, plan->expect[tensor], -1,
                          timeout_ms > UINT64_MAX / UTIL_NSEC_PER_MSEC
                              ? UINT64_MAX / 2 : timeout_ms * UTIL_NSEC_PER_MSEC);
    plan->landed[tensor] = status == STRATA_OK;
    return status;
}

STRATA_API strata_status_t strata_transfer_plan_wait(strata_transfer_plan_t *plan,
                                                     uint64_t timeout_ms)
{
    uint64_t deadline = api_deadline(timeout_ms);
    strata_status_t status = STRATA_OK;

    if (plan == NULL || plan->rounds == 0) {
        UTIL_LOG_ERROR("strata_transfer_plan_wait: %s", plan == NULL
                           ? "NULL plan" : "before strata_transfer_plan_execute");
        return STRATA_ERR_INVALID;
    }
    for (uint32_t t = 0; t < plan->num_tensors && status == STRATA_OK; ++t) {
        uint64_t now = util_clock_now_ns();

        if (plan->expect[t] > 0 && !plan->landed[t]) {
            status = strata_transfer_plan_wait_tensor(
                plan, t, now < deadline ? (deadline - now) / UTIL_NSEC_PER_MSEC : 0);
        }
    }
    return status;
}
