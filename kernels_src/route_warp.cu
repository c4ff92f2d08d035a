/* memra: routing by teams of lanes, for throughput (prefill) and for small
 * expert counts at any batch size. Compiled once per MEMRA_ROUTE_M, the most
 * experts a lane holds (kernels_src/meson.build: one module each, compiled
 * at its first use), as memra_route_warp<M>_kernel.
 *
 *  - M = 1 (n_expert <= 32): a team of P lanes per token, P the power of two
 *    at or above n_expert, 32 / P tokens per warp, lane l of a team holding
 *    expert l. Experts are ranked by counting over the team.
 *  - M > 1 (n_expert up to 32 M, M up to 16): a warp per token, lane l holding experts
 *    l, l+32, ..., l+32(M-1) in registers (the screened build of a grouped family: its m
 *    experts side by side, l m to l m + m - 1). The top_k-th best of the lanes'
 *    best values bounds the token's top_k-th best from below, so only the
 *    experts at or above it are candidates; they are gathered into shared
 *    memory in order and ranked by counting among themselves (more than 32:
 *    top_k rounds of a warp arg-max instead, the same answer).
 *    Sigmoid scores are screened first: a fast score within 2^-17 of memra's
 *    (memra_route_sigmoid_screen) ranks the experts, and memra's exact score
 *    is computed only for those within the screening margin of a bound that
 *    decides: a group's second best (gathered so that each lane computes
 *    about one), the top_k-th best (each candidate by the lane that ranks
 *    it). Every choice is then made on exact scores
 *    (docs/routing.md has the argument), so the answer is bit for bit the
 *    unscreened one.
 * Either way the softmax sum is the fixed one: with P lanes and n_expert <=
 * P, the xor butterfly over the team's lanes is the 32-lane butterfly of
 * docs/routing.md with its zero lanes left out (x + 0 is x for the sums of
 * exps met here). Every lane reaches every warp collective: a team whose
 * token is padding, past the batch or non-finite computes on with zeros and
 * only its writes differ. */

#ifndef MEMRA_ROUTE_M
#define MEMRA_ROUTE_M 1
#endif
/* MEMRA_ROUTE_SCREEN: the screened build (sigmoid only, M > 1), a kernel of
 * its own: memra_route_sig<M>_kernel. */
#ifndef MEMRA_ROUTE_SCREEN
#define MEMRA_ROUTE_SCREEN 0
#endif
#if MEMRA_ROUTE_SCREEN
#define MEMRA_RW_FN(name) MEMRA_ROUTE_CAT(MEMRA_ROUTE_CAT(name, _sig), MEMRA_ROUTE_M)
#define MEMRA_RW_KERNEL MEMRA_ROUTE_CAT(MEMRA_ROUTE_CAT(memra_route_sig, MEMRA_ROUTE_M), _kernel)
#else
#define MEMRA_RW_FN(name) MEMRA_ROUTE_CAT(name, MEMRA_ROUTE_M)
#define MEMRA_RW_KERNEL MEMRA_ROUTE_CAT(MEMRA_ROUTE_CAT(memra_route_warp, MEMRA_ROUTE_M), _kernel)
#endif

#ifndef MEMRA_ROUTE_TEAM_WARPS
#define MEMRA_ROUTE_TEAM_WARPS 4 /* warps per block */
#define MEMRA_ROUTE_EXACT_MAX 64 /* exact scores a screened pass gathers at a time */
#endif

/* Per warp, shared by the steps below. */
typedef struct MEMRA_RW_FN(memra_rw_shared) {
    memra_u32 k[32 * MEMRA_ROUTE_M]; /* keys for the groups' scan */
    float gthr[32];                  /* each group's screening bound */
    float x[MEMRA_ROUTE_EXACT_MAX];  /* a screened pass's logits, then exact scores;
                                        the candidates' bias */
    memra_u64 cand[33];              /* candidates: (key, ~expert); 32: a sink */
    float cs[33];                    /* their scores */
    int we[32];                      /* winners by rank: expert, score, tables */
    float ws[32];
    int wslot[32];
    memra_vrows_macro wmac[32];
} MEMRA_RW_FN(memra_rw_shared);

/* The exact scores (and choice scores) of the lanes' experts in `need`
 * (bit i: the lane's slot i), gathered across the warp so each lane
 * computes about one, MEMRA_ROUTE_EXACT_MAX at a time (an input of near
 * ties may need them all). The bias comes from the registers step 1 loaded
 * it into (`b`; `has_bias`), not from memory again. Returns `need`. */
MEMRA_DEVICE memra_u32 MEMRA_RW_FN(memra_rw_exact)(const float *x, const float *b, int has_bias,
                                                   float *s, float *c, memra_u32 need,
                                                   memra_u32 lane, float *buf)
{
    enum { M = MEMRA_ROUTE_M };
    const memra_u32 n = memra_popc(need);
    memra_u32 incl = n;
    for (int d = 1; d < 32; d <<= 1) {
        const memra_u32 up = memra_shfl_up_u(incl, d);
        incl += lane >= (memra_u32)d ? up : 0u;
    }
    const memra_u32 total = memra_shfl_u(incl, 31), first = incl - n;
    for (memra_u32 lo = 0; lo < total; lo += MEMRA_ROUTE_EXACT_MAX) {
        memra_u32 at = first;
        MEMRA_UNROLL
        for (int i = 0; i < M; i++)
            if ((need >> i) & 1u) {
                if (at - lo < MEMRA_ROUTE_EXACT_MAX)
                    buf[at - lo] = x[i];
                at++;
            }
        memra_warp_sync();
        for (memra_u32 q = lo + lane; q < total && q < lo + MEMRA_ROUTE_EXACT_MAX; q += 32u)
            buf[q - lo] = memra_route_sigmoid(buf[q - lo]);
        memra_warp_sync();
        at = first;
        MEMRA_UNROLL
        for (int i = 0; i < M; i++)
            if ((need >> i) & 1u) {
                if (at - lo < MEMRA_ROUTE_EXACT_MAX) {
                    s[i] = buf[at - lo];
                    c[i] = has_bias ? memra_add_rn(s[i], b[i]) : s[i];
                }
                at++;
            }
        memra_warp_sync();
    }
    return need;
}

