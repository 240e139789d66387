/*
 * Import of NCCL topology XML (the NCCL_TOPO_FILE format): <system> of <cpu> NUMA nodes
 * holding trees of <pci> devices; <gpu> with <nvlink>/<xgmi> children, <nic> with <net>.
 */
#include "topo_internal.h"

#include <libxml/tree.h>

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Bounds of what a file may say; a larger value is refused, never cut to fit. */
#define TOPO_NCCL_MAX_LINKS 1024         /* NVLink lanes or XGMI links of one <nvlink>/<xgmi> */
#define TOPO_NCCL_MAX_CLASS 0xffffff     /* PCI class with its programming interface byte */
#define TOPO_NCCL_MAX_INDEX 65535        /* GPU dev and NUMA ids */
#define TOPO_NCCL_MAX_SM    10000        /* compute capability as NCCL writes it (90, 100) */
#define TOPO_NCCL_MAX_MBPS  100000000ul  /* NIC port speed: 100 Tbit/s */
#define TOPO_NCCL_NVSWITCH_TCLASS 0x068000
#define TOPO_NCCL_POWER_NPU_TCLASS 0x068001 /* IBM NVLink bridge: the link ends at the CPU */

/* A GPU link named in the file, resolved once every GPU is known. */
typedef struct topo_nccl_link {
    char             from[TOPO_BUSID_LEN];
    char             target[TOPO_NAME_LEN];
    unsigned         count;
    unsigned         tclass;
    unsigned         sm;
    topo_link_kind_t kind;
} topo_nccl_link_t;

typedef struct topo_nccl_ctx {
    topo_t           *topo;
    const char       *name;
    char             *err;
    topo_nccl_link_t *links;
    int               num_links;
} topo_nccl_ctx_t;

static bool topo_nccl_is(const xmlNode *node, const char *name)
{
    return node->type == XML_ELEMENT_NODE && xmlStrcmp(node->name, BAD_CAST name) == 0;
}

/* Attribute value or NULL; the caller frees with xmlFree. */
static char *topo_nccl_attr(const xmlNode *node, const char *name)
{
    return (char *)xmlGetProp(node, BAD_CAST name);
}

static strata_status_t topo_nccl_fail(topo_nccl_ctx_t *ctx, const xmlNode *node,
                                      const char *what, const char *value)
{
    topo_error(ctx->err, "%s:%ld: <%s> %s%s%s%s", ctx->name, (long)xmlGetLineNo(node),
               (const char *)node->name, what, value ? " '" : "", value ? value : "",
               value ? "'" : "");
    return STRATA_ERR_PARSE;
}

/* Unsigned number attribute (decimal, or hex with 0x) of at most max; STRATA_ERR_NOT_FOUND
 * when absent. A larger one is refused rather than cut to the field that keeps it. */
static strata_status_t topo_nccl_uint(topo_nccl_ctx_t *ctx, const xmlNode *node,
                                      const char *name, unsigned long max, unsigned long *value_p)
{
    strata_status_t status = STRATA_OK;
    char *text = topo_nccl_attr(node, name);
    unsigned long value;
    char what[96];
    char *end;

    if (text == NULL) {
        return STRATA_ERR_NOT_FOUND;
    }
    errno = 0;
    value = strtoul(text, &end, 0);
    if (end == text || *end != '\0' || errno != 0 || text[0] == '-') {
        snprintf(what, sizeof(what), "has a malformed %s", name);
        status = topo_nccl_fail(ctx, node, what, text);
    } else if (value > max) {
        snprintf(what, sizeof(what), "has a %s above %lu", name, max);
        status = topo_nccl_fail(ctx, node, what, text);
    } else {
        *value_p = value;
    }
    xmlFree(text);
    return status;
}

/* Optional unsigned attribute: absent leaves *value_p as it was. */
static strata_status_t topo_nccl_opt_uint(topo_nccl_ctx_t *ctx, const xmlNode *node,
                                          const char *name, unsigned long max,
                                          unsigned long *value_p)
{
    strata_status_t status = topo_nccl_uint(ctx, node, name, max, value_p);

    return (status == STRATA_ERR_NOT_FOUND) ? STRATA_OK : status;
}

static bool topo_nccl_has_child(const xmlNode *node, const char *name)
{
    for (const xmlNode *child = node->children; child; child = child->next) {
        if (topo_nccl_is(child, name)) {
            return true;
        }
    }
    return false;
}

static strata_status_t topo_nccl_walk(topo_nccl_ctx_t *ctx, const xmlNode *node, int parent,
                                      int numa);

