#include "engine.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache.h"
#include "error.h"
#include "jit.h"
#include "nvrtc_find.h"
#include "route_abi.h"
#include "vrows_abi.h"

/* The fault word starts with zero counts and no first pair; so does the
 * readback area behind it. */
static const uint32_t fault_init[8] = {0, 0, MEMRA_NO_FAULT, 0, 0, 0, MEMRA_NO_FAULT, 0};

static memra_status context_lost(const char *fn)
{
    return memra_fail(MEMRA_ERR_CONTEXT_RESET,
                      "%s: the device's primary context was reset (cuDevicePrimaryCtxReset or "
                      "cudaDeviceReset) after this engine was created; its kernel, planes and "
                      "fault word are gone. Destroy the engine and create a new one.",
                      fn);
}

memra_status memra_ctx_enter(memra_engine *eng, const char *fn, int *pushed)
{
    const memra_driver *d = eng->d;
    *pushed = 0;
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
    *pushed = 1;
    return MEMRA_OK;
}

void memra_ctx_leave(memra_engine *eng, int pushed)
{
    if (pushed) {
        CUcontext popped;
        eng->d->cuCtxPopCurrent(&popped);
    }
}

void memra_relax(const memra_driver *d, memra_relaxed *r)
{
    r->old = CU_STREAM_CAPTURE_MODE_RELAXED;
    r->changed = d->cuThreadExchangeStreamCaptureMode(&r->old) == CUDA_SUCCESS;
}

void memra_unrelax(const memra_driver *d, const memra_relaxed *r)
{
    if (r->changed) {
        CUstreamCaptureMode m = r->old;
        d->cuThreadExchangeStreamCaptureMode(&m);
    }
}

/* Whether work on `s` would be captured: it is capturing, or it is the
 * legacy stream while a blocking stream captures (using it would join, and
 * break, that capture). */
static CUresult capture_status(const memra_driver *d, CUstream s, int *capturing)
{
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = d->cuStreamIsCapturing(s, &cs);
    *capturing = r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT ||
                 (r == CUDA_SUCCESS && cs != CU_STREAM_CAPTURE_STATUS_NONE);
    return r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT ? CUDA_SUCCESS : r;
}

int memra_stream_capturing(const memra_driver *d, CUstream s)
{
    int capturing;
    return capture_status(d, s, &capturing) == CUDA_SUCCESS && capturing;
}

memra_status memra_check_not_capturing(memra_engine *eng, CUstream s, const char *fn,
                                       const char *what)
{
    int capturing;
    CUresult r = capture_status(eng->d, s, &capturing);
    if (r != CUDA_SUCCESS)
        return memra_cu_fail(eng->d, r, MEMRA_ERR_DRIVER, fn, "cuStreamIsCapturing");
    if (capturing)
        return memra_fail(MEMRA_ERR_CAPTURE,
                          "%s: the stream is capturing and this call would %s; call "
                          "memra_vrows_prepare_layer() (or memra_engine_warmup()) for this "
                          "layer before capture. The capture is untouched.",
                          fn, what);
    return MEMRA_OK;
}

