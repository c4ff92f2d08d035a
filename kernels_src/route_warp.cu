/* memra: routing by teams of lanes, for throughput (prefill) and for small
 * expert counts at any batch size. Compiled once per MEMRA_ROUTE_M, the most
 * experts a lane holds (kernels_src/meson.build: one module each, compiled
 * at its first use), as memra_route_warp<M>_kernel.
 *
 *  - M = 1 (n_expert <= 32): a team of P lanes per token, P the power of two
 *    at or above n_expert, 32 / P tokens per warp, lane l of a team holding
 *    expert l. Experts are ranked by counting over the team.
 *  - M > 1 (n_expert up to 32 M): a warp per token, lane l holding experts
 *    l, l+32, ..., l+32(M-1) in registers. The top_k-th best of the lanes'
 *    best values bounds the token's top_k-th best from below, so only the
 *    experts at or above it are candidates; they are gathered into shared
 *    memory in order and ranked by counting among themselves (more than 32:
 *    top_k rounds of a warp arg-max instead, the same answer).
 * Either way the softmax sum is the fixed one: with P lanes and n_expert <=
 * P, the xor butterfly over the team's lanes is the 32-lane butterfly of
 * docs/routing.md with its zero lanes left out (x + 0 is x for the sums of
 * exps met here). Every lane reaches every warp collective: a team whose
 * token is padding, past the batch or non-finite computes on with zeros and
 * only its writes differ. */

#ifndef MEMRA_ROUTE_M
#define MEMRA_ROUTE_M 1
#endif
#define MEMRA_RW(name) MEMRA_ROUTE_CAT(MEMRA_ROUTE_CAT(name, MEMRA_ROUTE_M), _kernel)
#define MEMRA_RW_FN(name) MEMRA_ROUTE_CAT(name, MEMRA_ROUTE_M)

#define MEMRA_ROUTE_TEAM_WARPS 4 /* warps per block */

