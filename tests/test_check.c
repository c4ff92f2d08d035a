/* memra_route_check(_ex), memra_vrows_check and memra_layout_check against
 * the calls they judge (the layout calls, and routing fused with its
 * layout, included): on one table of arguments per family (a good call,
 * then one thing wrong at a time), each kind returns its call's status and
 * its message byte for byte, and MEMRA_OK exactly where the call gets past
 * its checks. The host
 * kinds against the host arms (which then write nothing); the device kinds,
 * and the prepare calls, through the mock driver (which must then see no
 * launch and no upload). The bindings' "fake" implementations ask these
 * functions instead of the calls, so this is what makes them one judge. */
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

#include "mock_fixture.h"

#define E 64
#define T 4
#define K 6
#define NP (T * K)
#define NPMAX (T * (K + 2)) /* room for two shared experts */

/* Where a call's buffers are: host arrays, or the mock's device memory. */
typedef struct world {
    uint64_t logits, sel, selw, ptrs, scl, bias, map, count;
} world;

static float h_logits[T * E], h_selw[NPMAX], h_scl[3 * NPMAX], h_bias[E];
static int32_t h_sel[NPMAX], h_map[E];
static uint64_t h_ptrs[3 * NPMAX];
static int64_t h_count = 2;
static float planes[3][E + 2];
static const memra_vrows_macros macros = {{planes[0], planes[1], planes[2]}};
static const memra_vrows_macros partial = {{planes[0], NULL, planes[2]}};
static const memra_vrows_slabs slabs = {{0x7e0000000000ull, 0x7e4000000000ull, 0x7e8000000000ull},
                                        {1u << 20, 1u << 20, 2u << 20}};
static const memra_vrows_slabs wrapping = {{0x7e0000000000ull, ~0ull - 4096, 0x7e8000000000ull},
                                           {1u << 20, 1u << 20, 2u << 20}};

static world host_world(void)
{
    for (int e = 0; e < E; e++)
        h_map[e] = e < 32 ? e : -1;
    return (world){(uint64_t)(uintptr_t)h_logits, (uint64_t)(uintptr_t)h_sel,
                   (uint64_t)(uintptr_t)h_selw,   (uint64_t)(uintptr_t)h_ptrs,
                   (uint64_t)(uintptr_t)h_scl,    (uint64_t)(uintptr_t)h_bias,
                   (uint64_t)(uintptr_t)h_map,    (uint64_t)(uintptr_t)&h_count};
}

/* ---- routing ------------------------------------------------------------- */

typedef struct route_args {
    uint64_t logits;
    uint32_t n_tokens;
    memra_route_spec spec;
    int il;
    const memra_vrows_macros *macros;
    const memra_vrows_slabs *slabs;
    uint64_t sel, selw, ptrs, scl;
} route_args;

/* DeepSeek-V3's shape, smaller: sigmoid, a bias read in place, 8 groups. */
static route_args route_good(const world *w)
{
    route_args a = {.logits = w->logits,
                    .n_tokens = T,
                    .il = 3,
                    .macros = NULL,
                    .slabs = &slabs,
                    .sel = w->sel,
                    .selw = w->selw,
                    .ptrs = w->ptrs,
                    .scl = w->scl};
    a.spec = (memra_route_spec){.n_expert = E,
                                .top_k = K,
                                .n_group = 8,
                                .topk_group = 4,
                                .scoring = MEMRA_ROUTE_SIGMOID,
                                .renormalize = 1,
                                .routed_scaling_factor = 2.5f,
                                .bias_ptr = w->bias};
    return a;
}

#define ROUTE_CASES 52