/* The block's per-warp state, one buffer: the fused layout reuses it once
 * the block's pairs are written (memra_route_layout). */
typedef union MEMRA_RW_FN(memra_rw_block) {
    MEMRA_RW_FN(memra_rw_shared) w[MEMRA_ROUTE_TEAM_WARPS];
    memra_u32 words[MEMRA_ROUTE_TEAM_WARPS * sizeof(MEMRA_RW_FN(memra_rw_shared)) / 4];
} MEMRA_RW_FN(memra_rw_block);
MEMRA_SHARED MEMRA_RW_FN(memra_rw_block) MEMRA_RW_FN(memra_rw_sh);
MEMRA_SHARED int MEMRA_RW_FN(memra_rw_last);
/* The fused layout's counts fit the buffer for the most experts this
 * kernel routes (32 a lane) and the shared ones: a smaller buffer would
 * make memra_layout_block's warp count wrap. */
MEMRA_STATIC_ASSERT(sizeof(MEMRA_RW_FN(memra_rw_block)) / 4u >=
                        MEMRA_LAYOUT_BLOCK_WORDS(32u * MEMRA_ROUTE_M + 32u, 1u),
                    "the team kernel's shared buffer holds the fused layout's counts");

/* The best topk_group of the team's n_group groups by score (lane base + g
 * holds group g's as a key `gk`; the lower group on a tie): bit g. */
MEMRA_DEVICE memra_u32 MEMRA_RW_FN(memra_rw_groups)(memra_u32 gk, memra_u32 tl, memra_u32 base,
                                                    memra_u32 n_group, memra_u32 topk_group)
{
    memra_u32 rank = 0;
    for (memra_u32 h = 0; h < n_group; h++) {
        const memra_u32 kh = memra_shfl_u(gk, (int)(base + h));
        rank += kh > gk || (kh == gk && h < tl);
    }
    return memra_warp_ballot(tl < n_group && rank < topk_group) >> base;
}

/* Step 1 of either form of a team: the logits and bias of a lane's experts
 * tl + stride i (i < cap; those below `held` and the expert count: the
 * returned bits), loaded before the real-token count is known (a load of
 * its own: waiting for it first would put a memory round trip ahead of the
 * logits); a padding row's are then set to zero. `*real`: token t is a real
 * one; `*bad`: an input no score is made of in any lane of the team
 * (`tmask`): a NaN logit (softmax: or +inf), a non-finite bias. */
MEMRA_DEVICE memra_u32 MEMRA_RW_FN(memra_rw_load)(const void *logits, int dt, const void *bias,
                                                  int bias_dt, const void *n_real, memra_u32 flags,
                                                  memra_u32 n_tokens, memra_u32 t, memra_u32 E,
                                                  memra_u32 tl, memra_u32 stride, memra_u32 held,
                                                  int cap, memra_u32 tmask, float *x, float *b,
                                                  float *s, int *real, int *bad)
{
    const int live = t < n_tokens;
    memra_u32 valid = 0;
    MEMRA_UNROLL
    for (int i = 0; i < cap; i++) {
        const memra_u32 e = tl + stride * (memra_u32)i;
        x[i] = 0.0f, b[i] = 0.0f, s[i] = 0.0f;
        if ((memra_u32)i < held && e < E)
            valid |= 1u << i;
        if (live && ((valid >> i) & 1u)) {
            x[i] = memra_route_load(logits, dt, (memra_u64)t * E + e);
            b[i] = MEMRA_ROUTE_HAS_BIAS(bias) ? memra_route_load(bias, bias_dt, e) : 0.0f;
        }
    }
    *real =
        live && t < memra_route_n_real(n_real, (flags & MEMRA_ROUTE_FLAG_NREAL_I64) != 0, n_tokens);
    /* `some`: a logit above -inf; softmax has none without one. With
     * several experts a lane (M > 1) asked here, by a ballot; a team of
     * lanes of one expert each asks its max (memra_rw_max), fewer
     * instructions there, where this costs the M > 1 builds registers
     * (Qwen3-MoE's 32 -> 40, sm_90). */
    int any = 0, some = 0;
    const int sigmoid = (flags & MEMRA_ROUTE_FLAG_SIGMOID) != 0;
    MEMRA_UNROLL
    for (int i = 0; i < cap; i++) {
        x[i] = *real ? x[i] : 0.0f, b[i] = *real ? b[i] : 0.0f;
        any |= memra_route_logit_bad(x[i], sigmoid) || MEMRA_VROWS_NONFINITE(b[i]);
        if (MEMRA_ROUTE_M > 1)
            some |= ((valid >> i) & 1u) && memra_as_bits(x[i]) != MEMRA_NEG_INF_BITS;
    }
    *bad = (memra_warp_ballot(any) & tmask) != 0 ||
           (MEMRA_ROUTE_M > 1 && !sigmoid && (memra_warp_ballot(some) & tmask) == 0);
    return valid;
}

/* The keys of a lane's choice scores c (bit i of `in`: c[i] in play; the
 * rest 0, "none"). Without a bias a choice score is a score, +0 or more:
 * memra_route_key_nonneg's one OR, chosen once for the lane's keys. */
MEMRA_DEVICE void MEMRA_RW_FN(memra_rw_keys)(const float *c, memra_u32 in, int has_bias,
                                             memra_u32 *key)
{
    enum { M = MEMRA_ROUTE_M };
    if (has_bias) {
        MEMRA_UNROLL
        for (int i = 0; i < M; i++)
            key[i] = (in >> i) & 1u ? memra_route_key(c[i]) : 0u;
    } else {
        MEMRA_UNROLL
        for (int i = 0; i < M; i++)
            key[i] = (in >> i) & 1u ? memra_route_key_nonneg(c[i]) : 0u;
    }
}

