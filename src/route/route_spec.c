#include "route_spec.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "abi.h"
#include "base/error.h"
#include "layout/layout_spec.h"
#include "vrows/vrows_spec.h"

/* The public structs' layouts on LP64, which the Python (ctypes) and Rust
 * (repr(C)) copies repeat: a change here is a change there. */
_Static_assert(sizeof(memra_route_spec) == 96, "memra_route_spec is 96 bytes");
_Static_assert(offsetof(memra_route_spec, group_scoring) == 40, "group_scoring at 40");
_Static_assert(offsetof(memra_route_spec, bias_ptr) == 48, "bias_ptr at 48");
_Static_assert(offsetof(memra_route_spec, shared_weight) == 72, "shared_weight at 72");
_Static_assert(offsetof(memra_route_spec, shared_rule) == 76, "shared_rule at 76");
_Static_assert(offsetof(memra_route_spec, n_real_dtype) == 84, "n_real_dtype at 84");
_Static_assert(offsetof(memra_route_spec, n_real) == 88, "n_real at 88");
_Static_assert(sizeof(memra_faults) == 20, "memra_faults is 20 bytes");
_Static_assert(sizeof(memra_vrows_options) == 16, "memra_vrows_options is 16 bytes");

/* Floats are judged by their bits, never by comparisons: under the caller's
 * flush-to-zero / denormals-are-zero (MXCSR FTZ/DAZ, torch.set_flush_denormal)
 * a subnormal compares equal to zero, and the same spec would be accepted in
 * one process and refused in another. The kernels and the host arm compute
 * with subnormals kept, so a subnormal routed_scaling_factor is a positive
 * number like any other. */
static uint32_t bits_of(float x)
{
    uint32_t b;
    memcpy(&b, &x, 4);
    return b;
}

static int finite_bits(uint32_t b)
{
    return (b & 0x7f800000u) != 0x7f800000u;
}

/* Positive and finite: sign clear, not +0, exponent not all ones. */
static int positive_finite_bits(uint32_t b)
{
    return !(b & 0x80000000u) && b != 0 && finite_bits(b);
}

memra_vrows_options memra_route_spec_options(const memra_route_spec *s)
{
    const memra_vrows_options o = {s->expert_map, s->n_local, s->n_shared};
    return o;
}

uint32_t memra_route_pairs_per_token(const memra_route_spec *s)
{
    return s->top_k + s->n_shared;
}

int memra_route_group_max(const memra_route_spec *s)
{
    return s->group_scoring == MEMRA_GROUP_MAX ||
           (s->group_scoring == MEMRA_GROUP_AUTO && !s->bias && !s->bias_ptr);
}

/* The public limit is the kernels' (their shared arrays hold this many). */
_Static_assert(MEMRA_ROUTE_MAX_EXPERT == MEMRA_ABI_ROUTE_MAX_EXPERT,
               "memra.h's MEMRA_ROUTE_MAX_EXPERT is the kernels' limit");
/* The kernels give each group, and each of the top_k winners, a lane of one
 * warp (route_warp.cu's gthr[32] and we[32], route_block.cu's lane per
 * group): a larger public limit would overrun those arrays. */
_Static_assert(MEMRA_ROUTE_MAX_GROUPS <= 32 && MEMRA_ROUTE_MAX_TOP_K <= 32,
               "memra.h's group and top_k limits fit one warp's lanes");

