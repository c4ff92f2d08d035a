#include "layout_spec.h"

#include <stdint.h>
#include <string.h>

#include "abi.h"
#include "base/error.h"

_Static_assert(MEMRA_LAYOUT_MAX_EXPERT == MEMRA_ABI_LAYOUT_MAX_EXPERT,
               "memra.h's MEMRA_LAYOUT_MAX_EXPERT is the kernels' limit");
/* The public structs' layouts on LP64, which the bindings' copies repeat. */
_Static_assert(sizeof(memra_layout_spec) == 24, "memra_layout_spec is 24 bytes");
_Static_assert(sizeof(memra_layout) == 64, "memra_layout is 64 bytes");

#define MAX_BLOCK_SIZE 65536u

memra_status memra_layout_spec_check(const char *fn, const memra_layout_spec *spec)
{
    if (!spec)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: layout_spec is NULL", fn);
    if (spec->n_expert == 0 || spec->n_expert > MEMRA_LAYOUT_MAX_EXPERT)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: layout_spec->n_expert = %u is outside [1, %d]", fn, spec->n_expert,
                          MEMRA_LAYOUT_MAX_EXPERT);
    if (spec->block_size == 0 || spec->block_size > MAX_BLOCK_SIZE)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: layout_spec->block_size = %u is outside [1, %u]", fn,
                          spec->block_size, MAX_BLOCK_SIZE);
    if (spec->pad_sorted_ids != 0 && spec->pad_sorted_ids != 1)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: layout_spec->pad_sorted_ids = %d is not 0 or 1", fn,
                          spec->pad_sorted_ids);
    if (spec->load_dtype != MEMRA_COUNT_I32 && spec->load_dtype != MEMRA_COUNT_I64)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: layout_spec->load_dtype = %d is not i32 or i64", fn,
                          (int)spec->load_dtype);
    if (spec->expert_map % 4)
        return memra_fail(MEMRA_ERR_MISALIGNED,
                          "%s: layout_spec->expert_map = 0x%llx is not aligned to int32", fn,
                          (unsigned long long)spec->expert_map);
    return MEMRA_OK;
}

memra_status memra_layout_geometry(const char *fn, uint32_t n_pairs, const memra_layout_spec *spec,
                                   uint64_t *sorted_len, uint64_t *n_blocks)
{
    if (n_pairs > MEMRA_MAX_PAIRS)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: n_pairs = %u is above %u", fn, n_pairs,
                          MEMRA_MAX_PAIRS);
    const uint64_t n = n_pairs, E = spec->n_expert, bs = spec->block_size;
    uint64_t len = n + E * (bs - 1);
    if (spec->pad_sorted_ids)
        len = (len + bs - 1) / bs * bs;
    if (n < E && n * bs < len)
        len = n * bs;
    /* Positions and pair indices are int32, as vLLM's. */
    if (len > INT32_MAX)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: n_pairs = %u with block_size = %u and n_expert = %u: the sorted "
                          "list would have %llu entries, more than int32 indices reach",
                          fn, n_pairs, spec->block_size, spec->n_expert, (unsigned long long)len);
    *sorted_len = len;
    *n_blocks = (len + bs - 1) / bs;
    return MEMRA_OK;
}

uint32_t memra_layout_tile_pairs = 0;

/* Tiles enough to give every SM of a large card a block (the count and
 * place launches' parallelism), few enough that the scan, one block that
 * walks each expert's column of tile counts, stays short. */
#define LAYOUT_TARGET_TILES 128u

uint32_t memra_layout_tile(uint32_t n_pairs)
{
    if (memra_layout_tile_pairs)
        return memra_layout_tile_pairs;
    uint32_t tile = MEMRA_LAYOUT_TILE_MIN;
    while (tile < MEMRA_LAYOUT_TILE_MAX && (uint64_t)tile * LAYOUT_TARGET_TILES < n_pairs)
        tile *= 2;
    return tile;
}

uint32_t memra_layout_small_grid(uint32_t n_pairs)
{
    return n_pairs <= MEMRA_LAYOUT_SMALL_TILE
               ? 1u
               : (uint32_t)(((uint64_t)n_pairs + MEMRA_LAYOUT_SMALL_TILE - 1) /
                            MEMRA_LAYOUT_SMALL_TILE);
}

uint32_t memra_layout_tiles(uint32_t n_pairs)
{
    const uint32_t tile = memra_layout_tile(n_pairs);
    return (uint32_t)(((uint64_t)n_pairs + tile - 1) / tile);
}

