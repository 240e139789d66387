/*
 * hwloc to model: live discovery on this machine and import of hwloc XML, including the
 * NVLinkBandwidth (GPU, NVSwitch and POWER CPU ends), XGMIBandwidth and XGMIHops distance
 * matrices hwloc's GPU backends record.
 */
#include "topo_internal.h"

#include <dlfcn.h>
#include <hwloc.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bridges already in the model, by hwloc gp_index, so shared parents are added once. */
typedef struct topo_hwloc_ctx {
    topo_t          *topo;
    hwloc_topology_t hwloc;
    const char      *sysfs_root; /* NULL when importing a file */
    uint64_t        *bridge_gp;  /* gp_index of topo->pci[i] */
    char            *err;
    const char      *name;
} topo_hwloc_ctx_t;

static strata_status_t topo_hwloc_nomem(topo_hwloc_ctx_t *ctx)
{
    return topo_add_failed(ctx->topo, ctx->name, ctx->err);
}

static strata_status_t topo_hwloc_add_numa(topo_hwloc_ctx_t *ctx)
{
    int depth = hwloc_get_type_depth(ctx->hwloc, HWLOC_OBJ_NUMANODE);
    unsigned count = (unsigned)hwloc_get_nbobjs_by_depth(ctx->hwloc, depth);
    hwloc_obj_t obj;
    int index;

    for (unsigned i = 0; i < count; ++i) {
        obj   = hwloc_get_obj_by_depth(ctx->hwloc, depth, i);
        index = topo_add_numa(ctx->topo, (int)obj->os_index);
        if (index < 0) {
            return topo_hwloc_nomem(ctx);
        }
        if (obj->cpuset != NULL) {
            hwloc_bitmap_list_snprintf(ctx->topo->numa[index].cpus,
                                       sizeof(ctx->topo->numa[index].cpus), obj->cpuset);
        }
        ctx->topo->numa[index].memory_bytes = obj->attr ? obj->attr->numanode.local_memory : 0;
    }
    return STRATA_OK;
}

/* The NUMA node local to an I/O object, -1 when it spans several or none. */
static int topo_hwloc_numa_of(topo_hwloc_ctx_t *ctx, hwloc_obj_t obj)
{
    hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(ctx->hwloc, obj);

    if (ancestor == NULL || ancestor->nodeset == NULL ||
        hwloc_bitmap_weight(ancestor->nodeset) != 1) {
        return -1;
    }
    return topo_numa_find(ctx->topo, hwloc_bitmap_first(ancestor->nodeset));
}

static void topo_hwloc_busid(const struct hwloc_pcidev_attr_s *pci, char *busid)
{
    snprintf(busid, TOPO_BUSID_LEN, "%04x:%02x:%02x.%x", pci->domain, pci->bus, pci->dev,
             pci->func);
}

/*
 * Below a root port (bridge depth 1), PCIe switches alternate upstream port (even depth)
 * and downstream ports (odd depth). A switch is one bridge to the devices behind it, so
 * its downstream ports fold into its upstream port: devices on one switch are then PIX.
 */
static bool topo_hwloc_is_switch_downstream_port(hwloc_obj_t bridge)
{
    hwloc_obj_t parent = bridge->parent;

    return bridge->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI &&
           bridge->attr->bridge.depth >= 3 && (bridge->attr->bridge.depth % 2) == 1 &&
           parent != NULL && parent->type == HWLOC_OBJ_BRIDGE &&
           parent->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI;
}

/* Model index of the bridge chain above obj (adding it on first sight), -1 at the top. */
static int topo_hwloc_parent(topo_hwloc_ctx_t *ctx, hwloc_obj_t obj)
{
    char busid[TOPO_BUSID_LEN] = "";
    uint64_t *grown;
    bool host;
    int parent, index;

    if (obj == NULL || obj->type != HWLOC_OBJ_BRIDGE) {
        return -1;
    }
    if (topo_hwloc_is_switch_downstream_port(obj)) {
        return topo_hwloc_parent(ctx, obj->parent); /* one node per switch, as NCCL does */
    }
    for (int i = 0; i < ctx->topo->num_pci; ++i) {
        if (ctx->bridge_gp[i] == obj->gp_index) {
            return i;
        }
    }
    parent = topo_hwloc_parent(ctx, obj->parent);
    if (parent == -2) {
        return -2;
    }
    host = obj->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
    if (!host) {
        topo_hwloc_busid(&obj->attr->bridge.upstream.pci, busid);
    }
    grown = realloc(ctx->bridge_gp, (size_t)(ctx->topo->num_pci + 1) * sizeof(*grown));
    if (grown == NULL) {
        return -2;
    }
    ctx->bridge_gp = grown;
    index = topo_add_pci_node(ctx->topo, busid, host, parent, topo_hwloc_numa_of(ctx, obj));
    if (index < 0) {
        return -2;
    }
    ctx->bridge_gp[index] = obj->gp_index;
    return index;
}

