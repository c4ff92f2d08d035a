#include "context.h"

#include "base/error.h"

static memra_status context_lost(const char *fn)
{
    return memra_fail(MEMRA_ERR_CONTEXT_RESET,
                      "%s: the device's primary context was reset (cuDevicePrimaryCtxReset or "
                      "cudaDeviceReset) after this engine was created; its kernels, planes and "
                      "fault word are gone. Destroy the engine and create a new one.",
                      fn);
}

CUresult memra_context_retain(memra_context *cx, const memra_driver *d, CUdevice dev,
                              const char **call)
{
    cx->d = d;
    cx->dev = dev;
    CUresult r = d->cuDevicePrimaryCtxRetain(&cx->ctx, dev);
    if (r != CUDA_SUCCESS) {
        cx->ctx = NULL;
        *call = "cuDevicePrimaryCtxRetain";
        return r;
    }
    if (d->cuCtxGetId && (r = d->cuCtxGetId(cx->ctx, &cx->id)) != CUDA_SUCCESS)
        *call = "cuCtxGetId";
    return r;
}

void memra_context_release(memra_context *cx)
{
    if (cx->ctx)
        cx->d->cuDevicePrimaryCtxRelease(cx->dev);
    cx->ctx = NULL;
}

int memra_context_live(const memra_context *cx)
{
    return cx->ctx && !atomic_load(&cx->lost);
}

memra_status memra_context_enter(memra_context *cx, const char *fn, memra_call *c)
{
    const memra_driver *d = cx->d;
    *c = (memra_call){.cx = cx, .d = d, .fn = fn};
    if (atomic_load_explicit(&cx->lost, memory_order_relaxed))
        return context_lost(fn);
    /* A reset primary context keeps its handle but not its identity: after
     * it, the addresses the engine holds may belong to the application. */
    CUresult r;
    if (d->cuCtxGetId) {
        unsigned long long id = 0;
        r = d->cuCtxGetId(cx->ctx, &id);
        if ((r == CUDA_SUCCESS && id != cx->id) || r == CUDA_ERROR_CONTEXT_IS_DESTROYED ||
            r == CUDA_ERROR_INVALID_CONTEXT) {
            atomic_store(&cx->lost, 1);
            return context_lost(fn);
        }
        if (r != CUDA_SUCCESS)
            return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuCtxGetId");
    }
    CUcontext cur = NULL;
    r = d->cuCtxGetCurrent(&cur);
    if (r != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuCtxGetCurrent");
    if (cur == cx->ctx)
        return MEMRA_OK;
    r = d->cuCtxPushCurrent(cx->ctx);
    if (r != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuCtxPushCurrent");
    c->pushed = 1;
    return MEMRA_OK;
}

void memra_call_relax(memra_call *c)
{
    if (c->relaxed)
        return;
    c->old_mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    c->relaxed = c->d->cuThreadExchangeStreamCaptureMode(&c->old_mode) == CUDA_SUCCESS;
}

void memra_call_leave(memra_call *c)
{
    if (c->relaxed) {
        CUstreamCaptureMode m = c->old_mode;
        c->d->cuThreadExchangeStreamCaptureMode(&m);
        c->relaxed = 0;
    }
    if (c->pushed) {
        CUcontext popped;
        c->d->cuCtxPopCurrent(&popped);
        c->pushed = 0;
    }
}

memra_status memra_capture_of(const memra_call *c, CUstream s, memra_capture *out)
{
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUresult r = c->d->cuStreamIsCapturing(s, &cs);
    if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) {
        *out = MEMRA_CAPTURE_JOINS;
        return MEMRA_OK;
    }
    if (r != CUDA_SUCCESS)
        return memra_cu_fail(c->d, r, MEMRA_ERR_DRIVER, c->fn, "cuStreamIsCapturing");
    *out = cs == CU_STREAM_CAPTURE_STATUS_ACTIVE        ? MEMRA_CAPTURE_ACTIVE
           : cs == CU_STREAM_CAPTURE_STATUS_INVALIDATED ? MEMRA_CAPTURE_INVALID
                                                        : MEMRA_CAPTURE_NONE;
    return MEMRA_OK;
}

memra_status memra_refuse_capture(const memra_call *c, CUstream s, const char *what,
                                  const char *remedy)
{
    memra_capture cap;
    memra_status st = memra_capture_of(c, s, &cap);
    if (st || cap == MEMRA_CAPTURE_NONE)
        return st;
    return memra_fail(MEMRA_ERR_CAPTURE,
                      "%s: %s, and this call would %s%s%s. The capture is untouched.", c->fn,
                      cap == MEMRA_CAPTURE_JOINS
                          ? "the stream is the legacy default stream while another stream that "
                            "synchronises with it is capturing"
                          : "the stream is capturing",
                      what, remedy ? "; " : "", remedy ? remedy : "");
}

unsigned long long memra_stream_id(const memra_driver *d, CUstream s)
{
    unsigned long long id = 0;
    if (!d->cuStreamGetId || d->cuStreamGetId(s, &id) != CUDA_SUCCESS)
        return 0;
    return id;
}