/* Case i: the good call with one thing changed (case 0: nothing). */
static route_args route_case(const world *w, int i)
{
    route_args a = route_good(w);
    memra_route_spec *s = &a.spec;
    switch (i) {
    case 1:
        s->n_expert = 0;
        break;
    case 2:
        s->n_expert = 2048;
        break;
    case 3:
        s->n_group = 3;
        break;
    case 4:
        s->topk_group = 9;
        break;
    case 5:
        s->top_k = 0;
        break;
    case 6:
        s->top_k = 40;
        break;
    case 7:
        s->scoring = (memra_route_scoring)5;
        break;
    case 8:
        s->logits_dtype = (memra_logits_dtype)3;
        break;
    case 9:
        s->renormalize = 2;
        break;
    case 10:
        s->routed_scaling_factor = 0.0f;
        break;
    case 11:
        s->routed_scaling_factor = -0.0f;
        break;
    case 12:
        s->routed_scaling_factor = u2f(0x7f800000u);
        break;
    case 13:
        s->group_scoring = (memra_group_scoring)3;
        break;
    case 14:
        s->bias_dtype = (memra_bias_dtype)2;
        break;
    case 15:
        s->bias_ptr = w->bias + 2;
        break;
    case 16:
        s->bias = h_bias;
        break; /* and bias_ptr */
    case 17:
        s->n_shared = 27;
        break;
    case 18:
        s->n_shared = 1, s->shared_weight = u2f(0x7fc00000u);
        break;
    case 19:
        s->n_shared = 1, s->shared_rule = (memra_shared_rule)2;
        break;
    case 20:
        s->n_shared = 1, s->shared_rule = MEMRA_SHARED_ROUTED_SUM;
        break;
    case 21:
        s->n_shared = 1, s->shared_rule = MEMRA_SHARED_ROUTED_SUM, s->shared_divisor = 2.5f;
        s->shared_weight = -0.0f;
        break; /* -0 is not 0: a weight the rule would ignore */
    case 22:
        s->n_shared = 1, s->shared_divisor = 2.5f;
        break;
    case 23:
        s->n_real = w->count, s->n_real_dtype = (memra_count_dtype)2;
        break;
    case 24:
        s->n_real = w->count + 4, s->n_real_dtype = MEMRA_COUNT_I64;
        break;
    case 25:
        s->expert_map = w->map;
        break; /* n_local 0 */
    case 26:
        s->n_local = 32;
        break; /* no map */
    case 27:
        s->expert_map = w->map + 2, s->n_local = 32;
        break;
    case 28:
        s->expert_map = w->map, s->n_local = 5000;
        break;
    case 29:
        a.logits = 0;
        break;
    case 30:
        a.logits = w->logits + 2;
        break;
    case 31:
        a.n_tokens = 1u << 26;
        break;
    case 32:
        a.sel = 0;
        break;
    case 33:
        a.scl = 0;
        break;
    case 34:
        a.ptrs = w->ptrs + 4;
        break;
    case 35:
        a.selw = w->selw + 1;
        break;
    case 36:
        a.slabs = NULL;
        break;
    case 37:
        a.macros = &partial;
        break;
    case 38:
        a.slabs = &wrapping;
        break;
    /* accepted by both: */
    case 39:
        a.n_tokens = 0, a.logits = a.sel = a.selw = a.ptrs = a.scl = 0, a.slabs = NULL;
        break;
    case 40: /* the device calls refuse these: il is judged whatever the layer mirrors
              * (it was not where there were no planes and no bias) */
        a.il = 70000;
        break;
    case 41:
        a.il = -1;
        break;
    case 42:
        s->n_shared = 2, s->shared_rule = MEMRA_SHARED_ROUTED_SUM;
        s->shared_divisor = 2.5f;
        break;
    case 43:
        s->expert_map = w->map, s->n_local = 32, s->n_shared = 2, a.macros = &macros;
        break;
    case 44:
        s->n_real = w->count, s->n_real_dtype = MEMRA_COUNT_I64;
        break;
    case 45:
        s->bias_ptr = 0, s->routed_scaling_factor = u2f(1u);
        break; /* subnormal: > 0 */
    /* refused by the device call only (the host arm has no layer): */
    case 46:
        a.il = 70000, a.macros = &macros;
        break;
    case 47:
        a.il = -1, s->bias_ptr = 0, s->bias = h_bias;
        break;
    /* an empty batch is still judged by its spec and macros */
    case 48:
        a.n_tokens = 0, s->top_k = 0;
        break;
    case 49:
        a.n_tokens = 0, a.macros = &partial;
        break;
    case 50:
        a.n_tokens = 0, a.il = 70000, a.macros = &macros;
        break;
    case 51:
        s->shared_weight = u2f(0x80000000u);
        break; /* -0, the constant rule: fine */
    }
    return a;
}

static memra_status route_checked(memra_checked_call call, const route_args *a)
{
    return memra_route_check(call, a->logits, a->n_tokens, &a->spec, a->il, a->macros, a->slabs,
                             a->sel, a->selw, a->ptrs, a->scl);
}

/* The check's answer, its message kept (the call will overwrite it). */
static memra_status ask(memra_status st, char msg[512])
{
    snprintf(msg, 512, "%s", st ? memra_last_error() : "");
    return st;
}

static void expect_same(const char *what, int i, memra_status want, const char *want_msg,
                        memra_status got)
{
    if (want != got || (want && strcmp(want_msg, memra_last_error()) != 0))
        fail_msg("%s case %d: the check says %s (%s), the call %s (%s)", what, i,
                 memra_status_string(want), want_msg, memra_status_string(got),
                 got ? memra_last_error() : "");
}

static void test_route_check_is_the_host_arm(void **state)
{
    (void)state;
    const world w = host_world();
    int refused = 0;
    for (int i = 0; i < ROUTE_CASES; i++) {
        const route_args a = route_case(&w, i);
        char msg[512];
        const memra_status want = ask(route_checked(MEMRA_CALL_ROUTE_TABLES_HOST, &a), msg);
        for (int p = 0; p < NP; p++)
            h_sel[p] = -7;
        memra_faults f;
        const memra_status got = memra_route_tables_host(
            (const void *)(uintptr_t)a.logits, a.n_tokens, &a.spec, a.macros, a.slabs,
            (int32_t *)(uintptr_t)a.sel, (float *)(uintptr_t)a.selw, (uint64_t *)(uintptr_t)a.ptrs,
            (float *)(uintptr_t)a.scl, &f);
        expect_same("route host", i, want, msg, got);
        if (want) {
            refused++;
            assert_int_equal(h_sel[0], -7); /* a refused call writes nothing */
        }
    }
    assert_int_equal(refused, 38 + 2); /* cases 1-38 and 48, 49 */
}

