/* A libcuda.so.1 made of the mock driver, for the tests that load libmemra
 * as a serving process does (the `memra` tool, the Python package, the Rust
 * crate) on a machine with no GPU: put this folder first on
 * LD_LIBRARY_PATH and cuGetProcAddress hands out the mock's entry points
 * (device memory in host memory, the kernel source run on the host, images
 * judged by the driver's rules). What it reports comes from the
 * environment:
 *   FAKE_CUDA_DRIVER_VERSION  cuDriverGetVersion (default 13000)
 *   FAKE_CUDA_SM              the device's SM as 10*major + minor (default 90)
 *   FAKE_CUDA_DEVICES         the device count (default 1)
 *   FAKE_CUDA_CORRUPT=1       a broken GPU: each table launch flips a scale bit
 * The disk cache is turned off unless the process set MEMRA_CACHE_DIR
 * itself: mock images must never reach a user's real cache. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mock_driver.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static void init(void)
{
    const char *cache = getenv("MEMRA_CACHE_DIR");
    char *keep = cache ? strdup(cache) : NULL;
    mock_install();
    if (keep)
        setenv("MEMRA_CACHE_DIR", keep, 1);
    free(keep);
    mock.driver_version = env_int("FAKE_CUDA_DRIVER_VERSION", 13000);
    const int sm = env_int("FAKE_CUDA_SM", 90);
    mock.sm_major = sm / 10, mock.sm_minor = sm % 10;
    mock.n_devices = env_int("FAKE_CUDA_DEVICES", 1);
    mock.corrupt_tables = env_int("FAKE_CUDA_CORRUPT", 0);
}

/* The CUDA 12 name of the entry point (cuda.h maps cuGetProcAddress to it),
 * the one memra looks up first. */
CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *status);
_Static_assert(__builtin_types_compatible_p(__typeof__(&cuGetProcAddress_v2),
                                            PFN_cuGetProcAddress_v12000),
               "the fake's entry point has the driver's type");

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    (void)cudaVersion, (void)flags;
    pthread_once(&once, init);
    *pfn = NULL;
#define MEMRA_X(name, ver, req)                                                                    \
    if (strcmp(symbol, #name) == 0)                                                                \
        memcpy(pfn, &mock_table.name, sizeof *pfn);
    MEMRA_CU_ENTRY_POINTS(MEMRA_X)
#undef MEMRA_X
    if (status)
        *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
