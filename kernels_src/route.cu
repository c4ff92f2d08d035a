/* memra: router logits to sel, selw and the verify-rows tables, one warp per
 * token, in one launch. Concatenated after vrows.cu and route_math.cuh into
 * the source NVRTC compiles; the host tests run this same text as C with
 * each warp's 32 lanes as threads (tests/kernel_on_host.h).
 *
 * The arithmetic is docs/routing.md's, step for step, and the host arm
 * (src/route_host.c) follows the same order: lane l holds experts l, l+32,
 * l+64, ...; a lane's partial max or sum runs over its experts in that
 * order; lanes combine by the xor butterfly 16, 8, 4, 2, 1. Everything else
 * (the choice of groups and experts) is comparisons under one total order,
 * which any order of comparing reaches alike. */
#ifdef __CUDACC_RTC__
#define memra_warp_sync() __syncwarp()
#define memra_warp_any(p) __any_sync(0xffffffffu, (p))
#define memra_shfl_xor_f(v, o) __shfl_xor_sync(0xffffffffu, (v), (o))
#define memra_shfl_f(v, l) __shfl_sync(0xffffffffu, (v), (l))
#define MEMRA_SHARED __shared__
#if __CUDA_ARCH__ >= 800
#define memra_warp_max_u32(x) __reduce_max_sync(0xffffffffu, (x))
#define memra_warp_min_u32(x) __reduce_min_sync(0xffffffffu, (x))
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
#endif
#endif

#define MEMRA_ROUTE_WARPS 4 /* tokens per block of 128 threads */
#ifdef __CUDACC_RTC__
#define MEMRA_UNROLL_N _Pragma("unroll 8")
#else
#define MEMRA_UNROLL_N
#endif
#define MEMRA_ROUTE_MAX_EXPERT 1024
#define MEMRA_ROUTE_SIGMOID 1u
#define MEMRA_ROUTE_BF16 2u
#define MEMRA_ROUTE_RENORM 4u
#define MEMRA_ROUTE_NO_INDEX 0x7fffffff

/* The larger of two values under a total order (equal values: the one with
 * the smaller bits, +0 before -0), so every lane of a butterfly keeps the
 * same bits. */
MEMRA_DEVICE float memra_route_max(float a, float b)
{
    return (b > a || (b == a && memra_as_bits(b) < memra_as_bits(a))) ? b : a;
}

/* A float's place in the expert order as an unsigned key: larger values
 * have larger keys, and +0 and -0 one key (they are equal scores, ranked by
 * index). The sentinel -inf has the smallest key of any value used. */