static void test_route_check_is_the_device_call(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    world w = {0};
    assert_int_equal(memra_alloc(eng, sizeof h_logits, &w.logits), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 4 * NPMAX, &w.sel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 4 * NPMAX, &w.selw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 24 * NPMAX, &w.ptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 12 * NPMAX, &w.scl), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_bias, &w.bias), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_map, &w.map), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 8, &w.count), MEMRA_OK);
    host_world();
    assert_int_equal(memra_upload(eng, w.logits, h_logits, sizeof h_logits), MEMRA_OK);
    assert_int_equal(memra_upload(eng, w.bias, h_bias, sizeof h_bias), MEMRA_OK);
    assert_int_equal(memra_upload(eng, w.map, h_map, sizeof h_map), MEMRA_OK);
    assert_int_equal(memra_upload(eng, w.count, &h_count, 8), MEMRA_OK);
    int refused = 0;
    for (int i = 0; i < ROUTE_CASES; i++) {
        const route_args a = route_case(&w, i);
        char msg[512];
        memra_status want = ask(route_checked(MEMRA_CALL_ROUTE_TABLES, &a), msg);
        const int launches = mock.calls[MOCK_cuLaunchKernel];
        memra_status got = memra_route_tables(eng, a.logits, a.n_tokens, &a.spec, a.il, a.macros,
                                              a.slabs, a.sel, a.selw, a.ptrs, a.scl, NULL);
        expect_same("route device", i, want, msg, got);
        if (want) {
            refused++;
            assert_int_equal(mock.calls[MOCK_cuLaunchKernel], launches);
        }
        /* memra_route_prepare_layer, with the same spec, layer and planes */
        want = ask(route_checked(MEMRA_CALL_ROUTE_PREPARE_LAYER, &a), msg);
        got = memra_route_prepare_layer(eng, a.il, &a.spec, a.macros, NULL);
        expect_same("route prepare", i, want, msg, got);
    }
    assert_int_equal(refused, 38 + 2 + 2 + 2); /* and the layers of cases 40, 41, 46, 47 */
    assert_int_equal(memra_sync(eng, NULL), MEMRA_OK);
    memra_free(eng, w.logits), memra_free(eng, w.sel), memra_free(eng, w.selw);
    memra_free(eng, w.ptrs), memra_free(eng, w.scl), memra_free(eng, w.bias);
    memra_free(eng, w.map), memra_free(eng, w.count);
    memra_engine_destroy(eng);
}

/* ---- the table calls --------------------------------------------------------- */

typedef struct vrows_args {
    uint64_t sel, selw;
    uint32_t n_pairs, n_expert;
    int il;
    const memra_vrows_macros *macros;
    const memra_vrows_slabs *slabs;
    memra_vrows_options opt;
    int with_opt;
    uint64_t ptrs, scl;
} vrows_args;

#define VROWS_CASES 26

static vrows_args vrows_case(const world *w, int i)
{
    vrows_args a = {.sel = w->sel,
                    .selw = w->selw,
                    .n_pairs = NP,
                    .n_expert = E,
                    .il = 5,
                    .macros = NULL,
                    .slabs = &slabs,
                    .opt = {0, 0, 0},
                    .with_opt = 0,
                    .ptrs = w->ptrs,
                    .scl = w->scl};
    switch (i) {
    case 1:
        a.sel = 0;
        break;
    case 2:
        a.ptrs = 0;
        break;
    case 3:
        a.sel = w->sel + 2;
        break;
    case 4:
        a.ptrs = w->ptrs + 4;
        break;
    case 5:
        a.slabs = NULL;
        break;
    case 6:
        a.macros = &partial;
        break;
    case 7:
        a.n_pairs = MEMRA_MAX_PAIRS + 1;
        break;
    case 8:
        a.n_expert = 0;
        break;
    case 9:
        a.slabs = &wrapping;
        break;
    case 10:
        a.with_opt = 1, a.opt = (memra_vrows_options){w->map, 0, 0};
        break;
    case 11:
        a.with_opt = 1, a.opt = (memra_vrows_options){0, 3, 0};
        break;
    case 12:
        a.with_opt = 1, a.opt = (memra_vrows_options){w->map + 2, 32, 0};
        break;
    case 13:
        a.with_opt = 1, a.opt = (memra_vrows_options){0, 0, 0x7fffffffu};
        break;
    case 14:
        a.n_pairs = 0;
        break; /* refused by the plain calls, a no-op for the _ex ones */
    /* accepted by the host arms (no layer); the device calls judge il
     * whatever the layer mirrors (they did not where it mirrored nothing) */
    case 15:
        a.il = 70000;
        break;
    case 16:
        a.with_opt = 1, a.opt = (memra_vrows_options){w->map, 32, 2}, a.macros = &macros;
        break;
    case 17:
        a.n_pairs = 0, a.sel = a.selw = a.ptrs = a.scl = 0, a.slabs = NULL;
        a.with_opt = 1;
        break;
    case 18:
        a.macros = &macros;
        break;
    /* the device calls only: a layer that mirrors planes */
    case 19:
        a.il = 70000, a.macros = &macros;
        break;
    case 20:
        a.il = -1, a.macros = &macros;
        break;
    /* empty _ex calls: the options and n_expert still judged */
    case 21:
        a.n_pairs = 0, a.with_opt = 1, a.opt = (memra_vrows_options){0, 3, 0};
        break;
    case 22:
        a.n_pairs = 0, a.n_expert = 0, a.with_opt = 1;
        break;
    case 23:
        a.n_pairs = 0, a.il = 70000, a.macros = &macros, a.with_opt = 1;
        break;
    case 24:
        a.n_expert = 0, a.macros = &macros;
        break;
    case 25:
        a.n_expert = 0x7fffffffu, a.with_opt = 1, a.opt = (memra_vrows_options){0, 0, 2};
        break;
    }
    return a;
}

static memra_status vrows_checked(memra_checked_call call, const vrows_args *a)
{
    return memra_vrows_check(call, a->sel, a->selw, a->n_pairs, a->n_expert, a->il, a->macros,
                             a->slabs, a->with_opt ? &a->opt : NULL, a->ptrs, a->scl);
}

