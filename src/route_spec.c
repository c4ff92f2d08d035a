#include "route_spec.h"

#include <string.h>

#include "error.h"
#include "validate.h"

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
    if (s->logits_dtype != MEMRA_LOGITS_F32 && s->logits_dtype != MEMRA_LOGITS_BF16)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: spec->logits_dtype = %d is not f32 or bf16",
                          fn, (int)s->logits_dtype);
    if (s->renormalize != 0 && s->renormalize != 1)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: spec->renormalize = %d is not 0 or 1", fn,
                          s->renormalize);
    uint32_t b;
    memcpy(&b, &s->routed_scaling_factor, 4);
    if ((b & 0x7f800000u) == 0x7f800000u || !(s->routed_scaling_factor > 0.0f))
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: spec->routed_scaling_factor = %g must be finite and > 0", fn,
                          (double)s->routed_scaling_factor);
    for (uint32_t e = 0; s->bias && e < s->n_expert; e++) {
        memcpy(&b, &s->bias[e], 4);
        if ((b & 0x7f800000u) == 0x7f800000u)
            return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: spec->bias[%u] = %g is not finite", fn, e,
                              (double)s->bias[e]);
    }
    return MEMRA_OK;
}

memra_status memra_route_validate(const char *fn, uint64_t logits, uint32_t n_tokens,
                                  const memra_route_spec *spec, const memra_vrows_macros *macros,
                                  const memra_vrows_slabs *slabs, uint64_t sel, uint64_t selw,
                                  uint64_t ptrs, uint64_t scl, int *have_macros)
{
    memra_status st = memra_route_spec_check(fn, spec);
    if (st)
        return st;
    if (!logits)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: logits is NULL", fn);
    if (logits % (spec->logits_dtype == MEMRA_LOGITS_BF16 ? 2 : 4))
        return memra_fail(MEMRA_ERR_MISALIGNED, "%s: logits = 0x%llx is not aligned to its element",
                          fn, (unsigned long long)logits);
    if (n_tokens == 0 || (uint64_t)n_tokens * spec->top_k > MEMRA_MAX_PAIRS)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: n_tokens = %u: n_tokens * top_k must be in [1, %u]", fn, n_tokens,
                          MEMRA_MAX_PAIRS);
    return memra_vrows_validate(fn, sel, selw, n_tokens * spec->top_k, spec->n_expert, macros,
                                slabs, ptrs, scl, have_macros);
}

int memra_route_planes(const memra_route_spec *spec, const memra_vrows_macros *macros,
                       int have_macros, const float *planes[4])
{
    int n = 0;
    for (int k = 0; have_macros && k < 3; k++)
        planes[n++] = macros->plane[k];
    if (spec->bias)
        planes[n++] = spec->bias;
    return n;
}
