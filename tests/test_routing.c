/* Routing, without a GPU: memra's exp against a long-double reference; the
 * host arm against a straightforward reference (sorting instead of
 * selection rounds) for each config; ties, NaN/inf/±0/subnormal logits,
 * bfloat16 and float16, both group scorings, a bias read in place, expert
 * parallelism, fused shared experts, zero tokens; bad specs, judged by
 * their bits under FTZ/DAZ; and the device arm through the mock driver,
 * which runs the kernel source on the host (threads as lanes), both
 * kernels bit for bit against the host arm, PDL launches and capture and
 * replay included. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <xmmintrin.h>

#include "testutil.h"

#include "engine/engine.h"
#include "kernel_on_host.h"
#include "mock_fixture.h"
#include "route/route.h"
#include "route/route_cases.h"
#include "route_case_util.h"

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
    const int slow = getenv("MEMRA_UNDER_VALGRIND") != NULL;
    const uint32_t step = slow ? 6101 : 61;
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

/* The forms of exp (route_math.cuh): bit for bit the same. The select
 * forms against the branch form, whose division is the IEEE one; theirs is
 * memra_exp_div (a reciprocal by a quadratic and Newton steps, and a
 * Markstein correction), equal to the IEEE quotient only on the inputs exp
 * gives it: this is what holds it. MEMRA_EXPF_EXHAUSTIVE=1 takes every
 * float (a few minutes on one core; run it after any change to exp). */
static void expf_select_equals_branches(float (*form)(float), const char *name, int nonpos)
{
    /* Every 61st bit pattern (every 6101st under valgrind, every one
     * asked for), then every float within 4096 ulps of each range
     * boundary, both signs. */
    const int slow = getenv("MEMRA_UNDER_VALGRIND") != NULL;
    const char *every = getenv("MEMRA_EXPF_EXHAUSTIVE");
    const uint32_t step = every && strcmp(every, "1") == 0 ? 1 : slow ? 6101 : 61;
    uint64_t n = 0, bad = 0;
    uint32_t first_bad = 0;
    /* A form for x <= 0 (nonpos) is held to it there, -0, +0 and NaNs. */
#define EXPF_CHECK(b)                                                                              \
    do {                                                                                           \
        const float x_ = u2f(b);                                                                   \
        if (nonpos && !((b) >> 31) && (b) != 0u && !isnan(x_))                                     \
            break;                                                                                 \
        const float a_ = form(x_), r_ = memra_expf(x_);                                            \
        n++;                                                                                       \
        if (f2u(a_) != f2u(r_) && !(isnan(a_) && isnan(r_)) && !bad++)                             \
            first_bad = (b);                                                                       \
    } while (0)
    for (uint64_t b = 0; b <= 0xffffffffu; b += step)
        EXPF_CHECK((uint32_t)b);
    const uint32_t edges[] = {0x7f800000u, 0x42b17217u, 0x42cff1b5u, 0x3eb17218u,
                              0x3f851592u, 0x39000000u, 0x42fc0000u, 0x42f80000u};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        for (uint32_t neg = 0; neg < 2; neg++)
            for (uint32_t d = 0; d < 8192; d++)
                EXPF_CHECK((neg << 31) | (edges[i] - 4096u + d));
    /* Every float of 0.5 ln2 < |x| < 1.5 ln2, memra_expf's k = +-1 case,
     * which the select forms compute as the general one (k = +-1 there). */
    for (uint32_t neg = 0; neg < 2; neg++)
        for (uint32_t h = 0x3eb17219u; h < 0x3f851592u; h += slow ? step : 1u)
            EXPF_CHECK((neg << 31) | h);
#undef EXPF_CHECK
    printf("%s vs memra_expf: %llu inputs, %llu differ (first 0x%08x)\n", name,
           (unsigned long long)n, (unsigned long long)bad, first_bad);
    assert_true(n > 100000);
    assert_int_equal(bad, 0);
}

static void test_expf_selects_equal_branches(void **state)
{
    (void)state;
    expf_select_equals_branches(memra_expf_flat, "memra_expf_flat", 0);
}

/* Softmax's form, for x - max (never above zero): memra_expf's bits on
 * every input it is given (the non-positive floats and NaNs), and a
 * positive input does not reach an undefined conversion (UBSan's
 * float-cast-overflow in CI's sanitizer build). */
static void test_expf_nonpos_equals_branches(void **state)
{
    (void)state;
    expf_select_equals_branches(memra_expf_nonpos, "memra_expf_nonpos", 1);
    const uint32_t pos[] = {0x7f800000u, 0x7f7fffffu, 0x42b17218u, 0x43000000u, 0x3f800000u, 1u};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        (void)memra_expf_nonpos(u2f(pos[i]));
}

/* The team kernel's token index at the largest grids the limits allow
 * (2^28 tokens of one pair, 32-lane teams: 2^33 threads): computed in 32
 * bits it wrapped, so token 2^27 + 4 came out as token 4. */
static void test_team_token_past_2_to_the_32_threads(void **state)
{
    (void)state;
    const uint32_t T = 1u << 28;
    assert_int_equal(memra_route_team_token((1u << 25) + 1, 128, 0, 32, T), (1u << 27) + 4);
    assert_int_equal(memra_route_team_token((1u << 26) - 1, 128, 127, 32, T), T - 1);
    assert_int_equal(memra_route_team_token(1u << 26, 128, 0, 32, T), T); /* past the batch */
    assert_int_equal(memra_route_team_token(UINT32_MAX, 1024, 1023, 1, T), T);
    assert_int_equal(memra_route_team_token(3, 128, 5, 4, 1000), (3 * 128 + 5) / 4);
}

/* The team kernel's sigmoid screen (route_common.cuh) stays within 2^-18 of
 * memra's sigmoid on every 61st float, both signs (every 6101st under
 * valgrind): the bound the screening margin (2^-12) is built on, with 32x
 * to spare for the margin's two sides. Non-finite inputs come out finite. */
static void test_sigmoid_screen_within_its_bound(void **state)
{
    (void)state;
    const int slow = getenv("MEMRA_UNDER_VALGRIND") != NULL;
    const uint32_t step = slow ? 6101 : 61;
    double worst = 0.0;
    float worst_x = 0.0f;
    uint64_t n = 0;
    for (uint64_t b = 0; b <= 0xffffffffu; b += step) {
        const float x = u2f((uint32_t)b), a = memra_route_sigmoid_screen(x);
        if (isnan(x) || isinf(x)) {
            assert_true(isfinite(a) && a >= 0.0f && a <= 1.0f);
            continue;
        }
        const double d = fabs((double)a - (double)memra_route_sigmoid(x));
        n++;
        if (d > worst)
            worst = d, worst_x = x;
    }
    printf("sigmoid screen: %llu points, worst %.3g (2^%.2f) at %.9g\n", (unsigned long long)n,
           worst, log2(worst), (double)worst_x);
    assert_true(n > 1000000 / (step / 61));
    assert_true(worst <= 0x1p-18);
}

/* The screen as it was before its 2^n came from the bits of y + 1.5 * 2^23
 * (0x4b400000 + n): from the rounded y converted to an integer. */
static float screen_by_conversion(float x)
{
    float t = -x;
    t = t > -80.0f ? t : -80.0f;
    t = t < 80.0f ? t : 80.0f;
    const float y = t * 1.44269504f, big = 12582912.0f;
    const float nf = (y + big) - big, r = y - nf;
    float p = 1.33335581e-3f;
    p = fmaf(p, r, 9.61812911e-3f);
    p = fmaf(p, r, 5.55041087e-2f);
    p = fmaf(p, r, 2.40226507e-1f);
    p = fmaf(p, r, 6.93147182e-1f);
    p = fmaf(p, r, 1.0f);
    const float d = 1.0f + p * u2f((uint32_t)((int)nf + 127) << 23);
    float g = u2f(0x7ef311c7u - f2u(d));
    for (int i = 0; i < 3; i++)
        g = fmaf(g, fmaf(-d, g, 1.0f), g);
    return g;
}

/* The screen's 2^n by an integer add of yb's bits gives the conversion's
 * bits (the same n for every y it meets, |y| <= 80 log2(e) < 116): every
 * 61st float, both signs, NaN and infinities (every 6101st under valgrind). */
