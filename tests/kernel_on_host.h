/* Runs the real kernel source (kernels_src/vrows.cu) on the host, one
 * (block, thread) at a time, so the mock driver can execute exactly the
 * launch the library handed to cuLaunchKernel. */
#ifndef MEMRA_KERNEL_ON_HOST_H
#define MEMRA_KERNEL_ON_HOST_H

#include <stdint.h>
#include <string.h>

#include "testutil.h"

typedef uint64_t memra_u64;
typedef uint32_t memra_u32;
typedef struct host_dim3 {
    unsigned x, y, z;
} host_dim3;
static host_dim3 blockIdx, blockDim, threadIdx, gridDim;

static inline float host_mul_rn(float a, float b)
{
    volatile float r = a * b;
    return r;
}
/* One thread at a time: plain read-modify-write is the atomic. */
static inline memra_u32 atomicAdd(memra_u32 *a, memra_u32 v)
{
    memra_u32 o = *a;
    *a = o + v;
    return o;
}
static inline memra_u32 atomicExch(memra_u32 *a, memra_u32 v)
{
    memra_u32 o = *a;
    *a = v;
    return o;
}
static inline memra_u32 atomicMin(memra_u32 *a, memra_u32 v)
{
    memra_u32 o = *a;
    if (v < o)
        *a = v;
    return o;
}

#define MEMRA_KERNEL static void
#define MEMRA_DEVICE static inline
#define MEMRA_RESTRICT restrict
#define MEMRA_UNROLL
#define memra_as_bits(x) f2u(x)
#define memra_from_bits(x) u2f(x)
#define memra_mul_rn(a, b) host_mul_rn((a), (b))
#include "vrows.cu"

/* Executes a grid of the kernel with arguments decoded from the raw
 * parameter buffer at the offsets NVRTC assigns (natural alignment). */
static inline void run_vrows_on_host(const unsigned char *buf, host_dim3 grid, host_dim3 block)
{
    uint64_t q[11], ptrs, scl, faults;
    uint32_t n_pairs, n_expert;
    memcpy(q, buf, sizeof q);
    memcpy(&n_pairs, buf + 88, 4);
    memcpy(&n_expert, buf + 92, 4);
    memcpy(&ptrs, buf + 96, 8);
    memcpy(&scl, buf + 104, 8);
    memcpy(&faults, buf + 112, 8);
    blockDim = block;
    gridDim = grid;
    for (blockIdx.x = 0; blockIdx.x < grid.x; blockIdx.x++)
        for (threadIdx.x = 0; threadIdx.x < block.x; threadIdx.x++)
            memra_vrows_tables((const int *)(uintptr_t)q[0], (const float *)(uintptr_t)q[1],
                               (const float *)(uintptr_t)q[2], (const float *)(uintptr_t)q[3],
                               (const float *)(uintptr_t)q[4], q[5], q[6], q[7], q[8], q[9], q[10],
                               n_pairs, n_expert, (memra_u64 *)(uintptr_t)ptrs,
                               (float *)(uintptr_t)scl, (memra_u32 *)(uintptr_t)faults);
}

/* memra_faults_take from its parameter block (the fault word's address). */
static inline void run_take_on_host(const unsigned char *buf)
{
    uint64_t faults;
    memcpy(&faults, buf, 8);
    memra_faults_take((memra_u32 *)(uintptr_t)faults);
}

#endif /* MEMRA_KERNEL_ON_HOST_H */
