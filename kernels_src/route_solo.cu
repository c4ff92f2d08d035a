/* memra: routing a token per lane, for small expert counts (Mixtral's 8, up
 * to MEMRA_ROUTE_SOLO_MAX_EXPERT) in one group, at every batch size. As
 * memra_route_solo_kernel, a module of its own.
 *
 * A team of lanes per token (route_warp.cu, M = 1) spends most of its
 * instructions on shuffles: the max, the sum and the rank each cross the
 * team, and a warp holds only 32 / P tokens. Here a lane holds all of its
 * token's experts in registers: no shuffle, no shared memory, 32 tokens a
 * warp, and every loop unrolls over the lane's experts (a spec build folds
 * the expert count, so Mixtral's is straight-line code). The answer is the
 * team's bit for bit: the max and the ranks are comparisons under the one
 * total order, and the softmax sum is the team's xor butterfly over P lanes
 * (P the power of two at or above n_expert, lanes past the experts holding
 * +0), taken here as its tree: level `off` adds entry l + off into entry l,
 * which is lane l's add (IEEE addition commutes, so the operands' order
 * does not matter). Groups take the team kernel (the launcher's choice). */

#define MEMRA_RS_N MEMRA_ROUTE_SOLO_MAX_EXPERT

/* The fused layout's counts (memra_route_layout), for the most experts this
 * kernel routes and the shared ones. */
#define MEMRA_RS_WORDS MEMRA_LAYOUT_BLOCK_WORDS(MEMRA_RS_N + 32u, 1u)
MEMRA_SHARED memra_u32 memra_rs_words[MEMRA_RS_WORDS];
MEMRA_SHARED int memra_rs_last;

