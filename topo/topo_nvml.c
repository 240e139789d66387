/*
 * NVLink discovery, and which GPUs run in MIG mode, through NVML, loaded with dlopen at run
 * time so strata neither links
 * nor needs the NVIDIA driver. Absent library or devices: nothing is added.
 */
#include "topo_internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define TOPO_NVML_SUCCESS       0
#define TOPO_NVML_MAX_LINKS     18
#define TOPO_NVML_FEATURE_ON    1
#define TOPO_NVML_DEVICE_GPU    0
#define TOPO_NVML_DEVICE_IBMNPU 1 /* IBM POWER8/9 NVLink bridge: the link ends at the CPU */
#define TOPO_NVML_DEVICE_SWITCH 2

/* The NVML ABI subset used here (nvml.h, stable since the _v2/_v3 entry points). */
typedef struct topo_nvml_device *topo_nvml_device_t;
typedef struct topo_nvml_pci_info {
    char     bus_id_legacy[16];
    unsigned domain;
    unsigned bus;
    unsigned device;
    unsigned pci_device_id;
    unsigned pci_subsystem_id;
    char     bus_id[32];
} topo_nvml_pci_info_t;

typedef struct topo_nvml_api {
    int (*init)(void);
    int (*shutdown)(void);
    int (*device_count)(unsigned *count);
    int (*device_by_index)(unsigned index, topo_nvml_device_t *device);
    int (*pci_info)(topo_nvml_device_t device, topo_nvml_pci_info_t *info);
    int (*link_state)(topo_nvml_device_t device, unsigned link, int *active);
    int (*link_remote_pci)(topo_nvml_device_t device, unsigned link, topo_nvml_pci_info_t *info);
    int (*link_remote_type)(topo_nvml_device_t device, unsigned link, int *type);
    int (*link_version)(topo_nvml_device_t device, unsigned link, unsigned *version);
    int (*mig_mode)(topo_nvml_device_t device, unsigned *current, unsigned *pending);
} topo_nvml_api_t;

