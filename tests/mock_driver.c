#include "mock_driver.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "kernel_on_host.h"
#include "vrows_abi.h"

mock_state mock;
memra_driver mock_table;

typedef struct fake_stream {
    int capturing;
} fake_stream;

static int fake_ctx[8];
static _Thread_local CUcontext ctx_stack[16];
static _Thread_local int ctx_depth;
static int fake_module, fake_function;
static _Atomic int any_capturing;
/* Launches run one at a time: the host shim's atomics are plain
 * read-modify-writes, and mock.last is one record. */
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;

/* Counts the call and says whether it is the one chosen to fail. */
static int failing(int idx)
{
    int n = ++mock.calls[idx];
    return mock.fail_result && mock.fail_call == idx && mock.fail_nth == n;
}
#define ENTER_CU(name)                                                                             \
    do {                                                                                           \
        if (failing(MOCK_##name))                                                                  \
            return (CUresult)mock.fail_result;                                                     \
    } while (0)
#define ENTER_NV(name)                                                                             \
    do {                                                                                           \
        if (failing(MOCK_##name))                                                                  \
            return (nvrtcResult)mock.fail_result;                                                  \
    } while (0)

static void note_capture_violation(void)
{
    if (any_capturing)
        mock.capture_violations++;
}

static CUresult m_cuInit(unsigned f)
{
    (void)f;
    ENTER_CU(cuInit);
    return CUDA_SUCCESS;
}
static CUresult m_cuDriverGetVersion(int *v)
{
    ENTER_CU(cuDriverGetVersion);
    *v = 13000;
    return CUDA_SUCCESS;
}
static CUresult m_cuDeviceGetCount(int *n)
{
    ENTER_CU(cuDeviceGetCount);
    *n = mock.n_devices;
    return mock.n_devices ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}
static CUresult m_cuDeviceGet(CUdevice *d, int o)
{
    ENTER_CU(cuDeviceGet);
    if (o < 0 || o >= mock.n_devices)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = o;
    return CUDA_SUCCESS;
}
static CUresult m_cuDeviceGetName(char *s, int len, CUdevice d)
{
    ENTER_CU(cuDeviceGetName);
    snprintf(s, (size_t)len, "Mock GPU %d", d);
    return CUDA_SUCCESS;
}
static CUresult m_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    (void)d;
    ENTER_CU(cuDeviceGetAttribute);
    *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? mock.sm_major : mock.sm_minor;
    return CUDA_SUCCESS;
}
static CUresult m_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    ENTER_CU(cuDevicePrimaryCtxRetain);
    *c = (CUcontext)&fake_ctx[d];
    mock.ctx_refs++;
    return CUDA_SUCCESS;
}
/* Release calls release even when told to fail, as a driver does when it
 * reports an error from a teardown: the failure must still reach the caller,
 * but the sweep's leak accounting stays about memra's own code. */
static CUresult released(int idx)
{
    return failing(idx) ? (CUresult)mock.fail_result : CUDA_SUCCESS;
}

static CUresult m_cuDevicePrimaryCtxRelease(CUdevice d)
{
    (void)d;
    mock.ctx_refs--;
    return released(MOCK_cuDevicePrimaryCtxRelease);
}
static CUresult m_cuCtxGetCurrent(CUcontext *c)
{
    ENTER_CU(cuCtxGetCurrent);
    *c = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
    return CUDA_SUCCESS;
}
static CUresult m_cuCtxPushCurrent(CUcontext c)
{
    ENTER_CU(cuCtxPushCurrent);
    assert_true(ctx_depth < 16);
    ctx_stack[ctx_depth++] = c;
    return CUDA_SUCCESS;
}
static CUresult m_cuCtxPopCurrent(CUcontext *c)
{
    ENTER_CU(cuCtxPopCurrent);
    assert_true(ctx_depth > 0);
    *c = ctx_stack[--ctx_depth];
    return CUDA_SUCCESS;
}
static CUresult m_cuStreamCreate(CUstream *s, unsigned flags)
{
    (void)flags;
    ENTER_CU(cuStreamCreate);
    *s = (CUstream)calloc(1, sizeof(fake_stream));
    mock.streams_live++;
    return CUDA_SUCCESS;
}
static CUresult m_cuStreamDestroy(CUstream s)
{
    free(s);
    mock.streams_live--;
    return released(MOCK_cuStreamDestroy);
}
static CUresult m_cuStreamSynchronize(CUstream s)
{
    (void)s;
    note_capture_violation();
    ENTER_CU(cuStreamSynchronize);
    return CUDA_SUCCESS;
}
static CUresult m_cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st)
{
    ENTER_CU(cuStreamIsCapturing);
    *st = s && ((fake_stream *)s)->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                             : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
static CUresult m_cuMemAlloc(CUdeviceptr *p, size_t n)
{
    note_capture_violation();
    ENTER_CU(cuMemAlloc);
    void *m = aligned_alloc(256, (n + 255) / 256 * 256);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(m, 0xEE, (n + 255) / 256 * 256);
    *p = (CUdeviceptr)(uintptr_t)m;
    mock.live_allocs++;
    return CUDA_SUCCESS;
}
static CUresult m_cuMemFree(CUdeviceptr p)
{
    note_capture_violation();
    free((void *)(uintptr_t)p);
    mock.live_allocs--;
    return released(MOCK_cuMemFree);
}
static CUresult m_cuMemcpyHtoDAsync(CUdeviceptr d, const void *h, size_t n, CUstream s)
{
    (void)s;
    note_capture_violation();
    ENTER_CU(cuMemcpyHtoDAsync);
    pthread_mutex_lock(&launch_lock);
    memcpy((void *)(uintptr_t)d, h, n);
    pthread_mutex_unlock(&launch_lock);
    return CUDA_SUCCESS;
}
static CUresult m_cuMemcpyDtoHAsync(void *h, CUdeviceptr d, size_t n, CUstream s)
{
    (void)s;
    note_capture_violation();
    ENTER_CU(cuMemcpyDtoHAsync);
    pthread_mutex_lock(&launch_lock);
    memcpy(h, (void *)(uintptr_t)d, n);
    pthread_mutex_unlock(&launch_lock);
    return CUDA_SUCCESS;
}
static CUresult m_cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream s)
{
    (void)s;
    note_capture_violation();
    ENTER_CU(cuMemsetD32Async);
    for (size_t i = 0; i < n; i++)
        memcpy((char *)(uintptr_t)d + 4 * i, &v, 4);
    return CUDA_SUCCESS;
}
static CUresult m_cuModuleLoadData(CUmodule *m, const void *img)
{
    ENTER_CU(cuModuleLoadData);
    if (memcmp(img, "MOCKIMG", 7) != 0)
        return CUDA_ERROR_INVALID_IMAGE;
    *m = (CUmodule)&fake_module;
    mock.modules_live++;
    return CUDA_SUCCESS;
}
static CUresult m_cuModuleUnload(CUmodule m)
{
    (void)m;
    mock.modules_live--;
    return released(MOCK_cuModuleUnload);
}
static CUresult m_cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    (void)m;
    ENTER_CU(cuModuleGetFunction);
    if (strcmp(name, MEMRA_VROWS_KERNEL) != 0)
        return CUDA_ERROR_NOT_FOUND;
    *f = (CUfunction)&fake_function;
    return CUDA_SUCCESS;
}