static void test_vrows_check_is_the_host_arms(void **state)
{
    (void)state;
    const world w = host_world();
    memset(h_sel, 0, sizeof h_sel); /* ids in range: an accepted call has no fault */
    for (int i = 0; i < VROWS_CASES; i++) {
        const vrows_args a = vrows_case(&w, i);
        for (int ex = 0; ex < 2; ex++) {
            if (!ex && a.with_opt)
                continue;
            char msg[512];
            const memra_status want =
                ask(vrows_checked(
                        ex ? MEMRA_CALL_VROWS_TABLES_HOST_EX : MEMRA_CALL_VROWS_TABLES_HOST, &a),
                    msg);
            h_ptrs[0] = 77;
            memra_faults f;
            const int32_t *sel = (const int32_t *)(uintptr_t)a.sel;
            const float *selw = (const float *)(uintptr_t)a.selw;
            uint64_t *ptrs = (uint64_t *)(uintptr_t)a.ptrs;
            float *scl = (float *)(uintptr_t)a.scl;
            const memra_status got =
                ex ? memra_vrows_tables_host_ex(sel, selw, a.n_pairs, a.n_expert, a.macros, a.slabs,
                                                a.with_opt ? &a.opt : NULL, ptrs, scl, &f)
                   : memra_vrows_tables_host(sel, selw, a.n_pairs, a.n_expert, a.macros, a.slabs,
                                             ptrs, scl, &f);
            expect_same(ex ? "vrows host_ex" : "vrows host", i, want, msg, got);
            if (want)
                assert_int_equal(h_ptrs[0], 77);
        }
    }
}

static void test_vrows_check_is_the_device_calls(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    world w = {0};
    assert_int_equal(memra_alloc(eng, 4 * NPMAX, &w.sel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 4 * NPMAX, &w.selw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 24 * NPMAX, &w.ptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 12 * NPMAX, &w.scl), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_map, &w.map), MEMRA_OK);
    host_world();
    memset(h_sel, 0, sizeof h_sel);
    assert_int_equal(memra_upload(eng, w.sel, h_sel, sizeof h_sel), MEMRA_OK);
    assert_int_equal(memra_upload(eng, w.selw, h_selw, sizeof h_selw), MEMRA_OK);
    assert_int_equal(memra_upload(eng, w.map, h_map, sizeof h_map), MEMRA_OK);
    for (int i = 0; i < VROWS_CASES; i++) {
        const vrows_args a = vrows_case(&w, i);
        for (int ex = 0; ex < 2; ex++) {
            if (!ex && a.with_opt)
                continue;
            char msg[512];
            memra_status want = ask(
                vrows_checked(ex ? MEMRA_CALL_VROWS_TABLES_EX : MEMRA_CALL_VROWS_TABLES, &a), msg);
            const int launches = mock.calls[MOCK_cuLaunchKernel];
            memra_status got =
                ex ? memra_vrows_tables_ex(eng, a.sel, a.selw, a.n_pairs, a.n_expert, a.il,
                                           a.macros, a.slabs, a.with_opt ? &a.opt : NULL, a.ptrs,
                                           a.scl, NULL)
                   : memra_vrows_tables(eng, a.sel, a.selw, a.n_pairs, a.n_expert, a.il, a.macros,
                                        a.slabs, a.ptrs, a.scl, NULL);
            expect_same(ex ? "vrows device_ex" : "vrows device", i, want, msg, got);
            if (i == 15) /* a layer out of range that mirrors nothing */
                assert_int_equal(got, MEMRA_ERR_INVALID_ARG);
            if (want)
                assert_int_equal(mock.calls[MOCK_cuLaunchKernel], launches);
        }
        char msg[512];
        const memra_status want = ask(vrows_checked(MEMRA_CALL_VROWS_PREPARE_LAYER, &a), msg);
        const memra_status got = memra_vrows_prepare_layer(eng, a.il, a.n_expert, a.macros, NULL);
        expect_same("vrows prepare", i, want, msg, got);
    }
    assert_int_equal(memra_sync(eng, NULL), MEMRA_OK);
    memra_free(eng, w.sel), memra_free(eng, w.selw), memra_free(eng, w.ptrs);
    memra_free(eng, w.scl), memra_free(eng, w.map);
    memra_engine_destroy(eng);
}

/* ---- the layout calls ---------------------------------------------------------- */

#define LE 64       /* the layout's experts */
#define LBS 16      /* its block size */
#define LBIG 20000  /* pairs above one launch (MEMRA_LAYOUT_ONE_LAUNCH) */
#define LSORT 21000 /* room for the sorted list of LBIG pairs (20960) */
#define LWS 32768   /* workspace bytes, more than LBIG pairs need (lws_holds) */
#define BIGT 2731   /* tokens whose K = 6 pairs each pass one launch: 16386 */

/* The workspace LWS holds what a call of n_pairs over n_expert asks for
 * (memra_layout_workspace_bytes: its size follows the tile memra picks). */
static void lws_holds(uint32_t n_pairs, uint32_t n_expert)
{
    const memra_layout_spec s = {.n_expert = n_expert, .block_size = LBS};
    uint64_t need = 0;
    assert_int_equal(memra_layout_workspace_bytes(n_pairs, &s, &need), MEMRA_OK);
    assert_true(need > 0 && need <= LWS);
}

/* Where a layout goes, and the ids it reads (host arrays or device memory). */
typedef struct lworld {
    uint64_t ids, sorted, eids, post, offsets, padded, counts, load, map, ws;
} lworld;

static int32_t h_ids[LBIG], h_sorted[LSORT], h_eids[LSORT], h_post, h_offsets[LE + 8],
    h_padded[LE + 8], h_counts[LE + 8], h_lmap[LE + 8];
static int64_t h_load[LE + 8];
static uint64_t h_ws[LWS / 8];