memra_status memra_device_count(int *count)
{
    static const char fn[] = "memra_device_count";
    if (!count)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: count is NULL", fn);
    *count = 0;
    const memra_driver *d;
    memra_status st = memra_driver_cuda(fn, &d);
    if (st)
        return st;
    int n = 0;
    if (d->no_device)
        return MEMRA_OK;
    CUresult r = d->cuDeviceGetCount(&n);
    if (r == CUDA_ERROR_NO_DEVICE)
        return MEMRA_OK;
    if (r != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuDeviceGetCount");
    *count = n;
    return MEMRA_OK;
}

void memra_engine_retire(memra_engine *eng, CUdeviceptr dev, float *host)
{
    memra_retired *r = calloc(1, sizeof *r);
    if (!r) {
        /* Out of host memory for the note: leaking the buffer is safe,
         * freeing it while a stream may still read it is not. */
        return;
    }
    r->dev = dev, r->host = host;
    pthread_mutex_lock(&eng->state_lock);
    r->next = eng->retired;
    eng->retired = r;
    pthread_mutex_unlock(&eng->state_lock);
}

static void free_layer(const memra_driver *d, memra_layer_mirror *m, int touch_device)
{
    if (touch_device) {
        if (m->dev)
            d->cuMemFree(m->dev);
        if (m->shadow)
            d->cuMemFreeHost(m->shadow);
        if (m->uploaded)
            d->cuEventDestroy(m->uploaded);
    }
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static void engine_release(memra_engine *eng)
{
    const memra_driver *d = eng->d;
    /* After a context reset every handle below may name the application's
     * memory or nothing at all: only host memory is freed, and the retain
     * released (a reset does not release it). */
    int pushed = 0;
    if (eng->ctx && memra_ctx_enter(eng, "memra_engine_destroy", &pushed) != MEMRA_OK)
        pushed = 0; /* best effort below, unless the context is gone */
    const int live = eng->ctx && !atomic_load(&eng->ctx_lost);
    memra_relaxed rx = {0};
    if (live) {
        memra_relax(d, &rx);
        if (eng->stream) {
            d->cuStreamSynchronize(eng->stream);
            d->cuStreamDestroy(eng->stream);
        }
        if (eng->faults)
            d->cuMemFree(eng->faults);
        if (eng->module)
            d->cuModuleUnload(eng->module);
    }
    for (size_t i = 0; i < eng->n_layers; i++)
        if (eng->layers[i])
            free_layer(d, eng->layers[i], live);
    for (memra_retired *r = eng->retired, *next; r; r = next) {
        next = r->next;
        if (live && r->dev)
            d->cuMemFree(r->dev);
        if (live && r->host)
            d->cuMemFreeHost(r->host);
        free(r);
    }
    if (live) {
        memra_unrelax(d, &rx);
        memra_ctx_leave(eng, pushed);
    }
    if (eng->ctx)
        d->cuDevicePrimaryCtxRelease(eng->dev);
    free(eng->layers);
    pthread_mutex_destroy(&eng->load_lock);
    pthread_mutex_destroy(&eng->faults_lock);
    pthread_mutex_destroy(&eng->state_lock);
    free(eng);
}

memra_status memra_engine_create(int ordinal, memra_engine **out)
{
    static const char fn[] = "memra_engine_create";
    if (!out)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: out is NULL", fn);
    *out = NULL;
    int count;
    memra_status st = memra_device_count(&count);
    if (st)
        return st;
    if (ordinal < 0 || ordinal >= count)
        return memra_fail(MEMRA_ERR_NO_DEVICE, "%s: ordinal %d, but %d CUDA device(s) present", fn,
                          ordinal, count);

    memra_engine *eng = calloc(1, sizeof *eng);
    if (!eng)
        return memra_fail(MEMRA_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    const memra_driver *d = memra_driver_get();
    eng->d = d;
    pthread_mutex_init(&eng->load_lock, NULL);
    pthread_mutex_init(&eng->faults_lock, NULL);
    pthread_mutex_init(&eng->state_lock, NULL);
    eng->info.ordinal = ordinal;

    CUresult r;
    const char *call;
    int major = 0, minor = 0, pushed = 0;
    memra_relaxed rx = {0};
    if ((r = d->cuDeviceGet(&eng->dev, ordinal)) != CUDA_SUCCESS) {
        call = "cuDeviceGet";
        goto fail;
    }
    if ((r = d->cuDeviceGetName(eng->info.name, sizeof eng->info.name, eng->dev)) != CUDA_SUCCESS) {
        call = "cuDeviceGetName";
        goto fail;
    }
    if ((r = d->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                     eng->dev)) != CUDA_SUCCESS ||
        (r = d->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                                     eng->dev)) != CUDA_SUCCESS) {
        call = "cuDeviceGetAttribute";
        goto fail;
    }
    eng->info.sm = major * 10 + minor;
    if ((r = d->cuDriverGetVersion(&eng->info.driver_version)) != CUDA_SUCCESS) {
        call = "cuDriverGetVersion";
        goto fail;
    }
    const memra_nvrtc *list;
    const int n_nv = memra_nvrtc_candidates(d, &list);
    for (int i = 0; i < n_nv && !eng->info.nvrtc_version; i++)
        if (list[i].status == MEMRA_OK)
            eng->info.nvrtc_version = list[i].major * 1000 + list[i].minor * 10;

    /* The primary context, not a new one: a serving process (PyTorch, vLLM)
     * already lives on it, so memory and streams are shared, not duplicated. */
    if ((r = d->cuDevicePrimaryCtxRetain(&eng->ctx, eng->dev)) != CUDA_SUCCESS) {
        eng->ctx = NULL;
        call = "cuDevicePrimaryCtxRetain";
        goto fail;
    }
    if (d->cuCtxGetId && (r = d->cuCtxGetId(eng->ctx, &eng->ctx_id)) != CUDA_SUCCESS) {
        call = "cuCtxGetId";
        goto fail;
    }
    if ((st = memra_ctx_enter(eng, fn, &pushed)))
        goto fail_st;
    memra_relax(d, &rx);
    if ((r = d->cuStreamCreate(&eng->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
        eng->stream = NULL;
        call = "cuStreamCreate";
        goto fail_pop;
    }
    if ((r = d->cuMemAlloc(&eng->faults, sizeof fault_init)) != CUDA_SUCCESS) {
        eng->faults = 0;
        call = "cuMemAlloc(fault word)";
        goto fail_pop;
    }
    if ((r = d->cuMemcpyHtoDAsync(eng->faults, fault_init, sizeof fault_init, eng->stream)) !=
            CUDA_SUCCESS ||
        (r = d->cuStreamSynchronize(eng->stream)) != CUDA_SUCCESS) {
        call = "initialising the fault word";
        goto fail_pop;
    }
    memra_unrelax(d, &rx);
    memra_ctx_leave(eng, pushed);
    *out = eng;
    return MEMRA_OK;

fail_pop:
    memra_unrelax(d, &rx);
    memra_ctx_leave(eng, pushed);
fail:
    st = memra_cu_fail(
        d, r, r == CUDA_ERROR_INVALID_DEVICE ? MEMRA_ERR_NO_DEVICE : MEMRA_ERR_DRIVER, fn, call);
fail_st:
    engine_release(eng);
    return st;
}

void memra_engine_destroy(memra_engine *eng)
{
    if (eng)
        engine_release(eng);
}

memra_status memra_engine_stream(memra_engine *eng, memra_stream *out)
{
    if (!eng || !out)
        return memra_fail(MEMRA_ERR_NULL_ARG, "memra_engine_stream: %s is NULL",
                          eng ? "out" : "eng");
    *out = eng->stream;
    return MEMRA_OK;
}

memra_status memra_engine_get_info(memra_engine *eng, memra_engine_info *info)
{
    if (!eng || !info)
        return memra_fail(MEMRA_ERR_NULL_ARG, "memra_engine_get_info: %s is NULL",
                          eng ? "info" : "eng");
    pthread_mutex_lock(&eng->state_lock);
    *info = eng->info;
    const memra_kernel_origin o = eng->origin;
    pthread_mutex_unlock(&eng->state_lock);
    /* The kernel's fields are its origin's, once it is loaded. */
    if (o.ready) {
        info->kernel_ready = 1;
        info->kernel_is_ptx = o.is_ptx;
        info->kernel_from_cache = o.from_cache;
        info->nvrtc_version = o.nvrtc_version;
    }
    return MEMRA_OK;
}

static memra_status get_function(const memra_driver *d, CUmodule mod, const char *name,
                                 const char *fn, CUfunction *f)
{
    CUresult r = d->cuModuleGetFunction(f, mod, name);
    if (r != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_MODULE_LOAD, fn, "cuModuleGetFunction");
    return MEMRA_OK;
}

/* Refusals that another NVRTC or image kind may get past. */
static int refused_image(CUresult r)
{
    return r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION || r == CUDA_ERROR_NO_BINARY_FOR_GPU ||
           r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_INVALID_PTX ||
           r == CUDA_ERROR_JIT_COMPILER_NOT_FOUND;
}

typedef struct attempts {
    char why[2048];
    size_t used;
    int refused_loads;
} attempts;

static void note(attempts *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(attempts *a, const char *fmt, ...)
{
    if (a->used >= sizeof a->why)
        return;
    va_list ap;
    va_start(ap, fmt);
    a->used += (size_t)vsnprintf(a->why + a->used, sizeof a->why - a->used, fmt, ap);
    va_end(ap);
}

static const char *target_name(int arch, int is_ptx, char *buf, size_t n)
{
    snprintf(buf, n, "%s_%d %s", is_ptx ? "compute" : "sm", arch, is_ptx ? "PTX" : "CUBIN");
    return buf;
}

/* Loads an image; a refused one is noted and 0 returned for the next try. */
static memra_status load_image(memra_engine *eng, const char *fn, const memra_image *img,
                               const char *who, CUmodule *mod, attempts *a, int *loaded)
{
    const memra_driver *d = eng->d;
    char t[48];
    *loaded = 0;
    CUresult r = d->cuModuleLoadData(mod, img->data);
    if (r == CUDA_SUCCESS) {
        *loaded = 1;
        return MEMRA_OK;
    }
    const char *name = NULL;
    d->cuGetErrorName(r, &name);
    if (!refused_image(r))
        return memra_cu_fail(d, r, MEMRA_ERR_MODULE_LOAD, fn, "cuModuleLoadData");
    a->refused_loads++;
    note(a, "\n  %s: cuModuleLoadData refused its %s: %s", who,
         target_name(img->arch, img->is_ptx, t, sizeof t), name ? name : "?");
    return MEMRA_OK;
}

/* One planned (NVRTC, image): from the cache or compiled, then loaded. A
 * verified entry the driver refuses (a driver update, say) is built afresh,
 * and once that loads the entry is replaced so the next start does not pay
 * the compile again. */
static memra_status try_choice(memra_engine *eng, const char *fn, const memra_jit_choice *c,
                               CUmodule *mod, int *from_cache, attempts *a, int *loaded)
{
    char who[640];
    snprintf(who, sizeof who, "%s (%s, NVRTC %d.%d)", c->nv->path, c->nv->origin, c->nv->major,
             c->nv->minor);
    memra_image img;
    memra_status st = memra_cache_get_image(c->nv, c->arch, c->is_ptx, &img, from_cache);
    if (st) {
        note(a, "\n  %s: %s", who, memra_last_error());
        return MEMRA_OK;
    }
    st = load_image(eng, fn, &img, who, mod, a, loaded);
    memra_image_free(&img);
    if (st || *loaded || !*from_cache)
        return st;
    *from_cache = 0;
    if (memra_jit_compile(c->nv, c->arch, c->is_ptx, &img)) {
        note(a, "\n  %s: %s", who, memra_last_error());
        return MEMRA_OK;
    }
    st = load_image(eng, fn, &img, who, mod, a, loaded);
    if (*loaded)
        memra_cache_put(c->nv, c->arch, c->is_ptx, &img);
    memra_image_free(&img);
    return st;
}

static memra_status load_kernel(memra_engine *eng, const char *fn)
{
    const memra_driver *d = eng->d;
    const int sm = eng->info.sm, drv = eng->info.driver_version;
    /* MEMRA_FORCE_PTX=1: take the PTX path (the one a device newer than
     * every NVRTC gets) on purpose, to measure or test it. */
    const char *force = getenv("MEMRA_FORCE_PTX");
    const int force_ptx = force && strcmp(force, "1") == 0;
    attempts a = {{0}, 0, 0};
    memra_jit_choice plan[2 * MEMRA_NVRTC_MAX];
    const int n =
        memra_jit_plan(d, sm, drv, force_ptx, plan, 2 * MEMRA_NVRTC_MAX, a.why, sizeof a.why);
    a.used = strlen(a.why);
    CUmodule mod = NULL;
    memra_kernel_origin o = {0};
    const memra_nvrtc *used = NULL;
    int loaded = 0;
    memra_status st = MEMRA_OK;
    for (int i = 0; i < n && !loaded && !st; i++) {
        st = try_choice(eng, fn, &plan[i], &mod, &o.from_cache, &a, &loaded);
        if (loaded) {
            used = plan[i].nv;
            o.arch = plan[i].arch, o.is_ptx = plan[i].is_ptx;
            o.nvrtc_version = used->major * 1000 + used->minor * 10;
            snprintf(o.nvrtc_path, sizeof o.nvrtc_path, "%s", used->path);
        }
    }
    /* No NVRTC could serve: an entry any NVRTC built for this device and
     * driver still starts the engine. */
    for (int rank = 0; !loaded && !st; rank++) {
        memra_image img;
        memra_cache_found f;
        if (!memra_cache_find_any(sm, drv, rank, &img, &f))
            break;
        st = load_image(eng, fn, &img, "the kernel cache", &mod, &a, &loaded);
        memra_image_free(&img);
        if (loaded) {
            o.from_cache = 1, o.arch = f.arch, o.is_ptx = f.is_ptx;
            o.nvrtc_version = f.nvrtc_major * 1000 + f.nvrtc_minor * 10;
        }
    }
    if (st)
        return st;
    if (!loaded)
        return memra_fail(a.refused_loads ? MEMRA_ERR_MODULE_LOAD : MEMRA_ERR_NVRTC,
                          "%s: no NVRTC builds a kernel that this device (sm_%d) and driver "
                          "(CUDA %d.%d) load, and the kernel cache holds none:%s",
                          fn, sm, drv / 1000, drv % 1000 / 10, a.why);
    CUfunction f, take, route, route_block;
    if ((st = get_function(d, mod, MEMRA_VROWS_KERNEL, fn, &f)) ||
        (st = get_function(d, mod, MEMRA_TAKE_KERNEL, fn, &take)) ||
        (st = get_function(d, mod, MEMRA_ROUTE_KERNEL, fn, &route)) ||
        (st = get_function(d, mod, MEMRA_ROUTE_BLOCK_KERNEL, fn, &route_block))) {
        d->cuModuleUnload(mod);
        return st;
    }
    eng->module = mod;
    eng->take_fn = take;
    eng->route_fn = route;
    eng->route_block_fn = route_block;
    eng->nvrtc = used;
    o.ready = 1;
    pthread_mutex_lock(&eng->state_lock);
    eng->origin = o;
    pthread_mutex_unlock(&eng->state_lock);
    atomic_store_explicit(&eng->fn, f, memory_order_release);
    return MEMRA_OK;
}

memra_status memra_engine_kernel_origin(memra_engine *eng, memra_kernel_origin *out)
{
    if (!eng || !out)
        return memra_fail(MEMRA_ERR_NULL_ARG, "memra_engine_kernel_origin: %s is NULL",
                          eng ? "out" : "eng");
    pthread_mutex_lock(&eng->state_lock);
    *out = eng->origin;
    pthread_mutex_unlock(&eng->state_lock);
    return MEMRA_OK;
}

memra_status memra_engine_kernel(memra_engine *eng, CUstream s, const char *fn, CUfunction *out)
{
    CUfunction f = atomic_load_explicit(&eng->fn, memory_order_acquire);
    if (f) {
        *out = f;
        return MEMRA_OK;
    }
    memra_status cst = memra_check_not_capturing(eng, s, fn, "compile and load the kernel");
    if (cst)
        return cst;
    pthread_mutex_lock(&eng->load_lock);
    memra_status st = MEMRA_OK;
    if (!atomic_load_explicit(&eng->fn, memory_order_relaxed)) {
        memra_relaxed rx;
        memra_relax(eng->d, &rx);
        st = load_kernel(eng, fn);
        memra_unrelax(eng->d, &rx);
    }
    pthread_mutex_unlock(&eng->load_lock);
    *out = atomic_load_explicit(&eng->fn, memory_order_acquire);
    return st;
}

memra_status memra_engine_warmup(memra_engine *eng)
{
    static const char fn[] = "memra_engine_warmup";
    if (!eng)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: eng is NULL", fn);
    int pushed;
    memra_status st = memra_ctx_enter(eng, fn, &pushed);
    if (st)
        return st;
    CUfunction f;
    st = memra_engine_kernel(eng, eng->stream, fn, &f);
    memra_ctx_leave(eng, pushed);
    return st;
}

memra_status memra_engine_faults(memra_engine *eng, memra_stream stream, memra_faults *out,
                                 int reset)
{
    static const char fn[] = "memra_engine_faults";
    if (!eng || !out)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: %s is NULL", fn, eng ? "out" : "eng");
    const memra_driver *d = eng->d;
    CUstream s = (CUstream)stream;
    int pushed;
    memra_status st = memra_ctx_enter(eng, fn, &pushed);
    if (st)
        return st;
    CUfunction f;
    if ((st = memra_check_not_capturing(eng, s, fn, "read the fault word")) ||
        (reset && (st = memra_engine_kernel(eng, s, fn, &f)))) {
        memra_ctx_leave(eng, pushed);
        return st;
    }
    pthread_mutex_lock(&eng->faults_lock);
    memra_relaxed rx;
    memra_relax(d, &rx);
    uint32_t w[4];
    CUresult r = CUDA_SUCCESS;
    CUdeviceptr from = eng->faults;
    if (reset) {
        /* Read and clear on the device in one step (atomicExch), so counts
         * that other streams add meanwhile are never wiped unread. */
        memra_take_args a = {eng->faults};
        size_t size = sizeof a;
        void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &a, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                         CU_LAUNCH_PARAM_END};
        r = d->cuLaunchKernel(eng->take_fn, 1, 1, 1, 1, 1, 1, 0, s, NULL, extra);
        from = eng->faults + 4 * sizeof(uint32_t);
    }
    if (r == CUDA_SUCCESS)
        r = d->cuMemcpyDtoHAsync(w, from, sizeof w, s);
    if (r == CUDA_SUCCESS)
        r = d->cuStreamSynchronize(s);
    memra_unrelax(d, &rx);
    pthread_mutex_unlock(&eng->faults_lock);
    if (r != CUDA_SUCCESS) {
        st = memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "reading the fault word");
    } else {
        out->bad_expert = w[0];
        out->nonfinite = w[1];
        out->first_pair = w[2];
        out->not_local = w[3];
    }
    memra_ctx_leave(eng, pushed);
    return st;
}
