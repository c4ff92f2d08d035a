/* Routing configurations and inputs shared by memra_engine_self_check, the
 * test suites and the benchmark: the models the routing spec was written
 * for, every option of the spec, and logits drawn to hit the edges. */
#ifndef MEMRA_ROUTE_CASES_H
#define MEMRA_ROUTE_CASES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>

#include "base/rng.h"
#include "route/route_families.h"

/* Where a case's bias comes from. */
enum { ROUTE_BIAS_NONE = 0, ROUTE_BIAS_HOST = 1, ROUTE_BIAS_IN_PLACE = 2 };

typedef struct route_case {
    const char *name;
    /* bias, bias_ptr and expert_map are filled from the case's inputs */
    memra_route_spec spec;
    int bias;        /* ROUTE_BIAS_*: spec.bias (mirrored) or spec.bias_ptr (read in place) */
    int with_macros; /* macro planes of n_slots floats */
    int ep_ranks;    /* > 1: an expert map for rank 1 of ep_ranks (expert e on rank e % ranks) */
    int padded;      /* a padded batch: n_real is an int32 (1) or int64 (2) count of
                      * route_case_real(n_tokens) real rows */
    int family;      /* a row of route_families.h (ROUTE_FAMILY_CASE): the benchmark's spec */
} route_case;

#define ROUTE_SPEC(E, K, NG, TG, SCORING, DTYPE, RENORM, SCALE)                                    \
    .n_expert = (E), .top_k = (K), .n_group = (NG), .topk_group = (TG), .scoring = (SCORING),      \
    .logits_dtype = (DTYPE), .renormalize = (RENORM), .routed_scaling_factor = (SCALE)

/* A family's case, made from its row of route_families.h: the benchmark's spec exactly (float32
 * logits, renormalized, the row's scale, vLLM's default group scoring, a float32 bias exactly
 * where it scores by sigmoid), so the spec builds tests/kernel_budgets.inc budgets and the mock
 * compiles are the ones the benchmarks time. Its name starts "<family>:" (test_kernel_targets.c
 * finds the family's budget rows by that start). The row's bias_in_place and macros columns pick
 * the inputs; ROUTE_FAMILY_BIAS_<sigmoid><bias_in_place> names the bias, and a bias read in place
 * on a softmax row names none: it does not compile. */
#define ROUTE_FAMILY_BIAS_00 "softmax"
#define ROUTE_FAMILY_BIAS_10 "sigmoid, bias"
#define ROUTE_FAMILY_BIAS_11 "sigmoid, device f32 bias"
#define ROUTE_FAMILY_CASE(NAME, E, K, NG, TG, SIG, SCALE, IN_PLACE, MACROS)                        \
    {NAME ": " #E " experts, top-" #K ", " ROUTE_FAMILY_BIAS_##SIG##IN_PLACE,                      \
     {ROUTE_SPEC(E, K, NG, TG, (SIG) ? MEMRA_ROUTE_SIGMOID : MEMRA_ROUTE_SOFTMAX,                  \
                 MEMRA_LOGITS_F32, 1, SCALE),                                                      \
      .bias_dtype = MEMRA_BIAS_F32},                                                               \
     (IN_PLACE) ? ROUTE_BIAS_IN_PLACE : ((SIG) ? ROUTE_BIAS_HOST : ROUTE_BIAS_NONE),               \
     MACROS,                                                                                       \
     0,                                                                                            \
     0,                                                                                            \
     1},

