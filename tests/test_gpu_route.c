/* Routing on a real GPU: device against host arm, bit for bit, for 2^20
 * tokens of every routing configuration (half of them with edge-value
 * logits, half through each kernel), crafted ties; a CUDA graph replayed
 * with new logits, with and without programmatic dependent launch; the
 * table kernel with an expert map and shared experts; the kernels'
 * parameter layout; every configuration through the kernels compiled for
 * its spec. Exits 77 (skipped) where no CUDA device exists. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_fixture.h"

#include "engine/engine.h"
#include "vrows/gate_cases.h"
#include "route/route.h"
#include "route/route_abi.h"
#include "route/route_cases.h"
#include "route_case_util.h"
#include "check/self_check.h"

static memra_engine *eng;
static const memra_driver *drv;

static int group_setup(void **state)
{
    (void)state;
    if (gpu_engine_open(&eng, &drv))
        return -1;
    if (memra_engine_warmup(eng)) {
        fprintf(stderr, "warmup: %s\n", memra_last_error());
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    gpu_engine_close(eng, drv);
    return 0;
}

static void test_route_param_layout(void **state)
{
    (void)state;
    size_t o0, sz0;
    if (!drv->cuFuncGetParamInfo ||
        drv->cuFuncGetParamInfo(NULL, 0, &o0, &sz0) == CUDA_ERROR_NOT_SUPPORTED)
        skip(); /* an older driver, or the fake one (no compiled layout to report) */
    /* Each routing kernel is in a module of its own, loaded at first use:
     * load every one now. */
    static const memra_kernel_id ids[] = {MEMRA_KERNEL_ROUTE_BLOCK,  MEMRA_KERNEL_ROUTE_WARP1,
                                          MEMRA_KERNEL_ROUTE_WARP4,  MEMRA_KERNEL_ROUTE_WARP8,
                                          MEMRA_KERNEL_ROUTE_WARP16, MEMRA_KERNEL_ROUTE_SIG4,
                                          MEMRA_KERNEL_ROUTE_SIG8,   MEMRA_KERNEL_ROUTE_SIG16};
    enum { N_IDS = sizeof ids / sizeof ids[0] };
    CUfunction fns[N_IDS];
    memra_call c;
    assert_int_equal(memra_call_enter(eng, "test_route_param_layout", &c), MEMRA_OK);
    for (int k = 0; k < N_IDS; k++)
        assert_int_equal(memra_engine_kernel(&c, MEMRA_CAPTURE_NONE, ids[k], &fns[k]), MEMRA_OK);
    memra_call_leave(&c);
    for (int k = 0; k < N_IDS; k++) {
        for (int i = 0; i < MEMRA_ROUTE_NPARAMS; i++) {
            size_t o = 0, sz = 0;
            assert_int_equal(drv->cuFuncGetParamInfo(fns[k], (size_t)i, &o, &sz), CUDA_SUCCESS);
            /* 18 pointers, 8 counts and flags, 2 floats, the layout's struct */
            const size_t want_o = i < 18   ? 8 * (size_t)i
                                  : i < 28 ? 144 + 4 * (size_t)(i - 18)
                                           : offsetof(memra_route_args, lp);
            assert_int_equal(o, want_o);
            assert_int_equal(sz, i < 18 ? 8 : i < 28 ? 4 : sizeof(memra_layout_params));
        }
        size_t o, sz;
        assert_int_not_equal(drv->cuFuncGetParamInfo(fns[k], MEMRA_ROUTE_NPARAMS, &o, &sz),
                             CUDA_SUCCESS);
    }
}

/* 2^20 tokens per configuration through each kind of module (the generic
 * kernels, and the ones compiled for the spec), in chunks of 2^17: a
 * quarter through each kernel choice (memra's own, the block kernel, the
 * team kernel, the team kernel unscreened), half of each with edge values,
 * faults included (each case counts into a word of its own). The generic
 * pass is the shared engine with specialisation off; the specialised one an
 * engine of the configuration's own, so no spec finds the engine's 16
 * modules taken. The host arm is the slow side: one thread per
 * configuration. */
