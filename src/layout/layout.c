/* The layout's device arm: one launch for decode-sized batches, three over
 * tiles above (kernels_src/layout.cu), and the per-layer counts a routing
 * launch's blocks share when they lay their own batch out (route.c). */
#include "layout.h"

#include "engine/engine.h"
#include "base/error.h"
#include "engine/launch.h"
#include "engine/layer_spec.h"
#include "layout_abi.h"
#include "layout_spec.h"

/* The engine's per-layer counts (public layers, then the self-check's
 * scratch ones), allocated and zeroed at their first use, which a capture
 * refuses. Caller holds the call. */
static memra_status tickets(memra_call *c, memra_capture cap, CUdeviceptr *out)
{
    memra_engine *eng = c->eng;
    pthread_mutex_lock(&eng->state_lock);
    CUdeviceptr t = eng->layout_tickets;
    pthread_mutex_unlock(&eng->state_lock);
    if (t) {
        *out = t;
        return MEMRA_OK;
    }
    if (cap != MEMRA_CAPTURE_NONE)
        return memra_fail(MEMRA_ERR_CAPTURE,
                          "%s: the stream is capturing and the engine's layout counts are not "
                          "allocated yet; call memra_layout_prepare() before capture. The "
                          "capture is untouched.",
                          c->fn);
    const size_t words = MEMRA_MAX_LAYERS + MEMRA_SCRATCH_LAYERS;
    const memra_driver *d = c->d;
    memra_call_relax(c);
    CUresult r = d->cuMemAlloc(&t, words * 4);
    if (r != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_OUT_OF_MEMORY, c->fn, "cuMemAlloc(layout counts)");
    /* Zeroed before anything can use them: on the engine's own stream,
     * waited for here (first use only). */
    if ((r = d->cuMemsetD32Async(t, 0, words, eng->stream)) != CUDA_SUCCESS ||
        (r = d->cuStreamSynchronize(eng->stream)) != CUDA_SUCCESS) {
        d->cuMemFree(t);
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, c->fn, "zeroing the layout counts");
    }
    pthread_mutex_lock(&eng->state_lock);
    const CUdeviceptr first = eng->layout_tickets; /* another thread's, if it was first */
    if (!first)
        eng->layout_tickets = t;
    pthread_mutex_unlock(&eng->state_lock);
    if (first)
        d->cuMemFree(t);
    *out = first ? first : t;
    return MEMRA_OK;
}

memra_status memra_layout_ticket(memra_call *c, memra_capture cap, int il, int scratch,
                                 uint64_t *out)
{
    CUdeviceptr t = 0; /* set when st is MEMRA_OK; a release build cannot see that */
    memra_status st = tickets(c, cap, &t);
    if (!st)
        *out = t + 4 * (uint64_t)(scratch ? MEMRA_MAX_LAYERS + il : il);
    return st;
}

memra_status memra_layout_kernels(memra_call *c, memra_capture cap, uint32_t n_pairs,
                                  CUfunction f[3])
{
    if (n_pairs <= MEMRA_LAYOUT_ONE_LAUNCH)
        return memra_engine_kernel(c, cap, MEMRA_KERNEL_LAYOUT_SMALL, &f[0]);
    memra_status st = MEMRA_OK;
    for (int i = 0; !st && i < 3; i++) /* count, scan, place */
        st = memra_engine_kernel(c, cap, (memra_kernel_id)(MEMRA_KERNEL_LAYOUT_COUNT + i), &f[i]);
    return st;
}

memra_status memra_layout_launch_with(memra_call *c, uint64_t ids, uint32_t n_pairs,
                                      const memra_layout_params *lp, CUfunction const f[3],
                                      CUstream s)
{
    memra_engine *eng = c->eng;
    memra_layout_args a = {
        .ids = ids, .n_pairs = n_pairs, .tile = memra_layout_tile(n_pairs), .lp = *lp};
    a.lp.ticket = 0;
    memra_status st;
    if (n_pairs <= MEMRA_LAYOUT_ONE_LAUNCH)
        return memra_launch(eng, c->fn, f[0], memra_layout_small_grid(n_pairs),
                            MEMRA_LAYOUT_SMALL_THREADS, &a, sizeof a, s);
    if ((st = memra_launch(eng, c->fn, f[0], lp->n_tiles, MEMRA_LAYOUT_COUNT_THREADS, &a, sizeof a,
                           s)) ||
        (st = memra_launch(eng, c->fn, f[1], 1, MEMRA_LAYOUT_SCAN_THREADS, &a, sizeof a, s)))
        return st;
    return memra_launch(eng, c->fn, f[2], lp->n_tiles, MEMRA_LAYOUT_PLACE_THREADS, &a, sizeof a, s);
}

memra_status memra_layout_launch(memra_call *c, memra_capture cap, uint64_t ids, uint32_t n_pairs,
                                 const memra_layout_params *lp, CUstream s)
{
    CUfunction f[3];
    const memra_status st = memra_layout_kernels(c, cap, n_pairs, f);
    return st ? st : memra_layout_launch_with(c, ids, n_pairs, lp, f, s);
}

memra_status memra_layout_tables(memra_engine *eng, memra_devptr ids, uint32_t n_pairs,
                                 const memra_layout_spec *spec, const memra_layout *out,
                                 memra_stream stream)
{
    static const char fn[] = "memra_layout_tables";
    if (!eng)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: eng is NULL", fn);
    memra_layout_params lp;
    memra_status st = memra_layout_validate(fn, ids, n_pairs, spec, out, 1, &lp);
    if (st)
        return st;
    CUstream s = (CUstream)stream;
    memra_call c;
    memra_capture cap;
    if (!(st = memra_call_enter(eng, fn, &c)) && !(st = memra_capture_of(&c, s, &cap))) {
        if (cap == MEMRA_CAPTURE_JOINS)
            st = memra_refuse_capture(&c, s, "launch the kernel", NULL);
        else
            st = memra_layout_launch(&c, cap, ids, n_pairs, &lp, s);
    }
    memra_call_leave(&c);
    return st;
}

memra_status memra_layout_prepare(memra_engine *eng)
{
    static const char fn[] = "memra_layout_prepare";
    if (!eng)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: eng is NULL", fn);
    memra_call c;
    memra_status st = memra_call_enter(eng, fn, &c);
    CUfunction f;
    uint64_t t;
    if (!st &&
        !(st = memra_refuse_capture(&c, NULL, "load the layout kernels", "prepare before capture")))
        for (int k = MEMRA_KERNEL_LAYOUT_SMALL; !st && k <= MEMRA_KERNEL_LAYOUT_PLACE; k++)
            st = memra_engine_kernel(&c, MEMRA_CAPTURE_NONE, (memra_kernel_id)k, &f);
    if (!st)
        st = memra_layout_ticket(&c, MEMRA_CAPTURE_NONE, 0, 0, &t);
    memra_call_leave(&c);
    return st;
}