static const route_case route_cases[] = {
    {"bf16 softmax top-8 of 64",
     {ROUTE_SPEC(64, 8, 1, 1, MEMRA_ROUTE_SOFTMAX, MEMRA_LOGITS_BF16, 0, 1.0f)},
     ROUTE_BIAS_NONE,
     1,
     0,
     0,
     0},
    {"softmax top-8 of 64, renormalized",
     {ROUTE_SPEC(64, 8, 1, 1, MEMRA_ROUTE_SOFTMAX, MEMRA_LOGITS_F32, 1, 1.0f)},
     ROUTE_BIAS_NONE,
     0,
     0,
     0,
     0},
    /* The benchmarks' families (route_families.h), one case each, at 2 to 7 (the tests take
     * route_cases[2], DeepSeek-V3's, by its index) */
    // clang-format off
    MEMRA_ROUTE_FAMILIES(ROUTE_FAMILY_CASE)
    // clang-format on
    {"bf16 softmax top-6 of 1024, 32 groups of 32 by their top-2 sum, top-4 groups",
     {ROUTE_SPEC(1024, 6, 32, 4, MEMRA_ROUTE_SOFTMAX, MEMRA_LOGITS_BF16, 1, 1.0f),
      .group_scoring = MEMRA_GROUP_TOP2_SUM},
     ROUTE_BIAS_NONE,
     1,
     0,
     0,
     0},
    {"DeepSeek-V2: 160 experts, 8 groups of 20 scored by max, top-3 groups, top-6, f16, x16",
     {ROUTE_SPEC(160, 6, 8, 3, MEMRA_ROUTE_SOFTMAX, MEMRA_LOGITS_F16, 0, 16.0f),
      .group_scoring = MEMRA_GROUP_MAX},
     ROUTE_BIAS_NONE,
     1,
     0,
     0,
     0},
    {"DeepSeek-V3, rank 1 of 8 (expert map), bf16 device bias, 1 fused shared expert, bf16",
     {ROUTE_SPEC(256, 8, 8, 4, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_BF16, 1, 2.5f),
      .bias_dtype = MEMRA_BIAS_BF16, .n_shared = 1, .shared_weight = 1.0f},
     ROUTE_BIAS_IN_PLACE,
     1,
     8,
     0,
     0},
    {"64 experts, 8 groups of 8 by max, top-2 groups, top-4, sigmoid, 2 shared, rank 1 of 4",
     {ROUTE_SPEC(64, 4, 8, 2, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_F32, 1, 1.5f),
      .group_scoring = MEMRA_GROUP_MAX, .n_shared = 2, .shared_weight = 0.375f},
     ROUTE_BIAS_HOST,
     1,
     4,
     0,
     0},
    {"128 experts, 2 groups of 64, top-1 group, top-8, softmax, f16, renormalized",
     {ROUTE_SPEC(128, 8, 2, 1, MEMRA_ROUTE_SOFTMAX, MEMRA_LOGITS_F16, 1, 1.0f)},
     ROUTE_BIAS_NONE,
     0,
     0,
     0,
     0},
    {"Llama-4 Maverick: 128 experts, sigmoid top-1",
     {ROUTE_SPEC(128, 1, 1, 1, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_BF16, 0, 1.0f)},
     ROUTE_BIAS_NONE,
     1,
     0,
     0,
     0},
    {"SGLang DeepSeek-V3: 1 fused shared expert by SGLang's rule (W / 2.5), x2.5 on output, "
     "padded batch (int32 count)",
     {ROUTE_SPEC(256, 8, 8, 4, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_F32, 1, 2.5f),
      .bias_dtype = MEMRA_BIAS_F32, .n_shared = 1, .shared_rule = MEMRA_SHARED_ROUTED_SUM,
      .shared_divisor = 2.5f},
     ROUTE_BIAS_IN_PLACE,
     1,
     0,
     1,
     0},
    {"SGLang GLM-4.5 without renormalizing: shared expert W / 2.5, padded batch (int64 count)",
     {ROUTE_SPEC(160, 8, 1, 1, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_BF16, 0, 1.0f), .n_shared = 1,
      .shared_rule = MEMRA_SHARED_ROUTED_SUM, .shared_divisor = 2.5f},
     ROUTE_BIAS_HOST,
     0,
     0,
     2,
     0},
    {"DeepSeek-V2 from a zero-initialised spec (vLLM's rule: groups by their best), padded "
     "Mixtral-sized teams: 32 experts, 4 groups, top-2 groups, top-6",
     {ROUTE_SPEC(32, 6, 4, 2, MEMRA_ROUTE_SOFTMAX, MEMRA_LOGITS_F32, 0, 16.0f)},
     ROUTE_BIAS_NONE,
     1,
     0,
     1,
     0},
    /* Small expert counts (the team kernel's teams of 16, 8 and 1 lanes):
     * every option a call passes on, an expert count that is not a power of
     * two (the butterfly's lanes past the experts hold +0), and one
     * expert. */
    {"16 experts, sigmoid top-4, bias, 1 shared expert, rank 1 of 2 (expert map), padded batch "
     "(int32 count), bf16",
     {ROUTE_SPEC(16, 4, 1, 1, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_BF16, 1, 2.5f), .n_shared = 1,
      .shared_weight = 1.0f},
     ROUTE_BIAS_HOST,
     1,
     2,
     1,
     0},
    {"f16 5 experts, softmax top-3, x16 without renormalizing",
     {ROUTE_SPEC(5, 3, 1, 1, MEMRA_ROUTE_SOFTMAX, MEMRA_LOGITS_F16, 0, 16.0f)},
     ROUTE_BIAS_NONE,
     1,
     0,
     0,
     0},
    {"1 expert, softmax top-1",
     {ROUTE_SPEC(1, 1, 1, 1, MEMRA_ROUTE_SOFTMAX, MEMRA_LOGITS_F32, 1, 1.0f)},
     ROUTE_BIAS_NONE,
     0,
     0,
     0,
     0},
};
#define N_ROUTE_CASES (sizeof route_cases / sizeof route_cases[0])

