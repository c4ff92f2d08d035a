/* Random device-arm cases for the test programs (the GPU suite and the mock
 * driver suite). Apart from device_case.h because that header is also built
 * into the installed `memra` tool, which must not need cmocka. */
#ifndef MEMRA_RANDOM_CASE_H
#define MEMRA_RANDOM_CASE_H

#include "device_case.h"
#include "testutil.h"

/* Random inputs for one case, owned here: ids in [0, n_expert) except, with
 * bad_ids, about one pair in 64 out of range on either side; special floats
 * (NaN, inf, subnormals, +/-0) in the weights and planes; slabs at the top of
 * the address space with strides of at least 2^min_stride_bit. */
typedef struct random_case {
    int32_t *sel;
    float *selw, *pl;
    memra_vrows_macros mac;
    memra_vrows_slabs sl;
    dcase c;
} random_case;

/* Returns 0, or -1 when out of host memory (then nothing is held). */
static inline int random_case_make(random_case *r, uint64_t *s, uint32_t n, uint32_t n_expert,
                                   int bad_ids, int with_macros, int min_stride_bit, int il)
{
    r->sel = malloc((size_t)n * 4);
    r->selw = malloc((size_t)n * 4);
    r->pl = malloc(3 * (size_t)n_expert * 4);
    if (!r->sel || !r->selw || !r->pl) {
        free(r->sel), free(r->selw), free(r->pl);
        return -1;
    }
    for (uint32_t p = 0; p < n; p++) {
        r->sel[p] = (int32_t)(rng_next(s) % n_expert);
        if (bad_ids && rng_next(s) % 64 == 0)
            r->sel[p] = (rng_next(s) & 1) ? -(int32_t)(1 + rng_next(s) % 5)
                                          : (int32_t)(n_expert + rng_next(s) % 5);
        r->selw[p] = rng_special_float(s);
    }
    for (uint32_t e = 0; e < 3 * n_expert; e++)
        r->pl[e] = rng_special_float(s);
    r->mac = (memra_vrows_macros){{r->pl, r->pl + n_expert, r->pl + 2 * (size_t)n_expert}};
    rng_high_slabs(s, n_expert, min_stride_bit, &r->sl);
    r->c = (dcase){n, n_expert, r->sel, r->selw, with_macros ? &r->mac : NULL, &r->sl, il, NULL, 1};
    return 0;
}

static inline void random_case_free(random_case *r)
{
    free(r->sel), free(r->selw), free(r->pl);
}

#endif /* MEMRA_RANDOM_CASE_H */
