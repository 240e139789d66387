/*
 * Memory placed on a NUMA node: the work rings the proxy polls go on the node of its NIC and
 * CPUs, so that its polling reads stay local. Through the kernel's mbind and get_mempolicy
 * directly (no libnuma).
 */
#ifndef STRATA_UTIL_NUMA_H
#define STRATA_UTIL_NUMA_H

#include <stddef.h>

/** The highest NUMA node index util_numa_alloc places on. */
#define UTIL_NUMA_MAX_NODE 1023

/**
 * size bytes of zeroed, page-aligned anonymous memory, its pages placed on NUMA node `node`
 * (the kernel's index) where the kernel can, else wherever it puts them first (node -1:
 * no preference). NULL where there is no memory. Free with util_numa_free.
 */
void *util_numa_alloc(size_t size, int node);
/** Tolerates NULL. */
void  util_numa_free(void *ptr);
/** The NUMA node (kernel index) of the page holding addr, -1 where the kernel does not say
 *  (the page not touched yet, or no NUMA support). */
int   util_numa_node_of(const void *addr);

#endif
