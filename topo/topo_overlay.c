/*
 * NCCL topology overlays: an NCCL topology XML file applied onto a topology found another
 * way (live discovery, or a file standing in for it), as NCCL merges NCCL_TOPO_FILE with
 * what it discovers. Devices are matched by PCI bus id and take the overlay's PCIe switch
 * tree, NUMA node, link speed and NIC names.
 */
#include "topo_internal.h"

#include <libxml/tree.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct topo_overlay_ctx {
    topo_t                *topo;
    const char            *name;
    char                  *err;
    topo_overlay_report_t *report;
} topo_overlay_ctx_t;

static bool topo_overlay_is(const xmlNode *node, const char *name)
{
    return node->type == XML_ELEMENT_NODE && xmlStrcmp(node->name, BAD_CAST name) == 0;
}

static bool topo_overlay_has_child(const xmlNode *node, const char *name)
{
    for (const xmlNode *child = node->children; child; child = child->next) {
        if (topo_overlay_is(child, name)) {
            return true;
        }
    }
    return false;
}

static strata_status_t topo_overlay_fail(topo_overlay_ctx_t *ctx, const xmlNode *node,
                                         const char *what)
{
    topo_error(ctx->err, "%s:%ld: <%s> %s", ctx->name, (long)xmlGetLineNo(node),
               (const char *)node->name, what);
    return STRATA_ERR_PARSE;
}

/* Optional unsigned decimal attribute (NCCL writes speed and numaid so): absent leaves
 * *value_p as it was; a sign, a space or a leading "0x" is malformed. */
static strata_status_t topo_overlay_uint(topo_overlay_ctx_t *ctx, const xmlNode *node,
                                         const char *attr, unsigned long *value_p)
{
    char *text = (char *)xmlGetProp(node, BAD_CAST attr), *end;
    strata_status_t status = STRATA_OK;
    unsigned long value;
    char what[96];

    if (text == NULL) {
        return STRATA_OK;
    }
    errno = 0;
    value = strtoul(text, &end, 10);
    if (!isdigit((unsigned char)text[0]) || *end != '\0' || errno != 0) {
        snprintf(what, sizeof(what), "has a malformed %s '%.40s'", attr, text);
        status = topo_overlay_fail(ctx, node, what);
    } else {
        *value_p = value;
    }
    xmlFree(text);
    return status;
}

/* The <net> entries under a <pci>'s <nic>, in file order: one per NIC port. */
static const xmlNode *topo_overlay_net(const xmlNode *pci, int port)
{
    for (const xmlNode *nic = pci->children; nic; nic = nic->next) {
        if (!topo_overlay_is(nic, "nic")) {
            continue;
        }
        for (const xmlNode *net = nic->children; net; net = net->next) {
            if (topo_overlay_is(net, "net") && port-- == 0) {
                return net;
            }
        }
    }
    return NULL;
}

static strata_status_t topo_overlay_nic(topo_overlay_ctx_t *ctx, const xmlNode *pci,
                                        topo_nic_t *nic, int port, int parent, int numa)
{
    const xmlNode *net = topo_overlay_net(pci, port);
    unsigned long speed = nic->speed_mbps;
    strata_status_t status;
    char *name;

    nic->pci_parent = parent;
    nic->numa       = numa;
    if (net == NULL) {
        return STRATA_OK;
    }
    status = topo_overlay_uint(ctx, net, "speed", &speed);
    if (status != STRATA_OK) {
        return status;
    }
    nic->speed_mbps = speed;
    name = (char *)xmlGetProp(net, BAD_CAST "name");
    if (name != NULL && name[0] != '\0') {
        snprintf(nic->name, sizeof(nic->name), "%s", name);
    }
    xmlFree(name);
    return STRATA_OK;
}

/*
 * The NUMA node with OS index numa_os, added when the base has none: only once a device
 * of this machine sits below that <cpu>, so an overlay adds no node the machine lacks.
 */
static int topo_overlay_numa(topo_overlay_ctx_t *ctx, int numa_os)
{
    int index = topo_numa_find(ctx->topo, numa_os);

    return (index >= 0) ? index : topo_add_numa(ctx->topo, numa_os);
}

