/* The one seam between memra and CUDA: every cu* and nvrtc* entry point that
 * memra uses is listed once below and reached through a table of function
 * pointers. libcuda and NVRTC are dlopen()ed at first need, so libmemra loads
 * on a machine with neither; host tests install a mock table instead. */
#ifndef MEMRA_DRIVER_H
#define MEMRA_DRIVER_H

#include <string.h>

/* memra's own declarations of the driver and NVRTC ABI it uses, never the
 * toolkit's headers: the library builds without a toolkit, and against the
 * same declarations everywhere (tests/cuda_abi_check.c holds them against
 * a toolkit's). */
#include "cuda_abi.h"

#include <memra/memra.h>

/* X(name, cuda_version, required): resolved with cuGetProcAddress(name,
 * cuda_version) and typed PFN_name_v<cuda_version>, which pins the ABI (the
 * versioned _v2 symbols) to the version asked for. Optional entries may be
 * NULL on an older driver: cuCtxGetId (12.0) detects a reset context and
 * cuStreamGetId (12.0) tells streams apart where they exist; cuLaunchKernelEx
 * (11.6) launches with programmatic dependent launch where asked
 * (launch.c); the others only tests and the benchmark use. */
#define MEMRA_CU_ENTRY_POINTS(X)                                                                   \
    X(cuInit, 2000, 1)                                                                             \
    X(cuDriverGetVersion, 2020, 1)                                                                 \
    X(cuDeviceGetCount, 2000, 1)                                                                   \
    X(cuDeviceGet, 2000, 1)                                                                        \
    X(cuDeviceGetName, 2000, 1)                                                                    \
    X(cuDeviceGetAttribute, 2000, 1)                                                               \
    X(cuDevicePrimaryCtxRetain, 7000, 1)                                                           \
    X(cuDevicePrimaryCtxRelease, 11000, 1)                                                         \
    X(cuCtxGetCurrent, 4000, 1)                                                                    \
    X(cuCtxPushCurrent, 4000, 1)                                                                   \
    X(cuCtxPopCurrent, 4000, 1)                                                                    \
    X(cuStreamCreate, 2000, 1)                                                                     \
    X(cuStreamDestroy, 4000, 1)                                                                    \
    X(cuStreamSynchronize, 2000, 1)                                                                \
    X(cuStreamIsCapturing, 10000, 1)                                                               \
    X(cuStreamWaitEvent, 3020, 1)                                                                  \
    X(cuThreadExchangeStreamCaptureMode, 10010, 1)                                                 \
    X(cuEventCreate, 2000, 1)                                                                      \
    X(cuEventRecord, 2000, 1)                                                                      \
    X(cuEventQuery, 2000, 1)                                                                       \
    X(cuEventSynchronize, 2000, 1)                                                                 \
    X(cuEventDestroy, 4000, 1)                                                                     \
    X(cuMemAllocHost, 3020, 1)                                                                     \
    X(cuMemFreeHost, 2000, 1)                                                                      \
    X(cuMemAlloc, 3020, 1)                                                                         \
    X(cuMemFree, 3020, 1)                                                                          \
    X(cuMemcpyHtoDAsync, 3020, 1)                                                                  \
    X(cuMemcpyDtoHAsync, 3020, 1)                                                                  \
    X(cuMemsetD32Async, 3020, 1)                                                                   \
    X(cuModuleLoadData, 2000, 1)                                                                   \
    X(cuModuleUnload, 2000, 1)                                                                     \
    X(cuModuleGetFunction, 2000, 1)                                                                \
    X(cuLaunchKernel, 4000, 1)                                                                     \
    X(cuGetErrorName, 6000, 1)                                                                     \
    X(cuGetErrorString, 6000, 1)                                                                   \
    X(cuCtxSynchronize, 2000, 0)                                                                   \
    X(cuMemcpyDtoDAsync, 3020, 0)                                                                  \
    X(cuStreamBeginCapture, 10010, 0)                                                              \
    X(cuStreamEndCapture, 10000, 0)                                                                \
    X(cuGraphInstantiateWithFlags, 11040, 0)                                                       \
    X(cuGraphLaunch, 10000, 0)                                                                     \
    X(cuGraphDestroy, 10000, 0)                                                                    \
    X(cuGraphExecDestroy, 10000, 0)                                                                \
    X(cuEventElapsedTime, 2000, 0)                                                                 \
    X(cuFuncGetParamInfo, 12040, 0)                                                                \
    X(cuCtxGetId, 12000, 0)                                                                        \
    X(cuStreamGetId, 12000, 0)                                                                     \
    X(cuLaunchKernelEx, 11060, 0)                                                                  \
    X(cuDevicePrimaryCtxReset, 11000, 0)

