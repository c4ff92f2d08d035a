/* Routing, without a GPU: memra's exp against a long-double reference; the
 * host arm against a straightforward reference (sorting instead of
 * selection rounds) for each config; ties, NaN/inf/±0/subnormal logits,
 * bfloat16; bad specs; and the device arm through the mock driver, which
 * runs the kernel source on the host (warps as threads), bit for bit
 * against the host arm, capture and replay included. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

#include "kernel_on_host.h"
#include "mock_fixture.h"
#include "route_cases.h"

/* ---- memra_expf ------------------------------------------------------------ */

/* Distance in ulps between two finite floats of the same sign (or zeros). */
static int64_t ulps(float a, float b)
{
    int64_t x = (int32_t)f2u(a), y = (int32_t)f2u(b);
    if (x < 0)
        x = INT32_MIN - x;
    if (y < 0)
        y = INT32_MIN - y;
    return x > y ? x - y : y - x;
}

static void test_expf_within_2_ulp(void **state)
{
    (void)state;
    /* Every 61st float from -104 to 89 (both signs, through the subnormal
     * results below -87.3), against expl rounded once to binary32; every
     * 6101st under valgrind. */
    const uint32_t step = getenv("MEMRA_UNDER_VALGRIND") ? 6101 : 61;
    int64_t worst = 0;
    float worst_x = 0;
    uint64_t n = 0;
    const uint32_t ranges[2][2] = {{0x00000000u, 0x42b20000u}, {0x80000000u, 0xc2d00000u}};
    for (int r = 0; r < 2; r++)
        for (uint32_t b = ranges[r][0]; b < ranges[r][1]; b += step) {
            const float x = u2f(b), got = memra_expf(x);
            const float want = (float)expl((long double)x);
            if (isinf(want) && isinf(got))
                continue;
            const int64_t u = ulps(got, want);
            n++;
            if (u > worst)
                worst = u, worst_x = x;
        }
    printf("memra_expf: %llu points, worst %lld ulp at %.9g\n", (unsigned long long)n,
           (long long)worst, (double)worst_x);
    assert_true(n > 100000);
    assert_true(worst <= 2);
}

static void test_expf_edges(void **state)
{
    (void)state;
    assert_true(memra_expf(0.0f) == 1.0f);
    assert_true(memra_expf(-0.0f) == 1.0f);
    assert_true(memra_expf(u2f(0xff800000u)) == 0.0f); /* -inf */
    assert_true(isinf(memra_expf(u2f(0x7f800000u))));
    assert_true(isnan(memra_expf(u2f(0x7fc00000u))));
    assert_true(isinf(memra_expf(89.0f)));
    assert_true(memra_expf(88.72f) < INFINITY && memra_expf(88.72f) > 3.39e38f);
    assert_true(memra_expf(-104.0f) == 0.0f);
    const float sub = memra_expf(-100.0f); /* 3.7e-44: a subnormal result */
    assert_true(sub > 0.0f && f2u(sub) < 0x00800000u);
    assert_true(ulps(sub, (float)expl(-100.0L)) <= 1);
}

/* ---- a straightforward reference of the routing rules ---------------------- */

typedef struct ranked {
    float v;
    int i;
} ranked;

static int by_rank(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->v > y->v)
        return -1;
    if (x->v < y->v)
        return 1;
    return (x->i > y->i) - (x->i < y->i);
}

static float logit_of(const void *logits, int bf16, size_t i)
{
    return bf16 ? u2f((uint32_t)((const uint16_t *)logits)[i] << 16) : ((const float *)logits)[i];
}

/* The spec's fixed order: lane l takes experts l, l+32, ...; then lane l
 * combines its value with lane l^off's, for off = 16, 8, 4, 2, 1; the
 * result is lane 0's. */
static float butterfly(const float *lane_in, int is_sum)
{
    float v[32];
    memcpy(v, lane_in, sizeof v);
    for (int off = 16; off > 0; off /= 2) {
        float nv[32];
        for (int l = 0; l < 32; l++) {
            const float a = v[l], b = v[l ^ off];
            nv[l] = is_sum ? a + b : (b > a || (b == a && f2u(b) < f2u(a))) ? b : a;
        }
        memcpy(v, nv, sizeof v);
    }
    return v[0];
}