/* A link figure: "" where the text is not a number ("Unknown": the figure stays unknown),
 * else the number if it is finite and 0..max, else NULL (the attribute is refused). */
static bool topo_nccl_link_figure(const char *text, double max, double *value_p)
{
    char *end;
    double value;

    *value_p = 0.0;
    if (text == NULL || !(isdigit((unsigned char)text[0]) || text[0] == '-' || text[0] == '+' ||
                          text[0] == '.' || strncasecmp(text, "nan", 3) == 0 ||
                          strncasecmp(text, "inf", 3) == 0)) {
        return true; /* absent, or words */
    }
    value = strtod(text, &end);
    if (end == text || !isfinite(value) || value < 0.0 || value > max ||
        (*end != '\0' && *end != ' ')) {
        return false;
    }
    *value_p = value;
    return true;
}

bool topo_nccl_link_gbps(const xmlNode *node, double *gbps_p, char *what, size_t what_len)
{
    char *speed = topo_nccl_attr(node, "link_speed");
    char *width = topo_nccl_attr(node, "link_width");
    double gts = 0.0, lanes = 0.0;
    bool ok = true;

    /* "16 GT/s" / "16.0 GT/s PCIe" and "16"; words ("Unknown") leave the figure unknown. */
    if (!topo_nccl_link_figure(speed, TOPO_NCCL_MAX_GTS, &gts)) {
        snprintf(what, what_len, "link_speed '%.40s' is not a speed of 0 to %d GT/s", speed,
                 TOPO_NCCL_MAX_GTS);
        ok = false;
    } else if (!topo_nccl_link_figure(width, TOPO_NCCL_MAX_LANES, &lanes) ||
               lanes != (double)(unsigned)lanes) {
        snprintf(what, what_len, "link_width '%.40s' is not a lane count of 0 to %d", width,
                 TOPO_NCCL_MAX_LANES);
        ok = false;
    }
    *gbps_p = ok && speed != NULL && width != NULL ? topo_pcie_gbps(gts, (unsigned)lanes) : 0.0;
    xmlFree(speed);
    xmlFree(width);
    return ok;
}

static strata_status_t topo_nccl_add_link(topo_nccl_ctx_t *ctx, const xmlNode *node,
                                          const char *from, unsigned sm, topo_link_kind_t kind)
{
    unsigned long count = 1, tclass = 0;
    topo_nccl_link_t *grown, *link;
    strata_status_t status;
    char *target;

    status = topo_nccl_opt_uint(ctx, node, "count", TOPO_NCCL_MAX_LINKS, &count);
    if (status == STRATA_OK) {
        status = topo_nccl_opt_uint(ctx, node, "tclass", TOPO_NCCL_MAX_CLASS, &tclass);
    }
    if (status != STRATA_OK) {
        return status;
    }
    target = topo_nccl_attr(node, "target");
    if (target == NULL) {
        return topo_nccl_fail(ctx, node, "has no target", NULL);
    }
    grown = realloc(ctx->links, (size_t)(ctx->num_links + 1) * sizeof(*grown));
    if (grown == NULL) {
        xmlFree(target);
        topo_error(ctx->err, "%s: out of memory", ctx->name);
        return STRATA_ERR_NO_MEMORY;
    }
    ctx->links = grown;
    link       = &ctx->links[ctx->num_links++];
    memset(link, 0, sizeof(*link));
    snprintf(link->from, sizeof(link->from), "%s", from);
    if (!topo_busid_normalize(target, link->target)) {
        snprintf(link->target, sizeof(link->target), "%s", target); /* e.g. a virtual switch */
    }
    link->count  = (unsigned)count;
    link->tclass = (unsigned)tclass;
    link->sm     = sm;
    link->kind   = kind;
    xmlFree(target);
    return STRATA_OK;
}

