/* The part of the CUDA driver API and NVRTC that memra uses, declared here
 * so that memra builds without a CUDA toolkit (pip install . on a machine
 * with a compiler and nothing else): types, the values memra passes or
 * compares, and the function types of exactly the entry points it resolves
 * at run time (MEMRA_CU_ENTRY_POINTS and MEMRA_NVRTC_ENTRY_POINTS in
 * driver.h, and cuGetProcAddress). Nothing is linked: libcuda and NVRTC are
 * dlopen()ed.
 *
 * Written for memra from NVIDIA's documented driver ABI (the CUDA Driver
 * API and NVRTC reference manuals), not copied from the toolkit's headers,
 * which come under NVIDIA's license, not memra's. The names are CUDA's so
 * that the code reads as CUDA code. The ABI is stable by NVIDIA's promise:
 * a versioned entry point (cuMemAlloc at 3020, ...) keeps its signature for
 * ever, and enum values are never renumbered.
 *
 * tests/cuda_abi_check.c holds this file against the toolkit's headers
 * where a toolkit is installed: sections 1 and 3 are declared again after
 * cuda.h, cudaTypedefs.h and nvrtc.h (C11 refuses a typedef that is not the
 * same type, and a prototype that is not compatible), and every value,
 * size, alignment and field offset of section 2 is printed by a program
 * built once against this file and once against the toolkit, the two
 * outputs compared (tests/cuda_abi_values.py reads section 2 to write that
 * program, so nothing added here escapes the check). LP64 Linux only, as
 * memra is. */
#ifndef MEMRA_CUDA_ABI_H
#define MEMRA_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

/* ---- 1. scalars and handles ------------------------------------------- */

#ifndef CUDAAPI
#define CUDAAPI
#endif

typedef uint64_t cuuint64_t;
typedef int CUdevice;                   /* an ordinal */
typedef unsigned long long CUdeviceptr; /* a device address */
typedef struct CUctx_st *CUcontext;     /* opaque handles, by the driver's tags */
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct _nvrtcProgram *nvrtcProgram;

#ifndef MEMRA_CUDA_ABI_CHECK
/* ---- 2. values and structs (section-2-begin) -------------------------- */

typedef enum memra_cu_result {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
    CUDA_ERROR_ILLEGAL_STATE = 401,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
    CUDA_ERROR_STREAM_CAPTURE_ISOLATION = 905,
    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
    /* The largest value the driver returns: sizes the enum as the
     * driver's (int), whatever else is listed. */
    CUDA_ERROR_UNKNOWN = 999
} CUresult;

typedef enum memra_cu_device_attribute {
    CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
} CUdevice_attribute;

typedef enum memra_cu_stream_flags {
    CU_STREAM_DEFAULT = 0,
    CU_STREAM_NON_BLOCKING = 1
} CUstream_flags;

/* The legacy default stream and the per-thread one, by their handles. */
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

typedef enum memra_cu_event_flags {
    CU_EVENT_DEFAULT = 0,
    CU_EVENT_DISABLE_TIMING = 2
} CUevent_flags;

typedef enum memra_cu_event_wait_flags {
    CU_EVENT_WAIT_DEFAULT = 0,
    CU_EVENT_WAIT_EXTERNAL = 1
} CUevent_wait_flags;

typedef enum memra_cu_capture_status {
    CU_STREAM_CAPTURE_STATUS_NONE = 0,
    CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
    CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
} CUstreamCaptureStatus;

typedef enum memra_cu_capture_mode {
    CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CU_STREAM_CAPTURE_MODE_RELAXED = 2
} CUstreamCaptureMode;

typedef enum memra_cu_proc_flags { CU_GET_PROC_ADDRESS_DEFAULT = 0 } CUdriverProcAddress_flags;

typedef enum memra_cu_proc_result {
    CU_GET_PROC_ADDRESS_SUCCESS = 0,
    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
    CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
} CUdriverProcAddressQueryResult;

/* cuLaunchKernel's `extra`: the parameters as one buffer. */
#define CU_LAUNCH_PARAM_END ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)

/* cuLaunchKernelEx, for programmatic dependent launch (launch.c). Of the
 * attribute value union only the member memra sets is named; the union
 * keeps the driver's size (64 bytes) and alignment (it holds pointers). */
typedef enum memra_cu_launch_attribute_id {
    CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
} CUlaunchAttributeID;

typedef union memra_cu_launch_attribute_value {
    _Alignas(void *) char pad[64];
    int programmaticStreamSerializationAllowed;
} CUlaunchAttributeValue;

