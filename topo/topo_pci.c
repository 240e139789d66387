/*
 * PCI facts: what a function is (GPU, NIC, NVSwitch, bridge), bus id and cpumask parsing,
 * PCIe bandwidth.
 */
#include "topo_internal.h"

#include <hwloc.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOPO_PCI_CLASS_VGA          0x0300
#define TOPO_PCI_CLASS_3D           0x0302
#define TOPO_PCI_CLASS_DISPLAY      0x0380
#define TOPO_PCI_CLASS_ACCELERATOR  0x1200
#define TOPO_PCI_CLASS_BRIDGE_PCI   0x0604
#define TOPO_PCI_CLASS_BRIDGE_OTHER 0x0680
#define TOPO_PCI_CLASS_INFINIBAND   0x0207
#define TOPO_PCI_CLASS_SERIAL_IB    0x0c06
#define TOPO_PCI_BASE_NETWORK       0x02

static bool topo_pci_is_gpu(unsigned class_id, unsigned vendor_id, bool has_rocm_device)
{
    bool compute_class = class_id == TOPO_PCI_CLASS_3D || class_id == TOPO_PCI_CLASS_DISPLAY ||
                         class_id == TOPO_PCI_CLASS_ACCELERATOR;

    switch (vendor_id) {
    case TOPO_PCI_VENDOR_NVIDIA:
        /* Every NVIDIA display function is CUDA-capable, VGA-class GeForce/RTX included. */
        return compute_class || class_id == TOPO_PCI_CLASS_VGA;
    case TOPO_PCI_VENDOR_AMD:
        /* A VGA-class Radeon counts only when ROCm drives it; Instinct parts are 3D/display. */
        return compute_class || (class_id == TOPO_PCI_CLASS_VGA && has_rocm_device);
    default:
        return false;
    }
}

topo_pci_role_t topo_pci_classify(unsigned class_id, unsigned vendor_id, unsigned device_id,
                                  bool has_rocm_device)
{
    (void)device_id;
    if (class_id == TOPO_PCI_CLASS_BRIDGE_PCI) {
        return TOPO_PCI_BRIDGE;
    }
    if (class_id == TOPO_PCI_CLASS_BRIDGE_OTHER && vendor_id == TOPO_PCI_VENDOR_NVIDIA) {
        return TOPO_PCI_NVSWITCH;
    }
    if (topo_pci_is_gpu(class_id, vendor_id, has_rocm_device)) {
        return TOPO_PCI_GPU;
    }
    if ((class_id >> 8) == TOPO_PCI_BASE_NETWORK || class_id == TOPO_PCI_CLASS_SERIAL_IB) {
        return TOPO_PCI_NIC;
    }
    return TOPO_PCI_OTHER;
}

topo_vendor_t topo_vendor_from_pci(unsigned vendor_id)
{
    switch (vendor_id) {
    case TOPO_PCI_VENDOR_NVIDIA: return TOPO_VENDOR_NVIDIA;
    case TOPO_PCI_VENDOR_AMD:    return TOPO_VENDOR_AMD;
    default:                     return TOPO_VENDOR_UNKNOWN;
    }
}

static bool topo_name_has_prefix(const char *name, const char *prefix)
{
    return name != NULL && strncmp(name, prefix, strlen(prefix)) == 0;
}

/* Names the kernel gives verbs devices (InfiniBand and RoCE) and IPoIB netdevs. */
static bool topo_nic_is_verbs_name(const char *name)
{
    static const char *const prefixes[] = {"mlx", "ib", "bnxt_re", "irdma", "ionic", "rocep",
                                           "hns", "erdma", "qedr", "siw", "rxe"};

    for (size_t i = 0; i < UTIL_ARRAY_SIZE(prefixes); ++i) {
        if (topo_name_has_prefix(name, prefixes[i])) {
            return true;
        }
    }
    return false;
}

topo_nic_kind_t topo_nic_kind_guess(unsigned class_id, unsigned vendor_id, unsigned device_id,
                                    const char *name, bool has_verbs_device)
{
    /* EFA shows as verbs devices "rdmap<bus>s<slot>" (or efa_N) on Amazon's efa0/1/2/3 ids. */
    if (topo_name_has_prefix(name, "efa") || topo_name_has_prefix(name, "rdmap") ||
        (vendor_id == TOPO_PCI_VENDOR_AMAZON && (device_id & 0xfff0) == 0xefa0)) {
        return TOPO_NIC_EFA;
    }
    if (topo_name_has_prefix(name, "cxi") || vendor_id == TOPO_PCI_VENDOR_CRAY) {
        return TOPO_NIC_SLINGSHOT;
    }
    if (has_verbs_device || class_id == TOPO_PCI_CLASS_INFINIBAND ||
        class_id == TOPO_PCI_CLASS_SERIAL_IB || vendor_id == TOPO_PCI_VENDOR_MELLANOX ||
        topo_nic_is_verbs_name(name)) {
        return TOPO_NIC_VERBS;
    }
    return TOPO_NIC_ETHERNET;
}

