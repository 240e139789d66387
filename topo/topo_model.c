/*
 * The topology model: construction, ordering, queries and PCIe path classes.
 */
#include "topo_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

topo_t *topo_alloc(topo_source_t source, const char *description)
{
    topo_t *topo = calloc(1, sizeof(*topo));

    if (topo == NULL) {
        return NULL;
    }
    topo->source = source;
    snprintf(topo->description, sizeof(topo->description), "%s", description);
    return topo;
}

void topo_destroy(topo_t *topo)
{
    if (topo == NULL) {
        return;
    }
    free(topo->numa);
    free(topo->pci);
    free(topo->gpus);
    free(topo->nics);
    free(topo->links);
    free(topo);
}

/* Grow *array (element size elem) to hold one more after *count; -1 when full. */
static int topo_grow(void **array, int *count, size_t elem)
{
    void *grown;

    if (*count >= TOPO_MAX_DEVICES) {
        return -1;
    }
    /* Sizes stay small (tens of objects): grow one at a time; realloc amortises. */
    grown = realloc(*array, (size_t)(*count + 1) * elem);
    if (grown == NULL) {
        return -1;
    }
    *array = grown;
    memset((char *)grown + (size_t)*count * elem, 0, elem);
    return (*count)++;
}

strata_status_t topo_add_failed(const topo_t *topo, const char *name, char *err)
{
    static const char *const kinds[] = {"NUMA nodes", "PCI nodes", "GPUs", "NICs"};
    const int counts[] = {topo->num_numa, topo->num_pci, topo->num_gpus, topo->num_nics};

    for (size_t k = 0; k < UTIL_ARRAY_SIZE(kinds); ++k) {
        if (counts[k] >= TOPO_MAX_DEVICES) {
            topo_error(err, "%s: more than %d %s: too large to be a machine's topology", name,
                       TOPO_MAX_DEVICES, kinds[k]);
            return STRATA_ERR_TOPOLOGY;
        }
    }
    topo_error(err, "%s: out of memory", name);
    return STRATA_ERR_NO_MEMORY;
}

int topo_add_numa(topo_t *topo, int os_index)
{
    int index = topo_grow((void **)&topo->numa, &topo->num_numa, sizeof(*topo->numa));

    if (index >= 0) {
        topo->numa[index].os_index = os_index;
    }
    return index;
}

int topo_numa_find(const topo_t *topo, int os_index)
{
    for (int i = 0; i < topo->num_numa; ++i) {
        if (topo->numa[i].os_index == os_index) {
            return i;
        }
    }
    return -1;
}

int topo_add_pci_node(topo_t *topo, const char *busid, bool host_bridge, int parent, int numa)
{
    int index = topo_grow((void **)&topo->pci, &topo->num_pci, sizeof(*topo->pci));
    topo_pci_node_t *node;

    if (index < 0) {
        return -1;
    }
    node = &topo->pci[index];
    snprintf(node->busid, sizeof(node->busid), "%s", busid ? busid : "");
    node->host_bridge = host_bridge;
    node->parent      = parent;
    node->numa        = numa;
    return index;
}

int topo_add_gpu(topo_t *topo)
{
    int index = topo_grow((void **)&topo->gpus, &topo->num_gpus, sizeof(*topo->gpus));

    if (index >= 0) {
        topo->gpus[index].numa       = -1;
        topo->gpus[index].pci_parent = -1;
        topo->gpus[index].cuda_index = -1;
        topo->gpus[index].hip_index  = -1;
        topo->gpus[index].cpu_link_numa = -1;
    }
    return index;
}

int topo_add_nic(topo_t *topo)
{
    int index = topo_grow((void **)&topo->nics, &topo->num_nics, sizeof(*topo->nics));

    if (index >= 0) {
        topo->nics[index].numa       = -1;
        topo->nics[index].pci_parent = -1;
    }
    return index;
}

static int topo_gpu_compare(const void *a, const void *b)
{
    return strcmp(((const topo_gpu_t *)a)->busid, ((const topo_gpu_t *)b)->busid);
}

static int topo_nic_compare(const void *a, const void *b)
{
    const topo_nic_t *x = a, *y = b;
    int by_bus = strcmp(x->busid, y->busid);

    return by_bus ? by_bus : strcmp(x->name, y->name);
}

