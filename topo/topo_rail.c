/*
 * Rail plan: for each GPU, the NICs it should drive, closest first and with NICs shared
 * evenly between the GPUs that are equally close to them; within a path class, PCIe hop
 * count decides which GPU a NIC goes to.
 */
#include "topo_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct topo_rail_ctx {
    const topo_t *topo;
    bool         *usable;  /* per NIC: a candidate for rails */
    topo_path_t  *best;    /* per GPU: closest path class to a usable NIC */
    int          *load;    /* per NIC: GPUs that took it as a rail so far */
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

static bool topo_rail_closest(const topo_rail_ctx_t *ctx, int gpu, int nic)
{
    return ctx->usable[nic] && topo_gpu_nic_path(ctx->topo, gpu, nic) == ctx->best[gpu];
}

/* How many rails gpu takes: its closest NICs divided by the GPUs competing for them. */
static int topo_rail_count(const topo_rail_ctx_t *ctx, int gpu)
{
    const topo_t *topo = ctx->topo;
    int closest = 0, sharers = 0;
    bool shares;

    for (int n = 0; n < topo->num_nics; ++n) {
        closest += topo_rail_closest(ctx, gpu, n);
    }
    for (int g = 0; g < topo->num_gpus; ++g) {
        shares = false;
        for (int n = 0; n < topo->num_nics && !shares; ++n) {
            shares = topo_rail_closest(ctx, gpu, n) && topo_rail_closest(ctx, g, n);
        }
        sharers += shares;
    }
    return (closest == 0) ? 0 : UTIL_MAX(1, closest / UTIL_MAX(sharers, 1));
}

/*
 * Order of NICs for gpu: closer path class, then fewer PCIe hops (of two PXB NICs, the one
 * behind the deeper shared switch), then less loaded, then lower index.
 */
static bool topo_rail_better(const topo_rail_ctx_t *ctx, int gpu, int a, int b)
{
    topo_path_t pa = topo_gpu_nic_path(ctx->topo, gpu, a);
    topo_path_t pb = topo_gpu_nic_path(ctx->topo, gpu, b);
    int ha = topo_gpu_nic_hops(ctx->topo, gpu, a), hb = topo_gpu_nic_hops(ctx->topo, gpu, b);

    if (pa != pb) {
        return pa < pb;
    }
    if (ha != hb) {
        return ha < hb;
    }
    if (ctx->load[a] != ctx->load[b]) {
        return ctx->load[a] < ctx->load[b];
    }
    return a < b;
}

/* Selection sort of nics[from..count) by topo_rail_better (a handful of NICs). */
static void topo_rail_sort(const topo_rail_ctx_t *ctx, int gpu, int *nics, int from, int count)
{
    int best, chosen;

    for (int i = from; i < count; ++i) {
        best = i;
        for (int j = i + 1; j < count; ++j) {
            if (topo_rail_better(ctx, gpu, nics[j], nics[best])) {
                best = j;
            }
        }
        chosen     = nics[best];
        nics[best] = nics[i];
        nics[i]    = chosen;
    }
}

static bool topo_rail_has(const topo_rail_t *rail, int nic)
{
    for (int i = 0; i < rail->num_nics; ++i) {
        if (rail->nics[i] == nic) {
            return true;
        }
    }
    return false;
}

/*
 * The next rail to hand out, over every GPU that still lacks rails and every closest NIC it
 * has not taken: the least loaded NIC first (loads stay within one of each other), then the
 * fewest PCIe hops, so a NIC goes to the GPU nearest to it rather than to the GPU that
 * happens to come first. False when every GPU has its rails.
 */
static bool topo_rail_next(const topo_rail_ctx_t *ctx, const topo_rail_plan_t *plan,
                           int *gpu_p, int *nic_p)
{
    int best_gpu = -1, best_nic = -1, best_hops = 0, hops;

    for (int g = 0; g < plan->num_gpus; ++g) {
        const topo_rail_t *rail = &plan->rails[g];

        for (int n = 0; n < ctx->topo->num_nics && rail->num_nics < rail->num_rails; ++n) {
            if (!topo_rail_closest(ctx, g, n) || topo_rail_has(rail, n)) {
                continue;
            }
            hops = topo_gpu_nic_hops(ctx->topo, g, n);
            if (best_nic < 0 || ctx->load[n] < ctx->load[best_nic] ||
                (ctx->load[n] == ctx->load[best_nic] && hops < best_hops)) {
                best_gpu  = g;
                best_nic  = n;
                best_hops = hops;
            }
        }
    }
    *gpu_p = best_gpu;
    *nic_p = best_nic;
    return best_nic >= 0;
}

/* Every GPU's rails first, then each GPU's fallbacks: the usable NICs it did not take. */
static void topo_rail_assign(topo_rail_ctx_t *ctx, topo_rail_plan_t *plan)
{
    topo_rail_t *rail;
    int gpu, nic;

    for (int g = 0; g < plan->num_gpus; ++g) {
        plan->rails[g].gpu       = g;
        plan->rails[g].num_rails = topo_rail_count(ctx, g);
        plan->rails[g].num_nics  = 0;
    }
    while (topo_rail_next(ctx, plan, &gpu, &nic)) {
        rail = &plan->rails[gpu];
        rail->nics[rail->num_nics++] = nic;
        ctx->load[nic]++;
    }
    for (int g = 0; g < plan->num_gpus; ++g) {
        rail = &plan->rails[g];
        for (int n = 0; n < ctx->topo->num_nics; ++n) {
            if (ctx->usable[n] && !topo_rail_has(rail, n)) {
                rail->nics[rail->num_nics++] = n;
            }
        }
        topo_rail_sort(ctx, g, rail->nics, 0, rail->num_rails);
        topo_rail_sort(ctx, g, rail->nics, rail->num_rails, rail->num_nics);
    }
}

static void topo_rail_compute_best(topo_rail_ctx_t *ctx)
{
    topo_path_t path;

    for (int g = 0; g < ctx->topo->num_gpus; ++g) {
        ctx->best[g] = TOPO_PATH_SYS;
        for (int n = 0; n < ctx->topo->num_nics; ++n) {
            path = topo_gpu_nic_path(ctx->topo, g, n);
            if (ctx->usable[n] && path < ctx->best[g]) {
                ctx->best[g] = path;
            }
        }
    }
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
    if (plan == NULL || ctx.usable == NULL || ctx.best == NULL || ctx.load == NULL) {
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
    topo_rail_compute_best(&ctx);
    topo_rail_assign(&ctx, plan);
    *plan_p = plan;
    plan    = NULL;
    status  = STRATA_OK;
out:
    topo_rail_plan_destroy(plan);
    free(ctx.usable);
    free(ctx.best);
    free(ctx.load);
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