static bool topo_hwloc_is_osdev(hwloc_obj_t obj, hwloc_obj_osdev_type_t type, const char *prefix)
{
    return obj->type == HWLOC_OBJ_OS_DEVICE && obj->attr->osdev.type == type &&
           obj->name != NULL && (prefix == NULL || strncmp(obj->name, prefix, strlen(prefix)) == 0);
}

/* First OS device child of pcidev of this type (and name prefix), NULL if none. */
static hwloc_obj_t topo_hwloc_osdev(hwloc_obj_t pcidev, hwloc_obj_osdev_type_t type,
                                    const char *prefix)
{
    for (hwloc_obj_t child = pcidev->io_first_child; child; child = child->next_sibling) {
        if (topo_hwloc_is_osdev(child, type, prefix)) {
            return child;
        }
    }
    return NULL;
}

static bool topo_hwloc_has_rocm(topo_hwloc_ctx_t *ctx, hwloc_obj_t pcidev, const char *busid)
{
    if (topo_hwloc_osdev(pcidev, HWLOC_OBJ_OSDEV_GPU, "rsmi") != NULL) {
        return true;
    }
    return ctx->sysfs_root != NULL && topo_kfd_has_gpu(ctx->sysfs_root, busid);
}

/* Index N of an OS device named <prefix>N under pcidev, -1 if none. */
static int topo_hwloc_osdev_index(hwloc_obj_t pcidev, hwloc_obj_osdev_type_t type,
                                  const char *prefix)
{
    hwloc_obj_t osdev = topo_hwloc_osdev(pcidev, type, prefix);
    char *end;
    long n;

    if (osdev == NULL) {
        return -1;
    }
    n = strtol(osdev->name + strlen(prefix), &end, 10);
    return (*end == '\0' && n >= 0) ? (int)n : -1;
}

static void topo_hwloc_gpu_model(hwloc_obj_t pcidev, topo_gpu_t *gpu)
{
    const char *model = NULL;

    for (hwloc_obj_t child = pcidev->io_first_child; child && !model; child = child->next_sibling) {
        if (child->type == HWLOC_OBJ_OS_DEVICE) {
            model = hwloc_obj_get_info_by_name(child, "GPUModel");
        }
    }
    if (model == NULL || model[0] == '\0') {
        model = topo_gpu_model_name(gpu->vendor_id, gpu->device_id);
    }
    if (model[0] == '\0') {
        model = hwloc_obj_get_info_by_name(pcidev, "PCIDevice");
    }
    snprintf(gpu->model, sizeof(gpu->model), "%s", model ? model : "");
}

static strata_status_t topo_hwloc_gpu(topo_hwloc_ctx_t *ctx, hwloc_obj_t pcidev,
                                      const char *busid, int parent)
{
    const struct hwloc_pcidev_attr_s *pci = &pcidev->attr->pcidev;
    topo_gpu_t *gpu;
    int index;

    /* hwloc takes two devices at one address; two GPUs there would make find ambiguous. */
    if (topo_gpu_find(ctx->topo, busid) >= 0) {
        topo_error(ctx->err, "%s: two GPUs at PCI bus id %s", ctx->name, busid);
        return STRATA_ERR_PARSE;
    }
    index = topo_add_gpu(ctx->topo);
    if (index < 0) {
        return topo_hwloc_nomem(ctx);
    }
    gpu = &ctx->topo->gpus[index];
    snprintf(gpu->busid, sizeof(gpu->busid), "%s", busid);
    gpu->vendor     = topo_vendor_from_pci(pci->vendor_id);
    gpu->vendor_id  = pci->vendor_id;
    gpu->device_id  = pci->device_id;
    gpu->numa       = topo_hwloc_numa_of(ctx, pcidev);
    gpu->pci_parent = parent;
    gpu->pcie_gbps  = pci->linkspeed;
    gpu->cuda_index = topo_hwloc_osdev_index(pcidev, HWLOC_OBJ_OSDEV_COPROC, "cuda");
    gpu->hip_index  = topo_hwloc_osdev_index(pcidev, HWLOC_OBJ_OSDEV_GPU, "rsmi");
    topo_hwloc_gpu_model(pcidev, gpu);
    return STRATA_OK;
}

