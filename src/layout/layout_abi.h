/* The layout kernels' parameter block (kernels_src/layout.cu's
 * MEMRA_LAYOUT_KPARAMS), byte for byte as NVRTC lays it out. */
#ifndef MEMRA_LAYOUT_ABI_H
#define MEMRA_LAYOUT_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "abi.h"
#include "layout_params.h"

typedef struct memra_layout_args {
    uint64_t ids;
    uint32_t n_pairs, tile; /* tile: the three-launch path's pairs a tile */
    memra_layout_params lp;
} memra_layout_args;

_Static_assert(sizeof(memra_layout_args) == 128, "layout parameter block is 128 bytes");
_Static_assert(offsetof(memra_layout_args, lp) == 16, "lp at 16");

#define MEMRA_LAYOUT_PARAM_BYTES 128u

#endif /* MEMRA_LAYOUT_ABI_H */
