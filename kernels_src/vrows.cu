/* memra: the MoE verify-rows table build, one thread per (token, expert) pair.
 *
 * Embedded into libmemra as a string and compiled by NVRTC with
 * --fmad=false --ftz=false --prec-div=true --prec-sqrt=true, so the one
 * multiply below is the same IEEE binary32 operation as the host arm's.
 *
 * The same text is also compiled as C by the host tests (tests/kernel_on_host.h
 * supplies thread indices and atomics) so the mock driver can run exactly the
 * launch it was handed; keep it to the common subset of C and CUDA C++.
 */
#ifdef __CUDACC_RTC__
#define MEMRA_KERNEL extern "C" __global__ void
typedef unsigned long long memra_u64;
typedef unsigned int memra_u32;
#define memra_as_bits(x) __float_as_uint(x)
#define memra_from_bits(x) __uint_as_float(x)
#define memra_mul_rn(a, b) __fmul_rn((a), (b))
#define MEMRA_RESTRICT __restrict__
#define MEMRA_UNROLL _Pragma("unroll")
#define MEMRA_DEVICE static __device__ __forceinline__
#endif

/* The canonical quiet NaN: NaN payloads are not portable (x86 propagates the
 * operand's, NVIDIA returns 0x7fffffff), so both arms write this one. */
#define MEMRA_QNAN_BITS 0x7fc00000u
#define MEMRA_EXP_MASK 0x7f800000u

/* Fault word layout (4 x u32): bad-expert count, non-finite count,
 * lowest faulting pair (atomicMin, so the result is the same whatever order
 * the threads run in), reserved. */
#define MEMRA_FAULT_BAD_EXPERT 0
#define MEMRA_FAULT_NONFINITE 1
#define MEMRA_FAULT_FIRST_PAIR 2

/* One pair per thread (the launcher's grid is ceil(n_pairs / blockDim.x)).
 * The benchmark compiles other widths (MEMRA_VROWS_VARIANT: k pairs per
 * thread, each thread issuing all its loads first). On an H200 one pair per
 * thread is the fastest at 2^22 pairs and when the tables stay in L2, and
 * within 7% of the best (8 per thread) at 2^20 from DRAM (BENCHMARKS.md). */
#define MEMRA_VROWS_MAX_PER_THREAD 8

/* One pair's tables: three pointers, three scales, and its faults. */
typedef struct memra_vrows_out {
    memra_u64 g, u, d;
    float s0, s1, s2;
} memra_vrows_out;

MEMRA_DEVICE memra_vrows_out memra_vrows_pair(int ex, float w, memra_u32 p, const float *mg,
                                              const float *mu, const float *md, memra_u64 pg,
                                              memra_u64 pu, memra_u64 pd, memra_u64 sg,
                                              memra_u64 su, memra_u64 sd, memra_u32 n_expert,
                                              memra_u32 *faults)
{
    memra_vrows_out o;
    o.g = pg, o.u = pu, o.d = pd;
    o.s0 = 0.0f, o.s1 = 0.0f, o.s2 = 0.0f;

    /* Unsigned compare catches negative ids too. An out-of-range pair keeps
     * expert 0's pointers (never outside the slab) and +0 scales, so it adds
     * nothing to the GEMV; the fault word tells the host. */
    if ((memra_u32)ex >= n_expert) {
        atomicAdd(&faults[MEMRA_FAULT_BAD_EXPERT], 1u);
        atomicMin(&faults[MEMRA_FAULT_FIRST_PAIR], p);
        return o;
    }
    /* Widen before multiplying: stride * ex passes 4 GiB in serving slabs,
     * and a 32-bit product here is the field failure memra exists to
     * prevent. */
    const memra_u64 e = (memra_u64)(memra_u32)ex;
    o.g = pg + e * sg;
    o.u = pu + e * su;
    o.d = pd + e * sd;
    const float m2 = md ? md[ex] : 1.0f;
    o.s0 = mg ? mg[ex] : 1.0f;
    o.s1 = mu ? mu[ex] : 1.0f;
    o.s2 = memra_mul_rn(w, m2);

    const memra_u32 b0 = memra_as_bits(o.s0), b1 = memra_as_bits(o.s1), b2 = memra_as_bits(o.s2);
    if ((b0 & MEMRA_EXP_MASK) == MEMRA_EXP_MASK || (b1 & MEMRA_EXP_MASK) == MEMRA_EXP_MASK ||
        (b2 & MEMRA_EXP_MASK) == MEMRA_EXP_MASK) {
        atomicAdd(&faults[MEMRA_FAULT_NONFINITE], 1u);
        atomicMin(&faults[MEMRA_FAULT_FIRST_PAIR], p);
        if ((b0 << 1) > (MEMRA_EXP_MASK << 1))
            o.s0 = memra_from_bits(MEMRA_QNAN_BITS);
        if ((b1 << 1) > (MEMRA_EXP_MASK << 1))
            o.s1 = memra_from_bits(MEMRA_QNAN_BITS);
        if ((b2 << 1) > (MEMRA_EXP_MASK << 1))
            o.s2 = memra_from_bits(MEMRA_QNAN_BITS);
    }
    return o;
}

