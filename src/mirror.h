/* Host planes mirrored per (engine, layer) in device memory. */
#ifndef MEMRA_MIRROR_H
#define MEMRA_MIRROR_H

#include "engine.h"

/* Layer il's n_planes planes of n_expert floats, back to back in one device
 * buffer, uploaded on `s` if missing or changed and ordered before work on
 * `s` (an event wait for another stream until the upload is seen done). A
 * hit on the upload's stream makes no driver call. Under capture a miss is
 * MEMRA_ERR_CAPTURE: nothing is allocated or copied. The buffer keeps its
 * address while (n_expert, n_planes) do. Caller holds the context. */
memra_status memra_mirror_get(memra_engine *eng, const char *fn, int il, uint32_t n_expert,
                              const float *const *planes, int n_planes, CUstream s,
                              CUdeviceptr *dev);

/* Plane k of a mirror of n_expert-float planes. */
static inline CUdeviceptr memra_mirror_plane(CUdeviceptr dev, uint32_t n_expert, int k)
{
    return dev + (uint64_t)k * n_expert * sizeof(float);
}

/* il in [0, MEMRA_MAX_LAYERS), else MEMRA_ERR_INVALID_ARG naming it. */
memra_status memra_check_layer(const char *fn, int il);

#endif /* MEMRA_MIRROR_H */
