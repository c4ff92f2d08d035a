/* The engine: one device's primary context, stream, kernel and caches. */
#ifndef MEMRA_ENGINE_H
#define MEMRA_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>

#include "driver.h"

/* Layer il's macro planes: a host shadow (the content check) and one device
 * buffer holding gate, up, down back to back. The device buffer keeps its
 * address for the engine's life, since captured graphs bake it in. */
typedef struct memra_layer_mirror {
    uint32_t n_expert; /* planes per buffer; 0 before the first allocation */
    int valid;         /* the device buffer holds the shadow: the last upload succeeded */
    float *shadow;     /* 3 * n_expert */
    CUdeviceptr dev;   /* 3 * n_expert floats */
} memra_layer_mirror;

struct memra_engine {
    const memra_driver *d;
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    CUdeviceptr faults; /* 4 x u32, see kernels_src/vrows.cu */
    memra_engine_info info;

    pthread_mutex_t lock;   /* guards the kernel's first load and the mirrors */
    _Atomic(CUfunction) fn; /* non-NULL once loaded */
    CUmodule module;

    memra_layer_mirror *layers;
    size_t n_layers;
};

/* Makes the engine's context current for the call, pushing it only when the
 * caller's current context differs (a serving process on the primary
 * context pays one cheap query). */
memra_status memra_ctx_enter(memra_engine *eng, const char *fn, int *pushed);
void memra_ctx_leave(memra_engine *eng, int pushed);

static inline CUstream memra_stream_of(memra_engine *eng, memra_stream s)
{
    return s ? (CUstream)s : eng->stream;
}

/* The loaded table kernel, compiling and loading it on first use (once, even
 * with racing threads). Loading allocates, so while `s` is capturing a first
 * use is MEMRA_ERR_CAPTURE instead. Caller holds the context. */
memra_status memra_engine_kernel(memra_engine *eng, CUstream s, const char *fn, CUfunction *out);

/* MEMRA_ERR_CAPTURE if `s` is capturing, naming `what` would have happened. */
memra_status memra_check_not_capturing(memra_engine *eng, CUstream s, const char *fn,
                                       const char *what);

#endif /* MEMRA_ENGINE_H */