static topo_port_state_t topo_hwloc_port_state(hwloc_obj_t ofed)
{
    const char *state = ofed ? hwloc_obj_get_info_by_name(ofed, "Port1State") : NULL;

    /* ibv_port_state numbering: 1 down, 2 init, 3 armed, 4 active. */
    if (state == NULL) {
        return TOPO_PORT_UNKNOWN;
    }
    switch (atoi(state)) {
    case 1:  return TOPO_PORT_DOWN;
    case 2:
    case 3:  return TOPO_PORT_INIT;
    case 4:
    case 5:  return TOPO_PORT_ACTIVE;
    default: return TOPO_PORT_UNKNOWN;
    }
}

static strata_status_t topo_hwloc_nic(topo_hwloc_ctx_t *ctx, hwloc_obj_t pcidev,
                                      const char *busid, int parent)
{
    const struct hwloc_pcidev_attr_s *pci = &pcidev->attr->pcidev;
    hwloc_obj_t ofed = topo_hwloc_osdev(pcidev, HWLOC_OBJ_OSDEV_OPENFABRICS, NULL);
    hwloc_obj_t net  = topo_hwloc_osdev(pcidev, HWLOC_OBJ_OSDEV_NETWORK, NULL);
    int index = topo_add_nic(ctx->topo);
    topo_nic_t *nic;

    if (index < 0) {
        return topo_hwloc_nomem(ctx);
    }
    nic = &ctx->topo->nics[index];
    /* The verbs device name is what transports open; the netdev name is the fallback. */
    snprintf(nic->name, sizeof(nic->name), "%s", ofed ? ofed->name : (net ? net->name : ""));
    snprintf(nic->busid, sizeof(nic->busid), "%s", busid);
    nic->vendor_id  = pci->vendor_id;
    nic->device_id  = pci->device_id;
    nic->numa       = topo_hwloc_numa_of(ctx, pcidev);
    nic->pci_parent = parent;
    nic->port_state = topo_hwloc_port_state(ofed);
    nic->kind       = topo_nic_kind_guess(pci->class_id, pci->vendor_id, pci->device_id,
                                          nic->name, ofed != NULL);
    if (ctx->sysfs_root != NULL) {
        topo_sysfs_read_nic_port(nic, ctx->sysfs_root);
    }
    return STRATA_OK;
}

static strata_status_t topo_hwloc_pcidev(topo_hwloc_ctx_t *ctx, hwloc_obj_t pcidev)
{
    const struct hwloc_pcidev_attr_s *pci = &pcidev->attr->pcidev;
    char busid[TOPO_BUSID_LEN];
    topo_pci_role_t role;
    int parent;

    topo_hwloc_busid(pci, busid);
    role = topo_pci_classify(pci->class_id, pci->vendor_id, pci->device_id,
                             topo_hwloc_has_rocm(ctx, pcidev, busid));
    if (pcidev->subtype != NULL && strcmp(pcidev->subtype, "NVSwitch") == 0) {
        role = TOPO_PCI_NVSWITCH;
    }
    if (role == TOPO_PCI_NVSWITCH) {
        ctx->topo->num_nvswitches++;
        return STRATA_OK;
    }
    if (role != TOPO_PCI_GPU && role != TOPO_PCI_NIC) {
        return STRATA_OK;
    }
    parent = topo_hwloc_parent(ctx, pcidev->parent);
    if (parent == -2) {
        return topo_hwloc_nomem(ctx);
    }
    return (role == TOPO_PCI_GPU) ? topo_hwloc_gpu(ctx, pcidev, busid, parent)
                                  : topo_hwloc_nic(ctx, pcidev, busid, parent);
}

/* GPU index of a distance-matrix object (a GPU OS device or its PCI device), -1 if not one. */
static int topo_hwloc_gpu_of(topo_hwloc_ctx_t *ctx, hwloc_obj_t obj)
{
    char busid[TOPO_BUSID_LEN];

    if (obj->type == HWLOC_OBJ_OS_DEVICE) {
        obj = obj->parent;
    }
    if (obj == NULL || obj->type != HWLOC_OBJ_PCI_DEVICE) {
        return -1;
    }
    topo_hwloc_busid(&obj->attr->pcidev, busid);
    return topo_gpu_find(ctx->topo, busid);
}

