/*
 * strata-topo's two renderings of a topology: the human table and the JSON document.
 */
#ifndef STRATA_TOOLS_STRATA_TOPO_H
#define STRATA_TOOLS_STRATA_TOPO_H

#include "topo/topo.h"

#include <stdio.h>

/** Version of the JSON document's layout (docs/strata-topo.md). */
#define STRATA_TOPO_JSON_VERSION 1

void strata_topo_print_table(const topo_t *topo, const topo_rail_plan_t *plan, FILE *out);

/** Write the JSON document; STRATA_ERR_NO_MEMORY or STRATA_ERR_IO on failure. */
strata_status_t strata_topo_print_json(const topo_t *topo, const topo_rail_plan_t *plan,
                                       FILE *out);

/** "NV12", "XGMI" or the PCIe path class between two GPUs, as nvidia-smi topo -m shows. */
const char *strata_topo_gpu_cell(const topo_t *topo, int a, int b, char *buf, size_t size);

/** "NV3" for a GPU's NVLink to its CPU socket (IBM POWER), "-" for PCIe only. */
const char *strata_topo_cpu_cell(const topo_t *topo, int gpu, char *buf, size_t size);

#endif
