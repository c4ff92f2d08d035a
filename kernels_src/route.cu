/* memra: router logits to sel, selw and the verify-rows tables in one
 * launch. Concatenated after vrows_pair.cuh and route_math.cuh into the
 * source NVRTC compiles; the host tests run this same text as C with each
 * block's threads as POSIX threads (tests/kernel_on_host.h).
 *
 * Two kernels, one arithmetic (docs/routing.md), chosen by n_tokens:
 *  - memra_route_block_kernel: one block per token, one thread per expert,
 *    for decode-sized batches, where latency is everything: every expert is
 *    scored at once, groups and experts are ranked by counting how many beat
 *    them (no serial rounds);
 *  - memra_route_warp_kernel: one warp per token, four tokens per block, for
 *    prefill, where throughput is: lane l holds experts l, l+32, ...
 * Both follow the host arm (src/route_host.c) operation for operation where
 * the order matters: the softmax sum is lane l's sum over experts l, l+32,
 * l+64, ... in that order, then the xor butterfly 16, 8, 4, 2, 1. Everything
 * else (the max, the choice of groups and experts) is comparisons under one
 * total order, which any order of comparing reaches alike. */
#ifdef __CUDACC_RTC__
#define memra_warp_sync() __syncwarp()
#define memra_warp_any(p) __any_sync(0xffffffffu, (p))
#define memra_warp_ballot(p) __ballot_sync(0xffffffffu, (p))
#define memra_shfl_xor_f(v, o) __shfl_xor_sync(0xffffffffu, (v), (o))
#define memra_shfl_xor_u(v, o) __shfl_xor_sync(0xffffffffu, (v), (o))
#define memra_shfl_f(v, l) __shfl_sync(0xffffffffu, (v), (l))
#define memra_block_sync() __syncthreads()
#define memra_block_or(p) __syncthreads_or(p)
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

#define MEMRA_ROUTE_WARPS 4 /* tokens per block of the warp kernel */
/* The logit loads are unrolled (eight in flight per lane); the other loops
 * are not: unrolling them bought little and cost compile time. */
#ifdef __CUDACC_RTC__
#define MEMRA_UNROLL_N _Pragma("unroll 8")
#define MEMRA_NO_UNROLL _Pragma("unroll 1")
#else
#define MEMRA_UNROLL_N
#define MEMRA_NO_UNROLL
#endif
#define MEMRA_ROUTE_NO_INDEX 0x7fffffff

/* The phase probe (benchmarks/route_probe.py): built with -DMEMRA_ROUTE_PROBE,
 * thread 0 of block 0 of the block kernel records the SM clock at each mark
 * (and the global timer at the first and last, to turn cycles into ns);
 * shipped, the marks are nothing. The "memory" clobber keeps each mark after
 * the stores and loads the source puts before it. */
#if defined(MEMRA_ROUTE_PROBE) && defined(__CUDACC_RTC__)
#define MEMRA_PROBE_LAST 8
__device__ memra_u64 memra_route_probe_clk[16];
#define MEMRA_PROBE(i)                                                                             \
    do {                                                                                           \
        if (threadIdx.x == 0 && blockIdx.x == 0) {                                                 \
            memra_u64 c_;                                                                          \
            asm volatile("mov.u64 %0, %%clock64;" : "=l"(c_)::"memory");                           \
            memra_route_probe_clk[i] = c_;                                                         \
            if ((i) == 0 || (i) == MEMRA_PROBE_LAST) {                                             \
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(c_)::"memory");                   \
                memra_route_probe_clk[(i) == 0 ? 14 : 15] = c_;                                    \
            }                                                                                      \
        }                                                                                          \
    } while (0)
#else
#define MEMRA_PROBE(i) ((void)0)
#endif

/* Launch flags: abi.h's MEMRA_ROUTE_FLAG_*. */

/* The larger of two values under a total order (equal values: the one with
 * the smaller bits, +0 before -0), so every lane of a butterfly keeps the
 * same bits. */
MEMRA_DEVICE float memra_route_max(float a, float b)
{
    return (b > a || (b == a && memra_as_bits(b) < memra_as_bits(a))) ? b : a;
}