memra_status memra_route_spec_check(const char *fn, const memra_route_spec *spec)
{
    if (!spec)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: spec is NULL", fn);
    const memra_route_spec *s = spec;
    if (s->n_expert == 0 || s->n_expert > MEMRA_ROUTE_MAX_EXPERT)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: spec->n_expert = %u is outside [1, %d]", fn,
                          s->n_expert, MEMRA_ROUTE_MAX_EXPERT);
    if (s->n_group == 0 || s->n_group > MEMRA_ROUTE_MAX_GROUPS || s->n_expert % s->n_group)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: spec->n_group = %u must be in [1, %d] and divide n_expert = %u", fn,
                          s->n_group, MEMRA_ROUTE_MAX_GROUPS, s->n_expert);
    if (s->topk_group == 0 || s->topk_group > s->n_group)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: spec->topk_group = %u is outside [1, %u]", fn,
                          s->topk_group, s->n_group);
    const uint32_t in_play = s->topk_group * (s->n_expert / s->n_group);
    if (s->top_k == 0 || s->top_k > MEMRA_ROUTE_MAX_TOP_K || s->top_k > in_play)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: spec->top_k = %u must be in [1, %d] and at most the %u experts in "
                          "play (topk_group * n_expert / n_group)",
                          fn, s->top_k, MEMRA_ROUTE_MAX_TOP_K, in_play);
    if (s->scoring != MEMRA_ROUTE_SOFTMAX && s->scoring != MEMRA_ROUTE_SIGMOID)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: spec->scoring = %d is not softmax or sigmoid",
                          fn, (int)s->scoring);
    if (s->logits_dtype != MEMRA_LOGITS_F32 && s->logits_dtype != MEMRA_LOGITS_BF16 &&
        s->logits_dtype != MEMRA_LOGITS_F16)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: spec->logits_dtype = %d is not f32, bf16 or f16", fn,
                          (int)s->logits_dtype);
    if (s->renormalize != 0 && s->renormalize != 1)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: spec->renormalize = %d is not 0 or 1", fn,
                          s->renormalize);
    uint32_t b = bits_of(s->routed_scaling_factor);
    if (!positive_finite_bits(b))
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: spec->routed_scaling_factor (bits 0x%08x) must be finite and > 0",
                          fn, b);
    /* Judged before a float is read through it (a misaligned read is
     * undefined; memra.route_tables_host takes an integer address). */
    if ((uintptr_t)s->bias % _Alignof(float))
        return memra_fail(MEMRA_ERR_MISALIGNED, "%s: spec->bias = %p is not aligned to a float", fn,
                          (const void *)s->bias);
    for (uint32_t e = 0; s->bias && e < s->n_expert; e++) {
        b = bits_of(s->bias[e]);
        if (!finite_bits(b))
            return memra_fail(MEMRA_ERR_INVALID_ARG,
                              "%s: spec->bias[%u] (bits 0x%08x) is not finite", fn, e, b);
    }
    if (s->group_scoring != MEMRA_GROUP_AUTO && s->group_scoring != MEMRA_GROUP_TOP2_SUM &&
        s->group_scoring != MEMRA_GROUP_MAX)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: spec->group_scoring = %d is not auto (0), top2-sum (1) or max (2)",
                          fn, (int)s->group_scoring);
    if (s->bias_dtype != MEMRA_BIAS_F32 && s->bias_dtype != MEMRA_BIAS_BF16)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: spec->bias_dtype = %d is not f32 or bf16", fn,
                          (int)s->bias_dtype);
    if (s->bias && s->bias_ptr)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: spec->bias and spec->bias_ptr are both set; give one bias", fn);
    if (s->bias_ptr % (s->bias_dtype == MEMRA_BIAS_BF16 ? 2 : 4))
        return memra_fail(MEMRA_ERR_MISALIGNED,
                          "%s: spec->bias_ptr = 0x%llx is not aligned to its element", fn,
                          (unsigned long long)s->bias_ptr);
    if (s->n_shared > MEMRA_ROUTE_MAX_TOP_K - s->top_k)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: spec->n_shared = %u: top_k + n_shared must be at most %d", fn,
                          s->n_shared, MEMRA_ROUTE_MAX_TOP_K);
    b = bits_of(s->shared_weight);
    if (!finite_bits(b))
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: spec->shared_weight (bits 0x%08x) is not finite", fn, b);
    if (s->shared_rule != MEMRA_SHARED_CONSTANT && s->shared_rule != MEMRA_SHARED_ROUTED_SUM)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: spec->shared_rule = %d is not constant (0) or routed-sum (1)", fn,
                          (int)s->shared_rule);
    /* Each rule has its one number; the other one set is a caller's mix-up
     * (a constant weight that would be ignored, or a divisor never used). */
    const uint32_t dv = bits_of(s->shared_divisor);
    if (s->shared_rule == MEMRA_SHARED_ROUTED_SUM && !positive_finite_bits(dv))
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: spec->shared_divisor (bits 0x%08x) must be finite and > 0 with "
                          "MEMRA_SHARED_ROUTED_SUM",
                          fn, dv);
    if (s->shared_rule == MEMRA_SHARED_ROUTED_SUM && b != 0)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: spec->shared_weight (bits 0x%08x) is unused with "
                          "MEMRA_SHARED_ROUTED_SUM; leave it 0",
                          fn, b);
    if (s->shared_rule == MEMRA_SHARED_CONSTANT && dv != 0)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: spec->shared_divisor (bits 0x%08x) is unused with "
                          "MEMRA_SHARED_CONSTANT; leave it 0",
                          fn, dv);
    if (s->n_real_dtype != MEMRA_COUNT_I32 && s->n_real_dtype != MEMRA_COUNT_I64)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: spec->n_real_dtype = %d is not i32 or i64",
                          fn, (int)s->n_real_dtype);
    if (s->n_real % (s->n_real_dtype == MEMRA_COUNT_I64 ? 8 : 4))
        return memra_fail(MEMRA_ERR_MISALIGNED,
                          "%s: spec->n_real = 0x%llx is not aligned to its element", fn,
                          (unsigned long long)s->n_real);
    if (s->n_local > MEMRA_ROUTE_MAX_EXPERT)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: spec->n_local = %u is above %d", fn,
                          s->n_local, MEMRA_ROUTE_MAX_EXPERT);
    const memra_vrows_options o = memra_route_spec_options(s);
    uint32_t n_slots;
    return memra_vrows_options_check(fn, "spec->", s->n_expert, &o, &n_slots);
}