static bool topo_nvml_load(void *lib, topo_nvml_api_t *api)
{
    *(void **)&api->init             = dlsym(lib, "nvmlInit_v2");
    *(void **)&api->shutdown         = dlsym(lib, "nvmlShutdown");
    *(void **)&api->device_count     = dlsym(lib, "nvmlDeviceGetCount_v2");
    *(void **)&api->device_by_index  = dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
    *(void **)&api->pci_info         = dlsym(lib, "nvmlDeviceGetPciInfo_v3");
    *(void **)&api->link_state       = dlsym(lib, "nvmlDeviceGetNvLinkState");
    *(void **)&api->link_remote_pci  = dlsym(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    *(void **)&api->link_remote_type = dlsym(lib, "nvmlDeviceGetNvLinkRemoteDeviceType");
    *(void **)&api->link_version     = dlsym(lib, "nvmlDeviceGetNvLinkVersion");
    *(void **)&api->mig_mode         = dlsym(lib, "nvmlDeviceGetMigMode"); /* optional */
    return api->init && api->shutdown && api->device_count && api->device_by_index &&
           api->pci_info && api->link_state && api->link_remote_pci;
}

static int topo_nvml_gpu_index(const topo_t *topo, const topo_nvml_pci_info_t *info)
{
    char busid[TOPO_BUSID_LEN];

    snprintf(busid, sizeof(busid), "%04x:%02x:%02x.0", info->domain, info->bus, info->device);
    return topo_gpu_find(topo, busid);
}

static double topo_nvml_lane_gbps(const topo_nvml_api_t *api, topo_nvml_device_t device,
                                  unsigned link)
{
    unsigned version = 0;

    if (api->link_version == NULL || api->link_version(device, link, &version) != 0) {
        return TOPO_NVLINK2_GBPS;
    }
    return (version <= 1) ? TOPO_NVLINK1_GBPS
                          : ((version >= 5) ? TOPO_NVLINK5_GBPS : TOPO_NVLINK2_GBPS);
}

/*
 * One NVLink lane to the CPU socket. NVML names the IBM bridge, whose PCI locality is the
 * whole machine on POWER8; the GPU's own NUMA node is the socket, as hwloc takes it too.
 */
static void topo_nvml_cpu_lane(topo_gpu_t *gpu, double gbps)
{
    gpu->cpu_link.kind = TOPO_LINK_NVLINK;
    gpu->cpu_link.count++;
    gpu->cpu_link.gbps += gbps;
    gpu->cpu_link_numa = gpu->numa;
}

static void topo_nvml_scan_device(topo_t *topo, const topo_nvml_api_t *api,
                                  topo_nvml_device_t device, unsigned *peer_lanes,
                                  double *peer_gbps, double *switch_gbps, unsigned *switch_lanes)
{
    topo_nvml_pci_info_t self, remote;
    int active, type, a, b;

    unsigned mig = 0, mig_pending = 0;

    if (api->pci_info(device, &self) != TOPO_NVML_SUCCESS ||
        (a = topo_nvml_gpu_index(topo, &self)) < 0) {
        return;
    }
    if (api->mig_mode != NULL && api->mig_mode(device, &mig, &mig_pending) == TOPO_NVML_SUCCESS) {
        topo->gpus[a].mig = mig == TOPO_NVML_FEATURE_ON;
    }
    for (unsigned link = 0; link < TOPO_NVML_MAX_LINKS; ++link) {
        if (api->link_state(device, link, &active) != TOPO_NVML_SUCCESS ||
            active != TOPO_NVML_FEATURE_ON ||
            api->link_remote_pci(device, link, &remote) != TOPO_NVML_SUCCESS) {
            continue;
        }
        type = -1;
        if (api->link_remote_type != NULL) {
            api->link_remote_type(device, link, &type);
        }
        b = topo_nvml_gpu_index(topo, &remote);
        if (type == TOPO_NVML_DEVICE_SWITCH) {
            switch_gbps[a] += topo_nvml_lane_gbps(api, device, link);
            switch_lanes[a]++;
        } else if (type == TOPO_NVML_DEVICE_IBMNPU) {
            topo_nvml_cpu_lane(&topo->gpus[a], topo_nvml_lane_gbps(api, device, link));
        } else if (b >= 0 && (type == TOPO_NVML_DEVICE_GPU || type == -1)) {
            peer_lanes[a * topo->num_gpus + b]++;
            peer_gbps[a * topo->num_gpus + b] += topo_nvml_lane_gbps(api, device, link);
        }
    }
}

void topo_nvml_add_links(topo_t *topo)
{
    topo_nvml_api_t api;
    topo_nvml_device_t device;
    unsigned count = 0, *peer_lanes = NULL, *switch_lanes = NULL;
    double *switch_gbps = NULL, *peer_gbps = NULL;
    size_t n = (size_t)topo->num_gpus;
    void *lib;

    if (n == 0 || (lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)) == NULL) {
        UTIL_LOG_DEBUG("NVML not loaded: NVLink discovery skipped");
        return;
    }
    if (!topo_nvml_load(lib, &api) || api.init() != TOPO_NVML_SUCCESS) {
        UTIL_LOG_INFO("NVML present but unusable: NVLink discovery skipped");
        dlclose(lib);
        return;
    }
    peer_lanes   = calloc(n * n, sizeof(*peer_lanes));
    peer_gbps    = calloc(n * n, sizeof(*peer_gbps));
    switch_lanes = calloc(n, sizeof(*switch_lanes));
    switch_gbps  = calloc(n, sizeof(*switch_gbps));
    if (peer_lanes && peer_gbps && switch_lanes && switch_gbps &&
        api.device_count(&count) == TOPO_NVML_SUCCESS) {
        for (unsigned i = 0; i < count; ++i) {
            if (api.device_by_index(i, &device) == TOPO_NVML_SUCCESS) {
                topo_nvml_scan_device(topo, &api, device, peer_lanes, peer_gbps, switch_gbps,
                                      switch_lanes);
            }
        }
        for (size_t a = 0; a < n; ++a) {
            for (size_t b = 0; b < n; ++b) {
                topo_gpu_link_t link = {.kind = TOPO_LINK_NVLINK,
                                        .count = peer_lanes[a * n + b],
                                        .gbps = peer_gbps[a * n + b]};
                if (link.count > 0) {
                    topo_set_gpu_link(topo, (int)a, (int)b, &link);
                }
            }
        }
        topo_connect_nvswitch_fabric(topo, switch_gbps, switch_lanes);
    }
    free(peer_lanes);
    free(peer_gbps);
    free(switch_lanes);
    free(switch_gbps);
    api.shutdown();
    dlclose(lib);
}