static void execute(const mock_launch *l)
{
    host_dim3 g = {l->grid[0], l->grid[1], l->grid[2]}, b = {l->block[0], l->block[1], l->block[2]};
    run_vrows_on_host(l->args, g, b);
}

static CUresult m_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned shmem, CUstream s,
                                 void **params, void **extra)
{
    ENTER_CU(cuLaunchKernel);
    assert_ptr_equal(f, &fake_function);
    assert_null(params);
    assert_non_null(extra);
    /* The parameter block must be exactly the kernel's: a narrowed field
     * changes its size. */
    void *buf = NULL;
    size_t *size = NULL;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
            size = extra[i + 1];
        else
            fail_msg("unknown launch extra key %p", extra[i]);
    }
    assert_non_null(buf);
    assert_non_null(size);
    assert_int_equal(*size, 120);
    assert_int_equal(gy, 1);
    assert_int_equal(gz, 1);
    assert_int_equal(by, 1);
    assert_int_equal(bz, 1);
    assert_int_equal(shmem, 0);
    mock_launch l = {{gx, gy, gz}, {bx, by, bz}, {0}, *size, s};
    memcpy(l.args, buf, 120);
    pthread_mutex_lock(&launch_lock);
    mock.last = l;
    mock.launches++;
    if (s && ((fake_stream *)s)->capturing) {
        assert_true(mock.n_captured < MOCK_MAX_CAPTURED);
        mock.captured[mock.n_captured++] = l;
    } else {
        execute(&l);
    }
    pthread_mutex_unlock(&launch_lock);
    return CUDA_SUCCESS;
}
static CUresult m_cuGetErrorName(CUresult r, const char **s)
{
    switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY:
        *s = "CUDA_ERROR_OUT_OF_MEMORY";
        break;
    case CUDA_ERROR_INVALID_IMAGE:
        *s = "CUDA_ERROR_INVALID_IMAGE";
        break;
    case CUDA_ERROR_LAUNCH_FAILED:
        *s = "CUDA_ERROR_LAUNCH_FAILED";
        break;
    default:
        *s = "CUDA_ERROR_MOCK";
        break;
    }
    return CUDA_SUCCESS;
}
static CUresult m_cuGetErrorString(CUresult r, const char **s)
{
    (void)r;
    *s = "mock driver error";
    return CUDA_SUCCESS;
}

