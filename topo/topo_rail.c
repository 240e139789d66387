/*
 * Rail plan: for each GPU, the NICs it should drive, closest first and with NICs shared
 * evenly between the GPUs that are equally close to them; within a path class, PCIe hop
 * count decides which GPU a NIC goes to.
 *
 * The work grows with the pairs of GPUs and NICs (G x N paths, once per pass), not with
 * their square: each GPU's closest NICs are listed once; GPUs whose closest NICs are the
 * same share one count of sharers, taken as a union of bitmaps; rails go out level by level
 * of NIC load through a heap of GPUs, each pointing at its best NIC of that level.
 */
#include "topo_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct topo_rail_ctx {
    const topo_t *topo;
    bool         *usable;  /* per NIC: a candidate for rails */
    topo_path_t  *best;    /* per GPU: closest path class to a usable NIC */
    int          *load;    /* per NIC: GPUs that took it as a rail so far */
    /* Each GPU's closest usable NICs (path class best[g]), by fewer hops then index:
     * closest[first[g] .. first[g + 1]), with their hops beside them. */
    int          *first;   /* [num_gpus + 1] */
    int          *closest;
    int          *hops;
} topo_rail_ctx_t;

/* RDMA NICs when there are any, else Ethernet; ports known to be down only as a last resort. */
static void topo_rail_mark_usable(topo_rail_ctx_t *ctx)
{
    const topo_t *topo = ctx->topo;
    bool any_rdma = false, any_up = false;

    for (int n = 0; n < topo->num_nics; ++n) {
        any_rdma = any_rdma || topo_nic_is_rdma(&topo->nics[n]);
    }
    for (int n = 0; n < topo->num_nics; ++n) {
        ctx->usable[n] = !any_rdma || topo_nic_is_rdma(&topo->nics[n]);
        any_up = any_up || (ctx->usable[n] && topo->nics[n].port_state != TOPO_PORT_DOWN);
    }
    for (int n = 0; n < topo->num_nics && any_up; ++n) {
        ctx->usable[n] = ctx->usable[n] && topo->nics[n].port_state != TOPO_PORT_DOWN;
    }
}

/* --- Each GPU's closest NICs ----------------------------------------------------------------- */

/* qsort_r's order of NIC indices by their hops (arg: hops per NIC), then by index. */
static int topo_rail_by_hops(const void *a, const void *b, void *arg)
{
    const int *hops = arg;
    int ia = *(const int *)a, ib = *(const int *)b;
    int ha = hops[ia], hb = hops[ib];

    return ha != hb ? (ha < hb ? -1 : 1) : (ia < ib ? -1 : ia > ib);
}

/* One GPU's best path class and closest NICs, by hops then index, into the lists. path and
 * hops: scratch of num_nics. Returns how many. */
static int topo_rail_list_closest(topo_rail_ctx_t *ctx, int g, topo_path_t *path, int *hops,
                                  int *order)
{
    const topo_t *topo = ctx->topo;
    int count = 0, at = ctx->first[g];

    ctx->best[g] = TOPO_PATH_SYS;
    for (int n = 0; n < topo->num_nics; ++n) {
        path[n] = topo_gpu_nic_path(topo, g, n);
        if (ctx->usable[n] && path[n] < ctx->best[g]) {
            ctx->best[g] = path[n];
        }
    }
    for (int n = 0; n < topo->num_nics; ++n) {
        if (ctx->usable[n] && path[n] == ctx->best[g]) {
            hops[n]        = topo_gpu_nic_hops(topo, g, n);
            order[count++] = n;
        }
    }
    qsort_r(order, (size_t)count, sizeof(int), topo_rail_by_hops, hops);
    for (int i = 0; i < count; ++i) {
        ctx->closest[at + i] = order[i];
        ctx->hops[at + i]    = hops[order[i]];
    }
    return count;
}