/* The sigmoid scores of a lane's valid experts (bit i of `valid`: x[i]). */
MEMRA_DEVICE void MEMRA_RW_FN(memra_rw_sigmoids)(const float *x, float *s, memra_u32 valid, int cap)
{
    MEMRA_UNROLL
    for (int i = 0; i < cap; i++)
        if ((valid >> i) & 1u)
            s[i] = memra_route_sigmoid(x[i]);
}

/* The largest of a team's valid logits, which softmax subtracts: each
 * lane's by key, then across the team's `lanes` lanes (a whole warp in one
 * reduction). The same value in any order of comparing. */
MEMRA_DEVICE float MEMRA_RW_FN(memra_rw_max)(const float *x, memra_u32 valid, int cap,
                                             memra_u32 lanes)
{
    memra_u32 mk = 0;
    MEMRA_UNROLL
    for (int i = 0; i < cap; i++)
        if ((valid >> i) & 1u) {
            const memra_u32 ki = memra_route_max_key(x[i]);
            mk = ki > mk ? ki : mk;
        }
    if (lanes == 32u) {
        mk = memra_warp_max_u32(mk);
    } else {
        for (memra_u32 off = lanes / 2u; off > 0; off >>= 1) {
            const memra_u32 other = memra_shfl_xor_u(mk, (int)off);
            mk = other > mk ? other : mk;
        }
    }
    return memra_route_max_unkey(mk);
}

#if MEMRA_ROUTE_M == 1
/* Several experts a lane (prefill: MEMRA_ROUTE_FLAG_FEW_LANES): a token of
 * one group takes Q lanes (abi.h's MEMRA_ROUTE_TEAM_LANES), each holding
 * experts tl, tl + Q, ... (up to
 * MEMRA_ROUTE_TEAM_V of them), where the team of P lanes gives each lane
 * one. Fewer shuffles a token (Mixtral: 6 where eight lanes take 14), and
 * the lane's exps overlap (the select form, its division branch-free). The
 * softmax sum is the same tree: its levels P / 2 down to Q pair experts of
 * one lane, the rest cross lanes as the team's butterfly. The experts are
 * chosen by top_k rounds of a team arg-max (the larger key, then the lower
 * expert: rank order). */
MEMRA_DEVICE void memra_rw_many(MEMRA_ROUTE_PARAMS, memra_u32 P, memra_u32 Q)
{
    enum { V = MEMRA_ROUTE_TEAM_V };
    MEMRA_RW_FN(memra_rw_shared) *const sh = &MEMRA_RW_FN(memra_rw_sh).w[threadIdx.x >> 5];
    const memra_u32 E = n_expert, lane = threadIdx.x & 31u, base = lane & ~(Q - 1u);
    const memra_u32 tl = lane & (Q - 1u), nv = P / Q; /* lane - base, written so the
                                                        compiler knows it below Q */
    const memra_u32 t = memra_route_team_token(blockIdx.x, blockDim.x, threadIdx.x, Q, n_tokens);
    const int dt = MEMRA_ROUTE_DTYPE(flags), bias_dt = flags & MEMRA_ROUTE_FLAG_BIAS_BF16 ? 1 : 0;
    const int sigmoid = (flags & MEMRA_ROUTE_FLAG_SIGMOID) != 0,
              has_bias = MEMRA_ROUTE_HAS_BIAS(bias);
    (void)lp, (void)n_group, (void)topk_group;
    memra_grid_wait();
    memra_grid_launch_dependents();
    MEMRA_ROUTE_OUT_INIT(o);
    const memra_u32 K = o.K;
    const int live = t < n_tokens;
    int *we = &sh->we[base];
    float *ws = &sh->ws[base];
    float x[V], b[V], s[V], acc[V];
    memra_u32 key[V];
    int real, bad;
    const memra_u32 valid = MEMRA_RW_FN(memra_rw_load)(
        logits, dt, bias, bias_dt, n_real, flags, n_tokens, t, E, tl, Q, nv, V,
        Q == 32u ? 0xffffffffu : ((1u << Q) - 1u) << base, x, b, s, &real, &bad);
    if (sigmoid) {
        MEMRA_RW_FN(memra_rw_sigmoids)(x, s, valid, V);
    } else {
        const float mx = MEMRA_RW_FN(memra_rw_max)(x, valid, V, Q);
        bad |= memra_as_bits(mx) == MEMRA_NEG_INF_BITS; /* every logit -inf: no softmax */
        MEMRA_UNROLL
        for (int v = 0; v < V; v++) {
            acc[v] = 0.0f;
            if ((valid >> v) & 1u) {
                /* a lane's exps overlap; x - mx is never above zero */
                s[v] = memra_expf_nonpos(memra_sub_rn(x[v], mx));
                acc[v] = memra_add_rn(0.0f, s[v]);
            }
        }
        MEMRA_UNROLL
        for (int w = V / 2; w > 0; w >>= 1) { /* the levels inside a lane */
            if ((memra_u32)w >= nv)
                continue;
            MEMRA_UNROLL
            for (int v = 0; v < w; v++)
                acc[v] = memra_add_rn(acc[v], acc[v + w]);
        }
        float sum = acc[0];
        for (memra_u32 off = Q / 2u; off > 0; off >>= 1)
            sum = memra_add_rn(sum, memra_shfl_xor_f(sum, (int)off));
        MEMRA_UNROLL
        for (int v = 0; v < V; v++)
            if ((valid >> v) & 1u)
                s[v] = memra_div_rn(s[v], sum);
    }
    MEMRA_UNROLL
    for (int v = 0; v < V; v++)
        key[v] =
            (valid >> v) & 1u ? memra_route_key(has_bias ? memra_add_rn(s[v], b[v]) : s[v]) : 0u;
    memra_u32 taken = 0;
    for (memra_u32 j = 0; j < top_k; j++) {
        memra_u32 bk = 0, be = 0xffffffffu;
        MEMRA_UNROLL
        for (int v = 0; v < V; v++)
            if (!((taken >> v) & 1u) && key[v] > bk)
                bk = key[v], be = tl + Q * (memra_u32)v;
        for (memra_u32 off = Q / 2u; off > 0; off >>= 1) {
            const memra_u32 ok = memra_shfl_xor_u(bk, (int)off),
                            oe = memra_shfl_xor_u(be, (int)off);
            if (ok > bk || (ok == bk && oe < be))
                bk = ok, be = oe;
        }
        if (bk && (be & (Q - 1u)) == tl) {
            MEMRA_UNROLL
            for (int v = 0; v < V; v++)
                if (be == tl + Q * (memra_u32)v) {
                    taken |= 1u << v;
                    we[j] = (int)be, ws[j] = s[v];
                }
        }
    }
    memra_warp_sync();
    float W = 0.0f;
    if (MEMRA_ROUTE_NEEDS_SUM(flags))
        for (memra_u32 j = 0; j < top_k; j++)
            W = memra_add_rn(W, ws[j]);
    for (memra_u32 j = tl; live && j < K; j += Q) {
        if (!real) {
            memra_route_emit_pad(&o, t, j);
        } else if (bad) {
            memra_route_emit_bad(&o, t, j, top_k);
        } else {
            /* The pair's slot and macro values are read here, for the one
             * expert the lane writes, not ahead for each of its V experts
             * (the 4 x 4 reads and their branches were a quarter of this
             * form's instructions: Mixtral's spec build 2,424 -> 1,912 sm_90
             * instructions). */
            memra_route_emit(&o, t, j, j < top_k ? we[j] : (int)(E + (j - top_k)),
                             memra_route_weight(j, top_k, j < top_k ? ws[j] : 0.0f, W, flags, scale,
                                                shared_weight));
        }
    }
}
#endif

