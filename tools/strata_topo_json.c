/*
 * strata-topo --json: the topology as a JSON document (layout in docs/strata-topo.md).
 */
#include "strata_topo.h"

#include <jansson.h>

/* json_object_set_new that remembers a failure instead of checking every call. */
static void put(json_t *obj, const char *key, json_t *value, bool *ok)
{
    if (value == NULL || json_object_set_new(obj, key, value) != 0) {
        *ok = false;
    }
}

static void append(json_t *array, json_t *value, bool *ok)
{
    if (value == NULL || json_array_append_new(array, value) != 0) {
        *ok = false;
    }
}

static json_t *hex16(unsigned value)
{
    char buf[8];

    snprintf(buf, sizeof(buf), "0x%04x", value);
    return json_string(buf);
}

static json_t *numa_json(const topo_t *topo, bool *ok)
{
    json_t *array = json_array();

    for (int i = 0; array && i < topo_num_numa(topo); ++i) {
        const topo_numa_t *node = topo_numa(topo, i);
        json_t *obj = json_object();

        if (obj != NULL) {
            put(obj, "os_index", json_integer(node->os_index), ok);
            put(obj, "cpus", json_string(node->cpus), ok);
            put(obj, "memory_bytes", json_integer((json_int_t)node->memory_bytes), ok);
        }
        append(array, obj, ok);
    }
    return array;
}

static json_t *numa_ref(const topo_t *topo, int numa)
{
    const topo_numa_t *node = topo_numa(topo, numa);

    return node ? json_integer(node->os_index) : json_null();
}

/* A GPU's NVLink to its CPU socket (IBM POWER), null when it reaches the CPU over PCIe. */
static json_t *cpu_link_json(const topo_t *topo, const topo_gpu_t *gpu, bool *ok)
{
    json_t *obj;

    if (gpu->cpu_link.kind == TOPO_LINK_NONE) {
        return json_null();
    }
    obj = json_object();
    if (obj != NULL) {
        put(obj, "kind", json_string(topo_link_kind_name(gpu->cpu_link.kind)), ok);
        put(obj, "count", json_integer(gpu->cpu_link.count), ok);
        put(obj, "gbps", json_real(gpu->cpu_link.gbps), ok);
        put(obj, "numa", numa_ref(topo, gpu->cpu_link_numa), ok);
    }
    return obj;
}

static json_t *gpus_json(const topo_t *topo, bool *ok)
{
    json_t *array = json_array();

    for (int g = 0; array && g < topo_num_gpus(topo); ++g) {
        const topo_gpu_t *gpu = topo_gpu(topo, g);
        json_t *obj = json_object();

        if (obj != NULL) {
            put(obj, "index", json_integer(g), ok);
            put(obj, "busid", json_string(gpu->busid), ok);
            put(obj, "vendor", json_string(topo_vendor_name(gpu->vendor)), ok);
            put(obj, "vendor_id", hex16(gpu->vendor_id), ok);
            put(obj, "device_id", hex16(gpu->device_id), ok);
            put(obj, "model", json_string(gpu->model), ok);
            put(obj, "numa", numa_ref(topo, gpu->numa), ok);
            put(obj, "cuda_index", gpu->cuda_index >= 0 ? json_integer(gpu->cuda_index) : json_null(), ok);
            put(obj, "hip_index", gpu->hip_index >= 0 ? json_integer(gpu->hip_index) : json_null(), ok);
            put(obj, "pcie_gbps", json_real(gpu->pcie_gbps), ok);
            put(obj, "cpu_link", cpu_link_json(topo, gpu, ok), ok);
        }
        append(array, obj, ok);
    }
    return array;
}

static json_t *nics_json(const topo_t *topo, bool *ok)
{
    json_t *array = json_array();

    for (int n = 0; array && n < topo_num_nics(topo); ++n) {
        const topo_nic_t *nic = topo_nic(topo, n);
        json_t *obj = json_object();

        if (obj != NULL) {
            put(obj, "index", json_integer(n), ok);
            put(obj, "name", json_string(nic->name), ok);
            put(obj, "busid", json_string(nic->busid), ok);
            put(obj, "kind", json_string(topo_nic_kind_name(nic->kind)), ok);
            put(obj, "rdma", json_boolean(topo_nic_is_rdma(nic)), ok);
            put(obj, "numa", numa_ref(topo, nic->numa), ok);
            put(obj, "speed_mbps", json_integer((json_int_t)nic->speed_mbps), ok);
            put(obj, "port_state", json_string(topo_port_state_name(nic->port_state)), ok);
        }
        append(array, obj, ok);
    }
    return array;
}

static json_t *links_json(const topo_t *topo, bool *ok)
{
    json_t *array = json_array();

    for (int a = 0; array && a < topo_num_gpus(topo); ++a) {
        for (int b = a + 1; b < topo_num_gpus(topo); ++b) {
            const topo_gpu_link_t *link = topo_gpu_link(topo, a, b);
            json_t *obj;

            if (link->kind == TOPO_LINK_NONE) {
                continue;
            }
            obj = json_object();
            if (obj != NULL) {
                put(obj, "gpus", json_pack("[ii]", a, b), ok);
                put(obj, "kind", json_string(topo_link_kind_name(link->kind)), ok);
                put(obj, "count", json_integer(link->count), ok);
                put(obj, "gbps", json_real(link->gbps), ok);
                put(obj, "via_switch", json_boolean(link->via_switch), ok);
            }
            append(array, obj, ok);
        }
    }
    return array;
}