static void reference_token(const memra_route_spec *sp, const void *logits, uint32_t t,
                            int32_t *sel, float *w, int *bad)
{
    const uint32_t E = sp->n_expert, K = sp->top_k;
    const int bf16 = sp->logits_dtype == MEMRA_LOGITS_BF16;
    float x[MEMRA_ROUTE_MAX_EXPERT], s[MEMRA_ROUTE_MAX_EXPERT], c[MEMRA_ROUTE_MAX_EXPERT];
    *bad = 0;
    for (uint32_t e = 0; e < E; e++) {
        x[e] = logit_of(logits, bf16, (size_t)t * E + e);
        *bad |= !isfinite(x[e]);
    }
    if (*bad) {
        for (uint32_t j = 0; j < K; j++)
            sel[j] = (int32_t)j, w[j] = 0.0f;
        return;
    }
    if (sp->scoring == MEMRA_ROUTE_SIGMOID) {
        for (uint32_t e = 0; e < E; e++)
            s[e] = 1.0f / (1.0f + memra_expf(-x[e]));
    } else {
        float lane[32];
        for (int l = 0; l < 32; l++) {
            lane[l] = -INFINITY;
            for (uint32_t e = (uint32_t)l; e < E; e += 32)
                lane[l] = (x[e] > lane[l] || (x[e] == lane[l] && f2u(x[e]) < f2u(lane[l])))
                              ? x[e]
                              : lane[l];
        }
        const float m = butterfly(lane, 0);
        for (int l = 0; l < 32; l++) {
            lane[l] = 0.0f;
            for (uint32_t e = (uint32_t)l; e < E; e += 32) {
                s[e] = memra_expf(x[e] - m);
                lane[l] = lane[l] + s[e];
            }
        }
        const float sum = butterfly(lane, 1);
        for (uint32_t e = 0; e < E; e++)
            s[e] = s[e] / sum;
    }
    for (uint32_t e = 0; e < E; e++)
        c[e] = sp->bias ? s[e] + sp->bias[e] : s[e];
    /* groups by sorting */
    const uint32_t G = E / sp->n_group;
    int in_play[MEMRA_ROUTE_MAX_EXPERT];
    for (uint32_t e = 0; e < E; e++)
        in_play[e] = sp->n_group == 1;
    if (sp->n_group > 1) {
        ranked groups[MEMRA_ROUTE_MAX_GROUPS], members[MEMRA_ROUTE_MAX_EXPERT];
        for (uint32_t g = 0; g < sp->n_group; g++) {
            for (uint32_t i = 0; i < G; i++)
                members[i] = (ranked){c[g * G + i], (int)(g * G + i)};
            qsort(members, G, sizeof *members, by_rank);
            groups[g] = (ranked){G > 1 ? members[0].v + members[1].v : members[0].v, (int)g};
        }
        qsort(groups, sp->n_group, sizeof *groups, by_rank);
        for (uint32_t r = 0; r < sp->topk_group; r++)
            for (uint32_t i = 0; i < G; i++)
                in_play[(uint32_t)groups[r].i * G + i] = 1;
    }
    ranked all[MEMRA_ROUTE_MAX_EXPERT];
    uint32_t n = 0;
    for (uint32_t e = 0; e < E; e++)
        if (in_play[e])
            all[n++] = (ranked){c[e], (int)e};
    qsort(all, n, sizeof *all, by_rank);
    float sum = 0.0f;
    for (uint32_t j = 0; j < K; j++) {
        sel[j] = all[j].i;
        w[j] = s[all[j].i];
        sum = sum + w[j];
    }
    for (uint32_t j = 0; j < K; j++) {
        if (sp->renormalize && sum > 0.0f)
            w[j] = w[j] / sum;
        w[j] = w[j] * sp->routed_scaling_factor;
    }
}

/* ---- configs and inputs ----------------------------------------------------- */

typedef route_case config;
#define configs route_cases
#define N_CONFIGS N_ROUTE_CASES

static float bias_store[1024], planes_store[3][1024];

static memra_route_spec spec_of(const config *c)
{
    memra_route_spec s = c->spec;
    if (c->with_bias) {
        route_case_bias(s.n_expert, bias_store);
        s.bias = bias_store;
    }
    return s;
}