MEMRA_DEVICE void MEMRA_RW_FN(memra_route_warp_body)(MEMRA_ROUTE_PARAMS)
{
    enum { M = MEMRA_ROUTE_M };
    MEMRA_ROUTE_SPEC_CONSTANTS();
#if MEMRA_ROUTE_M == 1
    {
        const memra_u32 P2 = MEMRA_ABI_POW2_32(n_expert);
        const memra_u32 Q = MEMRA_ROUTE_TEAM_LANES(n_expert, n_group, top_k, flags);
        if (Q < P2) {
            /* Q is the few-lanes form's here: written as the constant it
             * is in a spec's build (the call's flag left out), the lanes'
             * expert loops and validity tests fold. */
            memra_rw_many(MEMRA_ROUTE_ARGS, P2,
                          MEMRA_ROUTE_TEAM_LANES(n_expert, 1u, top_k, MEMRA_ROUTE_FLAG_FEW_LANES));
            return;
        }
    }
#endif
    MEMRA_RW_FN(memra_rw_shared) *const sh_all = MEMRA_RW_FN(memra_rw_sh).w;
    const memra_u32 E = n_expert;
    /* The team: P lanes from lane `base` of the warp. */
    memra_u32 P = 32;
    if (M == 1)
        for (P = 1; P < E; P <<= 1)
            ;
    const memra_u32 lane = threadIdx.x & 31u, wib = threadIdx.x >> 5, base = lane & ~(P - 1u);
    const memra_u32 tl = lane - base;
    const memra_u32 t = memra_route_team_token(blockIdx.x, blockDim.x, threadIdx.x, P, n_tokens);
    const memra_u32 m = M == 1 ? 1u : (E + 31u) / 32u;
    const int dt = MEMRA_ROUTE_DTYPE(flags), bias_dt = flags & MEMRA_ROUTE_FLAG_BIAS_BF16 ? 1 : 0;
    const int sigmoid = (flags & MEMRA_ROUTE_FLAG_SIGMOID) != 0,
              has_bias = MEMRA_ROUTE_HAS_BIAS(bias);
    const int by_max = (flags & MEMRA_ROUTE_FLAG_GROUP_MAX) != 0;
    (void)lp; /* the kernel's, after the routing (memra_route_layout) */
    memra_grid_wait();
    memra_grid_launch_dependents();
    MEMRA_ROUTE_OUT_INIT(o);
    const memra_u32 K = o.K;
    const int live = t < n_tokens;
    MEMRA_RW_FN(memra_rw_shared) *sh = &sh_all[wib];
    int *we = &sh->we[base];
    float *ws = &sh->ws[base];
    /* The screened build runs for sigmoid only (the launcher's choice). */
    enum { screen = MEMRA_ROUTE_SCREEN && M > 1 };
    /* A lane's slot i holds expert e0 + es i: tl + P i (a column of the
     * team a slot), but in the screened build lane l's m experts side by
     * side (l m + i), so a group of G experts is G / m whole lanes and its
     * two best are a lane's own then a few shuffles, where a group a column
     * took two warp reductions and their bookkeeping a group. Softmax keeps
     * the columns: its sum's order is lane l's experts l, l + 32, ... */
    const int side = screen && n_group > 1u;
    const memra_u32 e0 = side ? tl * m : tl, es = side ? 1u : P;

    /* 1. Logits and bias (bit i of `valid`: expert e0 + es i exists). */
    float x[M], b[M], s[M], c[M];
    int real, bad;
    const memra_u32 valid = MEMRA_RW_FN(memra_rw_load)(
        logits, dt, bias, bias_dt, n_real, flags, n_tokens, t, E, e0, es, m, M,
        P == 32u ? 0xffffffffu : ((1u << P) - 1u) << base, x, b, s, &real, &bad);
    /* M = 1: the tables' inputs of this lane's expert, read now; the
     * winners hand them on. */
    int my_slot = MEMRA_SLOT_BAD;
    if (M == 1 && o.tables && real && tl < E)
        my_slot = memra_vrows_slot((int)tl, &o.c);
    const memra_vrows_macro mine = memra_vrows_macro_at(&o.c, my_slot);

    /* 2. Scores: screened or exact (`exact`: the experts whose s, c are).
     *    Softmax with no bias and one group, at eight experts a lane or
     *    more, keeps each score's division for the candidates only (`late`,
     *    step 4): s and c hold the exps, which order the experts as the
     *    scores do but for ties the division makes (handled there).
     *    Measured at 65,536 tokens on the H100 (route_probe.py --prefill,
     *    spec-compiled): Qwen3-Next (16 a lane) 185.5 -> 177.4 us, but
     *    Qwen3-MoE (4 a lane) 76.9 -> 80.7, whose kernel it takes from 56
     *    registers to 64; so four a lane divide every score at once. */
    const int late_div = M >= 8 && !sigmoid && !has_bias && n_group == 1u;
    float sum = 0.0f;
    memra_u32 exact = valid;
    if (screen) {
        MEMRA_UNROLL
        for (int i = 0; i < M; i++)
            if ((valid >> i) & 1u)
                s[i] = memra_route_sigmoid_screen(x[i]);
        exact = 0;
    } else if (sigmoid) {
        MEMRA_RW_FN(memra_rw_sigmoids)(x, s, valid, M);
    } else {
        const float mx = MEMRA_RW_FN(memra_rw_max)(x, valid, M, P);
        if (M == 1) /* every logit -inf: no softmax (M > 1: memra_rw_load) */
            bad |= memra_as_bits(mx) == MEMRA_NEG_INF_BITS;
        MEMRA_UNROLL
        for (int i = 0; i < M; i++)
            if ((valid >> i) & 1u) {
                /* A lane's several exps by selects, so they overlap; a lane
                 * of one exp (M = 1: decode, or several groups) by the
                 * branch form, the shorter chain. The same bits (d is
                 * never above zero). */
                const float d = memra_sub_rn(x[i], mx);
                s[i] = M > 1 ? memra_expf_nonpos(d) : memra_expf(d);
                sum = memra_add_rn(sum, s[i]);
            }
        for (memra_u32 off = P / 2u; off > 0; off >>= 1)
            sum = memra_add_rn(sum, memra_shfl_xor_f(sum, (int)off));
        MEMRA_UNROLL
        for (int i = 0; i < M; i++)
            if (!late_div && (valid >> i) & 1u)
                s[i] = memra_div_rn(s[i], sum);
    }
    MEMRA_UNROLL
    for (int i = 0; i < M; i++)
        c[i] = has_bias ? memra_add_rn(s[i], b[i]) : s[i];

    /* 3. Groups. A group's two best (its best for MEMRA_GROUP_MAX) decide
     *    its score; screened, the members within the margin of the second
     *    (first) best are made exact first, and the group is scored from
     *    those, which hold its exact two best. Whole warps' columns (a
     *    group of 32 experts is column i of the lanes) by warp reductions;
     *    any other size by lane g scanning group g's keys in shared memory. */
    memra_u32 in_play = valid;
    if (n_group > 1) {
        const memra_u32 G = E / n_group;
        const int cols = !screen && M > 1 && G == 32u; /* group i is column i */
        /* screened: group g is lanes g L to g L + L - 1 */
        const int whole = side && G % m == 0u;
        const memra_u32 L = whole ? G / m : 1u;
        const int lanes = whole && L <= 32u && (L & (L - 1u)) == 0u;
        memra_u32 gk = 0;      /* lane g: group g's score, as a key */
        memra_u32 allowed = 0; /* bit g: group g in play */
        for (int pass = screen ? 0 : 1; pass < 2; pass++) {
            /* pass 0 (screened): the bounds; pass 1: the scores, from exact
             * values (screened: of the members near the bound only). */
            memra_u32 key[M];
            MEMRA_UNROLL
            for (int i = 0; i < M; i++)
                key[i] = ((pass ? exact : valid) >> i) & 1u ? memra_route_key(c[i]) : 0u;
            if (cols) {
                MEMRA_UNROLL
                for (int i = 0; i < M; i++) {
                    if ((memra_u32)i >= m)
                        continue;
                    const memra_u32 k1 = memra_warp_max_u32(key[i]);
                    const memra_u32 held = memra_warp_ballot(key[i] == k1);
                    const memra_u32 rest = memra_warp_max_u32(key[i] == k1 ? 0u : key[i]);
                    const memra_u32 k2 = (held & (held - 1u)) ? k1 : rest;
                    /* k1, k2 are the warp's: every lane scores the group
                     * and lane i keeps it. A branch on the lane here made
                     * eight divergent arms a token (DeepSeek-V3's prefill
                     * 147.1 -> 138.2 us on the H100 without them). */
                    const memra_u32 gki =
                        memra_route_key(memra_route_group_score(k1, k2, by_max, G));
                    gk = lane == (memra_u32)i ? gki : gk;
                    if (pass == 0) {
                        const float bound = memra_route_unkey(by_max ? k1 : k2);
                        if ((valid >> i) & 1u &&
                            c[i] >= memra_sub_rn(bound, MEMRA_ROUTE_SCREEN_MARGIN))
                            exact |= 1u << i; /* marked; made exact below */
                    }
                }
            } else if (lanes) {
                /* the lane's two best (with multiplicity), then its
                 * group's across its L lanes */
                memra_u32 k1 = 0, k2 = 0;
                MEMRA_UNROLL
                for (int i = 0; i < M; i++)
                    memra_route_top2_merge(&k1, &k2, key[i], 0u);
                for (memra_u32 off = L / 2u; off > 0; off >>= 1) {
                    const memra_u32 o1 = memra_shfl_xor_u(k1, (int)off);
                    const memra_u32 o2 = memra_shfl_xor_u(k2, (int)off);
                    memra_route_top2_merge(&k1, &k2, o1, o2);
                }
                const memra_u32 gki = memra_route_key(memra_route_group_score(k1, k2, by_max, G));
                gk = memra_shfl_u(gki, (int)((tl < n_group ? tl : 0u) * L));
                gk = tl < n_group ? gk : 0u;
                if (pass == 0) {
                    const float bound = memra_sub_rn(memra_route_unkey(by_max || G == 1u ? k1 : k2),
                                                     MEMRA_ROUTE_SCREEN_MARGIN);
                    MEMRA_UNROLL
                    for (int i = 0; i < M; i++)
                        if ((valid >> i) & 1u && c[i] >= bound)
                            exact |= 1u << i;
                }
            } else {
                memra_u32 *sk = &sh->k[M == 1 ? base : 0u];
                MEMRA_UNROLL
                for (int i = 0; i < M; i++)
                    if ((valid >> i) & 1u)
                        sk[e0 + es * (memra_u32)i] = key[i];
                memra_warp_sync();
                memra_u32 k1 = 0, k2 = 0;
                if (tl < n_group) {
                    MEMRA_NO_UNROLL
                    for (memra_u32 e = tl * G; e < tl * G + G; e++)
                        memra_route_top2_merge(&k1, &k2, sk[e], 0u);
                    if (pass == 0)
                        sh->gthr[tl] = memra_sub_rn(memra_route_unkey(by_max || G == 1 ? k1 : k2),
                                                    MEMRA_ROUTE_SCREEN_MARGIN);
                    gk = memra_route_key(memra_route_group_score(k1, k2, by_max, G));
                }
                memra_warp_sync();
                if (pass == 0) {
                    const memra_u32 gm = ((1u << 21) + G - 1u) / G;
                    MEMRA_UNROLL
                    for (int i = 0; i < M; i++)
                        if ((valid >> i) & 1u &&
                            c[i] >= sh->gthr[((e0 + es * (memra_u32)i) * gm) >> 21])
                            exact |= 1u << i;
                    memra_warp_sync();
                }
            }
            if (pass == 0) {
                /* The groups the screened scores choose are the exact
                 * ones when the last chosen beats the best left out by
                 * more than both can move: a group score (the sum of the
                 * two best) moves by at most twice a choice score's
                 * screening error (2^-18 and two roundings at the largest
                 * |c|) and one rounding of its own. The margin below is
                 * 2^-12 plus 2^-18 of the largest |c| and of either score,
                 * over eight times that. Then nothing needs to be exact
                 * for the groups; the experts' screening below is the
                 * same either way. A near tie (or an overflow: inf - inf
                 * fails the test) makes the members near each group's
                 * bound exact and scores the groups from those. */
                allowed = MEMRA_RW_FN(memra_rw_groups)(gk, tl, base, n_group, topk_group);
                const int in_ = tl < n_group && ((allowed >> tl) & 1u);
                const int out_ = tl < n_group && !((allowed >> tl) & 1u);
                const memra_u32 kin = memra_warp_min_u32(in_ ? gk : 0xffffffffu);
                const memra_u32 kout = memra_warp_max_u32(out_ ? gk : 0u);
                memra_u32 cabs = 0;
                MEMRA_UNROLL
                for (int i = 0; i < M; i++)
                    if ((valid >> i) & 1u) {
                        const memra_u32 a = memra_as_bits(c[i]) & 0x7fffffffu;
                        cabs = a > cabs ? a : cabs;
                    }
                const float cmax = memra_from_bits(memra_warp_max_u32(cabs));
                const float fin = memra_route_unkey(kin), fout = memra_route_unkey(kout);
                const float ain = memra_from_bits(memra_as_bits(fin) & 0x7fffffffu);
                const float aout = memra_from_bits(memra_as_bits(fout) & 0x7fffffffu);
                const float gmax = ain > aout ? ain : aout;
                const float need =
                    memra_add_rn(0x1p-12f, memra_mul_rn(memra_add_rn(cmax, gmax), 0x1p-18f));
                if (!kout || memra_sub_rn(fin, fout) > need) {
                    exact = 0; /* nothing marked is needed */
                    break;
                }
                /* the marked members, made exact */
                exact = MEMRA_RW_FN(memra_rw_exact)(x, b, has_bias, s, c, exact, lane, sh->x);
            } else {
                allowed = MEMRA_RW_FN(memra_rw_groups)(gk, tl, base, n_group, topk_group);
            }
        }
        /* e / G by a multiply: exact for e, G <= 1024 (e * (2^21 / G
         * rounded up) stays within 2^-11 of e / G from above). */
        const memra_u32 gm = ((1u << 21) + G - 1u) / G;
        if (lanes) { /* one group a lane */
            if (!((allowed >> (tl / L)) & 1u))
                in_play = 0;
        } else {
            MEMRA_UNROLL
            for (int i = 0; i < M; i++) {
                /* A lane's slot past the experts is out of play already,
                 * and its group may be 32 or more (a shift C leaves
                 * undefined). */
                const memra_u32 g = ((e0 + es * (memra_u32)i) * gm) >> 21;
                if (g >= 32u || !((allowed >> g) & 1u))
                    in_play &= ~(1u << i);
            }
        }
    }

    /* 4. The top_k experts in play, best first: winners' expert and score
     *    by rank at we[], ws[]. */
    if (M == 1) {
        const memra_u32 key = in_play ? memra_route_key(c[0]) : 0u;
        memra_u32 r = 0;
        for (memra_u32 j = 0; j < P; j++) {
            const memra_u32 kj = memra_shfl_u(key, (int)(base + j));
            r += kj > key || (kj == key && j < tl);
        }
        if (key && r < top_k) {
            we[r] = (int)tl, ws[r] = s[0];
            sh->wslot[base + r] = my_slot, sh->wmac[base + r] = mine;
        }
    } else {
        /* tau: the top_k-th best of the lanes' best keys (screened or
         * exact values), counted without multiplicity: each round takes
         * every lane holding the round's best out, four instructions where
         * taking one lane out took eight. Below the top_k-th best with
         * multiplicity (no higher), so the candidates from it still hold
         * the top_k, and it is that value whenever the bests differ; a
         * warp of too few distinct bests ends with tau 0, and every
         * expert in play is a candidate. */
        memra_u32 key[M], best = 0;
        MEMRA_RW_FN(memra_rw_keys)(c, in_play, has_bias, key);
        MEMRA_UNROLL
        for (int i = 0; i < M; i++)
            best = key[i] > best ? key[i] : best;
        memra_u32 tau = 0, cur = best;
        int late = 0; /* the candidates' scores still to divide (late_div) */
        for (memra_u32 j = 0; j < top_k; j++) {
            tau = memra_warp_max_u32(cur);
            cur = cur == tau ? 0u : cur;
        }
        /* The candidates: at or above tau; screened, within the margin
         * below it, made exact. */
        memra_u32 cand = 0;
        if (screen) {
            /* Made exact below, each candidate by a lane of its own (at
             * most 32 of them; more take the arg-max). */
            const float bound = memra_sub_rn(memra_route_unkey(tau), MEMRA_ROUTE_SCREEN_MARGIN);
            MEMRA_UNROLL
            for (int i = 0; i < M; i++)
                if ((in_play >> i) & 1u && (!tau || c[i] >= bound))
                    cand |= 1u << i;
        } else if (late_div) {
            /* tau is an exp here (x_tau say). An expert whose score can
             * reach x_tau's has an exp above x_tau (1 - 2^-21): below,
             * its quotient by the sum is more than four of x_tau's ulps
             * under x_tau's (a normal quotient: x_tau / sum >= 2^-125),
             * past what rounding both can close. So the candidates are the
             * exps from x_tau (1 - 2^-20) up (a superset of the top_k,
             * which is all the ranking needs); a smaller x_tau divides
             * every score now and takes the scores' own bound. */
            const float xt = memra_route_unkey(tau);
            late = tau && xt >= memra_mul_rn(sum, 0x1p-125f);
            if (late) {
                const float lo = memra_mul_rn(xt, 0x1.ffffe0p-1f); /* 1 - 2^-20 */
                MEMRA_UNROLL
                for (int i = 0; i < M; i++)
                    if (key[i] && s[i] >= lo)
                        cand |= 1u << i;
            } else {
                const memra_u32 st = tau ? memra_route_key_nonneg(memra_div_rn(xt, sum)) : 0u;
                MEMRA_UNROLL
                for (int i = 0; i < M; i++)
                    if (key[i]) {
                        s[i] = memra_div_rn(s[i], sum);
                        key[i] = memra_route_key_nonneg(s[i]);
                        if (key[i] >= st)
                            cand |= 1u << i;
                    }
            }
        } else {
            MEMRA_UNROLL
            for (int i = 0; i < M; i++)
                if (key[i] && key[i] >= tau)
                    cand |= 1u << i;
        }
        const memra_u32 n = memra_popc(cand);
        memra_u32 incl = n;
        for (int d = 1; d < 32; d <<= 1) {
            const memra_u32 up = memra_shfl_up_u(incl, d);
            incl += lane >= (memra_u32)d ? up : 0u;
        }
        const memra_u32 C = memra_shfl_u(incl, 31);
        if (C <= 32u) {
            /* Every column stores, a non-candidate into slot 32, which
             * nothing reads: a branch per column costs more, since some
             * lane of the warp takes most of them. */
            memra_u32 at = incl - n;
            MEMRA_UNROLL
            for (int i = 0; i < M; i++) {
                const memra_u32 in = (cand >> i) & 1u, k = in ? at : 32u;
                sh->cand[k] = ((memra_u64)key[i] << 32) | (memra_u64)(~(e0 + es * (memra_u32)i));
                /* screened: the logit and bias, for the lane that makes
                 * the candidate exact */
                sh->cs[k] = screen ? x[i] : s[i];
                if (screen && has_bias)
                    sh->x[k] = b[i];
                at += in;
            }
            if (late || screen) /* the entries written before a lane takes its own */
                memra_warp_sync();
            if ((late || screen) && lane < C) {
                /* each lane its own entry: the score (screened: memra's
                 * exact one; late: the division) and its key (without a
                 * bias, a score: +0 or more) */
                const float q =
                    screen ? memra_route_sigmoid(sh->cs[lane]) : memra_div_rn(sh->cs[lane], sum);
                const float cq = has_bias ? memra_add_rn(q, sh->x[lane]) : q;
                const memra_u32 kq = has_bias ? memra_route_key(cq) : memra_route_key_nonneg(cq);
                sh->cs[lane] = q;
                sh->cand[lane] = ((memra_u64)kq << 32) | (sh->cand[lane] & 0xffffffffu);
            }
            memra_warp_sync();
            if (lane < C) {
                const memra_u64 me = sh->cand[lane];
                memra_u32 rank = 0;
                for (memra_u32 u = 0; u < C; u++)
                    rank += sh->cand[u] > me;
                if (rank < top_k)
                    we[rank] = (int)~(memra_u32)me, ws[rank] = sh->cs[lane];
            }
        } else {
            /* Too many alike near the bound: top_k rounds of a warp
             * arg-max over the exact keys, the larger key first, then the
             * lower expert (the same order). */
            if (screen) {
                exact |= MEMRA_RW_FN(memra_rw_exact)(x, b, has_bias, s, c, in_play & ~exact, lane,
                                                     sh->x);
                MEMRA_RW_FN(memra_rw_keys)(c, in_play, has_bias, key);
            }
            if (late) {
                MEMRA_UNROLL
                for (int i = 0; i < M; i++)
                    if (key[i]) {
                        s[i] = memra_div_rn(s[i], sum);
                        key[i] = memra_route_key_nonneg(s[i]);
                    }
            }
            memra_u32 taken = 0;
            for (memra_u32 j = 0; j < top_k; j++) {
                memra_u32 bk = 0, bi = 0;
                MEMRA_UNROLL
                for (int i = 0; i < M; i++)
                    if (!((taken >> i) & 1u) && key[i] > bk)
                        bk = key[i], bi = (memra_u32)i;
                const memra_u32 kmax = memra_warp_max_u32(bk);
                const memra_u32 e =
                    memra_warp_min_u32(bk == kmax && kmax ? e0 + es * bi : 0xffffffffu);
                /* the winner's lane and slot (e below e0 wraps: not this lane) */
                const memra_u32 wi = (e - e0) / es;
                if (kmax && (e - e0) % es == 0u && wi < m) {
                    taken |= 1u << wi;
                    MEMRA_UNROLL
                    for (int i = 0; i < M; i++)
                        if ((memra_u32)i == wi)
                            ws[j] = s[i];
                    we[j] = (int)e;
                }
            }
        }
    }
    memra_warp_sync();

    /* 5. The pairs: routed by rank (weights summed in rank order), then the
     *    shared ones; the team's lanes take them in turn. */
    float W = 0.0f;
    if (MEMRA_ROUTE_NEEDS_SUM(flags))
        for (memra_u32 j = 0; j < top_k; j++)
            W = memra_add_rn(W, ws[j]);
    for (memra_u32 j = tl; live && j < K; j += P) {
        if (!real) {
            memra_route_emit_pad(&o, t, j);
        } else if (bad) {
            memra_route_emit_bad(&o, t, j, top_k);
        } else {
            const int e = j < top_k ? we[j] : (int)(E + (j - top_k));
            const float w = memra_route_weight(j, top_k, j < top_k ? ws[j] : 0.0f, W, flags, scale,
                                               shared_weight);
            if (M == 1 && j < top_k)
                memra_route_emit_at(&o, t, j, e, w, sh->wslot[base + j], sh->wmac[base + j]);
            else
                memra_route_emit(&o, t, j, e, w);
        }
    }
}

