/* The host arm against an independent model, hand constants and bad input. */
#include <fenv.h>
#include <stdlib.h>
#include <xmmintrin.h>

#include "testutil.h"

#include "vrows/gate_cases.h"

static void check_against_ref(const int32_t *sel, const float *selw, uint32_t n, uint32_t n_expert,
                              const memra_vrows_macros *mac, const memra_vrows_slabs *sl)
{
    uint64_t *ptrs = malloc(3 * n * sizeof *ptrs), *eptrs = malloc(3 * n * sizeof *eptrs);
    float *scl = malloc(3 * n * sizeof *scl);
    uint32_t *escl = malloc(3 * n * sizeof *escl);
    assert_non_null(ptrs);
    memra_faults f, ef;
    ref_tables(sel, selw, n, n_expert, mac, sl, eptrs, escl, &ef);
    memra_status st = memra_vrows_tables_host(sel, selw, n, n_expert, mac, sl, ptrs, scl, &f);
    memra_status want = ef.bad_expert  ? MEMRA_ERR_EXPERT_RANGE
                        : ef.nonfinite ? MEMRA_ERR_NONFINITE_SCALE
                                       : MEMRA_OK;
    assert_int_equal(st, want);
    assert_memory_equal(ptrs, eptrs, 3 * n * sizeof *ptrs);
    assert_memory_equal(scl, escl, 3 * n * sizeof *scl);
    assert_int_equal(f.bad_expert, ef.bad_expert);
    assert_int_equal(f.nonfinite, ef.nonfinite);
    assert_int_equal(f.first_pair, ef.first_pair);
    free(ptrs);
    free(eptrs);
    free(scl);
    free(escl);
}

static void test_gate_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_GATE_CASES; i++) {
        const gate_case *c = &gate_cases[i];
        float selw[GATE_MAX_PAIRS], planes[3][GATE_MAX_EXPERT];
        gate_inputs(c, selw, planes);
        memra_vrows_macros mac = {{planes[0], planes[1], planes[2]}};
        check_against_ref(c->sel, selw, c->n_pairs, c->n_expert, c->with_macros ? &mac : NULL,
                          &c->slabs);
    }
}

/* Hand-computed constants for the serving case: expert 255 at 24 MiB and
 * 48 MiB strides, past 4 GiB and 8 GiB. */
static void test_serving_hand_constants(void **state)
{
    (void)state;
    const gate_case *c = &gate_cases[1];
    float selw[GATE_MAX_PAIRS], planes[3][GATE_MAX_EXPERT];
    gate_inputs(c, selw, planes);
    memra_vrows_macros mac = {{planes[0], planes[1], planes[2]}};
    uint64_t ptrs[24];
    float scl[24];
    assert_int_equal(
        memra_vrows_tables_host(c->sel, selw, 8, 256, &mac, &c->slabs, ptrs, scl, NULL), MEMRA_OK);
    /* 255 * 25165824 = 6417285120 = 0x17E800000 (5.98 GiB) */
    assert_true(ptrs[7] == 0x7e0000000000ull + 6417285120ull);
    assert_true(ptrs[8 + 7] == 0x7e4000000000ull + 6417285120ull);
    /* 255 * 50331648 = 12834570240 = 0x2FD000000 (11.95 GiB) */
    assert_true(ptrs[16 + 7] == 0x7e8000000000ull + 12834570240ull);
    /* 128 * 25165824 = 0xC0000000: exactly 3 GiB; 200 * 48 MiB = 0x258000000 */
    assert_true(ptrs[4] == 0x7e0000000000ull + 0xC0000000ull);
    assert_true(ptrs[16 + 5] == 0x7e8000000000ull + 0x258000000ull);
    /* Scales: macros read at the selected expert. */
    assert_int_equal(f2u(scl[7]), f2u(planes[0][255]));
    assert_int_equal(f2u(scl[8 + 3]), f2u(planes[1][63]));
}