static strata_status_t topo_nccl_gpu(topo_nccl_ctx_t *ctx, const xmlNode *pci, const char *busid,
                                     unsigned long vendor, unsigned long device, int parent,
                                     int numa)
{
    unsigned long dev = (unsigned long)-1, sm = 0;
    strata_status_t status = STRATA_OK;
    bool amd = (vendor == TOPO_PCI_VENDOR_AMD);
    topo_gpu_t *gpu;
    int index;

    if (topo_gpu_find(ctx->topo, busid) >= 0) {
        return topo_nccl_fail(ctx, pci, "has the busid of another GPU:", busid);
    }
    index = topo_add_gpu(ctx->topo);
    if (index < 0) {
        return topo_add_failed(ctx->topo, ctx->name, ctx->err);
    }
    gpu = &ctx->topo->gpus[index];
    snprintf(gpu->busid, sizeof(gpu->busid), "%s", busid);
    gpu->vendor_id  = (uint16_t)vendor;
    gpu->device_id  = (uint16_t)device;
    gpu->numa       = numa;
    gpu->pci_parent = parent;
    (void)topo_nccl_link_gbps(pci, &gpu->pcie_gbps, NULL, 0); /* checked with its <pci> */

    for (const xmlNode *child = pci->children; child && status == STRATA_OK; child = child->next) {
        if (!topo_nccl_is(child, "gpu")) {
            continue;
        }
        /* RCCL files describe AMD GPUs with a gcn= attribute instead of sm=. */
        amd    = amd || xmlHasProp(child, BAD_CAST "gcn") != NULL;
        status = topo_nccl_opt_uint(ctx, child, "dev", TOPO_NCCL_MAX_INDEX, &dev);
        if (status == STRATA_OK) {
            status = topo_nccl_opt_uint(ctx, child, "sm", TOPO_NCCL_MAX_SM, &sm);
        }
        for (const xmlNode *l = child->children; l && status == STRATA_OK; l = l->next) {
            if (topo_nccl_is(l, "nvlink")) {
                status = topo_nccl_add_link(ctx, l, busid, (unsigned)sm, TOPO_LINK_NVLINK);
            } else if (topo_nccl_is(l, "xgmi")) {
                status = topo_nccl_add_link(ctx, l, busid, (unsigned)sm, TOPO_LINK_XGMI);
            }
        }
    }
    gpu = &ctx->topo->gpus[index];
    gpu->vendor = amd ? TOPO_VENDOR_AMD : topo_vendor_from_pci((unsigned)vendor);
    snprintf(gpu->model, sizeof(gpu->model), "%s",
             topo_gpu_model_name((unsigned)vendor, (unsigned)device));
    if (dev != (unsigned long)-1) {
        *(amd ? &gpu->hip_index : &gpu->cuda_index) = (int)dev;
    }
    return status;
}

static strata_status_t topo_nccl_one_nic(topo_nccl_ctx_t *ctx, const xmlNode *net,
                                         const char *busid, unsigned long class_id,
                                         unsigned long vendor, unsigned long device, int parent,
                                         int numa)
{
    unsigned long speed = 0;
    strata_status_t status;
    int index = topo_add_nic(ctx->topo);
    char *name = NULL;
    topo_nic_t *nic;

    if (index < 0) {
        return topo_add_failed(ctx->topo, ctx->name, ctx->err);
    }
    nic = &ctx->topo->nics[index];
    snprintf(nic->busid, sizeof(nic->busid), "%s", busid);
    nic->vendor_id  = (uint16_t)vendor;
    nic->device_id  = (uint16_t)device;
    nic->numa       = numa;
    nic->pci_parent = parent;
    if (net != NULL) {
        name = topo_nccl_attr(net, "name");
        snprintf(nic->name, sizeof(nic->name), "%s", name ? name : "");
        xmlFree(name);
        status = topo_nccl_opt_uint(ctx, net, "speed", TOPO_NCCL_MAX_MBPS, &speed);
        if (status != STRATA_OK) {
            return status;
        }
        nic->speed_mbps = speed;
    }
    nic->kind = topo_nic_kind_guess((unsigned)class_id, (unsigned)vendor, (unsigned)device,
                                    nic->name, false);
    return STRATA_OK;
}

/* A NIC: one entry per <net> port under <nic>, or one unnamed entry when there is none. */
static strata_status_t topo_nccl_nic(topo_nccl_ctx_t *ctx, const xmlNode *node,
                                     const char *busid, unsigned long class_id,
                                     unsigned long vendor, unsigned long device, int parent,
                                     int numa)
{
    strata_status_t status = STRATA_OK;
    bool named = false;

    for (const xmlNode *nic = node->children; nic && status == STRATA_OK; nic = nic->next) {
        if (!topo_nccl_is(nic, "nic")) {
            continue;
        }
        for (const xmlNode *net = nic->children; net && status == STRATA_OK; net = net->next) {
            if (topo_nccl_is(net, "net")) {
                status = topo_nccl_one_nic(ctx, net, busid, class_id, vendor, device, parent,
                                           numa);
                named  = true;
            }
        }
    }
    if (!named && status == STRATA_OK) {
        status = topo_nccl_one_nic(ctx, NULL, busid, class_id, vendor, device, parent, numa);
    }
    return status;
}