/* A spec's screened build without the layout asks ptxas for eight blocks
 * an SM (64 registers a thread): Kimi-K2's took 96 (five blocks) and routes
 * 65,536 tokens 1.5% faster held to 64, a few spilled bytes included;
 * DeepSeek-V3's 80, the same time at 64. Not the others: under the bound
 * ptxas takes more registers where it chose fewer (Qwen3-MoE's 32 -> 48,
 * fewer blocks an SM). The generic build (over 160 registers for 16
 * experts a lane) and the +layout builds, run at decode sizes, keep
 * ptxas's own choice too, but for the two held below at what ptxas chose
 * before a change took them higher. */
#if defined(MEMRA_SPEC_E) && MEMRA_ROUTE_SCREEN && MEMRA_ROUTE_M == 8 && MEMRA_SPEC_NG == 1 &&     \
    !(MEMRA_SPEC_FLAGS & MEMRA_ROUTE_FLAG_LAYOUT)
/* GLM-4.5's: nine blocks (56 registers, as ptxas chose before the
 * candidates were made exact in the ranking pass, which took it to 61;
 * 4 bytes spilled). */
#define MEMRA_RW_BOUNDS MEMRA_BOUNDS_MIN(MEMRA_ROUTE_TEAM_THREADS, 9)
#elif defined(MEMRA_SPEC_E) && MEMRA_ROUTE_SCREEN && MEMRA_ROUTE_M >= 8 &&                         \
    !(MEMRA_SPEC_FLAGS & MEMRA_ROUTE_FLAG_LAYOUT)
