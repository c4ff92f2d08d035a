#include "vrows_spec.h"

#include <stdint.h>

#include "base/error.h"

static const char *const plane_names[3] = {"gate", "up", "down"};

memra_status memra_macros_check(const char *fn, const memra_vrows_macros *macros, int *present)
{
    *present = 0;
    if (!macros)
        return MEMRA_OK;
    int n = 0;
    for (int k = 0; k < 3; k++)
        n += macros->plane[k] != NULL;
    if (n == 0)
        return MEMRA_OK;
    if (n != 3) {
        for (int k = 0; k < 3; k++)
            if (!macros->plane[k])
                return memra_fail(MEMRA_ERR_NULL_ARG,
                                  "%s: macros->plane[%d] (%s) is NULL while other planes are "
                                  "set; pass all three planes or none",
                                  fn, k, plane_names[k]);
    }
    /* Read as floats (the host arms, the mirror's compare): a misaligned
     * plane is undefined behaviour there, so it is refused like every
     * other misaligned buffer. */
    for (int k = 0; k < 3; k++)
        if ((uintptr_t)macros->plane[k] % sizeof(float))
            return memra_fail(MEMRA_ERR_MISALIGNED,
                              "%s: macros->plane[%d] (%s) = %p is not aligned to a float", fn, k,
                              plane_names[k], (const void *)macros->plane[k]);
    *present = 1;
    return MEMRA_OK;
}

memra_status memra_vrows_options_check(const char *fn, const char *prefix, uint32_t n_expert,
                                       const memra_vrows_options *o, uint32_t *n_slots)
{
    *n_slots = n_expert;
    if (!o)
        return MEMRA_OK;
    if (o->expert_map && o->n_local == 0)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: %sn_local is 0 with an expert_map", fn,
                          prefix);
    if (!o->expert_map && o->n_local)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: %sn_local = %u without an expert_map", fn,
                          prefix, o->n_local);
    if (o->expert_map % 4)
        return memra_fail(MEMRA_ERR_MISALIGNED,
                          "%s: %sexpert_map = 0x%llx is not aligned to 4 bytes", fn, prefix,
                          (unsigned long long)o->expert_map);
    /* Ids and slots are int32 on both sides. */
    const uint64_t base = o->expert_map ? o->n_local : n_expert;
    if ((uint64_t)n_expert + o->n_shared > INT32_MAX || base + o->n_shared > INT32_MAX)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: %sn_shared = %u: the ids and slots of the shared experts pass "
                          "2^31 - 1",
                          fn, prefix, o->n_shared);
    if (o->n_local > INT32_MAX)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: %sn_local = %u passes 2^31 - 1", fn, prefix,
                          o->n_local);
    *n_slots = (uint32_t)(base + o->n_shared);
    return MEMRA_OK;
}

static memra_status validate(const char *fn, uint64_t sel, uint64_t selw, uint32_t n_pairs,
                             uint32_t n_expert, const memra_vrows_options *options,
                             const memra_vrows_macros *macros, const memra_vrows_slabs *slabs,
                             uint64_t ptrs, uint64_t scl, int *have_macros, int allow_empty)
{
    uint32_t n_slots;
    *have_macros = 0;
    if (allow_empty && n_pairs == 0) {
        if (n_expert == 0)
            return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: n_expert is 0", fn);
        return memra_vrows_options_check(fn, "options->", n_expert, options, &n_slots);
    }
    const struct {
        const char *name;
        uint64_t addr;
        uint64_t align;
    } bufs[] = {{"sel", sel, 4}, {"selw", selw, 4}, {"ptrs", ptrs, 8}, {"scl", scl, 4}};

    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (!bufs[i].addr)
            return memra_fail(MEMRA_ERR_NULL_ARG, "%s: %s is NULL", fn, bufs[i].name);
    if (!slabs)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: slabs is NULL", fn);
    memra_status st = memra_macros_check(fn, macros, have_macros);
    if (st)
        return st;

    if (n_pairs == 0 || n_pairs > MEMRA_MAX_PAIRS)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: n_pairs = %u is outside [%d, %u]", fn,
                          n_pairs, allow_empty ? 0 : 1, MEMRA_MAX_PAIRS);
    if (n_expert == 0)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: n_expert is 0", fn);
    if ((st = memra_vrows_options_check(fn, "options->", n_expert, options, &n_slots)))
        return st;

    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i].addr % bufs[i].align)
            return memra_fail(MEMRA_ERR_MISALIGNED, "%s: %s = 0x%llx is not aligned to %llu bytes",
                              fn, bufs[i].name, (unsigned long long)bufs[i].addr,
                              (unsigned long long)bufs[i].align);

    /* The last slot's row must be addressable: a slab that wraps past 2^64
     * would hand the GEMV a pointer into unrelated memory. */
    for (int k = 0; k < 3; k++) {
        uint64_t span, last;
        if (__builtin_mul_overflow((uint64_t)(n_slots - 1), slabs->stride[k], &span) ||
            __builtin_add_overflow(slabs->base[k], span, &last))
            return memra_fail(MEMRA_ERR_SLAB_OVERFLOW,
                              "%s: slabs->base[%d] (%s) 0x%llx + (n_slots-1 = %u) * "
                              "slabs->stride[%d] %llu passes 2^64",
                              fn, k, plane_names[k], (unsigned long long)slabs->base[k],
                              n_slots - 1, k, (unsigned long long)slabs->stride[k]);
    }
    return MEMRA_OK;
}

memra_status memra_vrows_validate(const char *fn, uint64_t sel, uint64_t selw, uint32_t n_pairs,
                                  uint32_t n_expert, const memra_vrows_macros *macros,
                                  const memra_vrows_slabs *slabs, uint64_t ptrs, uint64_t scl,
                                  int *have_macros)
{
    return validate(fn, sel, selw, n_pairs, n_expert, NULL, macros, slabs, ptrs, scl, have_macros,
                    0);
}

memra_status memra_vrows_validate_ex(const char *fn, uint64_t sel, uint64_t selw, uint32_t n_pairs,
                                     uint32_t n_expert, const memra_vrows_options *options,
                                     const memra_vrows_macros *macros,
                                     const memra_vrows_slabs *slabs, uint64_t ptrs, uint64_t scl,
                                     int *have_macros)
{
    return validate(fn, sel, selw, n_pairs, n_expert, options, macros, slabs, ptrs, scl,
                    have_macros, 1);
}
