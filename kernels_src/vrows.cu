/* memra: the MoE verify-rows table build, one thread per (token, expert) pair.
 *
 * Embedded into libmemra as a string after vrows_pair.cuh (the per-pair
 * arithmetic it shares with routing) and compiled by NVRTC; the host tests
 * compile the same text as C. */

/* One pair per thread (the launcher's grid is ceil(n_pairs / blockDim.x)).
 * The benchmark compiles other widths (MEMRA_VROWS_VARIANT: k pairs per
 * thread, each thread issuing all its loads first). On an H200 one pair per
 * thread is the fastest at 2^22 pairs and when the tables stay in L2, and
 * within 7% of the best (8 per thread) at 2^20 from DRAM (BENCHMARKS.md). */
#define MEMRA_VROWS_MAX_PER_THREAD 8

MEMRA_DEVICE void memra_vrows_body(const int per_thread, const int *MEMRA_RESTRICT sel,
                                   const float *MEMRA_RESTRICT selw, const memra_vrows_ctx *c,
                                   memra_u32 n_pairs, memra_u64 *MEMRA_RESTRICT ptrs,
                                   float *MEMRA_RESTRICT scl, memra_u32 *faults)
{
    /* n_pairs <= 2^28 (checked on the host), so every index below, up to
     * 2*n_pairs + p, fits 32 bits. Consecutive threads take consecutive
     * pairs in each round: every load and store is coalesced. */
    const memra_u32 stride = gridDim.x * blockDim.x;
    const memra_u32 p0 = blockIdx.x * blockDim.x + threadIdx.x;
    int ex[MEMRA_VROWS_MAX_PER_THREAD];
    float w[MEMRA_VROWS_MAX_PER_THREAD];

    /* sel and selw are usually the previous kernel's output. */
    memra_grid_wait();
    memra_grid_launch_dependents();
    MEMRA_UNROLL
    for (int k = 0; k < per_thread; k++) {
        const memra_u32 p = p0 + (memra_u32)k * stride;
        ex[k] = p < n_pairs ? sel[p] : 0;
        w[k] = p < n_pairs ? selw[p] : 0.0f;
    }

    MEMRA_UNROLL
    for (int k = 0; k < per_thread; k++) {
        const memra_u32 p = p0 + (memra_u32)k * stride;
        if (p >= n_pairs)
            break;
        const memra_vrows_out o = memra_vrows_pair(ex[k], w[k], p, c, faults);
        memra_vrows_store(o, p, n_pairs, ptrs, scl);
    }
}

/* The entry points share one parameter list (src/vrows/vrows_abi.h). */
#define MEMRA_VROWS_PARAMS                                                                         \
    const int *sel, const float *selw, const float *mg, const float *mu, const float *md,          \
        memra_u64 pg, memra_u64 pu, memra_u64 pd, memra_u64 sg, memra_u64 su, memra_u64 sd,        \
        memra_u32 n_pairs, memra_u32 n_expert, memra_u64 *ptrs, float *scl, memra_u32 *faults,     \
        const int *map, memra_u32 n_local, memra_u32 n_shared
#define MEMRA_VROWS_BODY(per_thread)                                                               \
    do {                                                                                           \
        const memra_vrows_ctx c_ = {mg, mu, md,  pg,       pu,      pd,      sg,                   \
                                    su, sd, map, n_expert, n_local, n_shared};                     \
        memra_vrows_body((per_thread), sel, selw, &c_, n_pairs, ptrs, scl, faults);                \
    } while (0)

MEMRA_KERNEL MEMRA_BOUNDS(MEMRA_VROWS_BLOCK) memra_vrows_kernel(MEMRA_VROWS_PARAMS)
{
    MEMRA_VROWS_BODY(1);
}

/* Reads and clears the fault word in one step on the device, so counts that
 * kernels on other streams add between a host read and a host reset cannot
 * be lost: each word is moved (atomicExch) into the caller's readback area
 * `out`. One thread. */
MEMRA_KERNEL MEMRA_BOUNDS(1) memra_faults_take_kernel(memra_u32 *faults, memra_u32 *out)
{
    out[MEMRA_FAULT_BAD_EXPERT] = atomicExch(&faults[MEMRA_FAULT_BAD_EXPERT], 0u);
    out[MEMRA_FAULT_NONFINITE] = atomicExch(&faults[MEMRA_FAULT_NONFINITE], 0u);
    out[MEMRA_FAULT_FIRST_PAIR] = atomicExch(&faults[MEMRA_FAULT_FIRST_PAIR], 0xffffffffu);
    out[MEMRA_FAULT_NOT_LOCAL] = atomicExch(&faults[MEMRA_FAULT_NOT_LOCAL], 0u);
    out[MEMRA_FAULT_PADDED] = atomicExch(&faults[MEMRA_FAULT_PADDED], 0u);
}

#ifdef MEMRA_VROWS_VARIANT /* the benchmark's sweep compiles other widths */
MEMRA_KERNEL MEMRA_BOUNDS(MEMRA_VROWS_BLOCK) memra_vrows_var_kernel(MEMRA_VROWS_PARAMS)
{
    MEMRA_VROWS_BODY(MEMRA_VROWS_VARIANT);
}
#endif
