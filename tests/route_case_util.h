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