static void *make_logits(const memra_route_spec *s, uint32_t n_tokens, uint64_t seed, int edges)
{
    return route_case_logits(s, n_tokens, seed, edges);
}

typedef struct outputs {
    int32_t *sel;
    float *selw, *scl;
    uint64_t *ptrs;
    memra_faults f;
    memra_status st;
} outputs;

static const memra_vrows_slabs slabs = {{0x7e0000000000ull, 0x7e4000000000ull, 0x7e8000000000ull},
                                        {24u << 20, 24u << 20, 48u << 20}};

static void outputs_alloc(outputs *o, size_t n_pairs)
{
    o->sel = malloc(n_pairs * 4);
    o->selw = malloc(n_pairs * 4);
    o->ptrs = malloc(3 * n_pairs * 8);
    o->scl = malloc(3 * n_pairs * 4);
}

static void outputs_free(outputs *o)
{
    free(o->sel), free(o->selw), free(o->ptrs), free(o->scl);
}

static memra_vrows_macros macros_of(const memra_route_spec *s, int with)
{
    (void)with;
    float flat[3 * 1024];
    route_case_planes(s->n_expert, flat);
    for (int k = 0; k < 3; k++)
        memcpy(planes_store[k], flat + (size_t)k * s->n_expert, 4 * (size_t)s->n_expert);
    return (memra_vrows_macros){{planes_store[0], planes_store[1], planes_store[2]}};
}

static void host_route(const config *c, const void *logits, uint32_t n_tokens, outputs *o)
{
    memra_route_spec s = spec_of(c);
    memra_vrows_macros mac = macros_of(&s, c->with_macros);
    outputs_alloc(o, (size_t)n_tokens * s.top_k);
    o->st = memra_route_tables_host(logits, n_tokens, &s, c->with_macros ? &mac : NULL, &slabs,
                                    o->sel, o->selw, o->ptrs, o->scl, &o->f);
}

static void expect_same(const outputs *a, const outputs *b, size_t n_pairs, const char *what)
{
    for (size_t p = 0; p < n_pairs; p++)
        if (a->sel[p] != b->sel[p] || f2u(a->selw[p]) != f2u(b->selw[p]))
            fail_msg("%s: pair %zu: sel %d / %d, selw 0x%08x / 0x%08x", what, p, a->sel[p],
                     b->sel[p], f2u(a->selw[p]), f2u(b->selw[p]));
    if (memcmp(a->ptrs, b->ptrs, 3 * n_pairs * 8) != 0)
        fail_msg("%s: pointers differ", what);
    for (size_t i = 0; i < 3 * n_pairs; i++)
        if (f2u(a->scl[i]) != f2u(b->scl[i]))
            fail_msg("%s: scl[%zu] 0x%08x / 0x%08x", what, i, f2u(a->scl[i]), f2u(b->scl[i]));
}

/* ---- the host arm against the reference ------------------------------------ */

static void test_host_arm_matches_reference(void **state)
{
    (void)state;
    for (size_t ci = 0; ci < N_CONFIGS; ci++) {
        const config *c = &configs[ci];
        memra_route_spec s = spec_of(c);
        const uint32_t T = 300;
        for (int edges = 0; edges < 2; edges++) {
            void *logits = make_logits(&s, T, 11 + ci * 7 + (uint64_t)edges, edges);
            outputs h;
            host_route(c, logits, T, &h);
            uint32_t bad_tokens = 0;
            for (uint32_t t = 0; t < T; t++) {
                int32_t rs[32];
                float rw[32];
                int bad;
                reference_token(&s, logits, t, rs, rw, &bad);
                bad_tokens += bad;
                for (uint32_t j = 0; j < s.top_k; j++) {
                    const size_t p = (size_t)t * s.top_k + j;
                    if (h.sel[p] != rs[j] || f2u(h.selw[p]) != f2u(rw[j]))
                        fail_msg("%s token %u rank %u: host (%d, 0x%08x), reference (%d, 0x%08x)",
                                 c->name, t, j, h.sel[p], f2u(h.selw[p]), rs[j], f2u(rw[j]));
                }
            }
            /* The tables are the table host arm's from that sel/selw. */
            const size_t np = (size_t)T * s.top_k;
            uint64_t *tp = malloc(3 * np * 8);
            float *ts = malloc(3 * np * 4);
            memra_vrows_macros mac = macros_of(&s, 1);
            memra_vrows_tables_host(h.sel, h.selw, (uint32_t)np, s.n_expert,
                                    c->with_macros ? &mac : NULL, &slabs, tp, ts, NULL);
            assert_memory_equal(tp, h.ptrs, 3 * np * 8);
            assert_memory_equal(ts, h.scl, 3 * np * 4);
            free(tp), free(ts);
            assert_int_equal(h.st, bad_tokens ? MEMRA_ERR_NONFINITE_SCALE : MEMRA_OK);
            assert_true(h.f.nonfinite >= bad_tokens * s.top_k);
            if (edges)
                assert_true(bad_tokens > 0);
            printf("%s%s: %u tokens exact (%u with non-finite logits)\n", c->name,
                   edges ? ", edge values" : "", T, bad_tokens);
            outputs_free(&h);
            free(logits);
        }
    }
}