strata_status_t topo_finalize(topo_t *topo)
{
    size_t cells = (size_t)topo->num_gpus * (size_t)topo->num_gpus;

    if (topo->num_gpus > 1) {
        qsort(topo->gpus, (size_t)topo->num_gpus, sizeof(*topo->gpus), topo_gpu_compare);
    }
    if (topo->num_nics > 1) {
        qsort(topo->nics, (size_t)topo->num_nics, sizeof(*topo->nics), topo_nic_compare);
    }
    if (cells > 0) {
        topo->links = calloc(cells, sizeof(*topo->links));
        if (topo->links == NULL) {
            return STRATA_ERR_NO_MEMORY;
        }
    }
    topo->finalized = true;
    return STRATA_OK;
}

static bool topo_link_stronger(const topo_gpu_link_t *a, const topo_gpu_link_t *b)
{
    if (a->kind != TOPO_LINK_NONE && b->kind == TOPO_LINK_NONE) {
        return true;
    }
    return (a->gbps > b->gbps) || (a->gbps == b->gbps && a->count > b->count);
}

void topo_set_gpu_link(topo_t *topo, int gpu_a, int gpu_b, const topo_gpu_link_t *link)
{
    topo_gpu_link_t *ab, *ba;

    if (gpu_a == gpu_b || gpu_a < 0 || gpu_b < 0 || gpu_a >= topo->num_gpus ||
        gpu_b >= topo->num_gpus) {
        return;
    }
    ab = &topo->links[gpu_a * topo->num_gpus + gpu_b];
    ba = &topo->links[gpu_b * topo->num_gpus + gpu_a];
    if (topo_link_stronger(link, ab)) {
        *ab = *link;
        *ba = *link;
    }
}

void topo_connect_nvswitch_fabric(topo_t *topo, const double *nvswitch_gbps,
                                  const unsigned *lanes)
{
    topo_gpu_link_t link = {.kind = TOPO_LINK_NVLINK, .via_switch = true};

    for (int a = 0; a < topo->num_gpus; ++a) {
        for (int b = a + 1; b < topo->num_gpus; ++b) {
            if (nvswitch_gbps[a] <= 0.0 || nvswitch_gbps[b] <= 0.0) {
                continue;
            }
            /* Through the switch a pair gets what the thinner side has. */
            link.gbps  = UTIL_MIN(nvswitch_gbps[a], nvswitch_gbps[b]);
            link.count = UTIL_MIN(lanes[a], lanes[b]);
            topo_set_gpu_link(topo, a, b, &link);
        }
    }
}

/* --- Queries ------------------------------------------------------------------------ */

topo_source_t topo_source(const topo_t *topo) { return topo->source; }
const char *topo_description(const topo_t *topo) { return topo->description; }
int topo_num_numa(const topo_t *topo) { return topo->num_numa; }
int topo_num_gpus(const topo_t *topo) { return topo->num_gpus; }
int topo_num_nics(const topo_t *topo) { return topo->num_nics; }
int topo_num_nvswitches(const topo_t *topo) { return topo->num_nvswitches; }
int topo_num_unclassified_pci(const topo_t *topo) { return topo->num_unclassified_pci; }

bool topo_is_overlay(const topo_t *topo)
{
    /* NCCL writes its topology only with GPUs in it: a file without one, naming devices
     * by bus id alone, describes devices for discovery to recognise. */
    return topo->source == TOPO_SOURCE_NCCL_XML && topo->num_gpus == 0 &&
           topo->num_unclassified_pci > 0;
}

const topo_overlay_report_t *topo_overlay(const topo_t *topo)
{
    return topo->has_overlay ? &topo->overlay : NULL;
}

const topo_numa_t *topo_numa(const topo_t *topo, int index)
{
    return (index >= 0 && index < topo->num_numa) ? &topo->numa[index] : NULL;
}

const topo_gpu_t *topo_gpu(const topo_t *topo, int index)
{
    return (index >= 0 && index < topo->num_gpus) ? &topo->gpus[index] : NULL;
}

const topo_nic_t *topo_nic(const topo_t *topo, int index)
{
    return (index >= 0 && index < topo->num_nics) ? &topo->nics[index] : NULL;
}

int topo_gpu_find(const topo_t *topo, const char *busid)
{
    for (int i = 0; i < topo->num_gpus; ++i) {
        if (strcasecmp(topo->gpus[i].busid, busid) == 0) {
            return i;
        }
    }
    return -1;
}