/* Whether a case is one of the model families the benchmarks measure (route_families.h): the
 * specialised-build tests run these, as the benchmarks time them. */
static inline int route_case_is_family(const route_case *rc)
{
    return rc->family;
}

/* A case's host inputs beside its logits: the bias in both element types,
 * the map and the macro planes. */
typedef struct route_inputs {
    int64_t n_real; /* the padded cases' count (an int32 in its first 4 bytes: little-endian) */
    float bias[MEMRA_ROUTE_MAX_EXPERT];
    uint16_t bias16[MEMRA_ROUTE_MAX_EXPERT]; /* bfloat16 of bias: its top half */
    int32_t map[MEMRA_ROUTE_MAX_EXPERT];
    float planes[3 * (MEMRA_ROUTE_MAX_EXPERT + MEMRA_ROUTE_MAX_TOP_K)];
    uint32_t n_slots;
    memra_vrows_macros mac;
} route_inputs;

/* A bias of small values of both signs, like a trained correction bias. */
static inline void route_case_bias(uint32_t n_expert, float *bias)
{
    for (uint32_t e = 0; e < n_expert; e++)
        bias[e] = (float)((e * 37u) % 101u) * 0.001f - 0.05f;
}

/* Macro planes distinct per plane and slot. */
static inline void route_case_planes(uint32_t n_slots, float *planes /* 3 * n_slots */)
{
    for (int k = 0; k < 3; k++)
        for (uint32_t e = 0; e < n_slots; e++)
            planes[(uint32_t)k * n_slots + e] =
                0.5f + (float)((e * 13u + (uint32_t)k * 7u) % 29u) / 16.0f;
}

/* Expert e lives on rank e % ranks, in slot e / ranks; this is rank 1. */
static inline uint32_t route_case_map(uint32_t n_expert, uint32_t ranks, int32_t *map)
{
    uint32_t n_local = 0;
    for (uint32_t e = 0; e < n_expert; e++) {
        map[e] = e % ranks == 1 ? (int32_t)(e / ranks) : -1;
        n_local += map[e] >= 0;
    }
    return n_local;
}

/* Fills `in` for case rc and returns its spec with HOST addresses for the
 * bias read in place and the map (a device caller uploads those and puts
 * the device addresses in their place). */
static inline memra_route_spec route_case_inputs(const route_case *rc, route_inputs *in)
{
    memra_route_spec s = rc->spec;
    route_case_bias(s.n_expert, in->bias);
    for (uint32_t e = 0; e < s.n_expert; e++) {
        uint32_t b;
        memcpy(&b, &in->bias[e], 4);
        in->bias16[e] = (uint16_t)(b >> 16);
    }
    if (rc->bias == ROUTE_BIAS_HOST)
        s.bias = in->bias;
    if (rc->bias == ROUTE_BIAS_IN_PLACE)
        s.bias_ptr = s.bias_dtype == MEMRA_BIAS_BF16 ? (uint64_t)(uintptr_t)in->bias16
                                                     : (uint64_t)(uintptr_t)in->bias;
    if (rc->ep_ranks > 1) {
        s.n_local = route_case_map(s.n_expert, (uint32_t)rc->ep_ranks, in->map);
        s.expert_map = (uint64_t)(uintptr_t)in->map;
    }
    in->n_slots = (s.expert_map ? s.n_local : s.n_expert) + s.n_shared;
    route_case_planes(in->n_slots, in->planes);
    in->mac = (memra_vrows_macros){
        {in->planes, in->planes + in->n_slots, in->planes + 2 * (size_t)in->n_slots}};
    return s;
}

