/*
 * XGMI discovery for AMD GPUs: ROCm SMI loaded with dlopen when present, else the KFD
 * topology in sysfs (nodes/N/properties, nodes/N/io_links/M/properties).
 */
#include "topo_internal.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOPO_RSMI_SUCCESS         0
#define TOPO_RSMI_IOLINK_XGMI     2
#define TOPO_KFD_IOLINK_XGMI      11
#define TOPO_KFD_NODES            "/sys/class/kfd/kfd/topology/nodes"
#define TOPO_KFD_DEVICE           "/dev/kfd"
#define TOPO_KFD_MAX_NODES        256
#define TOPO_PATH_MAX             512

/* --- ROCm SMI ------------------------------------------------------------------------ */

typedef struct topo_rsmi_api {
    int (*init)(uint64_t flags);
    int (*shut_down)(void);
    int (*num_devices)(uint32_t *count);
    int (*pci_id)(uint32_t device, uint64_t *bdfid);
    int (*link_type)(uint32_t src, uint32_t dst, uint64_t *hops, int *type);
    int (*bandwidth)(uint32_t src, uint32_t dst, uint64_t *min_mbps, uint64_t *max_mbps);
} topo_rsmi_api_t;

static void *topo_rsmi_open(void)
{
    static const char *const names[] = {"librocm_smi64.so", "librocm_smi64.so.7",
                                        "librocm_smi64.so.6", "librocm_smi64.so.5"};
    void *lib = NULL;

    for (size_t i = 0; i < UTIL_ARRAY_SIZE(names) && lib == NULL; ++i) {
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    }
    return lib;
}

static bool topo_rsmi_load(void *lib, topo_rsmi_api_t *api)
{
    *(void **)&api->init        = dlsym(lib, "rsmi_init");
    *(void **)&api->shut_down   = dlsym(lib, "rsmi_shut_down");
    *(void **)&api->num_devices = dlsym(lib, "rsmi_num_monitor_devices");
    *(void **)&api->pci_id      = dlsym(lib, "rsmi_dev_pci_id_get");
    *(void **)&api->link_type   = dlsym(lib, "rsmi_topo_get_link_type");
    *(void **)&api->bandwidth   = dlsym(lib, "rsmi_minmax_bandwidth_get");
    return api->init && api->shut_down && api->num_devices && api->pci_id && api->link_type;
}

/* BDFID: domain << 32 | bus << 8 | device << 3 | function. */
static int topo_rsmi_gpu_index(const topo_t *topo, uint64_t bdfid)
{
    char busid[TOPO_BUSID_LEN];

    snprintf(busid, sizeof(busid), "%04x:%02x:%02x.%x", (unsigned)(bdfid >> 32),
             (unsigned)((bdfid >> 8) & 0xff), (unsigned)((bdfid >> 3) & 0x1f),
             (unsigned)(bdfid & 0x7));
    return topo_gpu_find(topo, busid);
}

static void topo_rsmi_scan(topo_t *topo, const topo_rsmi_api_t *api, uint32_t count,
                           const int *gpu_of)
{
    uint64_t hops, min_mbps, max_mbps;
    int type;

    for (uint32_t i = 0; i < count; ++i) {
        for (uint32_t j = 0; j < count; ++j) {
            if (i == j || gpu_of[i] < 0 || gpu_of[j] < 0 ||
                api->link_type(i, j, &hops, &type) != TOPO_RSMI_SUCCESS ||
                type != TOPO_RSMI_IOLINK_XGMI || hops != 1) {
                continue;
            }
            topo_gpu_link_t link = {.kind = TOPO_LINK_XGMI};
            if (api->bandwidth && api->bandwidth(i, j, &min_mbps, &max_mbps) == 0) {
                link.gbps = (double)max_mbps / 1000.0;
            }
            topo_set_gpu_link(topo, gpu_of[i], gpu_of[j], &link);
        }
    }
}

bool topo_rsmi_add_links(topo_t *topo)
{
    topo_rsmi_api_t api;
    uint32_t count = 0;
    uint64_t bdfid;
    int *gpu_of;
    void *lib;

    /* Without the AMD GPU driver (its device node) ROCm SMI has no GPU to report: do not
     * load and initialise it for nothing. */
    if (access(TOPO_KFD_DEVICE, F_OK) != 0) {
        return false;
    }
    lib = topo_rsmi_open();
    if (lib == NULL) {
        return false;
    }
    if (!topo_rsmi_load(lib, &api) || api.init(0) != TOPO_RSMI_SUCCESS) {
        dlclose(lib);
        return false;
    }
    if (api.num_devices(&count) == TOPO_RSMI_SUCCESS && count > 0 &&
        (gpu_of = calloc(count, sizeof(*gpu_of))) != NULL) {
        for (uint32_t i = 0; i < count; ++i) {
            gpu_of[i] = (api.pci_id(i, &bdfid) == TOPO_RSMI_SUCCESS)
                            ? topo_rsmi_gpu_index(topo, bdfid) : -1;
            if (gpu_of[i] >= 0 && topo->gpus[gpu_of[i]].hip_index < 0) {
                topo->gpus[gpu_of[i]].hip_index = (int)i;
            }
        }
        topo_rsmi_scan(topo, &api, count, gpu_of);
        free(gpu_of);
    }
    api.shut_down();
    dlclose(lib);
    return true;
}

/* --- KFD sysfs ------------------------------------------------------------------------ */

/* Value of "key value" in a sysfs properties file; false when absent or unreadable. */
static bool topo_kfd_property(const char *path, const char *key, uint64_t *value_p)
{
    char line[256], name[128];
    unsigned long long value;
    bool found = false;
    FILE *file = fopen(path, "r");

    if (file == NULL) {
        return false;
    }
    while (!found && fgets(line, sizeof(line), file) != NULL) {
        if (sscanf(line, "%127s %llu", name, &value) == 2 && strcmp(name, key) == 0) {
            *value_p = value;
            found    = true;
        }
    }
    fclose(file);
    return found;
}

