/*
 * topo: the machine as strata sees it — NUMA nodes, the PCIe tree, GPUs, NICs, GPU links —
 * from live discovery (hwloc + NVML / ROCm SMI / KFD sysfs) or from a topology file
 * (hwloc XML, NCCL topology XML), and the rail plan: which NICs each GPU uses.
 * Other layers include only this header.
 */
#ifndef STRATA_TOPO_TOPO_H
#define STRATA_TOPO_TOPO_H

#include <strata/strata.h>

#include "util/util_config.h"
#include "util/util_reason.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TOPO_BUSID_LEN   20  /* "dddd:bb:dd.f", domains up to 8 digits, + NUL */
#define TOPO_NAME_LEN    64
#define TOPO_CPUS_LEN    256 /* "0-23,48-71" list form */
#define TOPO_MAX_DEVICES 4096
#define TOPO_PATH_LEN    512

/** PCIe distance between two devices, with the legend of `nvidia-smi topo -m`. */
typedef enum topo_path {
    TOPO_PATH_SELF = 0, /**< the same device */
    TOPO_PATH_PIX,      /**< through at most one PCIe bridge/switch */
    TOPO_PATH_PXB,      /**< through several PCIe bridges, no host bridge */
    TOPO_PATH_PHB,      /**< through a PCIe host bridge (the CPU) */
    TOPO_PATH_NODE,     /**< between host bridges of one NUMA node */
    TOPO_PATH_SYS       /**< across the inter-socket interconnect */
} topo_path_t;

typedef enum topo_vendor {
    TOPO_VENDOR_UNKNOWN = 0,
    TOPO_VENDOR_NVIDIA,
    TOPO_VENDOR_AMD
} topo_vendor_t;

typedef enum topo_nic_kind {
    TOPO_NIC_ETHERNET = 0, /**< plain Ethernet: TCP only */
    TOPO_NIC_VERBS,        /**< InfiniBand / RoCE through libibverbs (mlx5, bnxt_re, irdma...) */
    TOPO_NIC_EFA,          /**< AWS Elastic Fabric Adapter (SRD) */
    TOPO_NIC_SLINGSHOT     /**< HPE Slingshot (cxi) */
} topo_nic_kind_t;

typedef enum topo_port_state {
    TOPO_PORT_UNKNOWN = 0,
    TOPO_PORT_DOWN,
    TOPO_PORT_INIT,
    TOPO_PORT_ACTIVE
} topo_port_state_t;

typedef enum topo_link_kind {
    TOPO_LINK_NONE = 0, /**< GPUs talk over PCIe only */
    TOPO_LINK_NVLINK,
    TOPO_LINK_XGMI
} topo_link_kind_t;

typedef enum topo_source {
    TOPO_SOURCE_DISCOVERY = 0, /**< this machine, live */
    TOPO_SOURCE_HWLOC_XML,
    TOPO_SOURCE_NCCL_XML
} topo_source_t;

typedef struct topo_numa {
    int      os_index;
    char     cpus[TOPO_CPUS_LEN]; /**< list form, e.g. "0-23,48-71"; "" when unknown */
    uint64_t memory_bytes;        /**< 0 when unknown */
} topo_numa_t;

/** A PCIe bridge or switch (one node per switch in NCCL files) or a host bridge. */
typedef struct topo_pci_node {
    char busid[TOPO_BUSID_LEN]; /**< "" for host bridges */
    bool host_bridge;
    int  parent;                /**< index in topo->pci, -1 at the top */
    int  numa;                  /**< index in topo->numa, -1 unknown */
} topo_pci_node_t;

/** Direct GPU↔GPU fabric link (symmetric), or a GPU's NVLink to a CPU. */
typedef struct topo_gpu_link {
    topo_link_kind_t kind;
    unsigned         count;       /**< NVLink lanes or XGMI links; 0 when only bandwidth is known */
    double           gbps;        /**< aggregate bandwidth in GB/s, 0 unknown */
    bool             via_switch;  /**< through NVSwitch rather than point to point */
} topo_gpu_link_t;