/* A padded case's real rows of n_tokens: about three quarters. */
static inline uint32_t route_case_real(uint32_t n_tokens)
{
    return n_tokens - n_tokens / 4;
}

/* Sets a padded case's count for a batch of n_tokens in `in` and its HOST
 * address in s->n_real (a device caller uploads it and puts the device
 * address there); nothing for the others. */
static inline void route_case_padding(const route_case *rc, route_inputs *in, memra_route_spec *s,
                                      uint32_t n_tokens)
{
    if (!rc->padded)
        return;
    const uint32_t real = route_case_real(n_tokens);
    if (rc->padded == 2) {
        in->n_real = real;
        s->n_real_dtype = MEMRA_COUNT_I64;
    } else {
        const int32_t r32 = (int32_t)real;
        memcpy(&in->n_real, &r32, 4);
        s->n_real_dtype = MEMRA_COUNT_I32;
    }
    s->n_real = (uint64_t)(uintptr_t)&in->n_real;
}

/* Bytes of one logit. */
static inline size_t route_logit_bytes(const memra_route_spec *s)
{
    return s->logits_dtype == MEMRA_LOGITS_F32 ? 4 : 2;
}

/* Logits in [-5, 5]; with edges, also ±0, subnormals, ties at 1.0, ±80,
 * now and then a NaN, -inf or +inf, and every 53rd token -inf only. bfloat16 keeps the top half;
 * float16 is the float rounded to the nearest half (the edges: ±0, subnormal halves, ±inf, NaN). */
static inline uint16_t route_float_to_half(float x)
{
    uint32_t b;
    memcpy(&b, &x, 4);
    const uint32_t sign = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf, NaN */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
    if (a >= 0x47800000u) /* 65536 and up: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x33000000u) /* below half the smallest subnormal half */
        return (uint16_t)sign;
    const int e = (int)(a >> 23) - 127;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    /* round to nearest even at the half's precision */
    const int shift = e < -14 ? 13 + (-14 - e) : 13;
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1)))
        q++;
    if (e < -14)
        return (uint16_t)(sign | q); /* subnormal (q may carry into the smallest normal) */
    const uint32_t h = ((uint32_t)(e + 15) << 10) + (q - 0x400u);
    return (uint16_t)(sign | (h > 0x7c00u ? 0x7c00u : h));
}

static inline void *route_case_logits(const memra_route_spec *s, uint32_t n_tokens, uint64_t seed,
                                      int edges)
{
    const size_t n = (size_t)n_tokens * s->n_expert;
    void *out = malloc(n * route_logit_bytes(s) + 1);
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const uint64_t r = rng_next(&seed);
        float x = (float)((int64_t)(r >> 11) % 2000001 - 1000000) / 200000.0f;
        if (edges) {
            switch (r % 97) {
            case 0:
                x = 0.0f;
                break;
            case 1:
                x = -0.0f;
                break;
            case 2:
                x = rng_bits_float((uint32_t)(r >> 40) % 0x7fffff + 1);
                break;
            case 3:
                x = 1.0f;
                break;
            case 4:
                x = (r >> 8) & 1 ? 80.0f : -80.0f;
                break;
            case 5: /* NaN, -inf, +inf */
                if ((r >> 20) % 7 == 0)
                    x = rng_bits_float((r >> 9) % 3 == 0   ? 0x7fc00001u
                                       : (r >> 9) % 3 == 1 ? 0xff800000u
                                                           : 0x7f800000u);
                break;
            case 6: /* a subnormal half */
                x = (float)((r >> 30) % 1023 + 1) * 5.9604644775390625e-8f;
                break;
            default:
                break;
            }
            if ((i / s->n_expert) % 53 == 17) /* a token of -inf only: a masked row */
                x = rng_bits_float(0xff800000u);
        }
        uint32_t b;
        memcpy(&b, &x, 4);
        if (s->logits_dtype == MEMRA_LOGITS_BF16)
            ((uint16_t *)out)[i] = (uint16_t)(b >> 16);
        else if (s->logits_dtype == MEMRA_LOGITS_F16)
            ((uint16_t *)out)[i] = route_float_to_half(x);
        else
            ((float *)out)[i] = x;
    }
    return out;
}

#endif /* MEMRA_ROUTE_CASES_H */