static void test_ties_go_to_the_lower_index(void **state)
{
    (void)state;
    memra_route_spec s = {16, 4, 4, 2, MEMRA_ROUTE_SOFTMAX, MEMRA_LOGITS_F32, 0, 1.0f, NULL};
    float logits[16];
    for (int e = 0; e < 16; e++)
        logits[e] = 0.25f; /* every expert, every group tied */
    int32_t sel[4];
    float selw[4], scl[12];
    uint64_t ptrs[12];
    assert_int_equal(
        memra_route_tables_host(logits, 1, &s, NULL, &slabs, sel, selw, ptrs, scl, NULL), MEMRA_OK);
    /* groups 0 and 1 win the tie, then experts 0..3 within them */
    for (int j = 0; j < 4; j++)
        assert_int_equal(sel[j], j);
    for (int j = 1; j < 4; j++)
        assert_true(f2u(selw[j]) == f2u(selw[0]));
    /* a strict order inside: 5 beats everything, then the rest by index */
    logits[5] = 0.5f;
    assert_int_equal(
        memra_route_tables_host(logits, 1, &s, NULL, &slabs, sel, selw, ptrs, scl, NULL), MEMRA_OK);
    assert_int_equal(sel[0], 5);
    assert_int_equal(sel[1], 0);
    assert_int_equal(sel[2], 1);
}

static void test_nonfinite_logits_route_to_zero_weights(void **state)
{
    (void)state;
    memra_route_spec s = {8, 3, 1, 1, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_F32, 1, 2.0f, NULL};
    float logits[16];
    for (int e = 0; e < 16; e++)
        logits[e] = (float)e;
    logits[8 + 6] = u2f(0x7f800000u); /* token 1: +inf */
    int32_t sel[6];
    float selw[6], scl[18];
    uint64_t ptrs[18];
    memra_faults f;
    assert_int_equal(memra_route_tables_host(logits, 2, &s, NULL, &slabs, sel, selw, ptrs, scl, &f),
                     MEMRA_ERR_NONFINITE_SCALE);
    assert_non_null(strstr(memra_last_error(), "token 1"));
    assert_int_equal(sel[3], 0), assert_int_equal(sel[4], 1), assert_int_equal(sel[5], 2);
    for (int j = 3; j < 6; j++)
        assert_int_equal(f2u(selw[j]), 0u);
    assert_int_equal(f.nonfinite, 3);
    assert_int_equal(f.first_pair, 3);
    assert_int_equal(sel[0], 7); /* token 0 is routed normally */
}

static void test_bf16_is_its_float_value(void **state)
{
    (void)state;
    config c32 = configs[2], c16 = configs[2];
    c16.spec.logits_dtype = MEMRA_LOGITS_BF16;
    memra_route_spec s16 = spec_of(&c16);
    const uint32_t T = 64;
    uint16_t *lb = make_logits(&s16, T, 99, 1);
    float *lf = malloc((size_t)T * s16.n_expert * 4);
    for (size_t i = 0; i < (size_t)T * s16.n_expert; i++)
        lf[i] = u2f((uint32_t)lb[i] << 16);
    outputs a, b;
    host_route(&c32, lf, T, &a);
    host_route(&c16, lb, T, &b);
    expect_same(&a, &b, (size_t)T * s16.top_k, "bf16 vs its float values");
    outputs_free(&a), outputs_free(&b);
    free(lb), free(lf);
}