typedef struct topo_gpu {
    char          busid[TOPO_BUSID_LEN];
    topo_vendor_t vendor;
    uint16_t      vendor_id;
    uint16_t      device_id;
    char          model[TOPO_NAME_LEN];
    int           numa;         /**< index in topo->numa, -1 unknown */
    int           pci_parent;   /**< index in topo->pci, -1 attached to the CPU */
    int           cuda_index;   /**< -1 when unknown */
    int           hip_index;    /**< -1 when unknown */
    double        pcie_gbps;    /**< PCIe link bandwidth in GB/s, 0 unknown */
    /** NVLink to a CPU socket (IBM POWER8/9), kind NONE when the GPU reaches the CPU over
     *  PCIe only; cpu_link_numa is that socket's NUMA node (index), -1 unknown. */
    topo_gpu_link_t cpu_link;
    int             cpu_link_numa;
    /** MIG mode is on (NVML, live discovery only): its instances share this PCI address,
     *  and CUDA IPC does not work between them. */
    bool            mig;
} topo_gpu_t;

typedef struct topo_nic {
    char              name[TOPO_NAME_LEN]; /**< device name (mlx5_0, rdmap16s27, eth0); "" unknown */
    char              busid[TOPO_BUSID_LEN];
    topo_nic_kind_t   kind;
    uint16_t          vendor_id;
    uint16_t          device_id;
    int               numa;
    int               pci_parent;
    uint64_t          speed_mbps;          /**< port speed, 0 unknown */
    topo_port_state_t port_state;
} topo_nic_t;

typedef struct topo topo_t;

/** Ordered NICs for one GPU: nics[0..num_rails) are its rails, the rest fallbacks. */
typedef struct topo_rail {
    int  gpu;
    int  num_rails;
    int  num_nics;
    int *nics;          /**< indices in the topology's NIC list, best first */
} topo_rail_t;

typedef struct topo_rail_plan {
    int          num_gpus;
    topo_rail_t *rails; /**< one per GPU, in GPU order */
} topo_rail_plan_t;

/* --- Loading ------------------------------------------------------------------------- */

/**
 * Discover this machine. Never fails for lack of GPUs, NICs, NVML or ROCm: those give an
 * empty list. sysfs_root ("" or NULL for "/") lets tests point AMD KFD reading at a tree.
 * On error, err (UTIL_REASON_LEN) holds one line and *topo_p is untouched.
 */
strata_status_t topo_discover(const char *sysfs_root, topo_t **topo_p, char *err);

/**
 * Load a topology file, hwloc XML or NCCL XML, detected from its content. Errors
 * (missing, unreadable, empty, truncated, malformed, not a topology) give one line in err
 * naming the file: STRATA_ERR_NOT_FOUND, STRATA_ERR_IO or STRATA_ERR_PARSE.
 */
strata_status_t topo_load_file(const char *path, topo_t **topo_p, char *err);

/** Same, from memory; name is used in messages. data[size] must be '\0' (as files read are). */
strata_status_t topo_load_buffer(const char *name, const char *data, size_t size,
                                 topo_t **topo_p, char *err);

/**
 * The topology strata runs with: file when not NULL, else the file named by
 * STRATA_TOPO_FILE when set, else discovery; with the overlay named by STRATA_TOPO_OVERLAY
 * applied when set (topo_open_with_overlay). Errors: one line in err, nothing logged.
 */
strata_status_t topo_open(const char *file, topo_t **topo_p, char *err);

/**
 * An NCCL topology overlay, applied onto a topology with topo_overlay_apply: the format
 * of NCCL_TOPO_FILE as cloud providers publish it (AWS p5: PCI switches and bus ids with
 * link speeds, no PCI classes, no GPUs), meant to be merged with live discovery. Devices
 * are matched by PCI bus id; a matched GPU or NIC takes the overlay's PCIe switch tree and
 * NUMA node (<cpu numaid>), its link speed and, for NICs, the <net> name and speed.
 */
typedef struct topo_overlay_report {
    char path[TOPO_PATH_LEN];
    int  unclassified;  /**< the overlay's PCI devices with no class and no <gpu>/<nic> */
    int  matched_gpus;
    int  matched_nics;
    int  unmatched;     /**< overlay devices with no GPU or NIC at their bus id here */
    char first_unmatched[TOPO_BUSID_LEN];
} topo_overlay_report_t;

/**
 * Apply the NCCL topology XML file at path onto topo (see topo_overlay_report_t). Errors
 * (unreadable, malformed, not NCCL XML) give one line in err naming the file; topo may
 * then be partly changed and is only fit for topo_destroy.
 */
strata_status_t topo_overlay_apply(topo_t *topo, const char *path, char *err);

/** What the last topo_overlay_apply did; NULL when none was applied. */
const topo_overlay_report_t *topo_overlay(const topo_t *topo);

