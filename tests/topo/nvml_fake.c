/*
 * A stand-in libnvidia-ml.so.1 for test_nvml: the NVML calls topo_nvml.c makes, answering
 * for a 2-socket IBM POWER9 with 4 V100 (NVLink 2.0). Each GPU's links 0-2 go to its peer
 * GPU (0-1, 2-3) and links 3-5 to the IBM NVLink bridge of its socket; GPU 2 is in MIG
 * mode. Loaded by dlopen
 * through LD_LIBRARY_PATH; nothing in strata links it.
 */
#include <stdint.h>
#include <string.h>

#define FAKE_SUCCESS          0
#define FAKE_INVALID_ARGUMENT 2
#define FAKE_NUM_GPUS         4u
#define FAKE_LINKS            6u

typedef struct fake_pci_info { /* nvmlPciInfo_t, as topo_nvml.c declares it */
    char     bus_id_legacy[16];
    unsigned domain;
    unsigned bus;
    unsigned device;
    unsigned pci_device_id;
    unsigned pci_subsystem_id;
    char     bus_id[32];
} fake_pci_info_t;

/* power9-nvlink-cpu.hwloc.xml's GPUs, and the bridge each one's CPU links reach. */
static const unsigned fake_gpu_domain[FAKE_NUM_GPUS] = {0x0004, 0x0005, 0x0035, 0x0036};
static const unsigned fake_npu_domain[FAKE_NUM_GPUS] = {0x0007, 0x0007, 0x0037, 0x0037};

int nvmlInit_v2(void);
int nvmlShutdown(void);
int nvmlDeviceGetCount_v2(unsigned *count);
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **device);
int nvmlDeviceGetPciInfo_v3(void *device, fake_pci_info_t *info);
int nvmlDeviceGetNvLinkState(void *device, unsigned link, int *active);
int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *device, unsigned link, fake_pci_info_t *info);
int nvmlDeviceGetNvLinkRemoteDeviceType(void *device, unsigned link, int *type);
int nvmlDeviceGetNvLinkVersion(void *device, unsigned link, unsigned *version);
int nvmlDeviceGetMigMode(void *device, unsigned *current, unsigned *pending);

static unsigned fake_gpu(void *device)
{
    return (unsigned)((uintptr_t)device - 1);
}

static void fake_fill(fake_pci_info_t *info, unsigned domain, unsigned bus)
{
    memset(info, 0, sizeof(*info));
    info->domain = domain;
    info->bus    = bus;
}

int nvmlInit_v2(void) { return FAKE_SUCCESS; }
int nvmlShutdown(void) { return FAKE_SUCCESS; }

int nvmlDeviceGetCount_v2(unsigned *count)
{
    *count = FAKE_NUM_GPUS;
    return FAKE_SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **device)
{
    if (index >= FAKE_NUM_GPUS) {
        return FAKE_INVALID_ARGUMENT;
    }
    *device = (void *)(uintptr_t)(index + 1);
    return FAKE_SUCCESS;
}

int nvmlDeviceGetPciInfo_v3(void *device, fake_pci_info_t *info)
{
    fake_fill(info, fake_gpu_domain[fake_gpu(device)], 0x04);
    return FAKE_SUCCESS;
}

int nvmlDeviceGetNvLinkState(void *device, unsigned link, int *active)
{
    (void)device;
    *active = 1;
    return (link < FAKE_LINKS) ? FAKE_SUCCESS : FAKE_INVALID_ARGUMENT;
}

int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *device, unsigned link, fake_pci_info_t *info)
{
    unsigned gpu = fake_gpu(device);

    if (link >= FAKE_LINKS) {
        return FAKE_INVALID_ARGUMENT;
    }
    if (link < 3) {
        fake_fill(info, fake_gpu_domain[gpu ^ 1u], 0x04);
    } else {
        fake_fill(info, fake_npu_domain[gpu], 0x00);
    }
    return FAKE_SUCCESS;
}

int nvmlDeviceGetNvLinkRemoteDeviceType(void *device, unsigned link, int *type)
{
    (void)device;
    *type = (link < 3) ? 0 /* GPU */ : 1 /* IBMNPU */;
    return (link < FAKE_LINKS) ? FAKE_SUCCESS : FAKE_INVALID_ARGUMENT;
}

int nvmlDeviceGetNvLinkVersion(void *device, unsigned link, unsigned *version)
{
    (void)device;
    (void)link;
    *version = 2;
    return FAKE_SUCCESS;
}

/* GPU 2 runs in MIG mode; the others do not. */
int nvmlDeviceGetMigMode(void *device, unsigned *current, unsigned *pending)
{
    *current = *pending = fake_gpu(device) == 2 ? 1u : 0u;
    return FAKE_SUCCESS;
}
