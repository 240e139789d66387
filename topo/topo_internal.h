/*
 * Inside the topo layer: the topology object and the builder used by the importers
 * (hwloc, NCCL XML) and discovery helpers (NVML, ROCm SMI, KFD sysfs).
 */
#ifndef STRATA_TOPO_INTERNAL_H
#define STRATA_TOPO_INTERNAL_H

#include "topo.h"

#include "util/util.h"

#include <stdarg.h>

#define TOPO_DESCRIPTION_LEN 512
#define TOPO_FILE_MAX_BYTES  (64u << 20) /* the largest topology file read */

#define TOPO_PCI_VENDOR_NVIDIA   0x10de
#define TOPO_PCI_VENDOR_AMD      0x1002
#define TOPO_PCI_VENDOR_MELLANOX 0x15b3
#define TOPO_PCI_VENDOR_AMAZON   0x1d0f
#define TOPO_PCI_VENDOR_CRAY     0x17db

/* Nominal NVLink bandwidth per link and direction, GB/s. */
#define TOPO_NVLINK1_GBPS 20.0
#define TOPO_NVLINK2_GBPS 25.0  /* NVLink 2, 3 and 4 */
#define TOPO_NVLINK5_GBPS 50.0

/** What a PCI function is, from its class, vendor and device ids. */
typedef enum topo_pci_role {
    TOPO_PCI_OTHER = 0,
    TOPO_PCI_BRIDGE,
    TOPO_PCI_GPU,
    TOPO_PCI_NIC,
    TOPO_PCI_NVSWITCH
} topo_pci_role_t;

struct topo {
    topo_source_t    source;
    char             description[TOPO_DESCRIPTION_LEN];
    topo_numa_t     *numa;
    int              num_numa;
    topo_pci_node_t *pci;
    int              num_pci;
    topo_gpu_t      *gpus;
    int              num_gpus;
    topo_nic_t      *nics;
    int              num_nics;
    topo_gpu_link_t *links;          /* num_gpus x num_gpus once finalized */
    int              num_nvswitches;
    int              num_unclassified_pci; /* NCCL files: devices named by bus id only */
    bool             finalized;
    bool             has_overlay;
    topo_overlay_report_t overlay;
};

topo_t *topo_alloc(topo_source_t source, const char *description);

/* Builders: return the new element's index, or -1 when out of memory or past the limit
 * (TOPO_MAX_DEVICES of a kind); topo_add_failed then tells which. */
int topo_add_numa(topo_t *topo, int os_index);
int topo_add_pci_node(topo_t *topo, const char *busid, bool host_bridge, int parent, int numa);
int topo_add_gpu(topo_t *topo);
int topo_add_nic(topo_t *topo);
/* After a builder failed: STRATA_ERR_TOPOLOGY, err naming the kind that reached the limit
 * (a file that large describes no machine), or else STRATA_ERR_NO_MEMORY. */
strata_status_t topo_add_failed(const topo_t *topo, const char *name, char *err);

/** Index of the NUMA node with this OS index, -1 if none. */
int topo_numa_find(const topo_t *topo, int os_index);

/**
 * Sort GPUs and NICs by PCI bus id (CUDA_DEVICE_ORDER=PCI_BUS_ID order, as nvidia-smi
 * shows them) and allocate the GPU link matrix. Links are added after this.
 */
strata_status_t topo_finalize(topo_t *topo);

/** Record a link in both directions; a stronger existing link is kept. */
void topo_set_gpu_link(topo_t *topo, int gpu_a, int gpu_b, const topo_gpu_link_t *link);

/**
 * Connect every pair of GPUs that reach the NVSwitch fabric: nvswitch_gbps[g] is GPU g's
 * aggregate bandwidth to the switches (0: not attached), lanes[g] its lane count (0 unknown).
 */
void topo_connect_nvswitch_fabric(topo_t *topo, const double *nvswitch_gbps,
                                  const unsigned *lanes);