/* memra_route_max's order as an unsigned key (-0 below +0), and back. */
MEMRA_DEVICE memra_u32 memra_route_max_key(float v)
{
    const memra_u32 b = memra_as_bits(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
MEMRA_DEVICE float memra_route_max_unkey(memra_u32 k)
{
    return memra_from_bits((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
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
    const void *logits, const void *bias, const float *mg, const float *mu, const float *md,       \
        memra_u64 pg, memra_u64 pu, memra_u64 pd, memra_u64 sg, memra_u64 su, memra_u64 sd,        \
        int *sel, float *selw, memra_u64 *ptrs, float *scl, memra_u32 *faults, const int *map,     \
        memra_u32 n_tokens, memra_u32 n_expert, memra_u32 top_k, memra_u32 n_group,                \
        memra_u32 topk_group, memra_u32 flags, memra_u32 n_local, memra_u32 n_shared, float scale, \
        float shared_weight
#define MEMRA_ROUTE_ARGS                                                                           \
    logits, bias, mg, mu, md, pg, pu, pd, sg, su, sd, sel, selw, ptrs, scl, faults, map, n_tokens, \
        n_expert, top_k, n_group, topk_group, flags, n_local, n_shared, scale, shared_weight

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

/* Pair j of token t: sel, selw, and the tables exactly as memra_vrows_kernel
 * builds them from that sel and selw, given the pair's slot and macro
 * values (read ahead by the block kernel). */
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

/* A module builds one kernel alone (-DMEMRA_ROUTE_ONLY_BLOCK or _WARP);
 * the host tests take both. */
#ifndef MEMRA_ROUTE_ONLY_BLOCK
/* ---- one warp per token ------------------------------------------------------ */

MEMRA_DEVICE void memra_route_warp(MEMRA_ROUTE_PARAMS)
{
    MEMRA_SHARED float s_all[MEMRA_ROUTE_WARPS][MEMRA_ABI_ROUTE_MAX_EXPERT];
    MEMRA_SHARED float c_all[MEMRA_ROUTE_WARPS][MEMRA_ABI_ROUTE_MAX_EXPERT];
    const memra_u32 lane = threadIdx.x & 31u, wib = threadIdx.x >> 5;
    const memra_u32 t = blockIdx.x * MEMRA_ROUTE_WARPS + wib;
    memra_grid_wait();
    memra_grid_launch_dependents();
    if (t >= n_tokens)
        return; /* the whole warp */
    MEMRA_ROUTE_OUT_INIT(o);
    float *s_sh = s_all[wib], *c_sh = c_all[wib];
    const memra_u32 E = n_expert, per = (E + 31u) / 32u;
    const int dt = MEMRA_ROUTE_DTYPE(flags), bias_dt = flags & MEMRA_ROUTE_FLAG_BIAS_BF16 ? 1 : 0;

    /* 1. Logits and bias; a token meeting a NaN or infinite one is routed to
     *    experts 0..k-1 with weight +0 and counted. */
    int bad = 0;
    MEMRA_UNROLL_N
    for (memra_u32 i = 0; i < per; i++) {
        const memra_u32 e = lane + 32u * i;
        if (e < E) {
            const float x = memra_route_load(logits, dt, (memra_u64)t * E + e);
            const float b = bias ? memra_route_load(bias, bias_dt, e) : 0.0f;
            bad |= (memra_as_bits(x) & MEMRA_EXP_MASK) == MEMRA_EXP_MASK;
            bad |= (memra_as_bits(b) & MEMRA_EXP_MASK) == MEMRA_EXP_MASK;
            s_sh[e] = x;
            c_sh[e] = b;
        }
    }
    bad = memra_warp_any(bad);
    if (bad) {
        if (lane < o.K)
            memra_route_emit_bad(&o, t, lane, top_k);
        return;
    }

    /* 2. Scores. */
    if (flags & MEMRA_ROUTE_FLAG_SIGMOID) {
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
            c_sh[e] = bias ? memra_add_rn(s_sh[e], c_sh[e]) : s_sh[e];
    }
    memra_warp_sync();

    /* 3. Groups: lane g scores group g (its two best choice scores, or its
     *    best); the best topk_group groups stay in play. */
    const memra_u32 G = E / n_group;
    memra_u32 allowed = 0xffffffffu;
    if (n_group > 1) {
        float gs = memra_from_bits(MEMRA_NEG_INF_BITS);
        if (lane < n_group) {
            memra_u32 k1 = 0, k2 = 0;
            MEMRA_NO_UNROLL
            for (memra_u32 e = lane * G; e < lane * G + G; e++)
                memra_route_top2_merge(&k1, &k2, memra_route_key(c_sh[e]), 0u);
            gs = memra_route_group_score(k1, k2, (flags & MEMRA_ROUTE_FLAG_GROUP_MAX) != 0, G);
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
    int my_e = 0;
    for (memra_u32 j = 0; j < top_k; j++) {
        float v = memra_from_bits(MEMRA_NEG_INF_BITS);
        int idx = MEMRA_ROUTE_NO_INDEX;
        MEMRA_NO_UNROLL
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
     *    (taken in rank order, left to right), times the scaling; the shared
     *    experts' as given. */
    float w = lane < top_k ? s_sh[my_e] : 0.0f;
    if (flags & MEMRA_ROUTE_FLAG_RENORM) {
        float sum = 0.0f;
        for (memra_u32 j = 0; j < top_k; j++)
            sum = memra_add_rn(sum, memra_shfl_f(w, (int)j));
        if (sum > 0.0f)
            w = memra_div_rn(w, sum);
    }
    w = memra_mul_rn(w, scale);
    if (lane >= top_k) {
        my_e = (int)(n_expert + (lane - top_k));
        w = shared_weight;
    }

    /* 6. sel, selw and the tables. */
    if (lane < o.K)
        memra_route_emit(&o, t, lane, my_e, w);
}

#endif /* MEMRA_ROUTE_ONLY_BLOCK */

#ifndef MEMRA_ROUTE_ONLY_WARP
/* ---- one block per token ------------------------------------------------------ */

#define MEMRA_ROUTE_MAX_WARPS (MEMRA_ABI_ROUTE_MAX_EXPERT / 32)

MEMRA_DEVICE void memra_route_block(MEMRA_ROUTE_PARAMS)
{
    MEMRA_SHARED float sh_s[MEMRA_ABI_ROUTE_MAX_EXPERT];      /* scores (softmax: the exps first) */
    MEMRA_SHARED memra_u32 sh_k[MEMRA_ABI_ROUTE_MAX_EXPERT];  /* choice keys, 0 when out of play */
    MEMRA_SHARED memra_u32 sh_p1[MEMRA_ABI_ROUTE_MAX_EXPERT]; /* group partials: best key, */
    MEMRA_SHARED memra_u32 sh_p2[MEMRA_ABI_ROUTE_MAX_EXPERT]; /* second best key */
    MEMRA_SHARED memra_u64 sh_cand[MEMRA_ABI_ROUTE_MAX_EXPERT];
    MEMRA_SHARED memra_u64 sh_thr[MEMRA_ROUTE_MAX_WARPS];
    MEMRA_SHARED memra_u32 sh_red[MEMRA_ROUTE_MAX_WARPS];
    MEMRA_SHARED memra_u32 sh_allowed, sh_n;
    MEMRA_SHARED float sh_sum;
    MEMRA_SHARED int sh_sel[32];
    MEMRA_SHARED float sh_w[32];
    MEMRA_SHARED int sh_slot[MEMRA_ABI_ROUTE_MAX_EXPERT]; /* each expert's slot and macro */
    MEMRA_SHARED memra_vrows_macro sh_mac[MEMRA_ABI_ROUTE_MAX_EXPERT]; /* values, read ahead */
    const memra_u32 tid = threadIdx.x, lane = tid & 31u, wid = tid >> 5, nw = blockDim.x >> 5;
    const memra_u32 t = blockIdx.x, E = n_expert;
    const int dt = MEMRA_ROUTE_DTYPE(flags), bias_dt = flags & MEMRA_ROUTE_FLAG_BIAS_BF16 ? 1 : 0;
    MEMRA_PROBE(0);
    memra_grid_wait();
    memra_grid_launch_dependents();
    MEMRA_ROUTE_OUT_INIT(o);
    if (tid == 0)
        sh_n = 0;

    /* 1. This thread's expert: logit and bias. */
    float x = 0.0f, b = 0.0f;
    int bad = 0;
    if (tid < E) {
        x = memra_route_load(logits, dt, (memra_u64)t * E + tid);
        b = bias ? memra_route_load(bias, bias_dt, tid) : 0.0f;
        bad = (memra_as_bits(x) & MEMRA_EXP_MASK) == MEMRA_EXP_MASK ||
              (memra_as_bits(b) & MEMRA_EXP_MASK) == MEMRA_EXP_MASK;
    }
    if (memra_block_or(bad)) {
        if (tid < o.K)
            memra_route_emit_bad(&o, t, tid, top_k);
        return; /* the whole block */
    }
    MEMRA_PROBE(1);
    /* The tables' inputs for every expert that may be chosen, and for the
     * shared experts their threads will write, asked for now: they arrive
     * while the experts are chosen (parked in shared memory before the
     * barrier of step 4) instead of after, when a decode step would wait a
     * whole memory round trip for them. */
    int my_slot = MEMRA_SLOT_BAD, pair_slot = MEMRA_SLOT_BAD; /* expert tid's; pair tid's */
    if (o.tables && tid < E)
        my_slot = memra_vrows_slot((int)tid, &o.c);
    if (o.tables && tid >= top_k && tid < o.K) /* a shared expert's pair */
        pair_slot = memra_vrows_slot((int)(n_expert + (tid - top_k)), &o.c);
    const memra_vrows_macro mine = memra_vrows_macro_at(&o.c, my_slot);
    memra_vrows_macro pair = memra_vrows_macro_at(&o.c, pair_slot);

    /* 2. Scores. The softmax max is a maximum under a total order, the same
     *    in any order; the sum is the fixed one: warp 0's lane l adds
     *    experts l, l+32, ... in order, then the butterfly. */
    float s = 0.0f;
    if (flags & MEMRA_ROUTE_FLAG_SIGMOID) {
        if (tid < E)
            s = memra_route_sigmoid(x);
    } else {
        const memra_u32 km = memra_warp_max_u32(tid < E ? memra_route_max_key(x) : 0u);
        if (lane == 0)
            sh_red[wid] = km;
        memra_block_sync();
        memra_u32 mk = 0;
        for (memra_u32 i = 0; i < nw; i++)
            mk = sh_red[i] > mk ? sh_red[i] : mk;
        const float m = memra_route_max_unkey(mk);
        const float ex = tid < E ? memra_expf(memra_sub_rn(x, m)) : 0.0f;
        if (tid < E)
            sh_s[tid] = ex;
        memra_block_sync();
        if (wid == 0) {
            float v = 0.0f;
            for (memra_u32 i = 0; i < nw; i++) {
                const memra_u32 e = lane + 32u * i;
                if (e < E)
                    v = memra_add_rn(v, sh_s[e]);
            }
            for (int off = 16; off > 0; off >>= 1)
                v = memra_add_rn(v, memra_shfl_xor_f(v, off));
            if (lane == 0)
                sh_sum = v;
        }
        memra_block_sync();
        if (tid < E)
            s = memra_div_rn(ex, sh_sum);
    }
    const float c = bias ? memra_add_rn(s, b) : s;
    if (tid < E)
        sh_s[tid] = s;
    MEMRA_PROBE(2);

    /* 3. Groups. Each group's two best choice scores come from partial
     *    top-2s (a warp's, a run of lanes', or single experts'), merged by
     *    lane g of warp 0, which scores group g and ranks it by counting. */
    const memra_u32 G = E / n_group;
    memra_u32 allowed = 0xffffffffu;
    if (n_group > 1) {
        const memra_u32 kc = tid < E ? memra_route_key(c) : 0u;
        memra_u32 parts;
        if (G % 32u == 0) { /* whole warps per group */
            /* The second best: the best again if two lanes hold it, else the
             * best of the rest (both asked at once, not one after the other). */
            const memra_u32 k1 = memra_warp_max_u32(kc);
            const memra_u32 held = memra_warp_ballot(kc == k1);
            const memra_u32 rest = memra_warp_max_u32(kc == k1 ? 0u : kc);
            const memra_u32 k2 = (held & (held - 1u)) ? k1 : rest;
            if (lane == 0)
                sh_p1[wid] = k1, sh_p2[wid] = k2;
            parts = G / 32u;
        } else if (32u % G == 0) { /* groups inside a warp: a butterfly per run */
            memra_u32 k1 = kc, k2 = 0;
            for (memra_u32 off = G / 2u; off > 0; off >>= 1) {
                const memra_u32 o1 = memra_shfl_xor_u(k1, (int)off);
                const memra_u32 o2 = memra_shfl_xor_u(k2, (int)off);
                memra_route_top2_merge(&k1, &k2, o1, o2);
            }
            if (lane % G == 0 && tid < E)
                sh_p1[tid / G] = k1, sh_p2[tid / G] = k2;
            parts = 1;
        } else { /* any other size: one partial per expert */
            if (tid < E)
                sh_p1[tid] = kc, sh_p2[tid] = 0;
            parts = G;
        }
        memra_block_sync();
        if (wid == 0) {
            memra_u32 gk = 0;
            if (lane < n_group) {
                memra_u32 k1 = 0, k2 = 0;
                for (memra_u32 i = 0; i < parts; i++)
                    memra_route_top2_merge(&k1, &k2, sh_p1[lane * parts + i],
                                           sh_p2[lane * parts + i]);
                gk = memra_route_key(
                    memra_route_group_score(k1, k2, (flags & MEMRA_ROUTE_FLAG_GROUP_MAX) != 0, G));
            }
            sh_red[lane] = gk;
            memra_warp_sync();
            memra_u32 rank = 0;
            for (memra_u32 h = 0; h < n_group; h++)
                rank += sh_red[h] > gk || (sh_red[h] == gk && h < lane);
            const memra_u32 mask = memra_warp_ballot(lane < n_group && rank < topk_group);
            if (lane == 0)
                sh_allowed = mask;
        }
        memra_block_sync();
        allowed = sh_allowed;
    }
    MEMRA_PROBE(3);

    /* 4. The experts. A key per expert (0 out of play); each expert's rank in
     *    its warp by counting; a warp's top_k-th best bounds the token's
     *    top_k-th best from below, so only warp candidates at or above the
     *    best such bound survive, and the survivors' ranks among themselves
     *    are the token's ranks. Keys tie by index: (key, ~index) as one
     *    64-bit number orders both. */
    const memra_u32 ke = tid < E && ((allowed >> (tid / G)) & 1u) ? memra_route_key(c) : 0u;
    sh_k[tid] = ke;
    memra_warp_sync();
    memra_u32 r = 0;
    for (memra_u32 j = 0; j < 32u; j++) {
        const memra_u32 kj = sh_k[32u * wid + j];
        r += kj > ke || (kj == ke && j < lane);
    }
    const memra_u64 me = ((memra_u64)ke << 32) | (memra_u64)(~tid);
    if (r == top_k - 1u)
        sh_thr[wid] = me;
    if (o.tables && tid < E)
        sh_slot[tid] = my_slot, sh_mac[tid] = mine;
    memra_block_sync();
    MEMRA_PROBE(4);
    if (r < top_k) {
        memra_u64 tau = 0;
        for (memra_u32 i = 0; i < nw; i++)
            tau = sh_thr[i] > tau ? sh_thr[i] : tau;
        if (me >= tau)
            sh_cand[atomicAdd(&sh_n, 1u)] = me;
    }
    memra_block_sync();
    MEMRA_PROBE(5);
    const memra_u32 n = sh_n;
    if (tid < n) {
        const memra_u64 p = sh_cand[tid];
        memra_u32 rank = 0;
        for (memra_u32 u = 0; u < n; u++)
            rank += sh_cand[u] > p;
        if (rank < top_k) {
            const int e = (int)~(memra_u32)p;
            sh_sel[rank] = e;
            sh_w[rank] = sh_s[e];
        }
    }
    memra_block_sync();
    MEMRA_PROBE(6);

    /* 5. Weights as the warp kernel's, then 6. the pairs. */
    if (tid < o.K) {
        int e;
        float w;
        if (tid < top_k) {
            e = sh_sel[tid];
            w = sh_w[tid];
            if (o.tables)
                pair_slot = sh_slot[e], pair = sh_mac[e];
            if (flags & MEMRA_ROUTE_FLAG_RENORM) {
                float sum = 0.0f;
                for (memra_u32 j = 0; j < top_k; j++)
                    sum = memra_add_rn(sum, sh_w[j]);
                if (sum > 0.0f)
                    w = memra_div_rn(w, sum);
            }
            w = memra_mul_rn(w, scale);
        } else {
            e = (int)(n_expert + (tid - top_k));
            w = shared_weight;
        }
        MEMRA_PROBE(7);
        memra_route_emit_at(&o, t, tid, e, w, pair_slot, pair);
        MEMRA_PROBE(8);
    }
}

#endif /* MEMRA_ROUTE_ONLY_WARP */

#ifndef MEMRA_ROUTE_ONLY_BLOCK
MEMRA_KERNEL memra_route_warp_kernel(MEMRA_ROUTE_PARAMS)
{
    memra_route_warp(MEMRA_ROUTE_ARGS);
}
#endif

#ifndef MEMRA_ROUTE_ONLY_WARP
MEMRA_KERNEL memra_route_block_kernel(MEMRA_ROUTE_PARAMS)
{
    memra_route_block(MEMRA_ROUTE_ARGS);
}
#endif
