/* The host arm: DESIGN section 2, the reference the device kernel must match
 * bit for bit. */
#include <fenv.h>
#include <stdint.h>
#include <string.h>

#include "error.h"
#include "validate.h"

#define QNAN_BITS 0x7fc00000u
#define EXP_MASK 0x7f800000u

static uint32_t bits_of(float x)
{
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

static float float_of(uint32_t b)
{
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

static int is_nonfinite(float x)
{
    return (bits_of(x) & EXP_MASK) == EXP_MASK;
}

/* x86 propagates a NaN operand's payload and other CPUs may not; the GPU
 * returns its own. Writing one canonical NaN keeps the two arms identical. */
static float canonical(float x)
{
    return (bits_of(x) << 1) > (EXP_MASK << 1) ? float_of(QNAN_BITS) : x;
}

/* The product must not be contracted with anything (compiled with
 * -ffp-contract=off) and must run in the default environment: a serving
 * process may have turned on FTZ/DAZ (e.g. torch.set_flush_denormal) or
 * changed the rounding mode, and subnormal scales must survive. */
static float mul_rn(float a, float b)
{
    volatile float r = a * b;
    return r;
}

memra_status memra_vrows_tables_host(const int32_t *sel, const float *selw, uint32_t n_pairs,
                                     uint32_t n_expert, const memra_vrows_macros *macros,
                                     const memra_vrows_slabs *slabs, uint64_t *ptrs, float *scl,
                                     memra_faults *faults)
{
    static const char fn[] = "memra_vrows_tables_host";
    int have_macros;
    memra_status st = memra_vrows_validate(
        fn, (uint64_t)(uintptr_t)sel, (uint64_t)(uintptr_t)selw, n_pairs, n_expert, macros, slabs,
        (uint64_t)(uintptr_t)ptrs, (uint64_t)(uintptr_t)scl, &have_macros);
    if (st)
        return st;
    const float *mg = have_macros ? macros->plane[MEMRA_GATE] : NULL;
    const float *mu = have_macros ? macros->plane[MEMRA_UP] : NULL;
    const float *md = have_macros ? macros->plane[MEMRA_DOWN] : NULL;

    fenv_t saved;
    fegetenv(&saved);
    fesetenv(FE_DFL_ENV);

    memra_faults f = {0, 0, MEMRA_NO_FAULT};
    uint32_t first_bad = 0;
    const size_t n = n_pairs;
    for (size_t p = 0; p < n; p++) {
        const int32_t ex = sel[p];
        uint64_t g = slabs->base[0], u = slabs->base[1], d = slabs->base[2];
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f;
        if (ex >= 0 && (uint32_t)ex < n_expert) {
            /* 64-bit all the way: stride * ex passes 4 GiB in serving slabs. */
            const uint64_t e = (uint64_t)ex;
            g += e * slabs->stride[0];
            u += e * slabs->stride[1];
            d += e * slabs->stride[2];
            s0 = mg ? mg[ex] : 1.0f;
            s1 = mu ? mu[ex] : 1.0f;
            s2 = mul_rn(selw[p], md ? md[ex] : 1.0f);
            if (is_nonfinite(s0) || is_nonfinite(s1) || is_nonfinite(s2)) {
                f.nonfinite++;
                if (f.first_pair == MEMRA_NO_FAULT)
                    f.first_pair = (uint32_t)p;
                s0 = canonical(s0);
                s1 = canonical(s1);
                s2 = canonical(s2);
            }
        } else {
            if (f.bad_expert++ == 0)
                first_bad = (uint32_t)p;
            if (f.first_pair == MEMRA_NO_FAULT)
                f.first_pair = (uint32_t)p;
        }
        ptrs[p] = g;
        ptrs[n + p] = u;
        ptrs[2 * n + p] = d;
        scl[p] = s0;
        scl[n + p] = s1;
        scl[2 * n + p] = s2;
    }

    fesetenv(&saved);

    if (faults)
        *faults = f;
    if (f.bad_expert)
        return memra_fail(MEMRA_ERR_EXPERT_RANGE,
                          "%s: %u pair(s) have an expert id outside [0, %u); first is pair %u "
                          "(sel = %d); they got expert 0's pointers and +0 scales",
                          fn, f.bad_expert, n_expert, first_bad, (int)sel[first_bad]);
    if (f.nonfinite)
        return memra_fail(MEMRA_ERR_NONFINITE_SCALE,
                          "%s: %u pair(s) produced a NaN or infinite scale; first is pair %u", fn,
                          f.nonfinite, f.first_pair);
    return MEMRA_OK;
}
