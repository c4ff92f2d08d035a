/* memra: the warp and block primitives every multi-thread kernel uses
 * (routing, the layout), by one name each: CUDA's intrinsics under NVRTC;
 * the host tests define the same names over their coroutine threads
 * (tests/kernel_on_host.h), so the mock runs the kernels' own text. */
#ifdef __CUDACC_RTC__
#define memra_warp_sync() __syncwarp()
#define memra_warp_any(p) __any_sync(0xffffffffu, (p))
#define memra_warp_ballot(p) __ballot_sync(0xffffffffu, (p))
#define memra_shfl_xor_f(v, o) __shfl_xor_sync(0xffffffffu, (v), (o))
#define memra_shfl_xor_u(v, o) __shfl_xor_sync(0xffffffffu, (v), (o))
#define memra_shfl_f(v, l) __shfl_sync(0xffffffffu, (v), (l))
#define memra_shfl_u(v, l) __shfl_sync(0xffffffffu, (v), (l))
#define memra_shfl_up_u(v, d) __shfl_up_sync(0xffffffffu, (v), (d))
#define memra_popc(x) __popc(x)
#define memra_ffs(x) __ffs(x)
#define memra_block_sync() __syncthreads()
#define memra_block_or(p) __syncthreads_or(p)
#define MEMRA_SHARED __shared__
typedef uint4 memra_u32x4; /* a 16-byte shared-memory load */
#if __CUDA_ARCH__ >= 800
#define memra_warp_max_u32(x) __reduce_max_sync(0xffffffffu, (x))
#define memra_warp_min_u32(x) __reduce_min_sync(0xffffffffu, (x))
#define memra_warp_or_u32(x) __reduce_or_sync(0xffffffffu, (x))
#else
MEMRA_DEVICE memra_u32 memra_warp_max_u32(memra_u32 x)
{
    for (int off = 16; off > 0; off >>= 1) {
        const memra_u32 o = __shfl_xor_sync(0xffffffffu, x, off);
        x = o > x ? o : x;
    }
    return x;
}
MEMRA_DEVICE memra_u32 memra_warp_min_u32(memra_u32 x)
{
    for (int off = 16; off > 0; off >>= 1) {
        const memra_u32 o = __shfl_xor_sync(0xffffffffu, x, off);
        x = o < x ? o : x;
    }
    return x;
}
MEMRA_DEVICE memra_u32 memra_warp_or_u32(memra_u32 x)
{
    for (int off = 16; off > 0; off >>= 1)
        x |= __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}
#endif
#define memra_match_any(v) __match_any_sync(0xffffffffu, (v))
/* An add with acquire-release semantics at GPU scope (PTX atom.acq_rel). */
MEMRA_DEVICE memra_u32 memra_atomic_add_acq_rel(memra_u32 *p, memra_u32 v)
{
    memra_u32 old;
    asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
}
#define memra_load_cg(p) __ldcg(p)
#define memra_atomic_add_u64(p, v) atomicAdd((p), (v))
#endif

/* x / d (d > 0) without an integer division, a long dependent chain on
 * the GPU, where d is a power of two, as engines' block sizes and models'
 * group counts and sizes are. The shift is d - 1's bit count, which the
 * compiler folds where d is a constant (a spec module's counts); a shift
 * by __ffs(d) it leaves to run time, and a division by it then too. */
MEMRA_DEVICE memra_u32 memra_udiv(memra_u32 x, memra_u32 d)
{
    return (d & (d - 1u)) == 0u ? x >> memra_popc(d - 1u) : x / d;
}

#ifdef __CUDACC_RTC__
#define MEMRA_NO_UNROLL _Pragma("unroll 1")
#else
#define MEMRA_NO_UNROLL
#endif

/* The bits that hold every value up to v (v's bit width: 0 for 0). */
MEMRA_DEVICE memra_u32 memra_bit_width(memra_u32 v)
{
    memra_u32 n = 0;
    while (n < 32u && (v >> n) != 0u)
        n++;
    return n;
}

/* The lanes holding the same value as this one, for values below
 * 2^nbits (every lane calls): a ballot a bit, each lane keeping the lanes
 * whose bit matches its own. __match_any_sync gives the same mask, but on
 * the H100 one costs about 600 cycles, and the layout asked for one every
 * 32 pairs (BENCHMARKS.md); nbits ballots (11 at most: the layout's
 * experts and its "none") are independent and each a few cycles. */
MEMRA_DEVICE memra_u32 memra_match_bits(memra_u32 v, memra_u32 nbits)
{
    memra_u32 same = 0xffffffffu;
    MEMRA_NO_UNROLL /* a routing module's spec would unroll it into each of its calls */
        for (memra_u32 b = 0; b < nbits; b++)
    { /* the same for the whole warp */
        const memra_u32 m = memra_warp_ballot((v >> b) & 1u);
        same &= (v >> b) & 1u ? m : ~m;
    }
    return same;
}

/* The phase probe (benchmarks/route_probe.py): built with -DMEMRA_ROUTE_PROBE,
 * lane 0 of every warp of block 0 of the block kernel records the SM clock
 * at each mark, in row `warp` (and warp 0 the global timer at the first and
 * at each later mark, so the last one reached, with or without a fused
 * layout, turns cycles into ns); shipped, the marks are nothing. Here
 * beside the other primitives because the fused layout (layout.cu) marks
 * its own phases (10-13). Every warp, because a barrier's wait shows only
 * in the slowest warp's arrival: a clock read right after __syncthreads may
 * issue before the barrier lets the warp go (it blocks at the first
 * instruction that needs it). Each mark names its phase where it stands:
 * the probe reads the names, this row's size and the last mark from the
 * source it compiles. The "memory" clobber keeps each mark after the
 * stores and loads the source puts before it. */
#if defined(MEMRA_ROUTE_PROBE) && defined(__CUDACC_RTC__)
#define MEMRA_PROBE_LAST 13
#define MEMRA_PROBE_ROW 16
__device__ memra_u64 memra_route_probe_clk[MEMRA_PROBE_ROW * (MEMRA_ABI_ROUTE_MAX_EXPERT / 32)];
#define MEMRA_PROBE(i, name)                                                                       \
    do {                                                                                           \
        if ((threadIdx.x & 31u) == 0 && blockIdx.x == 0) {                                         \
            memra_u64 *const row_ = memra_route_probe_clk + MEMRA_PROBE_ROW * (threadIdx.x >> 5);  \
            memra_u64 c_;                                                                          \
            asm volatile("mov.u64 %0, %%clock64;" : "=l"(c_)::"memory");                           \
            row_[i] = c_;                                                                          \
            if (threadIdx.x == 0) {                                                                \
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(c_)::"memory");                   \
                row_[(i) == 0 ? 14 : 15] = c_;                                                     \
            }                                                                                      \
        }                                                                                          \
    } while (0)
#elif !defined(MEMRA_PROBE) /* the host tests' runs of this text mark paths (kernel_on_host.h) */
#define MEMRA_PROBE(i, name) ((void)0)
#endif