static strata_status_t topo_nccl_pci(topo_nccl_ctx_t *ctx, const xmlNode *node, int parent,
                                     int numa)
{
    unsigned long class_id = 0, vendor = 0, device = 0;
    char what[128];
    double gbps;
    char busid[TOPO_BUSID_LEN];
    strata_status_t status;
    topo_pci_role_t role;
    char *text;
    int index;

    text = topo_nccl_attr(node, "busid");
    if (text == NULL) {
        return topo_nccl_fail(ctx, node, "has no busid", NULL);
    }
    if (!topo_busid_normalize(text, busid)) {
        status = topo_nccl_fail(ctx, node, "has a busid that is not a PCI address:", text);
        xmlFree(text);
        return status;
    }
    xmlFree(text);
    status = topo_nccl_opt_uint(ctx, node, "class", TOPO_NCCL_MAX_CLASS, &class_id);
    if (status == STRATA_OK) {
        status = topo_nccl_opt_uint(ctx, node, "vendor", 0xffff, &vendor);
    }
    if (status == STRATA_OK) {
        status = topo_nccl_opt_uint(ctx, node, "device", 0xffff, &device);
    }
    if (status == STRATA_OK && !topo_nccl_link_gbps(node, &gbps, what, sizeof(what))) {
        status = topo_nccl_fail(ctx, node, what, NULL); /* on every device, used or not */
    }
    if (status != STRATA_OK) {
        return status;
    }
    class_id = (class_id > 0xffff) ? (class_id >> 8) : class_id; /* drop the prog-if byte */

    role = topo_pci_classify((unsigned)class_id, (unsigned)vendor, (unsigned)device, false);
    if (topo_nccl_has_child(node, "gpu")) {
        role = TOPO_PCI_GPU;
    } else if (topo_nccl_has_child(node, "nic")) {
        role = TOPO_PCI_NIC;
    } else if (class_id == 0x0302 && vendor == 0) {
        role = TOPO_PCI_GPU; /* cloud files often omit vendor ids for their GPUs */
    } else if (topo_nccl_has_child(node, "pci")) {
        role = TOPO_PCI_BRIDGE;
    }

    if (role == TOPO_PCI_OTHER && xmlHasProp(node, BAD_CAST "class") == NULL) {
        ctx->topo->num_unclassified_pci++; /* named by bus id only: an overlay's device */
    }
    switch (role) {
    case TOPO_PCI_BRIDGE:
        index = topo_add_pci_node(ctx->topo, busid, false, parent, numa);
        if (index < 0) {
            return topo_add_failed(ctx->topo, ctx->name, ctx->err);
        }
        return topo_nccl_walk(ctx, node, index, numa);
    case TOPO_PCI_GPU:
        return topo_nccl_gpu(ctx, node, busid, vendor, device, parent, numa);
    case TOPO_PCI_NIC:
        return topo_nccl_nic(ctx, node, busid, class_id, vendor, device, parent, numa);
    case TOPO_PCI_NVSWITCH:
        ctx->topo->num_nvswitches++;
        return STRATA_OK;
    case TOPO_PCI_OTHER:
        return STRATA_OK;
    }
    return STRATA_OK;
}

static strata_status_t topo_nccl_walk(topo_nccl_ctx_t *ctx, const xmlNode *node, int parent,
                                      int numa)
{
    strata_status_t status = STRATA_OK;

    for (const xmlNode *child = node->children; child && status == STRATA_OK;
         child = child->next) {
        if (topo_nccl_is(child, "pci")) {
            status = topo_nccl_pci(ctx, child, parent, numa);
        }
    }
    if (status == STRATA_OK && topo_nccl_is(node, "cpu") && topo_nccl_has_child(node, "nic")) {
        /* NICs straight under <cpu>: virtual, no PCI address. */
        status = topo_nccl_nic(ctx, node, "", 0, 0, 0, parent, numa);
    }
    return status;
}

static strata_status_t topo_nccl_cpu(topo_nccl_ctx_t *ctx, const xmlNode *node)
{
    unsigned long numaid;
    strata_status_t status;
    char *affinity;
    int index;

    status = topo_nccl_uint(ctx, node, "numaid", TOPO_NCCL_MAX_INDEX, &numaid);
    if (status == STRATA_ERR_NOT_FOUND) {
        return topo_nccl_fail(ctx, node, "has no numaid", NULL);
    }
    if (status != STRATA_OK) {
        return status;
    }
    if (numaid > INT16_MAX) {
        return topo_nccl_fail(ctx, node, "has an out-of-range numaid", NULL);
    }
    index = topo_numa_find(ctx->topo, (int)numaid);
    if (index < 0) {
        index = topo_add_numa(ctx->topo, (int)numaid);
        if (index < 0) {
            return topo_add_failed(ctx->topo, ctx->name, ctx->err);
        }
    }
    affinity = topo_nccl_attr(node, "affinity");
    if (affinity != NULL &&
        !topo_cpumask_to_list(affinity, ctx->topo->numa[index].cpus,
                              sizeof(ctx->topo->numa[index].cpus))) {
        status = topo_nccl_fail(ctx, node, "has a malformed affinity mask", affinity);
    }
    xmlFree(affinity);
    return (status == STRATA_OK) ? topo_nccl_walk(ctx, node, -1, index) : status;
}

