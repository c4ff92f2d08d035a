/* The routing kernels' parameter block, byte for byte as NVRTC lays out the
 * parameters of memra_route_block_kernel and memra_route_warp<M>_kernel
 * (kernels_src/route_common.cuh's MEMRA_ROUTE_PARAMS): each at its natural
 * alignment, in order. */
#ifndef MEMRA_ROUTE_ABI_H
#define MEMRA_ROUTE_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "abi.h"
#include "layout_params.h"

typedef struct memra_route_args {
    uint64_t logits, bias, mg, mu, md;
    uint64_t pg, pu, pd, sg, su, sd;
    uint64_t sel, selw, ptrs, scl, faults, map, n_real;
    uint32_t n_tokens, n_expert, top_k, n_group, topk_group, flags, n_local, n_shared;
    float scale, shared_weight; /* shared_weight: SGLang's divisor under FLAG_SHARED_SUM */
    memra_layout_params lp;     /* the fused layout: lp.ticket 0 for none */
} memra_route_args;

_Static_assert(sizeof(memra_layout_params) == 112, "the layout's parameters are 112 bytes");
_Static_assert(sizeof(memra_route_args) == 296, "route parameter block is 296 bytes");
_Static_assert(offsetof(memra_route_args, n_tokens) == 144, "n_tokens at 144");
_Static_assert(offsetof(memra_route_args, scale) == 176, "scale at 176");
_Static_assert(offsetof(memra_route_args, lp) == 184, "lp at 184");

#define MEMRA_ROUTE_PARAM_BYTES 296u
#define MEMRA_ROUTE_NPARAMS 29
/* The block kernel: one block per token, one thread per expert (decode). */
/* Teams of lanes (kernels_src/route_warp.cu), one kernel per M, the most
 * experts a lane holds: M = 1 for up to 32 experts, a team of a few lanes
 * per token (abi.h's MEMRA_ROUTE_TEAM_LANES); else a warp per token, up to
 * MEMRA_ROUTE_TEAM_MAX_EXPERT experts (more: the block kernel at every
 * size). For sigmoid scores with M > 1, the screened build. Blocks of
 * MEMRA_ROUTE_TEAM_THREADS (abi.h). */
#define MEMRA_ROUTE_TEAM_MAX_EXPERT 512u

/* The flags are abi.h's MEMRA_ROUTE_FLAG_*. */

/* The most experts a lane of the team kernel for n_expert holds. */
static inline uint32_t memra_route_team_m(uint32_t n_expert)
{
    const uint32_t per = (n_expert + 31u) / 32u;
    return per <= 1u ? 1u : per <= 4u ? 4u : per <= 8u ? 8u : 16u;
}

/* The team kernel's blocks for a launch: its lanes per token are abi.h's
 * rule, the kernel's own, for the launch's flags. */
static inline unsigned memra_route_team_grid(uint32_t n_tokens, uint32_t n_expert, uint32_t n_group,
                                             uint32_t top_k, uint32_t flags)
{
    const uint64_t lanes =
        (uint64_t)n_tokens * MEMRA_ROUTE_TEAM_LANES(n_expert, n_group, top_k, flags);
    return (unsigned)((lanes + MEMRA_ROUTE_TEAM_THREADS - 1) / MEMRA_ROUTE_TEAM_THREADS);
}

/* The block kernel's block: a thread per expert, in whole warps. */
static inline unsigned memra_route_block_threads(uint32_t n_expert)
{
    return (unsigned)((n_expert + 31u) / 32u * 32u);
}

#endif /* MEMRA_ROUTE_ABI_H */