memra_status memra_route_validate(const char *fn, uint64_t logits, uint32_t n_tokens,
                                  const memra_route_spec *spec, const memra_vrows_macros *macros,
                                  const memra_vrows_slabs *slabs, uint64_t sel, uint64_t selw,
                                  uint64_t ptrs, uint64_t scl, int *have_macros)
{
    memra_status st = memra_route_spec_check(fn, spec);
    if (st)
        return st;
    *have_macros = 0;
    if (n_tokens == 0) /* vLLM routes empty batches: nothing to read or write */
        return memra_macros_check(fn, macros, have_macros);
    if (!logits)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: logits is NULL", fn);
    if (logits % (spec->logits_dtype == MEMRA_LOGITS_F32 ? 4 : 2))
        return memra_fail(MEMRA_ERR_MISALIGNED, "%s: logits = 0x%llx is not aligned to its element",
                          fn, (unsigned long long)logits);
    const uint32_t K = memra_route_pairs_per_token(spec);
    if ((uint64_t)n_tokens * K > MEMRA_MAX_PAIRS)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: n_tokens = %u: n_tokens * (top_k + n_shared) must be at most %u", fn,
                          n_tokens, MEMRA_MAX_PAIRS);
    const memra_vrows_options o = memra_route_spec_options(spec);
    return memra_vrows_validate_ex(fn, sel, selw, n_tokens * K, spec->n_expert, &o, macros, slabs,
                                   ptrs, scl, have_macros);
}

uint32_t memra_route_n_slots(const memra_route_spec *spec)
{
    return (spec->expert_map ? spec->n_local : spec->n_expert) + spec->n_shared;
}

int memra_route_planes(const memra_route_spec *spec, const memra_vrows_macros *macros,
                       int have_macros, const float *planes[4], uint32_t *len, float *scratch)
{
    const uint32_t n_slots = memra_route_n_slots(spec);
    int n = 0;
    for (int k = 0; have_macros && k < 3; k++)
        planes[n++] = macros->plane[k];
    const int n_macro = n;
    if (spec->bias)
        planes[n++] = spec->bias;
    *len = have_macros ? n_slots : spec->n_expert;
    if (have_macros && spec->bias && n_slots != spec->n_expert) {
        /* One length for the mirror's planes: the longer, zero-padded. */
        const uint32_t L = n_slots > spec->n_expert ? n_slots : spec->n_expert;
        for (int k = 0; k < n; k++) {
            const uint32_t have = k < n_macro ? n_slots : spec->n_expert;
            float *dst = scratch + (size_t)k * L;
            memcpy(dst, planes[k], (size_t)have * sizeof(float));
            memset(dst + have, 0, (size_t)(L - have) * sizeof(float));
            planes[k] = dst;
        }
        *len = L;
    }
    return n;
}

memra_status memra_route_layout_check(const char *fn, const memra_route_spec *spec, uint64_t sel,
                                      uint32_t n_pairs, const memra_layout_spec *layout_spec,
                                      const memra_layout *layout, int device,
                                      memra_layout_params *lp)
{
    if (!layout_spec || !layout)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: %s is NULL (give both, or neither)", fn,
                          layout_spec ? "layout" : "layout_spec");
    const uint32_t want = spec->n_expert + spec->n_shared;
    if (layout_spec->n_expert != want)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: layout_spec->n_expert = %u must be the routing's n_expert + "
                          "n_shared = %u",
                          fn, layout_spec->n_expert, want);
    if (layout_spec->expert_map)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: layout_spec->expert_map must be 0 here: the routing spec's "
                          "expert_map labels the blocks",
                          fn);
    memra_status st = memra_layout_validate(fn, sel, n_pairs, layout_spec, layout, device, lp);
    if (st)
        return st;
    lp->map = spec->expert_map, lp->map_len = spec->n_expert, lp->n_local = spec->n_local;
    return MEMRA_OK;
}