/**
 * PCI devices of an NCCL topology file that carry no class and no <gpu>/<nic> child:
 * devices the file names only by bus id, to be recognised by live discovery.
 */
int topo_num_unclassified_pci(const topo_t *topo);

/**
 * True for an NCCL topology file that is an overlay rather than a machine: no GPU, and PCI
 * devices without a class (topo_num_unclassified_pci). NICs it names with <nic> are
 * attributes for discovered NICs.
 */
bool topo_is_overlay(const topo_t *topo);

/**
 * topo_open with an overlay: the base is file, else STRATA_TOPO_FILE, else discovery; a
 * base file that is an overlay (topo_is_overlay) is applied onto discovery instead, as
 * NCCL_TOPO_FILE is. Then overlay, else STRATA_TOPO_OVERLAY when set, is applied onto
 * the base. Errors: one line in err, nothing logged.
 */
strata_status_t topo_open_with_overlay(const char *file, const char *overlay, topo_t **topo_p,
                                       char *err);

/** topo_open(NULL, ...) for a communicator: errors are logged once. */
strata_status_t topo_create(topo_t **topo_p);

void topo_destroy(topo_t *topo);

/* --- Queries (the topology owns everything returned) ------------------------------------ */

topo_source_t      topo_source(const topo_t *topo);
const char        *topo_description(const topo_t *topo); /**< e.g. the file path */
int                topo_num_numa(const topo_t *topo);
int                topo_num_gpus(const topo_t *topo);
int                topo_num_nics(const topo_t *topo);
int                topo_num_nvswitches(const topo_t *topo);
const topo_numa_t *topo_numa(const topo_t *topo, int index);
const topo_gpu_t  *topo_gpu(const topo_t *topo, int index);
const topo_nic_t  *topo_nic(const topo_t *topo, int index);

/** Index of the GPU or NIC with this PCI bus id (case-insensitive), -1 if none. */
int topo_gpu_find(const topo_t *topo, const char *busid);
int topo_nic_find(const topo_t *topo, const char *busid);

/** The NVLink/XGMI link between two GPUs (kind NONE when they have none). */
const topo_gpu_link_t *topo_gpu_link(const topo_t *topo, int gpu_a, int gpu_b);

topo_path_t topo_gpu_gpu_path(const topo_t *topo, int gpu_a, int gpu_b);
topo_path_t topo_gpu_nic_path(const topo_t *topo, int gpu, int nic);
topo_path_t topo_nic_nic_path(const topo_t *topo, int nic_a, int nic_b);

/**
 * PCIe links between a GPU and a NIC: up from each device to their lowest common bridge,
 * or to the CPU when they share none. Ranks NICs within one path class: of two PXB NICs,
 * the one behind a deeper shared switch is fewer hops away. -1 for a bad index.
 */
int topo_gpu_nic_hops(const topo_t *topo, int gpu, int nic);

/** True for NICs that do RDMA (verbs, EFA, Slingshot); rails prefer these over Ethernet. */
bool topo_nic_is_rdma(const topo_nic_t *nic);

/* --- Rail plan -------------------------------------------------------------------------- */

/**
 * For every GPU, the NICs it should use: the closest path class first, and among GPUs
 * that share their closest NICs, the NICs split evenly (each GPU gets its own when there
 * are as many NICs as GPUs, several when there are more, and NICs are shared with loads
 * differing by at most one when there are fewer). Among equally loaded NICs of that class
 * a NIC goes to the GPU fewest PCIe hops from it (topo_gpu_nic_hops), not to the GPU listed
 * first. Fallbacks follow by path class, hops, load, index. RDMA NICs are preferred;
 * Ethernet NICs are used only when the machine has no RDMA NIC.
 */
strata_status_t topo_rail_plan_create(const topo_t *topo, topo_rail_plan_t **plan_p);
void            topo_rail_plan_destroy(topo_rail_plan_t *plan);

/* --- Names ------------------------------------------------------------------------------ */

const char *topo_path_name(topo_path_t path);           /**< "PIX", "SYS", ... */
const char *topo_nic_kind_name(topo_nic_kind_t kind);   /**< "verbs", "efa", ... */
const char *topo_port_state_name(topo_port_state_t state);
const char *topo_vendor_name(topo_vendor_t vendor);
const char *topo_link_kind_name(topo_link_kind_t kind);
const char *topo_source_name(topo_source_t source);

/** The layer's configuration (STRATA_TOPO_*). */
extern const util_config_table_t topo_config_table;

#endif