/* Bus id of KFD node `node` if it is a GPU (simd_count > 0); false otherwise. */
static bool topo_kfd_node_busid(const char *root, unsigned node, char *busid)
{
    char path[TOPO_PATH_MAX];
    uint64_t simd = 0, location = 0, domain = 0;

    snprintf(path, sizeof(path), "%s" TOPO_KFD_NODES "/%u/properties", root, node);
    if (!topo_kfd_property(path, "simd_count", &simd) || simd == 0 ||
        !topo_kfd_property(path, "location_id", &location)) {
        return false;
    }
    topo_kfd_property(path, "domain", &domain);
    snprintf(busid, TOPO_BUSID_LEN, "%04x:%02x:%02x.%x", (unsigned)domain,
             (unsigned)((location >> 8) & 0xff), (unsigned)((location >> 3) & 0x1f),
             (unsigned)(location & 0x7));
    return true;
}

bool topo_kfd_has_gpu(const char *sysfs_root, const char *busid)
{
    char node_busid[TOPO_BUSID_LEN];

    for (unsigned node = 0; node < TOPO_KFD_MAX_NODES; ++node) {
        if (topo_kfd_node_busid(sysfs_root, node, node_busid) &&
            strcmp(node_busid, busid) == 0) {
            return true;
        }
    }
    return false;
}

static void topo_kfd_node_links(topo_t *topo, const char *root, unsigned node, int gpu)
{
    char path[TOPO_PATH_MAX], busid[TOPO_BUSID_LEN];
    uint64_t type, to, mbps;
    int peer;

    for (unsigned link = 0; link < TOPO_KFD_MAX_NODES; ++link) {
        snprintf(path, sizeof(path), "%s" TOPO_KFD_NODES "/%u/io_links/%u/properties", root,
                 node, link);
        if (!topo_kfd_property(path, "type", &type)) {
            break; /* io_links are numbered densely from 0 */
        }
        /* KFD lists every peer of an XGMI hive; only direct neighbours report bandwidth. */
        if (type != TOPO_KFD_IOLINK_XGMI || !topo_kfd_property(path, "max_bandwidth", &mbps) ||
            mbps == 0 || !topo_kfd_property(path, "node_to", &to) ||
            to >= TOPO_KFD_MAX_NODES || !topo_kfd_node_busid(root, (unsigned)to, busid) ||
            (peer = topo_gpu_find(topo, busid)) < 0) {
            continue;
        }
        topo_gpu_link_t xgmi = {.kind = TOPO_LINK_XGMI, .gbps = (double)mbps / 1000.0};
        topo_set_gpu_link(topo, gpu, peer, &xgmi);
    }
}

void topo_kfd_add_links(topo_t *topo, const char *sysfs_root)
{
    char busid[TOPO_BUSID_LEN];
    int gpu;

    for (unsigned node = 0; node < TOPO_KFD_MAX_NODES; ++node) {
        if (!topo_kfd_node_busid(sysfs_root, node, busid) ||
            (gpu = topo_gpu_find(topo, busid)) < 0) {
            continue;
        }
        topo_kfd_node_links(topo, sysfs_root, node, gpu);
    }
}

/* --- NIC ports --------------------------------------------------------------------------- */

static bool topo_sysfs_read_line(const char *path, char *buf, size_t size)
{
    FILE *file = fopen(path, "r");
    bool ok;

    if (file == NULL) {
        return false;
    }
    ok = fgets(buf, (int)size, file) != NULL;
    fclose(file);
    if (ok) {
        buf[strcspn(buf, "\n")] = '\0';
    }
    return ok;
}

void topo_sysfs_read_nic_port(topo_nic_t *nic, const char *sysfs_root)
{
    char path[TOPO_PATH_MAX], line[128];
    long value;

    if (nic->name[0] == '\0') {
        return;
    }
    if (nic->kind != TOPO_NIC_ETHERNET) {
        /* "4: ACTIVE", "100 Gb/sec (4X EDR)" */
        snprintf(path, sizeof(path), "%s/sys/class/infiniband/%s/ports/1/state", sysfs_root,
                 nic->name);
        if (topo_sysfs_read_line(path, line, sizeof(line))) {
            value = strtol(line, NULL, 10);
            nic->port_state = (value == 4) ? TOPO_PORT_ACTIVE
                              : (value == 1) ? TOPO_PORT_DOWN : TOPO_PORT_INIT;
        }
        snprintf(path, sizeof(path), "%s/sys/class/infiniband/%s/ports/1/rate", sysfs_root,
                 nic->name);
        if (topo_sysfs_read_line(path, line, sizeof(line)) &&
            (value = strtol(line, NULL, 10)) > 0) {
            nic->speed_mbps = (uint64_t)value * 1000;
        }
        return;
    }
    snprintf(path, sizeof(path), "%s/sys/class/net/%s/operstate", sysfs_root, nic->name);
    if (topo_sysfs_read_line(path, line, sizeof(line))) {
        nic->port_state = (strcmp(line, "up") == 0)     ? TOPO_PORT_ACTIVE
                          : (strcmp(line, "down") == 0) ? TOPO_PORT_DOWN : TOPO_PORT_UNKNOWN;
    }
    snprintf(path, sizeof(path), "%s/sys/class/net/%s/speed", sysfs_root, nic->name);
    if (topo_sysfs_read_line(path, line, sizeof(line)) && (value = strtol(line, NULL, 10)) > 0) {
        nic->speed_mbps = (uint64_t)value;
    }
}
