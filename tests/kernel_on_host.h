/* Runs the real kernel source (kernels_src/vrows_pair.cuh, vrows.cu,
 * route_math.cuh, route.cu) on the host, so the mock driver can execute
 * exactly the launch the library handed to cuLaunchKernel(Ex). The table
 * kernel runs one (block, thread) at a time; the routing kernels, which work
 * by warps and blocks, run each block's threads as coroutines, with a
 * barrier per warp standing in for the warp's lockstep (__syncwarp and the
 * shuffles exchange through it) and one per block for __syncthreads.
 * Shared memory is the kernels' static arrays: one block runs at a time. */
#ifndef MEMRA_KERNEL_ON_HOST_H
#define MEMRA_KERNEL_ON_HOST_H

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <ucontext.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jit/kernels.h"
#include "layout/layout_abi.h"
#include "route/route_abi.h"
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
/* Real atomics: other streams' kernels may run in other host threads. */
static inline memra_u32 atomicAdd(memra_u32 *a, memra_u32 v)
{
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
static inline memra_u32 atomicOr(memra_u32 *a, memra_u32 v)
{
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);
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

/* The routing kernels' threads run as coroutines of one host thread
 * (ucontext): a thread runs until it reaches a barrier, then the next one
 * runs. Deterministic, and fast enough for blocks of 1024 threads where an
 * OS thread each was not (the mock runs thousands of blocks). */
#define HOST_MAX_WARPS 32
#define HOST_MAX_THREADS (32 * HOST_MAX_WARPS)
typedef struct host_barrier {
    unsigned count, arrived, gen;
} host_barrier;
/* One warp's lockstep: every collective is "write mine, wait, read, wait". */
typedef struct host_warp {
    host_barrier bar;
    float f[32];
    int i[32];
} host_warp;
static host_warp host_warps[HOST_MAX_WARPS];
/* The block's barrier and its __syncthreads_or exchange. */
static host_barrier host_block_bar;
static int host_block_flags[HOST_MAX_THREADS];
static ucontext_t host_sched_ctx, host_thread_ctx[HOST_MAX_THREADS];
static unsigned host_current;
/* Arrivals, barrier releases and returns: a round of the scheduler with none
 * is a deadlock (threads waiting at barriers the others never reach). */
static unsigned long host_progress;
#define HOST_WARP (&host_warps[threadIdx.x >> 5])
#define HOST_LANE (threadIdx.x & 31u)

static inline void host_yield(void)
{
    if (swapcontext(&host_thread_ctx[host_current], &host_sched_ctx) != 0)
        abort();
}
static inline void host_barrier_wait(host_barrier *b)
{
    const unsigned gen = b->gen;
    host_progress++;
    if (++b->arrived == b->count) {
        b->arrived = 0;
        b->gen++;
        return;
    }
    while (b->gen == gen)
        host_yield();
}

static inline void memra_warp_sync(void)
{
    host_barrier_wait(&HOST_WARP->bar);
}
static inline void memra_block_sync(void)
{
    host_barrier_wait(&host_block_bar);
}
static inline int memra_block_or(int p)
{
    host_block_flags[threadIdx.x] = p;
    memra_block_sync();
    int any = 0;
    for (unsigned t = 0; t < blockDim.x; t++)
        any |= host_block_flags[t] != 0;
    memra_block_sync();
    return any;
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
static inline memra_u32 memra_warp_ballot(int p)
{
    host_warp *w = HOST_WARP;
    w->i[HOST_LANE] = p;
    memra_warp_sync();
    memra_u32 m = 0;
    for (int l = 0; l < 32; l++)
        m |= (memra_u32)(w->i[l] != 0) << l;
    memra_warp_sync();
    return m;
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
static inline memra_u32 memra_shfl_u(memra_u32 v, int src)
{
    host_warp *w = HOST_WARP;
    w->i[HOST_LANE] = (int)v;
    memra_warp_sync();
    const memra_u32 r = (memra_u32)w->i[src & 31];
    memra_warp_sync();
    return r;
}
/* __shfl_up_sync: lanes below d keep their own value. */
static inline memra_u32 memra_shfl_up_u(memra_u32 v, int d)
{
    return memra_shfl_u(v, HOST_LANE >= (unsigned)d ? (int)HOST_LANE - d : (int)HOST_LANE);
}
#define memra_popc(x) __builtin_popcount(x)
#define memra_ffs(x) __builtin_ffs((int)(x))
/* __match_any_sync: the lanes holding the same value. */
static inline memra_u32 memra_match_any(memra_u32 v)
{
    host_warp *w = HOST_WARP;
    w->i[HOST_LANE] = (int)v;
    memra_warp_sync();
    memra_u32 m = 0;
    for (int l = 0; l < 32; l++)
        m |= (memra_u32)((memra_u32)w->i[l] == v) << l;
    memra_warp_sync();
    return m;
}
/* The host runs a launch's blocks one after another on one OS thread
 * (ucontext), so ordering their memory needs only an atomic add. */
#define memra_atomic_add_acq_rel(p, v) __atomic_fetch_add((p), (v), __ATOMIC_ACQ_REL)
#define memra_load_cg(p) (*(p))
#define memra_atomic_add_u64(p, v) __atomic_fetch_add((p), (v), __ATOMIC_SEQ_CST)
static inline memra_u32 memra_shfl_xor_u(memra_u32 v, int off)
{
    host_warp *w = HOST_WARP;
    w->i[HOST_LANE] = (int)v;
    memra_warp_sync();
    const memra_u32 r = (memra_u32)w->i[HOST_LANE ^ (unsigned)off];
    memra_warp_sync();
    return r;
}

/* __reduce_{max,min,or}_sync: every lane publishes its value, then folds
 * the warp's 32 with `op` from `init`. */
static inline memra_u32 host_max_u32(memra_u32 a, memra_u32 b)
{
    return b > a ? b : a;
}
static inline memra_u32 host_min_u32(memra_u32 a, memra_u32 b)
{
    return b < a ? b : a;
}
static inline memra_u32 host_or_u32(memra_u32 a, memra_u32 b)
{
    return a | b;
}
static inline memra_u32 host_warp_fold(memra_u32 x, memra_u32 init,
                                       memra_u32 (*op)(memra_u32, memra_u32))
{
    host_warp *w = HOST_WARP;
    w->i[HOST_LANE] = (int)x;
    memra_warp_sync();
    memra_u32 m = init;
    for (int l = 0; l < 32; l++)
        m = op(m, (memra_u32)w->i[l]);
    memra_warp_sync();
    return m;
}
#define memra_warp_max_u32(x) host_warp_fold((x), 0u, host_max_u32)
#define memra_warp_min_u32(x) host_warp_fold((x), 0xffffffffu, host_min_u32)
#define memra_warp_or_u32(x) host_warp_fold((x), 0u, host_or_u32)

#define MEMRA_KERNEL static void
#define MEMRA_BOUNDS(threads)
#define MEMRA_BOUNDS_MIN(threads, blocks)
#define MEMRA_STATIC_ASSERT(c, why) _Static_assert(c, why)
#define MEMRA_DEVICE static inline
#define MEMRA_RESTRICT restrict
#define MEMRA_UNROLL
#define MEMRA_SHARED static
typedef struct memra_u32x4 {
    memra_u32 x, y, z, w;
} memra_u32x4;
#define memra_as_bits(x) f2u(x)
#define memra_from_bits(x) u2f(x)
#define memra_mul_rn(a, b) host_mul_rn((a), (b))
#define memra_add_rn(a, b) ((a) + (b))
#define memra_sub_rn(a, b) ((a) - (b))
#define memra_div_rn(a, b) ((a) / (b))
#define memra_grid_wait() ((void)0)
#define memra_grid_launch_dependents() ((void)0)
/* The phase probe's marks (warp.cuh), which a GPU build keeps empty, count
 * here by the function of the kernels' text that passed them, so a test can
 * tell which path ran (e.g. the fused layout's bitmap or general path), not
 * only that the answer was right (tests/mock/modules.c); thread 0 of a
 * block marks. */
void host_mark(const char *fn);
unsigned long host_marks(const char *fn);
void host_marks_reset(void);
#define MEMRA_PROBE(i, name) (threadIdx.x == 0 ? host_mark(__func__) : (void)0)
#include "abi.h"
#include "vrows_pair.cuh"
#include "vrows.cu"
#include "route_math.cuh"
#include "warp.cuh"
#include "layout.cu"
#include "route_common.cuh"
#include "route_block.cu"
/* Every team kernel, as NVRTC compiles each in its own module. */
#define MEMRA_ROUTE_M 1
#include "route_warp.cu"
#undef MEMRA_ROUTE_M
#define MEMRA_ROUTE_M 4
#include "route_warp.cu"
#undef MEMRA_ROUTE_M
#define MEMRA_ROUTE_M 8
#include "route_warp.cu"
#undef MEMRA_ROUTE_M
#define MEMRA_ROUTE_M 16
#include "route_warp.cu"
#undef MEMRA_ROUTE_M
#undef MEMRA_ROUTE_SCREEN
#define MEMRA_ROUTE_SCREEN 1
#define MEMRA_ROUTE_M 4
#include "route_warp.cu"
#undef MEMRA_ROUTE_M
#define MEMRA_ROUTE_M 8
#include "route_warp.cu"
#undef MEMRA_ROUTE_M
#define MEMRA_ROUTE_M 16
#include "route_warp.cu"
#undef MEMRA_ROUTE_M
#undef MEMRA_ROUTE_SCREEN

/* A routing kernel's host run, by its id; NULL for the others. */
typedef void (*host_route_fn)(MEMRA_ROUTE_PARAMS);
static inline host_route_fn host_route_kernel(memra_kernel_id k)
{
    switch (k) {
    case MEMRA_KERNEL_ROUTE_BLOCK:
        return memra_route_block_kernel;
    case MEMRA_KERNEL_ROUTE_WARP1:
        return memra_route_warp1_kernel;
    case MEMRA_KERNEL_ROUTE_WARP4:
        return memra_route_warp4_kernel;
    case MEMRA_KERNEL_ROUTE_WARP8:
        return memra_route_warp8_kernel;
    case MEMRA_KERNEL_ROUTE_WARP16:
        return memra_route_warp16_kernel;
    case MEMRA_KERNEL_ROUTE_SIG4:
        return memra_route_sig4_kernel;
    case MEMRA_KERNEL_ROUTE_SIG8:
        return memra_route_sig8_kernel;
    case MEMRA_KERNEL_ROUTE_SIG16:
        return memra_route_sig16_kernel;
    default:
        return NULL;
    }
}

/* Executes a grid of the table kernel with arguments decoded from the raw
 * parameter buffer at the offsets NVRTC assigns (natural alignment). */
static inline void run_vrows_on_host(const unsigned char *buf, host_dim3 grid, host_dim3 block)
{
    uint64_t q[11], ptrs, scl, faults, map;
    uint32_t n_pairs, n_expert, n_local, n_shared;
    memcpy(q, buf, sizeof q);
    memcpy(&n_pairs, buf + 88, 4);
    memcpy(&n_expert, buf + 92, 4);
    memcpy(&ptrs, buf + 96, 8);
    memcpy(&scl, buf + 104, 8);
    memcpy(&faults, buf + 112, 8);
    memcpy(&map, buf + 120, 8);
    memcpy(&n_local, buf + 128, 4);
    memcpy(&n_shared, buf + 132, 4);
    blockDim = block;
    gridDim = grid;
    for (blockIdx.x = 0; blockIdx.x < grid.x; blockIdx.x++)
        for (threadIdx.x = 0; threadIdx.x < block.x; threadIdx.x++)
            memra_vrows_kernel((const int *)(uintptr_t)q[0], (const float *)(uintptr_t)q[1],
                               (const float *)(uintptr_t)q[2], (const float *)(uintptr_t)q[3],
                               (const float *)(uintptr_t)q[4], q[5], q[6], q[7], q[8], q[9], q[10],
                               n_pairs, n_expert, (memra_u64 *)(uintptr_t)ptrs,
                               (float *)(uintptr_t)scl, (memra_u32 *)(uintptr_t)faults,
                               (const int *)(uintptr_t)map, n_local, n_shared);
}

/* memra_faults_take_kernel from its parameter block (the fault word's address and
 * the readback area's). */
static inline void run_take_on_host(const unsigned char *buf)
{
    uint64_t faults, out;
    memcpy(&faults, buf, 8);
    memcpy(&out, buf + 8, 8);
    memra_faults_take_kernel((memra_u32 *)(uintptr_t)faults, (memra_u32 *)(uintptr_t)out);
}

static const memra_route_args *host_route_a;
static host_route_fn host_route_run;
/* What each coroutine thread runs: a routing kernel from host_route_a, or
 * a layout kernel from host_layout_a. */
static void (*host_thread_body)(void);
static const memra_layout_args *host_layout_a;
static void (*host_layout_run)(const int *, memra_u32, memra_u32, memra_layout_params);

static void host_layout_body(void)
{
    const memra_layout_args *a = host_layout_a;
    host_layout_run((const int *)(uintptr_t)a->ids, a->n_pairs, a->tile, a->lp);
}
static unsigned char host_route_done[HOST_MAX_THREADS];

static void host_route_body(void)
{
    const memra_route_args *a = host_route_a;
    host_route_run((const void *)(uintptr_t)a->logits, (const void *)(uintptr_t)a->bias,
                   (const float *)(uintptr_t)a->mg, (const float *)(uintptr_t)a->mu,
                   (const float *)(uintptr_t)a->md, a->pg, a->pu, a->pd, a->sg, a->su, a->sd,
                   (int *)(uintptr_t)a->sel, (float *)(uintptr_t)a->selw,
                   (memra_u64 *)(uintptr_t)a->ptrs, (float *)(uintptr_t)a->scl,
                   (memra_u32 *)(uintptr_t)a->faults, (const int *)(uintptr_t)a->map,
                   (const void *)(uintptr_t)a->n_real, a->n_tokens, a->n_expert, a->top_k,
                   a->n_group, a->topk_group, a->flags, a->n_local, a->n_shared, a->scale,
                   a->shared_weight, a->lp);
}

static void host_route_thread_main(void)
{
    host_thread_body();
    host_route_done[host_current] = 1;
    host_progress++;
    /* returning resumes uc_link: the scheduler */
}

/* Thread t's context, to start at the kernel on its own stack. */
static __attribute__((noinline)) void host_prepare(unsigned t, void *stack, size_t size)
{
    host_route_done[t] = 0;
    if (getcontext(&host_thread_ctx[t]) != 0)
        abort();
    host_thread_ctx[t].uc_stack.ss_sp = stack;
    host_thread_ctx[t].uc_stack.ss_size = size;
    host_thread_ctx[t].uc_link = &host_sched_ctx;
    makecontext(&host_thread_ctx[t], host_route_thread_main, 0);
}

/* Resumes thread t until its next barrier or its return (apart, so that no
 * caller's local lives across swapcontext's second return). */
static __attribute__((noinline)) void host_resume(unsigned t)
{
    host_current = t;
    threadIdx = (host_dim3){t, 0, 0};
    if (swapcontext(&host_sched_ctx, &host_thread_ctx[t]) != 0)
        abort();
}

/* Executes a grid of the thread body set in host_thread_body, a block at a
 * time, last block first (a GPU runs them in any order: a kernel that
 * counted on block 0 running first, or on the last block to finish being
 * the grid's last, fails here), its threads as coroutines switched at
 * every barrier. The caller holds host_one_grid: shared memory, the
 * barriers and the stacks are the process's. */
static pthread_mutex_t host_one_grid = PTHREAD_MUTEX_INITIALIZER;
static inline void run_blocks_on_host(host_dim3 grid, host_dim3 block)
{
    enum { STACK = 64 * 1024 };
    static unsigned char *stacks;
    if (!stacks && !(stacks = malloc((size_t)HOST_MAX_THREADS * STACK)))
        abort();
    if (block.x == 0 || block.x % 32 || block.x > HOST_MAX_THREADS)
        abort();
    const unsigned n = block.x;
    blockDim = block, gridDim = grid;
    for (unsigned i = 0; i < grid.x; i++) {
        blockIdx = (host_dim3){grid.x - 1u - i, 0, 0};
        for (unsigned w = 0; w < n / 32; w++)
            host_warps[w].bar = (host_barrier){32, 0, 0};
        host_block_bar = (host_barrier){n, 0, 0};
        for (unsigned t = 0; t < n; t++)
            host_prepare(t, stacks + (size_t)t * STACK, STACK);
        /* Round robin until every thread has returned. */
        for (unsigned left = n; left;) {
            const unsigned long before = host_progress;
            left = 0;
            for (unsigned t = 0; t < n; t++) {
                if (host_route_done[t])
                    continue;
                host_resume(t);
                left += !host_route_done[t];
            }
            if (left && host_progress == before) {
                fprintf(stderr,
                        "kernel_on_host: block %u of a kernel deadlocked at a "
                        "barrier (%u threads waiting)\n",
                        blockIdx.x, left);
                abort();
            }
        }
    }
}

/* Executes a grid of routing kernel `fn`. */
static inline void run_route_on_host(const unsigned char *buf, size_t size, host_dim3 grid,
                                     host_dim3 block, host_route_fn fn)
{
    pthread_mutex_lock(&host_one_grid);
    memra_route_args a;
    memset(&a, 0, sizeof a);
    memcpy(&a, buf, size);
    host_route_a = &a;
    host_route_run = fn;
    host_thread_body = host_route_body;
    run_blocks_on_host(grid, block);
    pthread_mutex_unlock(&host_one_grid);
}

/* A layout kernel's host run, by its id; NULL for the others. */
typedef void (*host_layout_fn)(const int *, memra_u32, memra_u32, memra_layout_params);
static inline host_layout_fn host_layout_kernel(memra_kernel_id k)
{
    switch (k) {
    case MEMRA_KERNEL_LAYOUT_SMALL:
        return memra_layout_small_kernel;
    case MEMRA_KERNEL_LAYOUT_COUNT:
        return memra_layout_count_kernel;
    case MEMRA_KERNEL_LAYOUT_SCAN:
        return memra_layout_scan_kernel;
    case MEMRA_KERNEL_LAYOUT_PLACE:
        return memra_layout_place_kernel;
    default:
        return NULL;
    }
}

/* Executes a grid of layout kernel `fn`. */
static inline void run_layout_on_host(const unsigned char *buf, size_t size, host_dim3 grid,
                                      host_dim3 block, host_layout_fn fn)
{
    pthread_mutex_lock(&host_one_grid);
    memra_layout_args a;
    memset(&a, 0, sizeof a);
    memcpy(&a, buf, size);
    host_layout_a = &a;
    host_layout_run = fn;
    host_thread_body = host_layout_body;
    run_blocks_on_host(grid, block);
    pthread_mutex_unlock(&host_one_grid);
}

#endif /* MEMRA_KERNEL_ON_HOST_H */
