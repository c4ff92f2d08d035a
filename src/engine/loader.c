/* The loader: each module of MEMRA_MODULES compiled by NVRTC (or taken
 * from the disk cache) for this device and driver at the first use of one
 * of its kernels, loaded once per engine, its kernels looked up. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit/cache.h"
#include "engine.h"
#include "base/env.h"
#include "base/error.h"
#include "jit/jit.h"
#include "driver/nvrtc_find.h"
#include "base/warn.h"

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
static memra_status try_choice(memra_engine *eng, const char *fn, const memra_source *src,
                               const memra_jit_choice *c, CUmodule *mod, int *from_cache,
                               attempts *a, int *loaded)
{
    char who[640];
    snprintf(who, sizeof who, "%s (%s, NVRTC %d.%d)", c->nv->path, c->nv->origin, c->nv->major,
             c->nv->minor);
    memra_image img;
    memra_status st = memra_cache_get_image(c->nv, src, c->arch, c->is_ptx, &img, from_cache);
    if (st) {
        note(a, "\n  %s: %s", who, memra_last_error());
        return MEMRA_OK;
    }
    st = load_image(eng, fn, &img, who, mod, a, loaded);
    memra_image_free(&img);
    if (st || *loaded || !*from_cache)
        return st;
    *from_cache = 0;
    if (memra_jit_compile(c->nv, src, c->arch, c->is_ptx, &img)) {
        note(a, "\n  %s: %s", who, memra_last_error());
        return MEMRA_OK;
    }
    st = load_image(eng, fn, &img, who, mod, a, loaded);
    if (*loaded)
        memra_cache_put(c->nv, src, c->arch, c->is_ptx, &img);
    memra_image_free(&img);
    return st;
}

/* `src` compiled (or taken from the disk cache) and loaded: the module
 * (*out), where it came from (*out_origin), and the NVRTC that built it
 * (*out_used, NULL for the cache). */
static memra_status load_source(memra_engine *eng, const char *fn, const memra_source *srcp,
                                CUmodule *out, memra_kernel_origin *out_origin,
                                const memra_nvrtc **out_used)
{
    const memra_driver *d = eng->d;
    const memra_source src = *srcp;
    const int sm = eng->info.sm, drv = eng->info.driver_version;
    /* MEMRA_FORCE_PTX=1: take the PTX path (the one a device newer than
     * every NVRTC gets) on purpose, to measure or test it. */
    const int force_ptx = memra_env_flag("MEMRA_FORCE_PTX", 0);
    attempts a = {{0}, 0, 0};
    memra_jit_choice plan[2 * MEMRA_NVRTC_MAX];
    int seen = 0;
    const int n = memra_jit_plan(d, sm, drv, force_ptx, plan, 2 * MEMRA_NVRTC_MAX, a.why,
                                 sizeof a.why, &seen);
    a.used = strlen(a.why);
    CUmodule mod = NULL;
    memra_kernel_origin o = {0};
    const memra_nvrtc *used = NULL;
    int loaded = 0;
    memra_status st = MEMRA_OK;
    /* The NVRTCs loaded so far first; while none of them builds an image
     * that loads, the candidates not yet opened, one need at a time. */
    for (int m = n; m > 0 && !loaded && !st;) {
        for (int i = 0; i < m && !loaded && !st; i++) {
            st = try_choice(eng, fn, &src, &plan[i], &mod, &o.from_cache, &a, &loaded);
            if (loaded) {
                used = plan[i].nv;
                o.arch = plan[i].arch, o.is_ptx = plan[i].is_ptx;
                o.nvrtc_version = MEMRA_CUDA_VERSION_CODE(used->major, used->minor);
                snprintf(o.nvrtc_path, sizeof o.nvrtc_path, "%s", used->path);
            }
        }
        if (loaded || st)
            break;
        m = memra_jit_plan_more(d, sm, drv, force_ptx, plan, 2 * MEMRA_NVRTC_MAX, a.why + a.used,
                                sizeof a.why - a.used, &seen);
        a.used = strlen(a.why);
    }
    /* No NVRTC could serve: an entry any NVRTC built for this device and
     * driver still starts the engine. */
    for (int rank = 0; !loaded && !st; rank++) {
        memra_image img;
        memra_cache_found f;
        if (!memra_cache_find_any(&src, sm, drv, rank, &img, &f))
            break;
        st = load_image(eng, fn, &img, "the kernel cache", &mod, &a, &loaded);
        memra_image_free(&img);
        if (loaded) {
            o.from_cache = 1, o.arch = f.arch, o.is_ptx = f.is_ptx;
            o.nvrtc_version = MEMRA_CUDA_VERSION_CODE(f.nvrtc_major, f.nvrtc_minor);
        }
    }
    if (st)
        return st;
    if (!loaded)
        return memra_fail(a.refused_loads ? MEMRA_ERR_MODULE_LOAD : MEMRA_ERR_NVRTC,
                          "%s: no NVRTC builds %s for this device (sm_%d) and driver (CUDA "
                          "%d.%d), and the kernel cache holds none:%s",
                          fn, src.name, sm, drv / 1000, drv % 1000 / 10, a.why);
    o.ready = 1;
    *out = mod, *out_origin = o, *out_used = used;
    return MEMRA_OK;
}

