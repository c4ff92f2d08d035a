/* Runs the real kernel source (kernels_src/vrows.cu, route_math.cuh,
 * route.cu) on the host, so the mock driver can execute exactly the launch
 * the library handed to cuLaunchKernel. The table kernel runs one
 * (block, thread) at a time; the routing kernel, which works by warps, runs
 * each block's threads as POSIX threads, with a barrier per warp standing in
 * for the warp's lockstep (__syncwarp and the shuffles exchange through it). */
#ifndef MEMRA_KERNEL_ON_HOST_H
#define MEMRA_KERNEL_ON_HOST_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "route_abi.h"
#include "testutil.h"

typedef uint64_t memra_u64;
typedef uint32_t memra_u32;
typedef struct host_dim3 {
    unsigned x, y, z;
} host_dim3;
static _Thread_local host_dim3 blockIdx, blockDim, threadIdx, gridDim;

static inline float host_mul_rn(float a, float b)
{
    volatile float r = a * b;
    return r;
}
/* Real atomics: the routing kernel's lanes run at once. */
static inline memra_u32 atomicAdd(memra_u32 *a, memra_u32 v)
{
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
static inline memra_u32 atomicExch(memra_u32 *a, memra_u32 v)
{
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);
}
static inline memra_u32 atomicMin(memra_u32 *a, memra_u32 v)
{
    memra_u32 o = __atomic_load_n(a, __ATOMIC_SEQ_CST);
    while (v < o && !__atomic_compare_exchange_n(a, &o, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        ;
    return o;
}

/* One warp's lockstep: every collective is "write mine, wait, read, wait". */
typedef struct host_warp {
    pthread_barrier_t bar;
    float f[32];
    int i[32];
} host_warp;
static host_warp host_warps[MEMRA_ROUTE_BLOCK / 32];
#define HOST_WARP (&host_warps[threadIdx.x >> 5])
#define HOST_LANE (threadIdx.x & 31u)

static inline void memra_warp_sync(void)
{
    pthread_barrier_wait(&HOST_WARP->bar);
}
static inline int memra_warp_any(int p)
{
    host_warp *w = HOST_WARP;
    w->i[HOST_LANE] = p;
    memra_warp_sync();
    int any = 0;
    for (int l = 0; l < 32; l++)
        any |= w->i[l] != 0;
    memra_warp_sync();
    return any;
}
static inline float memra_shfl_f(float v, int src)
{
    host_warp *w = HOST_WARP;
    w->f[HOST_LANE] = v;
    memra_warp_sync();
    const float r = w->f[src];
    memra_warp_sync();
    return r;
}
static inline float memra_shfl_xor_f(float v, int off)
{
    return memra_shfl_f(v, (int)(HOST_LANE ^ (unsigned)off));
}

static inline memra_u32 memra_warp_max_u32(memra_u32 x)
{
    host_warp *w = HOST_WARP;
    w->i[HOST_LANE] = (int)x;
    memra_warp_sync();
    memra_u32 m = 0;
    for (int l = 0; l < 32; l++)
        m = (memra_u32)w->i[l] > m ? (memra_u32)w->i[l] : m;
    memra_warp_sync();
    return m;
}
static inline memra_u32 memra_warp_min_u32(memra_u32 x)
{
    host_warp *w = HOST_WARP;
    w->i[HOST_LANE] = (int)x;
    memra_warp_sync();
    memra_u32 m = 0xffffffffu;
    for (int l = 0; l < 32; l++)
        m = (memra_u32)w->i[l] < m ? (memra_u32)w->i[l] : m;
    memra_warp_sync();
    return m;
}

#define MEMRA_KERNEL static void
#define MEMRA_DEVICE static inline
#define MEMRA_RESTRICT restrict
#define MEMRA_UNROLL
#define MEMRA_SHARED static
#define memra_as_bits(x) f2u(x)
#define memra_from_bits(x) u2f(x)
#define memra_mul_rn(a, b) host_mul_rn((a), (b))
#define memra_add_rn(a, b) ((a) + (b))
#define memra_sub_rn(a, b) ((a) - (b))
#define memra_div_rn(a, b) ((a) / (b))
#include "vrows.cu"
#include "route_math.cuh"
#include "route.cu"

/* Executes a grid of the table kernel with arguments decoded from the raw
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

/* memra_faults_take from its parameter block (the fault word's address and
 * the readback area's). */
static inline void run_take_on_host(const unsigned char *buf)
{
    uint64_t faults, out;
    memcpy(&faults, buf, 8);
    memcpy(&out, buf + 8, 8);
    memra_faults_take((memra_u32 *)(uintptr_t)faults, (memra_u32 *)(uintptr_t)out);
}

typedef struct host_route_lane {
    memra_route_args a;
    host_dim3 block_idx, block_dim, grid_dim;
    unsigned thread;
    int tables;
} host_route_lane;

static void *host_route_lane_main(void *arg)
{
    const host_route_lane *l = arg;
    const memra_route_args *a = &l->a;
    blockIdx = l->block_idx, blockDim = l->block_dim, gridDim = l->grid_dim;
    threadIdx = (host_dim3){l->thread, 0, 0};
    (l->tables ? memra_route_tables : memra_route_topk)(
        (const void *)(uintptr_t)a->logits, (const float *)(uintptr_t)a->bias,
        (const float *)(uintptr_t)a->mg, (const float *)(uintptr_t)a->mu,
        (const float *)(uintptr_t)a->md, a->pg, a->pu, a->pd, a->sg, a->su, a->sd,
        (int *)(uintptr_t)a->sel, (float *)(uintptr_t)a->selw, (memra_u64 *)(uintptr_t)a->ptrs,
        (float *)(uintptr_t)a->scl, (memra_u32 *)(uintptr_t)a->faults, a->n_tokens, a->n_expert,
        a->top_k, a->n_group, a->topk_group, a->flags, a->scale);
    return NULL;
}

/* Executes a grid of a routing kernel (tables = 1: memra_route_tables, 0:
 * memra_route_topk), a block at a time, its threads at once. */
static inline void run_route_on_host(const unsigned char *buf, size_t size, host_dim3 grid,
                                     host_dim3 block, int tables)
{
    host_route_lane lanes[MEMRA_ROUTE_BLOCK];
    pthread_t th[MEMRA_ROUTE_BLOCK];
    memra_route_args a;
    memset(&a, 0, sizeof a);
    memcpy(&a, buf, size);
    for (unsigned w = 0; w < MEMRA_ROUTE_BLOCK / 32; w++)
        pthread_barrier_init(&host_warps[w].bar, NULL, 32);
    for (unsigned b = 0; b < grid.x; b++) {
        for (unsigned t = 0; t < block.x; t++) {
            lanes[t] = (host_route_lane){a, {b, 0, 0}, block, grid, t, tables};
            if (pthread_create(&th[t], NULL, host_route_lane_main, &lanes[t]) != 0)
                abort();
        }
        for (unsigned t = 0; t < block.x; t++)
            pthread_join(th[t], NULL);
    }
    for (unsigned w = 0; w < MEMRA_ROUTE_BLOCK / 32; w++)
        pthread_barrier_destroy(&host_warps[w].bar);
}

#endif /* MEMRA_KERNEL_ON_HOST_H */
