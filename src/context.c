#include "context.h"

#include <stdatomic.h>

#include "engine.h"
#include "error.h"

static memra_status context_lost(const char *fn)
{
    return memra_fail(MEMRA_ERR_CONTEXT_RESET,
                      "%s: the device's primary context was reset (cuDevicePrimaryCtxReset or "
                      "cudaDeviceReset) after this engine was created; its kernels, planes and "
                      "fault word are gone. Destroy the engine and create a new one.",
                      fn);
}

memra_status memra_call_enter(memra_engine *eng, const char *fn, memra_call *c)
{
    const memra_driver *d = eng->d;
    *c = (memra_call){.eng = eng, .d = d, .fn = fn};
    if (atomic_load_explicit(&eng->ctx_lost, memory_order_relaxed))
        return context_lost(fn);
    /* A reset primary context keeps its handle but not its identity: after
     * it, the addresses the engine holds may belong to the application. */
    CUresult r;
    if (d->cuCtxGetId) {
        unsigned long long id = 0;
        r = d->cuCtxGetId(eng->ctx, &id);
        if ((r == CUDA_SUCCESS && id != eng->ctx_id) || r == CUDA_ERROR_CONTEXT_IS_DESTROYED ||
            r == CUDA_ERROR_INVALID_CONTEXT) {
            atomic_store(&eng->ctx_lost, 1);
            return context_lost(fn);
        }
        if (r != CUDA_SUCCESS)
            return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuCtxGetId");
    }
    CUcontext cur = NULL;
    r = d->cuCtxGetCurrent(&cur);
    if (r != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuCtxGetCurrent");
    if (cur == eng->ctx)
        return MEMRA_OK;
    r = d->cuCtxPushCurrent(eng->ctx);
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
