/* The routing host arm: docs/routing.md's rules, step for step in the order
 * the kernel (kernels_src/route.cu) takes them, with the same arithmetic
 * (route_math.cuh). The tables are then memra_vrows_tables_host's. */
#include <fenv.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "layout/layout_host.h"
#include "route_spec.h"
#include "vrows/vrows_host.h"

/* route_math.cuh, compiled as C: plain operators in a translation unit built
 * with -ffp-contract=off, in the default floating-point environment. */
typedef uint32_t memra_u32;
typedef uint64_t memra_u64;
#define MEMRA_DEVICE static inline
static inline memra_u32 memra_as_bits(float x)
{
    memra_u32 b;
    memcpy(&b, &x, 4);
    return b;
}
static inline float memra_from_bits(memra_u32 b)
{
    float x;
    memcpy(&x, &b, 4);
    return x;
}
#define memra_add_rn(a, b) ((a) + (b))
#define memra_sub_rn(a, b) ((a) - (b))
#define memra_mul_rn(a, b) ((a) * (b))
#define memra_div_rn(a, b) ((a) / (b))
#include "route_math.cuh"

#define LANES 32

/* The softmax max: a maximum under memra_route_max's total order, which
 * any order of comparing reaches alike (the kernels compare in theirs). */
static float max_of(const float *x, uint32_t n)
{
    float m = memra_from_bits(MEMRA_NEG_INF_BITS);
    for (uint32_t e = 0; e < n; e++)
        m = memra_route_max(m, x[e]);
    return m;
}

/* The fixed order of the softmax sum (docs/routing.md), the definition the
 * kernels' shuffles follow: lane l's partial over experts l, l+32, ... in
 * order, then the xor butterfly 16, 8, 4, 2, 1. */
static float warp_sum(const float *x, uint32_t n)
{
    float v[LANES];
    for (uint32_t l = 0; l < LANES; l++) {
        v[l] = 0.0f;
        for (uint32_t e = l; e < n; e += LANES)
            v[l] = memra_add_rn(v[l], x[e]);
    }
    for (uint32_t off = 16; off > 0; off >>= 1) {
        float nv[LANES];
        for (uint32_t l = 0; l < LANES; l++)
            nv[l] = memra_add_rn(v[l], v[l ^ off]);
        memcpy(v, nv, sizeof v);
    }
    return v[0];
}

/* The bias of expert e as binary32: the host array (checked finite), or
 * the one read in place (bias_ptr, of bias_dtype, unchecked). NULL: none. */
static const void *bias_of(const memra_route_spec *sp, int *dtype)
{
    *dtype = MEMRA_DT_F32;
    if (sp->bias)
        return sp->bias;
    if (sp->bias_dtype == MEMRA_BIAS_BF16)
        *dtype = MEMRA_DT_BF16;
    return (const void *)(uintptr_t)sp->bias_ptr;
}

/* One token: its K = top_k + n_shared experts and weights. Returns 1 when
 * no score can be made of its logits (a NaN; for softmax +inf, or every
 * one -inf) or the bias is not all finite (then experts 0..top_k-1 and the
 * shared ones, weights +0). s and c are scratch of n_expert floats. */
