/* memra: routing, one block per token, one thread per expert: the decode
 * kernel, where a step's latency is a chain of dependent phases and the
 * kernel is built to keep that chain short (docs/routing.md).
 *
 *  1. every expert's logit (and bias) is loaded and scored at once, a
 *     thread each;
 *  2. each warp ranks its experts by counting, inside each run of the warp
 *     that lies in one group (a "segment"), and lists each segment's best in
 *     shared memory, in order, where the segment's own experts sit (ties
 *     by index, asked of match_any only where two counts collide); where a
 *     group is a warp, the warp also scores it now;
 *  3. one barrier; then every warp alike ranks the groups by counting (no
 *     barrier: each warp gets the same answer), scoring them first from
 *     their segments' heads where a group is not one warp;
 *  4. each listed expert of a segment in play counts the experts of the
 *     other segments' lists that beat it (sorted lists: their first ones):
 *     where each segment is a warp, every list's first top_k keys (32-bit:
 *     a tie goes to the lower warp), the lists split among the warp's idle
 *     lanes and the parts summed by shuffles (straight-line code with the
 *     spec's counts compiled in); otherwise in chunks of independent loads
 *     or, in the largest blocks, until the first that does not; rank <
 *     top_k is its output slot;
 *  5. a second barrier, then the pairs: weights summed in rank order, each
 *     winner's slot and macro-plane values read now (asked for every
 *     expert in step 1, they cost more than the round trip they hid), the
 *     tables;
 *  6. with a fused layout, the last block to finish lays the whole batch
 *     out (memra_route_layout), a one-token launch's warp 0 from its
 *     registers (memra_layout_token), each over the sentinel its block
 *     wrote first (memra_layout_fill). The one-token path, compiled in,
 *     costs the routing itself 0.04 us a node on the H100 (more code, other
 *     choices by the compiler), so a spec's build holds it only where its
 *     launches lay out (MEMRA_ROUTE_FLAG_LAYOUT); the generic build holds
 *     it all.
 * Softmax adds two barriers before step 2 (the max, then the sum in the
 * fixed order, which every warp takes alike from the exps in shared
 * memory) when the experts span more than one warp. */

#define MEMRA_ROUTE_MAX_WARPS (MEMRA_ABI_ROUTE_MAX_EXPERT / 32)
/* Step 5's count of a list where segments are not warps (below):
 * MEMRA_ROUTE_RANK_CHUNK entries loaded at once in blocks of up to
 * MEMRA_ROUTE_RANK_CHUNK_WARPS warps. Measured
 * on the H200, one token, fused node (BENCHMARKS.md): chunks against the
 * walk, Qwen3-MoE (4 warps) 4.50 vs 4.74 us, GLM-4.5 (5) 4.46 vs 4.78,
 * DeepSeek-V3 (8) 5.08 vs 5.38, Kimi-K2 (12) 7.03 vs 7.37; Qwen3-Next (16)
 * 13.48 vs 11.03. */
#define MEMRA_ROUTE_RANK_CHUNK 8u
#define MEMRA_ROUTE_RANK_CHUNK_WARPS 12u
/* Where each segment is a warp, its list's keys also sit in a row of their
 * own, MEMRA_ROUTE_KLIST_STRIDE words apart: 16-byte loads of four, and
 * the final rank's parts (step 5), reading the same entry of different
 * rows at once, land on different banks (36 = 4 mod 32). */
#define MEMRA_ROUTE_KLIST_STRIDE 36u

/* The per-expert arrays, one buffer: the fused layout reuses it once the
 * block's pairs are written (memra_route_layout). */
typedef union memra_rb_shared {
    struct {
        memra_u64 list[MEMRA_ABI_ROUTE_MAX_EXPERT]; /* the segments' best, in order */
        memra_u32 klist[MEMRA_ROUTE_MAX_WARPS * MEMRA_ROUTE_KLIST_STRIDE]; /* their keys */
        float s[MEMRA_ABI_ROUTE_MAX_EXPERT]; /* listed experts' scores, */
        float e[MEMRA_ABI_ROUTE_MAX_EXPERT]; /* softmax: the exps */
    } r;
    memra_u32 words[8 * MEMRA_ABI_ROUTE_MAX_EXPERT];
    memra_u32x4 align16; /* the key rows' 16-byte loads */
} memra_rb_shared;
MEMRA_SHARED memra_rb_shared memra_rb_sh;
#define MEMRA_RB_WORDS ((memra_u32)(sizeof memra_rb_sh.words / sizeof memra_rb_sh.words[0]))
MEMRA_SHARED int memra_rb_last;
/* The fused layout's counts fit the buffer for the most experts a layout
 * has: a smaller one would make memra_layout_block's warp count wrap. */