static strata_status_t topo_rail_closest_lists(topo_rail_ctx_t *ctx)
{
    const topo_t *topo = ctx->topo;
    size_t nics = (size_t)topo->num_nics, pairs = (size_t)topo->num_gpus * nics;
    topo_path_t *path = calloc(nics + 1, sizeof(*path));
    int *hops = calloc(nics + 1, sizeof(int)), *order = calloc(nics + 1, sizeof(int));
    strata_status_t status = STRATA_ERR_NO_MEMORY;

    if (path == NULL || hops == NULL || order == NULL) {
        goto out;
    }
    /* Room for the worst case: every NIC closest to every GPU (as large as the plan). */
    ctx->closest = malloc((pairs + 1) * sizeof(int));
    ctx->hops    = malloc((pairs + 1) * sizeof(int));
    if (ctx->closest == NULL || ctx->hops == NULL) {
        goto out;
    }
    ctx->first[0] = 0;
    for (int g = 0; g < topo->num_gpus; ++g) {
        ctx->first[g + 1] = ctx->first[g] + topo_rail_list_closest(ctx, g, path, hops, order);
    }
    status = STRATA_OK;
out:
    free(path);
    free(hops);
    free(order);
    return status;
}

/* --- How many rails each GPU takes ---------------------------------------------------------- */

/* Whether GPUs a and b have the same closest NICs (as sets). mark: scratch of num_nics,
 * *stamp: a value not in it yet (advanced here). */
static bool topo_rail_same_closest(const topo_rail_ctx_t *ctx, int a, int b, int *mark,
                                   int *stamp)
{
    int na = ctx->first[a + 1] - ctx->first[a], nb = ctx->first[b + 1] - ctx->first[b];

    if (na != nb) {
        return false;
    }
    ++*stamp;
    for (int i = ctx->first[a]; i < ctx->first[a + 1]; ++i) {
        mark[ctx->closest[i]] = *stamp;
    }
    for (int i = ctx->first[b]; i < ctx->first[b + 1]; ++i) {
        if (mark[ctx->closest[i]] != *stamp) {
            return false;
        }
    }
    return true;
}

/* A hash of a GPU's closest NICs as a set (sum and xor of mixed indices: order-free). */
static uint64_t topo_rail_set_hash(const topo_rail_ctx_t *ctx, int g)
{
    uint64_t sum = 0, mix = 0;

    for (int i = ctx->first[g]; i < ctx->first[g + 1]; ++i) {
        uint64_t x = (uint64_t)ctx->closest[i] * 0x9e3779b97f4a7c15ull;

        x ^= x >> 29;
        sum += x;
        mix ^= x * 0xbf58476d1ce4e5b9ull;
    }
    return sum ^ (mix << 1) ^ (uint64_t)(ctx->first[g + 1] - ctx->first[g]);
}

/*
 * The GPUs sharing at least one closest NIC with GPU g (g included): the union of each of
 * its NICs' GPUs, as a bitmap over GPUs (words of it). nic_gpus: per NIC, a bitmap of the
 * GPUs that have it among their closest.
 */
static int topo_rail_count_sharers(const topo_rail_ctx_t *ctx, int g, const uint64_t *nic_gpus,
                                   uint64_t *seen, size_t words)
{
    int sharers = 0;

    memset(seen, 0, words * sizeof(uint64_t));
    for (int i = ctx->first[g]; i < ctx->first[g + 1]; ++i) {
        const uint64_t *bits = &nic_gpus[(size_t)ctx->closest[i] * words];

        for (size_t w = 0; w < words; ++w) {
            seen[w] |= bits[w];
        }
    }
    for (size_t w = 0; w < words; ++w) {
        sharers += __builtin_popcountll(seen[w]);
    }
    return sharers;
}

/*
 * The first GPU before g with the same closest NICs, -1 if none: a table of the sets seen,
 * by hash (open addressing over 2 x num_gpus slots of GPU + 1, 0 empty).
 */
static int topo_rail_find_set(const topo_rail_ctx_t *ctx, int g, const uint64_t *hash,
                              int *table, size_t slots, int *mark, int *stamp)
{
    size_t at = (size_t)(hash[g] % slots);

    for (; table[at] != 0; at = (at + 1) % slots) {
        int e = table[at] - 1;

        if (hash[e] == hash[g] && topo_rail_same_closest(ctx, e, g, mark, stamp)) {
            return e;
        }
    }
    table[at] = g + 1;
    return -1;
}

