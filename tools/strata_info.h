/*
 * strata-info's parts beside its main: the MoE memory estimate (strata_info_moe.c).
 */
#ifndef STRATA_TOOLS_STRATA_INFO_H
#define STRATA_TOOLS_STRATA_INFO_H

#include <stdio.h>

/** The usage lines of --moe-memory. */
void info_moe_memory_usage(FILE *out);
/** strata-info --moe-memory ...: argv[0] is "--moe-memory". 0 printed, 1 refused, 2 usage. */
int  info_moe_memory(int argc, char **argv);

#endif