int topo_nic_find(const topo_t *topo, const char *busid)
{
    for (int i = 0; i < topo->num_nics; ++i) {
        if (strcasecmp(topo->nics[i].busid, busid) == 0) {
            return i;
        }
    }
    return -1;
}

const topo_gpu_link_t *topo_gpu_link(const topo_t *topo, int gpu_a, int gpu_b)
{
    static const topo_gpu_link_t none = {.kind = TOPO_LINK_NONE};

    if (gpu_a < 0 || gpu_b < 0 || gpu_a >= topo->num_gpus || gpu_b >= topo->num_gpus ||
        topo->links == NULL) {
        return &none;
    }
    return &topo->links[gpu_a * topo->num_gpus + gpu_b];
}

/* --- PCIe path classes ----------------------------------------------------------------- */

/* Position of node in the ancestor chain starting at from (0: from itself), or -1. */
static int topo_pci_chain_position(const topo_t *topo, int from, int node)
{
    for (int pos = 0; from >= 0; from = topo->pci[from].parent, ++pos) {
        if (from == node) {
            return pos;
        }
    }
    return -1;
}

static int topo_pci_root(const topo_t *topo, int node)
{
    while (node >= 0 && topo->pci[node].parent >= 0) {
        node = topo->pci[node].parent;
    }
    return node;
}

/*
 * Devices a and b hang below PCI nodes parent_a and parent_b (-1: straight off the CPU).
 * The lowest common ancestor decides: a switch/bridge reached through one bridge in all is
 * PIX, through more PXB; a host bridge is PHB; different PCI roots in one NUMA node are
 * NODE (NCCL files give each root its own node under <cpu>); different NUMA nodes SYS.
 */
static topo_path_t topo_pci_path(const topo_t *topo, int parent_a, int numa_a, int parent_b,
                                 int numa_b)
{
    int pos_a, pos_b;

    /* A shared PCIe ancestor decides even where NUMA affinity is unknown (-1). */
    for (int node = parent_a, pos = 0; node >= 0; node = topo->pci[node].parent, ++pos) {
        pos_b = topo_pci_chain_position(topo, parent_b, node);
        if (pos_b < 0) {
            continue;
        }
        pos_a = pos;
        if (topo->pci[node].host_bridge) {
            return TOPO_PATH_PHB;
        }
        return (pos_a + pos_b == 0) ? TOPO_PATH_PIX : TOPO_PATH_PXB;
    }
    if (numa_a != numa_b || numa_a < 0) {
        return TOPO_PATH_SYS;
    }
    if (parent_a < 0 || parent_b < 0) {
        return TOPO_PATH_PHB; /* one side sits on the CPU's own root complex */
    }
    return (topo_pci_root(topo, parent_a) == topo_pci_root(topo, parent_b)) ? TOPO_PATH_PHB
                                                                            : TOPO_PATH_NODE;
}

/* Bridges from a device below parent (-1: on the CPU) up to the top of its PCIe tree. */
static int topo_pci_depth(const topo_t *topo, int parent)
{
    int depth = 0;

    for (; parent >= 0; parent = topo->pci[parent].parent) {
        ++depth;
    }
    return depth;
}

/*
 * PCIe links crossed between devices below parent_a and parent_b: up to their lowest common
 * bridge and down again; devices in different trees go up to the CPU and down (one more
 * hop each side, the root complex).
 */
static int topo_pci_hops(const topo_t *topo, int parent_a, int parent_b)
{
    int pos_b;

    for (int node = parent_a, pos_a = 0; node >= 0; node = topo->pci[node].parent, ++pos_a) {
        pos_b = topo_pci_chain_position(topo, parent_b, node);
        if (pos_b >= 0) {
            return (pos_a + 1) + (pos_b + 1);
        }
    }
    return (topo_pci_depth(topo, parent_a) + 1) + (topo_pci_depth(topo, parent_b) + 1);
}

topo_path_t topo_gpu_gpu_path(const topo_t *topo, int gpu_a, int gpu_b)
{
    const topo_gpu_t *a = topo_gpu(topo, gpu_a), *b = topo_gpu(topo, gpu_b);

    if (a == NULL || b == NULL) {
        return TOPO_PATH_SYS;
    }
    if (gpu_a == gpu_b) {
        return TOPO_PATH_SELF;
    }
    return topo_pci_path(topo, a->pci_parent, a->numa, b->pci_parent, b->numa);
}