/* How many rails each GPU takes: its closest NICs divided by the GPUs competing for them. */
static strata_status_t topo_rail_counts(const topo_rail_ctx_t *ctx, topo_rail_plan_t *plan)
{
    const topo_t *topo = ctx->topo;
    size_t words = ((size_t)topo->num_gpus + 63) / 64, slots = 2 * (size_t)topo->num_gpus + 1;
    uint64_t *nic_gpus = calloc((size_t)topo->num_nics * words + 1, sizeof(uint64_t));
    uint64_t *seen = calloc(words + 1, sizeof(uint64_t));
    uint64_t *hash = calloc((size_t)topo->num_gpus + 1, sizeof(uint64_t));
    int *sharers = calloc((size_t)topo->num_gpus + 1, sizeof(int));
    int *table = calloc(slots, sizeof(int)), *mark = calloc((size_t)topo->num_nics + 1, sizeof(int));
    strata_status_t status = STRATA_ERR_NO_MEMORY;
    int stamp = 0;

    if (nic_gpus == NULL || seen == NULL || hash == NULL || sharers == NULL || table == NULL ||
        mark == NULL) {
        goto out;
    }
    for (int g = 0; g < topo->num_gpus; ++g) {
        for (int i = ctx->first[g]; i < ctx->first[g + 1]; ++i) {
            nic_gpus[(size_t)ctx->closest[i] * words + (size_t)g / 64] |= 1ull << (g % 64);
        }
        hash[g] = topo_rail_set_hash(ctx, g);
    }
    for (int g = 0; g < topo->num_gpus; ++g) {
        int closest = ctx->first[g + 1] - ctx->first[g], same = -1;

        /* GPUs with the same closest NICs have the same sharers: counted once per set. */
        if (closest > 0) {
            same = topo_rail_find_set(ctx, g, hash, table, slots, mark, &stamp);
        }
        sharers[g] = closest == 0 ? 0
                     : same >= 0  ? sharers[same]
                                  : topo_rail_count_sharers(ctx, g, nic_gpus, seen, words);
        plan->rails[g].gpu       = g;
        plan->rails[g].num_rails = closest == 0 ? 0 : UTIL_MAX(1, closest / UTIL_MAX(sharers[g], 1));
        plan->rails[g].num_nics  = 0;
    }
    status = STRATA_OK;
out:
    free(nic_gpus);
    free(seen);
    free(hash);
    free(sharers);
    free(table);
    free(mark);
    return status;
}

/* --- Handing out the rails ------------------------------------------------------------------ */

static bool topo_rail_has(const topo_rail_t *rail, int nic)
{
    for (int i = 0; i < rail->num_nics; ++i) {
        if (rail->nics[i] == nic) {
            return true;
        }
    }
    return false;
}

/* A binary heap of GPUs, least (hops of its candidate, GPU index) on top. */
typedef struct topo_rail_heap {
    int       *gpu;
    int        size;
    const int *key; /* per GPU: the hops of its candidate */
} topo_rail_heap_t;

static bool topo_rail_heap_less(const topo_rail_heap_t *h, int a, int b)
{
    return h->key[a] != h->key[b] ? h->key[a] < h->key[b] : a < b;
}

static void topo_rail_heap_push(topo_rail_heap_t *h, int g)
{
    int i = h->size++;

    while (i > 0 && topo_rail_heap_less(h, g, h->gpu[(i - 1) / 2])) {
        h->gpu[i] = h->gpu[(i - 1) / 2];
        i         = (i - 1) / 2;
    }
    h->gpu[i] = g;
}

static int topo_rail_heap_pop(topo_rail_heap_t *h)
{
    int top = h->gpu[0], last = h->gpu[--h->size], i = 0;

    for (;;) {
        int child = 2 * i + 1;

        if (child >= h->size) {
            break;
        }
        if (child + 1 < h->size && topo_rail_heap_less(h, h->gpu[child + 1], h->gpu[child])) {
            ++child;
        }
        if (!topo_rail_heap_less(h, h->gpu[child], last)) {
            break;
        }
        h->gpu[i] = h->gpu[child];
        i         = child;
    }
    if (h->size > 0) {
        h->gpu[i] = last;
    }
    return top;
}

/* GPU g's first closest NIC from its cursor on that has load `level` and that it has not
 * taken: its candidate (position in its list), -1 when none is left at this level. */
static int topo_rail_advance(const topo_rail_ctx_t *ctx, const topo_rail_plan_t *plan, int g,
                             int level, int *cursor)
{
    for (; ctx->first[g] + cursor[g] < ctx->first[g + 1]; ++cursor[g]) {
        int n = ctx->closest[ctx->first[g] + cursor[g]];

        if (ctx->load[n] == level && !topo_rail_has(&plan->rails[g], n)) {
            return ctx->first[g] + cursor[g];
        }
    }
    return -1;
}

