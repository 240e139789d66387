/*
 * strata-topo's human rendering: summary, GPU and NIC lists, the GPU and NIC matrix (rows
 * and columns for both, as nvidia-smi topo -m) with its legends, and the rail plan.
 */
#include "strata_topo.h"

#include <string.h>

#define CELL_LEN 32

const char *strata_topo_gpu_cell(const topo_t *topo, int a, int b, char *buf, size_t size)
{
    const topo_gpu_link_t *link = topo_gpu_link(topo, a, b);

    if (a == b) {
        snprintf(buf, size, "X");
    } else if (link->kind == TOPO_LINK_NVLINK && link->count > 0) {
        snprintf(buf, size, "NV%u", link->count);
    } else if (link->kind == TOPO_LINK_NVLINK) {
        snprintf(buf, size, "NV");
    } else if (link->kind == TOPO_LINK_XGMI) {
        snprintf(buf, size, "XGMI");
    } else {
        snprintf(buf, size, "%s", topo_path_name(topo_gpu_gpu_path(topo, a, b)));
    }
    return buf;
}

static int numa_os_index(const topo_t *topo, int numa)
{
    const topo_numa_t *node = topo_numa(topo, numa);

    return node ? node->os_index : -1;
}

static void print_numa_cell(FILE *out, const topo_t *topo, int numa)
{
    if (numa >= 0) {
        fprintf(out, "%-5d", numa_os_index(topo, numa));
    } else {
        fprintf(out, "%-5s", "?");
    }
}

/* An overlay merged in, said plainly. (A file that is only an overlay never reaches here
 * as the topology: topo_open_with_overlay applies it onto discovery.) */
static void print_overlay(const topo_t *topo, FILE *out)
{
    const topo_overlay_report_t *report = topo_overlay(topo);

    if (report == NULL) {
        return;
    }
    fprintf(out, "  Overlay %s: %d PCI device%s without a class, merged by bus id:\n"
                 "    %d GPU%s and %d NIC%s matched, %d device%s not on this machine",
            report->path, report->unclassified, report->unclassified == 1 ? "" : "s",
            report->matched_gpus, report->matched_gpus == 1 ? "" : "s", report->matched_nics,
            report->matched_nics == 1 ? "" : "s", report->unmatched,
            report->unmatched == 1 ? "" : "s");
    if (report->unmatched > 0) {
        fprintf(out, " (first %s)", report->first_unmatched);
    }
    fprintf(out, "\n");
}

static void print_summary(const topo_t *topo, FILE *out)
{
    int rdma = 0;

    for (int n = 0; n < topo_num_nics(topo); ++n) {
        rdma += topo_nic_is_rdma(topo_nic(topo, n));
    }
    fprintf(out, "Topology: %s (%s)\n", topo_description(topo), topo_source_name(topo_source(topo)));
    fprintf(out, "  %d GPU%s, %d NIC%s (%d RDMA, %d Ethernet), %d NUMA node%s, %d NVSwitch%s\n",
            topo_num_gpus(topo), topo_num_gpus(topo) == 1 ? "" : "s", topo_num_nics(topo),
            topo_num_nics(topo) == 1 ? "" : "s", rdma, topo_num_nics(topo) - rdma,
            topo_num_numa(topo), topo_num_numa(topo) == 1 ? "" : "s",
            topo_num_nvswitches(topo), topo_num_nvswitches(topo) == 1 ? "" : "es");
    print_overlay(topo, out);
    if (topo_num_gpus(topo) == 0) {
        fprintf(out, "  No GPU found: the intra-node tier runs on the host device backend.\n");
    }
    if (topo_num_nics(topo) == 0) {
        fprintf(out, "  No network device found: only ranks on this machine can talk.\n");
    } else if (rdma == 0) {
        fprintf(out, "  No RDMA NIC found: the inter-node tier runs over TCP.\n");
    }
}

static void print_numa(const topo_t *topo, FILE *out)
{
    fprintf(out, "\nNUMA nodes\n  %-5s %-24s %s\n", "node", "CPUs", "memory");
    for (int i = 0; i < topo_num_numa(topo); ++i) {
        const topo_numa_t *node = topo_numa(topo, i);
        char memory[32] = "?";

        if (node->memory_bytes) {
            snprintf(memory, sizeof(memory), "%.1f GiB", (double)node->memory_bytes / (1u << 30));
        }
        fprintf(out, "  %-5d %-24s %s\n", node->os_index, node->cpus[0] ? node->cpus : "?", memory);
    }
}