bool topo_busid_normalize(const char *in, char out[TOPO_BUSID_LEN])
{
    unsigned domain = 0, bus, dev, func;
    int consumed = 0;

    if (in == NULL) {
        return false;
    }
    if (sscanf(in, "%x:%x:%x.%x%n", &domain, &bus, &dev, &func, &consumed) != 4 ||
        in[consumed] != '\0') {
        domain   = 0;
        consumed = 0;
        if (sscanf(in, "%x:%x.%x%n", &bus, &dev, &func, &consumed) != 3 || in[consumed] != '\0') {
            return false;
        }
    }
    if (!isxdigit((unsigned char)in[0]) || bus > 0xff || dev > 0x1f || func > 7) {
        return false;
    }
    snprintf(out, TOPO_BUSID_LEN, "%04x:%02x:%02x.%x", domain, bus, dev, func);
    return true;
}

bool topo_cpumask_to_list(const char *mask, char *list, size_t size)
{
    hwloc_bitmap_t set;
    const char *word, *end;
    unsigned long value;
    char *stop;
    int num_words = 0, index = 0;
    bool ok = true;

    for (const char *p = mask; *p; ++p) {
        if (*p == ',') {
            ++num_words;
        } else if (!isxdigit((unsigned char)*p)) {
            return false;
        }
    }
    ++num_words;
    set = hwloc_bitmap_alloc();
    if (set == NULL) {
        return false;
    }
    /* Linux cpumask: 32-bit words, most significant first. */
    for (word = mask; ok; word = end + 1, ++index) {
        end = strchr(word, ',');
        if (end == NULL) {
            end = word + strlen(word);
        }
        if (end == word || end - word > 8) {
            ok = false;
            break;
        }
        value = strtoul(word, &stop, 16);
        if (stop != end) {
            ok = false;
            break;
        }
        for (unsigned bit = 0; bit < 32; ++bit) {
            if (value & (1ul << bit)) {
                hwloc_bitmap_set(set, (unsigned)(num_words - 1 - index) * 32u + bit);
            }
        }
        if (*end == '\0') {
            break;
        }
    }
    if (ok) {
        hwloc_bitmap_list_snprintf(list, size, set);
    }
    hwloc_bitmap_free(set);
    return ok;
}

double topo_pcie_gbps(double gts, unsigned width)
{
    /* Gen1/2 use 8b/10b coding, Gen3 and later 128b/130b. */
    double efficiency = (gts <= 5.0) ? 0.8 : 128.0 / 130.0;

    return gts * (double)width * efficiency / 8.0;
}

typedef struct topo_gpu_model {
    uint16_t    vendor_id;
    uint16_t    device_id;
    const char *name;
} topo_gpu_model_t;

/* Data-centre parts that topology files name only by PCI id. */
static const topo_gpu_model_t topo_gpu_models[] = {
    {TOPO_PCI_VENDOR_NVIDIA, 0x1db1, "Tesla V100-SXM2-16GB"},
    {TOPO_PCI_VENDOR_NVIDIA, 0x1db5, "Tesla V100-SXM2-32GB"},
    {TOPO_PCI_VENDOR_NVIDIA, 0x1db8, "Tesla V100-SXM3-32GB"},
    {TOPO_PCI_VENDOR_NVIDIA, 0x20b0, "A100-SXM4-40GB"},
    {TOPO_PCI_VENDOR_NVIDIA, 0x20b2, "A100-SXM4-80GB"},
    {TOPO_PCI_VENDOR_NVIDIA, 0x2330, "H100-SXM5-80GB"},
    {TOPO_PCI_VENDOR_NVIDIA, 0x2335, "H200-SXM5-141GB"},
    {TOPO_PCI_VENDOR_NVIDIA, 0x2901, "B200"},
    {TOPO_PCI_VENDOR_AMD, 0x7408, "Instinct MI250X"},
    {TOPO_PCI_VENDOR_AMD, 0x740c, "Instinct MI250X/MI250"},
    {TOPO_PCI_VENDOR_AMD, 0x74a1, "Instinct MI300X"},
};

const char *topo_gpu_model_name(unsigned vendor_id, unsigned device_id)
{
    for (size_t i = 0; i < UTIL_ARRAY_SIZE(topo_gpu_models); ++i) {
        if (topo_gpu_models[i].vendor_id == vendor_id &&
            topo_gpu_models[i].device_id == device_id) {
            return topo_gpu_models[i].name;
        }
    }
    return "";
}

double topo_nvlink_lane_gbps(unsigned sm)
{
    if (sm == 0) {
        return TOPO_NVLINK2_GBPS;
    }
    if (sm < 70) {
        return TOPO_NVLINK1_GBPS;
    }
    return (sm < 100) ? TOPO_NVLINK2_GBPS : TOPO_NVLINK5_GBPS;
}