static int route_token(const memra_route_spec *sp, const void *logits, uint32_t t, float *s,
                       float *c, int32_t *sel, float *w)
{
    const uint32_t E = sp->n_expert, K = sp->top_k;
    const int dt = sp->logits_dtype == MEMRA_LOGITS_BF16  ? MEMRA_DT_BF16
                   : sp->logits_dtype == MEMRA_LOGITS_F16 ? MEMRA_DT_F16
                                                          : MEMRA_DT_F32;
    int bias_dt;
    const void *bias = bias_of(sp, &bias_dt);
    const int sigmoid = sp->scoring == MEMRA_ROUTE_SIGMOID;
    int bad = 0;
    for (uint32_t e = 0; e < E; e++) {
        s[e] = memra_route_load(logits, dt, (uint64_t)t * E + e);
        c[e] = bias ? memra_route_load(bias, bias_dt, e) : 0.0f;
        bad |= memra_route_logit_bad(s[e], sigmoid);
        bad |= (memra_as_bits(c[e]) & 0x7f800000u) == 0x7f800000u;
    }
    /* every logit -inf: no softmax (its max is -inf) */
    if (!sigmoid && E && memra_as_bits(max_of(s, E)) == MEMRA_NEG_INF_BITS)
        bad = 1;
    for (uint32_t j = 0; j < sp->n_shared; j++)
        sel[K + j] = (int32_t)(E + j);
    if (bad) {
        for (uint32_t j = 0; j < K + sp->n_shared; j++)
            w[j] = 0.0f;
        for (uint32_t j = 0; j < K; j++)
            sel[j] = (int32_t)j;
        return 1;
    }
    if (sp->scoring == MEMRA_ROUTE_SIGMOID) {
        for (uint32_t e = 0; e < E; e++)
            s[e] = memra_route_sigmoid(s[e]);
    } else {
        const float m = max_of(s, E);
        for (uint32_t e = 0; e < E; e++)
            s[e] = memra_expf(memra_sub_rn(s[e], m));
        const float sum = warp_sum(s, E);
        for (uint32_t e = 0; e < E; e++)
            s[e] = memra_div_rn(s[e], sum);
    }
    for (uint32_t e = 0; e < E; e++)
        c[e] = bias ? memra_add_rn(s[e], c[e]) : s[e];

    const uint32_t G = E / sp->n_group;
    uint32_t allowed = 0xffffffffu;
    if (sp->n_group > 1) {
        const int by_max = memra_route_group_max(sp);
        float gs[MEMRA_ROUTE_MAX_GROUPS];
        for (uint32_t g = 0; g < sp->n_group; g++) {
            memra_u32 k1 = 0, k2 = 0; /* the group's two best, as the kernels merge them */
            for (uint32_t e = g * G; e < g * G + G; e++)
                memra_route_top2_merge(&k1, &k2, memra_route_key(c[e]), 0u);
            gs[g] = memra_route_group_score(k1, k2, by_max, G);
        }
        allowed = 0;
        for (uint32_t r = 0; r < sp->topk_group; r++) {
            float v = memra_from_bits(MEMRA_NEG_INF_BITS);
            int best = INT32_MAX;
            for (uint32_t g = 0; g < sp->n_group; g++)
                if (!((allowed >> g) & 1u) && memra_route_better(gs[g], (int)g, v, best))
                    v = gs[g], best = (int)g;
            allowed |= 1u << best;
        }
    }

    uint8_t chosen[MEMRA_ROUTE_MAX_EXPERT] = {0};
    for (uint32_t j = 0; j < K; j++) {
        float v = memra_from_bits(MEMRA_NEG_INF_BITS);
        int best = INT32_MAX;
        for (uint32_t e = 0; e < E; e++)
            if (!chosen[e] && ((allowed >> (e / G)) & 1u) &&
                memra_route_better(c[e], (int)e, v, best))
                v = c[e], best = (int)e;
        chosen[best] = 1;
        sel[j] = best;
        w[j] = s[best];
    }
    float W = 0.0f; /* the routed scores' sum, in rank order */
    for (uint32_t j = 0; j < K; j++)
        W = memra_add_rn(W, w[j]);
    for (uint32_t j = 0; j < K; j++)
        w[j] = memra_route_finish(w[j], W, sp->renormalize, sp->routed_scaling_factor);
    const float shared = sp->shared_rule == MEMRA_SHARED_ROUTED_SUM
                             ? memra_route_finish(memra_div_rn(W, sp->shared_divisor), W,
                                                  sp->renormalize, sp->routed_scaling_factor)
                             : sp->shared_weight;
    for (uint32_t j = 0; j < sp->n_shared; j++)
        w[K + j] = shared;
    return 0;
}

