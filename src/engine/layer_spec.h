/* The layer index every per-layer call takes: a caller's layers in
 * [0, MEMRA_MAX_LAYERS) (memra.h), and the library's own self-check's in
 * [0, MEMRA_SCRATCH_LAYERS), which no public call can name. The mirror, the
 * layout's per-layer counts and the checks all count on these bounds. */
#ifndef MEMRA_LAYER_SPEC_H
#define MEMRA_LAYER_SPEC_H

#include <memra/memra.h>

#include "base/error.h"

#define MEMRA_SCRATCH_LAYERS 16

/* il in range, else MEMRA_ERR_INVALID_ARG naming it. */
static inline memra_status memra_check_layer(const char *fn, int il, int scratch)
{
    const int n = scratch ? MEMRA_SCRATCH_LAYERS : MEMRA_MAX_LAYERS;
    if (il < 0 || il >= n)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: il = %d is outside [0, %d)", fn, il, n);
    return MEMRA_OK;
}

#endif /* MEMRA_LAYER_SPEC_H */