typedef struct million {
    size_t ci;
    int failed;
    char why[512];
} million;

static void *million_main(void *arg)
{
    million *m = arg;
    memra_engine *se;
    if (memra_engine_create(eng->info.ordinal, &se) != MEMRA_OK) {
        m->failed = 1;
        snprintf(m->why, sizeof m->why, "memra_engine_create: %s", memra_last_error());
        return NULL;
    }
    se->route_specialize = 1;
    for (int chunk = 0; chunk < 16 && !m->failed; chunk++) {
        memra_engine *e = chunk < 8 ? eng : se;
        memra_stream own;
        memra_engine_stream(e, &own);
        const int v = (chunk >> 1) & 3; /* MEMRA_ROUTE_VARIANT_AUTO .. _WARP_EXACT */
        if (memra_route_case_check(e, m->ci, 1u << 17, 1000 * m->ci + (uint64_t)chunk, chunk & 1,
                                   40 + (int)m->ci, 0, v, own, m->why, sizeof m->why)) {
            m->failed = 1;
            const size_t n = strlen(m->why);
            snprintf(m->why + n, sizeof m->why - n, " (%s kernels)",
                     chunk < 8 ? "generic" : "specialised");
        }
    }
    if (!m->failed && atomic_load(&se->n_special) < 1) {
        m->failed = 1;
        snprintf(m->why, sizeof m->why, "no module compiled for the spec");
    }
    memra_engine_destroy(se);
    return NULL;
}

static void test_million_tokens_every_config(void **state)
{
    (void)state;
    million m[N_ROUTE_CASES];
    pthread_t th[N_ROUTE_CASES];
    const int specialize = eng->route_specialize;
    eng->route_specialize = 0;
    for (size_t ci = 0; ci < N_ROUTE_CASES; ci++) {
        m[ci] = (million){ci, 0, ""};
        assert_int_equal(pthread_create(&th[ci], NULL, million_main, &m[ci]), 0);
    }
    for (size_t ci = 0; ci < N_ROUTE_CASES; ci++)
        pthread_join(th[ci], NULL);
    eng->route_specialize = specialize;
    for (size_t ci = 0; ci < N_ROUTE_CASES; ci++) {
        if (m[ci].failed)
            fail_msg("%s: %s", route_cases[ci].name, m[ci].why);
        printf("routing %-90s 2^20 tokens exact, generic and specialised\n", route_cases[ci].name);
    }
}

/* Small batches, faults included, each kernel and memra's own choice; and
 * memra's choice on each side of its block/team switch (the most tokens the
 * block kernel takes for the spec's experts, and one more) and, for 32
 * experts or fewer, of the team kernel's switch from a lane an expert to
 * its throughput form (MEMRA_ROUTE_FEW_LANES_MIN_TOKENS). */
static void test_small_batches_with_faults(void **state)
{
    (void)state;
    memra_stream own;
    memra_engine_stream(eng, &own);
    char why[512];
    for (size_t ci = 0; ci < N_ROUTE_CASES; ci++) {
        for (uint32_t T = 1; T <= 1024; T *= 4)
            for (int v = MEMRA_ROUTE_VARIANT_AUTO; v <= MEMRA_ROUTE_VARIANT_WARP_EXACT; v++)
                if (memra_route_case_check(eng, ci, T, 77 * ci + T, 1, 40 + (int)ci, 0, v, own, why,
                                           sizeof why))
                    fail_msg("%s, %u tokens: %s", route_cases[ci].name, T, why);
        const uint32_t fl = MEMRA_ROUTE_FEW_LANES_MIN_TOKENS;
        if (route_cases[ci].spec.n_expert <= 32)
            for (uint32_t T = fl - 1u; T <= fl; T++)
                if (memra_route_case_check(eng, ci, T, 93 * ci + T, 1, 40 + (int)ci, 0,
                                           MEMRA_ROUTE_VARIANT_AUTO, own, why, sizeof why))
                    fail_msg("%s, %u tokens (team kernel, %s): %s", route_cases[ci].name, T,
                             memra_route_team_form(MEMRA_ROUTE_VARIANT_AUTO, T)
                                 ? "few lanes"
                                 : "a lane an expert",
                             why);
        const uint32_t sw = memra_route_block_max_tokens(route_cases[ci].spec.n_expert);
        if (sw == 0 || sw == UINT32_MAX)
            continue;
        for (uint32_t T = sw; T <= sw + 1u; T++)
            if (memra_route_case_check(eng, ci, T, 91 * ci + T, 1, 40 + (int)ci, 0,
                                       MEMRA_ROUTE_VARIANT_AUTO, own, why, sizeof why))
                fail_msg("%s, %u tokens (%s kernel): %s", route_cases[ci].name, T,
                         memra_route_use_block(T, route_cases[ci].spec.n_expert) ? "block" : "team",
                         why);
    }
}

