/* The routing kernels' parameter block, byte for byte as NVRTC lays out the
 * parameters of memra_route_warp_kernel / memra_route_block_kernel
 * (kernels_src/route.cu): each at its natural alignment, in order. */
#ifndef MEMRA_ROUTE_ABI_H
#define MEMRA_ROUTE_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "abi.h"

typedef struct memra_route_args {
    uint64_t logits, bias, mg, mu, md;
    uint64_t pg, pu, pd, sg, su, sd;
    uint64_t sel, selw, ptrs, scl, faults, map;
    uint32_t n_tokens, n_expert, top_k, n_group, topk_group, flags, n_local, n_shared;
    float scale, shared_weight;
} memra_route_args;

_Static_assert(sizeof(memra_route_args) == 176, "route parameter block is 176 bytes");
_Static_assert(offsetof(memra_route_args, n_tokens) == 136, "n_tokens at 136");
_Static_assert(offsetof(memra_route_args, scale) == 168, "scale at 168");

#define MEMRA_ROUTE_PARAM_BYTES 176u
#define MEMRA_ROUTE_NPARAMS 27
/* One warp per token, four tokens per block of 128 threads (prefill). */
#define MEMRA_ROUTE_KERNEL "memra_route_warp_kernel"
#define MEMRA_ROUTE_BLOCK 128u
#define MEMRA_ROUTE_TOKENS_PER_BLOCK 4u
/* One block per token, one thread per expert (decode). */
#define MEMRA_ROUTE_BLOCK_KERNEL "memra_route_block_kernel"

/* The flags are abi.h's MEMRA_ROUTE_FLAG_*. */

static inline unsigned memra_route_grid(uint32_t n_tokens)
{
    return (unsigned)((n_tokens + MEMRA_ROUTE_TOKENS_PER_BLOCK - 1) / MEMRA_ROUTE_TOKENS_PER_BLOCK);
}

/* The block kernel's block: a thread per expert, in whole warps. */
static inline unsigned memra_route_block_threads(uint32_t n_expert)
{
    return (unsigned)((n_expert + 31u) / 32u * 32u);
}

#endif /* MEMRA_ROUTE_ABI_H */