/* The least load of a closest NIC that a GPU still lacking rails has not taken; -1: none. */
static int topo_rail_next_level(const topo_rail_ctx_t *ctx, const topo_rail_plan_t *plan)
{
    int level = -1;

    for (int g = 0; g < plan->num_gpus; ++g) {
        const topo_rail_t *rail = &plan->rails[g];

        for (int i = ctx->first[g]; i < ctx->first[g + 1] && rail->num_nics < rail->num_rails;
             ++i) {
            int n = ctx->closest[i];

            if ((level < 0 || ctx->load[n] < level) && !topo_rail_has(rail, n)) {
                level = ctx->load[n];
            }
        }
    }
    return level;
}

/*
 * Rails, one at a time, over every GPU that still lacks rails and every closest NIC it has
 * not taken: the least loaded NIC first (loads stay within one of each other), then the
 * fewest PCIe hops, so a NIC goes to the GPU nearest to it rather than to the GPU that
 * happens to come first; ties to the lower GPU, then the lower NIC. Done by load level:
 * within a level each GPU points at its best NIC of that level, and a heap of GPUs gives
 * the next pair; a NIC handed out leaves the level, and GPUs pointing at it move on.
 */
static strata_status_t topo_rail_hand_out(topo_rail_ctx_t *ctx, topo_rail_plan_t *plan)
{
    size_t gpus = (size_t)plan->num_gpus + 1;
    int *cursor = calloc(gpus, sizeof(int)), *cand = calloc(gpus, sizeof(int));
    int *key = calloc(gpus, sizeof(int));
    topo_rail_heap_t heap = {.gpu = calloc(gpus, sizeof(int)), .key = key};
    strata_status_t status = STRATA_ERR_NO_MEMORY;
    int level;

    if (cursor == NULL || cand == NULL || key == NULL || heap.gpu == NULL) {
        goto out;
    }
    while ((level = topo_rail_next_level(ctx, plan)) >= 0) {
        for (int g = 0; g < plan->num_gpus; ++g) {
            cursor[g] = 0;
            cand[g]   = plan->rails[g].num_nics < plan->rails[g].num_rails
                            ? topo_rail_advance(ctx, plan, g, level, cursor) : -1;
            if (cand[g] >= 0) {
                key[g] = ctx->hops[cand[g]];
                topo_rail_heap_push(&heap, g);
            }
        }
        while (heap.size > 0) {
            int g = topo_rail_heap_pop(&heap), n = ctx->closest[cand[g]];
            topo_rail_t *rail = &plan->rails[g];

            if (ctx->load[n] == level) { /* still free at this level: g takes it */
                rail->nics[rail->num_nics++] = n;
                ctx->load[n]++;
            }
            if (rail->num_nics < rail->num_rails &&
                (cand[g] = topo_rail_advance(ctx, plan, g, level, cursor)) >= 0) {
                key[g] = ctx->hops[cand[g]];
                topo_rail_heap_push(&heap, g);
            }
        }
    }
    status = STRATA_OK;
out:
    free(cursor);
    free(cand);
    free(key);
    free(heap.gpu);
    return status;
}

/* --- Each GPU's order of NICs ----------------------------------------------------------------- */

/* A NIC's place in one GPU's order: closer path class, then fewer PCIe hops (of two PXB
 * NICs, the one behind the deeper shared switch), then less loaded, then lower index. */
typedef struct topo_rail_rank {
    topo_path_t path;
    int         hops, load, nic;
} topo_rail_rank_t;

static int topo_rail_by_rank(const void *a, const void *b)
{
    const topo_rail_rank_t *x = a, *y = b;

    if (x->path != y->path) {
        return x->path < y->path ? -1 : 1;
    }
    if (x->hops != y->hops) {
        return x->hops < y->hops ? -1 : 1;
    }
    if (x->load != y->load) {
        return x->load < y->load ? -1 : 1;
    }
    return x->nic < y->nic ? -1 : x->nic > y->nic;
}