#define MEMRA_RW_BOUNDS MEMRA_BOUNDS_MIN(MEMRA_ROUTE_TEAM_THREADS, 8)
#elif defined(MEMRA_SPEC_E) && MEMRA_ROUTE_SCREEN && MEMRA_ROUTE_M >= 16
/* Kimi-K2's +layout build: ptxas's own choice went from 79 registers to
 * 114 when the candidates were made exact in the ranking pass; held to 80
 * (six blocks an SM, as before). */
#define MEMRA_RW_BOUNDS MEMRA_BOUNDS_MIN(MEMRA_ROUTE_TEAM_THREADS, 6)
#elif defined(MEMRA_SPEC_E) && MEMRA_ROUTE_SCREEN && MEMRA_ROUTE_M == 8 && MEMRA_SPEC_NG > 1
/* DeepSeek-V3's +layout build: ptxas's own choice 72 registers and a
 * 16-byte frame once exp's select form lost its division's branch (80
 * and 8 before); asked for six blocks an SM, the same 72 and no frame
 * (GLM-4.5's, one group, would take 72 where it chooses 56). */
#define MEMRA_RW_BOUNDS MEMRA_BOUNDS_MIN(MEMRA_ROUTE_TEAM_THREADS, 6)
#elif !defined(MEMRA_SPEC_E) && !MEMRA_ROUTE_SCREEN && MEMRA_ROUTE_M == 16
/* The generic build of sixteen experts a lane: 96 registers (five blocks
 * an SM) until exp's select form lost its division's branch, after which
 * a lane's sixteen exps overlap and ptxas chose 113; held to 96. */