static void test_sigmoid_screen_exponent_from_bits(void **state)
{
    (void)state;
    const uint32_t step = getenv("MEMRA_UNDER_VALGRIND") ? 6101u : 61u;
    uint64_t n = 0;
    for (uint64_t b = 0; b <= 0xffffffffu; b += step, n++) {
        const float x = u2f((uint32_t)b);
        if (f2u(memra_route_sigmoid_screen(x)) != f2u(screen_by_conversion(x)))
            fail_msg("the screen at %a (bits 0x%08x): 0x%08x, by conversion 0x%08x", (double)x,
                     (unsigned)b, (unsigned)f2u(memra_route_sigmoid_screen(x)),
                     (unsigned)f2u(screen_by_conversion(x)));
    }
    const float ends[] = {80.0f, -80.0f, 79.99999f, 0.0f, -0.0f, INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++)
        assert_int_equal(f2u(memra_route_sigmoid_screen(ends[i])),
                         f2u(screen_by_conversion(ends[i])));
    assert_true(n > 0xffffffffu / step);
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

/* A float16 by its definition, in double: (-1)^s 2^(e-15) (1 + m/1024), or
 * 2^-14 (m/1024) when e is 0. */
static float ref_half(uint16_t h)
{
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    if (e == 31)
        return m ? NAN : s ? -INFINITY : INFINITY;
    const double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return (float)(s ? -v : v);
}

static float logit_of(const void *logits, memra_logits_dtype dt, size_t i)
{
    const uint16_t h = dt == MEMRA_LOGITS_F32 ? 0 : ((const uint16_t *)logits)[i];
    return dt == MEMRA_LOGITS_BF16  ? u2f((uint32_t)h << 16)
           : dt == MEMRA_LOGITS_F16 ? ref_half(h)
                                    : ((const float *)logits)[i];
}

/* Expert e's bias, wherever the spec keeps it (host addresses here). */
static float bias_at(const memra_route_spec *sp, uint32_t e, int *present)
{
    *present = 1;
    if (sp->bias)
        return sp->bias[e];
    if (sp->bias_ptr && sp->bias_dtype == MEMRA_BIAS_BF16)
        return u2f((uint32_t)((const uint16_t *)(uintptr_t)sp->bias_ptr)[e] << 16);
    if (sp->bias_ptr)
        return ((const float *)(uintptr_t)sp->bias_ptr)[e];
    *present = 0;
    return 0.0f;
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

/* Token t's K = top_k + n_shared experts and weights. */
static void reference_token(const memra_route_spec *sp, const void *logits, uint32_t t,
                            int32_t *sel, float *w, int *bad)
{
    const uint32_t E = sp->n_expert, K = sp->top_k;
    float x[MEMRA_ROUTE_MAX_EXPERT], s[MEMRA_ROUTE_MAX_EXPERT], c[MEMRA_ROUTE_MAX_EXPERT];
    float b[MEMRA_ROUTE_MAX_EXPERT];
    int has_bias = 0;
    *bad = 0;
    /* No score is made of a NaN logit, nor for softmax of +inf or of a
     * token whose logits are all -inf; -inf alone scores +0. */
    const int sigmoid = sp->scoring == MEMRA_ROUTE_SIGMOID;
    float top = -INFINITY;
    for (uint32_t e = 0; e < E; e++) {
        x[e] = logit_of(logits, sp->logits_dtype, (size_t)t * E + e);
        b[e] = bias_at(sp, e, &has_bias);
        *bad |= isnan(x[e]) || (!sigmoid && x[e] == INFINITY) || !isfinite(b[e]);
        top = x[e] > top ? x[e] : top;
    }
    *bad |= !sigmoid && top == -INFINITY;
    for (uint32_t j = 0; j < sp->n_shared; j++) {
        sel[K + j] = (int32_t)(E + j);
        w[K + j] = *bad ? 0.0f : sp->shared_weight;
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
        c[e] = has_bias ? s[e] + b[e] : s[e];
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
            /* Left at AUTO, vLLM's rule: the bias decides. */
            const int by_max = sp->group_scoring == MEMRA_GROUP_MAX ||
                               (sp->group_scoring == MEMRA_GROUP_AUTO && !has_bias);
            const float score = by_max || G == 1 ? members[0].v : members[0].v + members[1].v;
            groups[g] = (ranked){score, (int)g};
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
    /* SGLang's fused shared expert: the routed scores' sum over its
     * routed_scaling_factor, then renormalized and scaled as the routed. */
    if (sp->shared_rule == MEMRA_SHARED_ROUTED_SUM)
        for (uint32_t j = 0; j < sp->n_shared; j++) {
            float u = sum / sp->shared_divisor;
            if (sp->renormalize && sum > 0.0f)
                u = u / sum;
            w[K + j] = u * sp->routed_scaling_factor;
        }
}

/* ---- configs and inputs ----------------------------------------------------- */

static uint32_t pairs_of(const memra_route_spec *s)
{
    return s->top_k + s->n_shared;
}

static size_t logit_bytes(const memra_route_spec *s, uint32_t T)
{
    return (size_t)T * s->n_expert * route_logit_bytes(s);
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

/* The host arm on case inputs (host addresses in s). */
static void host_route(const memra_route_spec *s, const memra_vrows_macros *mac, const void *logits,
                       uint32_t n_tokens, outputs *o)
{
    outputs_alloc(o, (size_t)n_tokens * pairs_of(s));
    o->st = memra_route_tables_host(logits, n_tokens, s, mac, &slabs, o->sel, o->selw, o->ptrs,
                                    o->scl, &o->f);
}

static void expect_same(const outputs *a, const outputs *b, size_t n_pairs, const char *what)
{
    for (size_t p = 0; p < n_pairs; p++)
        if (a->sel[p] != b->sel[p] || f2u(a->selw[p]) != f2u(b->selw[p]))
            fail_msg("%s: pair %zu: sel %d / %d, selw 0x%08x / 0x%08x", what, p, a->sel[p],
                     b->sel[p], f2u(a->selw[p]), f2u(b->selw[p]));
    for (size_t i = 0; i < 3 * n_pairs; i++)
        if (a->ptrs[i] != b->ptrs[i])
            fail_msg("%s: ptrs[%zu] 0x%llx / 0x%llx", what, i, (unsigned long long)a->ptrs[i],
                     (unsigned long long)b->ptrs[i]);
    for (size_t i = 0; i < 3 * n_pairs; i++)
        if (f2u(a->scl[i]) != f2u(b->scl[i]))
            fail_msg("%s: scl[%zu] 0x%08x / 0x%08x", what, i, f2u(a->scl[i]), f2u(b->scl[i]));
}

/* ---- the host arm against the reference ------------------------------------ */

static void test_host_arm_matches_reference(void **state)
{
    (void)state;
    static route_inputs in;
    for (size_t ci = 0; ci < N_ROUTE_CASES; ci++) {
        const route_case *c = &route_cases[ci];
        const memra_route_spec s = route_case_inputs(c, &in);
        const uint32_t T = 300, K = pairs_of(&s);
        for (int edges = 0; edges < 2; edges++) {
            void *logits = route_case_logits(&s, T, 11 + ci * 7 + (uint64_t)edges, edges);
            outputs h;
            host_route(&s, c->with_macros ? &in.mac : NULL, logits, T, &h);
            uint32_t bad_tokens = 0;
            for (uint32_t t = 0; t < T; t++) {
                int32_t rs[32];
                float rw[32];
                int bad;
                reference_token(&s, logits, t, rs, rw, &bad);
                bad_tokens += bad;
                for (uint32_t j = 0; j < K; j++) {
                    const size_t p = (size_t)t * K + j;
                    if (h.sel[p] != rs[j] || f2u(h.selw[p]) != f2u(rw[j]))
                        fail_msg("%s token %u pair %u: host (%d, 0x%08x), reference (%d, 0x%08x)",
                                 c->name, t, j, h.sel[p], f2u(h.selw[p]), rs[j], f2u(rw[j]));
                }
            }
            /* The tables are the table host arm's from that sel/selw, with
             * the spec's map and shared experts. */
            const size_t np = (size_t)T * K;
            uint64_t *tp = malloc(3 * np * 8);
            float *ts = malloc(3 * np * 4);
            const memra_vrows_options opt = {s.expert_map, s.n_local, s.n_shared};
            memra_faults tf;
            memra_vrows_tables_host_ex(h.sel, h.selw, (uint32_t)np, s.n_expert,
                                       c->with_macros ? &in.mac : NULL, &slabs, &opt, tp, ts, &tf);
            assert_memory_equal(tp, h.ptrs, 3 * np * 8);
            assert_memory_equal(ts, h.scl, 3 * np * 4);
            free(tp), free(ts);
            assert_int_equal(h.st, bad_tokens ? MEMRA_ERR_NONFINITE_SCALE : MEMRA_OK);
            assert_int_equal(h.f.nonfinite, tf.nonfinite + bad_tokens * K);
            assert_int_equal(h.f.not_local, tf.not_local);
            if (s.expert_map)
                assert_true(h.f.not_local > 0); /* most experts live elsewhere */
            if (edges)
                assert_true(bad_tokens > 0);
            printf("%s%s: %u tokens exact (%u with non-finite logits)\n", c->name,
                   edges ? ", edge values" : "", T, bad_tokens);
            outputs_free(&h);
            free(logits);
        }
    }
}

static memra_route_spec plain_spec(uint32_t E, uint32_t K, uint32_t NG, uint32_t TG,
                                   memra_route_scoring scoring, int renorm, float scale)
{
    memra_route_spec s;
    memset(&s, 0, sizeof s);
    s.n_expert = E, s.top_k = K, s.n_group = NG, s.topk_group = TG, s.scoring = scoring;
    s.renormalize = renorm, s.routed_scaling_factor = scale;
    return s;
}

static void test_ties_go_to_the_lower_index(void **state)
{
    (void)state;
    memra_route_spec s = plain_spec(16, 4, 4, 2, MEMRA_ROUTE_SOFTMAX, 0, 1.0f);
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

/* vLLM's grouped_topk without a bias (and DeepSeek-V2) scores a group by
 * its best expert; DeepSeek-V3 by the sum of its two best. A group with one
 * strong expert against a group with two good ones tells them apart. */
static void test_group_scoring_max_and_top2_sum(void **state)
{
    (void)state;
    memra_route_spec s = plain_spec(8, 2, 4, 1, MEMRA_ROUTE_SIGMOID, 0, 1.0f);
    /* groups {0,1} {2,3} {4,5} {6,7}: group 0 has 3.0 and -4; group 1 two 1.5s */
    const float logits[8] = {3.0f, -4.0f, 1.5f, 1.5f, -2.0f, -2.0f, -3.0f, -3.0f};
    int32_t sel[2];
    float selw[2], scl[6];
    uint64_t ptrs[6];
    s.group_scoring = MEMRA_GROUP_MAX;
    assert_int_equal(
        memra_route_tables_host(logits, 1, &s, NULL, &slabs, sel, selw, ptrs, scl, NULL), MEMRA_OK);
    assert_int_equal(sel[0], 0);
    assert_int_equal(sel[1], 1);
    s.group_scoring = MEMRA_GROUP_TOP2_SUM; /* 0.953 + 0.018 < 0.818 + 0.818 */
    assert_int_equal(
        memra_route_tables_host(logits, 1, &s, NULL, &slabs, sel, selw, ptrs, scl, NULL), MEMRA_OK);
    assert_int_equal(sel[0], 2);
    assert_int_equal(sel[1], 3);
}

static void test_nonfinite_logits_route_to_zero_weights(void **state)
{
    (void)state;
    memra_route_spec s = plain_spec(8, 3, 1, 1, MEMRA_ROUTE_SIGMOID, 1, 2.0f);
    float logits[16];
    for (int e = 0; e < 16; e++)
        logits[e] = (float)e;
    logits[8 + 6] = u2f(0x7fc00000u); /* token 1: NaN */
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

/* Which infinite logits leave a token unrouted: those no score is made of,
 * as PyTorch's sigmoid and softmax compute them (engines mask an expert
 * with -inf). Sigmoid: -inf scores +0 and +inf 1, both routed; softmax:
 * -inf beside a finite logit scores +0, but +inf (exp(inf - inf)) and a
 * token of -inf only are not routed. One case a token, host arm. */
static void route_one(memra_route_spec *s, const float *x, int32_t *sel, float *selw,
                      memra_status want_st, uint32_t want_nonfinite)
{
    float scl[3 * 8];
    uint64_t ptrs[3 * 8];
    memra_faults f;
    assert_int_equal(memra_route_tables_host(x, 1, s, NULL, &slabs, sel, selw, ptrs, scl, &f),
                     want_st);
    assert_int_equal(f.nonfinite, want_nonfinite);
}

static void test_infinite_logits_as_pytorch_scores_them(void **state)
{
    (void)state;
    const float inf = u2f(0x7f800000u), ninf = u2f(MEMRA_NEG_INF_BITS);
    int32_t sel[8];
    float selw[8];
    /* sigmoid, renormalized: +inf scores 1, first; -inf scores +0, last */
    memra_route_spec s = plain_spec(8, 3, 1, 1, MEMRA_ROUTE_SIGMOID, 1, 1.0f);
    const float a[8] = {0.5f, ninf, 2.0f, inf, -1.0f, ninf, ninf, ninf};
    route_one(&s, a, sel, selw, MEMRA_OK, 0);
    assert_int_equal(sel[0], 3), assert_int_equal(sel[1], 2), assert_int_equal(sel[2], 0);
    /* every logit -inf under sigmoid: every score +0, the lowest ids, W = 0 */
    const float b[8] = {ninf, ninf, ninf, ninf, ninf, ninf, ninf, ninf};
    route_one(&s, b, sel, selw, MEMRA_OK, 0);
    assert_int_equal(sel[0], 0), assert_int_equal(sel[1], 1), assert_int_equal(sel[2], 2);
    for (int j = 0; j < 3; j++)
        assert_int_equal(f2u(selw[j]), 0u);
    /* a bias chooses a masked expert as it would any other of score 0 */
    float bias[8] = {0};
    bias[5] = 0.75f;
    s.bias = bias;
    route_one(&s, a, sel, selw, MEMRA_OK, 0);
    assert_int_equal(sel[0], 3), assert_int_equal(sel[1], 2), assert_int_equal(sel[2], 5);
    assert_int_equal(f2u(selw[2]), 0u); /* its weight is its score, +0 */
    s.bias = NULL;
    /* softmax: -inf beside finite logits scores +0 */
    memra_route_spec m = plain_spec(8, 2, 1, 1, MEMRA_ROUTE_SOFTMAX, 0, 1.0f);
    const float c[8] = {ninf, 1.0f, ninf, 3.0f, ninf, ninf, ninf, ninf};
    route_one(&m, c, sel, selw, MEMRA_OK, 0);
    assert_int_equal(sel[0], 3), assert_int_equal(sel[1], 1);
    assert_true(selw[0] > 0.8f && selw[1] > 0.1f);
    /* softmax of +inf, or of -inf only: not routed */
    const float d[8] = {0.0f, 1.0f, inf, 3.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    route_one(&m, d, sel, selw, MEMRA_ERR_NONFINITE_SCALE, 2);
    assert_int_equal(sel[0], 0), assert_int_equal(sel[1], 1);
    route_one(&m, b, sel, selw, MEMRA_ERR_NONFINITE_SCALE, 2);
    /* a NaN logit under either: not routed */
    float e[8] = {0.0f, 1.0f, 2.0f, 3.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    e[6] = u2f(0x7fc00000u);
    route_one(&m, e, sel, selw, MEMRA_ERR_NONFINITE_SCALE, 2);
    route_one(&s, e, sel, selw, MEMRA_ERR_NONFINITE_SCALE, 3);
}

/* A bias read in place is not checked (the device cannot check it before
 * the kernel runs): a NaN or infinite value sends every token down the
 * non-finite path, counted, on both arms. The same finite values give the
 * host bias's answers, and a bfloat16 bias its float values'. */
static void test_bias_in_place(void **state)
{
    (void)state;
    static route_inputs in;
    const memra_route_spec base =
        route_case_inputs(&route_cases[2], &in); /* DeepSeek-V3, host bias */
    const uint32_t T = 64, K = base.top_k;
    void *logits = route_case_logits(&base, T, 404, 0);
    outputs a, b, c;
    host_route(&base, &in.mac, logits, T, &a);
    memra_route_spec s = base;
    s.bias = NULL;
    s.bias_ptr = (uint64_t)(uintptr_t)in.bias;
    host_route(&s, &in.mac, logits, T, &b);
    expect_same(&a, &b, (size_t)T * K, "bias in place vs host bias");
    outputs_free(&b);
    /* bfloat16: the same as float32 holding the bfloat16 values */
    float widened[MEMRA_ROUTE_MAX_EXPERT];
    for (uint32_t e = 0; e < s.n_expert; e++)
        widened[e] = u2f((uint32_t)in.bias16[e] << 16);
    s.bias_ptr = (uint64_t)(uintptr_t)widened;
    host_route(&s, &in.mac, logits, T, &b);
    s.bias_ptr = (uint64_t)(uintptr_t)in.bias16, s.bias_dtype = MEMRA_BIAS_BF16;
    host_route(&s, &in.mac, logits, T, &c);
    expect_same(&b, &c, (size_t)T * K, "bf16 bias vs its float values");
    outputs_free(&b), outputs_free(&c);
    /* one NaN: every token non-finite, counted */
    in.bias16[17] = 0x7fc0;
    host_route(&s, &in.mac, logits, T, &b);
    assert_int_equal(b.st, MEMRA_ERR_NONFINITE_SCALE);
    assert_int_equal(b.f.nonfinite, T * K);
    assert_int_equal(b.f.first_pair, 0);
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t j = 0; j < K; j++) {
            assert_int_equal(b.sel[t * K + j], (int32_t)j);
            assert_int_equal(f2u(b.selw[t * K + j]), 0u);
        }
    outputs_free(&a), outputs_free(&b);
    free(logits);
}

static void test_bf16_and_f16_are_their_float_values(void **state)
{
    (void)state;
    static route_inputs in;
    for (int dt = MEMRA_LOGITS_BF16; dt <= MEMRA_LOGITS_F16; dt++) {
        route_case c32 = route_cases[2], c16 = route_cases[2];
        c16.spec.logits_dtype = (memra_logits_dtype)dt;
        const memra_route_spec s16 = route_case_inputs(&c16, &in);
        memra_route_spec s32 = s16;
        s32.logits_dtype = MEMRA_LOGITS_F32;
        (void)c32;
        const uint32_t T = 64;
        uint16_t *lb = route_case_logits(&s16, T, 99, 1);
        float *lf = malloc((size_t)T * s16.n_expert * 4);
        for (size_t i = 0; i < (size_t)T * s16.n_expert; i++)
            lf[i] = logit_of(lb, (memra_logits_dtype)dt, i);
        outputs a, b;
        host_route(&s32, &in.mac, lf, T, &a);
        host_route(&s16, &in.mac, lb, T, &b);
        expect_same(&a, &b, (size_t)T * s16.top_k, dt == 1 ? "bf16 vs float" : "f16 vs float");
        outputs_free(&a), outputs_free(&b);
        free(lb), free(lf);
    }
}

/* Every float16, converted by memra (the same text as the kernel's) and by
 * its definition. */
static void test_every_half_converts_exactly(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float got = memra_half_to_float(h), want = ref_half((uint16_t)h);
        if (isnan(want)) {
            assert_true(isnan(got));
            assert_int_equal(f2u(got) >> 31, h >> 15);
        } else if (f2u(got) != f2u(want)) {
            fail_msg("half 0x%04x: 0x%08x, want 0x%08x", h, f2u(got), f2u(want));
        }
    }
}

/* Expert parallelism and shared experts, by hand: sel keeps global ids;
 * another rank's expert gets NULL and +0, counted apart from faults; local
 * experts and shared experts index the rank's slots. */
static void test_expert_map_and_shared_experts(void **state)
{
    (void)state;
    memra_route_spec s = plain_spec(8, 3, 1, 1, MEMRA_ROUTE_SIGMOID, 0, 1.0f);
    const int32_t map[8] = {-1, 0, -1, 1, 2, -1, -1, -1}; /* experts 1, 3, 4 are here */
    const float pl[5] = {2.0f, 3.0f, 4.0f, 5.0f, 6.0f};   /* slots: 1, 3, 4, shared 0, 1 */
    const memra_vrows_macros mac = {{pl, pl, pl}};
    s.expert_map = (uint64_t)(uintptr_t)map, s.n_local = 3;
    s.n_shared = 2, s.shared_weight = 0.5f;
    const float logits[8] = {0.0f, 0.0f, 0.0f, 4.0f, 3.0f, 0.0f, 5.0f, 0.0f}; /* 6, 3, 4 */
    int32_t sel[5];
    float selw[5], scl[15];
    uint64_t ptrs[15];
    memra_faults f;
    const memra_vrows_slabs sl = {{1000, 2000, 3000}, {10, 20, 30}};
    assert_int_equal(memra_route_tables_host(logits, 1, &s, &mac, &sl, sel, selw, ptrs, scl, &f),
                     MEMRA_OK);
    const int32_t want_sel[5] = {6, 3, 4, 8, 9};
    const int64_t want_slot[5] = {-1, 1, 2, 3, 4};
    for (int j = 0; j < 5; j++) {
        assert_int_equal(sel[j], want_sel[j]);
        if (want_slot[j] < 0) {
            assert_true(ptrs[j] == 0 && ptrs[5 + j] == 0 && ptrs[10 + j] == 0);
            assert_int_equal(f2u(scl[j]), 0), assert_int_equal(f2u(scl[5 + j]), 0);
            assert_int_equal(f2u(scl[10 + j]), 0);
        } else {
            assert_true(ptrs[j] == 1000 + 10 * (uint64_t)want_slot[j]);
            assert_true(ptrs[10 + j] == 3000 + 30 * (uint64_t)want_slot[j]);
            assert_true(scl[j] == pl[want_slot[j]]);
            assert_true(f2u(scl[10 + j]) == f2u(selw[j] * pl[want_slot[j]]));
        }
    }
    assert_true(selw[3] == 0.5f && selw[4] == 0.5f);
    assert_int_equal(f.not_local, 1);
    assert_int_equal(f.bad_expert, 0);
    assert_int_equal(f.first_pair, MEMRA_NO_FAULT);
}

/* SGLang's fused shared expert (MEMRA_SHARED_ROUTED_SUM): its weight is the
 * routed scores' sum W (rank order) over the divisor, then divided by W and
 * scaled like the routed ones; with renormalize off, W / divisor times the
 * scale. A constant never equals it on every token. */
static void test_shared_weight_by_sglang_rule(void **state)
{
    (void)state;
    memra_route_spec s = plain_spec(16, 3, 1, 1, MEMRA_ROUTE_SIGMOID, 1, 2.5f);
    s.n_shared = 1, s.shared_rule = MEMRA_SHARED_ROUTED_SUM, s.shared_divisor = 2.5f;
    float logits[2 * 16];
    for (int i = 0; i < 32; i++)
        logits[i] = (float)((i * 7) % 16) * 0.37f - 2.0f;
    int32_t sel[8];
    float selw[8], scl[24];
    uint64_t ptrs[24];
    for (int renorm = 0; renorm < 2; renorm++) {
        s.renormalize = renorm;
        assert_int_equal(
            memra_route_tables_host(logits, 2, &s, NULL, &slabs, sel, selw, ptrs, scl, NULL),
            MEMRA_OK);
        for (int t = 0; t < 2; t++) {
            float W = 0.0f, sc[3];
            for (int j = 0; j < 3; j++) {
                const float x = logits[t * 16 + sel[t * 4 + j]];
                sc[j] = memra_route_sigmoid(x);
                W = W + sc[j];
            }
            float want = W / 2.5f;
            if (renorm)
                want = want / W;
            want = want * 2.5f;
            assert_int_equal(sel[t * 4 + 3], 16); /* the shared expert's id */
            assert_int_equal(f2u(selw[t * 4 + 3]), f2u(want));
            for (int j = 0; j < 3; j++)
                assert_int_equal(f2u(selw[t * 4 + j]), f2u((renorm ? sc[j] / W : sc[j]) * 2.5f));
        }
    }
}

/* Padded batches: rows at or past the count n_real holds are padding:
 * nothing of them is read (NaN logits there are no fault), their pairs get
 * id -1, weight +0, NULL pointers and +0 scales, counted in `padded`. The
 * count is clamped to [0, n_tokens], int32 or int64. */
static void test_padded_rows(void **state)
{
    (void)state;
    memra_route_spec s = plain_spec(64, 4, 1, 1, MEMRA_ROUTE_SOFTMAX, 1, 1.0f);
    s.n_shared = 1, s.shared_weight = 1.0f;
    enum { T = 10, K = 5 };
    float logits[T * 64];
    for (int i = 0; i < T * 64; i++)
        logits[i] = i >= 6 * 64 ? u2f(0x7fc00000u) : (float)(i % 13) * 0.25f;
    const struct {
        int64_t count;
        int i64;
        uint32_t real;
    } counts[] = {{6, 0, 6}, {6, 1, 6}, {-3, 0, 0}, {100, 1, T}, {0, 0, 0}};
    int32_t sel[T * K];
    float selw[T * K], scl[3 * T * K];
    uint64_t ptrs[3 * T * K];
    memra_faults f;
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        int64_t store = counts[c].count;
        int32_t store32 = (int32_t)counts[c].count;
        s.n_real_dtype = counts[c].i64 ? MEMRA_COUNT_I64 : MEMRA_COUNT_I32;
        s.n_real = counts[c].i64 ? (uint64_t)(uintptr_t)&store : (uint64_t)(uintptr_t)&store32;
        const memra_status st =
            memra_route_tables_host(logits, T, &s, NULL, &slabs, sel, selw, ptrs, scl, &f);
        const uint32_t real = counts[c].real;
        /* NaN logits only in rows 6..9: a fault only where those are real. */
        assert_int_equal(st, real > 6 ? MEMRA_ERR_NONFINITE_SCALE : MEMRA_OK);
        assert_int_equal(f.padded, (T - real) * K);
        assert_int_equal(f.nonfinite, real > 6 ? (real - 6) * K : 0);
        for (uint32_t p = real * K; p < T * K; p++) {
            assert_int_equal(sel[p], -1);
            assert_int_equal(f2u(selw[p]), 0);
            for (int k = 0; k < 3; k++) {
                assert_true(ptrs[k * T * K + p] == 0);
                assert_int_equal(f2u(scl[k * T * K + p]), 0);
            }
        }
        for (uint32_t p = 0; p < real * K && p < 6 * K; p++)
            assert_true(sel[p] >= 0 && ptrs[p] != 0);
    }
}

/* 0.4: a zero-initialised spec routes as vLLM's grouped_topk: groups by
 * their best without a bias (DeepSeek-V2, where the top-2 sum chooses
 * other experts), by their top-2 sum with one. */
static void test_zero_spec_group_scoring_is_vllms(void **state)
{
    (void)state;
    memra_route_spec s = plain_spec(160, 6, 8, 3, MEMRA_ROUTE_SOFTMAX, 0, 16.0f);
    enum { T = 64 };
    static float logits[T * 160], bias[160];
    uint64_t seed = 99;
    for (int i = 0; i < T * 160; i++)
        logits[i] = (float)((int64_t)(rng_next(&seed) >> 11) % 2001 - 1000) / 250.0f;
    for (int e = 0; e < 160; e++)
        bias[e] = (float)(e % 7) * 0.01f;
    static int32_t sel[3][T * 6];
    static float selw[T * 6], scl[3 * T * 6];
    static uint64_t ptrs[3 * T * 6];
    const memra_group_scoring rules[3] = {MEMRA_GROUP_AUTO, MEMRA_GROUP_MAX, MEMRA_GROUP_TOP2_SUM};
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        s.bias = with_bias ? bias : NULL;
        for (int r = 0; r < 3; r++) {
            s.group_scoring = rules[r];
            assert_int_equal(
                memra_route_tables_host(logits, T, &s, NULL, &slabs, sel[r], selw, ptrs, scl, NULL),
                MEMRA_OK);
        }
        /* AUTO is MAX without a bias, TOP2_SUM with one; the two differ. */
        assert_memory_equal(sel[0], sel[with_bias ? 2 : 1], sizeof sel[0]);
        assert_true(memcmp(sel[1], sel[2], sizeof sel[0]) != 0);
    }
}

/* One precedence in both host arms: an expert-range fault (a map value out
 * of range) outranks a non-finite token, as the table arm ranks them. */
static void test_host_fault_precedence(void **state)
{
    (void)state;
    memra_route_spec s = plain_spec(8, 2, 1, 1, MEMRA_ROUTE_SOFTMAX, 1, 1.0f);
    const int32_t map[8] = {0, 1, 2, 3, 40, 5, 6, 7}; /* expert 4's slot is out of range */
    s.expert_map = (uint64_t)(uintptr_t)map, s.n_local = 8;
    float logits[2 * 8] = {0};
    logits[4] = 9.0f;                 /* token 0 chooses expert 4 */
    logits[8 + 1] = u2f(0x7fc00000u); /* token 1 is non-finite */
    int32_t sel[4];
    float selw[4], scl[12];
    uint64_t ptrs[12];
    memra_faults f;
    assert_int_equal(memra_route_tables_host(logits, 2, &s, NULL, &slabs, sel, selw, ptrs, scl, &f),
                     MEMRA_ERR_EXPERT_RANGE);
    assert_int_equal(f.bad_expert, 1);
    assert_int_equal(f.nonfinite, 2);
    assert_int_equal(f.first_pair, 0);
}

static void test_zero_tokens_is_a_no_op(void **state)
{
    (void)state;
    static route_inputs in;
    const memra_route_spec s = route_case_inputs(&route_cases[2], &in);
    memra_faults f = {7, 7, 7, 7, 7};
    assert_int_equal(
        memra_route_tables_host(NULL, 0, &s, &in.mac, &slabs, NULL, NULL, NULL, NULL, &f),
        MEMRA_OK);
    assert_int_equal(f.bad_expert, 7); /* nothing written */
    /* a bad spec is still refused */
    memra_route_spec bad = s;
    bad.top_k = 0;
    assert_int_equal(
        memra_route_tables_host(NULL, 0, &bad, &in.mac, &slabs, NULL, NULL, NULL, NULL, &f),
        MEMRA_ERR_INVALID_ARG);
    int32_t sel[1] = {-7};
    assert_int_equal(memra_vrows_tables_host_ex(NULL, NULL, 0, 8, NULL, NULL, NULL, NULL, NULL, &f),
                     MEMRA_OK);
    assert_int_equal(sel[0], -7);
    assert_int_equal(f.bad_expert, 7);
}

static void test_bad_specs(void **state)
{
    (void)state;
    memra_route_spec good = plain_spec(256, 8, 8, 4, MEMRA_ROUTE_SIGMOID, 1, 2.5f);
    static const struct {
        const char *field;
        memra_status want;
    } cases[] = {{"n_expert", MEMRA_ERR_INVALID_ARG},
                 {"n_expert", MEMRA_ERR_INVALID_ARG},
                 {"n_group", MEMRA_ERR_INVALID_ARG},
                 {"n_group", MEMRA_ERR_INVALID_ARG},
                 {"topk_group", MEMRA_ERR_INVALID_ARG},
                 {"top_k", MEMRA_ERR_INVALID_ARG},
                 {"top_k", MEMRA_ERR_INVALID_ARG},
                 {"scoring", MEMRA_ERR_INVALID_ARG},
                 {"logits_dtype", MEMRA_ERR_INVALID_ARG},
                 {"renormalize", MEMRA_ERR_INVALID_ARG},
                 {"routed_scaling_factor", MEMRA_ERR_INVALID_ARG},
                 {"routed_scaling_factor", MEMRA_ERR_INVALID_ARG},
                 {"bias[3]", MEMRA_ERR_INVALID_ARG},
                 {"group_scoring", MEMRA_ERR_INVALID_ARG},
                 {"bias_dtype", MEMRA_ERR_INVALID_ARG},
                 {"bias_ptr", MEMRA_ERR_INVALID_ARG},
                 {"bias_ptr", MEMRA_ERR_MISALIGNED},
                 {"n_shared", MEMRA_ERR_INVALID_ARG},
                 {"shared_weight", MEMRA_ERR_INVALID_ARG},
                 {"n_local", MEMRA_ERR_INVALID_ARG},
                 {"n_local", MEMRA_ERR_INVALID_ARG},
                 {"expert_map", MEMRA_ERR_MISALIGNED},
                 {"routed_scaling_factor", MEMRA_ERR_INVALID_ARG},
                 {"n_local", MEMRA_ERR_INVALID_ARG},
                 {"shared_rule", MEMRA_ERR_INVALID_ARG},
                 {"shared_divisor", MEMRA_ERR_INVALID_ARG},
                 {"shared_divisor", MEMRA_ERR_INVALID_ARG},
                 {"shared_weight", MEMRA_ERR_INVALID_ARG},
                 {"shared_divisor", MEMRA_ERR_INVALID_ARG},
                 {"n_real_dtype", MEMRA_ERR_INVALID_ARG},
                 {"n_real", MEMRA_ERR_MISALIGNED},
                 {"n_real", MEMRA_ERR_MISALIGNED},
                 {"spec->bias = ", MEMRA_ERR_MISALIGNED},
                 {"spec->bias = ", MEMRA_ERR_MISALIGNED}};
    float logits[256] = {0}, bias[256] = {0};
    int64_t count = 1;
    int32_t map[256] = {0};
    int32_t sel[8] = {-7};
    float selw[8], scl[24];
    uint64_t ptrs[24];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memra_route_spec s = good;
        switch (i) {
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
        case 13:
            s.group_scoring = (memra_group_scoring)3;
            break;
        case 14:
            s.bias_dtype = (memra_bias_dtype)3;
            break;
        case 15:
            s.bias = bias, s.bias_ptr = (uint64_t)(uintptr_t)bias;
            break;
        case 16:
            s.bias_ptr = (uint64_t)(uintptr_t)bias + 2;
            break;
        case 17:
            s.n_shared = 25;
            break;
        case 18:
            s.n_shared = 1, s.shared_weight = u2f(0xff800000u);
            break;
        case 19:
            s.expert_map = (uint64_t)(uintptr_t)map;
            break;
        case 20:
            s.n_local = 4;
            break;
        case 21:
            s.expert_map = (uint64_t)(uintptr_t)map + 2, s.n_local = 4;
            break;
        case 22:
            s.routed_scaling_factor = -0.0f;
            break;
        case 23:
            s.expert_map = (uint64_t)(uintptr_t)map, s.n_local = 5000;
            break;
        case 24:
            s.shared_rule = (memra_shared_rule)2;
            break;
        case 25: /* the rule's divisor: positive and finite */
            s.n_shared = 1, s.shared_rule = MEMRA_SHARED_ROUTED_SUM;
            break;
        case 26:
            s.n_shared = 1, s.shared_rule = MEMRA_SHARED_ROUTED_SUM;
            s.shared_divisor = u2f(0x7f800000u);
            break;
        case 27: /* a constant weight the rule would ignore */
            s.n_shared = 1, s.shared_rule = MEMRA_SHARED_ROUTED_SUM, s.shared_divisor = 2.5f;
            s.shared_weight = 1.0f;
            break;
        case 28: /* a divisor the constant rule would ignore */
            s.n_shared = 1, s.shared_weight = 1.0f, s.shared_divisor = 2.5f;
            break;
        case 29:
            s.n_real = (uint64_t)(uintptr_t)&count, s.n_real_dtype = (memra_count_dtype)2;
            break;
        case 30:
            s.n_real = (uint64_t)(uintptr_t)&count + 2;
            break;
        case 31:
            s.n_real = (uint64_t)(uintptr_t)&count + 4, s.n_real_dtype = MEMRA_COUNT_I64;
            break;
        case 32: /* a host bias off a float's alignment: judged before it is read */
            s.bias = (const float *)(const void *)((const char *)bias + 1);
            break;
        case 33: /* an address no float is at (an integer from Python): crashed the check */
            s.bias = (const float *)(uintptr_t)1;
            break;
        }
        memra_status st =
            memra_route_tables_host(logits, 1, &s, NULL, &slabs, sel, selw, ptrs, scl, NULL);
        if (st != cases[i].want || !strstr(memra_last_error(), cases[i].field))
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
    assert_int_equal(memra_route_tables_host((char *)logits + 2, 1, &good, NULL, &slabs, sel, selw,
                                             ptrs, scl, NULL),
                     MEMRA_ERR_MISALIGNED);
}

/* The spec is judged by its bits: a subnormal routed_scaling_factor (and
 * shared_weight) is accepted with the caller's MXCSR flushing subnormals
 * (FTZ) and treating them as zero (DAZ) or not, and the answers are the
 * same bits either way. */
static void test_spec_judged_by_bits_under_ftz_daz(void **state)
{
    (void)state;
    memra_route_spec s = plain_spec(16, 2, 1, 1, MEMRA_ROUTE_SIGMOID, 0, u2f(0x00000800u));
    s.n_shared = 1, s.shared_weight = u2f(0x00000003u);
    float logits[16];
    for (int e = 0; e < 16; e++)
        logits[e] = (float)(e % 5) - 2.0f;
    int32_t sel[2][3];
    float selw[2][3], scl[2][9];
    uint64_t ptrs[2][9];
    const unsigned csr = _mm_getcsr();
    for (int daz = 0; daz < 2; daz++) {
        _mm_setcsr(daz ? csr | 0x8040u : csr); /* FTZ (bit 15) and DAZ (bit 6) */
        const memra_status st = memra_route_tables_host(logits, 1, &s, NULL, &slabs, sel[daz],
                                                        selw[daz], ptrs[daz], scl[daz], NULL);
        memra_route_spec neg = s;
        neg.routed_scaling_factor = u2f(0x80000800u); /* a negative subnormal: refused */
        const memra_status st_neg = memra_route_tables_host(logits, 1, &neg, NULL, &slabs, sel[daz],
                                                            selw[daz], ptrs[daz], scl[daz], NULL);
        _mm_setcsr(csr);
        assert_int_equal(st, MEMRA_OK);
        assert_int_equal(st_neg, MEMRA_ERR_INVALID_ARG);
    }
    assert_memory_equal(selw[0], selw[1], sizeof selw[0]);
    assert_memory_equal(scl[0], scl[1], sizeof scl[0]);
    assert_true(f2u(selw[0][0]) != 0 && f2u(selw[0][0]) < 0x00800000u); /* subnormal, kept */
    assert_int_equal(f2u(selw[0][2]), 3u);
}

/* ---- the device arm, through the mock --------------------------------------- */

typedef struct dev_bufs {
    memra_devptr logits, sel, selw, ptrs, scl;
    spec_uploads up; /* the spec's bias, map and count (route_case_util.h) */
} dev_bufs;

static void dev_alloc(memra_engine *eng, dev_bufs *d, size_t logit_bytes, size_t n_pairs)
{
    memset(d, 0, sizeof *d);
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
    spec_upload_free(eng, &d->up);
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

/* Changes a case's inputs before they are uploaded (route_case_fault_tables). */
typedef void (*inputs_tweak)(route_inputs *in, const memra_route_spec *s);

/* One config on the device (the kernel `variant` forces), its inputs
 * changed by `tweak` where given, against the host arm: outputs and faults.
 * Returns the host arm's faults. */
static memra_faults device_case_with(memra_engine *eng, const route_case *c, int variant,
                                     uint32_t T, uint64_t seed, int il, inputs_tweak tweak)
{
    static route_inputs in;
    memra_stream own;
    memra_engine_stream(eng, &own);
    memra_route_spec s = route_case_inputs(c, &in);
    route_case_padding(c, &in, &s, T);
    if (tweak)
        tweak(&in, &s);
    const memra_vrows_macros *mac = c->with_macros ? &in.mac : NULL;
    const size_t np = (size_t)T * pairs_of(&s), lbytes = logit_bytes(&s, T);
    void *logits = route_case_logits(&s, T, seed, 1);
    dev_bufs d;
    dev_alloc(eng, &d, lbytes, np);
    const memra_route_spec ds = spec_upload(eng, &s, &d.up);
    assert_int_equal(memra_upload(eng, d.logits, logits, lbytes), MEMRA_OK);
    memra_faults f0, f1;
    assert_int_equal(memra_engine_faults(eng, own, &f0, 1), MEMRA_OK);
    memra_route_variant = variant;
    const memra_status st = memra_route_tables(eng, d.logits, T, &ds, il, mac, &slabs, d.sel,
                                               d.selw, d.ptrs, d.scl, own);
    memra_route_variant = MEMRA_ROUTE_VARIANT_AUTO;
    if (st)
        fail_msg("%s: %s", c->name, memra_last_error());
    outputs dv, h;
    dev_read(eng, &d, np, &dv, own);
    host_route(&s, mac, logits, T, &h);
    char what[256];
    snprintf(what, sizeof what, "%s (%s kernel)", c->name,
             variant == MEMRA_ROUTE_VARIANT_BLOCK        ? "block"
             : variant == MEMRA_ROUTE_VARIANT_WARP_EXACT ? "team, unscreened"
             : variant == MEMRA_ROUTE_VARIANT_AUTO       ? "memra's choice"
                                                         : "team");
    expect_same(&dv, &h, np, what);
    assert_int_equal(memra_engine_faults(eng, own, &f1, 1), MEMRA_OK);
    assert_int_equal(f1.nonfinite, h.f.nonfinite);
    assert_int_equal(f1.bad_expert, h.f.bad_expert);
    assert_int_equal(f1.first_pair, h.f.first_pair);
    assert_int_equal(f1.not_local, h.f.not_local);
    assert_int_equal(f1.padded, h.f.padded);
    if (c->padded)
        assert_int_equal(h.f.padded, (T - route_case_real(T)) * pairs_of(&s));
    const memra_faults hf = h.f;
    outputs_free(&dv), outputs_free(&h);
    dev_free(eng, &d);
    free(logits);
    return hf;
}

static void device_case(memra_engine *eng, const route_case *c, int variant, uint32_t T,
                        uint64_t seed, int il)
{
    (void)device_case_with(eng, c, variant, T, seed, il, NULL);
}

/* Every kernel writes the pairs of a faulting table as the host arm does:
 * the same bits (NaN scales canonical) and the same fault counts, once a
 * pair: the block kernel, the team kernel screened and not, at 8, 9 and
 * 20 pairs a token (a team kernel once wrote a pair's planes from several
 * lanes, and this is the test that held its counts to the host's). */
static void test_device_faulting_tables_every_kernel(void **state)
{
    (void)state;
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    const route_case wide = {
        "64 experts, softmax top-18, 2 shared, rank 1 of 2, x2",
        {ROUTE_SPEC(64, 18, 1, 1, MEMRA_ROUTE_SOFTMAX, MEMRA_LOGITS_F32, 1, 2.0f), .n_shared = 2,
         .shared_weight = 1.5f},
        ROUTE_BIAS_NONE,
        1,
        2,
        0,
        0};
    const route_case *cases[] = {&route_cases[route_case_named("Qwen3-MoE")],
                                 &route_cases[route_case_named("DeepSeek-V3, rank 1")],
                                 &route_cases[route_case_named("DeepSeek-V3: 256")], &wide};
    const int variants[] = {MEMRA_ROUTE_VARIANT_WARP, MEMRA_ROUTE_VARIANT_WARP_EXACT,
                            MEMRA_ROUTE_VARIANT_BLOCK};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
            if (variants[v] == MEMRA_ROUTE_VARIANT_WARP_EXACT &&
                cases[i]->spec.scoring != MEMRA_ROUTE_SIGMOID)
                continue;
            const memra_faults f = device_case_with(eng, cases[i], variants[v], 45, 900 + i,
                                                    60 + (int)i, route_case_fault_tables);
            assert_true(f.nonfinite > 0); /* the case faults as it means to */
            if (cases[i]->ep_ranks > 1)
                assert_true(f.bad_expert > 0 && f.not_local > 0);
        }
    memra_engine_destroy(eng);
}

static void test_device_matches_host_every_config(void **state)
{
    (void)state;
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    /* Both kinds of module: a spec's own (the default, MEMRA_SPECIAL_MODULES
     * of them; the rest take the generic kernels) and the generic ones for
     * every spec. */
    for (int generic = 0; generic < 2; generic++)
        for (size_t ci = 0; ci < N_ROUTE_CASES; ci++) {
            eng->route_specialize = !generic;
            /* Not a multiple of the warp kernel's 4 tokens a block; fewer tokens
             * where a block is 1024 threads. */
            const uint32_t T = route_cases[ci].spec.n_expert > 256 ? 6 : 37;
            device_case(eng, &route_cases[ci], MEMRA_ROUTE_VARIANT_WARP, T, 5 + ci, (int)ci);
            device_case(eng, &route_cases[ci], MEMRA_ROUTE_VARIANT_BLOCK, T, 5 + ci, (int)ci);
            /* The team kernel unscreened. */
            if (route_cases[ci].spec.scoring == MEMRA_ROUTE_SIGMOID)
                device_case(eng, &route_cases[ci], MEMRA_ROUTE_VARIANT_WARP_EXACT, T, 5 + ci,
                            (int)ci);
        }
    memra_engine_destroy(eng);
}

/* The team kernel for up to 32 experts takes two forms by batch size: a
 * lane an expert below MEMRA_ROUTE_FEW_LANES_MIN_TOKENS (16,384: the
 * shorter chain until the batch fills the card), a few lanes of several
 * experts from there (throughput; a forced team kernel takes it at any
 * size). Both equal the host arm on each side of the switch, for every
 * small-expert case of one group (sigmoid and softmax, shared experts, a
 * map, padding; Mixtral's spec-compiled, the others generic). */
static void test_device_team_forms_both_sides_of_the_switch(void **state)
{
    (void)state;
    const uint32_t at = MEMRA_ROUTE_FEW_LANES_MIN_TOKENS;
    assert_int_equal(at, 16384u);
    assert_int_equal(memra_route_team_form(MEMRA_ROUTE_VARIANT_AUTO, 4096), 0);
    assert_int_equal(memra_route_team_form(MEMRA_ROUTE_VARIANT_AUTO, at - 1), 0);
    assert_int_equal(memra_route_team_form(MEMRA_ROUTE_VARIANT_AUTO, at),
                     MEMRA_ROUTE_FLAG_FEW_LANES);
    assert_int_equal(memra_route_team_form(MEMRA_ROUTE_VARIANT_WARP, 1),
                     MEMRA_ROUTE_FLAG_FEW_LANES);
    /* Mixtral: eight lanes a token, or two of four experts. */
    assert_int_equal(MEMRA_ROUTE_TEAM_LANES(8u, 1u, 2u, 0u), 8u);
    assert_int_equal(MEMRA_ROUTE_TEAM_LANES(8u, 1u, 2u, MEMRA_ROUTE_FLAG_FEW_LANES), 2u);
    assert_int_equal(MEMRA_ROUTE_TEAM_LANES(32u, 4u, 6u, MEMRA_ROUTE_FLAG_FEW_LANES), 32u);
    assert_int_equal(MEMRA_ROUTE_TEAM_LANES(5u, 1u, 3u, MEMRA_ROUTE_FLAG_FEW_LANES), 4u);
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    /* The form is one group's choice (several groups keep a lane an expert),
     * so the cases of one group, each in one build (a family's spec-compiled,
     * the others generic): at 16,384 tokens every case in both builds cost
     * the suite minutes on the mock. */
    int cases = 0, family = 0;
    for (size_t ci = 0; ci < N_ROUTE_CASES; ci++) {
        const route_case *rc = &route_cases[ci];
        if (rc->spec.n_expert > 32 || rc->spec.n_group > 1)
            continue;
        eng->route_specialize = route_case_is_family(rc);
        for (uint32_t T = at - 1; T <= at; T++)
            device_case(eng, rc, MEMRA_ROUTE_VARIANT_AUTO, T, 90 + ci + T, (int)ci);
        cases++;
        family |= route_case_is_family(rc);
    }
    assert_true(cases >= 4 && family); /* Mixtral's, spec-compiled, and three more */
    memra_engine_destroy(eng);
}

/* memra's own choice between the block kernel and the team kernel: the
 * block kernel up to 512 tokens and 2^17 of its threads (tokens x experts),
 * never for 32 experts or fewer, always past the team kernels' 512 experts;
 * and each side of the switch equals the host arm, for one spec of each
 * expert count above 32 that a team kernel holds (the batch at the bound
 * and one token more; the spec-compiled build, which memra takes by
 * default). */
static void test_device_block_team_switch(void **state)
{
    (void)state;
    assert_int_equal(memra_route_block_max_tokens(8), 0);
    assert_int_equal(memra_route_block_max_tokens(32), 0);
    assert_int_equal(memra_route_block_max_tokens(33), 512);
    assert_int_equal(memra_route_block_max_tokens(256), 512);
    assert_int_equal(memra_route_block_max_tokens(257), 510);
    assert_int_equal(memra_route_block_max_tokens(384), 341);
    assert_int_equal(memra_route_block_max_tokens(512), 256);
    assert_int_equal(memra_route_block_max_tokens(513), UINT32_MAX);
    assert_int_equal(memra_route_block_max_tokens(1024), UINT32_MAX);
    assert_true(memra_route_use_block(512, 256));
    assert_false(memra_route_use_block(513, 256));
    assert_true(memra_route_use_block(341, 384));
    assert_false(memra_route_use_block(342, 384));
    assert_true(memra_route_use_block(256, 512));
    assert_false(memra_route_use_block(257, 512));
    assert_false(memra_route_use_block(1, 32));
    assert_true(memra_route_use_block(1u << 20, 1024));
    /* The team kernel's form does not move with the kernel's switch. */
    assert_int_equal(memra_route_team_form(MEMRA_ROUTE_VARIANT_AUTO, 513), 0);
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    uint32_t seen = 0; /* the expert counts run, one spec each */
    int done = 0;
    for (size_t ci = 0; ci < N_ROUTE_CASES; ci++) {
        const uint32_t E = route_cases[ci].spec.n_expert;
        const uint32_t bit = 1u << (E / 32u % 32u);
        if (E <= 32u || E > MEMRA_ROUTE_TEAM_MAX_EXPERT || (seen & bit))
            continue;
        seen |= bit;
        eng->route_specialize = 1;
        const uint32_t T = memra_route_block_max_tokens(E);
        assert_true(memra_route_use_block(T, E));
        assert_false(memra_route_use_block(T + 1u, E));
        for (uint32_t t = T; t <= T + 1u; t++)
            device_case(eng, &route_cases[ci], MEMRA_ROUTE_VARIANT_AUTO, t, 300 + ci + t, (int)ci);
        done++;
    }
    assert_true(done >= 5); /* 64, 128, 160, 256, 384, 512 experts */
    memra_engine_destroy(eng);
}

/* The block kernel's final rank holds one candidate a lane when at most 32
 * entries of its lists reach the best top_k-th of any one list, and counts
 * through shared memory past that: 1,024 experts in 32 lists of 32 and a
 * top-32 make more than 32 candidates; groups of 50 or 25 make lanes that
 * hold two lists each, with and without the groups' cut. Both equal the
 * host arm. */
static void test_device_block_many_candidates(void **state)
{
    (void)state;
    static const route_case wide[] = {
        {"1024 experts, softmax top-32",
         {ROUTE_SPEC(1024, 32, 1, 1, MEMRA_ROUTE_SOFTMAX, MEMRA_LOGITS_F32, 1, 1.0f)},
         0,
         0,
         0,
         0,
         0},
        {"1000 experts, 20 groups of 50, top-9 groups, top-32, sigmoid, bias",
         {ROUTE_SPEC(1000, 32, 20, 9, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_F32, 1, 1.0f)},
         ROUTE_BIAS_HOST,
         0,
         0,
         0,
         0},
        {"800 experts, 32 groups of 25, top-32 groups, top-32, sigmoid, bias",
         {ROUTE_SPEC(800, 32, 32, 32, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_F32, 1, 1.0f)},
         ROUTE_BIAS_HOST,
         0,
         0,
         0,
         0},
    };
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    for (int i = 0; i < 3; i++)
        device_case(eng, &wide[i], MEMRA_ROUTE_VARIANT_BLOCK, 3, 77 + i, 40 + i);
    memra_engine_destroy(eng);
}

/* Groups of two experts: the team kernel's lanes past the experts fall in
 * groups 32 and up, which it once shifted a 32-bit mask by (undefined in C;
 * UBSan stops the sanitizer build there). Both kernels equal the host arm. */
static void test_device_groups_of_two(void **state)
{
    (void)state;
    static const route_case twos = {
        "64 experts, 32 groups of 2 by their top-2 sum, top-4 groups, top-4, sigmoid, bias",
        {ROUTE_SPEC(64, 4, 32, 4, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_F32, 1, 1.0f),
         .group_scoring = MEMRA_GROUP_TOP2_SUM},
        ROUTE_BIAS_HOST,
        0,
        0,
        0,
        0};
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    device_case(eng, &twos, MEMRA_ROUTE_VARIANT_WARP, 9, 41, 3);
    device_case(eng, &twos, MEMRA_ROUTE_VARIANT_WARP_EXACT, 9, 41, 3);
    device_case(eng, &twos, MEMRA_ROUTE_VARIANT_BLOCK, 9, 41, 3);
    memra_engine_destroy(eng);
}

/* The screened team kernel lays a grouped family's experts side by side
 * (lane l holds l m to l m + m - 1): a group of whole lanes takes its two
 * best by shuffles (a power-of-two count of lanes, one lane and more), any
 * other size by the scan of its keys in shared memory, indexed by that
 * layout. Each shape, by top-2 sum and by max, screened and not, equals
 * the host arm. */
static void test_device_screened_groups_side_by_side(void **state)
{
    (void)state;
    static const route_case shapes[] = {
        {"192 experts, 16 groups of 12 (2 lanes), top-5 groups, top-6, sigmoid, bias",
         {ROUTE_SPEC(192, 6, 16, 5, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_F32, 1, 2.5f),
          .group_scoring = MEMRA_GROUP_TOP2_SUM},
         ROUTE_BIAS_HOST,
         1,
         0,
         0,
         0},
        {"96 experts, 2 groups of 48 (16 lanes) by max, top-1 group, top-4, sigmoid, bias",
         {ROUTE_SPEC(96, 4, 2, 1, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_F32, 1, 1.0f),
          .group_scoring = MEMRA_GROUP_MAX},
         ROUTE_BIAS_HOST,
         0,
         0,
         0,
         0},
        {"320 experts, 10 groups of 32 (not whole lanes of 10), top-3 groups, top-8, sigmoid",
         {ROUTE_SPEC(320, 8, 10, 3, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_F32, 1, 1.0f),
          .group_scoring = MEMRA_GROUP_TOP2_SUM},
         ROUTE_BIAS_NONE,
         0,
         0,
         0,
         0},
        {"384 experts, 12 groups of 32 by max (not whole lanes of 12), top-4, top-8, bf16, bias",
         {ROUTE_SPEC(384, 8, 12, 4, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_BF16, 1, 2.5f),
          .group_scoring = MEMRA_GROUP_MAX},
         ROUTE_BIAS_IN_PLACE,
         0,
         0,
         0,
         0},
    };
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    for (int i = 0; i < (int)(sizeof shapes / sizeof shapes[0]); i++)
        for (int v = MEMRA_ROUTE_VARIANT_WARP; v <= MEMRA_ROUTE_VARIANT_WARP_EXACT; v++)
            for (uint32_t T = 1; T <= 37; T += 36)
                device_case(eng, &shapes[i], v, T, 600 + (uint64_t)(i * 7 + v) + T, 50 + i);
    memra_engine_destroy(eng);
}

/* The block kernel meets ties across warps and groups, and a token where
 * every expert ties: the same choice as the host arm. */
/* T tokens of f32 logits (uploaded in d) routed by kernel `variant` (no
 * shared experts), read back and held to the host arm bit for bit; the host
 * arm's outputs are left in h for the caller's own expectations. */
/* The same spec with device addresses (ds) and host ones (hs): its bias
 * or map read in place (spec_upload). */
static void variant_matches_host_spec(memra_engine *eng, dev_bufs *d, const memra_route_spec *ds,
                                      const memra_route_spec *hs, const float *logits, uint32_t T,
                                      int variant, const char *what, outputs *h)
{
    memra_route_variant = variant;
    assert_int_equal(memra_route_tables(eng, d->logits, T, ds, 0, NULL, &slabs, d->sel, d->selw,
                                        d->ptrs, d->scl, NULL),
                     MEMRA_OK);
    memra_route_variant = MEMRA_ROUTE_VARIANT_AUTO;
    assert_int_equal(memra_sync(eng, NULL), MEMRA_OK);
    outputs dv;
    dev_read(eng, d, (size_t)T * hs->top_k, &dv, NULL);
    host_route(hs, NULL, logits, T, h);
    expect_same(&dv, h, (size_t)T * hs->top_k, what);
    outputs_free(&dv);
}

static void variant_matches_host(memra_engine *eng, dev_bufs *d, const memra_route_spec *s,
                                 const float *logits, uint32_t T, int variant, const char *what,
                                 outputs *h)
{
    variant_matches_host_spec(eng, d, s, s, logits, T, variant, what, h);
}

/* Crafted logits (T tokens, f32) through one kernel on the device, held to
 * the host arm: the host's outputs in h (the caller frees them). */
static void crafted_matches_host(memra_engine *eng, const memra_route_spec *s, const float *logits,
                                 size_t bytes, uint32_t T, int variant, const char *what,
                                 outputs *h)
{
    dev_bufs d;
    dev_alloc(eng, &d, bytes, (size_t)T * s->top_k);
    assert_int_equal(memra_upload(eng, d.logits, logits, bytes), MEMRA_OK);
    variant_matches_host(eng, &d, s, logits, T, variant, what, h);
    dev_free(eng, &d);
}

static void test_device_crafted_ties(void **state)
{
    (void)state;
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    memra_route_spec s = plain_spec(256, 8, 8, 4, MEMRA_ROUTE_SIGMOID, 1, 1.0f);
    const uint32_t T = 6;
    float logits[6 * 256];
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t e = 0; e < 256; e++)
            logits[t * 256 + e] = t == 0   ? 0.5f                        /* all tied */
                                  : t == 1 ? (float)(e % 3)              /* ties across warps */
                                  : t == 2 ? (e % 32 < 2 ? 3.0f : -1.0f) /* tied groups */
                                  : t == 3 ? (e >= 240 ? 2.0f : 1.0f)    /* the last group */
                                  : t == 4 ? (e == 0 || e == 255 ? 9.0f : 9.0f - 1e-6f)
                                           : -0.0f;
    for (int g = MEMRA_GROUP_TOP2_SUM; g <= MEMRA_GROUP_MAX; g++) {
        s.group_scoring = (memra_group_scoring)g;
        dev_bufs d;
        dev_alloc(eng, &d, sizeof logits, (size_t)T * 8);
        assert_int_equal(memra_upload(eng, d.logits, logits, sizeof logits), MEMRA_OK);
        for (int v = MEMRA_ROUTE_VARIANT_BLOCK; v <= MEMRA_ROUTE_VARIANT_WARP_EXACT; v++) {
            outputs h;
            variant_matches_host(eng, &d, &s, logits, T, v,
                                 v == 1 ? "ties, block kernel" : "ties, warp", &h);
            assert_int_equal(h.sel[0], 0); /* all tied: groups 0..3, experts 0..7 */
            assert_int_equal(h.sel[7], 7);
            outputs_free(&h);
        }
        dev_free(eng, &d);
    }
    memra_engine_destroy(eng);
}

/* route_group_top2_tie's token (route_case_util.h): the fourth group is a
 * tie of two groups' top-2 sums, one of them the sum of two equal keys. The
 * host gives the place to the lower group (its experts 96 and 97 chosen
 * last), and every kernel agrees bit for bit, generic and spec-compiled. */
static void test_device_group_top2_tie(void **state)
{
    (void)state;
    float logits[256], bias[256];
    const memra_route_spec hs = route_group_top2_tie(logits, bias, &slabs);
    for (int special = 0; special <= 1; special++) {
        memra_engine *eng;
        setenv("MEMRA_ROUTE_SPECIALIZE", special ? "1" : "0", 1);
        assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
        unsetenv("MEMRA_ROUTE_SPECIALIZE");
        assert_int_equal(eng->route_specialize, special);
        spec_uploads up;
        const memra_route_spec ds = spec_upload(eng, &hs, &up);
        dev_bufs d;
        dev_alloc(eng, &d, sizeof logits, 8);
        assert_int_equal(memra_upload(eng, d.logits, logits, sizeof logits), MEMRA_OK);
        for (int v = MEMRA_ROUTE_VARIANT_BLOCK; v <= MEMRA_ROUTE_VARIANT_WARP_EXACT; v++) {
            outputs h;
            variant_matches_host_spec(eng, &d, &ds, &hs, logits, 1, v, "group top-2 tie", &h);
            assert_int_equal(h.sel[6], 96);
            assert_int_equal(h.sel[7], 97);
            outputs_free(&h);
        }
        dev_free(eng, &d);
        spec_upload_free(eng, &up);
        memra_engine_destroy(eng);
    }
}

/* A token whose 8th place is a tie the division makes (1 token of E
 * experts, top-8): seven experts at logit 0 (lanes 0 to 6), expert 105 at x_a,
 * expert 104 at the float below x_a whose exp is smaller (each the best of
 * its lane, so the 8th lane's best is 105's exp), every other at `filler`.
 * When the two quotients by the sum round alike, expert 104 (the lower
 * index) takes 8th place though its exp is smaller. Returns whether the
 * host arm says it does. */
static int cut_tie_token(float *row, uint32_t E, float x_a, float filler, const memra_route_spec *s)
{
    const float ea = memra_expf(x_a);
    float x_b = x_a;
    do
        x_b = u2f(f2u(x_b) + 1u); /* x_a < 0: one float further from zero */
    while (memra_expf(x_b) == ea);
    for (uint32_t e = 0; e < E; e++)
        row[e] = e < 7 ? 0.0f : e == 104 ? x_b : e == 105 ? x_a : filler;
    outputs h;
    host_route(s, NULL, row, 1, &h);
    const int tie = h.sel[7] == 104;
    outputs_free(&h);
    return tie;
}

/* Softmax with no bias and one group in the team kernel (eight experts a
 * lane or more: 256 here) ranks by the exps and divides only the
 * candidates' (route_warp.cu, `late_div`): crafted tokens through each of its paths, against the
 * host arm, spec-compiled and generic, weights renormalised and not. Tokens 6 and 7 put at the cut
 * a tie that only the division makes: between exps an ulp apart with normal quotients (the
 * candidates' margin below the 8th lane's exp), and between subnormal quotients (the every-score
 * division of a token whose 8th exp is too small for the margin). */
static void test_device_softmax_late_division(void **state)
{
    (void)state;
    enum { E = 256, T = 8 };
    static float logits[T * E];
    for (uint32_t t = 0; t < 6; t++)
        for (uint32_t e = 0; e < E; e++) {
            float v;
            switch (t) {
            case 0: /* all tied: every expert a candidate (more than 32) */
                v = 0.5f;
                break;
            case 1: /* the rest underflow to 0: the 8th exp is no normal quotient */
                v = e == 77 ? 100.0f : -10.0f;
                break;
            case 2: /* the rest subnormal quotients: divided before they are ranked */
                v = e % 17 == 0 ? 0.0f : -88.0f - (float)(e % 5) * 0.25f;
                break;
            case 3: /* exps an ulp or two apart, which the division can tie */
                v = u2f(0x3f000000u + e % 24u);
                break;
            case 4: /* a few ahead, the cut among near-equal exps */
                v = e % 32 == 5 ? 3.0f : u2f(0x3f800000u + (e * 7u) % 5u);
                break;
            default: /* ordinary */
                v = (float)((e * 37u) % 101u) * 0.03125f - 1.5f;
                break;
            }
            logits[t * E + e] = v;
        }
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    for (int generic = 0; generic < 2; generic++)
        for (int renorm = 0; renorm < 2; renorm++) {
            eng->route_specialize = !generic;
            const memra_route_spec s = plain_spec(E, 8, 1, 1, MEMRA_ROUTE_SOFTMAX, renorm, 1.0f);
            /* Token 6: normal quotients; a filler found by search. */
            int found = 0;
            for (int i = 0; i < 4000 && !found; i++)
                found = cut_tie_token(&logits[6 * E], E, -0x1p-20f, -1.0f - (float)i * 0.001f, &s);
            assert_true(found);
            /* Token 7: subnormal exps (an ulp apart) and quotients, the rest
             * underflowing. */
            found = 0;
            for (int i = 0; i < 400 && !found; i++)
                found = cut_tie_token(&logits[7 * E], E, -94.0f - (float)i * 0.01f, -200.0f, &s);
            assert_true(found);
            outputs h;
            crafted_matches_host(eng, &s, logits, sizeof logits, T, MEMRA_ROUTE_VARIANT_WARP,
                                 "softmax, late division, team kernel", &h);
            for (int j = 0; j < 8; j++)
                assert_int_equal(h.sel[j], j); /* all tied: the lowest indices */
            assert_int_equal(h.sel[8], 77);
            assert_int_equal(h.sel[6 * 8 + 7], 104);
            assert_int_equal(h.sel[7 * 8 + 7], 104);
            outputs_free(&h);
        }
    memra_engine_destroy(eng);
}

/* Ties among more than 32 candidates (the block kernel's two registers a
 * lane): 256 experts in 8 lists, top-8, each list holding fewer tied best
 * experts than top_k, so every tied one is a candidate, in both halves. */
static void test_device_block_ties_many_candidates(void **state)
{
    (void)state;
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    const uint32_t T = 3;
    float logits[3 * 256];
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t e = 0; e < 256; e++) {
            const uint32_t l = e % 32;
            logits[t * 256 + e] = t == 0 ? (l >= 3 && l < 8 ? 2.0f : 1.0f) /* 40 tied, 43 in all */
                                  : t == 1 ? (l >= 25 ? 2.0f : 1.0f)       /* 56 tied, 57 */
                                           : (l >= 25 ? 2.0f : (float)l * 0.01f);
        }
    for (int sc = MEMRA_ROUTE_SOFTMAX; sc <= MEMRA_ROUTE_SIGMOID; sc++) {
        const memra_route_spec s = plain_spec(256, 8, 1, 1, (memra_route_scoring)sc, 1, 1.0f);
        outputs h;
        crafted_matches_host(eng, &s, logits, sizeof logits, T, MEMRA_ROUTE_VARIANT_BLOCK,
                             "ties among many candidates, block kernel", &h);
        assert_int_equal(h.sel[0], 3); /* the tied best, by index */
        assert_int_equal(h.sel[7], 37);
        assert_int_equal(h.sel[8], 25);
        assert_int_equal(h.sel[15], 32 + 25);
        outputs_free(&h);
    }
    memra_engine_destroy(eng);
}

/* The block kernel's final rank where each segment is a warp splits the
 * other warps' lists among 32 / top_k parts of a warp: expert counts with a
 * short last warp, a top_k that does not divide 32, one part (top-32), and
 * ties across warps at the cut, which go to the lower warp without a
 * 64-bit compare. */
static void test_device_final_rank_parts(void **state)
{
    (void)state;
    static const uint32_t cases[][2] = {{384, 8}, {512, 10}, {72, 6}, {160, 3}, {96, 32}, {40, 5}};
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const uint32_t E = cases[c][0], K = cases[c][1], T = 6;
        float *logits = malloc((size_t)T * E * sizeof *logits);
        assert_non_null(logits);
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t e = 0; e < E; e++) {
                const float d = (float)((e * 2654435761u) % 1009u) * 0.001f;
                logits[t * E + e] =
                    t == 0   ? 0.5f                                     /* all tied */
                    : t == 1 ? (float)(e % 3)                           /* across warps */
                    : t == 2 ? (e % 32 == 31 || e % 32 == 0 ? 2.0f : d) /* at the seams */
                    : t == 3 ? (e + 8 >= E ? 2.0f : 1.0f)               /* the last warp */
                    : t == 4 ? (e % 7 == 0 ? 1.5f : d)                  /* ties with others */
                             : d;
            }
        for (int sc = MEMRA_ROUTE_SOFTMAX; sc <= MEMRA_ROUTE_SIGMOID; sc++) {
            const memra_route_spec s = plain_spec(E, K, 1, 1, (memra_route_scoring)sc, 1, 1.0f);
            dev_bufs d;
            dev_alloc(eng, &d, (size_t)T * E * sizeof *logits, (size_t)T * K);
            assert_int_equal(memra_upload(eng, d.logits, logits, (size_t)T * E * sizeof *logits),
                             MEMRA_OK);
            outputs h;
            variant_matches_host(eng, &d, &s, logits, T, MEMRA_ROUTE_VARIANT_BLOCK,
                                 "final rank in parts, block kernel", &h);
            for (uint32_t j = 0; j < K; j++)
                assert_int_equal(h.sel[j], (int)j); /* all tied: the lowest indices */
            outputs_free(&h);
            dev_free(eng, &d);
        }
        free(logits);
    }
    memra_engine_destroy(eng);
}