/* Every configuration through the modules compiled for its spec
 * (MEMRA_ROUTE_SPECIALIZE): an engine of its own per configuration (an
 * engine holds MEMRA_SPECIAL_MODULES such modules), decode sizes and 2^15 tokens through each
 * kernel choice, edge values in half, against the host arm bit for bit. */
static void test_specialized_every_config(void **state)
{
    (void)state;
    char why[512];
    for (size_t ci = 0; ci < N_ROUTE_CASES; ci++) {
        memra_engine *se;
        assert_int_equal(memra_engine_create(eng->info.ordinal, &se), MEMRA_OK);
        se->route_specialize = 1;
        memra_stream own;
        memra_engine_stream(se, &own);
        static const uint32_t sizes[] = {1, 7, 300, 1u << 15};
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            for (int v = MEMRA_ROUTE_VARIANT_AUTO; v <= MEMRA_ROUTE_VARIANT_WARP_EXACT; v++)
                if (memra_route_case_check(se, ci, sizes[i], 31 * ci + sizes[i], (int)(i & 1),
                                           40 + (int)ci, 0, v, own, why, sizeof why))
                    fail_msg("%s, %u tokens, specialised: %s", route_cases[ci].name, sizes[i], why);
        assert_true(atomic_load(&se->n_special) >= 1);
        memra_engine_destroy(se);
    }
}

/* T tokens of f32 `logits` through each kernel (the block kernel, the team
 * kernel, and for sigmoid the team kernel unscreened) on engine e, with the
 * spec's device addresses in ds and its host ones in hs (spec_upload),
 * against the host arm: sel, selw and the tables bit for bit, and the fault
 * counts each call adds. Returns the host arm's faults. */
