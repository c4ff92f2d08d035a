/* The device arm: macro mirror cache and the one-kernel launch. */
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "error.h"
#include "validate.h"
#include "vrows_abi.h"

/* Layer il's mirror, grown on demand; caller holds eng->lock. */
static memra_layer_mirror *mirror_slot(memra_engine *eng, int il)
{
    if ((size_t)il >= eng->n_layers) {
        size_t n = eng->n_layers ? eng->n_layers : 64;
        while (n <= (size_t)il)
            n *= 2;
        memra_layer_mirror *grown = realloc(eng->layers, n * sizeof *grown);
        if (!grown)
            return NULL;
        memset(grown + eng->n_layers, 0, (n - eng->n_layers) * sizeof *grown);
        eng->layers = grown;
        eng->n_layers = n;
    }
    return &eng->layers[il];
}

static int mirror_matches(const memra_layer_mirror *m, uint32_t n_expert,
                          const memra_vrows_macros *macros)
{
    if (!m->valid || m->n_expert != n_expert)
        return 0;
    for (int k = 0; k < 3; k++)
        if (memcmp(m->shadow + (size_t)k * n_expert, macros->plane[k], n_expert * sizeof(float)))
            return 0;
    return 1;
}

/* Returns layer il's device planes, uploading on `s` if they are missing or
 * their contents changed. A hit touches no driver call. Under capture a miss
 * is MEMRA_ERR_CAPTURE: nothing is allocated or copied. Caller holds eng->lock
 * and the context. */
static memra_status mirror_get_locked(memra_engine *eng, const char *fn, int il, uint32_t n_expert,
                                      const memra_vrows_macros *macros, CUstream s,
                                      CUdeviceptr *dev)
{
    const memra_driver *d = eng->d;
    memra_layer_mirror *m = mirror_slot(eng, il);
    if (!m)
        return memra_fail(MEMRA_ERR_OUT_OF_MEMORY, "%s: growing the layer table to %d", fn, il);
    if (mirror_matches(m, n_expert, macros)) {
        *dev = m->dev;
        return MEMRA_OK;
    }
    memra_status st = memra_check_not_capturing(eng, s, fn, "upload layer macro planes");
    if (st)
        return st;

    const size_t bytes = (size_t)n_expert * 3 * sizeof(float);
    if (m->n_expert != n_expert) {
        /* Only a different expert count moves the buffer; a content change
         * reuses it, so graphs captured against it stay valid. */
        if (m->dev) {
            d->cuStreamSynchronize(s);
            d->cuMemFree(m->dev);
            m->dev = 0;
        }
        free(m->shadow);
        m->n_expert = 0;
        if (!(m->shadow = malloc(bytes)))
            return memra_fail(MEMRA_ERR_OUT_OF_MEMORY, "%s: layer %d shadow of %zu bytes", fn, il,
                              bytes);
        CUresult r = d->cuMemAlloc(&m->dev, bytes);
        if (r != CUDA_SUCCESS) {
            m->dev = 0;
            return memra_cu_fail(d, r, MEMRA_ERR_OUT_OF_MEMORY, fn, "cuMemAlloc(macro planes)");
        }
    }
    /* Invalid until the upload is issued: a failed upload must make the next
     * call upload again, not find a matching shadow over stale device
     * planes. */
    m->valid = 0;
    m->n_expert = n_expert;
    for (int k = 0; k < 3; k++)
        memcpy(m->shadow + (size_t)k * n_expert, macros->plane[k], n_expert * sizeof(float));
    /* From our own (pageable) shadow, which the driver stages before
     * returning, so the caller may reuse its planes at once. */
    CUresult r = d->cuMemcpyHtoDAsync(m->dev, m->shadow, bytes, s);
    if (r != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuMemcpyHtoDAsync(macro planes)");
    m->valid = 1;
    *dev = m->dev;
    return MEMRA_OK;
}

static memra_status mirror_get(memra_engine *eng, const char *fn, int il, uint32_t n_expert,
                               const memra_vrows_macros *macros, CUstream s, CUdeviceptr *dev)
{
    pthread_mutex_lock(&eng->lock);
    memra_status st = mirror_get_locked(eng, fn, il, n_expert, macros, s, dev);
    pthread_mutex_unlock(&eng->lock);
    return st;
}

static memra_status check_layer(const char *fn, int il)
{
    if (il < 0 || il >= MEMRA_MAX_LAYERS)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: il = %d is outside [0, %d)", fn, il,
                          MEMRA_MAX_LAYERS);
    return MEMRA_OK;
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
    if ((st = check_layer(fn, il)))
        return st;
    if (present && n_expert == 0)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: n_expert is 0", fn);
    CUstream s = memra_stream_of(eng, stream);
    int pushed;
    if ((st = memra_ctx_enter(eng, fn, &pushed)))
        return st;
    CUfunction f;
    if ((st = memra_engine_kernel(eng, s, fn, &f)))
        goto done;
    if (present) {
        CUdeviceptr dev;
        st = mirror_get(eng, fn, il, n_expert, macros, s, &dev);
    }
done:
    memra_ctx_leave(eng, pushed);
    return st;
}

memra_status memra_moe_vrows_tables_from_sel(memra_engine *eng, memra_devptr sel, memra_devptr selw,
                                             uint32_t n_pairs, uint32_t n_expert, int il,
                                             const memra_vrows_macros *macros,
                                             const memra_vrows_slabs *slabs, memra_devptr ptrs,
                                             memra_devptr scl, memra_stream stream)
{
    static const char fn[] = "memra_moe_vrows_tables_from_sel";
    if (!eng)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: eng is NULL", fn);
    int present;
    memra_status st =
        memra_vrows_validate(fn, sel, selw, n_pairs, n_expert, macros, slabs, ptrs, scl, &present);
    if (st)
        return st;
    if (present && (st = check_layer(fn, il)))
        return st;

    const memra_driver *d = eng->d;
    CUstream s = memra_stream_of(eng, stream);
    int pushed;
    if ((st = memra_ctx_enter(eng, fn, &pushed)))
        return st;

    CUfunction f;
    if ((st = memra_engine_kernel(eng, s, fn, &f)))
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
        if ((st = mirror_get(eng, fn, il, n_expert, macros, s, &planes)))
            goto done;
        a.mg = planes;
        a.mu = planes + (uint64_t)n_expert * sizeof(float);
        a.md = planes + (uint64_t)n_expert * 2 * sizeof(float);
    }

    size_t size = sizeof a;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &a, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    const unsigned grid = memra_vrows_grid(n_pairs);
    CUresult r = d->cuLaunchKernel(f, grid, 1, 1, MEMRA_VROWS_BLOCK, 1, 1, 0, s, NULL, extra);
    if (r != CUDA_SUCCESS)
        st = memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuLaunchKernel");
done:
    memra_ctx_leave(eng, pushed);
    return st;
}