static memra_status load_module(memra_engine *eng, const char *fn, memra_module_id mid)
{
    const memra_driver *d = eng->d;
    const memra_source src = memra_module_source(mid);
    CUmodule mod;
    memra_kernel_origin o;
    const memra_nvrtc *used;
    memra_status st = load_source(eng, fn, &src, &mod, &o, &used);
    if (st)
        return st;
    CUfunction f[MEMRA_KERNEL_COUNT] = {0};
    for (int k = 0; k < MEMRA_KERNEL_COUNT; k++)
        if (memra_kernel_module((memra_kernel_id)k) == mid &&
            (st = get_function(d, mod, memra_kernel_name((memra_kernel_id)k), fn, &f[k]))) {
            d->cuModuleUnload(mod);
            return st;
        }
    eng->module[mid] = mod;
    if (!eng->nvrtc)
        eng->nvrtc = used;
    if (mid == MEMRA_MODULE_VROWS) {
        pthread_mutex_lock(&eng->state_lock);
        eng->origin = o;
        pthread_mutex_unlock(&eng->state_lock);
    }
    for (int k = 0; k < MEMRA_KERNEL_COUNT; k++)
        if (f[k])
            atomic_store_explicit(&eng->kernel[k], f[k], memory_order_release);
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

memra_status memra_engine_kernel(memra_call *c, memra_capture cap, memra_kernel_id k,
                                 CUfunction *out)
{
    memra_engine *eng = c->eng;
    CUfunction f = atomic_load_explicit(&eng->kernel[k], memory_order_acquire);
    if (f) {
        *out = f;
        return MEMRA_OK;
    }
    if (cap != MEMRA_CAPTURE_NONE)
        return memra_fail(MEMRA_ERR_CAPTURE,
                          "%s: the stream is capturing and this call would compile and load its "
                          "kernel (%s); call %s before capture. The capture is untouched.",
                          c->fn, memra_kernel_name(k), memra_kernel_prepare(k));
    /* What the load warns (the cache folder, NVRTC found and refused) is
     * sent once the lock is let go: the log callback may warm this engine up. */
    memra_warn_hold();
    pthread_mutex_lock(&eng->load_lock);
    memra_status st = MEMRA_OK;
    if (!atomic_load_explicit(&eng->kernel[k], memory_order_relaxed)) {
        memra_call_relax(c);
        st = load_module(eng, c->fn, memra_kernel_module(k));
    }
    pthread_mutex_unlock(&eng->load_lock);
    memra_warn_release();
    *out = atomic_load_explicit(&eng->kernel[k], memory_order_acquire);
    return st;
}

/* ---- kernels compiled for one set of defines (one layer spec) ---------- */

static int same_key(const memra_special_key *a, const memra_special_key *b)
{
    if (a->k != b->k || a->n != b->n || a->names != b->names)
        return 0;
    for (int i = 0; i < a->n; i++)
        if (a->vals[i] != b->vals[i])
            return 0;
    return 1;
}

/* The entry for key (its f NULL where the module could not be built), or
 * NULL. */
static const memra_special *find_special(memra_engine *eng, const memra_special_key *key)
{
    const int n = atomic_load_explicit(&eng->n_special, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (same_key(&eng->special[i].key, key))
            return &eng->special[i];
    return NULL;
}

/* The module's source with "#define NAME VALUEu" lines ahead of it. */
char *memra_engine_special_text(const memra_special_key *key, const memra_source *base, size_t *len)
{
    char head[MEMRA_SPECIAL_MAX_DEFINES * 64];
    size_t used = 0;
    for (int i = 0; i < key->n && used < sizeof head; i++)
        used += (size_t)snprintf(head + used, sizeof head - used, "#define %s %uu\n", key->names[i],
                                 (unsigned)key->vals[i]);
    if (used >= sizeof head)
        return NULL;
    char *text = malloc(used + base->len + 1);
    if (!text)
        return NULL;
    memcpy(text, head, used);
    memcpy(text + used, base->text, base->len);
    text[used + base->len] = 0;
    *len = used + base->len;
    return text;
}

memra_status memra_engine_special_kernel(memra_call *c, memra_capture cap,
                                         const memra_special_key *key, CUfunction *out)
{
    memra_engine *eng = c->eng;
    const memra_special *e = find_special(eng, key);
    *out = e ? e->f : NULL;
    if (e || cap != MEMRA_CAPTURE_NONE)
        return MEMRA_OK;
    if (key->n < 0 || key->n > MEMRA_SPECIAL_MAX_DEFINES)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: %d defines for a special kernel (at most %d)",
                          c->fn, key->n, MEMRA_SPECIAL_MAX_DEFINES);
    memra_warn_hold();
    pthread_mutex_lock(&eng->load_lock);
    const int n = atomic_load_explicit(&eng->n_special, memory_order_relaxed);
    if (!(e = find_special(eng, key)) && n < MEMRA_SPECIAL_MODULES) {
        const memra_source base = memra_module_source(memra_kernel_module(key->k));
        memra_source src = base;
        char *text = memra_engine_special_text(key, &base, &src.len);
        CUmodule mod = NULL;
        memra_kernel_origin o;
        const memra_nvrtc *used = NULL;
        CUfunction f = NULL;
        memra_status st = MEMRA_ERR_OUT_OF_MEMORY;
        src.text = text;
        memra_call_relax(c);
        if (text && !(st = load_source(eng, c->fn, &src, &mod, &o, &used)) &&
            (st = get_function(eng->d, mod, memra_kernel_name(key->k), c->fn, &f)))
            eng->d->cuModuleUnload(mod), mod = NULL, f = NULL;
        free(text);
        /* A module that cannot be built (no NVRTC beside a cache that holds
         * only the generic kernels, say) is remembered as such, so the
         * generic kernel routes this spec from now on, once warned. */
        if (st)
            memra_warn(MEMRA_WARN_SPECIALIZE,
                       "%s: the module for one layer spec could not be built (%s); the generic "
                       "kernels route it",
                       memra_kernel_name(key->k), memra_last_error());
        memra_special *ne = &eng->special[n];
        ne->key = *key, ne->mod = mod, ne->f = f;
        if (!eng->nvrtc && used)
            eng->nvrtc = used;
        atomic_store_explicit(&eng->n_special, n + 1, memory_order_release);
        e = ne;
    }
    *out = e ? e->f : NULL;
    pthread_mutex_unlock(&eng->load_lock);
    memra_warn_release();
    return MEMRA_OK;
}

memra_status memra_engine_warmup(memra_engine *eng)
{
    static const char fn[] = "memra_engine_warmup";
    if (!eng)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: eng is NULL", fn);
    memra_call c;
    memra_status st = memra_call_enter(eng, fn, &c);
    CUfunction f;
    /* The table kernel's module (routing's load at memra_route_prepare_layer
     * or their first launch). */
    if (!st)
        st = memra_engine_kernel(&c, MEMRA_CAPTURE_NONE, MEMRA_KERNEL_VROWS, &f);
    memra_call_leave(&c);
    return st;
}