/* A NaN in a device bias: every token takes the non-finite path on the
 * device as on the host, counted the same. */
static void test_device_nonfinite_bias_in_place(void **state)
{
    (void)state;
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    static route_inputs in;
    const route_case *c = &route_cases[route_case_named("Kimi-K2")]; /* a float32 bias in place */
    memra_route_spec s = route_case_inputs(c, &in);
    in.bias[100] = u2f(0xff800000u);
    const uint32_t T = 5;
    void *logits = route_case_logits(&s, T, 8, 0);
    const size_t np = (size_t)T * s.top_k;
    dev_bufs d;
    dev_alloc(eng, &d, logit_bytes(&s, T), np);
    const memra_route_spec ds = spec_upload(eng, &s, &d.up);
    assert_int_equal(memra_upload(eng, d.logits, logits, logit_bytes(&s, T)), MEMRA_OK);
    memra_faults f;
    assert_int_equal(memra_engine_faults(eng, NULL, &f, 1), MEMRA_OK);
    assert_int_equal(memra_route_tables(eng, d.logits, T, &ds, 0, &in.mac, &slabs, d.sel, d.selw,
                                        d.ptrs, d.scl, NULL),
                     MEMRA_OK); /* the device cannot refuse it: it counts it */
    assert_int_equal(memra_sync(eng, NULL), MEMRA_OK);
    outputs dv, h;
    dev_read(eng, &d, np, &dv, NULL);
    host_route(&s, &in.mac, logits, T, &h);
    assert_int_equal(h.st, MEMRA_ERR_NONFINITE_SCALE);
    expect_same(&dv, &h, np, "non-finite bias in place");
    assert_int_equal(memra_engine_faults(eng, NULL, &f, 1), MEMRA_OK);
    assert_int_equal(f.nonfinite, T * s.top_k);
    assert_int_equal(f.nonfinite, h.f.nonfinite);
    outputs_free(&dv), outputs_free(&h);
    dev_free(eng, &d);
    free(logits);
    memra_engine_destroy(eng);
}

