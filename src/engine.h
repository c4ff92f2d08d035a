/* The engine: one device's primary context, stream, kernel and caches. */
#ifndef MEMRA_ENGINE_H
#define MEMRA_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>

#include "driver.h"

/* Layer il's macro planes: a host shadow (the content check, and the
 * source of the upload, so it is pinned and the copy truly asynchronous)
 * and one device buffer holding gate, up, down back to back. The device
 * buffer keeps its address while n_expert does, since captured graphs bake
 * it in. */
typedef struct memra_layer_mirror {
    pthread_mutex_t lock; /* this layer's upload; never held across a device wait */
    uint32_t n_expert;    /* floats per plane; 0 before the first allocation */
    int n_planes;         /* planes in the buffer: 3 macro planes, and/or a routing bias */
    int valid;            /* the last upload of the shadow was issued without error */
    float *shadow;        /* pinned, n_planes * n_expert */
    CUdeviceptr dev;      /* n_planes * n_expert floats */
    CUevent uploaded;     /* recorded on upload_stream after each upload */
    CUstream upload_stream;
    int upload_done; /* the upload is known finished: no stream needs to wait for it */
} memra_layer_mirror;

/* Buffers replaced while work may still read them: freed when the engine is
 * destroyed, never under a lock that a launch needs. */
typedef struct memra_retired {
    struct memra_retired *next;
    CUdeviceptr dev;
    float *host; /* pinned */
} memra_retired;

struct memra_engine {
    const memra_driver *d;
    CUdevice dev;
    CUcontext ctx;
    unsigned long long ctx_id; /* cuCtxGetId at creation: a reset context has another */
    _Atomic int ctx_lost;      /* the primary context was reset: touch no handle again */
    CUstream stream;           /* the engine's own non-blocking stream */
    _Atomic int pdl;           /* launch with programmatic dependent launch (launch.c) */
    /* 8 x u32: the fault word (kernels_src/vrows.cu), then the readback
     * area that memra_faults_take moves it into. */
    CUdeviceptr faults;

    /* The first load of the kernel (NVRTC, the disk cache's lock). Launches
     * of a loaded kernel never take it. */
    pthread_mutex_t load_lock;
    _Atomic(CUfunction) fn; /* non-NULL once loaded */
    CUfunction take_fn, route_fn, route_block_fn;
    CUmodule module;
    const memra_nvrtc *nvrtc; /* the NVRTC that built it (NULL: from the cache alone) */
    /* memra_engine_faults calls share the readback area. */
    pthread_mutex_t faults_lock;

    /* Short critical sections only, no driver call inside: the layer table,
     * the retired list and info. */
    pthread_mutex_t state_lock;
    memra_layer_mirror **layers;
    size_t n_layers;
    memra_retired *retired;
    memra_engine_info info;
    memra_kernel_origin origin;
};

/* Makes the engine's context current for the call, pushing it only when the
 * caller's current context differs (a serving process on the primary
 * context pays one cheap query), after checking that the primary context
 * was not reset under the engine (MEMRA_ERR_CONTEXT_RESET). */
memra_status memra_ctx_enter(memra_engine *eng, const char *fn, int *pushed);
void memra_ctx_leave(memra_engine *eng, int pushed);

/* Relaxed stream-capture mode for this thread while memra allocates,
 * copies or synchronises on a stream that is not capturing: another
 * thread's global-mode capture (torch.cuda.graph's default) would otherwise
 * be invalidated by those calls. */
typedef struct memra_relaxed {
    CUstreamCaptureMode old;
    int changed;
} memra_relaxed;
void memra_relax(const memra_driver *d, memra_relaxed *r);
void memra_unrelax(const memra_driver *d, const memra_relaxed *r);

/* The loaded table kernel, compiling and loading it on first use (once, even
 * with racing threads). Loading allocates, so while `s` is capturing a first
 * use is MEMRA_ERR_CAPTURE instead. Caller holds the context. */
memra_status memra_engine_kernel(memra_engine *eng, CUstream s, const char *fn, CUfunction *out);

/* MEMRA_ERR_CAPTURE if `s` is capturing (or is the legacy stream while
 * another stream captures), naming `what` would have happened. */
memra_status memra_check_not_capturing(memra_engine *eng, CUstream s, const char *fn,
                                       const char *what);

/* Whether work on `s` would be captured right now: it captures, or it is
 * the legacy stream while a blocking stream captures (0 on any error). */
int memra_stream_capturing(const memra_driver *d, CUstream s);

/* Hands a replaced buffer to the engine, freed at destroy. */
void memra_engine_retire(memra_engine *eng, CUdeviceptr dev, float *host);

#endif /* MEMRA_ENGINE_H */
