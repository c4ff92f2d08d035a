/* Device memory helpers: allocation and copies on the engine's context,
 * each ordered as its CUDA counterpart is. */
#include "engine.h"
#include "base/error.h"

typedef enum { OP_ALLOC, OP_FREE, OP_HTOD, OP_DTOH, OP_SYNC } mem_op;

/* How a call orders itself:
 *  - LEGACY: a synchronous call without a stream, like cuMemcpy: on the
 *    legacy default stream (after everything queued there, and so after the
 *    blocking streams' work), complete on return;
 *  - ON: on the caller's stream, complete on return;
 *  - ASYNC: queued on the caller's stream (captured, if it captures). */
typedef enum { ORDER_LEGACY, ORDER_ON, ORDER_ASYNC } mem_order;

static const char *const op_what[] = {
    [OP_ALLOC] = "allocate",
    [OP_FREE] = "free",
    [OP_HTOD] = "copy to the device and wait for it",
    [OP_DTOH] = "copy to the host and wait for it",
    [OP_SYNC] = "wait for the stream",
};

/* One path for every helper: check, enter the context, refuse what would
 * join or break a capture, issue, optionally wait, leave. Waits and
 * allocations run in relaxed capture mode, so another thread's global-mode
 * capture survives them; an asynchronous copy on a capturing stream is
 * captured as CUDA would capture it. */
static memra_status mem_call(const char *fn, memra_engine *eng, mem_op op, void *host,
                             const void *chost, CUdeviceptr dptr, CUdeviceptr *out, size_t bytes,
                             memra_stream stream, mem_order order)
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
    CUstream s = order == ORDER_LEGACY ? NULL : (CUstream)stream;
    memra_call c;
    memra_status st = memra_call_enter(eng, fn, &c);
    if (st)
        goto done;
    const int on_stream = op != OP_ALLOC && op != OP_FREE;
    if (on_stream && order != ORDER_ASYNC) {
        if ((st = memra_refuse_capture(&c, s, op_what[op],
                                       "use the _async form inside a capture, or call it after")))
            goto done;
        memra_call_relax(&c);
    } else if (on_stream) {
        memra_capture cap;
        if ((st = memra_capture_of(&c, s, &cap)))
            goto done;
        if (cap == MEMRA_CAPTURE_JOINS) {
            st = memra_refuse_capture(&c, s, "queue a copy", NULL);
            goto done;
        }
        if (cap == MEMRA_CAPTURE_NONE)
            memra_call_relax(&c);
    } else {
        memra_call_relax(&c);
    }
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
    if (r == CUDA_SUCCESS && on_stream && order != ORDER_ASYNC) {
        call = "cuStreamSynchronize";
        r = d->cuStreamSynchronize(s);
    }
    if (r != CUDA_SUCCESS)
        st = memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, call);
done:
    memra_call_leave(&c);
    return st;
}

memra_status memra_alloc(memra_engine *eng, size_t bytes, memra_devptr *out)
{
    CUdeviceptr p = 0;
    memra_status st = mem_call("memra_alloc", eng, OP_ALLOC, NULL, NULL, 0, out ? &p : NULL, bytes,
                               NULL, ORDER_LEGACY);
    if (st == MEMRA_OK)
        *out = p;
    return st;
}

memra_status memra_free(memra_engine *eng, memra_devptr ptr)
{
    return mem_call("memra_free", eng, OP_FREE, NULL, NULL, ptr, NULL, 0, NULL, ORDER_LEGACY);
}

memra_status memra_sync(memra_engine *eng, memra_stream stream)
{
    return mem_call("memra_sync", eng, OP_SYNC, NULL, NULL, 0, NULL, 0, stream, ORDER_ON);
}

/* The byte copies and the typed ones (element counts, checked against
 * size_t overflow before they become bytes), each in its three orders:
 * plain (LEGACY), _on (ON) and _async (ASYNC). */
#define NO_STREAM_PARAM
#define STREAM_PARAM , memra_stream stream
#define MEMRA_DEFINE_COPY(name, order, param, stream_arg)                                          \
    memra_status memra_upload##name(memra_engine *eng, memra_devptr dst, const void *src,          \
                                    size_t bytes param)                                            \
    {                                                                                              \
        return mem_call("memra_upload" #name, eng, OP_HTOD, NULL, src, dst, NULL, bytes,           \
                        stream_arg, order);                                                        \
    }                                                                                              \
    memra_status memra_download##name(memra_engine *eng, void *dst, memra_devptr src,              \
                                      size_t bytes param)                                          \
    {                                                                                              \
        return mem_call("memra_download" #name, eng, OP_DTOH, dst, NULL, src, NULL, bytes,         \
                        stream_arg, order);                                                        \
    }
MEMRA_DEFINE_COPY(, ORDER_LEGACY, NO_STREAM_PARAM, NULL)
MEMRA_DEFINE_COPY(_on, ORDER_ON, STREAM_PARAM, stream)
MEMRA_DEFINE_COPY(_async, ORDER_ASYNC, STREAM_PARAM, stream)

static memra_status typed_call(const char *fn, memra_engine *eng, mem_op op, void *host,
                               const void *chost, CUdeviceptr dptr, size_t count, size_t elem,
                               memra_stream stream, mem_order order)
{
    if (count > SIZE_MAX / elem)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: count %zu is too large", fn, count);
    return mem_call(fn, eng, op, host, chost, dptr, NULL, count * elem, stream, order);
}

#define MEMRA_DEFINE_TYPED(sfx, T, name, order, param, stream_arg)                                 \
    memra_status memra_upload_##sfx##name(memra_engine *eng, memra_devptr dst, const T *src,       \
                                          size_t count param)                                      \
    {                                                                                              \
        return typed_call("memra_upload_" #sfx #name, eng, OP_HTOD, NULL, src, dst, count,         \
                          sizeof(T), stream_arg, order);                                           \
    }                                                                                              \
    memra_status memra_download_##sfx##name(memra_engine *eng, T *dst, memra_devptr src,           \
                                            size_t count param)                                    \
    {                                                                                              \
        return typed_call("memra_download_" #sfx #name, eng, OP_DTOH, dst, NULL, src, count,       \
                          sizeof(T), stream_arg, order);                                           \
    }
#define MEMRA_DEFINE_TYPED_COPY(sfx, T)                                                            \
    MEMRA_DEFINE_TYPED(sfx, T, , ORDER_LEGACY, NO_STREAM_PARAM, NULL)                              \
    MEMRA_DEFINE_TYPED(sfx, T, _on, ORDER_ON, STREAM_PARAM, stream)                                \
    MEMRA_DEFINE_TYPED(sfx, T, _async, ORDER_ASYNC, STREAM_PARAM, stream)
MEMRA_TYPED_COPIES(MEMRA_DEFINE_TYPED_COPY)
