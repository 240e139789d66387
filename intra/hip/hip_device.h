/*
 * The HIP device backend: device memory, IPC-shared heap regions, streams and the MoE
 * kernels through the HIP runtime.
 */
#ifndef STRATA_INTRA_HIP_DEVICE_H
#define STRATA_INTRA_HIP_DEVICE_H

#include "intra/intra.h"

extern const intra_device_ops_t hip_device_ops;

#endif