static memra_faults kernels_match_host(memra_engine *e, const memra_route_spec *ds,
                                       const memra_route_spec *hs, const memra_vrows_macros *mac,
                                       int il, const void *logits, size_t lbytes, uint32_t T,
                                       const char *what)
{
    const memra_vrows_slabs sl = GATE_SERVING_SLABS;
    const size_t np = (size_t)T * (hs->top_k + hs->n_shared);
    memra_stream own;
    memra_engine_stream(e, &own);
    memra_devptr dl, dsel, dselw, dptrs, dscl;
    assert_int_equal(memra_alloc(e, lbytes, &dl), MEMRA_OK);
    assert_int_equal(memra_alloc(e, 4 * np, &dsel), MEMRA_OK);
    assert_int_equal(memra_alloc(e, 4 * np, &dselw), MEMRA_OK);
    assert_int_equal(memra_alloc(e, 24 * np, &dptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(e, 12 * np, &dscl), MEMRA_OK);
    assert_int_equal(memra_upload(e, dl, logits, lbytes), MEMRA_OK);
    int32_t *hsel = malloc(4 * np), *gsel = malloc(4 * np);
    float *hselw = malloc(4 * np), *gselw = malloc(4 * np);
    uint64_t *hp = malloc(24 * np), *gp = malloc(24 * np);
    float *hs3 = malloc(12 * np), *gs3 = malloc(12 * np);
    assert_true(hsel && gsel && hselw && gselw && hp && gp && hs3 && gs3);
    memra_faults hf, f;
    memra_route_tables_host(logits, T, hs, mac, &sl, hsel, hselw, hp, hs3, &hf);
    for (int v = MEMRA_ROUTE_VARIANT_BLOCK; v <= MEMRA_ROUTE_VARIANT_WARP_EXACT; v++) {
        if (v == MEMRA_ROUTE_VARIANT_WARP_EXACT && hs->scoring != MEMRA_ROUTE_SIGMOID)
            continue;
        assert_int_equal(memra_engine_faults(e, own, &f, 1), MEMRA_OK); /* cleared */
        memra_route_variant = v;
        const memra_status st =
            memra_route_tables(e, dl, T, ds, il, mac, &sl, dsel, dselw, dptrs, dscl, own);
        memra_route_variant = MEMRA_ROUTE_VARIANT_AUTO;
        if (st != MEMRA_OK)
            fail_msg("%s, variant %d: %s", what, v, memra_last_error());
        assert_int_equal(memra_download_i32_async(e, gsel, dsel, np, own), MEMRA_OK);
        assert_int_equal(memra_download_f32_async(e, gselw, dselw, np, own), MEMRA_OK);
        assert_int_equal(memra_download_u64_async(e, gp, dptrs, 3 * np, own), MEMRA_OK);
        assert_int_equal(memra_download_f32_async(e, gs3, dscl, 3 * np, own), MEMRA_OK);
        assert_int_equal(memra_engine_faults(e, own, &f, 1), MEMRA_OK);
        if (memcmp(gsel, hsel, 4 * np) || memcmp(gselw, hselw, 4 * np) || memcmp(gp, hp, 24 * np) ||
            memcmp(gs3, hs3, 12 * np))
            fail_msg("%s, variant %d: the device's outputs differ from the host arm's", what, v);
        assert_int_equal(f.nonfinite, hf.nonfinite);
        assert_int_equal(f.bad_expert, hf.bad_expert);
        assert_int_equal(f.not_local, hf.not_local);
        assert_int_equal(f.first_pair, hf.first_pair);
    }
    memra_free(e, dl), memra_free(e, dsel), memra_free(e, dselw);
    memra_free(e, dptrs), memra_free(e, dscl);
    free(hsel), free(gsel), free(hselw), free(gselw), free(hp), free(gp), free(hs3), free(gs3);
    return hf;
}

/* Ties everywhere: inside warps, across warps and groups, every expert. */
static void test_crafted_ties(void **state)
{
    (void)state;
    memra_route_spec s;
    memset(&s, 0, sizeof s);
    s.n_expert = 256, s.top_k = 8, s.n_group = 8, s.topk_group = 4;
    s.scoring = MEMRA_ROUTE_SIGMOID, s.renormalize = 1, s.routed_scaling_factor = 1.0f;
    const uint32_t T = 6;
    float logits[6 * 256];
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t e = 0; e < 256; e++)
            logits[t * 256 + e] = t == 0   ? 0.5f
                                  : t == 1 ? (float)(e % 3)
                                  : t == 2 ? (e % 32 < 2 ? 3.0f : -1.0f)
                                  : t == 3 ? (e >= 240 ? 2.0f : 1.0f)
                                  : t == 4 ? (e == 0 || e == 255 ? 9.0f : 9.0f - 1e-6f)
                                           : -0.0f;
    for (int g = MEMRA_GROUP_TOP2_SUM; g <= MEMRA_GROUP_MAX; g++) {
        s.group_scoring = (memra_group_scoring)g;
        (void)kernels_match_host(eng, &s, &s, NULL, 0, logits, sizeof logits, T, "crafted ties");
    }
}

/* route_group_top2_tie's token (route_case_util.h): the fourth group is a
 * tie of two groups' top-2 sums, one of them the sum of two equal keys.
 * Every kernel, spec-compiled and generic, against the host arm, which gives
 * the place to the lower group (experts 96 and 97 chosen last). */
