/* The table host arm: the reference the device kernel must match bit for
 * bit (docs/arithmetic.md), with the expert-parallel and shared-expert
 * options (memra_vrows_options). */
#include <fenv.h>
#include <stdint.h>
#include <string.h>

#include "base/error.h"
#include "vrows_host.h"
#include "vrows_spec.h"

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

/* Where expert ex lives, as the kernel's memra_vrows_slot: a slot, or
 * SLOT_NOT_LOCAL, or SLOT_BAD. */
#define SLOT_NOT_LOCAL (-1)
#define SLOT_BAD (-2)
static int64_t slot_of(int32_t ex, uint32_t n_expert, const int32_t *map, uint32_t n_local,
                       uint32_t n_shared)
{
    if (ex >= 0 && (uint32_t)ex < n_expert) {
        if (!map)
            return ex;
        const int32_t v = map[ex];
        if (v == -1)
            return SLOT_NOT_LOCAL;
        return v >= 0 && (uint32_t)v < n_local ? v : SLOT_BAD;
    }
    if (ex >= 0 && (uint32_t)ex - n_expert < n_shared)
        return (int64_t)(map ? n_local : n_expert) + ((uint32_t)ex - n_expert);
    return SLOT_BAD;
}

/* The tables of checked arguments. */
static memra_status tables(const char *fn, const int32_t *sel, const float *selw, uint32_t n_pairs,
                           uint32_t n_live, uint32_t n_expert, const memra_vrows_macros *macros,
                           const memra_vrows_slabs *slabs, const memra_vrows_options *opt,
                           uint64_t *ptrs, float *scl, memra_faults *faults)
{
    const float *mg = macros ? macros->plane[MEMRA_GATE] : NULL;
    const float *mu = macros ? macros->plane[MEMRA_UP] : NULL;
    const float *md = macros ? macros->plane[MEMRA_DOWN] : NULL;
    const int32_t *map = opt ? (const int32_t *)(uintptr_t)opt->expert_map : NULL;
    const uint32_t n_local = opt ? opt->n_local : 0, n_shared = opt ? opt->n_shared : 0;

    fenv_t saved;
    fegetenv(&saved);
    fesetenv(FE_DFL_ENV);

    memra_faults f = {0, 0, MEMRA_NO_FAULT, 0, 0};
    uint32_t first_bad = 0;
    const size_t n = n_pairs;
    for (size_t p = 0; p < n; p++) {
        const int32_t ex = sel[p];
        uint64_t g = slabs->base[0], u = slabs->base[1], d = slabs->base[2];
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f;
        const int64_t slot = slot_of(ex, n_expert, map, n_local, n_shared);
        if (p >= n_live) {
            /* A padding row's pair (routing's n_real): no expert, nothing to
             * read, not a fault. */
            g = u = d = 0;
            f.padded++;
        } else if (slot >= 0) {
            /* 64-bit all the way: stride * slot passes 4 GiB in serving slabs. */
            const uint64_t e = (uint64_t)slot;
            g += e * slabs->stride[0];
            u += e * slabs->stride[1];
            d += e * slabs->stride[2];
            s0 = mg ? mg[slot] : 1.0f;
            s1 = mu ? mu[slot] : 1.0f;
            s2 = mul_rn(selw[p], md ? md[slot] : 1.0f);
            if (is_nonfinite(s0) || is_nonfinite(s1) || is_nonfinite(s2)) {
                f.nonfinite++;
                if (f.first_pair == MEMRA_NO_FAULT)
                    f.first_pair = (uint32_t)p;
                s0 = canonical(s0);
                s1 = canonical(s1);
                s2 = canonical(s2);
            }
        } else if (slot == SLOT_NOT_LOCAL) {
            /* Another rank's expert: NULL pointers, +0 scales, not a fault. */
            g = u = d = 0;
            f.not_local++;
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
    if (f.bad_expert) {
        if (map)
            return memra_fail(MEMRA_ERR_EXPERT_RANGE,
                              "%s: %u pair(s) have an expert id outside [0, %u) or a map slot "
                              "outside [-1, %u); first is pair %u (sel = %d); they got slot 0's "
                              "pointers and +0 scales",
                              fn, f.bad_expert, n_expert + n_shared, n_local, first_bad,
                              (int)sel[first_bad]);
        return memra_fail(MEMRA_ERR_EXPERT_RANGE,
                          "%s: %u pair(s) have an expert id outside [0, %u); first is pair %u "
                          "(sel = %d); they got expert 0's pointers and +0 scales",
                          fn, f.bad_expert, n_expert + n_shared, first_bad, (int)sel[first_bad]);
    }
    if (f.nonfinite)
        return memra_fail(MEMRA_ERR_NONFINITE_SCALE,
                          "%s: %u pair(s) produced a NaN or infinite scale; first is pair %u", fn,
                          f.nonfinite, f.first_pair);
    return MEMRA_OK;
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
    return tables(fn, sel, selw, n_pairs, n_pairs, n_expert, have_macros ? macros : NULL, slabs,
                  NULL, ptrs, scl, faults);
}

memra_status memra_vrows_tables_host_ex(const int32_t *sel, const float *selw, uint32_t n_pairs,
                                        uint32_t n_expert, const memra_vrows_macros *macros,
                                        const memra_vrows_slabs *slabs,
                                        const memra_vrows_options *options, uint64_t *ptrs,
                                        float *scl, memra_faults *faults)
{
    static const char fn[] = "memra_vrows_tables_host_ex";
    int have_macros;
    memra_status st = memra_vrows_validate_ex(
        fn, (uint64_t)(uintptr_t)sel, (uint64_t)(uintptr_t)selw, n_pairs, n_expert, options, macros,
        slabs, (uint64_t)(uintptr_t)ptrs, (uint64_t)(uintptr_t)scl, &have_macros);
    if (st || n_pairs == 0)
        return st;
    return memra_vrows_tables_host_checked(fn, sel, selw, n_pairs, n_pairs, n_expert,
                                           have_macros ? macros : NULL, slabs, options, ptrs, scl,
                                           faults);
}

memra_status memra_vrows_tables_host_checked(const char *fn, const int32_t *sel, const float *selw,
                                             uint32_t n_pairs, uint32_t n_live, uint32_t n_expert,
                                             const memra_vrows_macros *macros,
                                             const memra_vrows_slabs *slabs,
                                             const memra_vrows_options *options, uint64_t *ptrs,
                                             float *scl, memra_faults *faults)
{
    return tables(fn, sel, selw, n_pairs, n_live, n_expert, macros, slabs, options, ptrs, scl,
                  faults);
}
