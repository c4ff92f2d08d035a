/* The expert-sorted layout: the host arm against a reference written from
 * vLLM's definition (a stable sort by expert, runs padded with the
 * sentinel), vLLM's sizes and docstring example, the optional outputs, bad
 * arguments; and the device arm through the mock driver (which runs the
 * kernel source): the one-launch and three-launch paths, the fused routing
 * call on both kernels at decode and prefill sizes, padded batches, maps
 * and shared experts, capture, and the same bytes run after run. */
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

#include "kernel_on_host.h"
#include "gpu_fixture.h"
#include "mock_fixture.h"
#include "mock/mock_internal.h"
#include "layout/layout_spec.h"
#include "route/route.h"
#include "vrows/gate_cases.h"
#include "route/route_cases.h"
#include "route_case_util.h"

/* ---- a reference from the definition ---------------------------------------- */

typedef struct lay {
    int32_t *sorted, *eids, post, *offsets, *padded, *counts;
    int64_t *load64;
    int32_t *load32;
    uint64_t len, blocks;
} lay;

static void lay_alloc(lay *l, uint32_t n_pairs, const memra_layout_spec *s)
{
    memset(l, 0, sizeof *l);
    assert_int_equal(memra_layout_sizes(n_pairs, s, &l->len, &l->blocks), MEMRA_OK);
    l->sorted = malloc((l->len + 1) * 4);
    l->eids = malloc((l->blocks + 1) * 4);
    l->offsets = malloc((s->n_expert + 1) * 4);
    l->padded = malloc((s->n_expert + 1) * 4);
    l->counts = malloc(s->n_expert * 4);
    l->load64 = calloc(s->n_expert, 8);
    l->load32 = calloc(s->n_expert, 4);
}

static void lay_free(lay *l)
{
    free(l->sorted), free(l->eids), free(l->offsets), free(l->padded), free(l->counts);
    free(l->load64), free(l->load32);
}

static memra_layout lay_out(lay *l, const memra_layout_spec *s)
{
    memra_layout o = {(uint64_t)(uintptr_t)l->sorted,
                      (uint64_t)(uintptr_t)l->eids,
                      (uint64_t)(uintptr_t)&l->post,
                      (uint64_t)(uintptr_t)l->offsets,
                      (uint64_t)(uintptr_t)l->padded,
                      (uint64_t)(uintptr_t)l->counts,
                      s->load_dtype == MEMRA_COUNT_I64 ? (uint64_t)(uintptr_t)l->load64
                                                       : (uint64_t)(uintptr_t)l->load32,
                      0};
    return o;
}

/* The layout by its definition: for each expert in order, its pairs in
 * ascending index, then the sentinel up to the next multiple of
 * block_size; each block labelled by its expert (or the map's id), -1
 * after the last run. */
static void reference(const int32_t *ids, uint32_t n, const memra_layout_spec *s,
                      const int32_t *map, uint32_t map_len, uint32_t n_local, lay *r)
{
    const uint32_t E = s->n_expert, bs = s->block_size;
    for (uint64_t q = 0; q < r->len; q++)
        r->sorted[q] = (int32_t)n;
    for (uint64_t b = 0; b < r->blocks; b++)
        r->eids[b] = -1;
    uint32_t at = 0, off = 0;
    for (uint32_t e = 0; e < E; e++) {
        r->offsets[e] = (int32_t)off, r->padded[e] = (int32_t)at;
        uint32_t c = 0;
        for (uint32_t p = 0; p < n; p++)
            if (ids[p] == (int32_t)e)
                r->sorted[at + c++] = (int32_t)p;
        const uint32_t padded = (c + bs - 1) / bs * bs;
        const int32_t label = !map          ? (int32_t)e
                              : e < map_len ? map[e]
                                            : (int32_t)(n_local + e - map_len);
        for (uint32_t b = at / bs; b < (at + padded) / bs; b++)
            r->eids[b] = label;
        r->counts[e] = (int32_t)c;
        r->load64[e] += c, r->load32[e] += (int32_t)c;
        at += padded, off += c;
    }
    r->offsets[E] = (int32_t)off, r->padded[E] = (int32_t)at;
    r->post = (int32_t)at;
}

/* sorted_ids, expert_ids and n_post_pad only: a call that asked for none
 * of the per-expert outputs. */
static void expect_same_places(const lay *a, const lay *b, const char *what)
{
    for (uint64_t q = 0; q < a->len; q++)
        if (a->sorted[q] != b->sorted[q])
            fail_msg("%s: sorted_ids[%llu] %d / %d", what, (unsigned long long)q, a->sorted[q],
                     b->sorted[q]);
    for (uint64_t k = 0; k < a->blocks; k++)
        if (a->eids[k] != b->eids[k])
            fail_msg("%s: expert_ids[%llu] %d / %d", what, (unsigned long long)k, a->eids[k],
                     b->eids[k]);
    assert_int_equal(a->post, b->post);
}

static void expect_same_layout(const lay *a, const lay *b, const memra_layout_spec *s,
                               const char *what)
{
    expect_same_places(a, b, what);
    assert_memory_equal(a->offsets, b->offsets, (s->n_expert + 1) * 4);
    assert_memory_equal(a->padded, b->padded, (s->n_expert + 1) * 4);
    assert_memory_equal(a->counts, b->counts, s->n_expert * 4);
    if (s->load_dtype == MEMRA_COUNT_I64)
        assert_memory_equal(a->load64, b->load64, s->n_expert * 8);
    else
        assert_memory_equal(a->load32, b->load32, s->n_expert * 4);
}

/* ids over n_expert experts, skewed (a few busy experts, as routing makes),
 * with some out of range (-1 padding rows, n_expert) when `holes`. */
static void make_ids(int32_t *ids, uint32_t n, uint32_t E, uint64_t seed, int holes)
{
    for (uint32_t p = 0; p < n; p++) {
        const uint64_t r = rng_next(&seed);
        ids[p] = (int32_t)(r % 5 == 0 ? (r >> 8) % 4 : (r >> 12) % E);
        if (holes && r % 53 == 0)
            ids[p] = (r >> 20) % 2 ? -1 : (int32_t)E;
    }
}

/* ---- host --------------------------------------------------------------------- */

/* vLLM's docstring example: topk_ids [[2,3,4],[1,2,4],[1,3,4],[1,2,3]],
 * block_size 4 -> sorted [3,6,9,12, 0,4,10,12, 1,7,11,12, 2,5,8,12]. */
static void test_vllm_docstring_example(void **state)
{
    (void)state;
    const int32_t ids[12] = {2, 3, 4, 1, 2, 4, 1, 3, 4, 1, 2, 3};
    const memra_layout_spec s = {.n_expert = 5, .block_size = 4};
    lay l;
    lay_alloc(&l, 12, &s);
    const memra_layout o = lay_out(&l, &s);
    assert_int_equal(memra_layout_tables_host(ids, 12, &s, &o), MEMRA_OK);
    const int32_t want[16] = {3, 6, 9, 12, 0, 4, 10, 12, 1, 7, 11, 12, 2, 5, 8, 12};
    assert_memory_equal(l.sorted, want, sizeof want);
    assert_int_equal(l.post, 16);
    const int32_t want_e[4] = {1, 2, 3, 4};
    assert_memory_equal(l.eids, want_e, sizeof want_e);
    /* vLLM's size: 12 + 5 * 3 = 27 entries, 7 blocks; the rest sentinel, -1 */
    assert_int_equal(l.len, 27);
    assert_int_equal(l.blocks, 7);
    for (int q = 16; q < 27; q++)
        assert_int_equal(l.sorted[q], 12);
    for (int b = 4; b < 7; b++)
        assert_int_equal(l.eids[b], -1);
    lay_free(&l);
}