static void test_group_top2_tie(void **state)
{
    (void)state;
    float logits[256], bias[256];
    const memra_vrows_slabs sl = GATE_SERVING_SLABS;
    const memra_route_spec hs = route_group_top2_tie(logits, bias, &sl);
    int32_t hsel[8];
    float hw[8], hscl[24];
    uint64_t hp[24];
    assert_int_equal(memra_route_tables_host(logits, 1, &hs, NULL, &sl, hsel, hw, hp, hscl, NULL),
                     MEMRA_OK);
    assert_int_equal(hsel[6], 96);
    assert_int_equal(hsel[7], 97);
    for (int special = 1; special >= 0; special--) {
        memra_engine *e = eng;
        if (!special) {
            setenv("MEMRA_ROUTE_SPECIALIZE", "0", 1);
            assert_int_equal(memra_engine_create(0, &e), MEMRA_OK);
            unsetenv("MEMRA_ROUTE_SPECIALIZE");
        }
        spec_uploads up;
        const memra_route_spec ds = spec_upload(e, &hs, &up);
        (void)kernels_match_host(e, &ds, &hs, NULL, 0, logits, sizeof logits, 1,
                                 special ? "group top-2 tie, spec-compiled"
                                         : "group top-2 tie, generic");
        spec_upload_free(e, &up);
        if (!special)
            memra_engine_destroy(e);
    }
}

/* The table kernel with a device expert map, shared experts and map values
 * out of range, against memra_vrows_tables_host_ex: tables and faults. */
static void test_tables_ex_expert_map(void **state)
{
    (void)state;
    const uint32_t E = 256, n_pairs = 1u << 16, n_local = 32, n_shared = 2, n_slots = 34;
    int32_t map[256];
    int32_t *sel = malloc(4 * n_pairs);
    float *selw = malloc(4 * n_pairs), planes[3 * 34];
    uint64_t *hp = malloc(24 * (size_t)n_pairs), *gp = malloc(24 * (size_t)n_pairs);
    float *hs = malloc(12 * (size_t)n_pairs), *gs = malloc(12 * (size_t)n_pairs);
    uint64_t seed = 4242;
    for (uint32_t e = 0; e < E; e++)
        map[e] = e % 8 == 3 ? (int32_t)(e / 8) : e == 255 ? 40 : -1;
    for (uint32_t p = 0; p < n_pairs; p++) {
        const uint64_t r = rng_next(&seed);
        sel[p] = (int32_t)(r % (E + n_shared + 2)) - 1;
        selw[p] = rng_bits_float((uint32_t)(r >> 20));
    }
    for (uint32_t i = 0; i < 3 * n_slots; i++)
        planes[i] = 0.125f * (float)(i + 3);
    const memra_vrows_macros mac = {{planes, planes + n_slots, planes + 2 * n_slots}};
    const memra_vrows_slabs sl = GATE_SERVING_SLABS;
    memra_devptr dsel, dselw, dptrs, dscl, dmap;
    assert_int_equal(memra_alloc(eng, 4 * n_pairs, &dsel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 4 * n_pairs, &dselw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 24 * (size_t)n_pairs, &dptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 12 * (size_t)n_pairs, &dscl), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 4 * E, &dmap), MEMRA_OK);
    memra_stream own;
    memra_engine_stream(eng, &own);
    assert_int_equal(memra_upload_i32_async(eng, dsel, sel, n_pairs, own), MEMRA_OK);
    assert_int_equal(memra_upload_f32_async(eng, dselw, selw, n_pairs, own), MEMRA_OK);
    assert_int_equal(memra_upload_i32_async(eng, dmap, map, E, own), MEMRA_OK);
    const memra_vrows_options hopt = {(uint64_t)(uintptr_t)map, n_local, n_shared};
    const memra_vrows_options dopt = {dmap, n_local, n_shared};
    memra_faults f0, f1, hf;
    assert_int_equal(memra_engine_faults(eng, own, &f0, 1), MEMRA_OK);
    assert_int_equal(
        memra_vrows_tables_ex(eng, dsel, dselw, n_pairs, E, 78, &mac, &sl, &dopt, dptrs, dscl, own),
        MEMRA_OK);
    assert_int_equal(memra_download_u64_async(eng, gp, dptrs, 3 * (size_t)n_pairs, own), MEMRA_OK);
    assert_int_equal(memra_download_f32_async(eng, gs, dscl, 3 * (size_t)n_pairs, own), MEMRA_OK);
    assert_int_equal(memra_engine_faults(eng, own, &f1, 1), MEMRA_OK);
    memra_vrows_tables_host_ex(sel, selw, n_pairs, E, &mac, &sl, &hopt, hp, hs, &hf);
    assert_memory_equal(gp, hp, 24 * (size_t)n_pairs);
    assert_memory_equal(gs, hs, 12 * (size_t)n_pairs);
    assert_int_equal(f1.bad_expert, hf.bad_expert);
    assert_int_equal(f1.nonfinite, hf.nonfinite);
    assert_int_equal(f1.not_local, hf.not_local);
    assert_int_equal(f1.first_pair, hf.first_pair);
    assert_true(hf.not_local > n_pairs / 2);
    printf("tables with an expert map: %u pairs exact, %u not local, %u bad\n", n_pairs,
           hf.not_local, hf.bad_expert);
    memra_free(eng, dsel), memra_free(eng, dselw), memra_free(eng, dptrs);
    memra_free(eng, dscl), memra_free(eng, dmap);
    free(sel), free(selw), free(hp), free(gp), free(hs), free(gs);
}