static lworld host_lworld(void)
{
    for (int p = 0; p < LBIG; p++)
        h_ids[p] = p % 7 == 3 ? -1 : (p * 13) % LE; /* a padding row's -1 now and then */
    for (int e = 0; e < LE; e++)
        h_lmap[e] = e % 2 ? -1 : e / 2;
    return (lworld){(uint64_t)(uintptr_t)h_ids,     (uint64_t)(uintptr_t)h_sorted,
                    (uint64_t)(uintptr_t)h_eids,    (uint64_t)(uintptr_t)&h_post,
                    (uint64_t)(uintptr_t)h_offsets, (uint64_t)(uintptr_t)h_padded,
                    (uint64_t)(uintptr_t)h_counts,  (uint64_t)(uintptr_t)h_load,
                    (uint64_t)(uintptr_t)h_lmap,    (uint64_t)(uintptr_t)h_ws};
}

typedef struct layout_args {
    uint64_t ids;
    uint32_t n_pairs;
    memra_layout_spec spec;
    int with_spec, with_out;
    memra_layout out;
} layout_args;

#define LAYOUT_CASES 30

static layout_args layout_case(const lworld *w, int i)
{
    layout_args a = {.ids = w->ids, .n_pairs = NP, .with_spec = 1, .with_out = 1};
    a.spec = (memra_layout_spec){.n_expert = LE, .block_size = LBS};
    a.out =
        (memra_layout){w->sorted, w->eids, w->post, w->offsets, w->padded, w->counts, w->load, 0};
    memra_layout_spec *s = &a.spec;
    memra_layout *o = &a.out;
    switch (i) {
    case 1:
        a.with_spec = 0;
        break;
    case 2:
        s->n_expert = 0;
        break;
    case 3:
        s->n_expert = MEMRA_LAYOUT_MAX_EXPERT + 1;
        break;
    case 4:
        s->block_size = 0;
        break;
    case 5:
        s->block_size = 65537;
        break;
    case 6:
        s->pad_sorted_ids = 2;
        break;
    case 7:
        s->load_dtype = (memra_count_dtype)2;
        break;
    case 8:
        s->expert_map = w->map + 2;
        break;
    case 9:
        a.with_out = 0;
        break;
    case 10:
        a.n_pairs = MEMRA_MAX_PAIRS + 1;
        break;
    case 11:
        a.ids = 0;
        break;
    case 12:
        a.ids = w->ids + 2;
        break;
    case 13:
        o->sorted_ids = 0;
        break;
    case 14:
        o->expert_ids = w->eids + 1;
        break;
    case 15:
        o->n_post_pad = 0;
        break;
    case 16:
        o->offsets = w->offsets + 2;
        break;
    case 17:
        o->padded_offsets = w->padded + 1;
        break;
    case 18:
        o->counts = w->counts + 3;
        break;
    case 19:
        s->load_dtype = MEMRA_COUNT_I64, o->expert_load = w->load + 4;
        break;
    case 20:
        a.n_pairs = 0, o->n_post_pad = 0;
        break; /* an empty layout still has its count */
    /* accepted by both: */
    case 21:
        a.n_pairs = 0, a.ids = 0, o->sorted_ids = o->expert_ids = 0;
        break; /* nothing to sort: only n_post_pad */
    case 22:
        s->expert_map = w->map, s->pad_sorted_ids = 1, s->load_dtype = MEMRA_COUNT_I64;
        break;
    case 23:
        o->offsets = o->padded_offsets = o->counts = o->expert_load = 0;
        break;
    case 24:
        s->n_expert = MEMRA_LAYOUT_MAX_EXPERT, s->block_size = 1;
        o->offsets = o->padded_offsets = o->counts = o->expert_load = 0;
        break;
    case 25:
        a.n_pairs = LBIG, o->workspace = w->ws;
        break;
    case 26:
        o->workspace = w->ws + 4;
        break; /* one launch: the workspace is not looked at */
    /* refused by the device call only (the host arm needs no workspace): */
    case 27:
        a.n_pairs = LBIG;
        break;
    case 28:
        a.n_pairs = LBIG, o->workspace = w->ws + 4;
        break;
    case 29:
        s->n_expert = 1, a.n_pairs = 0, a.ids = 0;
        break; /* accepted */
    }
    return a;
}

static memra_status layout_checked(memra_checked_call call, const layout_args *a)
{
    return memra_layout_check(call, a->ids, a->n_pairs, a->with_spec ? &a->spec : NULL,
                              a->with_out ? &a->out : NULL);
}

static void test_layout_check_is_the_host_arm(void **state)
{
    (void)state;
    const lworld w = host_lworld();
    int refused = 0;
    for (int i = 0; i < LAYOUT_CASES; i++) {
        const layout_args a = layout_case(&w, i);
        char msg[512];
        const memra_status want = ask(layout_checked(MEMRA_CALL_LAYOUT_TABLES_HOST, &a), msg);
        h_sorted[0] = h_eids[0] = h_post = -7;
        const memra_status got =
            memra_layout_tables_host((const int32_t *)(uintptr_t)a.ids, a.n_pairs,
                                     a.with_spec ? &a.spec : NULL, a.with_out ? &a.out : NULL);
        expect_same("layout host", i, want, msg, got);
        if (want) {
            refused++;
            assert_int_equal(h_sorted[0], -7); /* a refused call writes nothing */
            assert_int_equal(h_post, -7);
        }
    }
    assert_int_equal(refused, 20); /* cases 1-20 */
}