MEMRA_STATIC_ASSERT(8u * MEMRA_ABI_ROUTE_MAX_EXPERT >=
                        MEMRA_LAYOUT_BLOCK_WORDS(MEMRA_ABI_LAYOUT_MAX_EXPERT, 1u),
                    "the block kernel's shared buffer holds the fused layout's counts");

/* Where each segment is a warp: warp w's list length (its experts, up to
 * 32) and whether its group is in play (`allowed`, a bit a group). */
MEMRA_DEVICE memra_u32 memra_rb_warp_len(memra_u32 E, memra_u32 w)
{
    return E - 32u * w < 32u ? E - 32u * w : 32u;
}
MEMRA_DEVICE int memra_rb_warp_plays(memra_u32 w, memra_u32 n_group, memra_u32 G, memra_u32 allowed)
{
    return n_group == 1u || ((allowed >> memra_udiv(32u * w, G)) & 1u);
}

/* Routes token blockIdx.x; 1 where it has also laid out the launch's
 * fused layout (step 7), the same in every thread of the block. */
MEMRA_DEVICE int memra_route_block(MEMRA_ROUTE_PARAMS)
{
    memra_u64 *const sh_list = memra_rb_sh.r.list;
    memra_u32 *const sh_klist = memra_rb_sh.r.klist;
    float *const sh_s = memra_rb_sh.r.s, *const sh_e = memra_rb_sh.r.e;
    MEMRA_SHARED memra_u32 sh_red[MEMRA_ROUTE_MAX_WARPS];
    MEMRA_SHARED int sh_bad[MEMRA_ROUTE_MAX_WARPS];
    /* Where every group is one warp: the groups' keys, a warp's each. */
    MEMRA_SHARED memra_u32x4 sh_gk4[MEMRA_ROUTE_MAX_WARPS / 4];
    MEMRA_SHARED int sh_sel[32]; /* the winners, by rank */
    MEMRA_SHARED float sh_w[32];
    MEMRA_ROUTE_SPEC_CONSTANTS();
    const memra_u32 tid = threadIdx.x, lane = tid & 31u, wid = tid >> 5,
                    nw = MEMRA_ROUTE_BLOCK_WARPS;
    const memra_u32 t = blockIdx.x, E = n_expert;
    const int dt = MEMRA_ROUTE_DTYPE(flags), bias_dt = flags & MEMRA_ROUTE_FLAG_BIAS_BF16 ? 1 : 0;
    MEMRA_PROBE(0, "entry");
    memra_grid_wait();
    memra_grid_launch_dependents();
    /* 1. This thread's expert: logit and bias first, before anything else
     *    is decided (the real-token count is a load of its own: waiting
     *    for it first would put a memory round trip ahead of the logits; a
     *    padding row's are read and ignored, inside the buffer's n_tokens
     *    rows), then the tables' inputs for the shared expert whose pair
     *    this thread will write. A routed expert's are read once it has
     *    won (step 6): asking for every expert's here, to have a winner's
     *    at hand, cost more than the round trip it hid (H100, spec builds,
     *    without it: DeepSeek-V3 2.66 -> 2.51 us a node at 1 token and
     *    3.52 -> 3.38 at 256, GLM-4.5 2.56 -> 2.42; 2 of 15 family and
     *    batch cells 0.03-0.04 us slower alone; BENCHMARKS.md). */
    const int valid = tid < E;
    float x = 0.0f, b = 0.0f;
    if (valid) {
        x = memra_route_load(logits, dt, (memra_u64)t * E + tid);
        b = MEMRA_ROUTE_HAS_BIAS(bias) ? memra_route_load(bias, bias_dt, tid) : 0.0f;
    }
    MEMRA_ROUTE_OUT_INIT(o);
    const memra_u32 K = o.K;
    /* A padding row: the whole block leaves together. */
    if (t >= memra_route_n_real(n_real, (flags & MEMRA_ROUTE_FLAG_NREAL_I64) != 0, n_tokens)) {
        if (tid < K)
            memra_route_emit_pad(&o, t, tid);
        return 0;
    }
    const int bad = valid && (memra_route_logit_bad(x, (flags & MEMRA_ROUTE_FLAG_SIGMOID) != 0) ||
                              MEMRA_VROWS_NONFINITE(b));
    int pair_slot = MEMRA_SLOT_BAD;
    if (o.tables && tid >= top_k && tid < K) /* a shared expert's pair */
        pair_slot = memra_vrows_slot((int)(E + (tid - top_k)), &o.c);
    const memra_vrows_macro pair = memra_vrows_macro_at(&o.c, pair_slot);
    const int wbad = memra_warp_any(bad);
    MEMRA_PROBE(1, "logits in");

    /* 2. Scores. A non-finite token runs on with garbage (every thread must
     *    reach every barrier) and is written out as such after step 3's. */
    float s = 0.0f;
    int no_softmax = 0; /* every logit -inf (the block's max): unrouted, as a NaN one */
    if (flags & MEMRA_ROUTE_FLAG_SIGMOID) {
        if (valid)
            s = memra_route_sigmoid(x);
    } else {
        /* The max: a maximum under a total order, the same in any order. */
        memra_u32 mk = memra_warp_max_u32(valid ? memra_route_max_key(x) : 0u);
        if (nw > 1) {
            if (lane == 0)
                sh_red[wid] = mk;
            memra_block_sync();
            for (memra_u32 i = 0; i < nw; i++)
                mk = sh_red[i] > mk ? sh_red[i] : mk;
        }
        no_softmax = memra_as_bits(memra_route_max_unkey(mk)) == MEMRA_NEG_INF_BITS;
        const float ex = valid ? memra_expf(memra_sub_rn(x, memra_route_max_unkey(mk))) : 0.0f;
        /* The sum in the fixed order: lane l adds experts l, l+32, ... in
         * order, then the butterfly; every warp takes it alike. */
        float v = ex;
        if (nw > 1) {
            sh_e[tid] = ex;
            memra_block_sync();
            v = 0.0f;
            for (memra_u32 i = 0; i < nw; i++)
                if (lane + 32u * i < E)
                    v = memra_add_rn(v, sh_e[lane + 32u * i]);
        }
        for (int off = 16; off > 0; off >>= 1)
            v = memra_add_rn(v, memra_shfl_xor_f(v, off));
        if (valid)
            s = memra_div_rn(ex, v);
    }
    const float c = MEMRA_ROUTE_HAS_BIAS(bias) ? memra_add_rn(s, b) : s;
    MEMRA_PROBE(2, "scores");

    /* 3. Each expert's rank in its segment (the run of its warp inside its
     *    group), by counting; the segment's best are listed at the
     *    segment's own start, best first, as (key, ~index): one 64-bit
     *    number orders both. Two are listed at least, for the groups. */
    const memra_u32 G = n_group == 1u ? E : memra_udiv(E, n_group);
    const memra_u32 my_group = n_group == 1u ? 0u : memra_udiv(tid, G);
    const memra_u32 key = valid ? memra_route_key(c) : 0u;
    const memra_u32 wlo = 32u * wid, glo = valid ? my_group * G : wlo;
    const memra_u32 seg_lo = glo > wlo ? glo : wlo;
    memra_u32 seg_hi = glo + G < wlo + 32u ? glo + G : wlo + 32u;
    seg_hi = seg_hi < E ? seg_hi : E;
    const memra_u32 lo = seg_lo - wlo, hi = seg_hi - wlo;
    memra_u32 r = 0;
    const int warp_segments = n_group == 1u || G % 32u == 0u;
    if (warp_segments) {
        /* Each segment is its warp's experts: count the keys above this
         * one, and the equal ones of lower lanes (ties by index) at once.
         * Lanes past the experts hold key 0, below every expert's. The
         * warp's keys pass through its own row of sh_klist (the list goes
         * there after): eight 16-byte loads every lane reads alike, where
         * 32 shuffles would queue on the SM's one shuffle pipe. */
        memra_u32 *const row = sh_klist + MEMRA_ROUTE_KLIST_STRIDE * wid;
        row[lane] = key;
        memra_warp_sync();
        /* Four counts side by side: one running count would chain its 32
         * compare-and-adds one after another. */
        memra_u32 r4[4] = {0u, 0u, 0u, 0u};
        MEMRA_UNROLL
        for (int c = 0; c < 8; c++) {
            const memra_u32x4 q = ((const memra_u32x4 *)row)[c];
            r4[0] += q.x > key, r4[1] += q.y > key, r4[2] += q.z > key, r4[3] += q.w > key;
        }
        r = (r4[0] + r4[1]) + (r4[2] + r4[3]);
        /* Ties, by index: the experts of one key count alike, so the
         * counts of a warp's experts differ unless two keys are equal.
         * Only then does the warp ask which lanes share its key
         * (match_any, about 600 cycles on the H100 whether or not any do:
         * it was 0.3 us of DeepSeek-V3's node). */
        const memra_u32 counts = memra_warp_or_u32(valid ? 1u << r : 0u);
        if (memra_popc(counts) != memra_popc(memra_warp_ballot(valid)))
            r += memra_popc(memra_match_any(key) & ((1u << lane) - 1u));
        memra_warp_sync(); /* every lane has read the row before the list goes there */
    } else {
        for (memra_u32 j = 0; j < 32u; j++) {
            const memra_u32 kj = memra_shfl_u(key, (int)j);
            r += j >= lo && j < hi && (kj > key || (kj == key && j < lane));
        }
    }
    /* Where every group is one warp (DeepSeek-V3's 8 groups of 32), the
     * warp scores its group now, from its two best keys by two warp
     * maxima that need nothing of the rank above (so the two overlap), and
     * after the barrier each warp only ranks the groups' keys: scoring the
     * groups from their lists' heads there put a shared-memory round trip,
     * the score and a chain of shuffles between the barrier and the final
     * rank. */
    const int warp_groups = n_group > 1u && G == 32u;
    if (warp_groups) {
        const memra_u32 k1 = memra_warp_max_u32(key);
        const memra_u32 ties = memra_warp_ballot(key == k1);
        const memra_u32 k2 = (ties & (ties - 1u)) ? k1 : memra_warp_max_u32(key == k1 ? 0u : key);
        const memra_u32 gk = memra_route_key(
            memra_route_group_score(k1, k2, (flags & MEMRA_ROUTE_FLAG_GROUP_MAX) != 0, G));
        if (lane == 0)
            ((memra_u32 *)sh_gk4)[wid] = gk;
    }
    const memra_u32 listed = top_k > 2u ? top_k : 2u;
    const memra_u64 me = ((memra_u64)key << 32) | (memra_u64)(~tid);
    /* A listed expert's score goes where its entry does, so the final
     * rank's holder reads it by its own place, before its rank is known. */
    if (valid && r < listed) {
        const memra_u32 at = seg_lo + r;
        sh_list[at] = me;
        if (warp_segments)
            sh_klist[MEMRA_ROUTE_KLIST_STRIDE * wid + r] = key;
        sh_s[at] = s;
    }
    if (lane == 0)
        sh_bad[wid] = wbad;
    MEMRA_PROBE(3, "ranked in segments");
    memra_block_sync();
    int any_bad = no_softmax;
    for (memra_u32 i = 0; i < nw; i++)
        any_bad |= sh_bad[i];
    MEMRA_PROBE(4, "barrier passed");
    if (any_bad) { /* the whole block */
        if (tid < K)
            memra_route_emit_bad(&o, t, tid, top_k);
        return 0;
    }

    /* 4. Groups: lane g of every warp merges group g's segment heads, scores
     *    it, and ranks it among the groups by counting. */
    memra_u32 allowed = 0xffffffffu;
    if (warp_groups) {
        /* Lane g ranks group g by counting, the keys read four at a time
         * (every lane the same words: a broadcast). */
        const memra_u32 gk = lane < n_group ? ((const memra_u32 *)sh_gk4)[lane] : 0u;
        memra_u32 g4[4] = {0u, 0u, 0u, 0u};
        for (memra_u32 h0 = 0; h0 < n_group; h0 += 4u) {
            const memra_u32x4 q = sh_gk4[h0 / 4u];
            g4[0] += h0 < n_group && (q.x > gk || (q.x == gk && h0 < lane));
            g4[1] += h0 + 1u < n_group && (q.y > gk || (q.y == gk && h0 + 1u < lane));
            g4[2] += h0 + 2u < n_group && (q.z > gk || (q.z == gk && h0 + 2u < lane));
            g4[3] += h0 + 3u < n_group && (q.w > gk || (q.w == gk && h0 + 3u < lane));
        }
        const memra_u32 rank = (g4[0] + g4[1]) + (g4[2] + g4[3]);
        allowed = memra_warp_ballot(lane < n_group && rank < topk_group);
    } else if (n_group > 1) {
        memra_u32 gk = 0;
        if (lane < n_group) {
            memra_u32 k1 = 0, k2 = 0;
            const memra_u32 g0 = lane * G, g1 = g0 + G;
            for (memra_u32 p = g0; p < g1;) {
                memra_u32 next = (p / 32u + 1u) * 32u;
                next = next < g1 ? next : g1;
                const memra_u32 h1 = (memra_u32)(sh_list[p] >> 32);
                const memra_u32 h2 = next - p > 1u ? (memra_u32)(sh_list[p + 1u] >> 32) : 0u;
                memra_route_top2_merge(&k1, &k2, h1, h2);
                p = next;
            }
            gk = memra_route_key(
                memra_route_group_score(k1, k2, (flags & MEMRA_ROUTE_FLAG_GROUP_MAX) != 0, G));
        }
        memra_u32 rank = 0;
        for (memra_u32 h = 0; h < n_group; h++) {
            const memra_u32 kh = memra_shfl_u(gk, (int)h);
            rank += kh > gk || (kh == gk && h < lane);
        }
        allowed = memra_warp_ballot(lane < n_group && rank < topk_group);
    }
    MEMRA_PROBE(5, "groups");

    /* 5. The final rank: a listed entry, if its segment is in play, counts
     *    the entries of the other segments in play that beat it. Below tau,
     *    the best top_k-th key of any one list, nothing can be chosen. */
    memra_u64 mine_e = 0; /* a holder's entry; its rank where it was counted */
    memra_u32 rank = 0;
    /* The entry's score, read by its place in the lists as soon as the
     * holder is known: its load overlaps the count. */
    float hold_s = 0.0f;
    int counted = 0;
    const memra_u32 lim_own = seg_hi - seg_lo < top_k ? seg_hi - seg_lo : top_k;
    const int holds = valid && tid - seg_lo < lim_own && ((allowed >> my_group) & 1u);
    if (warp_segments) {
        /* Each segment is a warp: warp w's list is at sh_list[32 w], its
         * first min(32, E - 32 w) entries, their keys at
         * sh_klist[MEMRA_ROUTE_KLIST_STRIDE w], and the warp is in play
         * when its group is. Only top_k lanes hold an entry, so the warp
         * splits the other lists among P = 32 / top_k parts of top_k lanes
         * (lane = part * top_k + holder) and sums the parts' counts with
         * shuffles: a P-th of the loads and compares on each warp's path.
         * No loop here depends on a load: with the spec's counts compiled
         * in (MEMRA_ROUTE_SPECIALIZE) the phase is straight-line code. */
        const memra_u32 len_own = memra_rb_warp_len(E, wid);
        const memra_u32 lim = len_own < top_k ? len_own : top_k;
        if (memra_rb_warp_plays(wid, n_group, G, allowed)) { /* the whole warp */
            const memra_u32 P = 32u / top_k, p = lane / top_k, h = lane - p * top_k;
            memra_u32 tau = 0;
            for (memra_u32 w = 0; w < nw; w++) {
                if (memra_rb_warp_plays(w, n_group, G, allowed) &&
                    memra_rb_warp_len(E, w) >= top_k) {
                    const memra_u32 kth = sh_klist[MEMRA_ROUTE_KLIST_STRIDE * w + top_k - 1u];
                    tau = kth > tau ? kth : tau;
                }
            }
            const int part = p < P && h < lim;
            const memra_u64 own = part ? sh_list[wlo + h] : 0u;
            if (part)
                hold_s = sh_s[wlo + h];
            const memra_u32 mk = (memra_u32)(own >> 32);
            const int live = part && mk >= tau;
            /* Every lane counts, live or not (a dead holder's count is
             * never used): the loads need nothing of tau, so they issue
             * with tau's own instead of after it. */
            memra_u32 beat = 0;
            {
                for (memra_u32 w0 = 0; w0 < nw; w0 += P) {
                    const memra_u32 w = w0 + p;
                    /* w past the block has no group (its shift would pass
                     * 31, undefined): the bound is tested first, and its
                     * lanes read warp 0's row and count none of it. No
                     * branch: the loads go out at once. */
                    const int use =
                        w < nw && w != wid && memra_rb_warp_plays(w, n_group, G, allowed);
                    const memra_u32 wr = w < nw ? w : 0u, len = memra_rb_warp_len(E, wr);
                    const memra_u32 n = !use ? 0u : len < top_k ? len : top_k;
                    /* Another warp's entry of the same key beats this one
                     * when its index is lower, i.e. its warp is: key > mk -
                     * 1 there. A listed key is never 0 (only a NaN's is,
                     * and a non-finite token left at the barrier), so a
                     * holder's mk - 1 does not wrap (a lane that holds
                     * nothing counts for nothing). */
                    const memra_u32 thr = mk - (w < wid ? 1u : 0u);
                    const memra_u32 *const kl = sh_klist + MEMRA_ROUTE_KLIST_STRIDE * wr;
                    memra_u32 b4[4] = {0u, 0u, 0u, 0u};
                    for (memra_u32 i0 = 0; i0 < top_k; i0 += 4u) {
                        const memra_u32x4 q = *(const memra_u32x4 *)(kl + i0);
                        b4[0] += i0 < n && q.x > thr;
                        b4[1] += i0 + 1u < n && q.y > thr;
                        b4[2] += i0 + 2u < n && q.z > thr;
                        b4[3] += i0 + 3u < n && q.w > thr;
                    }
                    beat += (b4[0] + b4[1]) + (b4[2] + b4[3]);
                }
            }
            /* The parts' counts to the holders (every lane shuffles). */
            memra_u32 sum = beat;
            for (memra_u32 q = 1; q < P; q++)
                sum += memra_shfl_u(beat, (int)(h + q * top_k));
            if (live && p == 0u)
                counted = 1, rank = h + sum, mine_e = own;
        }
    } else if (holds) {
        mine_e = sh_list[tid];
        hold_s = sh_s[tid];
        memra_u64 tau = 0;
        for (memra_u32 g = 0; g < n_group; g++) {
            if (!((allowed >> g) & 1u))
                continue;
            for (memra_u32 p = g * G; p < g * G + G;) {
                memra_u32 next = (p / 32u + 1u) * 32u;
                next = next < g * G + G ? next : g * G + G;
                if (next - p >= top_k) {
                    const memra_u64 kth = sh_list[p + top_k - 1u];
                    tau = kth > tau ? kth : tau;
                }
                p = next;
            }
        }
        if (mine_e >= tau) {
            counted = 1, rank = tid - seg_lo;
            for (memra_u32 g = 0; g < n_group; g++) {
                if (!((allowed >> g) & 1u))
                    continue;
                for (memra_u32 p = g * G; p < g * G + G;) {
                    memra_u32 next = (p / 32u + 1u) * 32u;
                    next = next < g * G + G ? next : g * G + G;
                    if (p != seg_lo) {
                        /* The list is sorted, so the entries that beat
                         * this one are its first ones. Up to
                         * MEMRA_ROUTE_RANK_CHUNK_WARPS warps, counted in
                         * chunks of independent loads (latency bound);
                         * above, walked until the first that loses, the
                         * fewest loads (the block's warps then contend
                         * for the shared-memory pipe). */
                        const memra_u32 n = next - p < top_k ? next - p : top_k;
                        if (nw <= MEMRA_ROUTE_RANK_CHUNK_WARPS) {
                            for (memra_u32 i0 = 0; i0 < n; i0 += MEMRA_ROUTE_RANK_CHUNK) {
                                MEMRA_UNROLL
                                for (memra_u32 u = 0; u < MEMRA_ROUTE_RANK_CHUNK; u++)
                                    rank += i0 + u < n && sh_list[p + i0 + u] > mine_e;
                            }
                        } else {
                            memra_u32 i = 0;
                            while (i < n && sh_list[p + i] > mine_e)
                                i++;
                            rank += i;
                        }
                    }
                    p = next;
                }
            }
        }
    }
    if (counted && rank < top_k) {
        const int e = (int)~(memra_u32)mine_e;
        sh_sel[rank] = e;
        sh_w[rank] = hold_s;
    }
    MEMRA_PROBE(6, "final rank");
    memra_block_sync();

    /* 6. The pairs: the routed ones by rank, then the shared ones. */
    int e = -1;
    if (tid < K) {
        float W = 0.0f;
        if (MEMRA_ROUTE_NEEDS_SUM(flags))
            for (memra_u32 j = 0; j < top_k; j++)
                W = memra_add_rn(W, sh_w[j]);
        MEMRA_PROBE(7, "weights summed (barrier passed)");
        int slot = pair_slot;
        memra_vrows_macro m = pair;
        float sc = 0.0f;
        if (tid < top_k) {
            e = sh_sel[tid];
            sc = sh_w[tid];
            if (o.tables)
                slot = memra_vrows_slot(e, &o.c), m = memra_vrows_macro_at(&o.c, slot);
        } else {
            e = (int)(E + (tid - top_k));
        }
        const float w = memra_route_weight(tid, top_k, sc, W, flags, scale, shared_weight);
        MEMRA_PROBE(8, "weight");
        memra_route_emit_at(&o, t, tid, e, w, slot, m);
        MEMRA_PROBE(9, "pairs written");
    }
    /* 7. A launch of one token lays its fused layout out here, from the
     *    experts in warp 0's registers (memra_layout_token), where
     *    memra_route_layout would count, wait for two barriers and read
     *    them back from memory; the per-expert outputs from the winners in
     *    shared memory, which the last barrier made every thread's. The
     *    sentinel first, by the whole block, ordered by one barrier. */
    if (!MEMRA_ROUTE_LAID(flags) || !lp.ticket || gridDim.x != 1u)
        return 0;
    memra_layout_fill(&lp, K);
    memra_block_sync();
    if (wid == 0u)
        memra_layout_token(&lp, e, K);
    if (!memra_layout_places_only(&lp))
        memra_layout_token_outputs(&lp, sh_sel, top_k, E, K);
    return 1;
}