/* Routing whose tables fault, through the block kernel and the team kernel
 * (screened and not): macro values of +inf, a NaN with a payload and one
 * whose product with the weight overflows; under an expert map, entries
 * past the local slots and below -1. The host arm's bytes (NaN scales
 * canonical) and fault counts, once a pair. */
static void test_route_faulting_tables(void **state)
{
    (void)state;
    const route_case *cases[] = {&route_cases[route_case_named("Qwen3-MoE")],
                                 &route_cases[route_case_named("DeepSeek-V3, rank 1")],
                                 &route_cases[route_case_named("DeepSeek-V3: 256")]};
    const uint32_t T = 300;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        static route_inputs in;
        memra_route_spec s = route_case_inputs(cases[i], &in);
        route_case_fault_tables(&in, &s);
        void *logits = route_case_logits(&s, T, 500 + i, 0);
        spec_uploads up;
        const memra_route_spec ds = spec_upload(eng, &s, &up);
        const memra_faults hf =
            kernels_match_host(eng, &ds, &s, &in.mac, 50 + (int)i, logits,
                               (size_t)T * s.n_expert * route_logit_bytes(&s), T, cases[i]->name);
        assert_true(hf.nonfinite > 0); /* the case faults as it means to */
        if (s.expert_map)
            assert_true(hf.bad_expert > 0 && hf.not_local > 0);
        printf("%s: faulting tables exact (%u non-finite, %u bad, %u not local)\n", cases[i]->name,
               hf.nonfinite, hf.bad_expert, hf.not_local);
        spec_upload_free(eng, &up);
        free(logits);
    }
}

/* Captured once; each replay routes new logits; every replay exact. With
 * pdl, the routing node is captured with programmatic dependent launch. */