/* Selections, weights and planes with every kind of special float, at many
 * sizes, with the selection spanning valid and out-of-range ids. */
static void test_random_properties(void **state)
{
    (void)state;
    uint64_t s = 0x5eed;
    static const uint32_t sizes[] = {1, 2, 7, 8, 31, 255, 256, 257, 1000, 4096, 65537};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        for (int rep = 0; rep < 4; rep++) {
            uint32_t n = sizes[si];
            uint32_t n_expert = 1 + (uint32_t)(rng_next(&s) % 512);
            int32_t *sel = malloc(n * sizeof *sel);
            float *selw = malloc(n * sizeof *selw);
            float *pl = malloc(3 * n_expert * sizeof *pl);
            for (uint32_t p = 0; p < n; p++) {
                sel[p] = (int32_t)(rng_next(&s) % n_expert);
                if (rep == 3 && rng_next(&s) % 50 == 0) /* some out-of-range ids */
                    sel[p] = (rng_next(&s) & 1) ? -1 - (int32_t)(rng_next(&s) % 1000)
                                                : (int32_t)(n_expert + rng_next(&s) % 1000);
                selw[p] = rep == 0 ? (float)(rng_next(&s) % 1000) / 999.0f : rng_special_float(&s);
            }
            for (uint32_t e = 0; e < 3 * n_expert; e++)
                pl[e] = rep < 2 ? 0.5f + (float)(e % 17) / 16.0f : rng_special_float(&s);
            memra_vrows_macros mac = {{pl, pl + n_expert, pl + 2 * n_expert}};
            /* Strides to 2^40 with bases such that the last expert ends below 2^64. */
            memra_vrows_slabs sl;
            for (int k = 0; k < 3; k++) {
                sl.stride[k] = rng_next(&s) % (1ull << 40);
                uint64_t span = (uint64_t)(n_expert - 1) * sl.stride[k];
                sl.base[k] = (~0ull - span) - rng_next(&s) % (1ull << 30);
            }
            check_against_ref(sel, selw, n, n_expert, (rep & 1) ? NULL : &mac, &sl);
            free(sel);
            free(selw);
            free(pl);
        }
    }
}

/* IEEE edge cases by hand. */
static void test_special_floats(void **state)
{
    (void)state;
    const float sub = u2f(0x00000001u), big = u2f(0x7f7fffffu);
    const float nanp = u2f(0x7fa00001u); /* a signalling NaN with a payload */
    const float w[] = {sub, -0.0f, 0.0f, 1.0f, big, INFINITY, 2.0f, nanp, 0.5f};
    const float mdv[] = {1.0f, 1.0f, -1.0f, u2f(0x00400000u), 2.0f, 1.0f, big, 1.0f, sub};
    const uint32_t want[] = {
        0x00000001u, /* subnormal * 1 survives (no FTZ) */
        0x80000000u, /* -0 * 1 = -0 */
        0x80000000u, /* +0 * -1 = -0 */
        0x00400000u, /* 1 * subnormal survives */
        0x7f800000u, /* overflow to +inf */
        0x7f800000u, /* inf */
        0x7f800000u, /* 2 * FLT_MAX overflows */
        0x7fc00000u, /* NaN is canonical whatever its payload */
        0x00000000u, /* 0.5 * smallest subnormal rounds to even: +0 */
    };
    enum { N = sizeof w / sizeof w[0] };
    int32_t sel[N];
    float mg[N], mu[N];
    for (int i = 0; i < N; i++) {
        sel[i] = i;
        mg[i] = mu[i] = 1.0f;
    }
    memra_vrows_macros mac = {{mg, mu, mdv}};
    memra_vrows_slabs sl = {{0, 0, 0}, {1, 1, 1}};
    uint64_t ptrs[3 * N];
    float scl[3 * N];
    memra_faults f;
    assert_int_equal(memra_vrows_tables_host(sel, w, N, N, &mac, &sl, ptrs, scl, &f),
                     MEMRA_ERR_NONFINITE_SCALE);
    for (int i = 0; i < N; i++)
        assert_int_equal(f2u(scl[2 * N + i]), want[i]);
    assert_int_equal(f.nonfinite, 4);
    assert_int_equal(f.first_pair, 4);
    assert_int_equal(f.bad_expert, 0);
    assert_non_null(strstr(memra_last_error(), "pair 4"));
}