MEMRA_DEVICE void memra_route_solo_body(MEMRA_ROUTE_PARAMS)
{
    enum { N = MEMRA_RS_N };
    MEMRA_ROUTE_SPEC_CONSTANTS();
    const memra_u32 E = n_expert;
    const memra_u32 t = memra_route_team_token(blockIdx.x, blockDim.x, threadIdx.x, 1u, n_tokens);
    const int dt = MEMRA_ROUTE_DTYPE(flags), bias_dt = flags & MEMRA_ROUTE_FLAG_BIAS_BF16 ? 1 : 0;
    const int sigmoid = (flags & MEMRA_ROUTE_FLAG_SIGMOID) != 0, has_bias = bias != 0;
    (void)lp, (void)n_group, (void)topk_group; /* one group: the launcher's choice */
    memra_grid_wait();
    memra_grid_launch_dependents();
    MEMRA_ROUTE_OUT_INIT(o);
    const memra_u32 K = o.K;
    if (t >= n_tokens)
        return;

    /* 1. Logits, then the real-token count (a load of its own: waiting for
     *    it first would put a memory round trip ahead of the logits), and
     *    every expert's tables' inputs, which arrive while the experts are
     *    chosen (one token's worth of loads: the same addresses for every
     *    lane of a warp). */
    float x[N], b[N];
    MEMRA_UNROLL
    for (int i = 0; i < N; i++) {
        x[i] = 0.0f;
        b[i] = has_bias && (memra_u32)i < E ? memra_route_load(bias, bias_dt, (memra_u32)i) : 0.0f;
    }
    /* A row of whole 16-byte words on a 16-byte boundary (f32 rows of a
     * multiple of 4 experts, 16-bit rows of 8) comes in 16-byte loads: a
     * quarter or an eighth of the load instructions. */
    const memra_u32 row_bytes = E * (dt == MEMRA_DT_F32 ? 4u : 2u);
    if (((memra_u64)logits & 15u) == 0 && row_bytes % 16u == 0) {
        const memra_u32x4 *row =
            (const memra_u32x4 *)((const char *)logits + (memra_u64)t * row_bytes);
        if (dt == MEMRA_DT_F32) {
            MEMRA_UNROLL
            for (int q = 0; q < N / 4; q++)
                if ((memra_u32)q * 16u < row_bytes) {
                    const memra_u32x4 v = row[q];
                    x[4 * q] = memra_from_bits(v.x), x[4 * q + 1] = memra_from_bits(v.y);
                    x[4 * q + 2] = memra_from_bits(v.z), x[4 * q + 3] = memra_from_bits(v.w);
                }
        } else {
            MEMRA_UNROLL
            for (int q = 0; q < N / 8; q++)
                if ((memra_u32)q * 16u < row_bytes) {
                    const memra_u32x4 v = row[q];
                    const memra_u32 w[4] = {v.x, v.y, v.z, v.w};
                    MEMRA_UNROLL
                    for (int c = 0; c < 4; c++) { /* little-endian: the lower half first */
                        x[8 * q + 2 * c] = memra_route_from_16(w[c] & 0xffffu, dt);
                        x[8 * q + 2 * c + 1] = memra_route_from_16(w[c] >> 16, dt);
                    }
                }
        }
    } else {
        MEMRA_UNROLL
        for (int i = 0; i < N; i++)
            if ((memra_u32)i < E)
                x[i] = memra_route_load(logits, dt, (memra_u64)t * E + (memra_u32)i);
    }
    if (t >= memra_route_n_real(n_real, (flags & MEMRA_ROUTE_FLAG_NREAL_I64) != 0, n_tokens)) {
        for (memra_u32 j = 0; j < K; j++)
            memra_route_emit_pad(&o, t, j);
        return;
    }
    int slot[N];
    memra_vrows_macro mac[N];
    MEMRA_UNROLL
    for (int i = 0; i < N; i++) {
        slot[i] = o.tables && (memra_u32)i < E ? memra_vrows_slot(i, &o.c) : MEMRA_SLOT_BAD;
        mac[i] = memra_vrows_macro_at(&o.c, slot[i]);
    }
    int bad = 0;
    MEMRA_UNROLL
    for (int i = 0; i < N; i++)
        bad |= MEMRA_ROUTE_NONFINITE(x[i]) || MEMRA_ROUTE_NONFINITE(b[i]);
    if (bad) {
        for (memra_u32 j = 0; j < K; j++)
            memra_route_emit_bad(&o, t, j, top_k);
        return;
    }

    /* 2. Scores, and the choice scores' keys. exp by selects, not branches
     *    (memra_expf_flat, the same bits): a lane's exps are independent,
     *    and branches would run them one after another (each its own
     *    region), and a warp's lanes (tokens) down different paths. */
    float s[N];
    if (sigmoid) {
        MEMRA_UNROLL
        for (int i = 0; i < N; i++)
            s[i] = (memra_u32)i < E ? memra_route_sigmoid(x[i]) : 0.0f;
    } else {
        memra_u32 mk = 0;
        MEMRA_UNROLL
        for (int i = 0; i < N; i++)
            if ((memra_u32)i < E) {
                const memra_u32 ki = memra_route_max_key(x[i]);
                mk = ki > mk ? ki : mk;
            }
        const float mx = memra_route_max_unkey(mk);
        float v[N];
        MEMRA_UNROLL
        for (int i = 0; i < N; i++) {
            s[i] = (memra_u32)i < E ? memra_expf_flat(memra_sub_rn(x[i], mx)) : 0.0f;
            v[i] = (memra_u32)i < E ? memra_add_rn(0.0f, s[i]) : 0.0f;
        }
        MEMRA_UNROLL
        for (int off = N / 2; off > 0; off >>= 1) {
            if ((memra_u32)off >= E) /* the team's levels: P / 2 down to 1 */
                continue;
            MEMRA_UNROLL
            for (int l = 0; l < off; l++)
                v[l] = memra_add_rn(v[l], v[l + off]);
        }
        MEMRA_UNROLL
        for (int i = 0; i < N; i++)
            s[i] = (memra_u32)i < E ? memra_div_rn(s[i], v[0]) : 0.0f;
    }
    memra_u32 key[N];
    MEMRA_UNROLL
    for (int i = 0; i < N; i++)
        key[i] =
            (memra_u32)i < E ? memra_route_key(has_bias ? memra_add_rn(s[i], b[i]) : s[i]) : 0u;

    /* 3. Ranks by counting (ties to the lower expert), then the winners in
     *    rank order: expert, score and tables' inputs. */
    int we[N], wslot[N];
    float ws[N];
    memra_vrows_macro wmac[N];
    MEMRA_UNROLL
    for (int q = 0; q < N; q++)
        we[q] = 0, ws[q] = 0.0f, wslot[q] = MEMRA_SLOT_BAD, wmac[q] = mac[0];
    MEMRA_UNROLL
    for (int i = 0; i < N; i++) {
        memra_u32 r = 0;
        MEMRA_UNROLL
        for (int j = 0; j < N; j++)
            if (j != i)
                r += key[j] > key[i] || (key[j] == key[i] && j < i);
        MEMRA_UNROLL
        for (int q = 0; q < N; q++)
            if (key[i] && r == (memra_u32)q) {
                we[q] = i, ws[q] = s[i];
                wslot[q] = slot[i], wmac[q] = mac[i];
            }
    }

    /* 4. The pairs: routed by rank (weights summed in rank order), then the
     *    shared ones. */
    float W = 0.0f;
    if (MEMRA_ROUTE_NEEDS_SUM(flags)) {
        MEMRA_UNROLL
        for (int j = 0; j < N; j++)
            if ((memra_u32)j < top_k)
                W = memra_add_rn(W, ws[j]);
    }
    MEMRA_UNROLL
    for (int j = 0; j < N; j++)
        if ((memra_u32)j < top_k)
            memra_route_emit_at(
                &o, t, (memra_u32)j, we[j],
                memra_route_weight((memra_u32)j, top_k, ws[j], W, flags, scale, shared_weight),
                wslot[j], wmac[j]);
    for (memra_u32 j = top_k; j < K; j++)
        memra_route_emit(&o, t, j, (int)(E + (j - top_k)),
                         memra_route_weight(j, top_k, 0.0f, W, flags, scale, shared_weight));
}

MEMRA_KERNEL MEMRA_BOUNDS(MEMRA_ROUTE_TEAM_THREADS) memra_route_solo_kernel(MEMRA_ROUTE_PARAMS)
{
    memra_route_solo_body(MEMRA_ROUTE_ARGS);
    memra_route_layout(&lp, sel, n_tokens * (top_k + n_shared), memra_rs_words, MEMRA_RS_WORDS,
                       &memra_rs_last);
}

#undef MEMRA_RS_WORDS
#undef MEMRA_RS_N