/* The bitmap path's pairs a thread (memra_layout_tokens), in a spec's
 * +layout build only, which every block-kernel launch that lays out takes:
 * at 64 and 256 tokens its fused layout node measured 0.8-5.4 us shorter
 * than the general path's on the H100 (DeepSeek-V3 8.33 -> 7.43 and
 * 12.92 -> 10.85; Qwen3-MoE 9.52 -> 7.63 and 16.92 -> 11.52), 0.1-0.2 us
 * longer at 8 tokens, its one-token path unchanged
 * (docs/runs/2026-12-07-h100-d6966fa/probe-bitmap.log). */
#if defined(MEMRA_SPEC_E) && (MEMRA_SPEC_FLAGS & MEMRA_ROUTE_FLAG_LAYOUT)
#define MEMRA_RB_LAYOUT_PER 16u
#else
#define MEMRA_RB_LAYOUT_PER 0u
#endif

MEMRA_KERNEL MEMRA_BOUNDS(MEMRA_ABI_ROUTE_MAX_EXPERT) memra_route_block_kernel(MEMRA_ROUTE_PARAMS)
{
    /* Every build holds the general layout (it tests lp.ticket at run
     * time): a spec's build without it, its routing unchanged, measured
     * 0.15-0.29 us a node slower on the H100 (32 registers instead of 59
     * for DeepSeek-V3; docs/runs/2026-12-06-h100-93c2b5a/). The bitmap path
     * (memra_layout_tokens) is in the +layout build alone: at 16 pairs a
     * thread it doubles the code, and in the build that routes without a
     * layout it measured 0.05-0.25 us a node slower
     * (docs/runs/2026-12-06-h100-b76fe8c/). */
    if (!memra_route_block(MEMRA_ROUTE_ARGS))
        memra_route_layout(&lp, sel, n_tokens, top_k + n_shared, memra_rb_sh.words, MEMRA_RB_WORDS,
                           MEMRA_RB_LAYOUT_PER, &memra_rb_last);
}
