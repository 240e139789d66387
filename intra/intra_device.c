/*
 * The table of device backends compiled into this build: an explicit table, as for the
 * transports, not backends registering themselves from constructors.
 */
#include "intra.h"
#include "host/host_device.h"
#ifdef STRATA_HAVE_CUDA
#include "cuda/cuda_device.h"
#endif
#ifdef STRATA_HAVE_HIP
#include "hip/hip_device.h"
#endif
#include "util/util.h"

#include <string.h>

static const intra_device_ops_t *const intra_devices[] = {
    &host_device_ops,
#ifdef STRATA_HAVE_CUDA
    &cuda_device_ops,
#endif
#ifdef STRATA_HAVE_HIP
    &hip_device_ops,
#endif
};

size_t intra_device_count(void)
{
    return UTIL_ARRAY_SIZE(intra_devices);
}

const intra_device_ops_t *intra_device_get(size_t index)
{
    return (index < UTIL_ARRAY_SIZE(intra_devices)) ? intra_devices[index] : NULL;
}

const intra_device_ops_t *intra_device_find(const char *name)
{
    for (size_t i = 0; name != NULL && i < UTIL_ARRAY_SIZE(intra_devices); ++i) {
        if (strcmp(intra_devices[i]->name, name) == 0) {
            return intra_devices[i];
        }
    }
    return NULL;
}
