/* The device arm: macro mirror cache and the one-kernel launch. */
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "error.h"
#include "validate.h"
#include "vrows_abi.h"

/* Layer il's mirror, created on first use. Only the table lookup is under
 * the engine's state lock; the layer has its own lock, so a miss on one
 * layer never stalls a hit on another. */
static memra_layer_mirror *mirror_slot(memra_engine *eng, int il)
{
    memra_layer_mirror *m = NULL;
    pthread_mutex_lock(&eng->state_lock);
    if ((size_t)il >= eng->n_layers) {
        size_t n = eng->n_layers ? eng->n_layers : 64;
        while (n <= (size_t)il)
            n *= 2;
        memra_layer_mirror **grown = realloc(eng->layers, n * sizeof *grown);
        if (!grown)
            goto out;
        memset(grown + eng->n_layers, 0, (n - eng->n_layers) * sizeof *grown);
        eng->layers = grown;
        eng->n_layers = n;
    }
    if (!eng->layers[il] && (eng->layers[il] = calloc(1, sizeof **eng->layers)))
        pthread_mutex_init(&eng->layers[il]->lock, NULL);
    m = eng->layers[il];
out:
    pthread_mutex_unlock(&eng->state_lock);
    return m;
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

/* A launch on another stream than the upload's waits for the upload (an
 * event wait on the device, capturable as an external event node), until
 * the upload is seen finished; from then on nothing. The same stream is
 * ordered already and costs nothing. Caller holds m->lock. */
static memra_status order_after_upload(memra_engine *eng, memra_layer_mirror *m, CUstream s,
                                       const char *fn)
{
    /* CU_STREAM_PER_THREAD is a different stream in every thread. */
    if (m->upload_done || (s == m->upload_stream && s != CU_STREAM_PER_THREAD))
        return MEMRA_OK;
    const memra_driver *d = eng->d;
    memra_relaxed rx;
    memra_relax(d, &rx);
    CUresult r = d->cuEventQuery(m->uploaded);
    memra_unrelax(d, &rx);
    if (r == CUDA_SUCCESS) {
        m->upload_done = 1;
        return MEMRA_OK;
    }
    if (r != CUDA_ERROR_NOT_READY)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuEventQuery(macro upload)");
    /* Under capture only an external wait may name an event recorded
     * outside it; the graph's node then waits on each replay, which the
     * finished upload satisfies at once. */
    const unsigned flags = memra_stream_capturing(d, s) ? CU_EVENT_WAIT_EXTERNAL : 0;
    r = d->cuStreamWaitEvent(s, m->uploaded, flags);
    if (r != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuStreamWaitEvent(macro upload)");
    return MEMRA_OK;
}

/* New buffers for n_expert planes; the old ones are retired, not freed:
 * work queued on any stream may still read them, and freeing would wait for
 * the device under the layer's lock. */
static memra_status mirror_resize(memra_engine *eng, memra_layer_mirror *m, uint32_t n_expert,
                                  const char *fn)
{
    const memra_driver *d = eng->d;
    const size_t bytes = (size_t)n_expert * 3 * sizeof(float);
    CUdeviceptr dev = 0;
    void *host = NULL;
    CUresult r = d->cuMemAlloc(&dev, bytes);
    if (r != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_OUT_OF_MEMORY, fn, "cuMemAlloc(macro planes)");
    if ((r = d->cuMemAllocHost(&host, bytes)) != CUDA_SUCCESS) {
        d->cuMemFree(dev);
        return memra_cu_fail(d, r, MEMRA_ERR_OUT_OF_MEMORY, fn, "cuMemAllocHost(macro shadow)");
    }
    if (!m->uploaded &&
        (r = d->cuEventCreate(&m->uploaded, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS) {
        m->uploaded = NULL;
        d->cuMemFree(dev);
        d->cuMemFreeHost(host);
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuEventCreate(macro upload)");
    }
    if (m->dev || m->shadow)
        memra_engine_retire(eng, m->dev, m->shadow);
    m->dev = dev;
    m->shadow = host;
    m->n_expert = n_expert;
    return MEMRA_OK;
}

/* The shadow is the upload's source: while an earlier upload from it may
 * still be queued, it is swapped for a fresh one instead of overwritten. */
static memra_status shadow_free_to_write(memra_engine *eng, memra_layer_mirror *m, const char *fn)
{
    const memra_driver *d = eng->d;
    if (m->upload_done || !m->valid)
        return MEMRA_OK;
    CUresult r = d->cuEventQuery(m->uploaded);
    if (r == CUDA_SUCCESS)
        return MEMRA_OK;
    if (r != CUDA_ERROR_NOT_READY)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuEventQuery(macro upload)");
    void *host = NULL;
    const size_t bytes = (size_t)m->n_expert * 3 * sizeof(float);
    if ((r = d->cuMemAllocHost(&host, bytes)) != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_OUT_OF_MEMORY, fn, "cuMemAllocHost(macro shadow)");
    memra_engine_retire(eng, 0, m->shadow);
    m->shadow = host;
    return MEMRA_OK;
}

/* Uploads layer il's planes on `s` into its device buffer. Caller holds
 * m->lock and the context; `s` is not capturing. */
static memra_status mirror_upload(memra_engine *eng, memra_layer_mirror *m, uint32_t n_expert,
                                  const memra_vrows_macros *macros, CUstream s, const char *fn)
{
    const memra_driver *d = eng->d;
    memra_status st = m->n_expert != n_expert ? mirror_resize(eng, m, n_expert, fn)
                                              : shadow_free_to_write(eng, m, fn);
    if (st)
        return st;
    /* Invalid until the upload is issued: a failed upload must make the next
     * call upload again, not find a matching shadow over stale device
     * planes. */
    m->valid = 0;
    const size_t plane = (size_t)n_expert * sizeof(float);
    for (int k = 0; k < 3; k++)
        memcpy(m->shadow + (size_t)k * n_expert, macros->plane[k], plane);
    CUresult r = d->cuMemcpyHtoDAsync(m->dev, m->shadow, 3 * plane, s);
    if (r != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuMemcpyHtoDAsync(macro planes)");
    if ((r = d->cuEventRecord(m->uploaded, s)) != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuEventRecord(macro upload)");
    m->upload_stream = s;
    m->upload_done = 0;
    m->valid = 1;
    return MEMRA_OK;
}

/* Layer il's device planes, uploaded on `s` if missing or changed, and
 * ordered before work on `s`. A hit on the upload's stream makes no driver
 * call. Under capture a miss is MEMRA_ERR_CAPTURE: nothing is allocated or
 * copied. Caller holds the context. */
static memra_status mirror_get(memra_engine *eng, const char *fn, int il, uint32_t n_expert,
                               const memra_vrows_macros *macros, CUstream s, CUdeviceptr *dev)
{
    memra_layer_mirror *m = mirror_slot(eng, il);
    if (!m)
        return memra_fail(MEMRA_ERR_OUT_OF_MEMORY, "%s: growing the layer table to %d", fn, il);
    pthread_mutex_lock(&m->lock);
    memra_status st = MEMRA_OK;
    if (!mirror_matches(m, n_expert, macros)) {
        if (!(st = memra_check_not_capturing(eng, s, fn, "upload layer macro planes"))) {
            memra_relaxed rx;
            memra_relax(eng->d, &rx);
            st = mirror_upload(eng, m, n_expert, macros, s, fn);
            memra_unrelax(eng->d, &rx);
        }
    } else {
        st = order_after_upload(eng, m, s, fn);
    }
    *dev = m->dev;
    pthread_mutex_unlock(&m->lock);
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
    CUstream s = (CUstream)stream;
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
    CUstream s = (CUstream)stream;
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