static bool topo_hwloc_is_nvswitch(hwloc_obj_t obj)
{
    return obj->type == HWLOC_OBJ_PCI_DEVICE && obj->subtype != NULL &&
           strcmp(obj->subtype, "NVSwitch") == 0;
}

/* hwloc keeps only bandwidth: infer lanes from the per-lane rate of NVLink 2-4, then 1. */
static unsigned topo_hwloc_nvlink_lanes(uint64_t mbps)
{
    if (mbps > 0 && mbps % 25000 == 0) {
        return (unsigned)(mbps / 25000);
    }
    if (mbps > 0 && mbps % 20000 == 0) {
        return (unsigned)(mbps / 20000);
    }
    return 0;
}

/*
 * On IBM POWER8/9, NVLink joins GPUs to the CPU socket, and hwloc's NVML backend puts the
 * CPU side in the matrix as the GPU's first ancestor with a cpuset (usually its Package).
 */
static void topo_hwloc_cpu_nvlink(topo_hwloc_ctx_t *ctx, int gpu, hwloc_obj_t cpu,
                                  uint64_t mbps)
{
    topo_gpu_t *g = &ctx->topo->gpus[gpu];

    g->cpu_link.kind = TOPO_LINK_NVLINK;
    g->cpu_link.gbps += (double)mbps / 1000.0;
    g->cpu_link.count += topo_hwloc_nvlink_lanes(mbps);
    if (cpu->nodeset != NULL && hwloc_bitmap_weight(cpu->nodeset) == 1) {
        g->cpu_link_numa = topo_numa_find(ctx->topo, hwloc_bitmap_first(cpu->nodeset));
    }
}

static strata_status_t topo_hwloc_nvlink(topo_hwloc_ctx_t *ctx, struct hwloc_distances_s *d)
{
    double *switch_gbps = calloc((size_t)ctx->topo->num_gpus + 1, sizeof(*switch_gbps));
    unsigned *lanes = calloc((size_t)ctx->topo->num_gpus + 1, sizeof(*lanes));
    topo_gpu_link_t link = {.kind = TOPO_LINK_NVLINK};
    uint64_t mbps;
    int a, b;

    if (switch_gbps == NULL || lanes == NULL) {
        free(switch_gbps);
        free(lanes);
        return topo_hwloc_nomem(ctx);
    }
    for (unsigned i = 0; i < d->nbobjs; ++i) {
        a = topo_hwloc_gpu_of(ctx, d->objs[i]);
        for (unsigned j = 0; j < d->nbobjs && a >= 0; ++j) {
            mbps = d->values[i * d->nbobjs + j];
            if (i == j || mbps == 0) {
                continue;
            }
            b = topo_hwloc_gpu_of(ctx, d->objs[j]);
            if (b >= 0) {
                link.gbps  = (double)mbps / 1000.0;
                link.count = topo_hwloc_nvlink_lanes(mbps);
                topo_set_gpu_link(ctx->topo, a, b, &link);
            } else if (topo_hwloc_is_nvswitch(d->objs[j])) {
                switch_gbps[a] += (double)mbps / 1000.0;
                lanes[a] += topo_hwloc_nvlink_lanes(mbps);
            } else if (d->objs[j]->cpuset != NULL) {
                topo_hwloc_cpu_nvlink(ctx, a, d->objs[j], mbps);
            }
        }
    }
    topo_connect_nvswitch_fabric(ctx->topo, switch_gbps, lanes);
    free(switch_gbps);
    free(lanes);
    return STRATA_OK;
}

/* Per GPU pair, the value of a distance matrix (indexed by matrix objects) or 0. */
static uint64_t *topo_hwloc_by_gpu(topo_hwloc_ctx_t *ctx, struct hwloc_distances_s *d)
{
    size_t n = (size_t)ctx->topo->num_gpus;
    uint64_t *values = calloc(n * n + 1, sizeof(*values));
    int a, b;

    for (unsigned i = 0; values != NULL && d != NULL && i < d->nbobjs; ++i) {
        a = topo_hwloc_gpu_of(ctx, d->objs[i]);
        for (unsigned j = 0; j < d->nbobjs && a >= 0; ++j) {
            b = topo_hwloc_gpu_of(ctx, d->objs[j]);
            if (b >= 0) {
                values[(size_t)a * n + (size_t)b] = d->values[i * d->nbobjs + j];
            }
        }
    }
    return values;
}

