/* memra: what the routing kernels share (route_block.cu, route_warp.cu):
 * the parameter list, and how a token's pairs are written. Concatenated after vrows_pair.cuh and
 * route_math.cuh into the source NVRTC compiles; the host tests run this same text as C with each
 * block's threads as coroutines (tests/kernel_on_host.h).
 *
 * Every kernel follows the host arm (src/route/route_host.c) operation for
 * operation where the order matters: the softmax sum is lane l's sum over
 * experts l, l+32, l+64, ... in that order, then the xor butterfly 16, 8,
 * 4, 2, 1 (docs/routing.md). Everything else (the max, the choice of groups
 * and experts) is comparisons under one total order, which any order of
 * comparing reaches alike, so each kernel selects in whatever way is fastest
 * for its shape. */
#define MEMRA_ROUTE_CAT_(a, b) a##b
#define MEMRA_ROUTE_CAT(a, b) MEMRA_ROUTE_CAT_(a, b)

/* A module for one layer spec (src/route/route.c, with specialisation on;
 * benchmarks/route_probe.py --spec-src): built with -DMEMRA_SPEC_E=...
 * (and _NG, _TG, _K, _FLAGS), the routing kernels take the parts of their
 * spec that a layer fixes as compile-time constants (the expert, group and
 * top-k counts, the scoring, dtype and weight flags), so their loops over
 * them unroll and their divisions by them fold; what a call chooses
 * (tables or not, the real-token count, the expert map, shared experts)
 * stays the launch's. The launcher passes the same values it compiled, so
 * the answer is the generic build's, bit for bit. Without the defines,
 * everything is the launch's. */
#ifdef MEMRA_SPEC_E
#define MEMRA_ROUTE_SPEC_CONSTANTS()                                                               \
    do {                                                                                           \
        n_expert = MEMRA_SPEC_E, n_group = MEMRA_SPEC_NG, topk_group = MEMRA_SPEC_TG;              \
        top_k = MEMRA_SPEC_K;                                                                      \
        flags =                                                                                    \
            (flags & MEMRA_ROUTE_FLAGS_OF_CALL) | (MEMRA_SPEC_FLAGS & ~MEMRA_ROUTE_FLAGS_OF_CALL); \
    } while (0)
#define MEMRA_ROUTE_BLOCK_WARPS ((MEMRA_SPEC_E + 31u) / 32u)
#define MEMRA_ROUTE_LAID(flags) ((MEMRA_SPEC_FLAGS & MEMRA_ROUTE_FLAG_LAYOUT) != 0u)
/* A spec's build knows whether its layer has a bias (the launcher passes
 * one exactly when the flag is set): a softmax family's build holds no
 * biased path, and a biased one no test of the pointer (DeepSeek-V3's
 * screened kernel 3,248 -> 2,920 sm_90 instructions). */
#define MEMRA_ROUTE_HAS_BIAS(bias) ((MEMRA_SPEC_FLAGS & MEMRA_ROUTE_FLAG_BIAS) != 0u)
#else
#define MEMRA_ROUTE_HAS_BIAS(bias) ((bias) != 0)
#define MEMRA_ROUTE_SPEC_CONSTANTS() ((void)0)
#define MEMRA_ROUTE_BLOCK_WARPS (blockDim.x >> 5)
#define MEMRA_ROUTE_LAID(flags) (((flags) & MEMRA_ROUTE_FLAG_LAYOUT) != 0u)
#endif

/* Launch flags: abi.h's MEMRA_ROUTE_FLAG_*. */

/* The parameters of every routing entry point (src/route/route_abi.h). */
#define MEMRA_ROUTE_PARAMS                                                                         \
    const void *logits, const void *bias, const float *mg, const float *mu, const float *md,       \
        memra_u64 pg, memra_u64 pu, memra_u64 pd, memra_u64 sg, memra_u64 su, memra_u64 sd,        \
        int *sel, float *selw, memra_u64 *ptrs, float *scl, memra_u32 *faults, const int *map,     \
        const void *n_real, memra_u32 n_tokens, memra_u32 n_expert, memra_u32 top_k,               \
        memra_u32 n_group, memra_u32 topk_group, memra_u32 flags, memra_u32 n_local,               \
        memra_u32 n_shared, float scale, float shared_weight, memra_layout_params lp