#define MEMRA_RW_BOUNDS MEMRA_BOUNDS_MIN(MEMRA_ROUTE_TEAM_THREADS, 5)
#else
#define MEMRA_RW_BOUNDS MEMRA_BOUNDS(MEMRA_ROUTE_TEAM_THREADS)
#endif
MEMRA_KERNEL MEMRA_RW_BOUNDS MEMRA_RW_KERNEL(MEMRA_ROUTE_PARAMS)
{
    MEMRA_RW_FN(memra_route_warp_body)(MEMRA_ROUTE_ARGS);
    /* Only a launch that lays its pairs out here carries the layout flag
     * (part of a spec's key): a spec's other build holds no layout code,
     * which takes e.g. Qwen3-MoE's kernel from 56 registers to 32. */
    if (MEMRA_ROUTE_LAID(flags))
        memra_route_layout(&lp, sel, n_tokens, top_k + n_shared, MEMRA_RW_FN(memra_rw_sh).words,
                           (memra_u32)(sizeof MEMRA_RW_FN(memra_rw_sh).words / 4u),
                           MEMRA_ROUTE_TEAM_LAYOUT_PER, &MEMRA_RW_FN(memra_rw_last));
}

#undef MEMRA_RW_BOUNDS
#undef MEMRA_RW_KERNEL
#undef MEMRA_RW_FN
