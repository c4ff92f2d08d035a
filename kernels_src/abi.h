/* The facts the kernels and the host code share, defined once: first in
 * every module's source (kernels_src/meson.build) and included by the host
 * (src/ and tests/). Plain preprocessor only: this text is compiled by NVRTC
 * and by the host compiler alike. */
#ifndef MEMRA_ABI_H
#define MEMRA_ABI_H

/* The engine's fault word, 5 x u32, and each readback area behind it:
 * bad-expert count, non-finite count, lowest faulting pair (atomicMin, so
 * the result is the same whatever order the threads run in), the
 * not-local count (expert parallelism) and the padded count (a padded
 * batch's padding rows): those two are not faults, so they never touch the
 * lowest pair. */
#define MEMRA_FAULT_WORDS 5
#define MEMRA_FAULT_BAD_EXPERT 0
#define MEMRA_FAULT_NONFINITE 1
#define MEMRA_FAULT_FIRST_PAIR 2
#define MEMRA_FAULT_NOT_LOCAL 3
#define MEMRA_FAULT_PADDED 4

/* The routing kernels' launch flags (memra_route_args.flags). */
#define MEMRA_ROUTE_FLAG_SIGMOID 1u
#define MEMRA_ROUTE_FLAG_BF16 2u
#define MEMRA_ROUTE_FLAG_RENORM 4u
#define MEMRA_ROUTE_FLAG_F16 8u
#define MEMRA_ROUTE_FLAG_BIAS_BF16 16u
#define MEMRA_ROUTE_FLAG_GROUP_MAX 32u
#define MEMRA_ROUTE_FLAG_NO_TABLES 64u
#define MEMRA_ROUTE_FLAG_SHARED_SUM 128u /* shared_weight carries SGLang's divisor */
#define MEMRA_ROUTE_FLAG_NREAL_I64 256u  /* n_real points at an int64 */
#define MEMRA_ROUTE_FLAG_FEW_LANES 512u  /* the team kernel's throughput form (below) */
/* A launch that lays its pairs out itself (memra_layout_params.ticket
 * set): every one that does, on either kernel. Not a flag of the call for
 * specialisation: a module built for a spec with it adds the layout (the
 * team kernels' memra_route_layout, the block kernel's one-token and
 * bitmap paths), which, compiled in, slows the routing of every other
 * launch. Every build of the block kernel also holds the general layout,
 * testing the ticket at run time (route_block.cu says why), which a
 * generic build's launches take. */
#define MEMRA_ROUTE_FLAG_LAYOUT 1024u
/* The layer has a bias (a host one mirrored, or the caller's device one).
 * The generic kernels test the pointer; a spec's build without it takes
 * the bias as absent at compile time, so a softmax family's kernel holds
 * no biased path (its keys, its sums' late division). */
#define MEMRA_ROUTE_FLAG_BIAS 2048u
/* The flags a call chooses (tables or not, the real-token count's type,
 * the team's form by batch size); the others a layer's spec fixes, so a
 * routing module compiled for one spec (MEMRA_SPEC_FLAGS) takes them as
 * constants. */
#define MEMRA_ROUTE_FLAGS_OF_CALL                                                                  \
    (MEMRA_ROUTE_FLAG_NO_TABLES | MEMRA_ROUTE_FLAG_NREAL_I64 | MEMRA_ROUTE_FLAG_FEW_LANES)

/* The most experts a routing kernel holds per token (its shared arrays);
 * memra.h's MEMRA_ROUTE_MAX_EXPERT is held to it at compile time
 * (src/route/route_spec.c). */
#define MEMRA_ABI_ROUTE_MAX_EXPERT 1024
/* Threads per block, the launcher's and each kernel's __launch_bounds__
 * alike: a build that would need more registers than a block of that size
 * can have then fails to compile (or spills), never to launch. The table
 * kernel: MEMRA_VROWS_BLOCK; the routing team kernels:
 * MEMRA_ROUTE_TEAM_THREADS; the routing block kernel: a thread per expert
 * in whole warps, at most MEMRA_ABI_ROUTE_MAX_EXPERT (the layout kernels'
 * are in layout_params.h). */
#define MEMRA_VROWS_BLOCK 256u
#define MEMRA_ROUTE_TEAM_THREADS 128u
/* The team kernels' fused layout: pairs a thread in the bitmap path
 * (memra_layout_tokens; more would raise their register counts, which
 * their occupancy at prefill sizes pays for: 8 already lifts
 * route_warp4's), and so the most pairs a team launch lays out itself
 * (the launcher's bound, src/route/route.c): past them its last block's
 * four warps would walk the pairs in order. */
#define MEMRA_ROUTE_TEAM_LAYOUT_PER 4u
#define MEMRA_ROUTE_TEAM_LAID_MAX_PAIRS (MEMRA_ROUTE_TEAM_THREADS * MEMRA_ROUTE_TEAM_LAYOUT_PER)

/* The team kernel's lanes per token (kernels_src/route_warp.cu; the
 * launcher's grid, src/route/route_abi.h): a warp past 32 experts; else P,
 * the power of two at or above n_expert, a lane an expert. With
 * MEMRA_ROUTE_FLAG_FEW_LANES (the launcher's choice for prefill-sized
 * batches, where throughput counts), a token of one group takes
 * P / MEMRA_ROUTE_TEAM_V lanes of up to MEMRA_ROUTE_TEAM_V experts each,
 * but at least top_k's power of two (the winners' rows are the team's):
 * Mixtral, two lanes of four, as vLLM's topk_softmax lays it out. A decode
 * step keeps a lane an expert: one exp and one division a lane is the
 * shorter chain. top_k <= n_expert <= 32 where it matters. */
#define MEMRA_ROUTE_TEAM_V 4u
#define MEMRA_ABI_POW2_32(n)                                                                       \
    ((n) <= 1u ? 1u : (n) <= 2u ? 2u : (n) <= 4u ? 4u : (n) <= 8u ? 8u : (n) <= 16u ? 16u : 32u)
#define MEMRA_ROUTE_TEAM_LANES(n_expert, n_group, top_k, flags)                                    \
    ((n_expert) > 32u                                           ? 32u                              \
     : !((flags)&MEMRA_ROUTE_FLAG_FEW_LANES) || (n_group) != 1u ? MEMRA_ABI_POW2_32(n_expert)      \
     : MEMRA_ABI_POW2_32(n_expert) / MEMRA_ROUTE_TEAM_V < MEMRA_ABI_POW2_32(top_k)                 \
         ? MEMRA_ABI_POW2_32(top_k)                                                                \
         : MEMRA_ABI_POW2_32(n_expert) / MEMRA_ROUTE_TEAM_V)

/* The most experts a layout holds: routing's, and its shared experts
 * (memra.h's MEMRA_LAYOUT_MAX_EXPERT is held to it in src/layout/layout_spec.c). */
#define MEMRA_ABI_LAYOUT_MAX_EXPERT (MEMRA_ABI_ROUTE_MAX_EXPERT + 32)

#endif /* MEMRA_ABI_H */