static void graph_replay(int pdl, int variant)
{
    if (!drv->cuStreamBeginCapture)
        skip();
    int active;
    assert_int_equal(memra_engine_set_pdl(eng, pdl, &active), MEMRA_OK);
    printf("graph replay, PDL %s, %s kernel\n", active ? "in effect" : "off",
           variant == MEMRA_ROUTE_VARIANT_BLOCK ? "block" : "warp");
    static route_inputs in;
    const memra_route_spec s = route_case_inputs(&route_cases[2], &in); /* DeepSeek-V3 */
    const memra_vrows_slabs sl = GATE_SERVING_SLABS;
    const uint32_t T = 64;
    const size_t np = (size_t)T * s.top_k, lbytes = (size_t)T * s.n_expert * 4;
    CUstream cs;
    assert_int_equal(drv->cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    memra_devptr dl, dsel, dselw, dptrs, dscl;
    assert_int_equal(memra_alloc(eng, lbytes, &dl), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, np * 4, &dsel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, np * 4, &dselw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * np * 8, &dptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * np * 4, &dscl), MEMRA_OK);
    assert_int_equal(memra_route_prepare_layer(eng, 77, &s, &in.mac, cs), MEMRA_OK);
    assert_int_equal(memra_sync(eng, cs), MEMRA_OK);
    assert_int_equal(drv->cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    memra_route_variant = variant;
    memra_status st =
        memra_route_tables(eng, dl, T, &s, 77, &in.mac, &sl, dsel, dselw, dptrs, dscl, cs);
    memra_route_variant = MEMRA_ROUTE_VARIANT_AUTO;
    CUgraph g = NULL;
    assert_int_equal(drv->cuStreamEndCapture(cs, &g), CUDA_SUCCESS);
    assert_int_equal(st, MEMRA_OK);
    CUgraphExec x;
    assert_int_equal(drv->cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
    int32_t *gsel = malloc(np * 4), *hsel = malloc(np * 4);
    float *gw = malloc(np * 4), *hw = malloc(np * 4), *gscl = malloc(3 * np * 4),
          *hscl = malloc(3 * np * 4);
    uint64_t *gp = malloc(3 * np * 8), *hp = malloc(3 * np * 8);
    for (int rep = 0; rep < 50; rep++) {
        void *logits = route_case_logits(&s, T, 5000 + (uint64_t)rep, rep & 1);
        assert_int_equal(memra_upload_async(eng, dl, logits, lbytes, cs), MEMRA_OK);
        assert_int_equal(drv->cuGraphLaunch(x, cs), CUDA_SUCCESS);
        assert_int_equal(memra_download_i32_async(eng, gsel, dsel, np, cs), MEMRA_OK);
        assert_int_equal(memra_download_f32_async(eng, gw, dselw, np, cs), MEMRA_OK);
        assert_int_equal(memra_download_u64_async(eng, gp, dptrs, 3 * np, cs), MEMRA_OK);
        assert_int_equal(memra_download_f32_async(eng, gscl, dscl, 3 * np, cs), MEMRA_OK);
        assert_int_equal(memra_sync(eng, cs), MEMRA_OK);
        memra_route_tables_host(logits, T, &s, &in.mac, &sl, hsel, hw, hp, hscl, NULL);
        assert_memory_equal(gsel, hsel, np * 4);
        assert_memory_equal(gw, hw, np * 4);
        assert_memory_equal(gp, hp, 3 * np * 8);
        assert_memory_equal(gscl, hscl, 3 * np * 4);
        free(logits);
    }
    memra_faults f;
    assert_int_equal(memra_engine_faults(eng, cs, &f, 1), MEMRA_OK);
    free(gsel), free(hsel), free(gw), free(hw), free(gscl), free(hscl), free(gp), free(hp);
    drv->cuGraphExecDestroy(x);
    drv->cuGraphDestroy(g);
    memra_free(eng, dl), memra_free(eng, dsel), memra_free(eng, dselw);
    memra_free(eng, dptrs), memra_free(eng, dscl);
    drv->cuStreamDestroy(cs);
    assert_int_equal(memra_engine_set_pdl(eng, 0, NULL), MEMRA_OK);
}

/* The layout is the same bytes run after run (vLLM's and SGLang's are not:
 * their atomics place the pairs of an expert in whatever order they land),
 * and the host arm's: 1,000 fused calls of DeepSeek-V3 at 256 tokens (the
 * routing launch lays the batch out) and 100 at 16,384 tokens (three
 * launches after it), each compared with the first, byte for byte. */
static void same_bytes(uint32_t T, int runs)
{
    static route_inputs in;
    const memra_route_spec s = route_case_inputs(&route_cases[2], &in); /* DeepSeek-V3 */
    const memra_vrows_slabs sl = GATE_SERVING_SLABS;
    const uint32_t n = T * s.top_k;
    const memra_layout_spec ls = {.n_expert = s.n_expert, .block_size = 64};
    uint64_t len, blocks, ws;
    assert_int_equal(memra_layout_sizes(n, &ls, &len, &blocks), MEMRA_OK);
    assert_int_equal(memra_layout_workspace_bytes(n, &ls, &ws), MEMRA_OK);
    const size_t words = len + blocks + 1, lbytes = (size_t)T * s.n_expert * 4;
    memra_devptr dl, dsel, dselw, dptrs, dscl, dlay, dws = 0;
    assert_int_equal(memra_alloc(eng, lbytes, &dl), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, (size_t)n * 4, &dsel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, (size_t)n * 4, &dselw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, (size_t)n * 24, &dptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, (size_t)n * 12, &dscl), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, words * 4, &dlay), MEMRA_OK);
    if (ws)
        assert_int_equal(memra_alloc(eng, ws, &dws), MEMRA_OK);
    void *logits = route_case_logits(&s, T, 4242 + T, 0);
    assert_int_equal(memra_upload(eng, dl, logits, lbytes), MEMRA_OK);
    const memra_layout o = {dlay, dlay + 4 * len, dlay + 4 * (len + blocks), 0, 0, 0, 0, dws};
    int32_t *first = malloc(words * 4), *again = malloc(words * 4), *host = malloc(words * 4);
    int32_t *hsel = malloc((size_t)n * 4);
    float *hw = malloc((size_t)n * 4), *hscl = malloc((size_t)n * 12);
    uint64_t *hp = malloc((size_t)n * 24);
    memra_stream own;
    memra_engine_stream(eng, &own);
    for (int r = 0; r < runs; r++) {
        assert_int_equal(memra_route_tables_ex(eng, dl, T, &s, 90, &in.mac, &sl, dsel, dselw, dptrs,
                                               dscl, &ls, &o, own),
                         MEMRA_OK);
        assert_int_equal(memra_download_on(eng, r ? again : first, dlay, words * 4, own), MEMRA_OK);
        if (r)
            assert_memory_equal(again, first, words * 4);
    }
    const uint64_t h0 = (uint64_t)(uintptr_t)host;
    const memra_layout ho = {h0, h0 + 4 * len, h0 + 4 * (len + blocks), 0, 0, 0, 0, 0};
    assert_int_equal(
        memra_route_tables_host_ex(logits, T, &s, &in.mac, &sl, hsel, hw, hp, hscl, NULL, &ls, &ho),
        MEMRA_OK);
    assert_memory_equal(first, host, words * 4);
    printf("layout of %u pairs: %d runs the same bytes, the host arm's\n", n, runs);
    memra_faults f;
    assert_int_equal(memra_engine_faults(eng, own, &f, 1), MEMRA_OK);
    free(first), free(again), free(host), free(hsel), free(hw), free(hscl), free(hp), free(logits);
    memra_free(eng, dl), memra_free(eng, dsel), memra_free(eng, dselw);
    memra_free(eng, dptrs), memra_free(eng, dscl), memra_free(eng, dlay);
    if (dws)
        memra_free(eng, dws);
}