/* XGMI: a direct link where XGMIHops is 1 and, when recorded, bandwidth is not 0. */
static strata_status_t topo_hwloc_xgmi(topo_hwloc_ctx_t *ctx, struct hwloc_distances_s *bw,
                                       struct hwloc_distances_s *hops)
{
    uint64_t *gbw = topo_hwloc_by_gpu(ctx, bw), *ghops = topo_hwloc_by_gpu(ctx, hops);
    size_t n = (size_t)ctx->topo->num_gpus;
    topo_gpu_link_t link = {.kind = TOPO_LINK_XGMI};

    if (gbw == NULL || ghops == NULL) {
        free(gbw);
        free(ghops);
        return topo_hwloc_nomem(ctx);
    }
    for (size_t a = 0; a < n; ++a) {
        for (size_t b = 0; b < n; ++b) {
            size_t k = a * n + b;

            if (a == b || (hops && ghops[k] != 1) || (bw && gbw[k] == 0)) {
                continue;
            }
            link.gbps = bw ? (double)gbw[k] / 1000.0 : 0.0;
            topo_set_gpu_link(ctx->topo, (int)a, (int)b, &link);
        }
    }
    free(gbw);
    free(ghops);
    return STRATA_OK;
}

static struct hwloc_distances_s *topo_hwloc_distances(topo_hwloc_ctx_t *ctx, const char *name)
{
    struct hwloc_distances_s *d = NULL;
    unsigned nr = 1;

    if (hwloc_distances_get_by_name(ctx->hwloc, name, &nr, &d, 0) != 0 || nr == 0) {
        return NULL;
    }
    return d;
}

static strata_status_t topo_hwloc_links(topo_hwloc_ctx_t *ctx)
{
    struct hwloc_distances_s *nvlink = topo_hwloc_distances(ctx, "NVLinkBandwidth");
    struct hwloc_distances_s *xgmi_bw = topo_hwloc_distances(ctx, "XGMIBandwidth");
    struct hwloc_distances_s *xgmi_hops = topo_hwloc_distances(ctx, "XGMIHops");
    strata_status_t status = STRATA_OK;

    if (nvlink != NULL) {
        status = topo_hwloc_nvlink(ctx, nvlink);
        hwloc_distances_release(ctx->hwloc, nvlink);
    }
    if (status == STRATA_OK && (xgmi_bw != NULL || xgmi_hops != NULL)) {
        status = topo_hwloc_xgmi(ctx, xgmi_bw, xgmi_hops);
    }
    if (xgmi_bw != NULL) {
        hwloc_distances_release(ctx->hwloc, xgmi_bw);
    }
    if (xgmi_hops != NULL) {
        hwloc_distances_release(ctx->hwloc, xgmi_hops);
    }
    return status;
}

static strata_status_t topo_hwloc_build(topo_hwloc_ctx_t *ctx)
{
    strata_status_t status = topo_hwloc_add_numa(ctx);
    hwloc_obj_t pcidev = NULL;

    while (status == STRATA_OK && (pcidev = hwloc_get_next_pcidev(ctx->hwloc, pcidev)) != NULL) {
        status = topo_hwloc_pcidev(ctx, pcidev);
    }
    if (status == STRATA_OK) {
        status = topo_finalize(ctx->topo);
        if (status != STRATA_OK) {
            topo_hwloc_nomem(ctx);
        }
    }
    if (status == STRATA_OK) {
        status = topo_hwloc_links(ctx);
    }
    free(ctx->bridge_gp);
    ctx->bridge_gp = NULL;
    return status;
}

/*
 * hwloc's PCI plugin reads device names through libpciaccess, which caches pci.ids in its
 * globals and never frees it; hwloc unloads the plugin with the topology, and the cache
 * then looks leaked. Keeping libpciaccess loaded for the life of the process keeps it
 * reachable, as it is in every program that links libpciaccess itself.
 */
static void topo_hwloc_pin_pciaccess(void)
{
    (void)dlopen("libpciaccess.so.0", RTLD_LAZY | RTLD_NODELETE);
}

