/* The routing device arm: router logits to sel, selw and the tables in one
 * launch, with the layer's macro planes and bias mirrored like the table
 * kernel's. */
#include "engine.h"
#include "route.h"

#include "error.h"
#include "launch.h"
#include "mirror.h"
#include "route_abi.h"
#include "route_spec.h"
#include "validate.h"

/* memra_moe_route_tables picks the block kernel (a block per token) up to
 * this many tokens and the warp kernel (a warp per token) above: a first
 * choice, not yet measured (memra bench --route times both at every size).
 * The tests and the benchmark force either (memra_route_variant). */
#define ROUTE_BLOCK_MAX_TOKENS 512u
int memra_route_variant = MEMRA_ROUTE_VARIANT_AUTO;

/* After the arguments are checked: the layer index where the layer mirrors
 * anything, then the context and the loaded kernel. */
static memra_status route_enter(memra_engine *eng, const char *fn, const memra_route_spec *spec,
                                int il, int have_macros, CUstream s, int *pushed)
{
    memra_status st;
    if ((have_macros || spec->bias) && (st = memra_check_layer(fn, il)))
        return st;
    if ((st = memra_ctx_enter(eng, fn, pushed)))
        return st;
    CUfunction f;
    if ((st = memra_engine_kernel(eng, s, fn, &f)))
        memra_ctx_leave(eng, *pushed);
    return st;
}

/* The layer's mirrored planes (macro planes, host bias) on the device. */
static memra_status route_mirror(memra_engine *eng, const char *fn, int il,
                                 const memra_route_spec *spec, const memra_vrows_macros *macros,
                                 int have_macros, CUstream s, memra_route_args *a)
{
    float scratch[MEMRA_ROUTE_SCRATCH];
    const float *planes[4];
    uint32_t len;
    const int n = memra_route_planes(spec, macros, have_macros, planes, &len, scratch);
    if (!n)
        return MEMRA_OK;
    CUdeviceptr dev;
    memra_status st = memra_mirror_get(eng, fn, il, len, planes, n, s, &dev);
    if (st || !a)
        return st;
    if (have_macros) {
        a->mg = memra_mirror_plane(dev, len, 0);
        a->mu = memra_mirror_plane(dev, len, 1);
        a->md = memra_mirror_plane(dev, len, 2);
    }
    if (spec->bias) /* after the macro planes, as memra_route_planes lists them */
        a->bias = memra_mirror_plane(dev, len, n - 1);
    return MEMRA_OK;
}

memra_status memra_route_prepare_layer(memra_engine *eng, int il, const memra_route_spec *spec,
                                       const memra_vrows_macros *macros, memra_stream stream)
{
    static const char fn[] = "memra_route_prepare_layer";
    if (!eng)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: eng is NULL", fn);
    int have_macros, pushed;
    memra_status st = memra_route_spec_check(fn, spec);
    if (st || (st = memra_macros_check(fn, macros, &have_macros)))
        return st;
    CUstream s = (CUstream)stream;
    if ((st = route_enter(eng, fn, spec, il, have_macros, s, &pushed)))
        return st;
    st = route_mirror(eng, fn, il, spec, macros, have_macros, s, NULL);
    memra_ctx_leave(eng, pushed);
    return st;
}

uint32_t memra_route_flags(const memra_route_spec *spec)
{
    return (spec->scoring == MEMRA_ROUTE_SIGMOID ? MEMRA_ROUTE_FLAG_SIGMOID : 0u) |
           (spec->logits_dtype == MEMRA_LOGITS_BF16 ? MEMRA_ROUTE_FLAG_BF16 : 0u) |
           (spec->logits_dtype == MEMRA_LOGITS_F16 ? MEMRA_ROUTE_FLAG_F16 : 0u) |
           (spec->renormalize ? MEMRA_ROUTE_FLAG_RENORM : 0u) |
           (!spec->bias && spec->bias_ptr && spec->bias_dtype == MEMRA_BIAS_BF16
                ? MEMRA_ROUTE_FLAG_BIAS_BF16
                : 0u) |
           (spec->group_scoring == MEMRA_GROUP_MAX ? MEMRA_ROUTE_FLAG_GROUP_MAX : 0u);
}

static int use_block(int variant, uint32_t n_tokens)
{
    return variant == MEMRA_ROUTE_VARIANT_BLOCK ||
           (variant == MEMRA_ROUTE_VARIANT_AUTO && n_tokens <= ROUTE_BLOCK_MAX_TOKENS);
}

int memra_route_use_block(uint32_t n_tokens)
{
    return use_block(memra_route_variant, n_tokens);
}

memra_status memra_moe_route_tables(memra_engine *eng, memra_devptr logits, uint32_t n_tokens,
                                    const memra_route_spec *spec, int il,
                                    const memra_vrows_macros *macros,
                                    const memra_vrows_slabs *slabs, memra_devptr sel,
                                    memra_devptr selw, memra_devptr ptrs, memra_devptr scl,
                                    memra_stream stream)
{
    return memra_route_launch(eng, logits, n_tokens, spec, il, macros, slabs, sel, selw, ptrs, scl,
                              stream, memra_route_variant);
}

memra_status memra_route_launch(memra_engine *eng, memra_devptr logits, uint32_t n_tokens,
                                const memra_route_spec *spec, int il,
                                const memra_vrows_macros *macros, const memra_vrows_slabs *slabs,
                                memra_devptr sel, memra_devptr selw, memra_devptr ptrs,
                                memra_devptr scl, memra_stream stream, int variant)
{
    static const char fn[] = "memra_moe_route_tables";
    if (!eng)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: eng is NULL", fn);
    int have_macros, pushed;
    memra_status st = memra_route_validate(fn, logits, n_tokens, spec, macros, slabs, sel, selw,
                                           ptrs, scl, &have_macros);
    if (st || n_tokens == 0)
        return st;
    CUstream s = (CUstream)stream;
    if ((st = route_enter(eng, fn, spec, il, have_macros, s, &pushed)))
        return st;

    memra_route_args a = {
        .logits = logits,
        .bias = spec->bias_ptr,
        .pg = slabs->base[0],
        .pu = slabs->base[1],
        .pd = slabs->base[2],
        .sg = slabs->stride[0],
        .su = slabs->stride[1],
        .sd = slabs->stride[2],
        .sel = sel,
        .selw = selw,
        .ptrs = ptrs,
        .scl = scl,
        .faults = eng->faults,
        .map = spec->expert_map,
        .n_tokens = n_tokens,
        .n_expert = spec->n_expert,
        .top_k = spec->top_k,
        .n_group = spec->n_group,
        .topk_group = spec->topk_group,
        .flags = memra_route_flags(spec),
        .n_local = spec->n_local,
        .n_shared = spec->n_shared,
        .scale = spec->routed_scaling_factor,
        .shared_weight = spec->shared_weight,
    };
    if (!(st = route_mirror(eng, fn, il, spec, macros, have_macros, s, &a))) {
        if (use_block(variant, n_tokens))
            st = memra_launch(eng, fn, eng->route_block_fn, n_tokens,
                              memra_route_block_threads(spec->n_expert), &a,
                              MEMRA_ROUTE_PARAM_BYTES, s);
        else
            st = memra_launch(eng, fn, eng->route_fn, memra_route_grid(n_tokens), MEMRA_ROUTE_BLOCK,
                              &a, MEMRA_ROUTE_PARAM_BYTES, s);
    }
    memra_ctx_leave(eng, pushed);
    return st;
}