#define MEMRA_ROUTE_ARGS                                                                           \
    logits, bias, mg, mu, md, pg, pu, pd, sg, su, sd, sel, selw, ptrs, scl, faults, map, n_real,   \
        n_tokens, n_expert, top_k, n_group, topk_group, flags, n_local, n_shared, scale,           \
        shared_weight, lp

/* What every pair of a token needs to be written out. */
typedef struct memra_route_out {
    int *sel;
    float *selw;
    memra_u64 *ptrs;
    float *scl;
    memra_u32 *faults;
    memra_u32 n_pairs, K; /* all pairs; pairs per token (top_k + n_shared) */
    int tables;
    memra_vrows_ctx c;
} memra_route_out;

/* The token of the team of P lanes that thread `thread` of block `block`
 * (of `threads`, a multiple of P) belongs to, or n_tokens (past the batch):
 * in 64 bits, since a grid of 2^28 tokens of 32-lane teams has 2^33
 * threads, and a 32-bit index wrapped, leaving the tokens from 2^27 on
 * unrouted and routing the first ones twice. A 64-bit multiply-add, no
 * 64-bit division (a long subroutine on the GPU). */
MEMRA_DEVICE memra_u32 memra_route_team_token(memra_u32 block, memra_u32 threads, memra_u32 thread,
                                              memra_u32 P, memra_u32 n_tokens)
{
    const memra_u64 t = (memra_u64)block * (threads / P) + thread / P;
    return t < n_tokens ? (memra_u32)t : n_tokens;
}

/* Pair j of token t: sel, selw, and the tables exactly as memra_vrows_kernel
 * builds them from that sel and selw, given the pair's slot and macro
 * values (read ahead by the team kernels, and by the block kernel for the
 * shared experts). */
MEMRA_DEVICE void memra_route_emit_at(const memra_route_out *o, memra_u32 t, memra_u32 j, int e,
                                      float w, int slot, memra_vrows_macro m)
{
    const memra_u32 p = t * o->K + j;
    o->sel[p] = e;
    o->selw[p] = w;
    if (o->tables) {
        const memra_vrows_out v = memra_vrows_pair_at(slot, w, p, &o->c, o->faults, m);
        memra_vrows_store(v, p, o->n_pairs, o->ptrs, o->scl);
    }
}

/* The same, reading the slot and macro values now. */
MEMRA_DEVICE void memra_route_emit(const memra_route_out *o, memra_u32 t, memra_u32 j, int e,
                                   float w)
{
    const int slot = o->tables ? memra_vrows_slot(e, &o->c) : MEMRA_SLOT_BAD;
    memra_route_emit_at(o, t, j, e, w, slot, memra_vrows_macro_at(&o->c, slot));
}

/* A token with a non-finite logit or bias: experts 0..top_k-1, then its
 * shared experts, all with weight +0, every pair counted. */
MEMRA_DEVICE void memra_route_emit_bad(const memra_route_out *o, memra_u32 t, memra_u32 j,
                                       memra_u32 top_k)
{
    atomicAdd(&o->faults[MEMRA_FAULT_NONFINITE], 1u);
    atomicMin(&o->faults[MEMRA_FAULT_FIRST_PAIR], t * o->K + j);
    memra_route_emit(o, t, j, (int)(j < top_k ? j : o->c.n_expert + (j - top_k)), 0.0f);
}