typedef enum matrix_kind {
    MATRIX_GPU_CELL, /* GPU×GPU as the table shows it: NV#, XGMI or the PCIe class */
    MATRIX_GPU_PCIE, /* GPU×GPU PCIe path class, links aside */
    MATRIX_NIC_PCIE, /* GPU×NIC PCIe path class */
    MATRIX_NIC_HOPS, /* GPU×NIC PCIe hops */
    MATRIX_NIC_NIC   /* NIC×NIC PCIe path class */
} matrix_kind_t;

static json_t *matrix_cell(const topo_t *topo, matrix_kind_t kind, int i, int j)
{
    char cell[32];

    switch (kind) {
    case MATRIX_GPU_CELL:
        return json_string(strata_topo_gpu_cell(topo, i, j, cell, sizeof(cell)));
    case MATRIX_GPU_PCIE: return json_string(topo_path_name(topo_gpu_gpu_path(topo, i, j)));
    case MATRIX_NIC_PCIE: return json_string(topo_path_name(topo_gpu_nic_path(topo, i, j)));
    case MATRIX_NIC_HOPS: return json_integer(topo_gpu_nic_hops(topo, i, j));
    case MATRIX_NIC_NIC:  return json_string(topo_path_name(topo_nic_nic_path(topo, i, j)));
    }
    return json_null();
}

static json_t *matrix_json(const topo_t *topo, matrix_kind_t kind, bool *ok)
{
    bool gpu_cols = (kind == MATRIX_GPU_CELL || kind == MATRIX_GPU_PCIE);
    int rows = (kind == MATRIX_NIC_NIC) ? topo_num_nics(topo) : topo_num_gpus(topo);
    int cols = gpu_cols ? topo_num_gpus(topo) : topo_num_nics(topo);
    json_t *array = json_array(), *row;

    for (int i = 0; array && i < rows; ++i) {
        row = json_array();
        for (int j = 0; row && j < cols; ++j) {
            append(row, matrix_cell(topo, kind, i, j), ok);
        }
        append(array, row, ok);
    }
    return array;
}

static json_t *rails_json(const topo_rail_plan_t *plan, bool *ok)
{
    json_t *array = json_array(), *obj, *rails, *fallback;

    for (int g = 0; array && g < plan->num_gpus; ++g) {
        const topo_rail_t *rail = &plan->rails[g];

        obj      = json_object();
        rails    = json_array();
        fallback = json_array();
        for (int i = 0; rails && fallback && i < rail->num_nics; ++i) {
            append(i < rail->num_rails ? rails : fallback, json_integer(rail->nics[i]), ok);
        }
        if (obj != NULL) {
            put(obj, "gpu", json_integer(rail->gpu), ok);
            put(obj, "nics", rails, ok);
            put(obj, "fallback", fallback, ok);
        } else {
            json_decref(rails);
            json_decref(fallback);
        }
        append(array, obj, ok);
    }
    return array;
}

/* The overlay merged in (null when none); a file that is only an overlay says so too. */
static json_t *overlay_json(const topo_t *topo, bool *ok)
{
    const topo_overlay_report_t *report = topo_overlay(topo);
    json_t *obj;

    if (report == NULL) {
        return json_null();
    }
    obj = json_object();
    if (obj != NULL) {
        put(obj, "path", json_string(report->path), ok);
        put(obj, "unclassified_pci_devices", json_integer(report->unclassified), ok);
        put(obj, "matched_gpus", json_integer(report->matched_gpus), ok);
        put(obj, "matched_nics", json_integer(report->matched_nics), ok);
        put(obj, "unmatched", json_integer(report->unmatched), ok);
    }
    return obj;
}

strata_status_t strata_topo_print_json(const topo_t *topo, const topo_rail_plan_t *plan,
                                       FILE *out)
{
    json_t *doc = json_object();
    bool ok = (doc != NULL);
    int rc;

    if (!ok) {
        return STRATA_ERR_NO_MEMORY;
    }
    put(doc, "strata_topo_version", json_integer(STRATA_TOPO_JSON_VERSION), &ok);
    put(doc, "source", json_string(topo_source_name(topo_source(topo))), &ok);
    put(doc, "description", json_string(topo_description(topo)), &ok);
    put(doc, "unclassified_pci_devices", json_integer(topo_num_unclassified_pci(topo)), &ok);
    put(doc, "overlay", overlay_json(topo, &ok), &ok);
    put(doc, "numa", numa_json(topo, &ok), &ok);
    put(doc, "gpus", gpus_json(topo, &ok), &ok);
    put(doc, "nics", nics_json(topo, &ok), &ok);
    put(doc, "nvswitches", json_integer(topo_num_nvswitches(topo)), &ok);
    put(doc, "gpu_links", links_json(topo, &ok), &ok);
    put(doc, "gpu_gpu", matrix_json(topo, MATRIX_GPU_CELL, &ok), &ok);
    put(doc, "gpu_gpu_pcie", matrix_json(topo, MATRIX_GPU_PCIE, &ok), &ok);
    put(doc, "gpu_nic", matrix_json(topo, MATRIX_NIC_PCIE, &ok), &ok);
    put(doc, "gpu_nic_hops", matrix_json(topo, MATRIX_NIC_HOPS, &ok), &ok);
    put(doc, "nic_nic", matrix_json(topo, MATRIX_NIC_NIC, &ok), &ok);
    put(doc, "rails", rails_json(plan, &ok), &ok);
    if (!ok) {
        json_decref(doc);
        return STRATA_ERR_NO_MEMORY;
    }
    rc = json_dumpf(doc, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    json_decref(doc);
    if (rc != 0 || fputc('\n', out) == EOF) {
        return STRATA_ERR_IO;
    }
    return STRATA_OK;
}
