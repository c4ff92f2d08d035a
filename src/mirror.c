/* The per-layer mirror of host planes (macro scales, routing bias) in device
 * memory: content-checked, uploaded from a pinned shadow, ordered for every
 * stream by an event. */
#include "mirror.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

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
                          const float *const *planes, int n_planes)
{
    if (!m->valid || m->n_expert != n_expert || m->n_planes != n_planes)
        return 0;
    for (int k = 0; k < n_planes; k++)
        if (memcmp(m->shadow + (size_t)k * n_expert, planes[k], n_expert * sizeof(float)))
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
                                  int n_planes, const char *fn)
{
    const memra_driver *d = eng->d;
    const size_t bytes = (size_t)n_expert * (size_t)n_planes * sizeof(float);
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
    m->n_planes = n_planes;
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
    const size_t bytes = (size_t)m->n_expert * (size_t)m->n_planes * sizeof(float);
    if ((r = d->cuMemAllocHost(&host, bytes)) != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_OUT_OF_MEMORY, fn, "cuMemAllocHost(macro shadow)");
    memra_engine_retire(eng, 0, m->shadow);
    m->shadow = host;
    return MEMRA_OK;
}

/* Uploads layer il's planes on `s` into its device buffer. Caller holds
 * m->lock and the context; `s` is not capturing. */
static memra_status mirror_upload(memra_engine *eng, memra_layer_mirror *m, uint32_t n_expert,
                                  const float *const *planes, int n_planes, CUstream s,
                                  const char *fn)
{
    const memra_driver *d = eng->d;
    memra_status st = m->n_expert != n_expert || m->n_planes != n_planes
                          ? mirror_resize(eng, m, n_expert, n_planes, fn)
                          : shadow_free_to_write(eng, m, fn);
    if (st)
        return st;
    /* Invalid until the upload is issued: a failed upload must make the next
     * call upload again, not find a matching shadow over stale device
     * planes. */
    m->valid = 0;
    const size_t plane = (size_t)n_expert * sizeof(float);
    for (int k = 0; k < n_planes; k++)
        memcpy(m->shadow + (size_t)k * n_expert, planes[k], plane);
    CUresult r = d->cuMemcpyHtoDAsync(m->dev, m->shadow, (size_t)n_planes * plane, s);
    if (r != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuMemcpyHtoDAsync(macro planes)");
    if ((r = d->cuEventRecord(m->uploaded, s)) != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuEventRecord(macro upload)");
    m->upload_stream = s;
    m->upload_done = 0;
    m->valid = 1;
    return MEMRA_OK;
}

memra_status memra_mirror_get(memra_engine *eng, const char *fn, int il, uint32_t n_expert,
                              const float *const *planes, int n_planes, CUstream s,
                              CUdeviceptr *dev)
{
    memra_layer_mirror *m = mirror_slot(eng, il);
    if (!m)
        return memra_fail(MEMRA_ERR_OUT_OF_MEMORY, "%s: growing the layer table to %d", fn, il);
    pthread_mutex_lock(&m->lock);
    memra_status st = MEMRA_OK;
    if (!mirror_matches(m, n_expert, planes, n_planes)) {
        if (!(st = memra_check_not_capturing(eng, s, fn, "upload layer macro planes"))) {
            memra_relaxed rx;
            memra_relax(eng->d, &rx);
            st = mirror_upload(eng, m, n_expert, planes, n_planes, s, fn);
            memra_unrelax(eng->d, &rx);
        }
    } else {
        st = order_after_upload(eng, m, s, fn);
    }
    *dev = m->dev;
    pthread_mutex_unlock(&m->lock);
    return st;
}

memra_status memra_check_layer(const char *fn, int il)
{
    if (il < 0 || il >= MEMRA_MAX_LAYERS)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: il = %d is outside [0, %d)", fn, il,
                          MEMRA_MAX_LAYERS);
    return MEMRA_OK;
}