/* vLLM's sizes: numel + E (bs - 1), rounded up to bs with pad_sorted_ids,
 * at most numel * bs when numel < E. */
static void test_sizes_are_vllms(void **state)
{
    (void)state;
    memra_layout_spec s = {.n_expert = 256, .block_size = 64};
    uint64_t len, blocks;
    assert_int_equal(memra_layout_sizes(8, &s, &len, &blocks), MEMRA_OK);
    assert_int_equal(len, 8 * 64); /* fewer pairs than experts */
    assert_int_equal(blocks, 8);
    assert_int_equal(memra_layout_sizes(2048, &s, &len, &blocks), MEMRA_OK);
    assert_int_equal(len, 2048 + 256 * 63);
    assert_int_equal(blocks, (2048 + 256 * 63 + 63) / 64);
    s.block_size = 16, s.pad_sorted_ids = 1;
    assert_int_equal(memra_layout_sizes(1001, &s, &len, &blocks), MEMRA_OK);
    assert_int_equal(len, (1001 + 256 * 15 + 15) / 16 * 16);
    assert_int_equal(memra_layout_sizes(0, &s, &len, &blocks), MEMRA_OK);
    assert_int_equal(len, 0);
    assert_int_equal(blocks, 0);
    assert_int_equal(memra_layout_sizes(MEMRA_MAX_PAIRS + 1, &s, &len, &blocks),
                     MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(memra_last_error(), "n_pairs"));
    uint64_t ws;
    s.block_size = 64, s.n_expert = 256;
    assert_int_equal(memra_layout_workspace_bytes(MEMRA_LAYOUT_ONE_LAUNCH, &s, &ws), MEMRA_OK);
    assert_int_equal(ws, 0);
    assert_int_equal(memra_layout_workspace_bytes(MEMRA_LAYOUT_ONE_LAUNCH + 1, &s, &ws), MEMRA_OK);
    assert_true(ws > 0);
    /* pairs no layout call takes: refused here too, as by memra_layout_sizes
     * (it answered a size for them), nothing written */
    ws = 7;
    assert_int_equal(memra_layout_workspace_bytes(UINT32_MAX, &s, &ws), MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(memra_last_error(), "memra_layout_workspace_bytes: n_pairs"));
    assert_int_equal(memra_layout_workspace_bytes(MEMRA_MAX_PAIRS + 1, &s, &ws),
                     MEMRA_ERR_INVALID_ARG);
    assert_int_equal(ws, 7);
}

static void test_host_matches_reference(void **state)
{
    (void)state;
    static const struct {
        uint32_t n, E, bs;
        int pad, map, i64;
    } cases[] = {{1, 8, 16, 0, 0, 0},      {2, 8, 16, 0, 0, 1},       {8, 256, 64, 0, 0, 0},
                 {2048, 256, 64, 0, 1, 0}, {20000, 160, 16, 1, 0, 1}, {777, 1056, 128, 1, 1, 0},
                 {4096, 3, 1, 0, 0, 0},    {5000, 384, 256, 0, 1, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const uint32_t n = cases[c].n, E = cases[c].E;
        int32_t *ids = malloc(n * 4), *map = malloc(E * 4);
        make_ids(ids, n, E, 3 + c, 1);
        for (uint32_t e = 0; e < E; e++)
            map[e] = e % 3 == 1 ? (int32_t)(e / 3) : -1;
        memra_layout_spec s = {.n_expert = E,
                               .block_size = cases[c].bs,
                               .pad_sorted_ids = cases[c].pad,
                               .load_dtype = cases[c].i64 ? MEMRA_COUNT_I64 : MEMRA_COUNT_I32,
                               .expert_map = cases[c].map ? (uint64_t)(uintptr_t)map : 0};
        lay h, r;
        lay_alloc(&h, n, &s), lay_alloc(&r, n, &s);
        /* The load is added in: twice gives twice. */
        const memra_layout o = lay_out(&h, &s);
        assert_int_equal(memra_layout_tables_host(ids, n, &s, &o), MEMRA_OK);
        assert_int_equal(memra_layout_tables_host(ids, n, &s, &o), MEMRA_OK);
        reference(ids, n, &s, cases[c].map ? map : NULL, E, 0, &r);
        reference(ids, n, &s, cases[c].map ? map : NULL, E, 0, &r);
        char what[64];
        snprintf(what, sizeof what, "case %zu (%u pairs, %u experts)", c, n, E);
        expect_same_layout(&h, &r, &s, what);
        lay_free(&h), lay_free(&r);
        free(ids), free(map);
    }
}

static void test_bad_arguments_write_nothing(void **state)
{
    (void)state;
    int32_t ids[4] = {0, 1, 2, 3};
    const memra_layout_spec good = {.n_expert = 4, .block_size = 4};
    lay l;
    lay_alloc(&l, 4, &good);
    memset(l.sorted, 0x5a, l.len * 4);
    l.post = -7;
    for (int i = 0; i < 9; i++) {
        memra_layout_spec s = good;
        memra_layout o = lay_out(&l, &good);
        const int32_t *in = ids;
        const char *field = "";
        memra_status want = MEMRA_ERR_INVALID_ARG;
        switch (i) {
        case 0:
            s.n_expert = 0, field = "n_expert";
            break;
        case 1:
            s.n_expert = MEMRA_LAYOUT_MAX_EXPERT + 1, field = "n_expert";
            break;
        case 2:
            s.block_size = 0, field = "block_size";
            break;
        case 3:
            s.pad_sorted_ids = 2, field = "pad_sorted_ids";
            break;
        case 4:
            s.load_dtype = (memra_count_dtype)2, field = "load_dtype";
            break;
        case 5:
            o.n_post_pad = 0, field = "n_post_pad", want = MEMRA_ERR_NULL_ARG;
            break;
        case 6:
            o.expert_load += 2, field = "expert_load", want = MEMRA_ERR_MISALIGNED;
            break;
        case 7:
            in = NULL, field = "ids", want = MEMRA_ERR_NULL_ARG;
            break;
        case 8:
            s.expert_map = 2, field = "expert_map", want = MEMRA_ERR_MISALIGNED;
            break;
        }
        const memra_status st = memra_layout_tables_host(in, 4, &s, &o);
        if (st != want || !strstr(memra_last_error(), field))
            fail_msg("case %d: %s: %s", i, memra_status_string(st), memra_last_error());
        assert_int_equal(l.post, -7);
        assert_int_equal(l.sorted[0], 0x5a5a5a5a);
    }
    lay_free(&l);
}

/* ---- device, through the mock ------------------------------------------------ */

typedef struct dlay {
    memra_devptr sorted, eids, post, offsets, padded, counts, load, ws;
    memra_devptr sorted_base, eids_base; /* the allocations: sorted and eids `skew` ints in */
} dlay;

/* The outputs on the device, sorted_ids and expert_ids `skew` (0-3) ints
 * past a 256-byte boundary: the kernels fill four ids a store from the
 * first 16-byte boundary on. */
static memra_layout dlay_alloc_skewed(memra_engine *eng, dlay *d, uint32_t n,
                                      const memra_layout_spec *s, const lay *h, uint32_t skew)
{
    const size_t E = s->n_expert;
    uint64_t ws;
    assert_int_equal(memra_layout_workspace_bytes(n, s, &ws), MEMRA_OK);
    memset(d, 0, sizeof *d);
    assert_int_equal(memra_alloc(eng, (h->len + 4) * 4, &d->sorted_base), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, (h->blocks + 4) * 4, &d->eids_base), MEMRA_OK);
    d->sorted = d->sorted_base + 4u * skew, d->eids = d->eids_base + 4u * skew;
    assert_int_equal(memra_alloc(eng, 4, &d->post), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, (E + 1) * 4, &d->offsets), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, (E + 1) * 4, &d->padded), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, E * 4, &d->counts), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, E * 8, &d->load), MEMRA_OK);
    if (ws)
        assert_int_equal(memra_alloc(eng, ws, &d->ws), MEMRA_OK);
    /* Poisoned, so an unwritten entry cannot pass; the load starts at 0. */
    assert_int_equal(memra_upload(eng, d->sorted, h->sorted, h->len * 4), MEMRA_OK);
    int32_t *poison = malloc((h->blocks + 1) * 4);
    memset(poison, 0xA7, (h->blocks + 1) * 4);
    assert_int_equal(memra_upload(eng, d->eids, poison, h->blocks * 4), MEMRA_OK);
    free(poison);
    int64_t zero[MEMRA_LAYOUT_MAX_EXPERT] = {0};
    assert_int_equal(memra_upload(eng, d->load, zero, E * 8), MEMRA_OK);
    memra_layout o = {d->sorted, d->eids,   d->post, d->offsets,
                      d->padded, d->counts, d->load, d->ws};
    return o;
}