static void test_bad_specs(void **state)
{
    (void)state;
    const memra_route_spec good = {256, 8,    8,   4, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_F32,
                                   1,   2.5f, NULL};
    static const struct {
        const char *field;
        int which;
    } cases[] = {{"n_expert", 0},
                 {"n_expert", 1},
                 {"n_group", 2},
                 {"n_group", 3},
                 {"topk_group", 4},
                 {"top_k", 5},
                 {"top_k", 6},
                 {"scoring", 7},
                 {"logits_dtype", 8},
                 {"renormalize", 9},
                 {"routed_scaling_factor", 10},
                 {"routed_scaling_factor", 11},
                 {"bias[3]", 12}};
    float logits[256] = {0}, bias[256] = {0};
    int32_t sel[8] = {-7};
    float selw[8], scl[24];
    uint64_t ptrs[24];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memra_route_spec s = good;
        switch (cases[i].which) {
        case 0:
            s.n_expert = 0;
            break;
        case 1:
            s.n_expert = 2048;
            break;
        case 2:
            s.n_group = 3;
            break;
        case 3:
            s.n_group = 64;
            s.n_expert = 256;
            break;
        case 4:
            s.topk_group = 9;
            break;
        case 5:
            s.top_k = 33;
            break;
        case 6:
            s.topk_group = 1;
            s.top_k = 33;
            break;
        case 7:
            s.scoring = (memra_route_scoring)5;
            break;
        case 8:
            s.logits_dtype = (memra_logits_dtype)7;
            break;
        case 9:
            s.renormalize = 2;
            break;
        case 10:
            s.routed_scaling_factor = 0.0f;
            break;
        case 11:
            s.routed_scaling_factor = u2f(0x7fc00000u);
            break;
        case 12:
            bias[3] = u2f(0x7f800000u);
            s.bias = bias;
            break;
        }
        memra_status st =
            memra_route_tables_host(logits, 1, &s, NULL, &slabs, sel, selw, ptrs, scl, NULL);
        if (st != MEMRA_ERR_INVALID_ARG || !strstr(memra_last_error(), cases[i].field))
            fail_msg("case %zu: %s: %s", i, memra_status_string(st), memra_last_error());
        assert_int_equal(sel[0], -7); /* nothing written */
        bias[3] = 0.0f;
    }
    assert_int_equal(
        memra_route_tables_host(logits, 1, NULL, NULL, &slabs, sel, selw, ptrs, scl, NULL),
        MEMRA_ERR_NULL_ARG);
    assert_int_equal(
        memra_route_tables_host(NULL, 1, &good, NULL, &slabs, sel, selw, ptrs, scl, NULL),
        MEMRA_ERR_NULL_ARG);
    assert_int_equal(
        memra_route_tables_host(logits, 0, &good, NULL, &slabs, sel, selw, ptrs, scl, NULL),
        MEMRA_ERR_INVALID_ARG);
    assert_int_equal(memra_route_tables_host((char *)logits + 2, 1, &good, NULL, &slabs, sel, selw,
                                             ptrs, scl, NULL),
                     MEMRA_ERR_MISALIGNED);
}

/* ---- the device arm, through the mock --------------------------------------- */

typedef struct dev_bufs {
    memra_devptr logits, sel, selw, ptrs, scl;
} dev_bufs;

static void dev_alloc(memra_engine *eng, dev_bufs *d, size_t logit_bytes, size_t n_pairs)
{
    assert_int_equal(memra_alloc(eng, logit_bytes, &d->logits), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, n_pairs * 4, &d->sel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, n_pairs * 4, &d->selw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * n_pairs * 8, &d->ptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * n_pairs * 4, &d->scl), MEMRA_OK);
}

static void dev_free(memra_engine *eng, dev_bufs *d)
{
    memra_free(eng, d->logits), memra_free(eng, d->sel), memra_free(eng, d->selw);
    memra_free(eng, d->ptrs), memra_free(eng, d->scl);
}

