/* The tests' helpers around route_cases.h: a case by the start of its
 * name, and a routing spec's host-address inputs (route_case_inputs,
 * route_case_padding: the bias read in place, the expert map, the
 * real-token count) put on the device for a device call. */
#ifndef MEMRA_ROUTE_CASE_UTIL_H
#define MEMRA_ROUTE_CASE_UTIL_H

#include <stdint.h>
#include <string.h>

#include <memra/memra.h>

#include "testutil.h"

#include "route/route_cases.h"

/* The index of the route case whose name starts with `prefix`. */
static inline size_t route_case_named(const char *prefix)
{
    for (size_t ci = 0; ci < N_ROUTE_CASES; ci++)
        if (strncmp(route_cases[ci].name, prefix, strlen(prefix)) == 0)
            return ci;
    fail_msg("no route case named %s", prefix);
    return 0;
}

/* Macro planes and an expert map that make a route case's tables fault,
 * in `in` (route_case_inputs' arrays, before any upload): in three slots
 * of every four a NaN with a payload (up), a down value whose product with
 * a weight above 1.14 overflows, +inf (gate), and -NaN (down) in one slot
 * of every eight; under an expert map, every other local expert's entry
 * out of range (past the local slots, or below -1). */
static inline void route_case_fault_tables(route_inputs *in, const memra_route_spec *s)
{
    const uint32_t n = in->n_slots;
    const uint32_t nan_payload = 0x7fa00001u, neg_nan = 0xffc00000u;
    for (uint32_t k = 0; k < n; k++) {
        if (k % 4 == 1)
            memcpy(&in->planes[n + k], &nan_payload, 4);
        if (k % 4 == 2)
            in->planes[2 * (size_t)n + k] = 3.0e38f;
        if (k % 4 == 3)
            in->planes[k] = 1.0f / 0.0f;
        if (k % 8 == 4)
            memcpy(&in->planes[2 * (size_t)n + k], &neg_nan, 4);
    }
    int hits = 0;
    for (uint32_t e = 0; s->expert_map && e < s->n_expert; e++)
        if (in->map[e] >= 0 && in->map[e] % 2 == 0)
            in->map[e] = hits++ % 2 ? (int32_t)s->n_local + 5 : -7;
}

/* sigmoid(x) as the host arm computes a score: a one-expert token's weight
 * (no renormalisation, scale 1: the score itself). */
static inline float route_host_sigmoid(float x, const memra_vrows_slabs *slabs)
{
    memra_route_spec one;
    memset(&one, 0, sizeof one);
    one.n_expert = 1, one.top_k = 1, one.n_group = 1, one.topk_group = 1;
    one.scoring = MEMRA_ROUTE_SIGMOID, one.routed_scaling_factor = 1.0f;
    int32_t sel;
    float selw, scl[3];
    uint64_t ptrs[3];
    assert_int_equal(
        memra_route_tables_host(&x, 1, &one, NULL, slabs, &sel, &selw, ptrs, scl, NULL), MEMRA_OK);
    return selw;
}

/* One DeepSeek-V3 token (256 experts, 8 groups of 32, top-4 groups, top-8,
 * sigmoid with a bias read in place from `bias`) whose fourth group is a tie
 * that only a group's two equal best make. Group 3's experts 96 and 97 both
 * choose at v (one logit, bias 0); group 4's 128 and 129 at v + u and v - u
 * (the same logit, biases +u and -u, u = v's ulp): both groups score 2v
 * exactly, and group 3, the lower, takes the place, so the host picks 96 and
 * 97 last. v's last bit is odd, so a group score that took its second key
 * for the value below v would round 2v - u down to 2v - 2u and hand the
 * place to group 4. Groups 0-2 hold two experts at logit 4, every other
 * expert is at -8. */
static inline memra_route_spec route_group_top2_tie(float *logits, float *bias,
                                                    const memra_vrows_slabs *slabs)
{
    float x = 0.3f, v;
    uint32_t vb;
    for (;;) { /* the first logit from 0.3 up whose score's last bit is odd */
        v = route_host_sigmoid(x, slabs);
        memcpy(&vb, &v, 4);
        if (vb & 1u)
            break;
        uint32_t xb;
        memcpy(&xb, &x, 4);
        xb++;
        memcpy(&x, &xb, 4);
    }
    assert_true(v > 0.5f && v < 0.75f); /* u = 2^-24 and v +- u keep v's exponent */
    const float u = 5.9604644775390625e-8f;
    for (uint32_t e = 0; e < 256; e++) {
        const uint32_t g = e / 32, i = e % 32;
        logits[e] = g < 3 && i < 2 ? 4.0f : (g == 3 || g == 4) && i < 2 ? x : -8.0f;
        bias[e] = e == 128 ? u : e == 129 ? -u : 0.0f;
    }
    memra_route_spec s;
    memset(&s, 0, sizeof s);
    s.n_expert = 256, s.top_k = 8, s.n_group = 8, s.topk_group = 4;
    s.scoring = MEMRA_ROUTE_SIGMOID, s.renormalize = 1, s.routed_scaling_factor = 2.5f;
    s.group_scoring = MEMRA_GROUP_TOP2_SUM;
    s.bias_ptr = (uint64_t)(uintptr_t)bias;
    return s;
}

typedef struct spec_uploads {
    memra_devptr bias, map, n_real; /* 0 where the spec has none */
} spec_uploads;

/* The spec with each host address replaced by its device copy's. */
static inline memra_route_spec spec_upload(memra_engine *eng, const memra_route_spec *h,
                                           spec_uploads *b)
{
    memra_route_spec s = *h;
    b->bias = b->map = b->n_real = 0;
    if (h->bias_ptr) {
        const size_t n = (size_t)h->n_expert * (h->bias_dtype == MEMRA_BIAS_BF16 ? 2 : 4);
        assert_int_equal(memra_alloc(eng, n, &b->bias), MEMRA_OK);
        assert_int_equal(memra_upload(eng, b->bias, (const void *)(uintptr_t)h->bias_ptr, n),
                         MEMRA_OK);
        s.bias_ptr = b->bias;
    }
    if (h->expert_map) {
        assert_int_equal(memra_alloc(eng, (size_t)h->n_expert * 4, &b->map), MEMRA_OK);
        assert_int_equal(
            memra_upload_i32(eng, b->map, (const int32_t *)(uintptr_t)h->expert_map, h->n_expert),
            MEMRA_OK);
        s.expert_map = b->map;
    }
    if (h->n_real) {
        assert_int_equal(memra_alloc(eng, 8, &b->n_real), MEMRA_OK);
        assert_int_equal(memra_upload(eng, b->n_real, (const void *)(uintptr_t)h->n_real, 8),
                         MEMRA_OK);
        s.n_real = b->n_real;
    }
    return s;
}

static inline void spec_upload_free(memra_engine *eng, spec_uploads *b)
{
    if (b->bias)
        memra_free(eng, b->bias);
    if (b->map)
        memra_free(eng, b->map);
    if (b->n_real)
        memra_free(eng, b->n_real);
}

#endif /* MEMRA_ROUTE_CASE_UTIL_H */