static memra_layout dlay_alloc(memra_engine *eng, dlay *d, uint32_t n, const memra_layout_spec *s,
                               const lay *h)
{
    return dlay_alloc_skewed(eng, d, n, s, h, 0);
}

static void dlay_read(memra_engine *eng, const dlay *d, const memra_layout_spec *s, lay *l)
{
    const size_t E = s->n_expert;
    assert_int_equal(memra_download(eng, l->sorted, d->sorted, l->len * 4), MEMRA_OK);
    assert_int_equal(memra_download(eng, l->eids, d->eids, l->blocks * 4), MEMRA_OK);
    assert_int_equal(memra_download(eng, &l->post, d->post, 4), MEMRA_OK);
    assert_int_equal(memra_download(eng, l->offsets, d->offsets, (E + 1) * 4), MEMRA_OK);
    assert_int_equal(memra_download(eng, l->padded, d->padded, (E + 1) * 4), MEMRA_OK);
    assert_int_equal(memra_download(eng, l->counts, d->counts, E * 4), MEMRA_OK);
    if (s->load_dtype == MEMRA_COUNT_I64)
        assert_int_equal(memra_download(eng, l->load64, d->load, E * 8), MEMRA_OK);
    else
        assert_int_equal(memra_download(eng, l->load32, d->load, E * 4), MEMRA_OK);
}

static void dlay_free(memra_engine *eng, dlay *d)
{
    memra_free(eng, d->sorted_base), memra_free(eng, d->eids_base), memra_free(eng, d->post);
    memra_free(eng, d->offsets), memra_free(eng, d->padded), memra_free(eng, d->counts);
    memra_free(eng, d->load);
    if (d->ws)
        memra_free(eng, d->ws);
}

/* memra_layout_tables on device ids against the host arm: both paths (one
 * launch up to MEMRA_LAYOUT_ONE_LAUNCH pairs, three above), with and
 * without a map, both load types, ids out of range among them, block sizes
 * that are not powers of two (a division, not a shift), outputs 1-3 ints
 * past a 16-byte boundary (the fill's scalar head and tail). */