static void test_device_zero_tokens_launch_nothing(void **state)
{
    (void)state;
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    static route_inputs in;
    const memra_route_spec s = route_case_inputs(&route_cases[2], &in);
    const int launches = mock.calls[MOCK_cuLaunchKernel] + mock.calls[MOCK_cuLaunchKernelEx];
    assert_int_equal(memra_route_tables(eng, 0, 0, &s, 0, &in.mac, &slabs, 0, 0, 0, 0, NULL),
                     MEMRA_OK);
    assert_int_equal(memra_vrows_tables_ex(eng, 0, 0, 0, 8, 0, NULL, NULL, NULL, 0, 0, NULL),
                     MEMRA_OK);
    assert_int_equal(mock.calls[MOCK_cuLaunchKernel] + mock.calls[MOCK_cuLaunchKernelEx], launches);
    memra_engine_destroy(eng);
}

/* With PDL on (an sm_90 device, a 13.0 driver) every launch goes through
 * cuLaunchKernelEx with programmatic stream serialization and stays exact;
 * on sm_80, or a driver without cuLaunchKernelEx, it is not in effect. */
static void test_device_pdl(void **state)
{
    (void)state;
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    int active = -1;
    assert_int_equal(memra_engine_set_pdl(eng, 2, &active), MEMRA_ERR_INVALID_ARG);
    assert_int_equal(memra_engine_set_pdl(eng, 1, &active), MEMRA_OK);
    assert_int_equal(active, 1);
    const int ex0 = mock.pdl_launches, plain0 = mock.calls[MOCK_cuLaunchKernel];
    device_case(eng, &route_cases[2], MEMRA_ROUTE_VARIANT_BLOCK, 9, 77, 1);
    device_case(eng, &route_cases[10], MEMRA_ROUTE_VARIANT_WARP, 9, 78, 2);
    assert_int_equal(mock.pdl_launches, ex0 + 2);
    /* the fault reads' own kernel is launched plainly */
    assert_true(mock.calls[MOCK_cuLaunchKernel] > plain0);
    assert_int_equal(memra_engine_set_pdl(eng, 0, &active), MEMRA_OK);
    assert_int_equal(active, 0);
    device_case(eng, &route_cases[2], MEMRA_ROUTE_VARIANT_BLOCK, 3, 79, 1);
    assert_int_equal(mock.pdl_launches, ex0 + 2);
    memra_engine_destroy(eng);

    mock.sm_major = 8;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    assert_int_equal(memra_engine_set_pdl(eng, 1, &active), MEMRA_OK);
    assert_int_equal(active, 0);
    memra_engine_destroy(eng);
    mock.sm_major = 9;
    mock_table.cuLaunchKernelEx = NULL;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    assert_int_equal(memra_engine_set_pdl(eng, 1, &active), MEMRA_OK);
    assert_int_equal(active, 0);
    assert_int_equal(memra_engine_set_pdl(NULL, 1, &active), MEMRA_ERR_NULL_ARG);
    memra_engine_destroy(eng);
}