uint64_t memra_layout_workspace(uint32_t n_pairs, uint32_t n_expert)
{
    if (n_pairs <= MEMRA_LAYOUT_ONE_LAUNCH)
        return 0;
    /* Each tile's count of each expert, then the padded prefix sums. */
    return 4 * ((uint64_t)memra_layout_tiles(n_pairs) * n_expert + n_expert + 1);
}

/* One output address: required or not, aligned to its element. */
static memra_status check_out(const char *fn, const char *name, uint64_t a, int required,
                              unsigned align)
{
    if (!a && required)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: layout->%s is 0", fn, name);
    if (a % align)
        return memra_fail(MEMRA_ERR_MISALIGNED, "%s: layout->%s = 0x%llx is not aligned to %u", fn,
                          name, (unsigned long long)a, align);
    return MEMRA_OK;
}

memra_status memra_layout_validate(const char *fn, uint64_t ids, uint32_t n_pairs,
                                   const memra_layout_spec *spec, const memra_layout *out,
                                   int device, memra_layout_params *lp)
{
    memra_status st = memra_layout_spec_check(fn, spec);
    if (st)
        return st;
    if (!out)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: layout is NULL", fn);
    uint64_t len = 0, blocks = 0; /* set when st is MEMRA_OK */
    if ((st = memra_layout_geometry(fn, n_pairs, spec, &len, &blocks)))
        return st;
    if (n_pairs && !ids)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: ids is NULL", fn);
    if (ids % 4)
        return memra_fail(MEMRA_ERR_MISALIGNED, "%s: ids = 0x%llx is not aligned to int32", fn,
                          (unsigned long long)ids);
    const int has = n_pairs > 0 || len > 0;
    if ((st = check_out(fn, "sorted_ids", out->sorted_ids, has, 4)) ||
        (st = check_out(fn, "expert_ids", out->expert_ids, has, 4)) ||
        (st = check_out(fn, "n_post_pad", out->n_post_pad, 1, 4)) ||
        (st = check_out(fn, "offsets", out->offsets, 0, 4)) ||
        (st = check_out(fn, "padded_offsets", out->padded_offsets, 0, 4)) ||
        (st = check_out(fn, "counts", out->counts, 0, 4)) ||
        (st = check_out(fn, "expert_load", out->expert_load, 0,
                        spec->load_dtype == MEMRA_COUNT_I64 ? 8 : 4)))
        return st;
    const uint64_t ws = memra_layout_workspace(n_pairs, spec->n_expert);
    if (device && ws && (st = check_out(fn, "workspace", out->workspace, 1, 8)))
        return st;
    memset(lp, 0, sizeof *lp);
    lp->sorted_ids = out->sorted_ids, lp->expert_ids = out->expert_ids;
    lp->n_post_pad = out->n_post_pad, lp->offsets = out->offsets;
    lp->padded_offsets = out->padded_offsets, lp->counts = out->counts;
    lp->load = out->expert_load, lp->workspace = ws ? out->workspace : 0;
    lp->map = spec->expert_map, lp->map_len = spec->n_expert;
    lp->n_expert = spec->n_expert, lp->block_size = spec->block_size;
    lp->sorted_len = (uint32_t)len, lp->n_blocks = (uint32_t)blocks;
    lp->flags = spec->load_dtype == MEMRA_COUNT_I64 ? MEMRA_LAYOUT_FLAG_LOAD_I64 : 0u;
    lp->n_tiles = memra_layout_tiles(n_pairs);
    return MEMRA_OK;
}

memra_status memra_layout_sizes(uint32_t n_pairs, const memra_layout_spec *spec,
                                uint64_t *sorted_len, uint64_t *n_blocks)
{
    static const char fn[] = "memra_layout_sizes";
    memra_status st = memra_layout_spec_check(fn, spec);
    if (st)
        return st;
    if (!sorted_len || !n_blocks)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: %s is NULL", fn,
                          sorted_len ? "n_blocks" : "sorted_len");
    return memra_layout_geometry(fn, n_pairs, spec, sorted_len, n_blocks);
}

memra_status memra_layout_workspace_bytes(uint32_t n_pairs, const memra_layout_spec *spec,
                                          uint64_t *bytes)
{
    static const char fn[] = "memra_layout_workspace_bytes";
    memra_status st = memra_layout_spec_check(fn, spec);
    if (st)
        return st;
    if (!bytes)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: bytes is NULL", fn);
    /* The pairs a layout call would take, judged as memra_layout_sizes
     * judges them (it answered for any n_pairs a call then refused). */
    uint64_t len, blocks;
    if ((st = memra_layout_geometry(fn, n_pairs, spec, &len, &blocks)))
        return st;
    *bytes = memra_layout_workspace(n_pairs, spec->n_expert);
    return MEMRA_OK;
}