static void test_device_layout_matches_host(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    static const struct {
        uint32_t n, E, bs;
        int pad, map, i64;
        uint32_t skew, tile; /* tile: the three-launch path's, 0 for memra_layout_tile's */
    } cases[] = {{1, 8, 16, 0, 0, 0, 0, 0},
                 {37, 64, 24, 1, 1, 0, 1, 0},
                 {300, 96, 1, 0, 0, 0, 2, 0},
                 {MEMRA_LAYOUT_ONE_LAUNCH - 3, 256, 48, 0, 1, 1, 3, 0},
                 {2 * MEMRA_LAYOUT_TILE_MAX + 7 + MEMRA_LAYOUT_ONE_LAUNCH, 384, 80, 1, 0, 0, 1, 0},
                 {37, 64, 16, 0, 1, 1, 0, 0},
                 {2048, 256, 64, 0, 0, 0, 0, 0},
                 /* one launch, a block a tile: the tiles' edges */
                 {MEMRA_LAYOUT_SMALL_TILE + 1, 64, 16, 0, 0, 1, 1, 0},
                 {2 * MEMRA_LAYOUT_SMALL_TILE, 8, 32, 1, 1, 0, 2, 0},
                 {MEMRA_LAYOUT_ONE_LAUNCH, 1056, 16, 1, 1, 0, 0, 0},
                 {MEMRA_LAYOUT_ONE_LAUNCH + 1, 256, 64, 0, 0, 1, 0, 0},
                 {3 * MEMRA_LAYOUT_TILE_MAX + 5 + MEMRA_LAYOUT_ONE_LAUNCH, 160, 32, 1, 1, 0, 0, 0},
                 /* the scan's parts (two threads an expert at 512 experts, one at
                  * 1,056) past one of its load batches, the last batch partial;
                  * parts of no tile (8 experts: 128 parts, 13 tiles); each tile size */
                 {(2 * MEMRA_LAYOUT_SCAN_BATCH + 3) * MEMRA_LAYOUT_TILE_MIN + 11, 512, 16, 0, 1, 1,
                  0, MEMRA_LAYOUT_TILE_MIN},
                 {(2 * MEMRA_LAYOUT_SCAN_BATCH + 3) * MEMRA_LAYOUT_TILE_MIN + 11, 1056, 16, 1, 0, 0,
                  2, MEMRA_LAYOUT_TILE_MIN},
                 {MEMRA_LAYOUT_ONE_LAUNCH + 3 * 1024 + 1, 384, 64, 0, 0, 0, 2, 1024},
                 {MEMRA_LAYOUT_ONE_LAUNCH + 5 * 2048 - 1, 8, 16, 1, 1, 0, 1, 2048},
                 {MEMRA_LAYOUT_ONE_LAUNCH + 1, 1056, 32, 0, 1, 1, 3, MEMRA_LAYOUT_TILE_MAX},
                 {0, 16, 16, 0, 0, 0, 0, 0},
                 /* up to 32 pairs: the barrier-free path (memra_layout_small),
                  * and past it to 65 (the general path) */
                 {7, 64, 1, 0, 1, 1, 1, 0},
                 {32, 256, 24, 1, 0, 0, 2, 0},
                 {31, 4, 16, 0, 1, 0, 3, 0},
                 {32, 1056, 64, 1, 1, 1, 0, 0},
                 {33, 256, 16, 0, 0, 0, 0, 0},
                 {63, 8, 16, 0, 1, 1, 1, 0},
                 {64, 160, 24, 1, 0, 0, 2, 0},
                 {64, 1056, 1, 0, 1, 0, 3, 0},
                 {65, 256, 16, 0, 0, 1, 0, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const uint32_t n = cases[c].n, E = cases[c].E;
        int32_t *ids = malloc(n * 4 + 4), *map = malloc(E * 4);
        make_ids(ids, n, E, 11 + c, 1);
        for (uint32_t e = 0; e < E; e++)
            map[e] = e % 2 ? (int32_t)(e / 2) : -1;
        memra_devptr dids = 0, dmap = 0;
        assert_int_equal(memra_alloc(eng, n * 4 + 4, &dids), MEMRA_OK);
        assert_int_equal(memra_upload(eng, dids, ids, n * 4), MEMRA_OK);
        assert_int_equal(memra_alloc(eng, E * 4, &dmap), MEMRA_OK);
        assert_int_equal(memra_upload(eng, dmap, map, E * 4), MEMRA_OK);
        memra_layout_spec s = {.n_expert = E,
                               .block_size = cases[c].bs,
                               .pad_sorted_ids = cases[c].pad,
                               .load_dtype = cases[c].i64 ? MEMRA_COUNT_I64 : MEMRA_COUNT_I32,
                               .expert_map = cases[c].map ? dmap : 0};
        lay h, g;
        lay_alloc(&h, n, &s), lay_alloc(&g, n, &s);
        memset(h.sorted, 0xA7, h.len * 4);
        dlay d;
        memra_layout_tile_pairs = cases[c].tile; /* the workspace's size follows it */
        const memra_layout o = dlay_alloc_skewed(eng, &d, n, &s, &h, cases[c].skew);
        assert_int_equal(memra_layout_tables(eng, dids, n, &s, &o, NULL), MEMRA_OK);
        memra_layout_tile_pairs = 0;
        dlay_read(eng, &d, &s, &g);
        memra_layout_spec hs = s;
        hs.expert_map = cases[c].map ? (uint64_t)(uintptr_t)map : 0;
        const memra_layout ho = lay_out(&h, &hs);
        assert_int_equal(memra_layout_tables_host(ids, n, &hs, &ho), MEMRA_OK);
        char what[80];
        snprintf(what, sizeof what, "device case %zu (%u pairs, %u experts)", c, n, E);
        expect_same_layout(&g, &h, &s, what);
        dlay_free(eng, &d);
        memra_free(eng, dids), memra_free(eng, dmap);
        lay_free(&h), lay_free(&g);
        free(ids), free(map);
    }
    memra_engine_destroy(eng);
}

/* The fused call on each routing kernel, at decode size (the routing
 * launch's last block lays it out: the layer's count comes back to 0, so a
 * second call is right too) and above MEMRA_LAYOUT_ONE_LAUNCH pairs (three
 * launches after the routing one), against memra_route_tables_host_ex:
 * expert maps (the blocks' labels are the tables' slots), shared experts,
 * padded batches. `per_expert` 0: a call that asks for no per-expert
 * output (the offsets, counts and load: 0 on both arms); -1: no layout at
 * all (memra_route_tables_ex with none: the routing's plain builds);
 * `real` >= 0: that many real tokens (an int32 count), in place of the
 * case's own. */
static void fused_case_ex(memra_engine *eng, size_t ci, uint32_t T, int variant, uint64_t seed,
                          int per_expert, int real)
{
    static route_inputs in;
    const route_case *rc = &route_cases[ci];
    memra_route_spec s = route_case_inputs(rc, &in);
    route_case_padding(rc, &in, &s, T);
    if (real >= 0) {
        const int32_t r32 = real;
        memcpy(&in.n_real, &r32, 4);
        s.n_real_dtype = MEMRA_COUNT_I32;
        s.n_real = (uint64_t)(uintptr_t)&in.n_real;
    }
    const uint32_t K = s.top_k + s.n_shared, n = T * K;
    const memra_vrows_macros *mac = rc->with_macros ? &in.mac : NULL;
    const memra_vrows_slabs sl = GATE_SERVING_SLABS;
    const size_t lbytes = (size_t)T * s.n_expert * route_logit_bytes(&s);
    void *logits = route_case_logits(&s, T, seed, 1);
    const memra_layout_spec ls = {.n_expert = s.n_expert + s.n_shared, .block_size = 16};
    int32_t *hsel = malloc((size_t)n * 4), *gsel = malloc((size_t)n * 4);
    float *hselw = malloc((size_t)n * 4), *hscl = malloc((size_t)n * 12);
    uint64_t *hptrs = malloc((size_t)n * 24);
    lay h, g;
    lay_alloc(&h, n, &ls), lay_alloc(&g, n, &ls);
    memset(h.sorted, 0xA7, h.len * 4);
    /* device buffers and spec */
    memra_devptr dl, dsel, dselw, dptrs, dscl;
    assert_int_equal(memra_alloc(eng, lbytes, &dl), MEMRA_OK);
    assert_int_equal(memra_upload(eng, dl, logits, lbytes), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, (size_t)n * 4, &dsel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, (size_t)n * 4, &dselw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, (size_t)n * 24, &dptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, (size_t)n * 12, &dscl), MEMRA_OK);
    spec_uploads up;
    const memra_route_spec ds = spec_upload(eng, &s, &up);
    dlay d;
    /* outputs 0-3 ints off a 16-byte boundary: the blocks' shares of the
     * fill begin and end between vector stores */
    memra_layout o = dlay_alloc_skewed(eng, &d, n, &ls, &h, (uint32_t)(seed % 4));
    memra_faults hf;
    memra_layout ho = lay_out(&h, &ls);
    if (!per_expert) {
        o.offsets = o.padded_offsets = o.counts = o.expert_load = 0;
        ho.offsets = ho.padded_offsets = ho.counts = ho.expert_load = 0;
    }
    const memra_status hst = memra_route_tables_host_ex(logits, T, &s, mac, &sl, hsel, hselw, hptrs,
                                                        hscl, &hf, &ls, &ho);
    assert_true(hst == MEMRA_OK || hst == MEMRA_ERR_NONFINITE_SCALE ||
                hst == MEMRA_ERR_EXPERT_RANGE);
    char what[200];
    for (int rep = 0; rep < 2; rep++) { /* the layer's count is back at 0 after a call */
        memra_route_variant = variant;
        const memra_status st =
            memra_route_tables_ex(eng, dl, T, &ds, 3, mac, &sl, dsel, dselw, dptrs, dscl,
                                  per_expert < 0 ? NULL : &ls, per_expert < 0 ? NULL : &o, NULL);
        memra_route_variant = MEMRA_ROUTE_VARIANT_AUTO;
        if (st)
            fail_msg("%s: %s", rc->name, memra_last_error());
        assert_int_equal(memra_download(eng, gsel, dsel, (size_t)n * 4), MEMRA_OK);
        assert_memory_equal(gsel, hsel, (size_t)n * 4);
        if (per_expert < 0)
            continue;
        dlay_read(eng, &d, &ls, &g);
        snprintf(what, sizeof what, "%s, %u tokens (%d real), %s kernel, call %d%s", rc->name, T,
                 real,
                 variant == MEMRA_ROUTE_VARIANT_BLOCK  ? "block"
                 : variant == MEMRA_ROUTE_VARIANT_WARP ? "team"
                                                       : "chosen",
                 rep + 1, per_expert ? "" : ", no per-expert outputs");
        if (!per_expert) {
            expect_same_places(&g, &h, what);
            continue;
        }
        if (rep == 1) /* the load was added twice on the device */
            for (uint32_t e = 0; e < ls.n_expert; e++)
                h.load32[e] *= 2;
        expect_same_layout(&g, &h, &ls, what);
    }
    memra_faults f;
    assert_int_equal(memra_engine_faults(eng, NULL, &f, 1), MEMRA_OK);
    dlay_free(eng, &d);
    memra_free(eng, dl), memra_free(eng, dsel), memra_free(eng, dselw);
    memra_free(eng, dptrs), memra_free(eng, dscl);
    spec_upload_free(eng, &up);
    lay_free(&h), lay_free(&g);
    free(logits), free(hsel), free(gsel), free(hselw), free(hscl), free(hptrs);
}