/* An <nvlink> to an IBM NPU: lanes add up on the GPU's link to its local CPU. */
static void topo_nccl_cpu_link(topo_gpu_t *gpu, const topo_gpu_link_t *link)
{
    gpu->cpu_link.kind = TOPO_LINK_NVLINK;
    gpu->cpu_link.count += link->count;
    gpu->cpu_link.gbps += link->gbps;
    gpu->cpu_link_numa = gpu->numa;
}

/* Turn the recorded <nvlink>/<xgmi> entries into GPU links once GPU indices are final. */
static strata_status_t topo_nccl_resolve_links(topo_nccl_ctx_t *ctx)
{
    topo_t *topo = ctx->topo;
    double *switch_gbps = calloc((size_t)topo->num_gpus + 1, sizeof(*switch_gbps));
    unsigned *lanes = calloc((size_t)topo->num_gpus + 1, sizeof(*lanes));
    char targets[8][TOPO_NAME_LEN];
    int num_targets = 0;
    bool seen;

    if (switch_gbps == NULL || lanes == NULL) {
        free(switch_gbps);
        free(lanes);
        topo_error(ctx->err, "%s: out of memory", ctx->name);
        return STRATA_ERR_NO_MEMORY;
    }

    for (int i = 0; i < ctx->num_links; ++i) {
        const topo_nccl_link_t *l = &ctx->links[i];
        int a = topo_gpu_find(topo, l->from), b = topo_gpu_find(topo, l->target);
        double gbps = l->count * ((l->kind == TOPO_LINK_NVLINK) ? topo_nvlink_lane_gbps(l->sm)
                                                                : 0.0);
        topo_gpu_link_t link = {.kind = l->kind, .count = l->count, .gbps = gbps};

        if (a < 0) {
            continue;
        }
        if (b >= 0) {
            topo_set_gpu_link(topo, a, b, &link);
        } else if (l->kind == TOPO_LINK_NVLINK && l->tclass == TOPO_NCCL_POWER_NPU_TCLASS) {
            topo_nccl_cpu_link(&topo->gpus[a], &link); /* NCCL takes the GPU's own CPU */
        } else if (l->kind == TOPO_LINK_NVLINK &&
                   (l->tclass == TOPO_NCCL_NVSWITCH_TCLASS || l->tclass == 0)) {
            /* Not a GPU: an NVSwitch (often a virtual bus id). */
            switch_gbps[a] += gbps;
            lanes[a] += l->count;
            seen = false;
            for (int t = 0; t < num_targets; ++t) {
                seen = seen || strcmp(targets[t], l->target) == 0;
            }
            if (!seen && num_targets < (int)UTIL_ARRAY_SIZE(targets)) {
                snprintf(targets[num_targets++], TOPO_NAME_LEN, "%s", l->target);
            }
        }
    }
    topo_connect_nvswitch_fabric(topo, switch_gbps, lanes);
    if (topo->num_nvswitches == 0) {
        topo->num_nvswitches = num_targets;
    }
    free(switch_gbps);
    free(lanes);
    return STRATA_OK;
}

strata_status_t topo_nccl_import(topo_t *topo, const char *name, struct _xmlDoc *doc, char *err)
{
    topo_nccl_ctx_t ctx = {.topo = topo, .name = name, .err = err};
    const xmlNode *root = xmlDocGetRootElement(doc);
    strata_status_t status = STRATA_OK;

    for (const xmlNode *child = root->children; child && status == STRATA_OK;
         child = child->next) {
        if (topo_nccl_is(child, "cpu")) {
            status = topo_nccl_cpu(&ctx, child);
        }
    }
    if (status == STRATA_OK && topo->num_numa == 0) {
        topo_error(err, "%s: <system> has no <cpu> element", name);
        status = STRATA_ERR_PARSE;
    }
    if (status == STRATA_OK) {
        status = topo_finalize(topo);
        if (status != STRATA_OK) {
            topo_error(err, "%s: out of memory", name);
        }
    }
    if (status == STRATA_OK) {
        status = topo_nccl_resolve_links(&ctx);
    }
    free(ctx.links);
    return status;
}