/* The outputs, read in order after the work on `s`. */
static void dev_read(memra_engine *eng, const dev_bufs *d, size_t n_pairs, outputs *o,
                     memra_stream s)
{
    outputs_alloc(o, n_pairs);
    assert_int_equal(memra_download_i32_on(eng, o->sel, d->sel, n_pairs, s), MEMRA_OK);
    assert_int_equal(memra_download_f32_on(eng, o->selw, d->selw, n_pairs, s), MEMRA_OK);
    assert_int_equal(memra_download_u64_on(eng, o->ptrs, d->ptrs, 3 * n_pairs, s), MEMRA_OK);
    assert_int_equal(memra_download_f32_on(eng, o->scl, d->scl, 3 * n_pairs, s), MEMRA_OK);
}

static void test_device_matches_host_every_config(void **state)
{
    (void)state;
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    memra_stream own;
    memra_engine_stream(eng, &own);
    for (size_t ci = 0; ci < N_CONFIGS; ci++) {
        const config *c = &configs[ci];
        memra_route_spec s = spec_of(c);
        memra_vrows_macros mac = macros_of(&s, c->with_macros);
        const uint32_t T = 37; /* not a multiple of the 4 tokens a block takes */
        const size_t np = (size_t)T * s.top_k;
        const size_t lbytes = (size_t)T * s.n_expert * (s.logits_dtype ? 2 : 4);
        void *logits = make_logits(&s, T, 5 + ci, 1);
        dev_bufs d;
        dev_alloc(eng, &d, lbytes, np);
        assert_int_equal(memra_copy_htod(eng, d.logits, logits, lbytes), MEMRA_OK);
        memra_faults f0, f1;
        assert_int_equal(memra_engine_faults(eng, own, &f0, 1), MEMRA_OK);
        assert_int_equal(memra_moe_route_tables(eng, d.logits, T, &s, (int)ci,
                                                c->with_macros ? &mac : NULL, &slabs, d.sel, d.selw,
                                                d.ptrs, d.scl, own),
                         MEMRA_OK);
        outputs dv, h;
        dev_read(eng, &d, np, &dv, own);
        host_route(c, logits, T, &h);
        expect_same(&dv, &h, np, c->name);
        assert_int_equal(memra_engine_faults(eng, own, &f1, 1), MEMRA_OK);
        assert_int_equal(f1.nonfinite, h.f.nonfinite);
        assert_int_equal(f1.bad_expert, h.f.bad_expert);
        assert_int_equal(f1.first_pair, h.f.first_pair);
        outputs_free(&dv), outputs_free(&h);
        dev_free(eng, &d);
        free(logits);
    }
    memra_engine_destroy(eng);
}

/* Captured once, replayed with new logits; a changed bias is re-mirrored
 * into the same buffer, which the graph then reads. */