static void fused_case(memra_engine *eng, size_t ci, uint32_t T, int variant, uint64_t seed)
{
    fused_case_ex(eng, ci, T, variant, seed, 1, -1);
}

static void test_fused_layout_matches_host(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    const size_t ds3 = route_case_named("DeepSeek-V3, rank 1 of 8"),
                 mix = route_case_named("Mixtral");
    const size_t sgl = route_case_named("SGLang DeepSeek-V3"),
                 v2 = route_case_named("DeepSeek-V2 from a zero");
    for (int v = MEMRA_ROUTE_VARIANT_BLOCK; v <= MEMRA_ROUTE_VARIANT_WARP; v++) {
        fused_case(eng, ds3, 5, v, 1);
        fused_case(eng, mix, 33, v, 2);
        fused_case(eng, sgl, 9, v, 3);
        fused_case(eng, v2, 12, v, 4);
    }
    /* Up to 32 pairs (the barrier-free layout) and past: one to eight
     * tokens of DeepSeek-V3 with its shared expert (9 to 72 pairs),
     * Mixtral's 16, 17 and 32. */
    for (uint32_t T = 1; T <= 8; T++)
        fused_case(eng, ds3, T, MEMRA_ROUTE_VARIANT_AUTO, 10 + T);
    fused_case(eng, mix, 16, MEMRA_ROUTE_VARIANT_AUTO, 20);
    fused_case(eng, mix, 17, MEMRA_ROUTE_VARIANT_AUTO, 21);
    fused_case(eng, mix, 32, MEMRA_ROUTE_VARIANT_AUTO, 22);
    /* A batch whose last block walks many chunks a warp: a decode batch on
     * the block kernel (this made-up spec's generic build: no bitmap). */
    fused_case(eng, ds3, 256, MEMRA_ROUTE_VARIANT_AUTO, 6);
    /* The team kernel past what it lays out itself
     * (MEMRA_ROUTE_TEAM_LAID_MAX_PAIRS): the routing, then the layout's
     * one-block launch, with an expert map, a shared expert and padding
     * rows (the case's own, then 40 real tokens), and near one launch's
     * size. */
    const uint32_t past = MEMRA_ROUTE_TEAM_LAID_MAX_PAIRS / 9u + 1u; /* top-8 + 1 shared */
    fused_case(eng, ds3, past, MEMRA_ROUTE_VARIANT_WARP, 8);
    fused_case_ex(eng, ds3, past + 30u, MEMRA_ROUTE_VARIANT_WARP, 9, 1, 40);
    fused_case_ex(eng, ds3, past, MEMRA_ROUTE_VARIANT_WARP, 10, 0, -1);
    fused_case(eng, mix, MEMRA_LAYOUT_ONE_LAUNCH / 4 + 3, MEMRA_ROUTE_VARIANT_AUTO, 7);
    /* Above one launch's size: the team kernel, then three launches. */
    fused_case(eng, mix, MEMRA_LAYOUT_ONE_LAUNCH / 2 + 7, MEMRA_ROUTE_VARIANT_AUTO, 5);
    memra_engine_destroy(eng);
}

/* One token on the block kernel with and without per-expert outputs, the
 * decode step an engine's fused MoE runs: the small path over the sentinel
 * its launch wrote first (memra_layout_fill), for every route case (maps,
 * shared experts, groups, the three dtypes, non-finite logits) and as a
 * padding row (0 real tokens: nothing placed); the same call on the team
 * kernel; two to four tokens; against the host arm. */
static void test_fused_one_token(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    for (size_t ci = 0; ci < N_ROUTE_CASES; ci++) {
        if (route_cases[ci].spec.top_k + route_cases[ci].spec.n_shared > 32u)
            continue;
        for (uint64_t seed = 0; seed < 3; seed++) {
            fused_case_ex(eng, ci, 1, MEMRA_ROUTE_VARIANT_BLOCK, 40 + seed, 0, -1);
            fused_case_ex(eng, ci, 1, MEMRA_ROUTE_VARIANT_AUTO, 50 + seed, 0, -1);
        }
        fused_case_ex(eng, ci, 1, MEMRA_ROUTE_VARIANT_BLOCK, 60, 0, 0);
        fused_case_ex(eng, ci, 1, MEMRA_ROUTE_VARIANT_WARP, 61, 0, -1);
        fused_case_ex(eng, ci, 1, MEMRA_ROUTE_VARIANT_BLOCK, 62, 1, -1);
    }
    /* Two to four tokens (up to 32 pairs: the barrier-free path over every
     * block's share of the sentinel, laid out by the last block) with no
     * per-expert outputs. */
    const size_t ds3 = route_case_named("DeepSeek-V3, rank 1 of 8");
    for (uint32_t T = 2; T <= 4; T++) {
        fused_case_ex(eng, ds3, T, MEMRA_ROUTE_VARIANT_BLOCK, 70 + T, 0, -1);
        fused_case_ex(eng, ds3, T, MEMRA_ROUTE_VARIANT_WARP, 80 + T, 0, -1);
    }
    memra_engine_destroy(eng);
}

/* The layer spec's builds a fused layout takes (the mock's NVRTC keeps the
 * defines it last compiled): a launch that lays out in its own launch, a
 * build with MEMRA_ROUTE_FLAG_LAYOUT (the team kernels' layout, the block
 * kernel's one-token and bitmap paths), whatever its batch; a launch laid
 * out by the layout's own launches (more than MEMRA_LAYOUT_ONE_LAUNCH
 * pairs, or on the team kernel MEMRA_ROUTE_TEAM_LAID_MAX_PAIRS), the
 * plain build, which holds no layout code. A fused call of
 * case ci compiles `builds` new spec builds (0 where an earlier call made
 * the one it takes), with the layout flag or without it (`laid`); `runs`:
 * the launches the mock's own build of that spec ran (tests/meson.build
 * has DeepSeek-V3's +layout build, not Mixtral's; both plain builds), two
 * calls a case. */