/* The tables are written once per step and read once by the GEMV: stream
 * them (st.global.cs, evict-first) rather than let 36 bytes a pair of dirty
 * lines crowd L2. Measured on an H200 at 2^20 pairs: 11.2 vs 13.6 us when
 * the tables stay in L2, 15.5 vs 16.3 us when they do not (BENCHMARKS.md).
 * The benchmark builds the plain variant with -DMEMRA_VROWS_PLAIN_STORES. */
#if defined(__CUDACC_RTC__) && !defined(MEMRA_VROWS_PLAIN_STORES)
#define MEMRA_ST(ptr, v) __stcs((ptr), (v))
#else
#define MEMRA_ST(ptr, v) (*(ptr) = (v))
#endif

/* Pair p's three pointers and three scales into the plane-major tables. */
MEMRA_DEVICE void memra_vrows_store(const memra_vrows_out o, memra_u32 p, memra_u32 n_pairs,
                                    memra_u64 *MEMRA_RESTRICT ptrs, float *MEMRA_RESTRICT scl)
{
    MEMRA_ST(&ptrs[p], o.g);
    MEMRA_ST(&ptrs[n_pairs + p], o.u);
    MEMRA_ST(&ptrs[2u * n_pairs + p], o.d);
    MEMRA_ST(&scl[p], o.s0);
    MEMRA_ST(&scl[n_pairs + p], o.s1);
    MEMRA_ST(&scl[2u * n_pairs + p], o.s2);
}

MEMRA_DEVICE void memra_vrows_body(const int per_thread, const int *MEMRA_RESTRICT sel,
                                   const float *MEMRA_RESTRICT selw, const float *MEMRA_RESTRICT mg,
                                   const float *MEMRA_RESTRICT mu, const float *MEMRA_RESTRICT md,
                                   memra_u64 pg, memra_u64 pu, memra_u64 pd, memra_u64 sg,
                                   memra_u64 su, memra_u64 sd, memra_u32 n_pairs,
                                   memra_u32 n_expert, memra_u64 *MEMRA_RESTRICT ptrs,
                                   float *MEMRA_RESTRICT scl, memra_u32 *faults)
{
    /* n_pairs <= 2^28 (checked on the host), so every index below, up to
     * 2*n_pairs + p, fits 32 bits. Consecutive threads take consecutive
     * pairs in each round: every load and store is coalesced. */
    const memra_u32 stride = gridDim.x * blockDim.x;
    const memra_u32 p0 = blockIdx.x * blockDim.x + threadIdx.x;
    int ex[MEMRA_VROWS_MAX_PER_THREAD];
    float w[MEMRA_VROWS_MAX_PER_THREAD];

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
        const memra_vrows_out o =
            memra_vrows_pair(ex[k], w[k], p, mg, mu, md, pg, pu, pd, sg, su, sd, n_expert, faults);
        memra_vrows_store(o, p, n_pairs, ptrs, scl);
    }
}

/* The entry points share one parameter list (src/vrows_abi.h). */
#define MEMRA_VROWS_PARAMS                                                                         \
    const int *sel, const float *selw, const float *mg, const float *mu, const float *md,          \
        memra_u64 pg, memra_u64 pu, memra_u64 pd, memra_u64 sg, memra_u64 su, memra_u64 sd,        \
        memra_u32 n_pairs, memra_u32 n_expert, memra_u64 *ptrs, float *scl, memra_u32 *faults
#define MEMRA_VROWS_ARGS                                                                           \
    sel, selw, mg, mu, md, pg, pu, pd, sg, su, sd, n_pairs, n_expert, ptrs, scl, faults

MEMRA_KERNEL memra_vrows_tables(MEMRA_VROWS_PARAMS)
{
    memra_vrows_body(1, MEMRA_VROWS_ARGS);
}

/* Reads and clears the fault word in one step on the device, so counts that
 * kernels on other streams add between a host read and a host reset cannot
 * be lost: each word is moved (atomicExch) into the caller's readback area
 * `out`. One thread. */
MEMRA_KERNEL memra_faults_take(memra_u32 *faults, memra_u32 *out)
{
    out[MEMRA_FAULT_BAD_EXPERT] = atomicExch(&faults[MEMRA_FAULT_BAD_EXPERT], 0u);
    out[MEMRA_FAULT_NONFINITE] = atomicExch(&faults[MEMRA_FAULT_NONFINITE], 0u);
    out[MEMRA_FAULT_FIRST_PAIR] = atomicExch(&faults[MEMRA_FAULT_FIRST_PAIR], 0xffffffffu);
}

#ifdef MEMRA_VROWS_VARIANT /* the benchmark's sweep compiles other widths */
MEMRA_KERNEL memra_vrows_tables_var(MEMRA_VROWS_PARAMS)
{
    memra_vrows_body(MEMRA_VROWS_VARIANT, MEMRA_VROWS_ARGS);
}
#endif