/* A device of the overlay: the GPU or every NIC port at its bus id takes its place. */
static strata_status_t topo_overlay_device(topo_overlay_ctx_t *ctx, const xmlNode *pci,
                                           const char *busid, int parent, int numa_os)
{
    topo_t *topo = ctx->topo;
    int gpu = topo_gpu_find(topo, busid), ports = 0, numa;
    strata_status_t status = STRATA_OK;
    char what[128];
    double gbps;

    if (!topo_nccl_link_gbps(pci, &gbps, what, sizeof(what))) {
        return topo_overlay_fail(ctx, pci, what);
    }

    if (!topo_overlay_has_child(pci, "gpu") && !topo_overlay_has_child(pci, "nic") &&
        xmlHasProp(pci, BAD_CAST "class") == NULL) {
        ctx->report->unclassified++;
    }
    if (gpu < 0 && topo_nic_find(topo, busid) < 0) {
        if (ctx->report->unmatched++ == 0) {
            snprintf(ctx->report->first_unmatched, sizeof(ctx->report->first_unmatched), "%s",
                     busid);
        }
        return STRATA_OK;
    }
    numa = topo_overlay_numa(ctx, numa_os);
    if (numa < 0) {
        return topo_add_failed(topo, ctx->name, ctx->err);
    }
    if (gpu >= 0) {
        topo->gpus[gpu].pci_parent = parent;
        topo->gpus[gpu].numa       = numa;
        topo->gpus[gpu].pcie_gbps  = (gbps > 0.0) ? gbps : topo->gpus[gpu].pcie_gbps;
        ctx->report->matched_gpus++;
        return STRATA_OK;
    }
    for (int n = 0; n < topo->num_nics && status == STRATA_OK; ++n) {
        if (strcasecmp(topo->nics[n].busid, busid) == 0) {
            status = topo_overlay_nic(ctx, pci, &topo->nics[n], ports++, parent, numa);
        }
    }
    ctx->report->matched_nics += ports;
    return status;
}

static strata_status_t topo_overlay_walk(topo_overlay_ctx_t *ctx, const xmlNode *node,
                                         int parent, int numa_os);

/*
 * A <pci> with <pci> children is a switch: a new PCI node of the model, so matched devices
 * hang from the overlay's tree (the base's own bridges stay for the devices it does not
 * name). Any other <pci> is a device.
 */
static strata_status_t topo_overlay_pci(topo_overlay_ctx_t *ctx, const xmlNode *node,
                                        int parent, int numa_os)
{
    char busid[TOPO_BUSID_LEN];
    char *text = (char *)xmlGetProp(node, BAD_CAST "busid");
    bool valid = text != NULL && topo_busid_normalize(text, busid);
    int index;

    xmlFree(text);
    if (!valid) {
        return topo_overlay_fail(ctx, node, "has no busid or one that is not a PCI address");
    }
    if (!topo_overlay_has_child(node, "pci")) {
        return topo_overlay_device(ctx, node, busid, parent, numa_os);
    }
    index = topo_add_pci_node(ctx->topo, busid, false, parent,
                              topo_numa_find(ctx->topo, numa_os));
    if (index < 0) {
        return topo_add_failed(ctx->topo, ctx->name, ctx->err);
    }
    return topo_overlay_walk(ctx, node, index, numa_os);
}

static strata_status_t topo_overlay_walk(topo_overlay_ctx_t *ctx, const xmlNode *node,
                                         int parent, int numa_os)
{
    strata_status_t status = STRATA_OK;

    for (const xmlNode *child = node->children; child && status == STRATA_OK;
         child = child->next) {
        if (topo_overlay_is(child, "pci")) {
            status = topo_overlay_pci(ctx, child, parent, numa_os);
        }
    }
    return status;
}

/* A <cpu>: the NUMA node (by OS index) of everything below it. */
static strata_status_t topo_overlay_cpu(topo_overlay_ctx_t *ctx, const xmlNode *cpu)
{
    unsigned long numaid = (unsigned long)-1;
    strata_status_t status = topo_overlay_uint(ctx, cpu, "numaid", &numaid);

    if (status != STRATA_OK) {
        return status;
    }
    if (numaid > INT16_MAX) {
        return topo_overlay_fail(ctx, cpu, "has no numaid or one out of range");
    }
    return topo_overlay_walk(ctx, cpu, -1, (int)numaid);
}

static strata_status_t topo_overlay_doc(topo_overlay_ctx_t *ctx, xmlDocPtr doc)
{
    const xmlNode *root = xmlDocGetRootElement(doc);
    strata_status_t status = STRATA_OK;

    if (root == NULL || xmlStrcmp(root->name, BAD_CAST "system") != 0) {
        topo_error(ctx->err, "%s: not an NCCL topology overlay: root element is <%s>, "
                   "expected <system>", ctx->name, root ? (const char *)root->name : "");
        return STRATA_ERR_PARSE;
    }
    for (const xmlNode *child = root->children; child && status == STRATA_OK;
         child = child->next) {
        if (topo_overlay_is(child, "cpu")) {
            status = topo_overlay_cpu(ctx, child);
        }
    }
    return status;
}

strata_status_t topo_overlay_apply(topo_t *topo, const char *path, char *err)
{
    topo_overlay_report_t report = {.unclassified = 0};
    topo_overlay_ctx_t ctx = {.topo = topo, .name = path, .err = err, .report = &report};
    size_t used = strlen(topo->description);
    strata_status_t status;
    xmlDocPtr doc;

    status = topo_xml_read_file(path, &doc, err);
    if (status != STRATA_OK) {
        return status;
    }
    status = topo_overlay_doc(&ctx, doc);
    xmlFreeDoc(doc);
    if (status != STRATA_OK) {
        return status;
    }
    snprintf(report.path, sizeof(report.path), "%s", path);
    snprintf(topo->description + used, sizeof(topo->description) - used, " + overlay %s",
             path);
    topo->overlay     = report;
    topo->has_overlay = true;
    return STRATA_OK;
}