static void expect_spec_build(memra_engine *eng, size_t ci, uint32_t T, int variant, uint64_t seed,
                              int builds, int laid, int runs)
{
    const int before = mock.spec_programs, ran = mock.spec_host_runs;
    fused_case_ex(eng, ci, T, variant, seed, 0, -1);
    assert_int_equal(mock.spec_programs, before + builds);
    assert_int_equal((mock_last_spec_flags() & MEMRA_ROUTE_FLAG_LAYOUT) != 0, laid);
    assert_int_equal(mock.spec_host_runs, ran + runs);
}
static void test_fused_layout_builds(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    assert_int_equal(eng->route_specialize, 1);
    const size_t ds3 = route_case_named("DeepSeek-V3: 256");
    const size_t mixtral = route_case_named("Mixtral");
    /* 4 tokens on the block kernel, laid out by its last block: the
     * +layout build, the one a single token then takes too. */
    expect_spec_build(eng, ds3, 4, MEMRA_ROUTE_VARIANT_BLOCK, 91, 1, 1, 2);
    expect_spec_build(eng, ds3, 1, MEMRA_ROUTE_VARIANT_BLOCK, 90, 0, 1, 2);
    expect_spec_build(eng, ds3, 64, MEMRA_ROUTE_VARIANT_BLOCK, 95, 0, 1, 2);
    /* The team kernel (memra's choice for Mixtral at any size): its build
     * with the layout for a batch laid out in the routing launch... */
    expect_spec_build(eng, mixtral, 1, MEMRA_ROUTE_VARIANT_AUTO, 92, 1, 1, 0);
    expect_spec_build(eng, ds3, 4, MEMRA_ROUTE_VARIANT_WARP, 93, 1, 1, 2);
    /* ...up to what its bitmap path takes (MEMRA_ROUTE_TEAM_LAID_MAX_PAIRS:
     * 64 tokens of top-8); past it, and past MEMRA_LAYOUT_ONE_LAUNCH
     * pairs, the plain one, the layout's own launches laying it out. */
    expect_spec_build(eng, ds3, MEMRA_ROUTE_TEAM_LAID_MAX_PAIRS / 8u, MEMRA_ROUTE_VARIANT_WARP, 96,
                      0, 1, 2);
    expect_spec_build(eng, ds3, MEMRA_ROUTE_TEAM_LAID_MAX_PAIRS / 8u + 1u, MEMRA_ROUTE_VARIANT_WARP,
                      97, 1, 0, 2);
    expect_spec_build(eng, mixtral, MEMRA_LAYOUT_ONE_LAUNCH / 2u + 1u, MEMRA_ROUTE_VARIANT_AUTO, 94,
                      1, 0, 2);
    memra_engine_destroy(eng);
}

/* The block kernel's bitmap path (its +layout build, memra_layout_tokens at
 * 16 pairs a thread) over the batches it takes, 33 pairs to 256 tokens,
 * and the general path past them, with and without per-expert outputs,
 * padded, against the host arm: a family's spec (the mock runs DeepSeek-V3's
 * +layout build; the GPU, each family's) and a made-up one (on the mock the
 * generic kernel, the general path; on the GPU its own +layout build). */
/* A block-kernel case of the fused call, and on the mock the layout's path
 * it took, by the marks the kernels' text passes (kernel_on_host.h): each
 * routing launch's last block lays the batch out (memra_route_layout's one
 * mark) by the bitmap (memra_layout_tokens) or the general path
 * (memra_layout_block), three marks each; the layout's own launches (which
 * run memra_layout_block too) would show as marks without the fused one.
 * On a GPU the marks are empty, and the case's bits are what it proves. */
static void fused_case_on_path(memra_engine *eng, size_t ci, uint32_t T, uint64_t seed,
                               int per_expert, int pad, int bitmap)
{
    const int runs = mock.route_host_runs;
    host_marks_reset();
    fused_case_ex(eng, ci, T, MEMRA_ROUTE_VARIANT_BLOCK, seed, per_expert, pad);
    if (mock.route_host_runs == runs)
        return; /* a GPU ran it */
    const unsigned long n = (unsigned long)(mock.route_host_runs - runs),
                        fused = host_marks("memra_route_layout"),
                        tokens = host_marks("memra_layout_tokens"),
                        general = host_marks("memra_layout_block");
    if (fused != n || tokens != (bitmap ? 3 * n : 0) || general != (bitmap ? 0 : 3 * n))
        fail_msg("%s, %u tokens, %lu routing launches: not the fused %s path alone (fused marks "
                 "%lu, bitmap %lu, general %lu)",
                 route_cases[ci].name, T, n, bitmap ? "bitmap" : "general", fused, tokens, general);
}

static void test_fused_block_bitmap(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    const size_t cases[] = {route_case_named("DeepSeek-V3: 256"), route_case_named("Qwen3-Next"),
                            route_case_named("DeepSeek-V3, rank 1 of 8")};
    const uint32_t sizes[] = {5, 8, 33, 64, 255, 256};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* On the mock the first case's launches run its +layout spec build
         * (the bitmap path up to 256 tokens), the others the generic kernel
         * (the general path); on a GPU every family has its own build. */
        const int bitmap = i == 0;
        for (size_t j = 0; j < sizeof sizes / sizeof sizes[0]; j++)
            fused_case_on_path(eng, cases[i], sizes[j], 100 + j, 1, -1, bitmap);
        fused_case_on_path(eng, cases[i], 64, 110, 0, -1, bitmap);
        fused_case_on_path(eng, cases[i], 64, 111, 1, 37, bitmap);
        fused_case_on_path(eng, cases[i], 257, 112, 1, -1, 0);
    }
    memra_engine_destroy(eng);
}

/* One engine holds every build of the six benchmark families' specs: the
 * block and team kernels, each with a fused layout and without (24 spec
 * builds; bench_peers routes all six in one engine, and at 16 builds an
 * engine the last families' fused layouts took the generic kernel). */
static void test_family_builds_fit_one_engine(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    const int before = mock.spec_programs;
    int families = 0;
    for (size_t ci = 0; ci < N_ROUTE_CASES; ci++) {
        if (!route_case_is_family(&route_cases[ci]))
            continue;
        families++;
        for (int v = MEMRA_ROUTE_VARIANT_BLOCK; v <= MEMRA_ROUTE_VARIANT_WARP; v++)
            for (int per_expert = -1; per_expert <= 0; per_expert++) {
                const int b = mock.spec_programs;
                fused_case_ex(eng, ci, 4, v, 120 + ci, per_expert, -1);
                if (mock.spec_programs != b + 1)
                    fail_msg("%s, %s kernel, %s: %d new spec builds, not 1 (the generic "
                             "kernel past the engine's MEMRA_SPECIAL_MODULES)",
                             route_cases[ci].name,
                             v == MEMRA_ROUTE_VARIANT_BLOCK ? "block" : "team",
                             per_expert < 0 ? "no layout" : "fused layout", mock.spec_programs - b);
            }
    }
    assert_int_equal(families, 6);
    assert_int_equal(mock.spec_programs, before + 4 * families);
    memra_engine_destroy(eng);
}

/* The fused call with nothing to route writes the empty layout. */
static void test_fused_zero_tokens_writes_empty_layout(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    memra_route_spec s = {0};
    s.n_expert = 64, s.top_k = 4, s.n_group = 1, s.topk_group = 1, s.routed_scaling_factor = 1.0f;
    const memra_layout_spec ls = {.n_expert = 64, .block_size = 16};
    memra_devptr post;
    assert_int_equal(memra_alloc(eng, 4, &post), MEMRA_OK);
    const int32_t junk = 99;
    assert_int_equal(memra_upload(eng, post, &junk, 4), MEMRA_OK);
    const memra_layout o = {.n_post_pad = post};
    const memra_vrows_slabs sl = GATE_SERVING_SLABS;
    assert_int_equal(memra_route_tables_ex(eng, 0, 0, &s, 0, NULL, &sl, 0, 0, 0, 0, &ls, &o, NULL),
                     MEMRA_OK);
    int32_t got = -1;
    assert_int_equal(memra_download(eng, &got, post, 4), MEMRA_OK);
    assert_int_equal(got, 0);
    memra_free(eng, post);
    memra_engine_destroy(eng);
}