static void test_layout_check_is_the_device_call(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    const lworld h = host_lworld();
    lworld w = {0};
    assert_int_equal(memra_alloc(eng, sizeof h_ids, &w.ids), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_sorted, &w.sorted), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_eids, &w.eids), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 4, &w.post), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_offsets, &w.offsets), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_padded, &w.padded), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_counts, &w.counts), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_load, &w.load), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_lmap, &w.map), MEMRA_OK);
    lws_holds(LBIG, LE);
    assert_int_equal(memra_alloc(eng, LWS, &w.ws), MEMRA_OK);
    assert_int_equal(memra_upload(eng, w.ids, (const void *)(uintptr_t)h.ids, sizeof h_ids),
                     MEMRA_OK);
    assert_int_equal(memra_upload(eng, w.map, h_lmap, sizeof h_lmap), MEMRA_OK);
    memset(h_load, 0, sizeof h_load);
    assert_int_equal(memra_upload(eng, w.load, h_load, sizeof h_load), MEMRA_OK);
    int refused = 0;
    for (int i = 0; i < LAYOUT_CASES; i++) {
        const layout_args a = layout_case(&w, i);
        char msg[512];
        const memra_status want = ask(layout_checked(MEMRA_CALL_LAYOUT_TABLES, &a), msg);
        const int launches = mock.calls[MOCK_cuLaunchKernel];
        const memra_status got = memra_layout_tables(
            eng, a.ids, a.n_pairs, a.with_spec ? &a.spec : NULL, a.with_out ? &a.out : NULL, NULL);
        expect_same("layout device", i, want, msg, got);
        if (want) {
            refused++;
            assert_int_equal(mock.calls[MOCK_cuLaunchKernel], launches);
        }
    }
    assert_int_equal(refused, 20 + 2); /* and the workspace of cases 27, 28 */
    assert_int_equal(memra_sync(eng, NULL), MEMRA_OK);
    memra_free(eng, w.ids), memra_free(eng, w.sorted), memra_free(eng, w.eids);
    memra_free(eng, w.post), memra_free(eng, w.offsets), memra_free(eng, w.padded);
    memra_free(eng, w.counts), memra_free(eng, w.load), memra_free(eng, w.map);
    memra_free(eng, w.ws);
    memra_engine_destroy(eng);
}

/* ---- the fused calls: routing, its tables and its layout -------------------- */

/* The big batch's routing buffers (BIGT tokens), beside the small world's. */
static float h_blogits[BIGT * E], h_bselw[BIGT * K], h_bscl[3 * BIGT * K];
static int32_t h_bsel[BIGT * K];
static uint64_t h_bptrs[3 * BIGT * K];

typedef struct fused_args {
    route_args r;
    memra_layout_spec ls;
    int with_ls, with_lo;
    memra_layout lo;
} fused_args;

#define FUSED_LAYOUT_CASES 16

/* Case i < ROUTE_CASES: routing case i with a good layout of its pairs;
 * above: the good routing with one thing of the layout changed. */
static fused_args fused_case(const world *w, const world *big, const lworld *l, int i)
{
    fused_args a = {.with_ls = 1, .with_lo = 1};
    a.r = route_case(w, i < ROUTE_CASES ? i : 0);
    a.ls = (memra_layout_spec){.n_expert = a.r.spec.n_expert + a.r.spec.n_shared, .block_size = 4};
    a.lo = (memra_layout){l->sorted, l->eids, l->post, l->offsets, l->padded, l->counts, 0, 0};
    if (i < ROUTE_CASES)
        return a;
    memra_layout_spec *s = &a.ls;
    memra_layout *o = &a.lo;
    switch (i - ROUTE_CASES) {
    case 0:
        a.with_ls = 0;
        break; /* the layout without its spec */
    case 1:
        a.with_lo = 0;
        break;
    case 2:
        s->n_expert = E + 1;
        break; /* not the routing's n_expert + n_shared */
    case 3:
        s->expert_map = l->map;
        break; /* the routing's map labels the blocks */
    case 4:
        s->block_size = 0;
        break;
    case 5:
        o->sorted_ids = 0;
        break;
    case 6:
        o->expert_load = l->load + 2;
        break;
    case 7:
        a.r.n_tokens = 0, a.r.logits = a.r.sel = a.r.selw = a.r.ptrs = a.r.scl = 0;
        o->n_post_pad = 0;
        break; /* an empty batch's layout still has its count */
    case 8:
        a.with_ls = a.with_lo = 0, a.r.spec.top_k = 0;
        break; /* no layout: the call without one, by its name */
    /* accepted by both: */
    case 9:
        a.with_ls = a.with_lo = 0;
        break;
    case 10:
        a.r.n_tokens = 0, a.r.logits = a.r.sel = a.r.selw = a.r.ptrs = a.r.scl = 0;
        o->sorted_ids = o->expert_ids = 0;
        break; /* the empty layout alone */
    case 11:
        a.r.n_tokens = 0, a.r.il = 70000, a.r.macros = &macros;
        break; /* an empty batch does not look at the layer */
    case 12: {
        memra_route_spec *r = &a.r.spec;
        r->expert_map = w->map, r->n_local = 32, r->n_shared = 2, r->shared_weight = 1.0f;
        s->n_expert = E + 2, s->pad_sorted_ids = 1, o->expert_load = l->load;
        s->load_dtype = MEMRA_COUNT_I64;
        break;
    }
    case 13:
        a.r.logits = big->logits, a.r.n_tokens = BIGT, a.r.sel = big->sel;
        a.r.selw = big->selw, a.r.ptrs = big->ptrs, a.r.scl = big->scl;
        o->workspace = l->ws;
        break; /* past one launch, with its workspace */
    /* refused by the device call only: */
    case 14:
        a.r.logits = big->logits, a.r.n_tokens = BIGT, a.r.sel = big->sel;
        a.r.selw = big->selw, a.r.ptrs = big->ptrs, a.r.scl = big->scl;
        break; /* past one launch, no workspace */
    case 15:
        a.r.il = 70000, a.r.macros = &macros;
        break; /* tokens to route: the layer is judged */
    }
    return a;
}

