/* The layout's checks and sizes, shared by its host arm, its device
 * launcher and the fused routing call: each refuses exactly the same. */
#ifndef MEMRA_LAYOUT_SPEC_H
#define MEMRA_LAYOUT_SPEC_H

#include <memra/memra.h>

#include "layout_params.h"

/* Every field of the spec, naming it. */
memra_status memra_layout_spec_check(const char *fn, const memra_layout_spec *spec);

/* vLLM's sizes for n_pairs (memra.h), refusing a batch whose sorted list
 * would not fit int32 indices. */
memra_status memra_layout_geometry(const char *fn, uint32_t n_pairs, const memra_layout_spec *spec,
                                   uint64_t *sorted_len, uint64_t *n_blocks);

/* The three-launch path's pairs a tile for n_pairs (a power of two from
 * MEMRA_LAYOUT_TILE_MIN to _MAX), its tiles, and the workspace bytes it
 * needs (0 for the one-launch path). memra_layout_tile_pairs, when not 0,
 * is the tile of every batch: not exported; the tests and the benchmark
 * set it to try each size. */
extern uint32_t memra_layout_tile_pairs;
uint32_t memra_layout_tile(uint32_t n_pairs);
uint32_t memra_layout_tiles(uint32_t n_pairs);
/* The one-launch path's blocks for n_pairs (up to MEMRA_LAYOUT_ONE_LAUNCH):
 * one up to MEMRA_LAYOUT_SMALL_TILE pairs, a tile each above. */
uint32_t memra_layout_small_grid(uint32_t n_pairs);
uint64_t memra_layout_workspace(uint32_t n_pairs, uint32_t n_expert);

/* The spec, the sizes and every address of a call (ids and out, host or
 * device), before anything is written; `device` also asks for the
 * workspace the size needs. Fills the kernels' parameters (lp.map,
 * map_len and n_local describe the spec's own map; the fused call sets its
 * own). */
memra_status memra_layout_validate(const char *fn, uint64_t ids, uint32_t n_pairs,
                                   const memra_layout_spec *spec, const memra_layout *out,
                                   int device, memra_layout_params *lp);

#endif /* MEMRA_LAYOUT_SPEC_H */
