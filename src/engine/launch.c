/* Kernel launches: plain, or with programmatic dependent launch so a kernel
 * starts while the one before it on the stream drains (its launch cost and
 * first instructions overlap the tail of the previous kernel). */
#include "launch.h"

#include "base/error.h"

int memra_pdl_supported(const memra_engine *eng)
{
    return eng->info.sm >= 90 && eng->d->cuLaunchKernelEx && eng->info.driver_version >= 12030;
}

memra_status memra_engine_set_pdl(memra_engine *eng, int enable, int *active)
{
    static const char fn[] = "memra_engine_set_pdl";
    if (!eng)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: eng is NULL", fn);
    if (enable != 0 && enable != 1)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: enable = %d is not 0 or 1", fn, enable);
    const memra_status st = memra_engine_live(eng, fn);
    if (st)
        return st;
    const int on = enable && memra_pdl_supported(eng);
    atomic_store_explicit(&eng->pdl, on, memory_order_relaxed);
    if (active)
        *active = on;
    return MEMRA_OK;
}

memra_status memra_launch(memra_engine *eng, const char *fn, CUfunction f, unsigned grid,
                          unsigned block, void *args, size_t size, CUstream s)
{
    const memra_driver *d = eng->d;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, args, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    CUresult r;
    const char *call;
    if (atomic_load_explicit(&eng->pdl, memory_order_relaxed)) {
        CUlaunchAttribute attr;
        memset(&attr, 0, sizeof attr);
        attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        CUlaunchConfig cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.gridDimX = grid, cfg.gridDimY = 1, cfg.gridDimZ = 1;
        cfg.blockDimX = block, cfg.blockDimY = 1, cfg.blockDimZ = 1;
        cfg.hStream = s;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        r = d->cuLaunchKernelEx(&cfg, f, NULL, extra);
        call = "cuLaunchKernelEx";
    } else {
        r = d->cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, s, NULL, extra);
        call = "cuLaunchKernel";
    }
    if (r != CUDA_SUCCESS)
        return memra_cu_fail(d, r, MEMRA_ERR_DRIVER, fn, call);
    return MEMRA_OK;
}
