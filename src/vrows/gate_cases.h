/* The seed gate's four cases: the Rust engine's own kernel gate, which
 * memra_engine_self_check runs on the caller's GPU and the test suites run
 * through both arms. */
#ifndef MEMRA_GATE_CASES_H
#define MEMRA_GATE_CASES_H

#include <stdint.h>

#include <memra/memra.h>

#define GATE_MAX_PAIRS 8
#define GATE_MAX_EXPERT 256

typedef struct gate_case {
    const char *name;
    uint32_t n_expert;
    uint32_t n_pairs;
    memra_vrows_slabs slabs;
    int32_t sel[GATE_MAX_PAIRS];
    int with_macros;
} gate_case;

/* The serving rig's slabs (24/24/48 MiB per expert, 256 experts) and its
 * selection, shared by three of the four cases. */
// clang-format off
#define GATE_SERVING_SLABS \
    {{0x7e0000000000ull, 0x7e4000000000ull, 0x7e8000000000ull}, {24ull << 20, 24ull << 20, 48ull << 20}}
#define GATE_SERVING_SEL {0, 1, 17, 63, 128, 200, 254, 255}
// clang-format on

static const gate_case gate_cases[] = {
    /* Fixture-scale strides: the control, far below 4 GiB. */
    {"fixture",
     64,
     8,
     {{0x7f1200000000ull, 0x7f1300000000ull, 0x7f1400000000ull}, {860160, 860160, 1114112}},
     {0, 5, 9, 17, 33, 41, 62, 63},
     1},
    /* Serving strides: the last expert sits ~6 GiB into gate/up and ~12 GiB
     * into down, where a 32-bit step wraps. */
    {"serving", 256, 8, GATE_SERVING_SLABS, GATE_SERVING_SEL, 1},
    /* The macro-free bank: every gate/up scale 1.0f, down scale = selw. */
    {"macro_free", 256, 8, GATE_SERVING_SLABS, GATE_SERVING_SEL, 0},
    /* An evenly spread selection, j*32+31. */
    {"spread", 256, 8, GATE_SERVING_SLABS, {31, 63, 95, 127, 159, 191, 223, 255}, 1},
};
#define N_GATE_CASES (sizeof gate_cases / sizeof gate_cases[0])

/* Deterministic routing weights and macro planes for a case. */
static inline void gate_inputs(const gate_case *c, float *selw, float planes[3][GATE_MAX_EXPERT])
{
    for (uint32_t p = 0; p < c->n_pairs; p++)
        selw[p] = 1.0f / (float)(p + 2) + 0.03125f * (float)p;
    for (int k = 0; k < 3; k++)
        for (uint32_t e = 0; e < c->n_expert; e++)
            planes[k][e] = 0.001953125f * (float)(e + 1) + 0.5f * (float)k + 1.0f / 3.0f;
}

#endif /* MEMRA_GATE_CASES_H */