MEMRA_DEVICE memra_u32 memra_route_key(float v)
{
    memra_u32 b = memra_as_bits(v);
    if (b == 0x80000000u)
        b = 0;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* The index of the best (value, index) across the warp under
 * memra_route_better: the largest key, then the lowest index among the
 * lanes that hold it. Two warp reductions (redux.sync from sm_80, shuffles
 * before); comparisons only, so the winner is the same on any hardware. */
#define MEMRA_WARP_ARGMAX(v, i)                                                                    \
    do {                                                                                           \
        const memra_u32 k_ = memra_route_key(v);                                                   \
        const memra_u32 kmax_ = memra_warp_max_u32(k_);                                            \
        (i) = (int)memra_warp_min_u32(k_ == kmax_ ? (memra_u32)(i) : 0xffffffffu);                 \
    } while (0)

/* The parameters of both entry points (src/route_abi.h). */
#define MEMRA_ROUTE_PARAMS                                                                         \
    const void *logits, const float *bias, const float *mg, const float *mu, const float *md,      \
        memra_u64 pg, memra_u64 pu, memra_u64 pd, memra_u64 sg, memra_u64 su, memra_u64 sd,        \
        int *sel, float *selw, memra_u64 *ptrs, float *scl, memra_u32 *faults, memra_u32 n_tokens, \
        memra_u32 n_expert, memra_u32 top_k, memra_u32 n_group, memra_u32 topk_group,              \
        memra_u32 flags, float scale
#define MEMRA_ROUTE_ARGS                                                                           \
    logits, bias, mg, mu, md, pg, pu, pd, sg, su, sd, sel, selw, ptrs, scl, faults, n_tokens,      \
        n_expert, top_k, n_group, topk_group, flags, scale

MEMRA_DEVICE void memra_route_warp(const int tables, MEMRA_ROUTE_PARAMS)
{
    MEMRA_SHARED float s_all[MEMRA_ROUTE_WARPS][MEMRA_ROUTE_MAX_EXPERT];
    MEMRA_SHARED float c_all[MEMRA_ROUTE_WARPS][MEMRA_ROUTE_MAX_EXPERT];
    const memra_u32 lane = threadIdx.x & 31u, wib = threadIdx.x >> 5;
    const memra_u32 t = blockIdx.x * MEMRA_ROUTE_WARPS + wib;
    if (t >= n_tokens)
        return; /* the whole warp */
    float *s_sh = s_all[wib], *c_sh = c_all[wib];
    const memra_u32 E = n_expert, per = (E + 31u) / 32u;
    const int is_bf16 = (flags & MEMRA_ROUTE_BF16) != 0;

    /* 1. Logits; a token with any NaN or infinite logit is routed to
     *    experts 0..k-1 with weight +0 and counted. */
    int bad = 0;
    MEMRA_UNROLL_N
    for (memra_u32 i = 0; i < per; i++) {
        const memra_u32 e = lane + 32u * i;
        if (e < E) {
            const float x = memra_route_logit(logits, is_bf16, (memra_u64)t * E + e);
            bad |= (memra_as_bits(x) & MEMRA_EXP_MASK) == MEMRA_EXP_MASK;
            s_sh[e] = x;
        }
    }
    bad = memra_warp_any(bad);
    int my_e = (int)lane;
    float w = 0.0f;
    if (!bad) {
        /* 2. Scores. */
        if (flags & MEMRA_ROUTE_SIGMOID) {
            for (memra_u32 i = 0; i < per; i++) {
                const memra_u32 e = lane + 32u * i;
                if (e < E)
                    s_sh[e] = memra_route_sigmoid(s_sh[e]);
            }
        } else {
            float m = memra_from_bits(MEMRA_NEG_INF_BITS);
            for (memra_u32 i = 0; i < per; i++) {
                const memra_u32 e = lane + 32u * i;
                if (e < E)
                    m = memra_route_max(m, s_sh[e]);
            }
            for (int off = 16; off > 0; off >>= 1)
                m = memra_route_max(m, memra_shfl_xor_f(m, off));
            float v = 0.0f;
            for (memra_u32 i = 0; i < per; i++) {
                const memra_u32 e = lane + 32u * i;
                if (e < E) {
                    s_sh[e] = memra_expf(memra_sub_rn(s_sh[e], m));
                    v = memra_add_rn(v, s_sh[e]);
                }
            }
            for (int off = 16; off > 0; off >>= 1)
                v = memra_add_rn(v, memra_shfl_xor_f(v, off));
            for (memra_u32 i = 0; i < per; i++) {
                const memra_u32 e = lane + 32u * i;
                if (e < E)
                    s_sh[e] = memra_div_rn(s_sh[e], v);
            }
        }
        for (memra_u32 i = 0; i < per; i++) {
            const memra_u32 e = lane + 32u * i;
            if (e < E)
                c_sh[e] = bias ? memra_add_rn(s_sh[e], bias[e]) : s_sh[e];
        }
        memra_warp_sync();

        /* 3. Groups: a group's score is the sum of its two best choice
         *    scores (its one score when it has one expert); the best
         *    topk_group groups stay in play. */
        const memra_u32 G = E / n_group;
        memra_u32 allowed = 0xffffffffu;
        if (n_group > 1) {
            float gs = memra_from_bits(MEMRA_NEG_INF_BITS);
            if (lane < n_group) {
                float b1 = memra_from_bits(MEMRA_NEG_INF_BITS), b2 = b1;
                int i1 = MEMRA_ROUTE_NO_INDEX, i2 = MEMRA_ROUTE_NO_INDEX;
                MEMRA_UNROLL_N
                for (memra_u32 e = lane * G; e < lane * G + G; e++) {
                    const float c = c_sh[e];
                    if (memra_route_better(c, (int)e, b1, i1)) {
                        b2 = b1, i2 = i1;
                        b1 = c, i1 = (int)e;
                    } else if (memra_route_better(c, (int)e, b2, i2)) {
                        b2 = c, i2 = (int)e;
                    }
                }
                gs = G > 1 ? memra_add_rn(b1, b2) : b1;
            }
            allowed = 0;
            int taken = lane >= n_group;
            for (memra_u32 r = 0; r < topk_group; r++) {
                float v = taken ? memra_from_bits(MEMRA_NEG_INF_BITS) : gs;
                int g = taken ? MEMRA_ROUTE_NO_INDEX : (int)lane;
                MEMRA_WARP_ARGMAX(v, g);
                allowed |= 1u << g;
                taken |= g == (int)lane;
            }
        }

        /* 4. The top k of the experts in play, best first. `open` marks this
         *    lane's experts still in play and not yet chosen. */
        memra_u32 open = 0;
        for (memra_u32 i = 0; i < per; i++) {
            const memra_u32 e = lane + 32u * i;
            if (e < E && ((allowed >> (e / G)) & 1u))
                open |= 1u << i;
        }
        for (memra_u32 j = 0; j < top_k; j++) {
            float v = memra_from_bits(MEMRA_NEG_INF_BITS);
            int idx = MEMRA_ROUTE_NO_INDEX;
            MEMRA_UNROLL_N
            for (memra_u32 i = 0; i < per; i++) {
                const memra_u32 e = lane + 32u * i;
                if (((open >> i) & 1u) && memra_route_better(c_sh[e], (int)e, v, idx))
                    v = c_sh[e], idx = (int)e;
            }
            MEMRA_WARP_ARGMAX(v, idx);
            if ((memra_u32)idx % 32u == lane)
                open &= ~(1u << ((memra_u32)idx / 32u));
            if (j == lane)
                my_e = idx;
        }

        /* 5. Weights: the unbiased scores, optionally divided by their sum
         *    (taken in rank order, left to right), times the scaling. */
        w = lane < top_k ? s_sh[my_e] : 0.0f;
        if (flags & MEMRA_ROUTE_RENORM) {
            float sum = 0.0f;
            for (memra_u32 j = 0; j < top_k; j++)
                sum = memra_add_rn(sum, memra_shfl_f(w, (int)j));
            if (sum > 0.0f)
                w = memra_div_rn(w, sum);
        }
        w = memra_mul_rn(w, scale);
    } else if (lane < top_k) {
        atomicAdd(&faults[MEMRA_FAULT_NONFINITE], 1u);
        atomicMin(&faults[MEMRA_FAULT_FIRST_PAIR], t * top_k + lane);
    }

    /* 6. sel, selw, and the tables exactly as memra_vrows_tables builds
     *    them from that sel and selw. */
    if (lane < top_k) {
        const memra_u32 p = t * top_k + lane, n_pairs = n_tokens * top_k;
        sel[p] = my_e;
        selw[p] = w;
        if (tables) {
            const memra_vrows_out o =
                memra_vrows_pair(my_e, w, p, mg, mu, md, pg, pu, pd, sg, su, sd, n_expert, faults);
            memra_vrows_store(o, p, n_pairs, ptrs, scl);
        }
    }
}

MEMRA_KERNEL memra_route_tables(MEMRA_ROUTE_PARAMS)
{
    memra_route_warp(1, MEMRA_ROUTE_ARGS);
}

/* The same routing without the tables: the two-step path's first step, and
 * the benchmark's "top-k alone". */
MEMRA_KERNEL memra_route_topk(MEMRA_ROUTE_PARAMS)
{
    memra_route_warp(0, MEMRA_ROUTE_ARGS);
}
