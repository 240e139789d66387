/*
 * The host device backend: "device" memory is host memory and kernels run as threads, so
 * the intra-node algorithms run, and are tested, on machines without a GPU.
 */
#ifndef STRATA_INTRA_HOST_DEVICE_H
#define STRATA_INTRA_HOST_DEVICE_H

#include "intra/intra.h"

extern const intra_device_ops_t host_device_ops;

#endif