static void print_gpus(const topo_t *topo, FILE *out)
{
    char index[16], dev[16];

    if (topo_num_gpus(topo) == 0) {
        return;
    }
    fprintf(out, "\nGPUs\n  %-6s %-13s %-7s %-24s %-5s %-5s %s\n", "", "bus id", "vendor",
            "model", "NUMA", "dev", "PCIe");
    for (int g = 0; g < topo_num_gpus(topo); ++g) {
        const topo_gpu_t *gpu = topo_gpu(topo, g);
        char pcie[24] = "?";
        int device = (gpu->cuda_index >= 0) ? gpu->cuda_index : gpu->hip_index;

        snprintf(index, sizeof(index), "GPU%d", g);
        snprintf(dev, sizeof(dev), "%d", device);
        if (gpu->pcie_gbps > 0) {
            snprintf(pcie, sizeof(pcie), "%.1f GB/s", gpu->pcie_gbps);
        }
        fprintf(out, "  %-6s %-13s %-7s %-24.24s ", index, gpu->busid,
                topo_vendor_name(gpu->vendor), gpu->model[0] ? gpu->model : "?");
        print_numa_cell(out, topo, gpu->numa);
        fprintf(out, " %-5s %s\n", device >= 0 ? dev : "?", pcie);
    }
}

static void print_nics(const topo_t *topo, FILE *out)
{
    char index[16], speed[24];

    if (topo_num_nics(topo) == 0) {
        return;
    }
    fprintf(out, "\nNICs\n  %-6s %-12s %-13s %-9s %-5s %-10s %s\n", "", "name", "bus id", "kind",
            "NUMA", "speed", "port");
    for (int n = 0; n < topo_num_nics(topo); ++n) {
        const topo_nic_t *nic = topo_nic(topo, n);

        snprintf(index, sizeof(index), "NIC%d", n);
        snprintf(speed, sizeof(speed), "?");
        if (nic->speed_mbps) {
            snprintf(speed, sizeof(speed), "%g Gb/s", (double)nic->speed_mbps / 1000.0);
        }
        fprintf(out, "  %-6s %-12s %-13s %-9s ", index, nic->name[0] ? nic->name : "-",
                nic->busid[0] ? nic->busid : "-", topo_nic_kind_name(nic->kind));
        print_numa_cell(out, topo, nic->numa);
        fprintf(out, " %-10s %s\n", speed, topo_port_state_name(nic->port_state));
    }
}

static bool any_cpu_nvlink(const topo_t *topo)
{
    for (int g = 0; g < topo_num_gpus(topo); ++g) {
        if (topo_gpu(topo, g)->cpu_link.kind != TOPO_LINK_NONE) {
            return true;
        }
    }
    return false;
}

const char *strata_topo_cpu_cell(const topo_t *topo, int gpu, char *buf, size_t size)
{
    const topo_gpu_link_t *link = &topo_gpu(topo, gpu)->cpu_link;

    if (link->kind == TOPO_LINK_NONE) {
        snprintf(buf, size, "-");
    } else if (link->count > 0) {
        snprintf(buf, size, "NV%u", link->count);
    } else {
        snprintf(buf, size, "NV");
    }
    return buf;
}

static void print_matrix_header(const topo_t *topo, bool cpu_column, FILE *out)
{
    char cell[CELL_LEN];

    fprintf(out, "\nGPU topology\n%-7s", "");
    for (int g = 0; g < topo_num_gpus(topo); ++g) {
        snprintf(cell, sizeof(cell), "GPU%d", g);
        fprintf(out, " %-5s", cell);
    }
    for (int n = 0; n < topo_num_nics(topo); ++n) {
        snprintf(cell, sizeof(cell), "NIC%d", n);
        fprintf(out, " %-5s", cell);
    }
    if (cpu_column) {
        fprintf(out, " %-5s", "CPU");
    }
    fprintf(out, " %-20s %s\n", "CPU affinity", "NUMA");
}

static void print_affinity(const topo_t *topo, int numa, FILE *out)
{
    const topo_numa_t *node = topo_numa(topo, numa);

    fprintf(out, " %-20s ", (node && node->cpus[0]) ? node->cpus : "?");
    print_numa_cell(out, topo, numa);
    fprintf(out, "\n");
}

static void print_gpu_row(const topo_t *topo, int a, bool cpu_column, FILE *out)
{
    char cell[CELL_LEN];

    snprintf(cell, sizeof(cell), "GPU%d", a);
    fprintf(out, "  %-5s", cell);
    for (int b = 0; b < topo_num_gpus(topo); ++b) {
        fprintf(out, " %-5s", strata_topo_gpu_cell(topo, a, b, cell, sizeof(cell)));
    }
    for (int n = 0; n < topo_num_nics(topo); ++n) {
        fprintf(out, " %-5s", topo_path_name(topo_gpu_nic_path(topo, a, n)));
    }
    if (cpu_column) {
        fprintf(out, " %-5s", strata_topo_cpu_cell(topo, a, cell, sizeof(cell)));
    }
    print_affinity(topo, topo_gpu(topo, a)->numa, out);
}