typedef struct memra_cu_launch_attribute {
    CUlaunchAttributeID id;
    char pad[8 - sizeof(CUlaunchAttributeID)];
    CUlaunchAttributeValue value;
} CUlaunchAttribute;

typedef struct memra_cu_launch_config {
    unsigned int gridDimX;
    unsigned int gridDimY;
    unsigned int gridDimZ;
    unsigned int blockDimX;
    unsigned int blockDimY;
    unsigned int blockDimZ;
    unsigned int sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned int numAttrs;
} CUlaunchConfig;

typedef enum memra_nvrtc_result {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1,
    NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
    NVRTC_ERROR_INVALID_INPUT = 3,
    NVRTC_ERROR_INVALID_PROGRAM = 4,
    NVRTC_ERROR_INVALID_OPTION = 5,
    NVRTC_ERROR_COMPILATION = 6,
    NVRTC_ERROR_INTERNAL_ERROR = 11
} nvrtcResult;

/* (section-2-end) */
#endif /* MEMRA_CUDA_ABI_CHECK */

/* ---- 3. function types ------------------------------------------------ *
 * PFN_<name>_v<version>: the entry point cuGetProcAddress(name, version)
 * returns, as the driver defines it at that version. */
typedef CUresult(CUDAAPI *PFN_cuGetProcAddress_v11030)(const char *symbol, void **pfn,
                                                       int driverVersion, cuuint64_t flags);
typedef CUresult(CUDAAPI *PFN_cuGetProcAddress_v12000)(
    const char *symbol, void **pfn, int driverVersion, cuuint64_t flags,
    CUdriverProcAddressQueryResult *symbolStatus);
typedef CUresult(CUDAAPI *PFN_cuInit_v2000)(unsigned int flags);
typedef CUresult(CUDAAPI *PFN_cuDriverGetVersion_v2020)(int *version);
typedef CUresult(CUDAAPI *PFN_cuDeviceGetCount_v2000)(int *count);
typedef CUresult(CUDAAPI *PFN_cuDeviceGet_v2000)(CUdevice *device, int ordinal);
typedef CUresult(CUDAAPI *PFN_cuDeviceGetName_v2000)(char *name, int len, CUdevice dev);
typedef CUresult(CUDAAPI *PFN_cuDeviceGetAttribute_v2000)(int *value, CUdevice_attribute attrib,
                                                          CUdevice dev);
typedef CUresult(CUDAAPI *PFN_cuDevicePrimaryCtxRetain_v7000)(CUcontext *ctx, CUdevice dev);
typedef CUresult(CUDAAPI *PFN_cuDevicePrimaryCtxRelease_v11000)(CUdevice dev);
typedef CUresult(CUDAAPI *PFN_cuDevicePrimaryCtxReset_v11000)(CUdevice dev);
typedef CUresult(CUDAAPI *PFN_cuCtxGetCurrent_v4000)(CUcontext *ctx);
typedef CUresult(CUDAAPI *PFN_cuCtxPushCurrent_v4000)(CUcontext ctx);
typedef CUresult(CUDAAPI *PFN_cuCtxPopCurrent_v4000)(CUcontext *ctx);
typedef CUresult(CUDAAPI *PFN_cuCtxSynchronize_v2000)(void);
typedef CUresult(CUDAAPI *PFN_cuCtxGetId_v12000)(CUcontext ctx, unsigned long long *id);
typedef CUresult(CUDAAPI *PFN_cuStreamCreate_v2000)(CUstream *stream, unsigned int flags);
typedef CUresult(CUDAAPI *PFN_cuStreamDestroy_v4000)(CUstream stream);
typedef CUresult(CUDAAPI *PFN_cuStreamSynchronize_v2000)(CUstream stream);
typedef CUresult(CUDAAPI *PFN_cuStreamIsCapturing_v10000)(CUstream stream,
                                                          CUstreamCaptureStatus *status);
typedef CUresult(CUDAAPI *PFN_cuStreamWaitEvent_v3020)(CUstream stream, CUevent event,
                                                       unsigned int flags);
typedef CUresult(CUDAAPI *PFN_cuStreamBeginCapture_v10010)(CUstream stream,
                                                           CUstreamCaptureMode mode);
