/* The expert-sorted layout's kernel parameters (docs/layout-sorted.md), one
 * struct passed by value, shared by the layout kernels (layout.cu) and the
 * routing kernels that lay their own batch out (the fused call), and by the
 * host code that fills it (src/layout/layout.c, src/route/route.c). The same bytes on
 * both sides: every field at its natural alignment, no padding. */
#ifndef MEMRA_LAYOUT_PARAMS_H
#define MEMRA_LAYOUT_PARAMS_H

typedef struct memra_layout_params {
    /* outputs (0: not wanted; sorted_ids 0: no layout at all) */
    unsigned long long sorted_ids, expert_ids, n_post_pad;
    unsigned long long offsets, padded_offsets, counts, load;
    /* the tiles' counts (three-launch path), and the per-layer count the
     * routing launch's blocks share (fused one-launch path) */
    unsigned long long workspace, ticket;
    /* each run's block label: map[e] for e < map_len, n_local + (e - map_len)
     * above (the routing's shared experts); e itself without a map */
    unsigned long long map;
    unsigned int n_expert, block_size, sorted_len, n_blocks;
    unsigned int map_len, n_local, flags, n_tiles;
} memra_layout_params;

/* flags */
#define MEMRA_LAYOUT_FLAG_LOAD_I64 1u /* load is int64 */

/* Pairs per tile of the three-launch path (a block a tile in the count and
 * place launches): the launcher's choice for the batch, a power of two
 * from MIN to MAX (src/layout/layout_spec.c, memra_layout_tile); and the
 * warps that place one. */
#define MEMRA_LAYOUT_TILE_MIN 512u
#define MEMRA_LAYOUT_TILE_MAX 4096u
#define MEMRA_LAYOUT_PLACE_WARPS 4u
/* The one-launch path's tile: up to one, one block lays the batch out;
 * above, a block a tile (layout.cu, memra_layout_tiled). */
#define MEMRA_LAYOUT_SMALL_TILE 512u
/* Tiles' counts the scan loads before it stores any (layout.cu). */
#define MEMRA_LAYOUT_SCAN_BATCH 16u

/* Threads of each kernel's blocks, the launcher's and the kernel's
 * __launch_bounds__: the one-block kernel and the scan use every thread
 * for the fills; count and place one block a tile. */
#define MEMRA_LAYOUT_SMALL_THREADS 512u
#define MEMRA_LAYOUT_SCAN_THREADS 1024u
#define MEMRA_LAYOUT_COUNT_THREADS 256u
#define MEMRA_LAYOUT_PLACE_THREADS (32u * MEMRA_LAYOUT_PLACE_WARPS)

#endif /* MEMRA_LAYOUT_PARAMS_H */
