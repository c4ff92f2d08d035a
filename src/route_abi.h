/* The routing kernels' parameter block, byte for byte as NVRTC lays out the
 * parameters of memra_route_tables / memra_route_topk (kernels_src/route.cu):
 * each at its natural alignment, in order. */
#ifndef MEMRA_ROUTE_ABI_H
#define MEMRA_ROUTE_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef struct memra_route_args {
    uint64_t logits, bias, mg, mu, md;
    uint64_t pg, pu, pd, sg, su, sd;
    uint64_t sel, selw, ptrs, scl, faults;
    uint32_t n_tokens, n_expert, top_k, n_group, topk_group, flags;
    float scale;
} memra_route_args;

_Static_assert(sizeof(memra_route_args) == 160, "route parameter block is 160 bytes");
_Static_assert(offsetof(memra_route_args, n_tokens) == 128, "n_tokens at 128");
_Static_assert(offsetof(memra_route_args, scale) == 152, "scale at 152");

/* The block holds 156 bytes of parameters; its size rounds up to 8. */
#define MEMRA_ROUTE_PARAM_BYTES 156u
#define MEMRA_ROUTE_NPARAMS 23
#define MEMRA_ROUTE_KERNEL "memra_route_tables"
#define MEMRA_ROUTE_TOPK_KERNEL "memra_route_topk"
#define MEMRA_ROUTE_BLOCK 128u /* four warps: four tokens */
#define MEMRA_ROUTE_TOKENS_PER_BLOCK 4u

/* flags */
#define MEMRA_ROUTE_FLAG_SIGMOID 1u
#define MEMRA_ROUTE_FLAG_BF16 2u
#define MEMRA_ROUTE_FLAG_RENORM 4u

static inline unsigned memra_route_grid(uint32_t n_tokens)
{
    return (unsigned)((n_tokens + MEMRA_ROUTE_TOKENS_PER_BLOCK - 1) / MEMRA_ROUTE_TOKENS_PER_BLOCK);
}

#endif /* MEMRA_ROUTE_ABI_H */
