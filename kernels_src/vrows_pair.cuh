/* memra: one pair's verify-rows tables, shared by the table kernel
 * (vrows.cu) and the routing kernels (route.cu). First in the source NVRTC
 * compiles for either; the host tests compile the same text as C
 * (tests/kernel_on_host.h supplies thread indices and atomics), so the mock
 * driver runs exactly the launch it was handed. Keep it to the common subset
 * of C and CUDA C++.
 *
 * NVRTC compiles with --fmad=false --ftz=false --prec-div=true
 * --prec-sqrt=true, so every multiply is the same IEEE binary32 operation as
 * the host arm's. */
#ifdef __CUDACC_RTC__
#define MEMRA_KERNEL extern "C" __global__ void
#define MEMRA_BOUNDS(threads) __launch_bounds__(threads)
/* ...and at least `blocks` of them resident on an SM (a register cap). */
#define MEMRA_BOUNDS_MIN(threads, blocks) __launch_bounds__(threads, blocks)
#define MEMRA_STATIC_ASSERT(c, why) static_assert(c, why)
typedef unsigned long long memra_u64;
typedef unsigned int memra_u32;
#define memra_as_bits(x) __float_as_uint(x)
#define memra_from_bits(x) __uint_as_float(x)
#define memra_mul_rn(a, b) __fmul_rn((a), (b))
#define MEMRA_RESTRICT __restrict__
#define MEMRA_UNROLL _Pragma("unroll")
#define MEMRA_DEVICE static __device__ __forceinline__
#endif

/* Programmatic dependent launch (memra_engine_set_pdl): a kernel launched
 * with programmatic stream serialization may start before the kernel ahead
 * of it has finished; griddepcontrol.wait holds it until that kernel is
 * complete and its memory visible, so every kernel here waits before its
 * first read or write of memory. launch_dependents lets the next kernel
 * start (it waits the same way). Both are no-ops when the launch was plain,
 * and below sm_90 they are not emitted at all. */
#if defined(__CUDACC_RTC__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define memra_grid_wait() asm volatile("griddepcontrol.wait;" ::: "memory")
#define memra_grid_launch_dependents()                                                             \
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#else
#define memra_grid_wait() ((void)0)
#define memra_grid_launch_dependents() ((void)0)
#endif

/* The canonical quiet NaN: NaN payloads are not portable (x86 propagates the
 * operand's, NVIDIA returns 0x7fffffff), so both arms write this one. */
#define MEMRA_QNAN_BITS 0x7fc00000u
#define MEMRA_EXP_MASK 0x7f800000u
/* A float's non-finite test by its bits (the caller's FTZ does not matter). */
#define MEMRA_VROWS_NONFINITE(x) ((memra_as_bits(x) & MEMRA_EXP_MASK) == MEMRA_EXP_MASK)

/* The fault word's layout is abi.h's (MEMRA_FAULT_*). */

/* The table arithmetic's inputs, as the kernel parameters carry them. */
typedef struct memra_vrows_ctx {
    const float *mg, *mu, *md; /* macro planes by slot, or NULL */
    memra_u64 pg, pu, pd;      /* slab bases */
    memra_u64 sg, su, sd;      /* slab strides */
    const int *map;            /* global expert -> local slot or -1, or NULL */
    memra_u32 n_expert, n_local, n_shared;
} memra_vrows_ctx;

/* One pair's tables: three pointers, three scales. */
typedef struct memra_vrows_out {
    memra_u64 g, u, d;
    float s0, s1, s2;
} memra_vrows_out;

/* Where expert `ex` lives: its slot (>= 0), MEMRA_SLOT_NOT_LOCAL, or
 * MEMRA_SLOT_BAD. Unsigned compares catch negative ids too. */
#define MEMRA_SLOT_NOT_LOCAL (-1)
#define MEMRA_SLOT_BAD (-2)
MEMRA_DEVICE int memra_vrows_slot(int ex, const memra_vrows_ctx *c)
{
    const memra_u32 u = (memra_u32)ex;
    if (u < c->n_expert) {
        if (!c->map)
            return ex;
        const int v = c->map[u];
        if (v == -1)
            return MEMRA_SLOT_NOT_LOCAL;
        return (memra_u32)v < c->n_local ? v : MEMRA_SLOT_BAD;
    }
    if (u - c->n_expert < c->n_shared)
        return (int)((c->map ? c->n_local : c->n_expert) + (u - c->n_expert));
    return MEMRA_SLOT_BAD;
}

/* A slot's three macro-plane values: 1.0f for a plane not given, and for
 * no slot (another rank's expert, a bad id), where nothing is read. */
typedef struct memra_vrows_macro {
    float g, u, d;
} memra_vrows_macro;

