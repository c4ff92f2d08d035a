/* The mock driver: Devices and the primary context. */
#include "mock_internal.h"

/* ---- device, context -------------------------------------------------------- */

CUresult m_cuInit(unsigned f)
{
    (void)f;
    ENTER_CU(cuInit);
    return CUDA_SUCCESS;
}
CUresult m_cuDriverGetVersion(int *v)
{
    ENTER_CU(cuDriverGetVersion);
    *v = mock.driver_version;
    return CUDA_SUCCESS;
}
CUresult m_cuDeviceGetCount(int *n)
{
    ENTER_CU(cuDeviceGetCount);
    *n = mock.n_devices;
    return mock.n_devices ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}
CUresult m_cuDeviceGet(CUdevice *d, int o)
{
    ENTER_CU(cuDeviceGet);
    if (o < 0 || o >= mock.n_devices)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = o;
    return CUDA_SUCCESS;
}
CUresult m_cuDeviceGetName(char *s, int len, CUdevice d)
{
    ENTER_CU(cuDeviceGetName);
    snprintf(s, (size_t)len, "Mock GPU %d", d);
    return CUDA_SUCCESS;
}
CUresult m_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    (void)d;
    ENTER_CU(cuDeviceGetAttribute);
    *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? mock.sm_major : mock.sm_minor;
    return CUDA_SUCCESS;
}
CUresult m_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    ENTER_CU(cuDevicePrimaryCtxRetain);
    *c = (CUcontext)&fake_ctx[d];
    mock.ctx_refs++;
    return CUDA_SUCCESS;
}
/* Release calls release even when told to fail, as a driver does when it
 * reports an error from a teardown: the failure must still reach the caller,
 * but the sweep's leak accounting stays about memra's own code. */
CUresult released(int idx)
{
    return failing(idx) ? (CUresult)mock.fail_result : CUDA_SUCCESS;
}

CUresult m_cuDevicePrimaryCtxRelease(CUdevice d)
{
    (void)d;
    mock.ctx_refs--;
    return released(MOCK_cuDevicePrimaryCtxRelease);
}
CUresult m_cuCtxGetId(CUcontext c, unsigned long long *id)
{
    ENTER_CU(cuCtxGetId);
    *id = ctx_id[(int *)c - fake_ctx];
    return CUDA_SUCCESS;
}
CUresult m_cuDevicePrimaryCtxReset(CUdevice d)
{
    ENTER_CU(cuDevicePrimaryCtxReset);
    mock_reset_primary_ctx(d);
    return CUDA_SUCCESS;
}

_Thread_local CUcontext ctx_stack[16];
_Thread_local int ctx_depth;
CUresult m_cuCtxGetCurrent(CUcontext *c)
{
    ENTER_CU(cuCtxGetCurrent);
    *c = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
    return CUDA_SUCCESS;
}
CUresult m_cuCtxPushCurrent(CUcontext c)
{
    ENTER_CU(cuCtxPushCurrent);
    assert_true(ctx_depth < 16);
    ctx_stack[ctx_depth++] = c;
    return CUDA_SUCCESS;
}
CUresult m_cuCtxPopCurrent(CUcontext *c)
{
    ENTER_CU(cuCtxPopCurrent);
    assert_true(ctx_depth > 0);
    *c = ctx_stack[--ctx_depth];
    return CUDA_SUCCESS;
}
CUresult ctx_sync(void)
{
    CUresult r = unsafe_call();
    if (r == CUDA_SUCCESS)
        drain_all();
    return r;
}
CUresult m_cuCtxSynchronize(void)
{
    ENTER_CU(cuCtxSynchronize);
    LOCKED(ctx_sync());
}