/* nics[0..count) of GPU g in its order. ranks: scratch of count. */
static void topo_rail_sort(const topo_rail_ctx_t *ctx, int g, int *nics, int count,
                           topo_rail_rank_t *ranks)
{
    for (int i = 0; i < count; ++i) {
        ranks[i] = (topo_rail_rank_t){.path = topo_gpu_nic_path(ctx->topo, g, nics[i]),
                                      .hops = topo_gpu_nic_hops(ctx->topo, g, nics[i]),
                                      .load = ctx->load[nics[i]], .nic = nics[i]};
    }
    qsort(ranks, (size_t)count, sizeof(*ranks), topo_rail_by_rank);
    for (int i = 0; i < count; ++i) {
        nics[i] = ranks[i].nic;
    }
}

/* Each GPU's rails in its order, then its fallbacks (the usable NICs it did not take) in
 * that order too. */
static strata_status_t topo_rail_fallbacks(const topo_rail_ctx_t *ctx, topo_rail_plan_t *plan)
{
    size_t nics = (size_t)ctx->topo->num_nics;
    topo_rail_rank_t *ranks = calloc(nics + 1, sizeof(*ranks));
    int *mark = calloc(nics + 1, sizeof(int));

    if (ranks == NULL || mark == NULL) {
        free(ranks);
        free(mark);
        return STRATA_ERR_NO_MEMORY;
    }
    for (int g = 0; g < plan->num_gpus; ++g) {
        topo_rail_t *rail = &plan->rails[g];

        for (int i = 0; i < rail->num_nics; ++i) {
            mark[rail->nics[i]] = g + 1;
        }
        for (int n = 0; n < ctx->topo->num_nics; ++n) {
            if (ctx->usable[n] && mark[n] != g + 1) {
                rail->nics[rail->num_nics++] = n;
            }
        }
        /* Rails never outnumber the usable NICs: every closest one is among them. */
        topo_rail_sort(ctx, g, rail->nics, UTIL_MIN(rail->num_rails, rail->num_nics), ranks);
        topo_rail_sort(ctx, g, rail->nics + rail->num_rails,
                       UTIL_MAX(rail->num_nics - rail->num_rails, 0), ranks);
    }
    free(ranks);
    free(mark);
    return STRATA_OK;
}

strata_status_t topo_rail_plan_create(const topo_t *topo, topo_rail_plan_t **plan_p)
{
    size_t num_gpus = (size_t)topo->num_gpus, num_nics = (size_t)topo->num_nics;
    topo_rail_ctx_t ctx = {.topo = topo};
    strata_status_t status = STRATA_ERR_NO_MEMORY;
    topo_rail_plan_t *plan;

    plan = calloc(1, sizeof(*plan));
    ctx.usable = calloc(num_nics + 1, sizeof(*ctx.usable));
    ctx.best   = calloc(num_gpus + 1, sizeof(*ctx.best));
    ctx.load   = calloc(num_nics + 1, sizeof(*ctx.load));
    ctx.first  = calloc(num_gpus + 1, sizeof(*ctx.first));
    if (plan == NULL || ctx.usable == NULL || ctx.best == NULL || ctx.load == NULL ||
        ctx.first == NULL) {
        goto out;
    }
    plan->rails = calloc(num_gpus + 1, sizeof(*plan->rails));
    if (plan->rails == NULL) {
        goto out;
    }
    for (size_t g = 0; g < num_gpus; ++g) {
        plan->rails[g].nics = calloc(num_nics + 1, sizeof(int));
        if (plan->rails[g].nics == NULL) {
            goto out;
        }
        plan->num_gpus++;
    }
    topo_rail_mark_usable(&ctx);
    if ((status = topo_rail_closest_lists(&ctx)) != STRATA_OK ||
        (status = topo_rail_counts(&ctx, plan)) != STRATA_OK ||
        (status = topo_rail_hand_out(&ctx, plan)) != STRATA_OK ||
        (status = topo_rail_fallbacks(&ctx, plan)) != STRATA_OK) {
        goto out;
    }
    *plan_p = plan;
    plan    = NULL;
out:
    topo_rail_plan_destroy(plan);
    free(ctx.usable);
    free(ctx.best);
    free(ctx.load);
    free(ctx.first);
    free(ctx.closest);
    free(ctx.hops);
    return status;
}

void topo_rail_plan_destroy(topo_rail_plan_t *plan)
{
    if (plan == NULL) {
        return;
    }
    for (int g = 0; g < plan->num_gpus; ++g) {
        free(plan->rails[g].nics);
    }
    free(plan->rails);
    free(plan);
}