#define TOPO_HWLOC_XML_PLUGIN "hwloc_xml_libxml.so"

static int topo_hwloc_find_xml_plugin(struct dl_phdr_info *info, size_t size, void *handle_p)
{
    const char *base = strrchr(info->dlpi_name, '/');

    if (base == NULL || strcmp(base + 1, TOPO_HWLOC_XML_PLUGIN) != 0) {
        return 0;
    }
    *(void **)handle_p = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    return 1;
}

/*
 * hwloc's libxml2 plugin points libxml2's process-wide generic error handler at a function
 * of its own, and hwloc unloads its plugins with the last topology: the next libxml2 error
 * reported without a parser context (an encoding error in any XML file strata reads later)
 * then called into unmapped memory. Keeping the plugin loaded keeps the handler valid.
 * hwloc loads its plugins in hwloc_topology_init; without plugins there is nothing to pin.
 */
static void topo_hwloc_pin_xml_plugin(void)
{
    static atomic_bool pinned; /* set by the first thread that pinned it; read by all */
    void *handle = NULL;

    if (atomic_load_explicit(&pinned, memory_order_acquire)) {
        return;
    }
    dl_iterate_phdr(topo_hwloc_find_xml_plugin, &handle);
    if (handle != NULL) {
        atomic_store_explicit(&pinned, true, memory_order_release);
    }
}

static strata_status_t topo_hwloc_open(hwloc_topology_t *hwloc_p, enum hwloc_type_filter_e io,
                                       const char *name, char *err)
{
    static pthread_once_t pinned = PTHREAD_ONCE_INIT;

    pthread_once(&pinned, topo_hwloc_pin_pciaccess);
    if (hwloc_topology_init(hwloc_p) != 0) {
        topo_error(err, "%s: hwloc could not initialise", name);
        return STRATA_ERR_TOPOLOGY;
    }
    topo_hwloc_pin_xml_plugin();
    hwloc_topology_set_io_types_filter(*hwloc_p, io);
    /* strata finds GPUs on the PCI tree and asks NVML or ROCm SMI itself. hwloc's OpenCL
     * and GL plugins would start whatever runtime is installed (ROCm's OpenCL takes minutes
     * without a GPU, and leaks) or talk to an X server: leave them out. */
    hwloc_topology_set_components(*hwloc_p, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "opencl");
    hwloc_topology_set_components(*hwloc_p, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "gl");
    return STRATA_OK;
}

strata_status_t topo_hwloc_import_buffer(topo_t *topo, const char *name, const char *data,
                                         size_t size, char *err)
{
    topo_hwloc_ctx_t ctx = {.topo = topo, .name = name, .err = err};
    strata_status_t status;

    status = topo_hwloc_open(&ctx.hwloc, HWLOC_TYPE_FILTER_KEEP_ALL, name, err);
    if (status != STRATA_OK) {
        return status;
    }
    /* hwloc wants the size to count the terminating NUL, which every caller provides. */
    if (size + 1 > (size_t)INT32_MAX ||
        hwloc_topology_set_xmlbuffer(ctx.hwloc, data, (int)size + 1) != 0 ||
        hwloc_topology_load(ctx.hwloc) != 0) {
        topo_error(err, "%s: hwloc rejected this hwloc XML (HWLOC_XML_VERBOSE=1 tells why)",
                   name);
        hwloc_topology_destroy(ctx.hwloc);
        return STRATA_ERR_PARSE;
    }
    status = topo_hwloc_build(&ctx);
    hwloc_topology_destroy(ctx.hwloc);
    return status;
}

strata_status_t topo_hwloc_discover(topo_t *topo, const char *sysfs_root, char *err)
{
    topo_hwloc_ctx_t ctx = {.topo = topo, .name = "discovery", .err = err,
                            .sysfs_root = sysfs_root};
    strata_status_t status;

    status = topo_hwloc_open(&ctx.hwloc, HWLOC_TYPE_FILTER_KEEP_IMPORTANT, "discovery", err);
    if (status != STRATA_OK) {
        return status;
    }
    if (hwloc_topology_load(ctx.hwloc) != 0) {
        topo_error(err, "discovery: hwloc could not read this machine's topology");
        hwloc_topology_destroy(ctx.hwloc);
        return STRATA_ERR_TOPOLOGY;
    }
    status = topo_hwloc_build(&ctx);
    hwloc_topology_destroy(ctx.hwloc);
    return status;
}