/* The fused device call's layer index names the layer's layout counts, so
 * it is checked even where the layer mirrors nothing (no planes, no bias):
 * out of range it is refused by name, before anything is written or
 * launched, at any batch size. */
static void test_fused_layer_out_of_range(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    memra_route_spec s = {0};
    s.n_expert = 64, s.top_k = 4, s.n_group = 1, s.topk_group = 1, s.routed_scaling_factor = 1.0f;
    const memra_layout_spec ls = {.n_expert = 64, .block_size = 16};
    const memra_vrows_slabs sl = GATE_SERVING_SLABS;
    const uint32_t T = 2, np = T * 4;
    uint64_t len = 0, blocks = 0;
    assert_int_equal(memra_layout_sizes(np, &ls, &len, &blocks), MEMRA_OK);
    memra_devptr dl, dsel, dselw, dptrs, dscl, dsorted, deids, dpost;
    assert_int_equal(memra_alloc(eng, T * 64 * 4, &dl), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, np * 4, &dsel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, np * 4, &dselw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * np * 8, &dptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * np * 4, &dscl), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, len * 4, &dsorted), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, blocks * 4, &deids), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 4, &dpost), MEMRA_OK);
    float logits[2 * 64] = {0};
    assert_int_equal(memra_upload(eng, dl, logits, sizeof logits), MEMRA_OK);
    const int32_t junk[8] = {-7, -7, -7, -7, -7, -7, -7, -7};
    assert_int_equal(memra_upload(eng, dsel, junk, sizeof junk), MEMRA_OK);
    assert_int_equal(memra_upload(eng, dpost, junk, 4), MEMRA_OK);
    const memra_layout o = {.sorted_ids = dsorted, .expert_ids = deids, .n_post_pad = dpost};
    const int bad[] = {-1, MEMRA_MAX_LAYERS, INT32_MAX};
    for (uint32_t t = 0; t <= T; t += T) { /* an empty batch and a real one */
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
            assert_int_equal(memra_route_tables_ex(eng, dl, t, &s, bad[i], NULL, &sl, dsel, dselw,
                                                   dptrs, dscl, &ls, &o, NULL),
                             MEMRA_ERR_INVALID_ARG);
            char want[64];
            snprintf(want, sizeof want, "il = %d is outside", bad[i]);
            assert_non_null(strstr(memra_last_error(), want));
        }
    }
    int32_t got[8], post = 0;
    assert_int_equal(memra_download(eng, got, dsel, sizeof got), MEMRA_OK);
    assert_int_equal(memra_download(eng, &post, dpost, 4), MEMRA_OK);
    assert_memory_equal(got, junk, sizeof got); /* nothing routed */
    assert_int_equal(post, -7);                 /* nothing laid out */
    /* In range, the same call routes and lays out. */
    assert_int_equal(memra_route_tables_ex(eng, dl, T, &s, MEMRA_MAX_LAYERS - 1, NULL, &sl, dsel,
                                           dselw, dptrs, dscl, &ls, &o, NULL),
                     MEMRA_OK);
    assert_int_equal(memra_download(eng, &post, dpost, 4), MEMRA_OK);
    assert_true(post > 0 && (uint32_t)post <= len);
    const memra_devptr bufs[] = {dl, dsel, dselw, dptrs, dscl, dsorted, deids, dpost};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        memra_free(eng, bufs[i]);
    memra_engine_destroy(eng);
}

/* A NULL routing spec is refused by name, never read, by each routing call
 * with and without a layout (the pair count used to be taken from it
 * before its check). */
static void test_null_spec_refused(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    float logits[64] = {0};
    int32_t sel[4] = {-3, -3, -3, -3}, sorted[64], eids[16], post = -3;
    float selw[4], scl[12];
    uint64_t ptrs[12];
    const memra_vrows_slabs sl = GATE_SERVING_SLABS;
    const memra_layout_spec ls = {.n_expert = 64, .block_size = 4};
    const memra_layout ho = {.sorted_ids = (uint64_t)(uintptr_t)sorted,
                             .expert_ids = (uint64_t)(uintptr_t)eids,
                             .n_post_pad = (uint64_t)(uintptr_t)&post};
    assert_int_equal(memra_route_tables_host_ex(logits, 1, NULL, NULL, &sl, sel, selw, ptrs, scl,
                                                NULL, &ls, &ho),
                     MEMRA_ERR_NULL_ARG);
    assert_non_null(strstr(memra_last_error(), "spec"));
    assert_int_equal(sel[0], -3);
    assert_int_equal(post, -3);
    memra_devptr d;
    assert_int_equal(memra_alloc(eng, 4096, &d), MEMRA_OK);
    const memra_layout dout = {.sorted_ids = d, .expert_ids = d + 1024, .n_post_pad = d + 2048};
    assert_int_equal(
        memra_route_tables_ex(eng, d, 1, NULL, 0, NULL, &sl, d, d, d, d, &ls, &dout, NULL),
        MEMRA_ERR_NULL_ARG);
    assert_non_null(strstr(memra_last_error(), "spec"));
    assert_int_equal(memra_route_tables(eng, d, 1, NULL, 0, NULL, &sl, d, d, d, d, NULL),
                     MEMRA_ERR_NULL_ARG);
    assert_non_null(strstr(memra_last_error(), "spec"));
    memra_free(eng, d);
    memra_engine_destroy(eng);
}

/* The fused call's own refusals: the layout's experts are the routing's
 * with its shared ones, and the routing's map labels the blocks. */
static void test_fused_refusals(void **state)
{
    (void)state;
    memra_route_spec s = {0};
    s.n_expert = 64, s.top_k = 4, s.n_group = 1, s.topk_group = 1, s.routed_scaling_factor = 1.0f;
    s.n_shared = 1, s.shared_weight = 1.0f;
    float logits[64] = {0};
    int32_t sel[5], sorted[400], eids[40], post, map[65] = {0};
    float selw[5], scl[15];
    uint64_t ptrs[15];
    const memra_vrows_slabs sl = GATE_SERVING_SLABS;
    const memra_layout o = {(uint64_t)(uintptr_t)sorted,
                            (uint64_t)(uintptr_t)eids,
                            (uint64_t)(uintptr_t)&post,
                            0,
                            0,
                            0,
                            0,
                            0};
    memra_layout_spec ls = {.n_expert = 64, .block_size = 4};
    sel[0] = -9;
    assert_int_equal(
        memra_route_tables_host_ex(logits, 1, &s, NULL, &sl, sel, selw, ptrs, scl, NULL, &ls, &o),
        MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(memra_last_error(), "n_expert + n_shared"));
    ls.n_expert = 65, ls.expert_map = (uint64_t)(uintptr_t)map;
    assert_int_equal(
        memra_route_tables_host_ex(logits, 1, &s, NULL, &sl, sel, selw, ptrs, scl, NULL, &ls, &o),
        MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(memra_last_error(), "layout_spec->expert_map"));
    ls.expert_map = 0;
    assert_int_equal(
        memra_route_tables_host_ex(logits, 1, &s, NULL, &sl, sel, selw, ptrs, scl, NULL, &ls, NULL),
        MEMRA_ERR_NULL_ARG);
    assert_int_equal(sel[0], -9); /* nothing written */
    assert_int_equal(
        memra_route_tables_host_ex(logits, 1, &s, NULL, &sl, sel, selw, ptrs, scl, NULL, &ls, &o),
        MEMRA_OK);
    assert_int_equal(post, 5 * 4); /* five experts' runs of one pair, each padded to 4 */
}

