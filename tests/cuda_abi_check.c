/* memra's declarations of the CUDA ABI (src/driver/cuda_abi.h) held against a CUDA
 * toolkit's headers, at compile time: after cuda.h, cudaTypedefs.h and
 * nvrtc.h, cuda_abi.h's handles and scalars (section 1) and every function
 * type it declares (section 3: each PFN_<name>_v<version>, cuGetProcAddress
 * included, and each NVRTC prototype) are declared again. C11 lets a
 * typedef be repeated only as the same type, and a prototype only as a
 * compatible one, so any difference is a compile error naming it. Its
 * values, sizes and layouts (section 2) are compared at run time by the
 * cuda_abi_values test. Built only where a toolkit is found. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <nvrtc.h>

#define MEMRA_CUDA_ABI_CHECK
#include "driver/cuda_abi.h"

/* The driver table takes each X-macro entry's type from cuda_abi.h: with the
 * toolkit's types in force it must still compile. */
#include "driver/driver.h"

#include <stdio.h>

int main(void)
{
    int n = 0;
#define MEMRA_X(name, ver, req) n++;
    MEMRA_CU_ENTRY_POINTS(MEMRA_X)
#undef MEMRA_X
#define MEMRA_X(name) n++;
    MEMRA_NVRTC_ENTRY_POINTS(MEMRA_X)
#undef MEMRA_X
    printf("%d driver and NVRTC entry points have the toolkit's types (CUDA %d)\n", n,
           CUDA_VERSION);
    return 0;
}