static void test_layout_same_bytes_every_run(void **state)
{
    (void)state;
    same_bytes(256, 1000);
    same_bytes(16384, 100);
}

static void test_graph_replay_with_new_logits(void **state)
{
    (void)state;
    graph_replay(0, MEMRA_ROUTE_VARIANT_BLOCK);
    graph_replay(0, MEMRA_ROUTE_VARIANT_WARP);
}

static void test_graph_replay_with_pdl(void **state)
{
    (void)state;
    graph_replay(1, MEMRA_ROUTE_VARIANT_BLOCK);
    graph_replay(1, MEMRA_ROUTE_VARIANT_WARP);
}

int main(void)
{
    if (gpu_absent())
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_param_layout),
        cmocka_unit_test(test_graph_replay_with_new_logits),
        cmocka_unit_test(test_graph_replay_with_pdl),
        cmocka_unit_test(test_crafted_ties),
        cmocka_unit_test(test_group_top2_tie),
        cmocka_unit_test(test_tables_ex_expert_map),
        cmocka_unit_test(test_route_faulting_tables),
        cmocka_unit_test(test_small_batches_with_faults),
        cmocka_unit_test(test_million_tokens_every_config),
        cmocka_unit_test(test_specialized_every_config),
        cmocka_unit_test(test_layout_same_bytes_every_run),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