/* Under capture the fused call needs its counts and the layout kernels
 * loaded: refused with the call that does it, the capture intact (nothing
 * of the call in it: past MEMRA_ROUTE_TEAM_LAID_MAX_PAIRS the layout's own
 * launch follows the routing's, whose kernel was loaded); after
 * memra_layout_prepare (and the layer's), captured and replayed right. */
static void capture_needs_prepare(uint32_t T)
{
    memra_engine *eng = mock_engine();
    route_inputs in;
    const size_t ci = route_case_named("Mixtral");
    memra_route_spec s = route_case_inputs(&route_cases[ci], &in);
    route_case_padding(&route_cases[ci], &in, &s, T);
    const uint32_t K = s.top_k + s.n_shared, n = T * K;
    const memra_layout_spec ls = {.n_expert = s.n_expert + s.n_shared, .block_size = 4};
    lay h;
    lay_alloc(&h, n, &ls);
    memset(h.sorted, 0, h.len * 4);
    dlay d;
    const memra_layout o = dlay_alloc(eng, &d, n, &ls, &h);
    memra_devptr dl, dsel, dselw, dptrs, dscl;
    void *logits = route_case_logits(&s, T, 9, 0);
    const size_t lbytes = (size_t)T * s.n_expert * route_logit_bytes(&s);
    assert_int_equal(memra_alloc(eng, lbytes, &dl), MEMRA_OK);
    assert_int_equal(memra_upload(eng, dl, logits, lbytes), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, n * 4, &dsel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, n * 4, &dselw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, n * 24, &dptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, n * 12, &dscl), MEMRA_OK);
    const memra_vrows_macros *mac = &in.mac;
    const memra_vrows_slabs sl = GATE_SERVING_SLABS;
    CUstream st;
    assert_int_equal(mock_table.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    assert_int_equal(memra_route_prepare_layer(eng, 2, &s, mac, st), MEMRA_OK);
    assert_int_equal(mock_table.cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_SUCCESS);
    assert_int_equal(
        memra_route_tables_ex(eng, dl, T, &s, 2, mac, &sl, dsel, dselw, dptrs, dscl, &ls, &o, st),
        MEMRA_ERR_CAPTURE);
    assert_non_null(strstr(memra_last_error(), "memra_layout_prepare()"));
    CUstreamCaptureStatus cs;
    assert_int_equal(mock_table.cuStreamIsCapturing(st, &cs), CUDA_SUCCESS);
    assert_int_equal(cs, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CUgraph g;
    assert_int_equal(mock_table.cuStreamEndCapture(st, &g), CUDA_SUCCESS);
    assert_int_equal(((fgraph *)g)->n, 0); /* no routing launch left behind */
    mock_table.cuGraphDestroy(g);
    /* Prepared, the same call captures; each replay lays out again. */
    assert_int_equal(memra_layout_prepare(eng), MEMRA_OK);
    assert_int_equal(mock_table.cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_SUCCESS);
    assert_int_equal(
        memra_route_tables_ex(eng, dl, T, &s, 2, mac, &sl, dsel, dselw, dptrs, dscl, &ls, &o, st),
        MEMRA_OK);
    assert_int_equal(mock_table.cuStreamEndCapture(st, &g), CUDA_SUCCESS);
    CUgraphExec x;
    assert_int_equal(mock_table.cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
    int32_t *hsel = malloc((size_t)n * 4);
    float *hselw = malloc((size_t)n * 4), *hscl = malloc((size_t)n * 12);
    uint64_t *hptrs = malloc((size_t)n * 24);
    const memra_layout ho = lay_out(&h, &ls);
    assert_int_equal(memra_route_tables_host_ex(logits, T, &s, mac, &sl, hsel, hselw, hptrs, hscl,
                                                NULL, &ls, &ho),
                     MEMRA_OK);
    lay gl;
    lay_alloc(&gl, n, &ls);
    for (int rep = 0; rep < 3; rep++) {
        assert_int_equal(mock_table.cuGraphLaunch(x, st), CUDA_SUCCESS);
        assert_int_equal(memra_sync(eng, st), MEMRA_OK);
        dlay_read(eng, &d, &ls, &gl);
        for (uint32_t e = 0; e < ls.n_expert && rep; e++)
            h.load32[e] += h.counts[e];
        expect_same_layout(&gl, &h, &ls, "replay");
    }
    mock_table.cuGraphExecDestroy(x);
    mock_table.cuGraphDestroy(g);
    mock_table.cuStreamDestroy(st);
    dlay_free(eng, &d);
    memra_free(eng, dl), memra_free(eng, dsel), memra_free(eng, dselw);
    memra_free(eng, dptrs), memra_free(eng, dscl);
    lay_free(&h), lay_free(&gl);
    free(logits), free(hsel), free(hselw), free(hscl), free(hptrs);
    memra_engine_destroy(eng);
}
static void test_fused_capture_needs_prepare(void **state)
{
    (void)state;
    capture_needs_prepare(6);
    capture_needs_prepare(MEMRA_ROUTE_TEAM_LAID_MAX_PAIRS / 2u + 44u); /* Mixtral's top-2 */
}

int main(int argc, char **argv)
{
    const struct CMUnitTest host[] = {
        cmocka_unit_test(test_vllm_docstring_example),
        cmocka_unit_test(test_sizes_are_vllms),
        cmocka_unit_test(test_host_matches_reference),
        cmocka_unit_test(test_bad_arguments_write_nothing),
        cmocka_unit_test(test_fused_refusals),
    };
    const struct CMUnitTest device[] = {
        cmocka_unit_test_setup_teardown(test_device_layout_matches_host, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_fused_layout_matches_host, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_fused_one_token, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_fused_layout_builds, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_fused_block_bitmap, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_family_builds_fit_one_engine, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_fused_layer_out_of_range, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_null_spec_refused, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_fused_zero_tokens_writes_empty_layout, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_fused_capture_needs_prepare, mock_setup,
                                        mock_teardown),
    };
    /* The same layouts on a real GPU (the GPU suite): no mock installed,
     * so the engine is the device's. */
    const struct CMUnitTest gpu[] = {
        cmocka_unit_test(test_device_layout_matches_host),
        cmocka_unit_test(test_fused_layout_matches_host),
        cmocka_unit_test(test_fused_one_token),
        cmocka_unit_test(test_fused_block_bitmap),
        cmocka_unit_test(test_fused_zero_tokens_writes_empty_layout),
    };
    if (argc > 1 && strcmp(argv[1], "device") == 0)
        return cmocka_run_group_tests(device, NULL, NULL);
    if (argc > 1 && strcmp(argv[1], "gpu") == 0)
        return gpu_absent() ? 77 : cmocka_run_group_tests(gpu, NULL, NULL);
    return cmocka_run_group_tests(host, NULL, NULL);
}
