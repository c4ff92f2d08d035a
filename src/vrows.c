/* The table kernel's device arm: its planes mirrored per layer, one launch. */
#include "engine.h"
#include "error.h"
#include "launch.h"
#include "validate.h"

/* The context, what the stream meets, the loaded kernel: refused where the
 * launch would join another stream's capture. */
static memra_status enter(memra_engine *eng, const char *fn, CUstream s, memra_call *c,
                          memra_capture *cap, CUfunction *f)
{
    memra_status st = memra_call_enter(eng, fn, c);
    if (!st)
        st = memra_capture_of(c, s, cap);
    if (!st && *cap == MEMRA_CAPTURE_JOINS)
        st = memra_refuse_capture(c, s, "launch the kernel", NULL);
    if (!st)
        st = memra_engine_kernel(c, *cap, MEMRA_KERNEL_VROWS, f);
    return st;
}

memra_status memra_vrows_prepare_layer(memra_engine *eng, int il, uint32_t n_expert,
                                       const memra_vrows_macros *macros, memra_stream stream)
{
    static const char fn[] = "memra_vrows_prepare_layer";
    if (!eng)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: eng is NULL", fn);
    int present;
    memra_status st = memra_macros_check(fn, macros, &present);
    if (st)
        return st;
    if ((st = memra_check_layer(fn, il, 0)))
        return st;
    if (present && n_expert == 0)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: n_expert is 0", fn);
    CUstream s = (CUstream)stream;
    memra_call c;
    memra_capture cap;
    CUfunction f;
    if (!(st = enter(eng, fn, s, &c, &cap, &f)) &&
        !(st = memra_refuse_capture(&c, s, "upload the layer's planes",
                                    "prepare every layer before capture")) &&
        present) {
        CUdeviceptr dev;
        st = memra_mirror_get(&c, cap, il, MEMRA_MIRROR_VROWS, n_expert, macros->plane, 3, s, &dev);
    }
    memra_call_leave(&c);
    return st;
}

memra_status memra_vrows_launch(memra_engine *eng, const char *fn, memra_devptr sel,
                                memra_devptr selw, uint32_t n_pairs, uint32_t n_expert, int il,
                                int scratch, const memra_vrows_macros *macros,
                                const memra_vrows_slabs *slabs, memra_devptr ptrs, memra_devptr scl,
                                memra_stream stream)
{
    if (!eng)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: eng is NULL", fn);
    int present;
    memra_status st =
        memra_vrows_validate(fn, sel, selw, n_pairs, n_expert, macros, slabs, ptrs, scl, &present);
    if (st || (present && (st = memra_check_layer(fn, il, scratch))))
        return st;
    CUstream s = (CUstream)stream;
    memra_call c;
    memra_capture cap;
    CUfunction f;
    if ((st = enter(eng, fn, s, &c, &cap, &f)))
        goto done;
    memra_vrows_args a = {
        .sel = sel,
        .selw = selw,
        .pg = slabs->base[0],
        .pu = slabs->base[1],
        .pd = slabs->base[2],
        .sg = slabs->stride[0],
        .su = slabs->stride[1],
        .sd = slabs->stride[2],
        .n_pairs = n_pairs,
        .n_expert = n_expert,
        .ptrs = ptrs,
        .scl = scl,
        .faults = eng->faults,
    };
    if (present) {
        CUdeviceptr planes;
        if ((st = memra_mirror_get(&c, cap, il, memra_mirror_kind_of(MEMRA_MIRROR_VROWS, scratch),
                                   n_expert, macros->plane, 3, s, &planes)))
            goto done;
        a.mg = memra_mirror_plane(planes, n_expert, 0);
        a.mu = memra_mirror_plane(planes, n_expert, 1);
        a.md = memra_mirror_plane(planes, n_expert, 2);
    }
    size_t size = sizeof a;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &a, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    const unsigned grid = memra_vrows_grid(n_pairs);
    CUresult r = eng->d->cuLaunchKernel(f, grid, 1, 1, MEMRA_VROWS_BLOCK, 1, 1, 0, s, NULL, extra);
    if (r != CUDA_SUCCESS)
        st = memra_cu_fail(eng->d, r, MEMRA_ERR_DRIVER, fn, "cuLaunchKernel");
done:
    memra_call_leave(&c);
    return st;
}

memra_status memra_moe_vrows_tables_from_sel(memra_engine *eng, memra_devptr sel, memra_devptr selw,
                                             uint32_t n_pairs, uint32_t n_expert, int il,
                                             const memra_vrows_macros *macros,
                                             const memra_vrows_slabs *slabs, memra_devptr ptrs,
                                             memra_devptr scl, memra_stream stream)
{
    return memra_vrows_launch(eng, "memra_moe_vrows_tables_from_sel", sel, selw, n_pairs, n_expert,
                              il, 0, macros, slabs, ptrs, scl, stream);
}