/* ---- NVRTC ---- */

static nvrtcResult m_nvrtcVersion(int *maj, int *min)
{
    ENTER_NV(nvrtcVersion);
    *maj = 13;
    *min = 0;
    return NVRTC_SUCCESS;
}
static const char *m_nvrtcGetErrorString(nvrtcResult r)
{
    return r == NVRTC_ERROR_COMPILATION ? "NVRTC_ERROR_COMPILATION" : "NVRTC_ERROR_MOCK";
}
static nvrtcResult m_nvrtcGetNumSupportedArchs(int *n)
{
    ENTER_NV(nvrtcGetNumSupportedArchs);
    *n = mock.n_archs;
    return NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcGetSupportedArchs(int *a)
{
    ENTER_NV(nvrtcGetSupportedArchs);
    memcpy(a, mock.archs, sizeof(int) * (size_t)mock.n_archs);
    return NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcCreateProgram(nvrtcProgram *p, const char *src, const char *name, int nh,
                                        const char *const *h, const char *const *hn)
{
    (void)name, (void)nh, (void)h, (void)hn;
    ENTER_NV(nvrtcCreateProgram);
    assert_non_null(strstr(src, "memra_vrows_tables"));
    /* Heap-allocated so that a program the library never destroys is a leak
     * that AddressSanitizer and valgrind report. */
    *p = (nvrtcProgram)calloc(1, 1);
    return NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcDestroyProgram(nvrtcProgram *p)
{
    free(*p);
    *p = NULL;
    return failing(MOCK_nvrtcDestroyProgram) ? (nvrtcResult)mock.fail_result : NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcCompileProgram(nvrtcProgram p, int n, const char *const *opts)
{
    (void)p;
    ENTER_NV(nvrtcCompileProgram);
    pthread_mutex_lock(&launch_lock); /* engines compile concurrently */
    mock.options[0] = 0;
    for (int i = 0; i < n; i++) {
        strncat(mock.options, opts[i], sizeof mock.options - strlen(mock.options) - 2);
        strcat(mock.options, " ");
    }
    pthread_mutex_unlock(&launch_lock);
    if (mock.compile_delay_ms)
        usleep((useconds_t)mock.compile_delay_ms * 1000);
    if (mock.compile_log)
        return NVRTC_ERROR_COMPILATION;
    return NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcGetProgramLogSize(nvrtcProgram p, size_t *n)
{
    (void)p;
    ENTER_NV(nvrtcGetProgramLogSize);
    *n = mock.compile_log ? strlen(mock.compile_log) + 1 : 1;
    return NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcGetProgramLog(nvrtcProgram p, char *log)
{
    (void)p;
    ENTER_NV(nvrtcGetProgramLog);
    strcpy(log, mock.compile_log ? mock.compile_log : "");
    return NVRTC_SUCCESS;
}
static const char cubin_img[] = "MOCKIMG-CUBIN";
static const char ptx_img[] = "MOCKIMG-PTX";
static nvrtcResult m_nvrtcGetPTXSize(nvrtcProgram p, size_t *n)
{
    (void)p;
    ENTER_NV(nvrtcGetPTXSize);
    *n = sizeof ptx_img;
    return NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcGetPTX(nvrtcProgram p, char *out)
{
    (void)p;
    ENTER_NV(nvrtcGetPTX);
    memcpy(out, ptx_img, sizeof ptx_img);
    return NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcGetCUBINSize(nvrtcProgram p, size_t *n)
{
    (void)p;
    ENTER_NV(nvrtcGetCUBINSize);
    *n = sizeof cubin_img;
    return NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcGetCUBIN(nvrtcProgram p, char *out)
{
    (void)p;
    ENTER_NV(nvrtcGetCUBIN);
    memcpy(out, cubin_img, sizeof cubin_img);
    return NVRTC_SUCCESS;
}

void mock_set_capturing(CUstream s, int on)
{
    ((fake_stream *)s)->capturing = on;
    any_capturing = on;
}

void mock_replay(void)
{
    for (int i = 0; i < mock.n_captured; i++)
        execute(&mock.captured[i]);
}

void mock_install(void)
{
    /* Mock images must never reach a real kernel cache. Cache tests point
     * MEMRA_CACHE_DIR at their own folders after this. */
    setenv("MEMRA_CACHE_DIR", "off", 1);
    memset(&mock, 0, sizeof mock);
    memset(&mock_table, 0, sizeof mock_table);
    any_capturing = 0;
    ctx_depth = 0;
    mock.n_devices = 1;
    mock.sm_major = 9;
    mock.sm_minor = 0;
    static const int archs[] = {75, 80, 86, 89, 90, 100, 120};
    mock.n_archs = (int)(sizeof archs / sizeof archs[0]);
    memcpy(mock.archs, archs, sizeof archs);

    memra_driver *d = &mock_table;
    d->cuda_status = MEMRA_OK;
    d->nvrtc_status = MEMRA_OK;
    snprintf(d->nvrtc_path, sizeof d->nvrtc_path, "mock");
#define SET(name) d->name = m_##name;
    /* clang-format off */
    SET(cuInit)
    SET(cuDriverGetVersion)
    SET(cuDeviceGetCount)
    SET(cuDeviceGet)
    SET(cuDeviceGetName)
    SET(cuDeviceGetAttribute)
    SET(cuDevicePrimaryCtxRetain)
    SET(cuDevicePrimaryCtxRelease)
    SET(cuCtxGetCurrent)
    SET(cuCtxPushCurrent)
    SET(cuCtxPopCurrent)
    SET(cuStreamCreate)
    SET(cuStreamDestroy)
    SET(cuStreamSynchronize)
    SET(cuStreamIsCapturing)
    SET(cuMemAlloc)
    SET(cuMemFree)
    SET(cuMemcpyHtoDAsync)
    SET(cuMemcpyDtoHAsync)
    SET(cuMemsetD32Async)
    SET(cuModuleLoadData)
    SET(cuModuleUnload)
    SET(cuModuleGetFunction)
    SET(cuLaunchKernel)
    SET(cuGetErrorName)
    SET(cuGetErrorString)
    SET(nvrtcVersion)
    SET(nvrtcGetErrorString)
    SET(nvrtcGetNumSupportedArchs)
    SET(nvrtcGetSupportedArchs)
    SET(nvrtcCreateProgram)
    SET(nvrtcDestroyProgram)
    SET(nvrtcCompileProgram)
    SET(nvrtcGetProgramLogSize)
    SET(nvrtcGetProgramLog)
    SET(nvrtcGetPTXSize)
    SET(nvrtcGetPTX)
    SET(nvrtcGetCUBINSize)
    SET(nvrtcGetCUBIN)
    /* clang-format on */
#undef SET
    memra_driver_install(d);
}

void mock_uninstall(void)
{
    memra_driver_install(NULL);
}