MEMRA_DEVICE void MEMRA_RW_FN(memra_route_warp_body)(MEMRA_ROUTE_PARAMS)
{
    enum { M = MEMRA_ROUTE_M };
    /* Per warp: the keys for the groups' scan, the candidates, the winners
     * by rank (a team's at its base lane). */
    MEMRA_SHARED memra_u32 sh_k[MEMRA_ROUTE_TEAM_WARPS][32 * M];
    MEMRA_SHARED memra_u64 sh_cand[MEMRA_ROUTE_TEAM_WARPS][32];
    MEMRA_SHARED float sh_cs[MEMRA_ROUTE_TEAM_WARPS][32];
    MEMRA_SHARED int sh_we[MEMRA_ROUTE_TEAM_WARPS][32];
    MEMRA_SHARED float sh_ws[MEMRA_ROUTE_TEAM_WARPS][32];
    MEMRA_SHARED int sh_wslot[MEMRA_ROUTE_TEAM_WARPS][32];
    MEMRA_SHARED memra_vrows_macro sh_wmac[MEMRA_ROUTE_TEAM_WARPS][32];
    const memra_u32 E = n_expert;
    /* The team: P lanes from lane `base` of the warp. */
    memra_u32 P = 32;
    if (M == 1)
        for (P = 1; P < E; P <<= 1)
            ;
    const memra_u32 lane = threadIdx.x & 31u, wib = threadIdx.x >> 5, base = lane & ~(P - 1u);
    const memra_u32 tl = lane - base;
    const memra_u32 t = (blockIdx.x * blockDim.x + threadIdx.x) / P;
    const memra_u32 m = M == 1 ? 1u : (E + 31u) / 32u;
    const int dt = MEMRA_ROUTE_DTYPE(flags), bias_dt = flags & MEMRA_ROUTE_FLAG_BIAS_BF16 ? 1 : 0;
    memra_grid_wait();
    memra_grid_launch_dependents();
    MEMRA_ROUTE_OUT_INIT(o);
    const memra_u32 K = o.K;
    const int live = t < n_tokens;
    const int real =
        live && t < memra_route_n_real(n_real, (flags & MEMRA_ROUTE_FLAG_NREAL_I64) != 0, n_tokens);
    int *we = &sh_we[wib][base];
    float *ws = &sh_ws[wib][base];

    /* 1. Logits and bias. */
    float v[M], bv[M];
    int bad = 0;
    MEMRA_UNROLL
    for (int i = 0; i < M; i++) {
        const memra_u32 e = tl + P * (memra_u32)i;
        v[i] = 0.0f, bv[i] = 0.0f;
        if (real && (memra_u32)i < m && e < E) {
            v[i] = memra_route_load(logits, dt, (memra_u64)t * E + e);
            bv[i] = bias ? memra_route_load(bias, bias_dt, e) : 0.0f;
            bad |= MEMRA_ROUTE_NONFINITE(v[i]) || MEMRA_ROUTE_NONFINITE(bv[i]);
        }
    }
    const memra_u32 tmask = P == 32u ? 0xffffffffu : ((1u << P) - 1u) << base;
    bad = (memra_warp_ballot(bad) & tmask) != 0;
    /* M = 1: the tables' inputs of this lane's expert, read now; the
     * winners hand them on. */
    int my_slot = MEMRA_SLOT_BAD;
    if (M == 1 && o.tables && real && tl < E)
        my_slot = memra_vrows_slot((int)tl, &o.c);
    const memra_vrows_macro mine = memra_vrows_macro_at(&o.c, my_slot);

    /* 2. Scores, then choice keys (0: no expert, or out of play). */
    memra_u32 key[M];
    if (flags & MEMRA_ROUTE_FLAG_SIGMOID) {
        MEMRA_UNROLL
        for (int i = 0; i < M; i++)
            if ((memra_u32)i < m)
                v[i] = memra_route_sigmoid(v[i]);
    } else {
        memra_u32 mk = 0;
        MEMRA_UNROLL
        for (int i = 0; i < M; i++)
            if ((memra_u32)i < m && tl + P * (memra_u32)i < E) {
                const memra_u32 ki = memra_route_max_key(v[i]);
                mk = ki > mk ? ki : mk;
            }
        if (P == 32u) {
            mk = memra_warp_max_u32(mk);
        } else {
            for (memra_u32 off = P / 2u; off > 0; off >>= 1) {
                const memra_u32 other = memra_shfl_xor_u(mk, (int)off);
                mk = other > mk ? other : mk;
            }
        }
        const float mx = memra_route_max_unkey(mk);
        float sum = 0.0f;
        MEMRA_UNROLL
        for (int i = 0; i < M; i++) {
            if ((memra_u32)i < m && tl + P * (memra_u32)i < E) {
                v[i] = memra_expf(memra_sub_rn(v[i], mx));
                sum = memra_add_rn(sum, v[i]);
            }
        }
        for (memra_u32 off = P / 2u; off > 0; off >>= 1)
            sum = memra_add_rn(sum, memra_shfl_xor_f(sum, (int)off));
        MEMRA_UNROLL
        for (int i = 0; i < M; i++)
            if ((memra_u32)i < m)
                v[i] = memra_div_rn(v[i], sum);
    }
    MEMRA_UNROLL
    for (int i = 0; i < M; i++) {
        const int valid = (memra_u32)i < m && tl + P * (memra_u32)i < E;
        key[i] = valid ? memra_route_key(bias ? memra_add_rn(v[i], bv[i]) : v[i]) : 0u;
    }

    /* 3. Groups: lane g of the team scans group g's keys in shared memory
     *    for its two best, scores it and ranks it by counting. */
    if (n_group > 1) {
        const memra_u32 G = E / n_group;
        memra_u32 *sk = &sh_k[wib][M == 1 ? base : 0u];
        MEMRA_UNROLL
        for (int i = 0; i < M; i++)
            if ((memra_u32)i < m && tl + P * (memra_u32)i < E)
                sk[tl + P * (memra_u32)i] = key[i];
        memra_warp_sync();
        memra_u32 gk = 0;
        if (tl < n_group) {
            memra_u32 k1 = 0, k2 = 0;
            MEMRA_NO_UNROLL
            for (memra_u32 e = tl * G; e < tl * G + G; e++)
                memra_route_top2_merge(&k1, &k2, sk[e], 0u);
            gk = memra_route_key(
                memra_route_group_score(k1, k2, (flags & MEMRA_ROUTE_FLAG_GROUP_MAX) != 0, G));
        }
        memra_warp_sync();
        memra_u32 rank = 0;
        for (memra_u32 h = 0; h < n_group; h++) {
            const memra_u32 kh = memra_shfl_u(gk, (int)(base + h));
            rank += kh > gk || (kh == gk && h < tl);
        }
        const memra_u32 allowed = memra_warp_ballot(tl < n_group && rank < topk_group) >> base;
        /* e / G by a multiply: exact for e, G <= 1024 (e * (2^21 / G
         * rounded up) stays within 2^-11 of e / G from above). */
        const memra_u32 gm = ((1u << 21) + G - 1u) / G;
        MEMRA_UNROLL
        for (int i = 0; i < M; i++) {
            const memra_u32 g = ((tl + P * (memra_u32)i) * gm) >> 21;
            key[i] = (allowed >> g) & 1u ? key[i] : 0u;
        }
    }

    /* 4. The top_k experts, best first: winners' expert and score by rank
     *    at we[], ws[]. */
    if (M == 1) {
        memra_u32 r = 0;
        for (memra_u32 j = 0; j < P; j++) {
            const memra_u32 kj = memra_shfl_u(key[0], (int)(base + j));
            r += kj > key[0] || (kj == key[0] && j < tl);
        }
        if (key[0] && r < top_k) {
            we[r] = (int)tl, ws[r] = v[0];
            sh_wslot[wib][base + r] = my_slot, sh_wmac[wib][base + r] = mine;
        }
    } else {
        /* tau: the top_k-th best of the lanes' best keys. */
        memra_u32 best = 0;
        MEMRA_UNROLL
        for (int i = 0; i < M; i++)
            best = key[i] > best ? key[i] : best;
        memra_u32 tau = 0, cur = best;
        for (memra_u32 j = 0; j < top_k; j++) {
            tau = memra_warp_max_u32(cur);
            const memra_u32 at = memra_warp_ballot(cur == tau);
            if (lane == (memra_u32)(memra_ffs(at) - 1))
                cur = 0;
        }
        memra_u32 n = 0;
        MEMRA_UNROLL
        for (int i = 0; i < M; i++)
            n += key[i] && key[i] >= tau;
        memra_u32 incl = n;
        for (int d = 1; d < 32; d <<= 1) {
            const memra_u32 up = memra_shfl_up_u(incl, d);
            incl += lane >= (memra_u32)d ? up : 0u;
        }
        const memra_u32 C = memra_shfl_u(incl, 31);
        memra_u64 *cand = sh_cand[wib];
        float *cs = sh_cs[wib];
        if (C <= 32u) {
            memra_u32 at = incl - n;
            MEMRA_UNROLL
            for (int i = 0; i < M; i++)
                if (key[i] && key[i] >= tau) {
                    cand[at] =
                        ((memra_u64)key[i] << 32) | (memra_u64)(~(lane + 32u * (memra_u32)i));
                    cs[at] = v[i];
                    at++;
                }
            memra_warp_sync();
            if (lane < C) {
                const memra_u64 me = cand[lane];
                memra_u32 rank = 0;
                for (memra_u32 u = 0; u < C; u++)
                    rank += cand[u] > me;
                if (rank < top_k)
                    we[rank] = (int)~(memra_u32)me, ws[rank] = cs[lane];
            }
        } else {
            /* Too many alike near the bound: top_k rounds of a warp
             * arg-max over the keys, the larger key first, then the lower
             * expert (the same order). */
            memra_u32 taken = 0;
            for (memra_u32 j = 0; j < top_k; j++) {
                memra_u32 bk = 0, bi = 0;
                MEMRA_UNROLL
                for (int i = 0; i < M; i++)
                    if (!((taken >> i) & 1u) && key[i] > bk)
                        bk = key[i], bi = (memra_u32)i;
                const memra_u32 kmax = memra_warp_max_u32(bk);
                const memra_u32 e =
                    memra_warp_min_u32(bk == kmax && kmax ? lane + 32u * bi : 0xffffffffu);
                if (kmax && e % 32u == lane) {
                    taken |= 1u << (e / 32u);
                    MEMRA_UNROLL
                    for (int i = 0; i < M; i++)
                        if ((memra_u32)i == e / 32u)
                            ws[j] = v[i];
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
                memra_route_emit_at(&o, t, j, e, w, sh_wslot[wib][base + j],
                                    sh_wmac[wib][base + j]);
            else
                memra_route_emit(&o, t, j, e, w);
        }
    }
}

MEMRA_KERNEL MEMRA_RW(memra_route_warp)(MEMRA_ROUTE_PARAMS)
{
    MEMRA_RW_FN(memra_route_warp_body)(MEMRA_ROUTE_ARGS);
}

#undef MEMRA_RW
#undef MEMRA_RW_FN