#define MEMRA_ROUTE_OUT_INIT(o)                                                                    \
    memra_route_out o;                                                                             \
    o.sel = sel, o.selw = selw, o.ptrs = ptrs, o.scl = scl, o.faults = faults;                     \
    o.K = top_k + n_shared, o.n_pairs = n_tokens * o.K;                                            \
    o.tables = (flags & MEMRA_ROUTE_FLAG_NO_TABLES) == 0;                                          \
    o.c.mg = mg, o.c.mu = mu, o.c.md = md, o.c.pg = pg, o.c.pu = pu, o.c.pd = pd;                  \
    o.c.sg = sg, o.c.su = su, o.c.sd = sd, o.c.map = map, o.c.n_expert = n_expert;                 \
    o.c.n_local = n_local, o.c.n_shared = n_shared

#define MEMRA_ROUTE_DTYPE(flags)                                                                   \
    ((flags)&MEMRA_ROUTE_FLAG_BF16  ? MEMRA_DT_BF16                                                \
     : (flags)&MEMRA_ROUTE_FLAG_F16 ? MEMRA_DT_F16                                                 \
                                    : MEMRA_DT_F32)

/* Pair j of a padding row (t at or past the real-token count): no expert,
 * nothing read; one count of the row's K pairs, apart from faults. */
MEMRA_DEVICE void memra_route_emit_pad(const memra_route_out *o, memra_u32 t, memra_u32 j)
{
    const memra_u32 p = t * o->K + j;
    o->sel[p] = -1;
    o->selw[p] = 0.0f;
    if (o->tables) {
        memra_vrows_out v;
        v.g = 0, v.u = 0, v.d = 0;
        v.s0 = 0.0f, v.s1 = 0.0f, v.s2 = 0.0f;
        memra_vrows_store(v, p, o->n_pairs, o->ptrs, o->scl);
    }
    if (j == 0)
        atomicAdd(&o->faults[MEMRA_FAULT_PADDED], o->K);
}

/* Whether the weights need W, the routed scores' sum in rank order. */
#define MEMRA_ROUTE_NEEDS_SUM(flags)                                                               \
    (((flags) & (MEMRA_ROUTE_FLAG_RENORM | MEMRA_ROUTE_FLAG_SHARED_SUM)) != 0)

/* Pair j's weight: routed (j < top_k) from its unbiased score s; shared by
 * the spec's rule (`shared`: the constant weight, or SGLang's divisor under
 * MEMRA_ROUTE_FLAG_SHARED_SUM). W as memra_route_finish takes it. */
MEMRA_DEVICE float memra_route_weight(memra_u32 j, memra_u32 top_k, float s, float W,
                                      memra_u32 flags, float scale, float shared)
{
    const int renorm = (flags & MEMRA_ROUTE_FLAG_RENORM) != 0;
    if (j < top_k)
        return memra_route_finish(s, W, renorm, scale);
    if (flags & MEMRA_ROUTE_FLAG_SHARED_SUM)
        return memra_route_finish(memra_div_rn(W, shared), W, renorm, scale);
    return shared;
}

/* A sigmoid score within 2^-18 of memra_route_sigmoid's, in a fifth of its
 * instructions: the team kernel screens sigmoid scores with it and computes
 * memra's exact score only for the experts that can still be chosen
 * (route_warp.cu), so the answer is the exact program's. Built from IEEE
 * operations only (an explicit fma where it says so, no approximate
 * instruction), the same text on the host, so the mock screens exactly as
 * the GPU does and test_routing holds the bound: exp(-x) = 2^n p(r), the
 * exponent -x log2(e) clamped to +-115 and rounded once (2^-17.5 relative
 * at the ends), p a degree-5 Taylor polynomial of 2^r on |r| <= 1/2
 * (2^-18.7); 1 / (1 + e) by three Newton steps from a bit-pattern guess
 * (5% off, then 2^-34). The sigmoid's slope is at most 1/4. */