static void print_nic_row(const topo_t *topo, int nic, bool cpu_column, FILE *out)
{
    char cell[CELL_LEN];

    snprintf(cell, sizeof(cell), "NIC%d", nic);
    fprintf(out, "  %-5s", cell);
    for (int g = 0; g < topo_num_gpus(topo); ++g) {
        fprintf(out, " %-5s", topo_path_name(topo_gpu_nic_path(topo, g, nic)));
    }
    for (int n = 0; n < topo_num_nics(topo); ++n) {
        fprintf(out, " %-5s", topo_path_name(topo_nic_nic_path(topo, nic, n)));
    }
    if (cpu_column) {
        fprintf(out, " %-5s", "-");
    }
    print_affinity(topo, topo_nic(topo, nic)->numa, out);
}

static void print_legend(const topo_t *topo, bool cpu_column, FILE *out)
{
    fprintf(out,
            "\nLegend:\n"
            "  X    = self\n"
            "  SYS  = through the interconnect between NUMA nodes (QPI/UPI, Infinity Fabric)\n"
            "  NODE = through PCIe and between PCIe host bridges of one NUMA node\n"
            "  PHB  = through a PCIe host bridge (typically the CPU)\n"
            "  PXB  = through several PCIe bridges, without a host bridge\n"
            "  PIX  = through at most one PCIe bridge or switch\n"
            "  NV#  = NVLink with # links (through NVSwitch when the machine has them;\n"
            "         NV alone when only the bandwidth is known)\n"
            "  XGMI = AMD Infinity Fabric link\n");
    if (cpu_column) {
        fprintf(out, "  CPU  = the GPU's own link to its CPU socket: NV# over NVLink (IBM POWER),\n"
                     "         - over PCIe only\n");
    }
    if (topo_num_nics(topo) == 0) {
        return;
    }
    fprintf(out, "\nNIC Legend:\n\n");
    for (int n = 0; n < topo_num_nics(topo); ++n) {
        const topo_nic_t *nic = topo_nic(topo, n);
        const char *name = nic->name[0] ? nic->name : nic->busid;

        fprintf(out, "  NIC%d: %s\n", n, name[0] ? name : "?");
    }
}

/* GPU and NIC rows, as nvidia-smi topo -m prints them, and the legends. */
static void print_matrix(const topo_t *topo, FILE *out)
{
    bool cpu_column = any_cpu_nvlink(topo);

    if (topo_num_gpus(topo) + topo_num_nics(topo) == 0) {
        return;
    }
    print_matrix_header(topo, cpu_column, out);
    for (int g = 0; g < topo_num_gpus(topo); ++g) {
        print_gpu_row(topo, g, cpu_column, out);
    }
    for (int n = 0; n < topo_num_nics(topo); ++n) {
        print_nic_row(topo, n, cpu_column, out);
    }
    print_legend(topo, cpu_column, out);
}

/* "NIC3" or "NIC3 mlx5_3" */
static const char *nic_name(const topo_t *topo, int nic, char *buf, size_t size)
{
    const topo_nic_t *n = topo_nic(topo, nic);

    snprintf(buf, size, "NIC%d%s%s", nic, n->name[0] ? " " : "", n->name);
    return buf;
}

static void print_rails(const topo_t *topo, const topo_rail_plan_t *plan, FILE *out)
{
    char label[TOPO_NAME_LEN + 16];
    const int max_fallback = 3;

    if (plan->num_gpus == 0 || topo_num_nics(topo) == 0) {
        return;
    }
    fprintf(out, "\nRail plan (NICs each GPU drives; then the next choices if one fails)\n");
    for (int g = 0; g < plan->num_gpus; ++g) {
        const topo_rail_t *rail = &plan->rails[g];

        fprintf(out, "  GPU%-3d ->", g);
        for (int i = 0; i < rail->num_rails; ++i) {
            fprintf(out, "%s %s (%s, %d hops)", i ? "," : "",
                    nic_name(topo, rail->nics[i], label, sizeof(label)),
                    topo_path_name(topo_gpu_nic_path(topo, g, rail->nics[i])),
                    topo_gpu_nic_hops(topo, g, rail->nics[i]));
        }
        if (rail->num_nics > rail->num_rails) {
            fprintf(out, "    then");
        }
        for (int i = rail->num_rails; i < rail->num_nics && i < rail->num_rails + max_fallback; ++i) {
            fprintf(out, " NIC%d", rail->nics[i]);
        }
        if (rail->num_nics > rail->num_rails + max_fallback) {
            fprintf(out, " ...");
        }
        fprintf(out, "\n");
    }
}

void strata_topo_print_table(const topo_t *topo, const topo_rail_plan_t *plan, FILE *out)
{
    print_summary(topo, out);
    print_numa(topo, out);
    print_gpus(topo, out);
    print_nics(topo, out);
    print_matrix(topo, out);
    print_rails(topo, plan, out);
}