/* The table kernel with a device map and shared experts (and map values
 * out of range), against memra_vrows_tables_host_ex. */
static void test_device_tables_ex(void **state)
{
    (void)state;
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    const uint32_t E = 64, n_pairs = 1000, n_local = 16, n_shared = 3;
    int32_t map[64], sel[1000];
    float selw[1000], planes[3 * 19];
    uint64_t seed = 31;
    for (uint32_t e = 0; e < E; e++)
        map[e] = e % 4 == 1 ? (int32_t)(e / 4) : e == 62 ? 16 : e == 63 ? -5 : -1;
    for (uint32_t p = 0; p < n_pairs; p++) {
        const uint64_t r = rng_next(&seed);
        sel[p] = (int32_t)(r % (E + n_shared + 2)) - 1; /* -1 .. E + n_shared */
        selw[p] = (float)(r >> 40) / 1000.0f;
    }
    for (int i = 0; i < 3 * 19; i++)
        planes[i] = 0.25f * (float)(i + 1);
    const memra_vrows_macros mac = {{planes, planes + 19, planes + 38}};
    memra_devptr dsel, dselw, dptrs, dscl, dmap;
    assert_int_equal(memra_alloc(eng, 4 * n_pairs, &dsel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 4 * n_pairs, &dselw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 24 * n_pairs, &dptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 12 * n_pairs, &dscl), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 4 * E, &dmap), MEMRA_OK);
    assert_int_equal(memra_upload_i32(eng, dsel, sel, n_pairs), MEMRA_OK);
    assert_int_equal(memra_upload_f32(eng, dselw, selw, n_pairs), MEMRA_OK);
    assert_int_equal(memra_upload_i32(eng, dmap, map, E), MEMRA_OK);
    const memra_vrows_options hopt = {(uint64_t)(uintptr_t)map, n_local, n_shared};
    const memra_vrows_options dopt = {dmap, n_local, n_shared};
    memra_faults hf, f;
    outputs h, dv;
    outputs_alloc(&h, n_pairs);
    assert_int_equal(
        memra_vrows_tables_host_ex(sel, selw, n_pairs, E, &mac, &slabs, &hopt, h.ptrs, h.scl, &hf),
        MEMRA_ERR_EXPERT_RANGE);
    assert_true(hf.not_local > 0 && hf.bad_expert > 0);
    assert_int_equal(memra_engine_faults(eng, NULL, &f, 1), MEMRA_OK);
    assert_int_equal(memra_vrows_tables_ex(eng, dsel, dselw, n_pairs, E, 9, &mac, &slabs, &dopt,
                                           dptrs, dscl, NULL),
                     MEMRA_OK);
    assert_int_equal(memra_engine_faults(eng, NULL, &f, 1), MEMRA_OK);
    assert_int_equal(f.not_local, hf.not_local);
    assert_int_equal(f.bad_expert, hf.bad_expert);
    assert_int_equal(f.nonfinite, hf.nonfinite);
    assert_int_equal(f.first_pair, hf.first_pair);
    outputs_alloc(&dv, n_pairs);
    assert_int_equal(memra_download_u64(eng, dv.ptrs, dptrs, 3 * n_pairs), MEMRA_OK);
    assert_int_equal(memra_download_f32(eng, dv.scl, dscl, 3 * n_pairs), MEMRA_OK);
    assert_memory_equal(dv.ptrs, h.ptrs, 24 * n_pairs);
    assert_memory_equal(dv.scl, h.scl, 12 * n_pairs);
    /* a bad option is named, nothing launched */
    const memra_vrows_options no_local = {dmap, 0, 0};
    assert_int_equal(memra_vrows_tables_ex(eng, dsel, dselw, n_pairs, E, 9, &mac, &slabs, &no_local,
                                           dptrs, dscl, NULL),
                     MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(memra_last_error(), "options->n_local"));
    outputs_free(&h), outputs_free(&dv);
    memra_free(eng, dsel), memra_free(eng, dselw), memra_free(eng, dptrs);
    memra_free(eng, dscl), memra_free(eng, dmap);
    memra_engine_destroy(eng);
}