MEMRA_DEVICE float memra_route_sigmoid_screen(float x)
{
    float t = -x; /* NaN and +-inf come out clamped: the exponent below stays in range */
    t = t > -80.0f ? t : -80.0f;
    t = t < 80.0f ? t : 80.0f;
    const float y = memra_mul_rn(t, 1.44269504f); /* log2(e) */
    const float big = 12582912.0f;                /* 1.5 * 2^23: y + big rounds y */
    const float yb = memra_add_rn(y, big);
    const float nf = memra_sub_rn(yb, big);
    const float r = memra_sub_rn(y, nf); /* exact, |r| <= 1/2 */
    float p = 1.33335581e-3f;            /* ln(2)^k / k! */
    p = memra_fma_rn(p, r, 9.61812911e-3f);
    p = memra_fma_rn(p, r, 5.55041087e-2f);
    p = memra_fma_rn(p, r, 2.40226507e-1f);
    p = memra_fma_rn(p, r, 6.93147182e-1f);
    p = memra_fma_rn(p, r, 1.0f);
    /* 2^n from yb's bits (12582912 + n, |n| <= 116, one binade: its bits
     * are 0x4b400000 + n), not from (int)nf: the same n, by an integer add
     * where the conversion is one of the slow pipe's instructions (sixteen
     * a clock an SM on sm_90, against 128 adds), one an expert. */
    const float e =
        memra_mul_rn(p, memra_from_bits((memra_as_bits(yb) - 0x4b400000u + 127u) << 23));
    const float d = memra_add_rn(1.0f, e);
    float g = memra_from_bits(0x7ef311c7u - memra_as_bits(d));
    for (int i = 0; i < 3; i++)
        g = memra_fma_rn(g, memra_fma_rn(-d, g, 1.0f), g);
    return g;
}

/* A candidate's screened choice score may lie up to twice the bound below
 * the screened bound of the top_k-th best (docs/routing.md): 2^-17; 2^-12
 * leaves 32x to spare and still keeps a handful of candidates. */
#define MEMRA_ROUTE_SCREEN_MARGIN 0x1p-12f

/* The fused layout (memra_route_tables_ex, one launch): each block, its
 * pairs written, counts itself done on the layer's count (lp.ticket); the
 * last lays the whole batch out from sel (up to 256 tokens from a bitmap
 * of each expert's tokens, memra_layout_tokens; above, memra_layout_block;
 * `per`: the kernel's pairs a thread for the first), over the sentinel each
 * block writes first where those paths take it, in `scratch` (shared memory the
 * routing no longer needs, `words` 32-bit words), and sets the count back
 * to 0 for the layer's next call. Every thread of every block calls it,
 * after its last write of sel.
 *
 * The ordering is one acquire-release add by thread 0 between two
 * barriers (the pattern of a grid barrier): the barrier orders the block's
 * sel (and its share of the sentinel) before the add's release, and the
 * last block's acquire orders every block's sel before its reads, and the
 * sentinel before its own stores. A fence by every thread (fence.sc.gpu) cost
 * far more. A launch of one block is its own last: no count, no fence. */
MEMRA_DEVICE void memra_route_layout(memra_layout_params *lp, const int *sel, memra_u32 n_tokens,
                                     memra_u32 K, memra_u32 *scratch, memra_u32 words,
                                     memra_u32 per, int *last)
{
    if (!lp->ticket)
        return;
    /* The sentinel first where the bitmap or the small path takes the
     * batch (the block's share; the general path writes its own). */
    const memra_u32 W = memra_layout_token_words(lp, n_tokens, K, words, per);
    if (W)
        memra_layout_fill(lp, n_tokens * K);
    else
        memra_layout_prefill(lp, n_tokens * K);
    memra_block_sync();
    if (gridDim.x > 1u) {
        if (threadIdx.x == 0)
            *last = memra_atomic_add_acq_rel((memra_u32 *)lp->ticket, 1u) == gridDim.x - 1u;
        memra_block_sync();
        if (!*last)
            return; /* the whole block */
        if (threadIdx.x == 0)
            *(volatile memra_u32 *)lp->ticket = 0;
    }
    MEMRA_PROBE(10, "layout: the last block in");
    if (W)
        memra_layout_tokens(lp, sel, n_tokens, K, scratch, W, per);
    else
        memra_layout_block(lp, sel, n_tokens * K, scratch, words, 1);
}