static memra_status fused_checked(memra_checked_call call, const fused_args *a)
{
    const route_args *r = &a->r;
    return memra_route_check_ex(call, r->logits, r->n_tokens, &r->spec, r->il, r->macros, r->slabs,
                                r->sel, r->selw, r->ptrs, r->scl, a->with_ls ? &a->ls : NULL,
                                a->with_lo ? &a->lo : NULL);
}

static world host_big(void)
{
    return (world){(uint64_t)(uintptr_t)h_blogits,
                   (uint64_t)(uintptr_t)h_bsel,
                   (uint64_t)(uintptr_t)h_bselw,
                   (uint64_t)(uintptr_t)h_bptrs,
                   (uint64_t)(uintptr_t)h_bscl,
                   0,
                   0,
                   0};
}

static void test_fused_check_is_the_host_arm(void **state)
{
    (void)state;
    const world w = host_world(), big = host_big();
    const lworld l = host_lworld();
    int refused = 0;
    for (int i = 0; i < ROUTE_CASES + FUSED_LAYOUT_CASES; i++) {
        const fused_args a = fused_case(&w, &big, &l, i);
        const route_args *r = &a.r;
        char msg[512];
        const memra_status want = ask(fused_checked(MEMRA_CALL_ROUTE_TABLES_HOST_EX, &a), msg);
        h_sel[0] = h_bsel[0] = h_sorted[0] = h_post = -7;
        memra_faults f;
        const memra_status got = memra_route_tables_host_ex(
            (const void *)(uintptr_t)r->logits, r->n_tokens, &r->spec, r->macros, r->slabs,
            (int32_t *)(uintptr_t)r->sel, (float *)(uintptr_t)r->selw,
            (uint64_t *)(uintptr_t)r->ptrs, (float *)(uintptr_t)r->scl, &f,
            a.with_ls ? &a.ls : NULL, a.with_lo ? &a.lo : NULL);
        expect_same("fused host", i, want, msg, got);
        if (want) {
            refused++;
            assert_int_equal(h_sel[0], -7); /* nothing written */
            assert_int_equal(h_bsel[0], -7);
            assert_int_equal(h_post, -7);
        }
    }
    /* routing cases 1-38, 48, 49 (17-21: 1 shared expert, laid out with them);
     * the layout's cases 0-8 */
    assert_int_equal(refused, 40 + 9);
    /* both NULL: the routing call's own name */
    const fused_args a = fused_case(&w, &big, &l, ROUTE_CASES + 8);
    assert_int_equal(fused_checked(MEMRA_CALL_ROUTE_TABLES_HOST_EX, &a), MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(memra_last_error(), "memra_route_tables_host: spec->top_k = 0"));
}

static void test_fused_check_is_the_device_call(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    world w = {0}, big = {0};
    lworld l = {0};
    assert_int_equal(memra_alloc(eng, sizeof h_logits, &w.logits), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 4 * NPMAX, &w.sel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 4 * NPMAX, &w.selw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 24 * NPMAX, &w.ptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 12 * NPMAX, &w.scl), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_bias, &w.bias), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_map, &w.map), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 8, &w.count), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_blogits, &big.logits), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_bsel, &big.sel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_bselw, &big.selw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_bptrs, &big.ptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_bscl, &big.scl), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_sorted, &l.sorted), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_eids, &l.eids), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 4, &l.post), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_offsets, &l.offsets), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_padded, &l.padded), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_counts, &l.counts), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_load, &l.load), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, sizeof h_lmap, &l.map), MEMRA_OK);
    lws_holds(BIGT * (K + 2), E + 2); /* case 12's shared experts, case 13's tokens */
    assert_int_equal(memra_alloc(eng, LWS, &l.ws), MEMRA_OK);
    host_world();
    assert_int_equal(memra_upload(eng, w.logits, h_logits, sizeof h_logits), MEMRA_OK);
    assert_int_equal(memra_upload(eng, w.bias, h_bias, sizeof h_bias), MEMRA_OK);
    assert_int_equal(memra_upload(eng, w.map, h_map, sizeof h_map), MEMRA_OK);
    assert_int_equal(memra_upload(eng, w.count, &h_count, 8), MEMRA_OK);
    assert_int_equal(memra_upload(eng, big.logits, h_blogits, sizeof h_blogits), MEMRA_OK);
    memset(h_load, 0, sizeof h_load);
    assert_int_equal(memra_upload(eng, l.load, h_load, sizeof h_load), MEMRA_OK);
    int refused = 0;
    for (int i = 0; i < ROUTE_CASES + FUSED_LAYOUT_CASES; i++) {
        const fused_args a = fused_case(&w, &big, &l, i);
        const route_args *r = &a.r;
        char msg[512];
        const memra_status want = ask(fused_checked(MEMRA_CALL_ROUTE_TABLES_EX, &a), msg);
        const int launches = mock.calls[MOCK_cuLaunchKernel];
        const memra_status got = memra_route_tables_ex(
            eng, r->logits, r->n_tokens, &r->spec, r->il, r->macros, r->slabs, r->sel, r->selw,
            r->ptrs, r->scl, a.with_ls ? &a.ls : NULL, a.with_lo ? &a.lo : NULL, NULL);
        expect_same("fused device", i, want, msg, got);
        if (want) {
            refused++;
            assert_int_equal(mock.calls[MOCK_cuLaunchKernel], launches);
        }
    }
    /* as the host arm's, and the workspace of the layout's case 14, and
     * every layer out of range: with a layout the layer names its counts,
     * so routing cases 40, 41 (no planes), 46, 47, 50 (no tokens) and the
     * layout's 11 and 15 are refused too */
    assert_int_equal(refused, 40 + 9 + 8);
    assert_int_equal(memra_sync(eng, NULL), MEMRA_OK);
    memra_free(eng, w.logits), memra_free(eng, w.sel), memra_free(eng, w.selw);
    memra_free(eng, w.ptrs), memra_free(eng, w.scl), memra_free(eng, w.bias);
    memra_free(eng, w.map), memra_free(eng, w.count);
    memra_free(eng, big.logits), memra_free(eng, big.sel), memra_free(eng, big.selw);
    memra_free(eng, big.ptrs), memra_free(eng, big.scl);
    memra_free(eng, l.sorted), memra_free(eng, l.eids), memra_free(eng, l.post);
    memra_free(eng, l.offsets), memra_free(eng, l.padded), memra_free(eng, l.counts);
    memra_free(eng, l.load), memra_free(eng, l.map), memra_free(eng, l.ws);
    memra_engine_destroy(eng);
}

