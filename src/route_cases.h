/* Routing configurations and inputs shared by memra_engine_self_check, the
 * memra tool and the test suites: the models the routing spec was written
 * for, and logits drawn to hit the edges. */
#ifndef MEMRA_ROUTE_CASES_H
#define MEMRA_ROUTE_CASES_H

#include <stdint.h>
#include <stdlib.h>

#include <memra/memra.h>

#include "rng.h"

typedef struct route_case {
    const char *name;
    memra_route_spec spec; /* bias filled by route_case_bias when with_bias */
    int with_bias, with_macros;
} route_case;

static const route_case route_cases[] = {
    {"softmax top-8 of 64",
     {64, 8, 1, 1, MEMRA_ROUTE_SOFTMAX, MEMRA_LOGITS_F32, 0, 1.0f, NULL},
     0,
     1},
    {"softmax top-8 of 64, renormalized",
     {64, 8, 1, 1, MEMRA_ROUTE_SOFTMAX, MEMRA_LOGITS_F32, 1, 1.0f, NULL},
     0,
     0},
    {"DeepSeek-V3: 256 experts, 8 groups, top-4 groups, top-8, sigmoid, bias, x2.5",
     {256, 8, 8, 4, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_F32, 1, 2.5f, NULL},
     1,
     1},
    {"GLM-style: 160 experts, 1 group, top-8, sigmoid, bias",
     {160, 8, 1, 1, MEMRA_ROUTE_SIGMOID, MEMRA_LOGITS_F32, 1, 1.0f, NULL},
     1,
     1},
    {"bf16 softmax top-6 of 1024, 32 groups of 32, top-4 groups",
     {1024, 6, 32, 4, MEMRA_ROUTE_SOFTMAX, MEMRA_LOGITS_BF16, 1, 1.0f, NULL},
     0,
     1},
};
#define N_ROUTE_CASES (sizeof route_cases / sizeof route_cases[0])

/* A bias of small values of both signs, like a trained correction bias. */
static inline void route_case_bias(uint32_t n_expert, float *bias)
{
    for (uint32_t e = 0; e < n_expert; e++)
        bias[e] = (float)((e * 37u) % 101u) * 0.001f - 0.05f;
}

/* Macro planes distinct per plane and expert. */
static inline void route_case_planes(uint32_t n_expert, float *planes /* 3 * n_expert */)
{
    for (int k = 0; k < 3; k++)
        for (uint32_t e = 0; e < n_expert; e++)
            planes[(uint32_t)k * n_expert + e] =
                0.5f + (float)((e * 13u + (uint32_t)k * 7u) % 29u) / 16.0f;
}

/* Logits in [-5, 5]; with edges, also ±0, subnormals, ties at 1.0, ±80,
 * and now and then a NaN or -inf. bfloat16 keeps the top half. */
static inline void *route_case_logits(const memra_route_spec *s, uint32_t n_tokens, uint64_t seed,
                                      int edges)
{
    const size_t n = (size_t)n_tokens * s->n_expert;
    const int bf16 = s->logits_dtype == MEMRA_LOGITS_BF16;
    void *out = malloc(n * (bf16 ? 2 : 4));
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
            case 5:
                if ((r >> 20) % 7 == 0)
                    x = rng_bits_float((r >> 9) & 1 ? 0x7fc00001u : 0xff800000u);
                break;
            default:
                break;
            }
        }
        uint32_t b;
        memcpy(&b, &x, 4);
        if (bf16)
            ((uint16_t *)out)[i] = (uint16_t)(b >> 16);
        else
            ((float *)out)[i] = x;
    }
    return out;
}

#endif /* MEMRA_ROUTE_CASES_H */