/* A serving process may run with FTZ/DAZ on and a different rounding mode;
 * the host arm must not inherit them, and must restore them. */
static void test_ignores_caller_fp_environment(void **state)
{
    (void)state;
    /* valgrind does not model MXCSR's FTZ/DAZ bits: nothing to observe there. */
    if (getenv("MEMRA_UNDER_VALGRIND"))
        skip();
    const unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | 0x8040u); /* FTZ | DAZ */
    fesetround(FE_UPWARD);
    const float w[2] = {u2f(0x00000005u), 1.0f};
    const float mdv[2] = {0.5f, u2f(0x3f800001u)};
    const int32_t sel[2] = {0, 1};
    const float ones[2] = {1.0f, 1.0f};
    memra_vrows_macros mac = {{ones, ones, mdv}};
    memra_vrows_slabs sl = {{0, 0, 0}, {0, 0, 0}};
    uint64_t ptrs[6];
    float scl[6];
    memra_status st = memra_vrows_tables_host(sel, w, 2, 2, &mac, &sl, ptrs, scl, NULL);
    const unsigned after = _mm_getcsr();
    const int round_after = fegetround();
    _mm_setcsr(saved);
    fesetround(FE_TONEAREST);
    assert_int_equal(st, MEMRA_OK);
    assert_int_equal(
        f2u(scl[4]),
        0x00000002u); /* 5 ulp * 0.5 = 2.5: nearest-even 2 (upward would give 3, DAZ 0) */
    assert_int_equal(f2u(scl[5]), 0x3f800001u);
    assert_int_equal(after & 0x8040u, 0x8040u);
    assert_int_equal(round_after, FE_UPWARD);
}

/* ---- bad input: its own error, a message naming the argument, nothing written ---- */

typedef struct bad_case {
    const char *what;
    memra_status want;
    const char *needle;
} bad_case;

static void run_bad(const bad_case *bc, const int32_t *sel, const float *selw, uint32_t n,
                    uint32_t n_expert, const memra_vrows_macros *mac, const memra_vrows_slabs *sl,
                    uint64_t *ptrs, float *scl)
{
    uint64_t pbuf[3 * 8 + 1];
    float sbuf[3 * 8 + 1];
    memset(pbuf, 0xA5, sizeof pbuf);
    memset(sbuf, 0x5A, sizeof sbuf);
    uint64_t pcopy[3 * 8 + 1];
    float scopy[3 * 8 + 1];
    memcpy(pcopy, pbuf, sizeof pbuf);
    memcpy(scopy, sbuf, sizeof sbuf);
    if (ptrs == (uint64_t *)1)
        ptrs = (uint64_t *)((char *)pbuf + 4);
    else if (ptrs)
        ptrs = pbuf;
    if (scl == (float *)1)
        scl = (float *)((char *)sbuf + 2);
    else if (scl)
        scl = sbuf;
    memra_faults f = {7, 7, 7, 7, 7};
    memra_status st = memra_vrows_tables_host(sel, selw, n, n_expert, mac, sl, ptrs, scl, &f);
    if (st != bc->want || !strstr(memra_last_error(), bc->needle))
        fail_msg("%s: got %s (%s), want %s naming '%s'", bc->what, memra_status_string(st),
                 memra_last_error(), memra_status_string(bc->want), bc->needle);
    assert_memory_equal(pbuf, pcopy, sizeof pbuf);
    assert_memory_equal(sbuf, scopy, sizeof sbuf);
    assert_int_equal(f.bad_expert, 7); /* faults untouched too */
}

