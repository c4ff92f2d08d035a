/* Device memory helpers: allocation and copies on the engine's context. */
#include "engine.h"
#include "error.h"

typedef enum { OP_ALLOC, OP_FREE, OP_HTOD, OP_DTOH, OP_SYNC } mem_op;

/* One path for every helper: check, enter the context, issue, optionally
 * wait, leave. Synchronous copies (own = 1) run on the engine's own stream
 * and then wait for it, so they never touch the legacy default stream that
 * a serving process may be capturing around. Unless the stream itself is
 * capturing, the calls run in relaxed capture mode, so another thread's
 * global-mode capture survives them. */
static memra_status mem_call(const char *fn, memra_engine *eng, mem_op op, void *host,
                             const void *chost, CUdeviceptr dptr, CUdeviceptr *out, size_t bytes,
                             memra_stream stream, int wait, int own)
{
    if (!eng)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: eng is NULL", fn);
    if ((op == OP_HTOD && !chost) || (op == OP_DTOH && !host) || (op == OP_ALLOC && !out))
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: %s is NULL", fn,
                          op == OP_ALLOC  ? "out"
                          : op == OP_HTOD ? "src"
                                          : "dst");
    if ((op == OP_HTOD || op == OP_DTOH) && !dptr && bytes)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: the device address is 0", fn);
    if (op == OP_ALLOC && bytes == 0)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: bytes is 0", fn);

    const memra_driver *d = eng->d;
    CUstream s = own ? eng->stream : (CUstream)stream;
    int pushed;
    memra_status st = memra_ctx_enter(eng, fn, &pushed);
    if (st)
        return st;
    memra_relaxed rx = {0};
    const int relax = op == OP_ALLOC || op == OP_FREE || own || !memra_stream_capturing(d, s);
    if (relax)
        memra_relax(d, &rx);
    CUresult r = CUDA_SUCCESS;
    const char *call = "";
    switch (op) {
    case OP_ALLOC:
        call = "cuMemAlloc";
        r = d->cuMemAlloc(out, bytes);
        break;
    case OP_FREE:
        call = "cuMemFree";
        r = dptr ? d->cuMemFree(dptr) : CUDA_SUCCESS;
        break;
    case OP_HTOD:
        call = "cuMemcpyHtoDAsync";
        r = bytes ? d->cuMemcpyHtoDAsync(dptr, chost, bytes, s) : CUDA_SUCCESS;
        break;
    case OP_DTOH:
        call = "cuMemcpyDtoHAsync";
        r = bytes ? d->cuMemcpyDtoHAsync(host, dptr, bytes, s) : CUDA_SUCCESS;
        break;
    case OP_SYNC:
        break;
    }
    if (r == CUDA_SUCCESS && wait) {
        call = "cuStreamSynchronize";
        r = d->cuStreamSynchronize(s);
    }
    if (relax)
        memra_unrelax(d, &rx);
    if (r != CUDA_SUCCESS)
        st = memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, call);
    memra_ctx_leave(eng, pushed);
    return st;
}

memra_status memra_alloc(memra_engine *eng, size_t bytes, memra_devptr *out)
{
    CUdeviceptr p = 0;
    memra_status st =
        mem_call("memra_alloc", eng, OP_ALLOC, NULL, NULL, 0, out ? &p : NULL, bytes, NULL, 0, 0);
    if (st == MEMRA_OK)
        *out = p;
    return st;
}

memra_status memra_free(memra_engine *eng, memra_devptr ptr)
{
    return mem_call("memra_free", eng, OP_FREE, NULL, NULL, ptr, NULL, 0, NULL, 0, 0);
}

memra_status memra_sync(memra_engine *eng, memra_stream stream)
{
    return mem_call("memra_sync", eng, OP_SYNC, NULL, NULL, 0, NULL, 0, stream, 1, 0);
}

memra_status memra_copy_htod(memra_engine *eng, memra_devptr dst, const void *src, size_t bytes)
{
    return mem_call("memra_copy_htod", eng, OP_HTOD, NULL, src, dst, NULL, bytes, NULL, 1, 1);
}

memra_status memra_copy_dtoh(memra_engine *eng, void *dst, memra_devptr src, size_t bytes)
{
    return mem_call("memra_copy_dtoh", eng, OP_DTOH, dst, NULL, src, NULL, bytes, NULL, 1, 1);
}

memra_status memra_copy_htod_async(memra_engine *eng, memra_devptr dst, const void *src,
                                   size_t bytes, memra_stream stream)
{
    return mem_call("memra_copy_htod_async", eng, OP_HTOD, NULL, src, dst, NULL, bytes, stream, 0,
                    0);
}

memra_status memra_copy_dtoh_async(memra_engine *eng, void *dst, memra_devptr src, size_t bytes,
                                   memra_stream stream)
{
    return mem_call("memra_copy_dtoh_async", eng, OP_DTOH, dst, NULL, src, NULL, bytes, stream, 0,
                    0);
}

/* Typed copies: element counts are checked against size_t overflow before
 * they become bytes. */
static memra_status typed_call(const char *fn, memra_engine *eng, mem_op op, void *host,
                               const void *chost, CUdeviceptr dptr, size_t count, size_t elem,
                               memra_stream stream, int wait)
{
    if (count > SIZE_MAX / elem)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: count %zu is too large", fn, count);
    return mem_call(fn, eng, op, host, chost, dptr, NULL, count * elem, stream, wait, wait);
}

#define MEMRA_DEFINE_TYPED_COPY(sfx, T)                                                            \
    memra_status memra_upload_##sfx(memra_engine *eng, memra_devptr dst, const T *src,             \
                                    size_t count)                                                  \
    {                                                                                              \
        return typed_call("memra_upload_" #sfx, eng, OP_HTOD, NULL, src, dst, count, sizeof(T),    \
                          NULL, 1);                                                                \
    }                                                                                              \
    memra_status memra_download_##sfx(memra_engine *eng, T *dst, memra_devptr src, size_t count)   \
    {                                                                                              \
        return typed_call("memra_download_" #sfx, eng, OP_DTOH, dst, NULL, src, count, sizeof(T),  \
                          NULL, 1);                                                                \
    }                                                                                              \
    memra_status memra_upload_##sfx##_async(memra_engine *eng, memra_devptr dst, const T *src,     \
                                            size_t count, memra_stream stream)                     \
    {                                                                                              \
        return typed_call("memra_upload_" #sfx "_async", eng, OP_HTOD, NULL, src, dst, count,      \
                          sizeof(T), stream, 0);                                                   \
    }                                                                                              \
    memra_status memra_download_##sfx##_async(memra_engine *eng, T *dst, memra_devptr src,         \
                                              size_t count, memra_stream stream)                   \
    {                                                                                              \
        return typed_call("memra_download_" #sfx "_async", eng, OP_DTOH, dst, NULL, src, count,    \
                          sizeof(T), stream, 0);                                                   \
    }
MEMRA_TYPED_COPIES(MEMRA_DEFINE_TYPED_COPY)
