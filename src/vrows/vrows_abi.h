/* The table kernel's parameter block, byte for byte as NVRTC lays out the
 * parameters of memra_vrows_kernel (kernels_src/vrows.cu): each at its
 * natural alignment, in order. Passed whole through CU_LAUNCH_PARAM_BUFFER_*,
 * so its size is part of the launch and a narrowed field cannot slip by. */
#ifndef MEMRA_VROWS_ABI_H
#define MEMRA_VROWS_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "abi.h"

typedef struct memra_vrows_args {
    uint64_t sel, selw, mg, mu, md;
    uint64_t pg, pu, pd;
    uint64_t sg, su, sd;
    uint32_t n_pairs, n_expert;
    uint64_t ptrs, scl, faults;
    uint64_t map; /* memra_vrows_options: 0, 0, 0 without */
    uint32_t n_local, n_shared;
} memra_vrows_args;

_Static_assert(sizeof(memra_vrows_args) == 136, "kernel parameter block is 136 bytes");
_Static_assert(offsetof(memra_vrows_args, n_pairs) == 88, "n_pairs at 88");
_Static_assert(offsetof(memra_vrows_args, ptrs) == 96, "ptrs at 96");
_Static_assert(offsetof(memra_vrows_args, map) == 120, "map at 120");

#define MEMRA_VROWS_NPARAMS 19

/* One pair per thread. */
static inline unsigned memra_vrows_grid(uint32_t n_pairs)
{
    return (unsigned)((n_pairs + MEMRA_VROWS_BLOCK - 1) / MEMRA_VROWS_BLOCK);
}

#endif /* MEMRA_VROWS_ABI_H */