static void test_bad_input(void **state)
{
    (void)state;
    const int32_t sel[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const float selw[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    const float pl[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    memra_vrows_macros mac = {{pl, pl, pl}}, partial = {{pl, NULL, pl}};
    memra_vrows_slabs sl = {{0x1000, 0x2000, 0x3000}, {64, 64, 64}};
    memra_vrows_slabs wrap = {{0x1000, ~0ull - 100, 0x3000}, {64, 64, 64}};
    memra_vrows_slabs wrapmul = {{0x1000, 0x2000, 0x3000}, {64, 64, 1ull << 62}};
    uint64_t *P = (uint64_t *)8; /* "a valid buffer" (replaced in run_bad) */
    float *S = (float *)8;
    uint64_t *Pmis = (uint64_t *)1;
    float *Smis = (float *)1;

    const bad_case c1 = {"sel NULL", MEMRA_ERR_NULL_ARG, "sel is NULL"};
    run_bad(&c1, NULL, selw, 8, 8, &mac, &sl, P, S);
    const bad_case c2 = {"selw NULL", MEMRA_ERR_NULL_ARG, "selw is NULL"};
    run_bad(&c2, sel, NULL, 8, 8, &mac, &sl, P, S);
    const bad_case c3 = {"ptrs NULL", MEMRA_ERR_NULL_ARG, "ptrs is NULL"};
    run_bad(&c3, sel, selw, 8, 8, &mac, &sl, NULL, S);
    const bad_case c4 = {"scl NULL", MEMRA_ERR_NULL_ARG, "scl is NULL"};
    run_bad(&c4, sel, selw, 8, 8, &mac, &sl, P, NULL);
    const bad_case c5 = {"slabs NULL", MEMRA_ERR_NULL_ARG, "slabs is NULL"};
    run_bad(&c5, sel, selw, 8, 8, &mac, NULL, P, S);
    const bad_case c6 = {"partial macros", MEMRA_ERR_NULL_ARG, "plane[1] (up)"};
    run_bad(&c6, sel, selw, 8, 8, &partial, &sl, P, S);
    const bad_case c7 = {"n_pairs 0", MEMRA_ERR_INVALID_ARG, "n_pairs = 0"};
    run_bad(&c7, sel, selw, 0, 8, &mac, &sl, P, S);
    const bad_case c8 = {"n_pairs too big", MEMRA_ERR_INVALID_ARG, "n_pairs = 268435457"};
    run_bad(&c8, sel, selw, MEMRA_MAX_PAIRS + 1, 8, &mac, &sl, P, S);
    const bad_case c9 = {"n_expert 0", MEMRA_ERR_INVALID_ARG, "n_expert is 0"};
    run_bad(&c9, sel, selw, 8, 0, &mac, &sl, P, S);
    const bad_case c10 = {"ptrs misaligned", MEMRA_ERR_MISALIGNED, "ptrs ="};
    run_bad(&c10, sel, selw, 8, 8, &mac, &sl, Pmis, S);
    const bad_case c11 = {"scl misaligned", MEMRA_ERR_MISALIGNED, "scl ="};
    run_bad(&c11, sel, selw, 8, 8, &mac, &sl, P, Smis);
    const bad_case c12 = {"sel misaligned", MEMRA_ERR_MISALIGNED, "sel ="};
    run_bad(&c12, (const int32_t *)((const char *)sel + 1), selw, 4, 8, &mac, &sl, P, S);
    const bad_case c13 = {"base+span wraps", MEMRA_ERR_SLAB_OVERFLOW, "slabs->base[1] (up)"};
    run_bad(&c13, sel, selw, 8, 8, &mac, &wrap, P, S);
    const bad_case c14 = {"stride*n wraps", MEMRA_ERR_SLAB_OVERFLOW, "slabs->stride[2]"};
    run_bad(&c14, sel, selw, 8, 8, &mac, &wrapmul, P, S);
    /* a plane read as floats at an odd address: undefined behaviour the
     * call once ran (UBSan: vrows_host.c), now refused */
    static float room[9];
    memra_vrows_macros mis = {{pl, (const float *)(void *)((char *)room + 2), pl}};
    const bad_case c15 = {"plane misaligned", MEMRA_ERR_MISALIGNED, "macros->plane[1] (up) = "};
    run_bad(&c15, sel, selw, 8, 8, &mis, &sl, P, S);
}

/* The largest slab that still fits is accepted: the check is exact. */
static void test_slab_edge_is_exact(void **state)
{
    (void)state;
    const int32_t sel[2] = {0, 3};
    const float selw[2] = {1, 1};
    memra_vrows_slabs sl = {{~0ull - 3 * 1000, 0, 0}, {1000, 1ull << 61, 1}};
    uint64_t ptrs[6];
    float scl[6];
    assert_int_equal(memra_vrows_tables_host(sel, selw, 2, 4, NULL, &sl, ptrs, scl, NULL),
                     MEMRA_OK);
    assert_true(ptrs[1] == ~0ull);
    assert_true(ptrs[3] == 3ull << 61);
    sl.base[0]++;
    assert_int_equal(memra_vrows_tables_host(sel, selw, 2, 4, NULL, &sl, ptrs, scl, NULL),
                     MEMRA_ERR_SLAB_OVERFLOW);
}

/* Out-of-range ids: expert 0's pointers, +0 scales, the tables still written,
 * the error names the first bad pair. */
static void test_out_of_range_ids(void **state)
{
    (void)state;
    const int32_t sel[6] = {2, -1, 4, 3, INT32_MIN, 0};
    const float selw[6] = {NAN, 2, 3, 4, 5, 6};
    const float pl[4] = {2, 3, 4, 5};
    memra_vrows_macros mac = {{pl, pl, pl}};
    memra_vrows_slabs sl = {{100, 200, 300}, {10, 20, 30}};
    uint64_t ptrs[18];
    float scl[18];
    memra_faults f;
    assert_int_equal(memra_vrows_tables_host(sel, selw, 6, 4, &mac, &sl, ptrs, scl, &f),
                     MEMRA_ERR_EXPERT_RANGE);
    assert_int_equal(f.bad_expert, 3);
    assert_int_equal(f.nonfinite, 1);
    assert_int_equal(f.first_pair, 0);
    assert_non_null(strstr(memra_last_error(), "first is pair 1 (sel = -1)"));
    for (int p = 1; p <= 4; p += (p == 2 ? 2 : 1)) {
        assert_true(ptrs[p] == 100 && ptrs[6 + p] == 200 && ptrs[12 + p] == 300);
        assert_int_equal(f2u(scl[p]), 0);
        assert_int_equal(f2u(scl[6 + p]), 0);
        assert_int_equal(f2u(scl[12 + p]), 0);
    }
    assert_true(ptrs[3] == 130 && ptrs[15] == 390);
    assert_int_equal(f2u(scl[12]), 0x7fc00000u);
}

static void test_status_strings(void **state)
{
    (void)state;
    for (int s = 0; s < MEMRA_STATUS_COUNT; s++) {
        assert_non_null(memra_status_string((memra_status)s));
        assert_true(strlen(memra_status_string((memra_status)s)) > 4);
    }
    assert_string_equal(memra_status_string(MEMRA_STATUS_COUNT), "unknown status");
    assert_string_equal(memra_status_string((memra_status)-1), "unknown status");
    assert_int_equal(memra_version(), MEMRA_VERSION_NUMBER);
    assert_string_equal(memra_version_string(), MEMRA_VERSION_STRING);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gate_cases),
        cmocka_unit_test(test_serving_hand_constants),
        cmocka_unit_test(test_random_properties),
        cmocka_unit_test(test_special_floats),
        cmocka_unit_test(test_ignores_caller_fp_environment),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_slab_edge_is_exact),
        cmocka_unit_test(test_out_of_range_ids),
        cmocka_unit_test(test_status_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