static void test_device_capture_and_replay(void **state)
{
    (void)state;
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    config c = configs[2];
    memra_route_spec s = spec_of(&c);
    memra_vrows_macros mac = macros_of(&s, 1);
    const uint32_t T = 8;
    const size_t np = (size_t)T * s.top_k, lbytes = (size_t)T * s.n_expert * 4;
    dev_bufs d;
    dev_alloc(eng, &d, lbytes, np);
    CUstream cs;
    assert_int_equal(mock_table.cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    assert_int_equal(mock_table.cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_SUCCESS);
    assert_int_equal(memra_moe_route_tables(eng, d.logits, T, &s, 3, &mac, &slabs, d.sel, d.selw,
                                            d.ptrs, d.scl, cs),
                     MEMRA_ERR_CAPTURE); /* not prepared: refused, capture intact */
    CUgraph g;
    assert_int_equal(mock_table.cuStreamEndCapture(cs, &g), CUDA_SUCCESS);
    mock_table.cuGraphDestroy(g);
    assert_int_equal(memra_route_prepare_layer(eng, 3, &s, &mac, cs), MEMRA_OK);
    assert_int_equal(mock_table.cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_SUCCESS);
    assert_int_equal(memra_moe_route_tables(eng, d.logits, T, &s, 3, &mac, &slabs, d.sel, d.selw,
                                            d.ptrs, d.scl, cs),
                     MEMRA_OK);
    assert_int_equal(mock_table.cuStreamEndCapture(cs, &g), CUDA_SUCCESS);
    CUgraphExec x;
    assert_int_equal(mock_table.cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
    for (int rep = 0; rep < 3; rep++) {
        if (rep == 2) { /* a new bias: prepared again, the same graph sees it */
            for (uint32_t e = 0; e < s.n_expert; e++)
                bias_store[e] = (float)(e % 5) * 0.01f;
            assert_int_equal(memra_route_prepare_layer(eng, 3, &s, &mac, cs), MEMRA_OK);
        }
        void *logits = make_logits(&s, T, 1000 + (uint64_t)rep, 0);
        assert_int_equal(memra_copy_htod_async(eng, d.logits, logits, lbytes, cs), MEMRA_OK);
        assert_int_equal(mock_table.cuGraphLaunch(x, cs), CUDA_SUCCESS);
        assert_int_equal(memra_sync(eng, cs), MEMRA_OK);
        outputs dv, h;
        dev_read(eng, &d, np, &dv, cs);
        memra_route_spec hs = s;
        hs.bias = bias_store;
        outputs_alloc(&h, np);
        assert_int_equal(memra_route_tables_host(logits, T, &hs, &mac, &slabs, h.sel, h.selw,
                                                 h.ptrs, h.scl, NULL),
                         MEMRA_OK);
        expect_same(&dv, &h, np, "replay");
        outputs_free(&dv), outputs_free(&h);
        free(logits);
    }
    mock_table.cuGraphExecDestroy(x), mock_table.cuGraphDestroy(g);
    mock_table.cuStreamDestroy(cs);
    dev_free(eng, &d);
    memra_engine_destroy(eng);
}

static void test_device_refuses_bad_input(void **state)
{
    (void)state;
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    memra_route_spec s = {64, 8, 1, 1, MEMRA_ROUTE_SOFTMAX, MEMRA_LOGITS_F32, 0, 1.0f, NULL};
    const int launches = mock.calls[MOCK_cuLaunchKernel];
    assert_int_equal(memra_moe_route_tables(eng, 0, 1, &s, 0, NULL, &slabs, 64, 64, 64, 64, NULL),
                     MEMRA_ERR_NULL_ARG);
    assert_int_equal(memra_moe_route_tables(eng, 66, 1, &s, 0, NULL, &slabs, 64, 64, 64, 64, NULL),
                     MEMRA_ERR_MISALIGNED);
    assert_int_equal(
        memra_moe_route_tables(eng, 64, 1u << 26, &s, 0, NULL, &slabs, 64, 64, 64, 64, NULL),
        MEMRA_ERR_INVALID_ARG);
    s.top_k = 0;
    assert_int_equal(memra_moe_route_tables(eng, 64, 1, &s, 0, NULL, &slabs, 64, 64, 64, 64, NULL),
                     MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(memra_last_error(), "top_k"));
    assert_int_equal(mock.calls[MOCK_cuLaunchKernel], launches);
    memra_engine_destroy(eng);
}

/* Two groups from one program: the host arm (every build, valgrind
 * included) and, with the argument "device", the device arm through the
 * mock (its kernel runs with warps as threads: not under valgrind). */
int main(int argc, char **argv)
{
    const struct CMUnitTest host[] = {
        cmocka_unit_test(test_expf_within_2_ulp),
        cmocka_unit_test(test_expf_edges),
        cmocka_unit_test(test_host_arm_matches_reference),
        cmocka_unit_test(test_ties_go_to_the_lower_index),
        cmocka_unit_test(test_nonfinite_logits_route_to_zero_weights),
        cmocka_unit_test(test_bf16_is_its_float_value),
        cmocka_unit_test(test_bad_specs),
    };
    const struct CMUnitTest device[] = {
        cmocka_unit_test_setup_teardown(test_device_matches_host_every_config, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_capture_and_replay, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_refuses_bad_input, mock_setup, mock_teardown),
    };
    if (argc > 1 && strcmp(argv[1], "device") == 0)
        return cmocka_run_group_tests(device, NULL, NULL);
    return cmocka_run_group_tests(host, NULL, NULL);
}