memra_status memra_route_tables_host(const void *logits, uint32_t n_tokens,
                                     const memra_route_spec *spec, const memra_vrows_macros *macros,
                                     const memra_vrows_slabs *slabs, int32_t *sel, float *selw,
                                     uint64_t *ptrs, float *scl, memra_faults *faults)
{
    static const char fn[] = "memra_route_tables_host";
    int have_macros;
    memra_status st =
        memra_route_validate(fn, (uint64_t)(uintptr_t)logits, n_tokens, spec, macros, slabs,
                             (uint64_t)(uintptr_t)sel, (uint64_t)(uintptr_t)selw,
                             (uint64_t)(uintptr_t)ptrs, (uint64_t)(uintptr_t)scl, &have_macros);
    if (st || n_tokens == 0)
        return st;
    const uint32_t K = memra_route_pairs_per_token(spec), n_pairs = n_tokens * K;
    float *s = malloc(2 * sizeof(float) * spec->n_expert);
    if (!s)
        return memra_fail(MEMRA_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);

    fenv_t saved;
    fegetenv(&saved);
    fesetenv(FE_DFL_ENV);
    const uint32_t n_real = memra_route_n_real((const void *)(uintptr_t)spec->n_real,
                                               spec->n_real_dtype == MEMRA_COUNT_I64, n_tokens);
    uint32_t bad_pairs = 0, first_bad = MEMRA_NO_FAULT;
    for (uint32_t t = 0; t < n_tokens; t++) {
        const size_t at = (size_t)t * K;
        if (t >= n_real) { /* padding: nothing read */
            for (uint32_t j = 0; j < K; j++)
                sel[at + j] = -1, selw[at + j] = 0.0f;
        } else if (route_token(spec, logits, t, s, s + spec->n_expert, sel + at, selw + at)) {
            bad_pairs += K;
            if (first_bad == MEMRA_NO_FAULT)
                first_bad = (uint32_t)at;
        }
    }
    fesetenv(&saved);
    free(s);

    memra_faults f;
    const memra_vrows_options o = memra_route_spec_options(spec);
    st = memra_vrows_tables_host_checked(fn, sel, selw, n_pairs, n_real * K, spec->n_expert,
                                         have_macros ? macros : NULL, slabs, &o, ptrs, scl, &f);
    f.nonfinite += bad_pairs;
    if (first_bad < f.first_pair)
        f.first_pair = first_bad;
    if (faults)
        *faults = f;
    /* One precedence in both host arms: an expert-range fault outranks a
     * non-finite one (the table arm's rule), whichever pair met which. */
    if (st == MEMRA_ERR_EXPERT_RANGE || !bad_pairs)
        return st;
    return memra_fail(MEMRA_ERR_NONFINITE_SCALE,
                      "%s: %u token(s) have a NaN or infinite logit (or meet a non-finite "
                      "bias); the first is token %u (pair %u): routed to experts 0..%u with "
                      "weight +0",
                      fn, bad_pairs / K, first_bad / K, first_bad, spec->top_k - 1);
}

memra_status memra_route_tables_host_ex(const void *logits, uint32_t n_tokens,
                                        const memra_route_spec *spec,
                                        const memra_vrows_macros *macros,
                                        const memra_vrows_slabs *slabs, int32_t *sel, float *selw,
                                        uint64_t *ptrs, float *scl, memra_faults *faults,
                                        const memra_layout_spec *layout_spec,
                                        const memra_layout *layout)
{
    static const char fn[] = "memra_route_tables_host_ex";
    if (!layout_spec && !layout)
        return memra_route_tables_host(logits, n_tokens, spec, macros, slabs, sel, selw, ptrs, scl,
                                       faults);
    /* Everything checked before anything is written, the routing's
     * arguments first, as the device call does. */
    int have_macros;
    memra_status st =
        memra_route_validate(fn, (uint64_t)(uintptr_t)logits, n_tokens, spec, macros, slabs,
                             (uint64_t)(uintptr_t)sel, (uint64_t)(uintptr_t)selw,
                             (uint64_t)(uintptr_t)ptrs, (uint64_t)(uintptr_t)scl, &have_macros);
    memra_layout_params lp;
    const uint32_t n_pairs =
        st ? 0 : n_tokens * memra_route_pairs_per_token(spec); /* spec may be NULL until checked */
    if (st || (st = memra_route_layout_check(fn, spec, (uint64_t)(uintptr_t)sel, n_pairs,
                                             layout_spec, layout, 0, &lp)))
        return st;
    st = memra_route_tables_host(logits, n_tokens, spec, macros, slabs, sel, selw, ptrs, scl,
                                 faults);
    /* A fault status still wrote every output: the layout follows. */
    if (st != MEMRA_OK && st != MEMRA_ERR_EXPERT_RANGE && st != MEMRA_ERR_NONFINITE_SCALE)
        return st;
    const memra_status lst = memra_layout_host_run(fn, sel, n_pairs, &lp);
    return lst ? lst : st;
}