topo_pci_role_t topo_pci_classify(unsigned class_id, unsigned vendor_id, unsigned device_id,
                                  bool has_rocm_device);

topo_vendor_t   topo_vendor_from_pci(unsigned vendor_id);
topo_nic_kind_t topo_nic_kind_guess(unsigned class_id, unsigned vendor_id, unsigned device_id,
                                    const char *name, bool has_verbs_device);

/** Normalise a PCI bus id to "dddd:bb:dd.f" lower case; false if it is not one. */
bool topo_busid_normalize(const char *in, char out[TOPO_BUSID_LEN]);

/** Format "0-3,8" from a Linux cpumask ("000000ff,ffff0000,00ffffff"); false if malformed. */
bool topo_cpumask_to_list(const char *mask, char *list, size_t size);

/** Model name for well-known GPU PCI ids ("" when not known). */
const char *topo_gpu_model_name(unsigned vendor_id, unsigned device_id);

/** NVLink bandwidth per link and direction for a CUDA SM version (0: unknown). */
double topo_nvlink_lane_gbps(unsigned sm);

/** PCIe bandwidth of one direction in GB/s from GT/s and lane count. */
double topo_pcie_gbps(double gts, unsigned width);

void topo_error(char *err, const char *fmt, ...) UTIL_PRINTF(2, 3);

/* Importers (each fills a topology allocated by the caller). */
struct _xmlDoc;
struct _xmlNode;

/** Read and parse the XML file at path (at most TOPO_FILE_MAX_BYTES); free with xmlFreeDoc. */
strata_status_t topo_xml_read_file(const char *path, struct _xmlDoc **doc_p, char *err);

/** Bounds of an NCCL <pci> element's link_speed (GT/s) and link_width (lanes). */
#define TOPO_NCCL_MAX_GTS   1024
#define TOPO_NCCL_MAX_LANES 64

/**
 * PCIe bandwidth of an NCCL <pci> element's link_speed and link_width in *gbps_p, 0 where
 * either is absent or words ("Unknown"). false where one is a number that is not finite, is
 * negative or is past its bound (what, what_len: why; *gbps_p 0).
 */
bool topo_nccl_link_gbps(const struct _xmlNode *pci, double *gbps_p, char *what,
                         size_t what_len);

strata_status_t topo_nccl_import(topo_t *topo, const char *name, struct _xmlDoc *doc, char *err);
/* hwloc XML: doc is the parsed document, adapted in place for the hwloc library. */
strata_status_t topo_hwloc_import_xml(topo_t *topo, const char *name, struct _xmlDoc *doc,
                                      char *err);
/*
 * Refuse what hwloc's XML importer would crash or leak on: checks the document against what
 * hwloc 2.x and 3.x write (object types, attributes, sets that parse and nest, the tree's
 * shape, distances) and names the file, line and reason in err. Call before hwloc sees it.
 */
strata_status_t topo_hwloc_check(const char *name, struct _xmlDoc *doc, char *err);
/* hwloc 2.x XML in a NUL-terminated buffer (size excludes the NUL). */
strata_status_t topo_hwloc_import_buffer(topo_t *topo, const char *name, const char *data,
                                         size_t size, char *err);
strata_status_t topo_hwloc_discover(topo_t *topo, const char *sysfs_root, char *err);

/* Live helpers: add what they find; absent libraries or devices are not errors. */
void topo_nvml_add_links(topo_t *topo);
bool topo_rsmi_add_links(topo_t *topo); /* false: ROCm SMI not usable */
void topo_kfd_add_links(topo_t *topo, const char *sysfs_root);
/** True when sysfs has a KFD node for this PCI bus id (an AMD GPU ROCm can drive). */
bool topo_kfd_has_gpu(const char *sysfs_root, const char *busid);
void topo_sysfs_read_nic_port(topo_nic_t *nic, const char *sysfs_root);

#endif
