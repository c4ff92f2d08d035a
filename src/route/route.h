/* The routing device arm's launch choices, shared with the benchmark and
 * the tests (which force each kernel in turn). */
#ifndef MEMRA_ROUTE_H
#define MEMRA_ROUTE_H

#include <stdint.h>

#include <memra/memra.h>

#include "engine/engine.h"
#include "jit/kernels.h"

/* Which routing kernel memra_route_tables launches: by n_tokens and
 * n_expert (AUTO), or always the block-per-token or the team kernel. Not
 * exported: the mock tests and the benchmark set it to compare the two. */
enum {
    MEMRA_ROUTE_VARIANT_AUTO = 0,
    MEMRA_ROUTE_VARIANT_BLOCK = 1,
    MEMRA_ROUTE_VARIANT_WARP = 2,
    MEMRA_ROUTE_VARIANT_WARP_EXACT = 3 /* the team kernel without screening sigmoid scores */
};
extern int memra_route_variant;

/* memra_route_tables with the kernel chosen by `variant` (a
 * MEMRA_ROUTE_VARIANT_*): the self-check runs each kernel in turn. With
 * `scratch`, il names one of the library's own scratch slots (the
 * self-check's), which no public layer index reaches. The faults go to
 * `faults` (MEMRA_FAULT_WORDS words), or to the engine's word when it is 0. */
memra_status memra_route_launch(memra_engine *eng, const char *fn, memra_devptr logits,
                                uint32_t n_tokens, const memra_route_spec *spec, int il,
                                int scratch, memra_devptr faults, const memra_vrows_macros *macros,
                                const memra_vrows_slabs *slabs, memra_devptr sel, memra_devptr selw,
                                memra_devptr ptrs, memra_devptr scl,
                                const memra_layout_spec *layout_spec, const memra_layout *layout,
                                memra_stream stream, int variant);

/* Whether a launch of n_tokens over n_expert takes the block kernel
 * (memra_route_variant honoured), and the kernel a launch of n_tokens takes
 * under `variant`. */
int memra_route_use_block(uint32_t n_tokens, uint32_t n_expert);
/* The most tokens memra's own choice routes with the block kernel for
 * n_expert (0: never; UINT32_MAX: always, past the team kernels' experts). */
uint32_t memra_route_block_max_tokens(uint32_t n_expert);
memra_kernel_id memra_route_kernel(int variant, uint32_t n_tokens, const memra_route_spec *spec);
/* The key of kernel k's build for a checked spec (MEMRA_ROUTE_SPECIALIZE):
 * the spec's counts and the flags a layer fixes, as defines; `laid`: for
 * launches that lay their pairs out (MEMRA_ROUTE_FLAG_LAYOUT), a build of
 * its own (the team kernels' layout, the block kernel's one-token and
 * bitmap paths). */
memra_special_key memra_route_special_key(memra_kernel_id k, const memra_route_spec *spec,
                                          int laid);

/* The kernels' flags (route_abi.h) for a checked spec. */
uint32_t memra_route_flags(const memra_route_spec *spec);
/* The team kernel's throughput form (several experts a lane) pays where
 * the batch fills the card: below, a lane an expert is the shorter chain.
 * Mixtral's node on the H100, spec-compiled (BENCHMARKS.md, twenty-first
 * session), a lane an expert against two lanes of four: 2.25 / 2.97 us at
 * 1,024 tokens, 2.40 / 3.22 at 4,096, 3.55 / 3.43-3.47 at 16,384, 9.97 / 6.13 at
 * 65,536. */
#define MEMRA_ROUTE_FEW_LANES_MIN_TOKENS 16384u
/* The team kernel's form for a batch: MEMRA_ROUTE_FLAG_FEW_LANES (several
 * experts a lane, for throughput) from MEMRA_ROUTE_FEW_LANES_MIN_TOKENS
 * tokens or where `variant` forces the team kernel, else 0 (a lane an
 * expert). The block kernel does not read it. */
uint32_t memra_route_team_form(int variant, uint32_t n_tokens);

#endif /* MEMRA_ROUTE_H */
