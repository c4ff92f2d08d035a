/* The table kernel's device arm: its planes mirrored per layer, one launch. */
#include "engine/engine.h"
#include "base/error.h"
#include "engine/launch.h"
#include "engine/layer_spec.h"
#include "vrows_spec.h"
#include "vrows_abi.h"

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
        st = memra_mirror_get(&c, &eng->mirror, cap, il, MEMRA_MIRROR_VROWS, n_expert,
                              macros->plane, 3, s, 1, &dev);
    }
    memra_call_leave(&c);
    return st;
}

/* Every table launch after the public checks: the planes (n_slots floats
 * each, the layer's local experts) mirrored on il, then one launch. */
static memra_status tables(memra_engine *eng, const char *fn, memra_devptr sel, memra_devptr selw,
                           uint32_t n_pairs, uint32_t n_expert, int il, int scratch,
                           memra_devptr faults, const memra_vrows_macros *macros, int present,
                           const memra_vrows_slabs *slabs, const memra_vrows_options *opt,
                           uint32_t n_slots, memra_devptr ptrs, memra_devptr scl,
                           memra_stream stream)
{
    memra_status st;
    if ((st = memra_check_layer(fn, il, scratch))) /* whatever the layer mirrors */
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
        .faults = faults ? faults : eng->faults,
        .map = opt ? opt->expert_map : 0,
        .n_local = opt ? opt->n_local : 0,
        .n_shared = opt ? opt->n_shared : 0,
    };
    if (present) {
        CUdeviceptr planes;
        if ((st = memra_mirror_get(&c, &eng->mirror, cap, il,
                                   memra_mirror_kind_of(MEMRA_MIRROR_VROWS, scratch), n_slots,
                                   macros->plane, 3, s, 0, &planes)))
            goto done;
        a.mg = memra_mirror_plane(planes, n_slots, 0);
        a.mu = memra_mirror_plane(planes, n_slots, 1);
        a.md = memra_mirror_plane(planes, n_slots, 2);
    }
    st = memra_launch(eng, fn, f, memra_vrows_grid(n_pairs), MEMRA_VROWS_BLOCK, &a, sizeof a, s);
done:
    memra_call_leave(&c);
    return st;
}

memra_status memra_vrows_launch(memra_engine *eng, const char *fn, memra_devptr sel,
                                memra_devptr selw, uint32_t n_pairs, uint32_t n_expert, int il,
                                int scratch, memra_devptr faults, const memra_vrows_macros *macros,
                                const memra_vrows_slabs *slabs, const memra_vrows_options *options,
                                memra_devptr ptrs, memra_devptr scl, memra_stream stream)
{
    if (!eng)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: eng is NULL", fn);
    int present;
    memra_status st;
    uint32_t n_slots = n_expert;
    if (!options) {
        st = memra_vrows_validate(fn, sel, selw, n_pairs, n_expert, macros, slabs, ptrs, scl,
                                  &present);
    } else {
        st = memra_vrows_validate_ex(fn, sel, selw, n_pairs, n_expert, options, macros, slabs, ptrs,
                                     scl, &present);
        if (!st && n_pairs == 0)
            return MEMRA_OK;
        if (!st)
            memra_vrows_options_check(fn, "options->", n_expert, options, &n_slots);
    }
    if (st)
        return st;
    return tables(eng, fn, sel, selw, n_pairs, n_expert, il, scratch, faults, macros, present,
                  slabs, options, n_slots, ptrs, scl, stream);
}

memra_status memra_vrows_tables(memra_engine *eng, memra_devptr sel, memra_devptr selw,
                                uint32_t n_pairs, uint32_t n_expert, int il,
                                const memra_vrows_macros *macros, const memra_vrows_slabs *slabs,
                                memra_devptr ptrs, memra_devptr scl, memra_stream stream)
{
    return memra_vrows_launch(eng, "memra_vrows_tables", sel, selw, n_pairs, n_expert, il, 0, 0,
                              macros, slabs, NULL, ptrs, scl, stream);
}

memra_status memra_vrows_tables_ex(memra_engine *eng, memra_devptr sel, memra_devptr selw,
                                   uint32_t n_pairs, uint32_t n_expert, int il,
                                   const memra_vrows_macros *macros, const memra_vrows_slabs *slabs,
                                   const memra_vrows_options *options, memra_devptr ptrs,
                                   memra_devptr scl, memra_stream stream)
{
    static const memra_vrows_options none = {0, 0, 0};
    return memra_vrows_launch(eng, "memra_vrows_tables_ex", sel, selw, n_pairs, n_expert, il, 0, 0,
                              macros, slabs, options ? options : &none, ptrs, scl, stream);
}