/* X(name): resolved with dlsym from the NVRTC library. */
#define MEMRA_NVRTC_ENTRY_POINTS(X)                                                                \
    X(nvrtcVersion)                                                                                \
    X(nvrtcGetErrorString)                                                                         \
    X(nvrtcGetNumSupportedArchs)                                                                   \
    X(nvrtcGetSupportedArchs)                                                                      \
    X(nvrtcCreateProgram)                                                                          \
    X(nvrtcDestroyProgram)                                                                         \
    X(nvrtcCompileProgram)                                                                         \
    X(nvrtcGetProgramLogSize)                                                                      \
    X(nvrtcGetProgramLog)                                                                          \
    X(nvrtcGetPTXSize)                                                                             \
    X(nvrtcGetPTX)                                                                                 \
    X(nvrtcGetCUBINSize)                                                                           \
    X(nvrtcGetCUBIN)

/* One NVRTC library that memra found: how, what it is, and its entry
 * points. Several may be loaded side by side (RTLD_LOCAL); each engine
 * chooses the one that suits its device and the driver (jit.c). */
typedef struct memra_nvrtc {
    char path[512];      /* the file opened, or the soname looked up on the loader path */
    const char *origin;  /* how it was found, e.g. "MEMRA_NVRTC_PATH" */
    memra_status status; /* MEMRA_OK when it loaded and every entry point resolved */
    char why[256];       /* otherwise why not */
    int major, minor;    /* nvrtcVersion */
    int archs[128];      /* nvrtcGetSupportedArchs: the XY of sm_XY, ascending */
    int n_archs;
#define MEMRA_X(name) __typeof__(&name) name;
    MEMRA_NVRTC_ENTRY_POINTS(MEMRA_X)
#undef MEMRA_X
} memra_nvrtc;

/* CUDA's version code, the driver's own form (12080 for 12.8). Only for a
 * version MEMRA_NVRTC_VERSION_OK passes: one outside [1, 999].[0, 99] is no
 * release (its code would not fit an int). describe() refuses an NVRTC that
 * reports one, and memra_jit_target a cache entry that says one built it. */
#define MEMRA_NVRTC_VERSION_OK(major, minor)                                                       \
    ((major) >= 1 && (major) <= 999 && (minor) >= 0 && (minor) <= 99)
#define MEMRA_CUDA_VERSION_CODE(major, minor) ((major)*1000 + (minor)*10)

typedef struct memra_driver {
    /* MEMRA_OK when libcuda loaded and cuInit ran; else why not. */
    memra_status cuda_status;
    char cuda_error[512];
    int no_device; /* cuInit found no device (CUDA_VISIBLE_DEVICES=""): the count is 0 */
    /* A test table lists its NVRTC candidates here (n_nvrtc may be 0: none
     * at all); NULL means "discover them" (nvrtc_find.c), as the real table does. */
    const memra_nvrtc *nvrtc;
    int n_nvrtc;

#define MEMRA_X(name, ver, req) PFN_##name##_v##ver name;
    MEMRA_CU_ENTRY_POINTS(MEMRA_X)
#undef MEMRA_X
} memra_driver;

/* The active table: the mock if one is installed, else the real one, loaded
 * once (libcuda is tried once per process; handles are never closed).
 * Never NULL. */
const memra_driver *memra_driver_get(void);

/* The active table if libcuda is usable, else MEMRA_ERR_NO_DRIVER and a
 * message naming `fn`. */
memra_status memra_driver_cuda(const char *fn, const memra_driver **out);

/* Turns a failed CUresult into `status` with a message naming the call and
 * the driver's own name and description of the error. */
memra_status memra_cu_fail(const memra_driver *d, CUresult r, memra_status status, const char *fn,
                           const char *call);

/* ISO C has no cast from void * to a function pointer; POSIX guarantees the
 * representation is the same, so copy the bytes (dlsym's result into a
 * typed slot). */
#define memra_set_fn(slot, sym)                                                                    \
    do {                                                                                           \
        void *sym_ = (sym);                                                                        \
        memcpy((slot), &sym_, sizeof sym_);                                                        \
    } while (0)

/* The test seam: install a table (NULL restores the real one). Not exported. */
void memra_driver_install(const memra_driver *table);

#endif /* MEMRA_DRIVER_H */