/* memra_route_check is memra_route_check_ex without a layout, the _EX
 * kinds included; each family refuses the other's kinds, naming itself. */
static void test_route_check_is_route_check_ex_without_a_layout(void **state)
{
    (void)state;
    const world w = host_world();
    for (int i = 0; i < ROUTE_CASES; i++) {
        const route_args a = route_case(&w, i);
        static const memra_checked_call calls[] = {
            MEMRA_CALL_ROUTE_TABLES, MEMRA_CALL_ROUTE_TABLES_HOST, MEMRA_CALL_ROUTE_PREPARE_LAYER,
            MEMRA_CALL_ROUTE_TABLES_EX, MEMRA_CALL_ROUTE_TABLES_HOST_EX};
        for (size_t c = 0; c < sizeof calls / sizeof calls[0]; c++) {
            char msg[512];
            const memra_status want = ask(route_checked(calls[c], &a), msg);
            const memra_status got =
                memra_route_check_ex(calls[c], a.logits, a.n_tokens, &a.spec, a.il, a.macros,
                                     a.slabs, a.sel, a.selw, a.ptrs, a.scl, NULL, NULL);
            expect_same("route_check_ex", i, want, msg, got);
        }
    }
    const route_args r = route_good(&w);
    assert_int_equal(memra_route_check_ex(MEMRA_CALL_LAYOUT_TABLES, r.logits, r.n_tokens, &r.spec,
                                          r.il, r.macros, r.slabs, r.sel, r.selw, r.ptrs, r.scl,
                                          NULL, NULL),
                     MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(memra_last_error(), "memra_route_check_ex: call = 8"));
    const lworld l = host_lworld();
    const layout_args a = layout_case(&l, 0);
    assert_int_equal(layout_checked(MEMRA_CALL_ROUTE_TABLES_EX, &a), MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(memra_last_error(), "memra_layout_check: call = 10"));
    assert_int_equal(layout_checked(MEMRA_CALL_LAYOUT_TABLES_HOST, &a), MEMRA_OK);
}

/* A kind of the other family, or none, is an argument error naming `call`. */
static void test_wrong_kind_is_refused(void **state)
{
    (void)state;
    const world w = host_world();
    const route_args r = route_good(&w);
    assert_int_equal(route_checked(MEMRA_CALL_VROWS_TABLES, &r), MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(memra_last_error(), "memra_route_check: call = 3"));
    assert_int_equal(route_checked((memra_checked_call)99, &r), MEMRA_ERR_INVALID_ARG);
    const vrows_args v = vrows_case(&w, 0);
    assert_int_equal(vrows_checked(MEMRA_CALL_ROUTE_TABLES_HOST, &v), MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(memra_last_error(), "memra_vrows_check: call = 1"));
    assert_int_equal(route_checked(MEMRA_CALL_ROUTE_TABLES_HOST, &r), MEMRA_OK);
    assert_int_equal(vrows_checked(MEMRA_CALL_VROWS_TABLES_HOST, &v), MEMRA_OK);
}

/* Two groups, as test_routing's: the host arms (valgrind included) and,
 * with the argument "device", the device calls through the mock (whose
 * kernels run with threads as lanes: not under valgrind). */
int main(int argc, char **argv)
{
    const struct CMUnitTest host[] = {
        cmocka_unit_test(test_route_check_is_the_host_arm),
        cmocka_unit_test(test_vrows_check_is_the_host_arms),
        cmocka_unit_test(test_wrong_kind_is_refused),
        cmocka_unit_test(test_layout_check_is_the_host_arm),
        cmocka_unit_test(test_fused_check_is_the_host_arm),
        cmocka_unit_test(test_route_check_is_route_check_ex_without_a_layout),
    };
    const struct CMUnitTest device[] = {
        cmocka_unit_test_setup_teardown(test_route_check_is_the_device_call, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_vrows_check_is_the_device_calls, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_layout_check_is_the_device_call, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_fused_check_is_the_device_call, mock_setup,
                                        mock_teardown),
    };
    if (argc > 1 && strcmp(argv[1], "device") == 0)
        return cmocka_run_group_tests(device, NULL, NULL);
    return cmocka_run_group_tests(host, NULL, NULL);
}
