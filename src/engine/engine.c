/* The engine's life: the device and its primary context, the engine's own
 * stream and fault word, what it reports about itself. */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/error.h"
#include "abi.h"
#include "driver/nvrtc_find.h"

/* The devices present, a failure named as `fn`'s (the public call the
 * caller made, not this one). */
static memra_status device_count(const char *fn, int *count)
{
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

memra_status memra_device_count(int *count)
{
    if (!count)
        return memra_fail(MEMRA_ERR_NULL_ARG, "memra_device_count: count is NULL");
    return device_count("memra_device_count", count);
}

static void engine_release(memra_engine *eng)
{
    const memra_driver *d = eng->d;
    /* After a context reset every handle below may name the application's
     * memory or nothing at all: only host memory is freed, and the retain
     * released (a reset does not release it). */
    memra_call c = {.eng = eng, .cx = &eng->cx, .d = d, .fn = "memra_engine_destroy"};
    if (eng->cx.ctx && memra_call_enter(eng, c.fn, &c) != MEMRA_OK)
        c.pushed = 0; /* best effort below, unless the context is gone */
    const int live = memra_context_live(&eng->cx);
    if (live) {
        memra_call_relax(&c);
        if (eng->stream) {
            d->cuStreamSynchronize(eng->stream);
            d->cuStreamDestroy(eng->stream);
        }
        if (eng->faults)
            d->cuMemFree(eng->faults);
        if (eng->layout_tickets)
            d->cuMemFree(eng->layout_tickets);
        for (int m = 0; m < MEMRA_MODULE_COUNT; m++)
            if (eng->module[m])
                d->cuModuleUnload(eng->module[m]);
        for (int i = 0; i < atomic_load(&eng->n_special); i++)
            if (eng->special[i].mod)
                d->cuModuleUnload(eng->special[i].mod);
    }
    memra_mirror_release(&eng->mirror, d, live);
    if (live)
        memra_call_leave(&c);
    memra_context_release(&eng->cx);
    pthread_mutex_destroy(&eng->load_lock);
    pthread_mutex_destroy(&eng->state_lock);
    pthread_mutex_destroy(&eng->check_lock);
    free(eng);
}

memra_status memra_engine_create(int ordinal, memra_engine **out)
{
    static const char fn[] = "memra_engine_create";
    if (!out)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: out is NULL", fn);
    *out = NULL;
    int count;
    memra_status st = device_count(fn, &count);
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
    pthread_mutex_init(&eng->state_lock, NULL);
    memra_mirror_init(&eng->mirror);
    pthread_mutex_init(&eng->check_lock, NULL);
    eng->info.ordinal = ordinal;
    /* Routing compiles its kernels once per layer spec, the spec's counts
     * and flags as constants (route.c): on the H200 that node takes
     * 0.62-0.85x the generic kernels' time (BENCHMARKS.md).
     * MEMRA_ROUTE_SPECIALIZE=0 keeps to the generic kernels, one module for
     * every spec (fewer NVRTC compiles on a cold cache). */
    eng->route_specialize = memra_env_flag("MEMRA_ROUTE_SPECIALIZE", 1);

    CUresult r;
    const char *call;
    int major = 0, minor = 0;
    memra_call c = {.eng = eng, .cx = &eng->cx, .d = d, .fn = fn};
    CUdevice dev;
    if ((r = d->cuDeviceGet(&dev, ordinal)) != CUDA_SUCCESS) {
        call = "cuDeviceGet";
        goto fail;
    }
    if ((r = d->cuDeviceGetName(eng->info.name, sizeof eng->info.name, dev)) != CUDA_SUCCESS) {
        call = "cuDeviceGetName";
        goto fail;
    }
    if ((r = d->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) !=
            CUDA_SUCCESS ||
        (r = d->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)) !=
            CUDA_SUCCESS) {
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
            eng->info.nvrtc_version = MEMRA_CUDA_VERSION_CODE(list[i].major, list[i].minor);

    if ((r = memra_context_retain(&eng->cx, d, dev, &call)) != CUDA_SUCCESS)
        goto fail;
    if ((st = memra_call_enter(eng, fn, &c)))
        goto fail_st;
    memra_call_relax(&c);
    if ((r = d->cuStreamCreate(&eng->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
        eng->stream = NULL;
        call = "cuStreamCreate";
        goto fail_pop;
    }
    /* The fault word starts with zero counts and no first pair; so does
     * every readback area behind it. */
    uint32_t fault_init[MEMRA_FAULT_WORDS * (1 + MEMRA_FAULT_READBACKS)] = {0};
    for (size_t i = 0; i < sizeof fault_init / sizeof *fault_init; i += MEMRA_FAULT_WORDS)
        fault_init[i + MEMRA_FAULT_FIRST_PAIR] = MEMRA_NO_FAULT;
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
    /* The mirror's first pinned chunk now, not at a layer's first upload. */
    memra_mirror_reserve(d, &eng->mirror);
    memra_call_leave(&c);
    *out = eng;
    return MEMRA_OK;

fail_pop:
    memra_call_leave(&c);
fail:
    st = memra_cu_fail(
        d, r, r == CUDA_ERROR_INVALID_DEVICE ? MEMRA_ERR_NO_DEVICE : MEMRA_ERR_DRIVER, fn, call);
fail_st:
    engine_release(eng);
    return st;
}

memra_status memra_call_enter(memra_engine *eng, const char *fn, memra_call *c)
{
    const memra_status st = memra_context_enter(&eng->cx, fn, c);
    c->eng = eng;
    return st;
}

void memra_engine_destroy(memra_engine *eng)
{
    if (eng)
        engine_release(eng);
}

memra_status memra_engine_live(memra_engine *eng, const char *fn)
{
    memra_call c;
    const memra_status st = memra_call_enter(eng, fn, &c);
    memra_call_leave(&c);
    return st;
}

memra_status memra_engine_stream(memra_engine *eng, memra_stream *out)
{
    static const char fn[] = "memra_engine_stream";
    if (!eng || !out)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: %s is NULL", fn, eng ? "out" : "eng");
    /* a stream of a reset context is a stale handle: not handed out */
    const memra_status st = memra_engine_live(eng, fn);
    if (st)
        return st;
    *out = eng->stream;
    return MEMRA_OK;
}

memra_status memra_engine_get_info(memra_engine *eng, memra_engine_info *info)
{
    if (!eng || !info)
        return memra_fail(MEMRA_ERR_NULL_ARG, "memra_engine_get_info: %s is NULL",
                          eng ? "info" : "eng");
    const memra_status st = memra_engine_live(eng, "memra_engine_get_info");
    if (st)
        return st;
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