MEMRA_DEVICE memra_vrows_macro memra_vrows_macro_at(const memra_vrows_ctx *c, int slot)
{
    memra_vrows_macro m;
    m.g = c->mg && slot >= 0 ? c->mg[slot] : 1.0f;
    m.u = c->mu && slot >= 0 ? c->mu[slot] : 1.0f;
    m.d = c->md && slot >= 0 ? c->md[slot] : 1.0f;
    return m;
}

/* Plane q of a pair's tables (0: gate, 1: up, 2: down) given its slot
 * (memra_vrows_slot) and that plane's macro value: the pointer and the
 * scale (a NaN as it came: memra_vrows_pair_at makes it canonical).
 * memra_vrows_pair_at takes all three. */
MEMRA_DEVICE void memra_vrows_plane(int q, int slot, float w, const memra_vrows_ctx *c, float mq,
                                    memra_u64 *ptr, float *scale)
{
    const memra_u64 base = q == 0 ? c->pg : q == 1 ? c->pu : c->pd;
    const memra_u64 stride = q == 0 ? c->sg : q == 1 ? c->su : c->sd;
    /* Another rank's expert: nothing to read here, and a NULL pointer says
     * so to the GEMM. An out-of-range pair keeps slot 0's pointer (never
     * outside the slab) and a +0 scale, so it adds nothing to the GEMV.
     * Otherwise widen before multiplying: stride * slot passes 4 GiB in
     * serving slabs, and a 32-bit product here is the field failure memra
     * exists to prevent. */
    *ptr = slot == MEMRA_SLOT_NOT_LOCAL ? 0
           : slot < 0                   ? base
                                        : base + (memra_u64)(memra_u32)slot * stride;
    *scale = slot < 0 ? 0.0f : q == 2 ? memra_mul_rn(w, mq) : mq;
}

/* A NaN scale as the canonical NaN (x86 keeps an operand's payload, NVIDIA
 * returns its own): both arms write the one. */
MEMRA_DEVICE float memra_vrows_canon(float s)
{
    return (memra_as_bits(s) << 1) > (MEMRA_EXP_MASK << 1) ? memra_from_bits(MEMRA_QNAN_BITS) : s;
}

/* The faults of a pair with this slot whose scales are non-finite or not
 * (`nonfinite`), counted once a pair (the fault word tells the host):
 * another rank's expert apart from faults; a bad id and a non-finite scale
 * as faults, with the first such pair. */
MEMRA_DEVICE void memra_vrows_count(int slot, int nonfinite, memra_u32 p, memra_u32 *faults)
{
    if (slot == MEMRA_SLOT_NOT_LOCAL) {
        atomicAdd(&faults[MEMRA_FAULT_NOT_LOCAL], 1u);
    } else if (slot == MEMRA_SLOT_BAD || (slot >= 0 && nonfinite)) {
        atomicAdd(&faults[slot == MEMRA_SLOT_BAD ? MEMRA_FAULT_BAD_EXPERT : MEMRA_FAULT_NONFINITE],
                  1u);
        atomicMin(&faults[MEMRA_FAULT_FIRST_PAIR], p);
    }
}

/* One pair's tables given its slot (memra_vrows_slot) and the slot's macro
 * values: the team routing kernels read them ahead, while the experts are
 * still being chosen. */
MEMRA_DEVICE memra_vrows_out memra_vrows_pair_at(int slot, float w, memra_u32 p,
                                                 const memra_vrows_ctx *c, memra_u32 *faults,
                                                 memra_vrows_macro m)
{
    memra_vrows_out o;
    memra_vrows_plane(0, slot, w, c, m.g, &o.g, &o.s0);
    memra_vrows_plane(1, slot, w, c, m.u, &o.u, &o.s1);
    memra_vrows_plane(2, slot, w, c, m.d, &o.d, &o.s2);
    const int nonfinite =
        MEMRA_VROWS_NONFINITE(o.s0) || MEMRA_VROWS_NONFINITE(o.s1) || MEMRA_VROWS_NONFINITE(o.s2);
    memra_vrows_count(slot, nonfinite, p, faults);
    if (nonfinite) { /* rare: the canonical NaN only here */
        o.s0 = memra_vrows_canon(o.s0);
        o.s1 = memra_vrows_canon(o.s1);
        o.s2 = memra_vrows_canon(o.s2);
    }
    return o;
}

/* Pair p (expert ex, weight w): its slot, the planes read, the tables. */
MEMRA_DEVICE memra_vrows_out memra_vrows_pair(int ex, float w, memra_u32 p,
                                              const memra_vrows_ctx *c, memra_u32 *faults)
{
    const int slot = memra_vrows_slot(ex, c);
    return memra_vrows_pair_at(slot, w, p, c, faults, memra_vrows_macro_at(c, slot));
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