typedef CUresult(CUDAAPI *PFN_cuStreamEndCapture_v10000)(CUstream stream, CUgraph *graph);
typedef CUresult(CUDAAPI *PFN_cuStreamGetId_v12000)(CUstream stream, unsigned long long *id);
typedef CUresult(CUDAAPI *PFN_cuThreadExchangeStreamCaptureMode_v10010)(CUstreamCaptureMode *mode);
typedef CUresult(CUDAAPI *PFN_cuEventCreate_v2000)(CUevent *event, unsigned int flags);
typedef CUresult(CUDAAPI *PFN_cuEventRecord_v2000)(CUevent event, CUstream stream);
typedef CUresult(CUDAAPI *PFN_cuEventQuery_v2000)(CUevent event);
typedef CUresult(CUDAAPI *PFN_cuEventSynchronize_v2000)(CUevent event);
typedef CUresult(CUDAAPI *PFN_cuEventElapsedTime_v2000)(float *ms, CUevent start, CUevent end);
typedef CUresult(CUDAAPI *PFN_cuEventDestroy_v4000)(CUevent event);
typedef CUresult(CUDAAPI *PFN_cuMemAllocHost_v3020)(void **p, size_t bytes);
typedef CUresult(CUDAAPI *PFN_cuMemFreeHost_v2000)(void *p);
typedef CUresult(CUDAAPI *PFN_cuMemAlloc_v3020)(CUdeviceptr *dptr, size_t bytes);
typedef CUresult(CUDAAPI *PFN_cuMemFree_v3020)(CUdeviceptr dptr);
typedef CUresult(CUDAAPI *PFN_cuMemcpyHtoDAsync_v3020)(CUdeviceptr dst, const void *src,
                                                       size_t bytes, CUstream stream);
typedef CUresult(CUDAAPI *PFN_cuMemcpyDtoHAsync_v3020)(void *dst, CUdeviceptr src, size_t bytes,
                                                       CUstream stream);
typedef CUresult(CUDAAPI *PFN_cuMemcpyDtoDAsync_v3020)(CUdeviceptr dst, CUdeviceptr src,
                                                       size_t bytes, CUstream stream);
typedef CUresult(CUDAAPI *PFN_cuMemsetD32Async_v3020)(CUdeviceptr dst, unsigned int value,
                                                      size_t count, CUstream stream);
typedef CUresult(CUDAAPI *PFN_cuModuleLoadData_v2000)(CUmodule *module, const void *image);
typedef CUresult(CUDAAPI *PFN_cuModuleUnload_v2000)(CUmodule module);
typedef CUresult(CUDAAPI *PFN_cuModuleGetFunction_v2000)(CUfunction *fn, CUmodule module,
                                                         const char *name);
typedef CUresult(CUDAAPI *PFN_cuFuncGetParamInfo_v12040)(CUfunction fn, size_t index,
                                                         size_t *offset, size_t *size);
typedef CUresult(CUDAAPI *PFN_cuLaunchKernel_v4000)(CUfunction fn, unsigned int gridX,
                                                    unsigned int gridY, unsigned int gridZ,
                                                    unsigned int blockX, unsigned int blockY,
                                                    unsigned int blockZ, unsigned int sharedBytes,
                                                    CUstream stream, void **params, void **extra);
typedef CUresult(CUDAAPI *PFN_cuLaunchKernelEx_v11060)(const CUlaunchConfig *config, CUfunction fn,
                                                       void **params, void **extra);
typedef CUresult(CUDAAPI *PFN_cuGraphInstantiateWithFlags_v11040)(CUgraphExec *exec, CUgraph graph,
                                                                  unsigned long long flags);
typedef CUresult(CUDAAPI *PFN_cuGraphLaunch_v10000)(CUgraphExec exec, CUstream stream);
typedef CUresult(CUDAAPI *PFN_cuGraphDestroy_v10000)(CUgraph graph);
typedef CUresult(CUDAAPI *PFN_cuGraphExecDestroy_v10000)(CUgraphExec exec);
typedef CUresult(CUDAAPI *PFN_cuGetErrorName_v6000)(CUresult error, const char **name);
typedef CUresult(CUDAAPI *PFN_cuGetErrorString_v6000)(CUresult error, const char **text);

/* NVRTC's entry points (resolved with dlsym; driver.h takes each one's type
 * from these prototypes). memra defines none of them. */
nvrtcResult nvrtcVersion(int *major, int *minor);
const char *nvrtcGetErrorString(nvrtcResult result);
nvrtcResult nvrtcGetNumSupportedArchs(int *count);
nvrtcResult nvrtcGetSupportedArchs(int *archs);
nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
                               int numHeaders, const char *const *headers,
                               const char *const *includeNames);
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog);
nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions, const char *const *options);
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *size);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log);
nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *size);
nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx);
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *size);
nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin);

#endif /* MEMRA_CUDA_ABI_H */