topo_path_t topo_gpu_nic_path(const topo_t *topo, int gpu, int nic)
{
    const topo_gpu_t *g = topo_gpu(topo, gpu);
    const topo_nic_t *n = topo_nic(topo, nic);

    if (g == NULL || n == NULL) {
        return TOPO_PATH_SYS;
    }
    return topo_pci_path(topo, g->pci_parent, g->numa, n->pci_parent, n->numa);
}

int topo_gpu_nic_hops(const topo_t *topo, int gpu, int nic)
{
    const topo_gpu_t *g = topo_gpu(topo, gpu);
    const topo_nic_t *n = topo_nic(topo, nic);

    if (g == NULL || n == NULL) {
        return -1;
    }
    return topo_pci_hops(topo, g->pci_parent, n->pci_parent);
}

topo_path_t topo_nic_nic_path(const topo_t *topo, int nic_a, int nic_b)
{
    const topo_nic_t *a = topo_nic(topo, nic_a), *b = topo_nic(topo, nic_b);

    if (a == NULL || b == NULL) {
        return TOPO_PATH_SYS;
    }
    if (nic_a == nic_b) {
        return TOPO_PATH_SELF;
    }
    return topo_pci_path(topo, a->pci_parent, a->numa, b->pci_parent, b->numa);
}

bool topo_nic_is_rdma(const topo_nic_t *nic)
{
    return nic->kind != TOPO_NIC_ETHERNET;
}

/* --- Names -------------------------------------------------------------------------- */

const char *topo_path_name(topo_path_t path)
{
    static const char *const names[] = {
        [TOPO_PATH_SELF] = "X",   [TOPO_PATH_PIX] = "PIX",   [TOPO_PATH_PXB] = "PXB",
        [TOPO_PATH_PHB]  = "PHB", [TOPO_PATH_NODE] = "NODE", [TOPO_PATH_SYS] = "SYS",
    };

    return ((unsigned)path < UTIL_ARRAY_SIZE(names)) ? names[path] : "?";
}

const char *topo_nic_kind_name(topo_nic_kind_t kind)
{
    static const char *const names[] = {
        [TOPO_NIC_ETHERNET] = "ethernet", [TOPO_NIC_VERBS] = "verbs",
        [TOPO_NIC_EFA] = "efa",           [TOPO_NIC_SLINGSHOT] = "slingshot",
    };

    return ((unsigned)kind < UTIL_ARRAY_SIZE(names)) ? names[kind] : "?";
}

const char *topo_port_state_name(topo_port_state_t state)
{
    static const char *const names[] = {
        [TOPO_PORT_UNKNOWN] = "unknown", [TOPO_PORT_DOWN] = "down",
        [TOPO_PORT_INIT] = "init",       [TOPO_PORT_ACTIVE] = "active",
    };

    return ((unsigned)state < UTIL_ARRAY_SIZE(names)) ? names[state] : "?";
}

const char *topo_vendor_name(topo_vendor_t vendor)
{
    static const char *const names[] = {
        [TOPO_VENDOR_UNKNOWN] = "unknown", [TOPO_VENDOR_NVIDIA] = "nvidia",
        [TOPO_VENDOR_AMD] = "amd",
    };

    return ((unsigned)vendor < UTIL_ARRAY_SIZE(names)) ? names[vendor] : "?";
}

const char *topo_link_kind_name(topo_link_kind_t kind)
{
    static const char *const names[] = {
        [TOPO_LINK_NONE] = "none", [TOPO_LINK_NVLINK] = "nvlink", [TOPO_LINK_XGMI] = "xgmi",
    };

    return ((unsigned)kind < UTIL_ARRAY_SIZE(names)) ? names[kind] : "?";
}

const char *topo_source_name(topo_source_t source)
{
    static const char *const names[] = {
        [TOPO_SOURCE_DISCOVERY] = "discovery", [TOPO_SOURCE_HWLOC_XML] = "hwloc-xml",
        [TOPO_SOURCE_NCCL_XML] = "nccl-xml",
    };

    return ((unsigned)source < UTIL_ARRAY_SIZE(names)) ? names[source] : "?";
}

void topo_error(char *err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    util_vreason(err, fmt, ap);
    va_end(ap);
    /* Errors quote the file's text, which may hold a newline (&#10;): keep them one line. */
    for (char *c = err; *c != '\0'; ++c) {
        if ((unsigned char)*c < 0x20 || *c == 0x7f) {
            *c = '?';
        }
    }
}
