/* The mock driver: Device and pinned memory, and copies. */
#include "mock_internal.h"

/* ---- memory ------------------------------------------------------------------ */

CUresult alloc_mem(CUdeviceptr *p, size_t n, int pinned)
{
    CUresult r = unsafe_call();
    if (r != CUDA_SUCCESS)
        return r;
    const size_t sz = (n + 255) / 256 * 256;
    for (alloc_rec **a = &recycled; !pinned && *a; a = &(*a)->next)
        if ((*a)->n == sz) {
            alloc_rec *back = *a;
            *a = back->next;
            back->next = allocs;
            allocs = back;
            *p = (CUdeviceptr)back->p;
            return CUDA_SUCCESS;
        }
    void *m = aligned_alloc(256, sz ? sz : 256);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(m, 0xEE, sz);
    alloc_rec *a = calloc(1, sizeof *a);
    a->p = (uintptr_t)m, a->n = sz, a->pinned = pinned;
    a->next = allocs;
    allocs = a;
    *p = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}
CUresult free_mem(uintptr_t p, int pinned)
{
    CUresult r = unsafe_call();
    if (r != CUDA_SUCCESS)
        return r;
    drain_all(); /* cuMemFree waits for the device, as the real one does */
    for (alloc_rec **a = &allocs; *a; a = &(*a)->next)
        if ((*a)->p == p && (*a)->pinned == pinned) {
            alloc_rec *dead = *a;
            *a = dead->next;
            if (mock.recycle_memory && !pinned) {
                /* First freed, first reused: allocations in the same
                 * order get the same blocks back. */
                alloc_rec **end = &recycled;
                while (*end)
                    end = &(*end)->next;
                dead->next = NULL;
                *end = dead;
                return CUDA_SUCCESS;
            }
            free((void *)dead->p);
            free(dead);
            return CUDA_SUCCESS;
        }
    mock.stale_uses++; /* not a live allocation: freed already, or gone with a reset */
    return CUDA_ERROR_INVALID_VALUE;
}
CUresult m_cuMemAlloc(CUdeviceptr *p, size_t n)
{
    ENTER_CU(cuMemAlloc);
    pthread_mutex_lock(&mu);
    CUresult r = alloc_mem(p, n, 0);
    pthread_mutex_unlock(&mu);
    if (r == CUDA_SUCCESS)
        mock.live_allocs++;
    return r;
}
CUresult m_cuMemFree(CUdeviceptr p)
{
    pthread_mutex_lock(&mu);
    CUresult r = free_mem(p, 0);
    pthread_mutex_unlock(&mu);
    if (r != CUDA_SUCCESS)
        return r;
    mock.live_allocs--;
    return released(MOCK_cuMemFree);
}
CUresult m_cuMemAllocHost(void **p, size_t n)
{
    ENTER_CU(cuMemAllocHost);
    CUdeviceptr d;
    pthread_mutex_lock(&mu);
    CUresult r = alloc_mem(&d, n, 1);
    pthread_mutex_unlock(&mu);
    if (r == CUDA_SUCCESS) {
        *p = (void *)(uintptr_t)d;
        mock.live_pinned++;
    }
    return r;
}
CUresult m_cuMemFreeHost(void *p)
{
    pthread_mutex_lock(&mu);
    CUresult r = free_mem((uintptr_t)p, 1);
    pthread_mutex_unlock(&mu);
    if (r != CUDA_SUCCESS)
        return r;
    mock.live_pinned--;
    return released(MOCK_cuMemFreeHost);
}

/* A pageable host buffer makes a copy synchronous for the host (the driver
 * stages it), which capture forbids; a pinned one keeps it asynchronous. */
CUresult copy(fstream *f, op o, int to_device)
{
    if (stale(f->gen))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    const int pinned = find_alloc((uintptr_t)o.host, o.n, 1) != NULL;
    if (!pinned) {
        if (f->capturing) {
            f->invalidated = 1;
            return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
        CUresult r = unsafe_call();
        if (r != CUDA_SUCCESS)
            return r;
        if (to_device) {
            o.staged = malloc(o.n ? o.n : 1);
            memcpy(o.staged, o.host, o.n);
        }
    }
    CUresult r = enqueue(f, o);
    if (r == CUDA_SUCCESS && !pinned && !to_device)
        run_until(f, f->n_ops); /* complete on return, like the driver */
    return r;
}
CUresult m_cuMemcpyHtoDAsync(CUdeviceptr d, const void *h, size_t n, CUstream s)
{
    ENTER_CU(cuMemcpyHtoDAsync);
    op o = {.kind = MOCK_OP_HTOD, .host = (void *)h, .dev = d, .n = n};
    LOCKED(copy(S(s), o, 1));
}
CUresult m_cuMemcpyDtoHAsync(void *h, CUdeviceptr d, size_t n, CUstream s)
{
    ENTER_CU(cuMemcpyDtoHAsync);
    op o = {.kind = MOCK_OP_DTOH, .host = h, .dev = d, .n = n};
    LOCKED(copy(S(s), o, 0));
}
CUresult m_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    ENTER_CU(cuMemcpyDtoDAsync);
    op o = {.kind = MOCK_OP_DTOD, .host = (void *)(uintptr_t)dst, .dev = src, .n = n};
    LOCKED(enqueue(S(s), o));
}
CUresult m_cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream s)
{
    ENTER_CU(cuMemsetD32Async);
    op o = {.kind = MOCK_OP_MEMSET, .dev = d, .n = n, .val = v};
    LOCKED(enqueue(S(s), o));
}
