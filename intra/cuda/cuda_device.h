/*
 * The CUDA device backend: device memory, IPC-shared heap regions, streams and the MoE
 * kernels through the CUDA runtime.
 */
#ifndef STRATA_INTRA_CUDA_DEVICE_H
#define STRATA_INTRA_CUDA_DEVICE_H

#include "intra/intra.h"

extern const intra_device_ops_t cuda_device_ops;

#endif
