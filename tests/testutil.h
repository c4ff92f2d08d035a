/* Helpers shared by the test programs: deterministic randomness, bit-exact
 * float comparison and an independent model of the section 2 arithmetic. */
#ifndef MEMRA_TESTUTIL_H
#define MEMRA_TESTUTIL_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <memra/memra.h>

#include "base/rng.h"

static inline uint32_t f2u(float x)
{
    uint32_t b;
    memcpy(&b, &x, 4);
    return b;
}

static inline float u2f(uint32_t b)
{
    float x;
    memcpy(&x, &b, 4);
    return x;
}

/* The expected scale, computed apart from the library: the product of two
 * binary32 values is exact in binary64 (48 significant bits), so one
 * conversion back rounds it correctly, subnormal results included. */
static inline uint32_t ref_scale_bits(float w, float m)
{
    float r = (float)((double)w * (double)m);
    uint32_t b = f2u(r);
    if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffffu))
        return 0x7fc00000u;
    return b;
}

static inline int ref_nonfinite(uint32_t b)
{
    return (b & 0x7f800000u) == 0x7f800000u;
}

/* 128-bit integers: an address model that cannot itself wrap. */
__extension__ typedef unsigned __int128 u128;

/* Expected tables from a 128-bit model of the address arithmetic. */
static inline void ref_tables(const int32_t *sel, const float *selw, uint32_t n, uint32_t n_expert,
                              const memra_vrows_macros *mac, const memra_vrows_slabs *sl,
                              uint64_t *ptrs, uint32_t *scl_bits, memra_faults *f)
{
    f->bad_expert = f->nonfinite = f->not_local = f->padded = 0;
    f->first_pair = MEMRA_NO_FAULT;
    for (uint32_t p = 0; p < n; p++) {
        int32_t ex = sel[p];
        int ok = ex >= 0 && (int64_t)ex < (int64_t)n_expert;
        for (int k = 0; k < 3; k++) {
            u128 a = (u128)sl->base[k] + (u128)(ok ? (uint64_t)ex : 0) * sl->stride[k];
            assert_true(a < ((u128)1 << 64));
            ptrs[(size_t)k * n + p] = (uint64_t)a;
        }
        if (!ok) {
            scl_bits[p] = scl_bits[n + p] = scl_bits[2 * (size_t)n + p] = 0;
            f->bad_expert++;
            if (f->first_pair == MEMRA_NO_FAULT)
                f->first_pair = p;
            continue;
        }
        uint32_t b0 = mac ? ref_scale_bits(mac->plane[0][ex], 1.0f) : f2u(1.0f);
        uint32_t b1 = mac ? ref_scale_bits(mac->plane[1][ex], 1.0f) : f2u(1.0f);
        uint32_t b2 = ref_scale_bits(selw[p], mac ? mac->plane[2][ex] : 1.0f);
        scl_bits[p] = b0;
        scl_bits[n + p] = b1;
        scl_bits[2 * (size_t)n + p] = b2;
        if (ref_nonfinite(b0) || ref_nonfinite(b1) || ref_nonfinite(b2)) {
            f->nonfinite++;
            if (f->first_pair == MEMRA_NO_FAULT)
                f->first_pair = p;
        }
    }
}

#endif /* MEMRA_TESTUTIL_H */