/* Captured once, replayed with new logits; a changed bias is re-mirrored
 * into the same buffer, which the graph then reads. */
static void test_device_capture_and_replay(void **state)
{
    (void)state;
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    assert_int_equal(memra_engine_set_pdl(eng, 1, NULL), MEMRA_OK); /* captured with PDL */
    static route_inputs in;
    memra_route_spec s = route_case_inputs(&route_cases[2], &in);
    const uint32_t T = 8;
    const size_t np = (size_t)T * s.top_k, lbytes = (size_t)T * s.n_expert * 4;
    dev_bufs d;
    dev_alloc(eng, &d, lbytes, np);
    CUstream cs;
    assert_int_equal(mock_table.cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    assert_int_equal(mock_table.cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_SUCCESS);
    assert_int_equal(memra_route_tables(eng, d.logits, T, &s, 3, &in.mac, &slabs, d.sel, d.selw,
                                        d.ptrs, d.scl, cs),
                     MEMRA_ERR_CAPTURE); /* not prepared: refused, capture intact */
    CUgraph g;
    assert_int_equal(mock_table.cuStreamEndCapture(cs, &g), CUDA_SUCCESS);
    mock_table.cuGraphDestroy(g);
    assert_int_equal(memra_route_prepare_layer(eng, 3, &s, &in.mac, cs), MEMRA_OK);
    assert_int_equal(mock_table.cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_SUCCESS);
    assert_int_equal(memra_route_tables(eng, d.logits, T, &s, 3, &in.mac, &slabs, d.sel, d.selw,
                                        d.ptrs, d.scl, cs),
                     MEMRA_OK);
    assert_int_equal(mock_table.cuStreamEndCapture(cs, &g), CUDA_SUCCESS);
    CUgraphExec x;
    assert_int_equal(mock_table.cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
    for (int rep = 0; rep < 3; rep++) {
        if (rep == 2) { /* a new bias: prepared again, the same graph sees it */
            for (uint32_t e = 0; e < s.n_expert; e++)
                in.bias[e] = (float)(e % 5) * 0.01f;
            assert_int_equal(memra_route_prepare_layer(eng, 3, &s, &in.mac, cs), MEMRA_OK);
        }
        void *logits = route_case_logits(&s, T, 1000 + (uint64_t)rep, 0);
        assert_int_equal(memra_upload_async(eng, d.logits, logits, lbytes, cs), MEMRA_OK);
        assert_int_equal(mock_table.cuGraphLaunch(x, cs), CUDA_SUCCESS);
        assert_int_equal(memra_sync(eng, cs), MEMRA_OK);
        outputs dv, h;
        dev_read(eng, &d, np, &dv, cs);
        host_route(&s, &in.mac, logits, T, &h);
        assert_int_equal(h.st, MEMRA_OK);
        expect_same(&dv, &h, np, "replay");
        outputs_free(&dv), outputs_free(&h);
        free(logits);
    }
    mock_table.cuGraphExecDestroy(x), mock_table.cuGraphDestroy(g);
    mock_table.cuStreamDestroy(cs);
    dev_free(eng, &d);
    memra_engine_destroy(eng);
}

/* ---- specialisation: a routing module per layer spec ----------------------- */

/* The defines a module for spec s begins with. */
static void spec_defines_of(const memra_route_spec *s, char *buf, size_t n)
{
    snprintf(buf, n,
             "#define MEMRA_SPEC_E %uu\n#define MEMRA_SPEC_NG %uu\n#define MEMRA_SPEC_TG %uu\n"
             "#define MEMRA_SPEC_K %uu\n#define MEMRA_SPEC_FLAGS %uu",
             s->n_expert, s->n_group, s->topk_group, s->top_k,
             memra_route_flags(s) & ~MEMRA_ROUTE_FLAGS_OF_CALL);
}

/* With specialisation on, the six benchmark families route through both
 * kernels equal to the host arm, the mock running the kernels' text
 * compiled with each family's spec as constants; each (kernel, spec) is
 * compiled once, with the spec's counts and the flags a layer fixes as the
 * source's leading defines, and a second call compiles nothing. */
/* Specialisation is on unless the environment turns it off, read when an
 * engine is created. */
static void test_specialize_is_the_default(void **state)
{
    (void)state;
    memra_engine *eng;
    unsetenv("MEMRA_ROUTE_SPECIALIZE");
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    assert_int_equal(eng->route_specialize, 1);
    memra_engine_destroy(eng);
    setenv("MEMRA_ROUTE_SPECIALIZE", "Off", 1);
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    unsetenv("MEMRA_ROUTE_SPECIALIZE");
    assert_int_equal(eng->route_specialize, 0);
    memra_engine_destroy(eng);
}

static void test_device_specialized_matches_host(void **state)
{
    (void)state;
    memra_engine *eng;
    setenv("MEMRA_ROUTE_SPECIALIZE", "on", 1); /* as a user turns it on */
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    unsetenv("MEMRA_ROUTE_SPECIALIZE");
    assert_int_equal(eng->route_specialize, 1);
    int done = 0;
    for (size_t ci = 0; ci < N_ROUTE_CASES; ci++) {
        if (!route_case_is_family(&route_cases[ci]))
            continue;
        static route_inputs in;
        memra_route_spec s = route_case_inputs(&route_cases[ci], &in);
        route_case_padding(&route_cases[ci], &in, &s, 5);
        char want[256];
        spec_defines_of(&s, want, sizeof want);
        const uint32_t T = s.n_expert > 256 ? 6 : 37;
        for (int v = MEMRA_ROUTE_VARIANT_BLOCK; v <= MEMRA_ROUTE_VARIANT_WARP; v++) {
            const int before = mock.spec_programs, runs = mock.spec_host_runs;
            device_case(eng, &route_cases[ci], v, T, 40 + ci, (int)ci);
            assert_int_equal(mock.spec_programs, before + 1);
            /* run by the mock's build of this spec (tests/meson.build
             * builds one a row of route/route_families.h), not the generic
             * text */
            assert_int_equal(mock.spec_host_runs, runs + 1);
            if (strcmp(mock.spec_defines, want) != 0)
                fail_msg("%s: compiled with\n%s\nnot\n%s", route_cases[ci].name, mock.spec_defines,
                         want);
            device_case(eng, &route_cases[ci], v, T, 41 + ci, (int)ci);
            assert_int_equal(mock.spec_programs, before + 1);
        }
        done++;
    }
    assert_int_equal(done, 6);
    assert_int_equal(atomic_load(&eng->n_special), 12);
    memra_engine_destroy(eng);
}

/* Whether a layer has a bias is part of its spec's key
 * (MEMRA_ROUTE_FLAG_BIAS): a spec's build takes the bias as there or not
 * at compile time, so a layer without one must not share a biased layer's
 * build, nor the other way round. The same counts with a mirrored bias,
 * without one and with one read in place: two builds, the third call
 * taking the first's, each call equal to the host arm. */
static void test_device_specialized_bias_is_its_own_build(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    assert_int_equal(eng->route_specialize, 1);
    route_case c = route_cases[route_case_named("GLM-4.5: 160")];
    const int bias[] = {ROUTE_BIAS_HOST, ROUTE_BIAS_NONE, ROUTE_BIAS_IN_PLACE};
    const int builds[] = {1, 1, 0};
    for (int i = 0; i < 3; i++) {
        c.bias = bias[i];
        const int before = mock.spec_programs;
        device_case(eng, &c, MEMRA_ROUTE_VARIANT_WARP, 37, 70 + (uint64_t)i, i);
        assert_int_equal(mock.spec_programs, before + builds[i]);
        if (builds[i])
            assert_int_equal((mock_last_spec_flags() & MEMRA_ROUTE_FLAG_BIAS) != 0,
                             bias[i] != ROUTE_BIAS_NONE);
    }
    memra_engine_destroy(eng);
}

/* An engine with specialisation on, buffers for T tokens of E f32 logits,
 * top-8, and (with `logits`) the logits, in [-2, 2) from a multiplicative
 * hash, uploaded (the host copy returned for the host arm). */
static memra_engine *specialized_engine(dev_bufs *d, uint32_t T, uint32_t E, uint32_t mult,
                                        float **logits)
{
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    eng->route_specialize = 1;
    dev_alloc(eng, d, (size_t)T * E * 4, (size_t)T * 8);
    if (logits) {
        const uint32_t n = T * E;
        *logits = malloc((size_t)n * 4);
        for (uint32_t i = 0; i < n; i++)
            (*logits)[i] = (float)((i * mult) % 1000u) / 250.0f - 2.0f;
        assert_int_equal(memra_upload(eng, d->logits, *logits, (size_t)n * 4), MEMRA_OK);
    }
    return eng;
}

/* Past MEMRA_SPECIAL_MODULES specs an engine routes with the generic
 * kernel, still equal to the host arm; specs that differ in one count or
 * one flag each get their own module. */
static void test_device_specialized_table_full(void **state)
{
    (void)state;
    const uint32_t T = 5, E = 64;
    dev_bufs d;
    float *logits;
    memra_engine *eng = specialized_engine(&d, T, E, 2654435761u, &logits);
    for (int i = 0; i < MEMRA_SPECIAL_MODULES + 2; i++) {
        /* the groups, the scoring and renormalising make 24 specs a
         * top-k: top-8, then top-7 */
        const uint32_t ng = i % 2 ? 8u : 4u;
        memra_route_spec s =
            plain_spec(E, 8u - (uint32_t)(i / 24), ng, (uint32_t)(i / 4 % 3 + 1) * ng / 4u + 1u,
                       i / 2 % 2 ? MEMRA_ROUTE_SIGMOID : MEMRA_ROUTE_SOFTMAX, i / 12 % 2, 1.0f);
        s.topk_group = s.topk_group > ng ? ng : s.topk_group;
        const int before = mock.spec_programs;
        outputs h;
        variant_matches_host(eng, &d, &s, logits, T, MEMRA_ROUTE_VARIANT_BLOCK, "spec", &h);
        outputs_free(&h);
        assert_int_equal(mock.spec_programs, before + (i < MEMRA_SPECIAL_MODULES ? 1 : 0));
    }
    assert_int_equal(atomic_load(&eng->n_special), MEMRA_SPECIAL_MODULES);
    free(logits);
    dev_free(eng, &d);
    memra_engine_destroy(eng);
}

/* T tokens of d's logits routed with spec s on stream cs. */
static memra_status route_on(memra_engine *eng, const dev_bufs *d, uint32_t T,
                             const memra_route_spec *s, CUstream cs)
{
    return memra_route_tables(eng, d->logits, T, s, 0, NULL, &slabs, d->sel, d->selw, d->ptrs,
                              d->scl, cs);
}

/* Under capture a spec's module is never compiled: a prepared layer's is
 * taken, and a spec first met there takes the generic kernel (prepare loads
 * it beside the spec's own); an engine with nothing loaded refuses the
 * call, the capture intact. */
static void test_device_specialized_capture(void **state)
{
    (void)state;
    const uint32_t T = 4, E = 64;
    const memra_route_spec a = plain_spec(E, 8, 1, 1, MEMRA_ROUTE_SOFTMAX, 1, 1.0f),
                           b = plain_spec(E, 8, 8, 2, MEMRA_ROUTE_SIGMOID, 1, 2.5f);
    dev_bufs d;
    memra_engine *eng = specialized_engine(&d, T, E, 0, NULL);
    CUstream cs;
    assert_int_equal(mock_table.cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUgraph g;
    assert_int_equal(mock_table.cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_SUCCESS);
    assert_int_equal(route_on(eng, &d, T, &a, cs), MEMRA_ERR_CAPTURE);
    assert_int_equal(mock_table.cuStreamEndCapture(cs, &g), CUDA_SUCCESS);
    mock_table.cuGraphDestroy(g);
    assert_int_equal(mock.spec_programs, 0);
    assert_int_equal(memra_route_prepare_layer(eng, 0, &a, NULL, cs), MEMRA_OK);
    const int prepared = mock.spec_programs;
    assert_int_equal(prepared, 2); /* the block and the team kernel for a */
    assert_int_equal(mock_table.cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_SUCCESS);
    assert_int_equal(route_on(eng, &d, T, &a, cs), MEMRA_OK);
    assert_int_equal(route_on(eng, &d, T, &b, cs), MEMRA_OK); /* the generic kernel */
    assert_int_equal(mock_table.cuStreamEndCapture(cs, &g), CUDA_SUCCESS);
    CUgraphExec x;
    assert_int_equal(mock_table.cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
    assert_int_equal(mock_table.cuGraphLaunch(x, cs), CUDA_SUCCESS);
    assert_int_equal(memra_sync(eng, cs), MEMRA_OK);
    mock_table.cuGraphExecDestroy(x), mock_table.cuGraphDestroy(g);
    assert_int_equal(mock.spec_programs, prepared);
    assert_int_equal(atomic_load(&eng->n_special), 2);
    mock_table.cuStreamDestroy(cs);
    dev_free(eng, &d);
    memra_engine_destroy(eng);
}

/* A spec's module that cannot be built (NVRTC fails here; in the field, a
 * process with no NVRTC beside a cache that holds the generic kernels)
 * leaves the spec to the generic kernel: the call succeeds, equal to the
 * host arm, and the failure is remembered, not compiled again each call. */
static void test_device_specialized_build_failure(void **state)
{
    (void)state;
    const uint32_t T = 5, E = 64;
    dev_bufs d;
    float *logits;
    memra_engine *eng = specialized_engine(&d, T, E, 40503u, &logits);
    const memra_route_spec s = plain_spec(E, 8, 8, 3, MEMRA_ROUTE_SIGMOID, 1, 2.5f);
    outputs h;
    eng->route_specialize = 0; /* the generic kernel loaded, as prepare loads it */
    variant_matches_host(eng, &d, &s, logits, T, MEMRA_ROUTE_VARIANT_BLOCK, "generic", &h);
    outputs_free(&h);
    eng->route_specialize = 1;
    mock.compile_log = "k.cu(1): error: injected";
    int tried = 0; /* the programs the first call tried (a CUBIN, then PTX) */
    for (int call = 0; call < 3; call++) {
        variant_matches_host(eng, &d, &s, logits, T, MEMRA_ROUTE_VARIANT_BLOCK, "fallback", &h);
        outputs_free(&h);
        if (call == 0)
            tried = mock.spec_programs;
        assert_true(tried > 0);
        assert_int_equal(mock.spec_programs, tried);
    }
    mock.compile_log = NULL;
    assert_int_equal(atomic_load(&eng->n_special), 1);
    assert_null(eng->special[0].f);
    free(logits);
    dev_free(eng, &d);
    memra_engine_destroy(eng);
}

static void test_device_refuses_bad_input(void **state)
{
    (void)state;
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    memra_route_spec s = plain_spec(64, 8, 1, 1, MEMRA_ROUTE_SOFTMAX, 0, 1.0f);
    const int launches = mock.calls[MOCK_cuLaunchKernel];
    assert_int_equal(memra_route_tables(eng, 0, 1, &s, 0, NULL, &slabs, 64, 64, 64, 64, NULL),
                     MEMRA_ERR_NULL_ARG);
    assert_int_equal(memra_route_tables(eng, 66, 1, &s, 0, NULL, &slabs, 64, 64, 64, 64, NULL),
                     MEMRA_ERR_MISALIGNED);
    assert_int_equal(
        memra_route_tables(eng, 64, 1u << 26, &s, 0, NULL, &slabs, 64, 64, 64, 64, NULL),
        MEMRA_ERR_INVALID_ARG);
    s.top_k = 0;
    assert_int_equal(memra_route_tables(eng, 64, 1, &s, 0, NULL, &slabs, 64, 64, 64, 64, NULL),
                     MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(memra_last_error(), "top_k"));
    s.top_k = 8, s.n_shared = 1, s.shared_weight = u2f(0x7fc00000u);
    assert_int_equal(memra_route_tables(eng, 64, 1, &s, 0, NULL, &slabs, 64, 64, 64, 64, NULL),
                     MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(memra_last_error(), "shared_weight"));
    assert_int_equal(mock.calls[MOCK_cuLaunchKernel], launches);
    memra_engine_destroy(eng);
}

/* Two groups from one program: the host arm (every build, valgrind
 * included) and, with the argument "device", the device arm through the
 * mock (its kernels run with threads as lanes: not under valgrind). */
int main(int argc, char **argv)
{
    const struct CMUnitTest host[] = {
        cmocka_unit_test(test_expf_within_2_ulp),
        cmocka_unit_test(test_expf_edges),
        cmocka_unit_test(test_expf_selects_equal_branches),
        cmocka_unit_test(test_expf_nonpos_equals_branches),
        cmocka_unit_test(test_team_token_past_2_to_the_32_threads),
        cmocka_unit_test(test_sigmoid_screen_within_its_bound),
        cmocka_unit_test(test_sigmoid_screen_exponent_from_bits),
        cmocka_unit_test(test_host_arm_matches_reference),
        cmocka_unit_test(test_ties_go_to_the_lower_index),
        cmocka_unit_test(test_group_scoring_max_and_top2_sum),
        cmocka_unit_test(test_nonfinite_logits_route_to_zero_weights),
        cmocka_unit_test(test_infinite_logits_as_pytorch_scores_them),
        cmocka_unit_test(test_bias_in_place),
        cmocka_unit_test(test_bf16_and_f16_are_their_float_values),
        cmocka_unit_test(test_every_half_converts_exactly),
        cmocka_unit_test(test_expert_map_and_shared_experts),
        cmocka_unit_test(test_zero_tokens_is_a_no_op),
        cmocka_unit_test(test_shared_weight_by_sglang_rule),
        cmocka_unit_test(test_padded_rows),
        cmocka_unit_test(test_zero_spec_group_scoring_is_vllms),
        cmocka_unit_test(test_host_fault_precedence),
        cmocka_unit_test(test_bad_specs),
        cmocka_unit_test(test_spec_judged_by_bits_under_ftz_daz),
    };
    const struct CMUnitTest device[] = {
        cmocka_unit_test_setup_teardown(test_device_matches_host_every_config, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_faulting_tables_every_kernel, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_groups_of_two, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_block_ties_many_candidates, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_block_many_candidates, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_screened_groups_side_by_side, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_crafted_ties, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_group_top2_tie, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_final_rank_parts, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_nonfinite_bias_in_place, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_zero_tokens_launch_nothing, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_pdl, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_tables_ex, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_capture_and_replay, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_refuses_bad_input, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_specialize_is_the_default, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_team_forms_both_sides_of_the_switch, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_block_team_switch, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_softmax_late_division, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_specialized_matches_host, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_specialized_bias_is_its_own_build, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_specialized_table_full, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_specialized_capture, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_specialized_build_failure, mock_setup,
                                        mock_teardown),
    };
    if (argc > 1 && strcmp(argv[1], "device") == 0)
        return cmocka_run_group_tests(device, NULL, NULL);
    return cmocka_run_group_tests(host, NULL, NULL);
}
