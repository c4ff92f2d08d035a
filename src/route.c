/* The routing device arm: router logits to sel, selw and the tables in one
 * launch, with the layer's macro planes and bias mirrored in routing's own
 * slot (never the table kernel's). */
#include "engine.h"
#include "error.h"
#include "launch.h"
#include "route_abi.h"
#include "route_spec.h"
#include "validate.h"

/* After the arguments are checked: the layer index where the layer mirrors
 * anything, the context, what the stream meets, and the loaded kernel. */
static memra_status enter(memra_engine *eng, const char *fn, const memra_route_spec *spec, int il,
                          int scratch, int have_macros, CUstream s, memra_call *c,
                          memra_capture *cap, CUfunction *f)
{
    memra_status st;
    *c = (memra_call){.eng = eng, .d = eng->d, .fn = fn};
    if ((have_macros || spec->bias) && (st = memra_check_layer(fn, il, scratch)))
        return st;
    if ((st = memra_call_enter(eng, fn, c)) || (st = memra_capture_of(c, s, cap)))
        return st;
    if (*cap == MEMRA_CAPTURE_JOINS)
        return memra_refuse_capture(c, s, "launch the kernel", NULL);
    return memra_engine_kernel(c, *cap, MEMRA_KERNEL_ROUTE, f);
}

memra_status memra_route_prepare_layer(memra_engine *eng, int il, const memra_route_spec *spec,
                                       const memra_vrows_macros *macros, memra_stream stream)
{
    static const char fn[] = "memra_route_prepare_layer";
    if (!eng)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: eng is NULL", fn);
    int have_macros;
    memra_status st = memra_route_spec_check(fn, spec);
    if (st || (st = memra_macros_check(fn, macros, &have_macros)))
        return st;
    CUstream s = (CUstream)stream;
    memra_call c;
    memra_capture cap;
    CUfunction f;
    if (!(st = enter(eng, fn, spec, il, 0, have_macros, s, &c, &cap, &f)) &&
        !(st = memra_refuse_capture(&c, s, "upload the layer's planes",
                                    "prepare every layer before capture"))) {
        const float *planes[4];
        const int n = memra_route_planes(spec, macros, have_macros, planes);
        CUdeviceptr dev;
        if (n)
            st = memra_mirror_get(&c, cap, il, MEMRA_MIRROR_ROUTE, spec->n_expert, planes, n, s,
                                  &dev);
    }
    memra_call_leave(&c);
    return st;
}

memra_status memra_route_launch(memra_engine *eng, const char *fn, memra_devptr logits,
                                uint32_t n_tokens, const memra_route_spec *spec, int il,
                                int scratch, const memra_vrows_macros *macros,
                                const memra_vrows_slabs *slabs, memra_devptr sel, memra_devptr selw,
                                memra_devptr ptrs, memra_devptr scl, memra_stream stream)
{
    if (!eng)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: eng is NULL", fn);
    int have_macros;
    memra_status st = memra_route_validate(fn, logits, n_tokens, spec, macros, slabs, sel, selw,
                                           ptrs, scl, &have_macros);
    if (st)
        return st;
    CUstream s = (CUstream)stream;
    memra_call c;
    memra_capture cap;
    CUfunction f;
    if ((st = enter(eng, fn, spec, il, scratch, have_macros, s, &c, &cap, &f)))
        goto done;

    const uint32_t E = spec->n_expert;
    memra_route_args a = {
        .logits = logits,
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
        .n_tokens = n_tokens,
        .n_expert = E,
        .top_k = spec->top_k,
        .n_group = spec->n_group,
        .topk_group = spec->topk_group,
        .flags = (spec->scoring == MEMRA_ROUTE_SIGMOID ? MEMRA_ROUTE_FLAG_SIGMOID : 0u) |
                 (spec->logits_dtype == MEMRA_LOGITS_BF16 ? MEMRA_ROUTE_FLAG_BF16 : 0u) |
                 (spec->renormalize ? MEMRA_ROUTE_FLAG_RENORM : 0u),
        .scale = spec->routed_scaling_factor,
    };
    const float *planes[4];
    const int n = memra_route_planes(spec, macros, have_macros, planes);
    if (n) {
        CUdeviceptr dev;
        if ((st = memra_mirror_get(&c, cap, il, memra_mirror_kind_of(MEMRA_MIRROR_ROUTE, scratch),
                                   E, planes, n, s, &dev)))
            goto done;
        if (have_macros) {
            a.mg = memra_mirror_plane(dev, E, 0);
            a.mu = memra_mirror_plane(dev, E, 1);
            a.md = memra_mirror_plane(dev, E, 2);
        }
        if (spec->bias) /* after the macro planes, as memra_route_planes lists them */
            a.bias = memra_mirror_plane(dev, E, n - 1);
    }
    size_t size = MEMRA_ROUTE_PARAM_BYTES;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &a, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    CUresult r = eng->d->cuLaunchKernel(f, memra_route_grid(n_tokens), 1, 1, MEMRA_ROUTE_BLOCK, 1,
                                        1, 0, s, NULL, extra);
    if (r != CUDA_SUCCESS)
        st = memra_cu_fail(eng->d, r, MEMRA_ERR_DRIVER, fn, "cuLaunchKernel");
done:
    memra_call_leave(&c);
    return st;
}

memra_status memra_moe_route_tables(memra_engine *eng, memra_devptr logits, uint32_t n_tokens,
                                    const memra_route_spec *spec, int il,
                                    const memra_vrows_macros *macros,
                                    const memra_vrows_slabs *slabs, memra_devptr sel,
                                    memra_devptr selw, memra_devptr ptrs, memra_devptr scl,
                                    memra_stream stream)
{
    return memra_route_launch(eng, "memra_moe_route_tables", logits, n_tokens, spec, il, 0, macros,
                              slabs, sel, selw, ptrs, scl, stream);
}
