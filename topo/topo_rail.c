/*
 * Rail plan: for each GPU, the NICs it should drive, closest first and with NICs shared
 * evenly between the GPUs that are equally close to them.
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

/* Preference between two usable NICs for gpu: closer, then less loaded, then lower index. */
static bool topo_rail_better(const topo_rail_ctx_t *ctx, int gpu, int a, int b)
{
    topo_path_t pa = topo_gpu_nic_path(ctx->topo, gpu, a);
    topo_path_t pb = topo_gpu_nic_path(ctx->topo, gpu, b);

    if (pa != pb) {
        return pa < pb;
    }
    if (ctx->load[a] != ctx->load[b]) {
        return ctx->load[a] < ctx->load[b];
    }
    return a < b;
}

/* Order every usable NIC for gpu (selection sort: a handful of NICs), take the rails. */
static void topo_rail_fill(topo_rail_ctx_t *ctx, topo_rail_t *rail, int gpu)
{
    int best;

    rail->gpu       = gpu;
    rail->num_rails = topo_rail_count(ctx, gpu);
    rail->num_nics  = 0;
    for (int n = 0; n < ctx->topo->num_nics; ++n) {
        if (ctx->usable[n]) {
            rail->nics[rail->num_nics++] = n;
        }
    }
    for (int i = 0; i < rail->num_nics; ++i) {
        best = i;
        for (int j = i + 1; j < rail->num_nics; ++j) {
            if (topo_rail_better(ctx, gpu, rail->nics[j], rail->nics[best])) {
                best = j;
            }
        }
        int chosen          = rail->nics[best];
        rail->nics[best]    = rail->nics[i];
        rail->nics[i]       = chosen;
        if (i < rail->num_rails) {
            ctx->load[chosen]++; /* later GPUs see this NIC as busier */
        }
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
    for (int g = 0; g < topo->num_gpus; ++g) {
        topo_rail_fill(&ctx, &plan->rails[g], g);
    }
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
