#include "driver.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "soname.h"

static memra_driver real_table;
static pthread_once_t real_once = PTHREAD_ONCE_INIT;
static _Atomic(const memra_driver *) installed;

/* cuGetProcAddress itself comes from dlsym: the _v2 form (CUDA 12+) reports
 * whether the symbol exists at the asked version; the 11.3 form does not. */
typedef struct proc_lookup {
    PFN_cuGetProcAddress_v12000 v2;
    PFN_cuGetProcAddress_v11030 v1;
} proc_lookup;

static void *lookup(const proc_lookup *pl, const char *name, int version)
{
    void *fn = NULL;
    CUresult r;
    if (pl->v2) {
        CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        r = pl->v2(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &q);
        if (q != CU_GET_PROC_ADDRESS_SUCCESS)
            fn = NULL;
    } else {
        r = pl->v1(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT);
    }
    return r == CUDA_SUCCESS ? fn : NULL;
}

static void load_cuda(memra_driver *d)
{
    d->cuda_status = MEMRA_ERR_NO_DRIVER;
    /* The copy the process loaded (PyTorch's, say), else the loader's
     * search, which a FIFO on LD_LIBRARY_PATH would block (soname.h). */
    char path[PATH_MAX], why[sizeof d->cuda_error - 96];
    void *h = memra_soname_loaded("libcuda.so.1", path, sizeof path);
    if (!h)
        h = memra_soname_load("libcuda.so.1", why, sizeof why);
    if (!h) {
        snprintf(d->cuda_error, sizeof d->cuda_error,
                 "libcuda.so.1 could not be loaded (no NVIDIA driver on this machine?): %s", why);
        return;
    }
    proc_lookup pl;
    memra_set_fn(&pl.v2, dlsym(h, "cuGetProcAddress_v2"));
    memra_set_fn(&pl.v1, dlsym(h, "cuGetProcAddress"));
    if (!pl.v2 && !pl.v1) {
        snprintf(d->cuda_error, sizeof d->cuda_error,
                 "libcuda.so.1 has no cuGetProcAddress: the driver predates CUDA 11.3");
        return;
    }
#define MEMRA_X(name, ver, req)                                                                    \
    memra_set_fn(&d->name, lookup(&pl, #name, ver));                                               \
    if (req && !d->name) {                                                                         \
        snprintf(d->cuda_error, sizeof d->cuda_error,                                              \
                 "libcuda.so.1 lacks %s (CUDA %d.%d ABI): the driver is too old", #name,           \
                 ver / 1000, ver % 1000 / 10);                                                     \
        return;                                                                                    \
    }
    MEMRA_CU_ENTRY_POINTS(MEMRA_X)
#undef MEMRA_X
    CUresult r = d->cuInit(0);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NO_DEVICE) {
        const char *name = NULL;
        d->cuGetErrorName(r, &name);
        snprintf(d->cuda_error, sizeof d->cuda_error, "cuInit failed: %s (%d)", name ? name : "?",
                 (int)r);
        return;
    }
    /* No device is not a missing driver: the device count is then 0 (and
     * every other call would say the driver is not initialised). */
    d->no_device = r == CUDA_ERROR_NO_DEVICE;
    d->cuda_status = MEMRA_OK;
}

static void load_real(void)
{
    load_cuda(&real_table);
}

const memra_driver *memra_driver_get(void)
{
    const memra_driver *t = atomic_load_explicit(&installed, memory_order_acquire);
    if (t)
        return t;
    pthread_once(&real_once, load_real);
    return &real_table;
}

void memra_driver_install(const memra_driver *table)
{
    atomic_store_explicit(&installed, table, memory_order_release);
}

memra_status memra_driver_cuda(const char *fn, const memra_driver **out)
{
    const memra_driver *d = memra_driver_get();
    *out = d;
    if (d->cuda_status)
        return memra_fail(d->cuda_status, "%s: %s", fn, d->cuda_error);
    return MEMRA_OK;
}

memra_status memra_cu_fail(const memra_driver *d, CUresult r, memra_status status, const char *fn,
                           const char *call)
{
    const char *name = NULL, *desc = NULL;
    if (d->cuGetErrorName)
        d->cuGetErrorName(r, &name);
    if (d->cuGetErrorString)
        d->cuGetErrorString(r, &desc);
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        status = MEMRA_ERR_OUT_OF_MEMORY;
    return memra_fail(status, "%s: %s failed: %s (%d): %s", fn, call, name ? name : "?", (int)r,
                      desc ? desc : "no description");
}

memra_status memra_driver_version(int *version)
{
    static const char fn[] = "memra_driver_version";
    if (!version)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: version is NULL", fn);
    const memra_driver *d;
    memra_status st = memra_driver_cuda(fn, &d);
    if (st)
        return st;
    int v = 0;
    CUresult r = d->cuDriverGetVersion(&v);
    if (r != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, "cuDriverGetVersion");
    *version = v;
    return MEMRA_OK;
}
