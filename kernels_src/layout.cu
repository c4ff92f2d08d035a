/* memra: the expert-sorted layout (docs/layout-sorted.md). Concatenated
 * after abi.h, layout_params.h and vrows_pair.cuh (the host tests run the
 * same text as C, kernel_on_host.h).
 *
 * A pair's place is fixed by counting, never by the order atomics land in:
 * pair p of expert e goes to
 *     cum[e] + (the pairs of e before p's tile) + (the pairs of e before
 *     p's warp range in its tile) + (the pairs of e before p in its chunk
 *     of 32, __match_any_sync)
 * where cum is the exclusive prefix sum of the runs padded to block_size.
 * Each warp walks its range of the tile 32 pairs at a time, in order, so
 * inside an expert the pairs come out in ascending index, the same bits on
 * every run. It walks twice, counting and then placing, from ids loaded
 * a batch of chunks at a time (the first batch once for both walks).
 * Decode-sized batches take one block (memra_layout_block: the standalone
 * kernel, or the last block of a routing launch that lays its own batch
 * out; a one-token routing launch, the warp that routed the token,
 * memra_layout_token); larger ones three launches over tiles of
 * `tile` pairs (the launcher's choice): count, scan, place. */

/* A run's block label: the expert, or through the map its local id. */
MEMRA_DEVICE int memra_layout_label(const memra_layout_params *lp, memra_u32 e)
{
    const int *map = (const int *)lp->map;
    if (!map)
        return (int)e;
    return e < lp->map_len ? map[e] : (int)(lp->n_local + (e - lp->map_len));
}

/* Pair p's expert, n_expert for none (an id outside the range: a padding
 * row's -1). `fresh`: another block wrote the ids in this launch, so they
 * are read past this SM's L1. */
MEMRA_DEVICE memra_u32 memra_layout_expert(const int *ids, memra_u32 p, memra_u32 E, int fresh)
{
    const memra_u32 e = (memra_u32)(fresh ? memra_load_cg(&ids[p]) : ids[p]);
    return e < E ? e : E;
}

/* Chunks of 32 pairs whose ids a warp loads at once: the loads are
 * independent, so a batch costs one memory round trip, not one a chunk
 * (the ids were written by this launch or the one before: an L2 trip). */
#define MEMRA_LAYOUT_BATCH 8u

/* The pairs [lo, hi) split among warps in ranges of 2^sh chunks of 32: a
 * range is a whole number of chunks, as few as fill the warps. */
MEMRA_DEVICE memra_u32 memra_layout_range_shift(memra_u32 n_pairs, memra_u32 warps)
{
    const memra_u32 chunks = (n_pairs + 31u) >> 5;
    memra_u32 sh = 0;
    while ((warps << sh) < chunks)
        sh++;
    return sh;
}

/* The experts of the batch of chunks from pair q0 (n_expert past hi). */
MEMRA_DEVICE void memra_layout_load(const memra_layout_params *lp, const int *ids, memra_u32 q0,
                                    memra_u32 hi, memra_u32 *e, int fresh)
{
    const memra_u32 lane = threadIdx.x & 31u;
    MEMRA_UNROLL
    for (memra_u32 i = 0; i < MEMRA_LAYOUT_BATCH; i++) {
        const memra_u32 p = q0 + 32u * i + lane;
        e[i] = p < hi ? memra_layout_expert(ids, p, lp->n_expert, fresh) : lp->n_expert;
    }
}

/* One batch of a warp's walk, chunk by chunk in order. Counting (`at`
 * NULL): each pair adds one to base[e] with a shared atomic, so no chunk
 * waits on the one before. Placing: pair p of expert e goes to at[e] +
 * base[e] + its rank among its chunk's pairs of e, then base[e] grows by
 * the chunk's: a chain through shared memory, with every chunk's lanes of
 * each expert found ahead of it. */
MEMRA_DEVICE void memra_layout_batch(const memra_layout_params *lp, memra_u32 q0, memra_u32 hi,
                                     const memra_u32 *e, memra_u32 *base, const memra_u32 *at)
{
    const memra_u32 lane = threadIdx.x & 31u, E = lp->n_expert;
    if (!at) { /* the same for the whole warp; past hi every id is n_expert */
        MEMRA_UNROLL
        for (memra_u32 i = 0; i < MEMRA_LAYOUT_BATCH; i++)
            if (e[i] < E)
                atomicAdd(&base[e[i]], 1u);
        return;
    }
    int *sorted = (int *)lp->sorted_ids;
    /* Each chunk's lanes of the same expert (memra_match_bits), the chunks'
     * ballots side by side a bit at a time. */
    const memra_u32 nbits = memra_bit_width(E);
    memra_u32 same[MEMRA_LAYOUT_BATCH];
    MEMRA_UNROLL
    for (memra_u32 i = 0; i < MEMRA_LAYOUT_BATCH; i++)
        same[i] = 0xffffffffu;
    MEMRA_NO_UNROLL
    for (memra_u32 b = 0; b < nbits; b++) { /* the same for the whole warp */
        MEMRA_UNROLL
        for (memra_u32 i = 0; i < MEMRA_LAYOUT_BATCH; i++) {
            const memra_u32 m = memra_warp_ballot((e[i] >> b) & 1u);
            same[i] &= (e[i] >> b) & 1u ? m : ~m;
        }
    }
    MEMRA_UNROLL
    for (memra_u32 i = 0; i < MEMRA_LAYOUT_BATCH; i++) {
        if (q0 + 32u * i >= hi) /* the same for the whole warp */
            break;
        const memra_u32 below = memra_popc(same[i] & ((1u << lane) - 1u));
        if (e[i] < E)
            sorted[at[e[i]] + base[e[i]] + below] = (int)(q0 + 32u * i + lane);
        memra_warp_sync(); /* every lane has read base[e] before the leader adds */
        if (below == 0 && e[i] < E)
            base[e[i]] += memra_popc(same[i]);
        memra_warp_sync();
    }
}

/* One warp's walk over pairs [lo, hi), counting or placing (as
 * memra_layout_batch); `first` holds the experts of its first batch,
 * loaded by the caller (once for both walks). Each batch's ids are asked
 * for before the batch ahead of them is walked, so their trip overlaps
 * that walk. */
MEMRA_DEVICE void memra_layout_walk(const memra_layout_params *lp, const int *ids, memra_u32 lo,
                                    memra_u32 hi, const memra_u32 *first, memra_u32 *base,
                                    const memra_u32 *at, int fresh)
{
    memra_u32 cur[MEMRA_LAYOUT_BATCH];
    MEMRA_UNROLL
    for (memra_u32 i = 0; i < MEMRA_LAYOUT_BATCH; i++)
        cur[i] = first[i];
    for (memra_u32 q0 = lo; q0 < hi; q0 += 32u * MEMRA_LAYOUT_BATCH) {
        memra_u32 next[MEMRA_LAYOUT_BATCH]; /* past hi: no load, n_expert */
        memra_layout_load(lp, ids, q0 + 32u * MEMRA_LAYOUT_BATCH, hi, next, fresh);
        memra_layout_batch(lp, q0, hi, cur, base, at);
        MEMRA_UNROLL
        for (memra_u32 i = 0; i < MEMRA_LAYOUT_BATCH; i++)
            cur[i] = next[i];
    }
}

/* x rounded up to a multiple of bs. */
MEMRA_DEVICE memra_u32 memra_layout_round_up(memra_u32 x, memra_u32 bs)
{
    return memra_udiv(x + bs - 1u, bs) * bs;
}

/* The exclusive prefix sums of the experts' counts, by the whole block
 * (every thread calls): cum (each run padded to block_size) and, when the
 * call asks for the offsets, off (unpadded), with cum[E] and off[E] the
 * totals. Thread i takes a run of consecutive experts; the threads' sums
 * are scanned by shuffles in each warp, and each warp adds the warps'
 * before it from shared memory: one barrier, no serial pass over the
 * experts by one warp. */
MEMRA_DEVICE void memra_layout_scans(const memra_layout_params *lp, const memra_u32 *count,
                                     memra_u32 *cum, memra_u32 *off)
{
    MEMRA_SHARED memra_u32 warp_sum[2][32];
    const memra_u32 E = lp->n_expert, bs = lp->block_size, tid = threadIdx.x;
    const memra_u32 lane = tid & 31u, wid = tid >> 5, per = (E + blockDim.x - 1u) / blockDim.x;
    const memra_u32 lo = tid * per < E ? tid * per : E, hi = lo + per < E ? lo + per : E;
    memra_u32 sp = 0, su = 0; /* this thread's sums, padded and not */
    for (memra_u32 i = lo; i < hi; i++) {
        sp += memra_layout_round_up(count[i], bs);
        su += count[i];
    }
    memra_u32 ip = sp, iu = su;
    for (int d = 1; d < 32; d <<= 1) {
        const memra_u32 up = memra_shfl_up_u(ip, d), uu = memra_shfl_up_u(iu, d);
        ip += lane >= (memra_u32)d ? up : 0u;
        iu += lane >= (memra_u32)d ? uu : 0u;
    }
    if (lane == 31u)
        warp_sum[0][wid] = ip, warp_sum[1][wid] = iu;
    memra_block_sync();
    for (memra_u32 w = 0; w < wid; w++)
        ip += warp_sum[0][w], iu += warp_sum[1][w];
    memra_u32 rp = ip - sp, ru = iu - su;
    for (memra_u32 i = lo; i < hi; i++) {
        cum[i] = rp;
        rp += memra_layout_round_up(count[i], bs);
        if (lp->offsets)
            off[i] = ru;
        ru += count[i];
    }
    if (tid == blockDim.x - 1u) { /* past the last run: the totals */
        cum[E] = rp;
        if (lp->offsets)
            off[E] = ru;
    }
}

/* The labels of the blocks of expert e's run [start, end). */
MEMRA_DEVICE void memra_layout_labels(const memra_layout_params *lp, memra_u32 e, memra_u32 start,
                                      memra_u32 end)
{
    const memra_u32 bs = lp->block_size;
    int *eids = (int *)lp->expert_ids;
    const int label = memra_layout_label(lp, e);
    for (memra_u32 b = memra_udiv(start, bs); b < memra_udiv(end, bs); b++)
        eids[b] = label;
}

/* Expert e's run from `start` by the lanes of one warp: the sentinel in
 * its padding and its blocks' label, lane l taking slots and blocks l, l +
 * 32, ... A run's padding is up to block_size - 1 adjacent slots and its
 * labels adjacent words, so the warp's stores are whole lines; a thread an
 * expert wrote them a slot at a time, each store of a warp in 32 lines
 * (with one block laying out DeepSeek-V3's 512 tokens, block size 64, the
 * layout took about 15 us past the routing's on the H100, most of it, by
 * our count of those stores, theirs; BENCHMARKS.md, twenty-third
 * session: not yet measured apart). */
MEMRA_DEVICE void memra_layout_run(const memra_layout_params *lp, memra_u32 e, memra_u32 start,
                                   memra_u32 count, memra_u32 n_pairs, memra_u32 lane)
{
    const memra_u32 bs = lp->block_size, end = start + memra_layout_round_up(count, bs);
    int *sorted = (int *)lp->sorted_ids, *eids = (int *)lp->expert_ids;
    for (memra_u32 q = start + count + lane; q < end; q += 32u)
        sorted[q] = (int)n_pairs;
    const int label = memra_layout_label(lp, e);
    for (memra_u32 b = memra_udiv(start, bs) + lane; b < memra_udiv(end, bs); b += 32u)
        eids[b] = label;
}

/* The optional per-expert outputs of expert x (x = n_expert: the totals'
 * entries of the offsets): its unpadded and padded offsets, its count, and
 * its count added into the load (nothing added for none). */
MEMRA_DEVICE void memra_layout_expert_outputs(const memra_layout_params *lp, memra_u32 x,
                                              memra_u32 off, memra_u32 cum, memra_u32 count)
{
    if (lp->offsets)
        ((int *)lp->offsets)[x] = (int)off;
    if (lp->padded_offsets)
        ((int *)lp->padded_offsets)[x] = (int)cum;
    if (x == lp->n_expert)
        return;
    if (lp->counts)
        ((int *)lp->counts)[x] = (int)count;
    if (lp->load && count && (lp->flags & MEMRA_LAYOUT_FLAG_LOAD_I64))
        memra_atomic_add_u64((memra_u64 *)lp->load + x, (memra_u64)count);
    else if (lp->load && count)
        atomicAdd((memra_u32 *)lp->load + x, count);
}

/* Past the last run (`total` the padded sum of all): the sentinel in every
 * slot, -1 as every block's label, and n_post_pad. The thread `tid` of
 * `nthreads` takes every nthreads-th slot and block. */
MEMRA_DEVICE void memra_layout_tail(const memra_layout_params *lp, memra_u32 total,
                                    memra_u32 n_pairs, memra_u32 tid, memra_u32 nthreads)
{
    int *sorted = (int *)lp->sorted_ids, *eids = (int *)lp->expert_ids;
    if (tid == 0)
        *(int *)lp->n_post_pad = (int)total;
    for (memra_u32 q = total + tid; q < lp->sorted_len; q += nthreads)
        sorted[q] = (int)n_pairs;
    for (memra_u32 b = memra_udiv(total, lp->block_size) + tid; b < lp->n_blocks; b += nthreads)
        eids[b] = -1;
}

/* Everything but the pairs' own places, from each expert's count and the
 * two prefix sums (off only where the call asks for the offsets). The
 * thread `tid` of `nthreads` (whole warps) takes every nthreads-th
 * expert's outputs, slot and block past the runs; its warp every
 * (nthreads / 32)-th run. */
MEMRA_DEVICE void memra_layout_finish(const memra_layout_params *lp, const memra_u32 *count,
                                      const memra_u32 *cum, const memra_u32 *off, memra_u32 n_pairs,
                                      memra_u32 tid, memra_u32 nthreads)
{
    const memra_u32 E = lp->n_expert;
    for (memra_u32 e = tid; e <= E; e += nthreads)
        memra_layout_expert_outputs(lp, e, lp->offsets ? off[e] : 0u, cum[e],
                                    e < E ? count[e] : 0u);
    for (memra_u32 e = tid >> 5; e < E; e += nthreads >> 5) /* the same for the whole warp */
        memra_layout_run(lp, e, cum[e], count[e], n_pairs, tid & 31u);
    memra_layout_tail(lp, cum[E], n_pairs, tid, nthreads);
}

/* Up to this many pairs (a decode step of a few tokens) the layout takes
 * no barrier and no shared memory (memra_layout_small, memra_layout_token)
 * and finds the padding already written (memra_layout_prefill). */
#define MEMRA_LAYOUT_SMALL_PAIRS 32u

/* Whether a layout writes the pairs' places, the labels and n_post_pad
 * only, none of the per-expert outputs. */
MEMRA_DEVICE int memra_layout_places_only(const memra_layout_params *lp)
{
    return !lp->offsets && !lp->padded_offsets && !lp->counts && !lp->load;
}

/* The sentinel in every position of the sorted list and -1 as every
 * block label, block b of the grid taking the b-th of gridDim.x equal
 * shares (every thread of every block calls), before anything decides
 * where the pairs go: the placing then writes the pairs and their runs'
 * labels and nothing else, and its chain from the ids to the last store
 * is short. A routing launch fills at memra_route_layout's start, after
 * its routing; the fill is ordered before the placing by the launch's
 * barriers, and in a launch of several blocks by the layout's count. */
MEMRA_DEVICE void memra_layout_fill(const memra_layout_params *lp, memra_u32 n_pairs)
{
    int *sorted = (int *)lp->sorted_ids, *eids = (int *)lp->expert_ids;
    /* 32-bit arithmetic (sorted_len < 2^31, and a launch that fills has at
     * most 256 tokens, so the shares' ends do not wrap) */
    const memra_u32 b = blockIdx.x, nb = gridDim.x, L = lp->sorted_len, NB = lp->n_blocks;
    const memra_u32 qs = L / nb + (L % nb != 0u), ks = NB / nb + (NB % nb != 0u);
    const memra_u32 q1 = b * qs + qs < L ? b * qs + qs : L,
                    k1 = b * ks + ks < NB ? b * ks + ks : NB;
    for (memra_u32 q = b * qs + threadIdx.x; q < q1; q += blockDim.x)
        sorted[q] = (int)n_pairs;
    for (memra_u32 k = b * ks + threadIdx.x; k < k1; k += blockDim.x)
        eids[k] = -1;
}

/* The fill where the small path takes the batch (the standalone kernel's,
 * and a routing launch's below the bitmap path): up
 * to 32 pairs the sorted list has at most 32 * block_size entries (the
 * sizes' cap, memra_layout_sizes). */
MEMRA_DEVICE void memra_layout_prefill(const memra_layout_params *lp, memra_u32 n_pairs)
{
    if (n_pairs <= MEMRA_LAYOUT_SMALL_PAIRS)
        memra_layout_fill(lp, n_pairs);
}

/* The whole layout of up to 32 pairs over memra_layout_prefill's fill,
 * with no barrier and no shared memory: every warp loads the ids, a pair a
 * lane, and finds from registers alone what the general path counts and
 * sums through shared memory: a pair's rank inside its expert (its match's
 * lower lanes) and, over the experts present (each one's lowest lane), the
 * padded sums below its expert and in all. Warp 0 places the pairs and
 * writes each present expert's block labels and n_post_pad; the block's
 * threads share the per-expert outputs. The same numbers as
 * memra_layout_block's, so the same bits. */
MEMRA_DEVICE void memra_layout_small(const memra_layout_params *lp, const int *ids,
                                     memra_u32 n_pairs, int fresh)
{
    const memra_u32 E = lp->n_expert, bs = lp->block_size, tid = threadIdx.x;
    const memra_u32 nthreads = blockDim.x, lane = tid & 31u;
    int *sorted = (int *)lp->sorted_ids;
    const memra_u32 e = lane < n_pairs ? memra_layout_expert(ids, lane, E, fresh) : E;
    const memra_u32 same = memra_match_bits(e, memra_bit_width(E)), n_e = memra_popc(same);
    const memra_u32 below = memra_popc(same & ((1u << lane) - 1u));
    const memra_u32 leads = memra_warp_ballot(e < E && below == 0u);
    memra_u32 cp = 0, tp = 0;                   /* padded: below this lane's expert, in all */
    for (memra_u32 m = leads; m; m &= m - 1u) { /* the same for the whole warp */
        const int j = memra_ffs(m) - 1;
        const memra_u32 ej = memra_shfl_u(e, j),
                        pj = memra_layout_round_up(memra_shfl_u(n_e, j), bs);
        cp += ej < e ? pj : 0u;
        tp += pj;
    }
    if (tid < 32u && e < E) {
        sorted[cp + below] = (int)lane;
        if (below == 0u)
            memra_layout_labels(lp, e, cp, cp + memra_layout_round_up(n_e, bs));
    }
    if (tid == 0u)
        *(int *)lp->n_post_pad = (int)tp;
    MEMRA_PROBE(13, "layout: placed, padding written");
    if (memra_layout_places_only(lp))
        return;
    /* Expert x's sums and count, x a thread's share of [0, E]. */
    for (memra_u32 x0 = 0; x0 <= E; x0 += nthreads) { /* the same for the whole warp */
        const memra_u32 x = x0 + tid;
        memra_u32 off = 0, cum = 0, count = 0;
        for (memra_u32 m = leads; m; m &= m - 1u) {
            const int j = memra_ffs(m) - 1;
            const memra_u32 ej = memra_shfl_u(e, j), nj = memra_shfl_u(n_e, j);
            off += ej < x ? nj : 0u;
            cum += ej < x ? memra_layout_round_up(nj, bs) : 0u;
            count += ej == x ? nj : 0u;
        }
        if (x <= E)
            memra_layout_expert_outputs(lp, x, off, cum, count);
    }
}

/* The layout of one token's pairs, from the registers of the warp that
 * routed it (every lane calls; lane j < n_pairs holds pair j's expert, any
 * id outside [0, n_expert) none), over memra_layout_prefill's fill (the
 * per-expert outputs: memra_layout_token_outputs). A token's experts are distinct (the
 * routing picks each once; its shared experts follow the routed ones), so
 * each present expert's run is one pair and its padding, one block, and a
 * pair's run is the number of present experts below its own: n_pairs
 * shuffles, where memra_layout_small waits out a trip to memory for the
 * ids, a match and a loop over the experts present. The same numbers for
 * distinct experts, so the same bits. */
MEMRA_DEVICE void memra_layout_token(const memra_layout_params *lp, int id, memra_u32 n_pairs)
{
    const memra_u32 lane = threadIdx.x & 31u, E = lp->n_expert, bs = lp->block_size;
    const memra_u32 e = (memra_u32)id < E ? (memra_u32)id : E;
    memra_u32 run = 0; /* present experts below e: its run, and its first block */
    for (memra_u32 i = 0; i < n_pairs; i++) /* the same for the whole warp */
        run += memra_shfl_u(e, (int)i) < e ? 1u : 0u;
    if (e < E) {
        ((int *)lp->sorted_ids)[run * bs] = (int)lane;
        ((int *)lp->expert_ids)[run] = memra_layout_label(lp, e);
    }
    const memra_u32 present = memra_popc(memra_warp_ballot(e < E));
    if (lane == 0u)
        *(int *)lp->n_post_pad = (int)(present * bs);
    MEMRA_PROBE(13, "layout: placed, padding written");
}

/* memra_layout_token's per-expert outputs, by every thread of the block
 * (each takes every blockDim.x-th expert of [0, n_expert]): the token's
 * pair j has expert routed[j] for j < top_k (shared memory the routing
 * filled before its last barrier), first_shared + (j - top_k) after; the
 * experts are distinct, so below x there are as many pairs as experts,
 * each one block. */
MEMRA_DEVICE void memra_layout_token_outputs(const memra_layout_params *lp, const int *routed,
                                             memra_u32 top_k, memra_u32 first_shared,
                                             memra_u32 n_pairs)
{
    const memra_u32 E = lp->n_expert, bs = lp->block_size;
    for (memra_u32 x = threadIdx.x; x <= E; x += blockDim.x) {
        memra_u32 below = 0, count = 0;
        for (memra_u32 j = 0; j < n_pairs; j++) {
            const memra_u32 e = j < top_k ? (memra_u32)routed[j] : first_shared + (j - top_k);
            below += e < x ? 1u : 0u;
            count += e == x ? 1u : 0u;
        }
        memra_layout_expert_outputs(lp, x, below, below * bs, count);
    }
}

/* The scratch memra_layout_block needs for n_expert experts and `warps`
 * placing warps, in 32-bit words. */
#define MEMRA_LAYOUT_BLOCK_WORDS(E, warps) ((warps) * (E) + (E) + 2u * ((E) + 1u))

/* The whole layout of n_pairs ids by the calling block (every thread of it
 * calls), in `scratch` (`words` 32-bit words of shared memory, at least
 * MEMRA_LAYOUT_BLOCK_WORDS(n_expert, 1)): as many warps as the scratch
 * holds the counts of, and the batch has chunks for, each count and then
 * place a range of whole chunks. Up to MEMRA_LAYOUT_SMALL_PAIRS pairs, over
 * memra_layout_prefill's fill, which the caller has made and ordered
 * before this call. */
MEMRA_DEVICE void memra_layout_block(const memra_layout_params *lp, const int *ids,
                                     memra_u32 n_pairs, memra_u32 *scratch, memra_u32 words,
                                     int fresh)
{
    if (n_pairs <= MEMRA_LAYOUT_SMALL_PAIRS) { /* the whole block */
        memra_layout_small(lp, ids, n_pairs, fresh);
        return;
    }
    const memra_u32 E = lp->n_expert, tid = threadIdx.x, nthreads = blockDim.x;
    const memra_u32 wid = tid >> 5, nw = nthreads >> 5;
    memra_u32 lw = (words - (E + 2u * (E + 1u))) / E; /* walking warps */
    lw = lw > nw ? nw : lw;
    const memra_u32 sh = memra_layout_range_shift(n_pairs, lw);
    const memra_u32 ranges = (((n_pairs + 31u) >> 5) + (1u << sh) - 1u) >> sh;
    lw = ranges > 0u ? ranges : 1u;
    const memra_u32 lo = wid << (sh + 5u) < n_pairs ? wid << (sh + 5u) : n_pairs;
    const memra_u32 hi = n_pairs - lo > (32u << sh) ? lo + (32u << sh) : n_pairs;
    memra_u32 first[MEMRA_LAYOUT_BATCH]; /* in flight while the counts are zeroed */
    memra_layout_load(lp, ids, lo, hi, first, fresh);
    memra_u32 *count = scratch + lw * E, *cum = count + E, *off = cum + E + 1u;
    for (memra_u32 i = tid; i < lw * E; i += nthreads)
        scratch[i] = 0;
    memra_block_sync();
    if (wid < lw)
        memra_layout_walk(lp, ids, lo, hi, first, scratch + wid * E, NULL, fresh);
    memra_block_sync();
    MEMRA_PROBE(11, "layout: counted (barrier passed)");
    /* Each expert's count, and each range's start inside its run. */
    for (memra_u32 e = tid; e < E; e += nthreads) {
        memra_u32 run = 0;
        for (memra_u32 w = 0; w < lw; w++) {
            const memra_u32 c = scratch[w * E + e];
            scratch[w * E + e] = run;
            run += c;
        }
        count[e] = run;
    }
    memra_block_sync();
    memra_layout_scans(lp, count, cum, off);
    memra_block_sync();
    MEMRA_PROBE(12, "layout: summed (barrier passed)");
    if (wid < lw)
        memra_layout_walk(lp, ids, lo, hi, first, scratch + wid * E, cum, fresh);
    memra_layout_finish(lp, count, cum, off, n_pairs, tid, nthreads);
    MEMRA_PROBE(13, "layout: placed, padding written");
}

/* A routing launch's batch (the fused layout) is n_tokens tokens of K
 * pairs, and a token's experts are distinct: the routing picks each once,
 * its shared experts follow the routed ones, a token with a non-finite
 * logit takes experts 0 .. top_k - 1, a padding row none. So expert e's
 * pairs are one per token that chose it, in token order, and a bitmap of
 * those tokens (W words an expert) gives both its count (their population)
 * and each pair's place in its run (the tokens before it): no match and no
 * walk in order, each thread's pairs at once. Up to
 * MEMRA_LAYOUT_TOKEN_WORDS words (256 tokens, a decode batch) and `per`
 * pairs a thread (held in registers from the load to the placing; the
 * kernel's constant, at most MEMRA_LAYOUT_TOKEN_PER_MAX: the team kernels
 * take 4, as many as leave their register counts where they were without
 * the layout; the block kernel 16 in its +layout build, route_block.cu), where the bitmap and the
 * sums fit the scratch; larger batches take memra_layout_block. */
#define MEMRA_LAYOUT_TOKEN_WORDS 8u
#define MEMRA_LAYOUT_TOKEN_PER_MAX 16u

/* The bitmap's words an expert for this batch, 0 where memra_layout_tokens
 * does not take it (up to 32 pairs the small path does). */
MEMRA_DEVICE memra_u32 memra_layout_token_words(const memra_layout_params *lp, memra_u32 n_tokens,
                                                memra_u32 K, memra_u32 words, memra_u32 per)
{
    const memra_u32 E = lp->n_expert, W = (n_tokens + 31u) >> 5;
    const memra_u64 n_pairs = (memra_u64)n_tokens * K;
    if (n_pairs <= MEMRA_LAYOUT_SMALL_PAIRS || W > MEMRA_LAYOUT_TOKEN_WORDS ||
        n_pairs > (memra_u64)per * blockDim.x)
        return 0;
    return (memra_u64)E * W + E + 2u * (E + 1u) <= words ? W : 0u;
}

/* The layout of a routing launch's batch by the calling block (every
 * thread calls), over memra_layout_fill's sentinel, with W =
 * memra_layout_token_words(...) != 0: bit t % 32 of word
 * mask[e * W + t / 32] says token t chose expert e. */
MEMRA_DEVICE void memra_layout_tokens(const memra_layout_params *lp, const int *sel,
                                      memra_u32 n_tokens, memra_u32 K, memra_u32 *scratch,
                                      memra_u32 W, memra_u32 per)
{
    const memra_u32 E = lp->n_expert, tid = threadIdx.x, nthreads = blockDim.x;
    const memra_u32 n_pairs = n_tokens * K, bs = lp->block_size;
    memra_u32 *mask = scratch, *count = mask + E * W, *cum = count + E, *off = cum + E + 1u;
    /* Pair tid + i * nthreads: its expert and token, one word (e < 2^16,
     * t < 2^16), held from the load to the placing. The ids' loads go out
     * first, in flight while the bitmap is zeroed; the tokens step without
     * a division (nthreads = a * K + r). */
    memra_u32 et[MEMRA_LAYOUT_TOKEN_PER_MAX];
    {
        const memra_u32 a = nthreads / K, r = nthreads - a * K;
        memra_u32 tt = tid / K, jj = tid - tt * K;
        MEMRA_UNROLL
        for (memra_u32 i = 0; i < MEMRA_LAYOUT_TOKEN_PER_MAX; i++) {
            const memra_u32 p = tid + i * nthreads;
            if (i == per) /* the kernel's constant: the loops end here */
                break;
            et[i] = (p < n_pairs ? memra_layout_expert(sel, p, E, 1) : E) | tt << 16;
            tt += a, jj += r;
            if (jj >= K)
                tt++, jj -= K;
        }
    }
    for (memra_u32 k = tid; k < E * W; k += nthreads)
        mask[k] = 0;
    memra_block_sync();
    MEMRA_UNROLL
    for (memra_u32 i = 0; i < MEMRA_LAYOUT_TOKEN_PER_MAX && i < per; i++) {
        const memra_u32 e = et[i] & 0xffffu, t = et[i] >> 16;
        if (e < E)
            atomicOr(&mask[e * W + (t >> 5)], 1u << (t & 31u));
    }
    memra_block_sync();
    MEMRA_PROBE(11, "layout: counted (barrier passed)");
    for (memra_u32 x = tid; x < E; x += nthreads) {
        memra_u32 c = 0;
        for (memra_u32 w = 0; w < W; w++)
            c += memra_popc(mask[x * W + w]);
        count[x] = c;
    }
    memra_block_sync();
    memra_layout_scans(lp, count, cum, off);
    memra_block_sync();
    MEMRA_PROBE(12, "layout: summed (barrier passed)");
    int *sorted = (int *)lp->sorted_ids;
    MEMRA_UNROLL
    for (memra_u32 i = 0; i < MEMRA_LAYOUT_TOKEN_PER_MAX && i < per; i++) {
        const memra_u32 e = et[i] & 0xffffu, t = et[i] >> 16;
        if (e >= E)
            continue;
        const memra_u32 *row = mask + e * W, tw = t >> 5;
        memra_u32 rank = memra_popc(row[tw] & ((1u << (t & 31u)) - 1u));
        for (memra_u32 w = 0; w < tw; w++)
            rank += memra_popc(row[w]);
        sorted[cum[e] + rank] = (int)(tid + i * nthreads);
    }
    for (memra_u32 x = tid; x <= E; x += nthreads) {
        const memra_u32 c = x < E ? count[x] : 0u;
        memra_layout_expert_outputs(lp, x, lp->offsets ? off[x] : 0u, cum[x], c);
        if (c)
            memra_layout_labels(lp, x, cum[x], cum[x] + memra_layout_round_up(c, bs));
    }
    if (tid == 0u)
        *(int *)lp->n_post_pad = (int)cum[E];
    MEMRA_PROBE(13, "layout: placed, padding written");
}

/* The routing modules take memra_layout_block alone (their last block lays
 * out its launch's batch); the layout module, the kernels too. */
#ifndef MEMRA_LAYOUT_BLOCK_ONLY
/* Parameters of the layout kernels (src/layout/layout_abi.h). */
#define MEMRA_LAYOUT_KPARAMS                                                                       \
    const int *ids, memra_u32 n_pairs, memra_u32 tile, memra_layout_params lp

/* Each pair of [lo, hi) added to its expert's count, hist[e], and, with
 * `before`, those below t0 to before[e] too (every thread of the block
 * calls; shared atomics, so in no order). MEMRA_LAYOUT_BATCH loads in
 * flight a thread: the atomics between them would otherwise keep each
 * load waiting on the one before. */
MEMRA_DEVICE void memra_layout_count(const int *ids, memra_u32 lo, memra_u32 hi, memra_u32 E,
                                     memra_u32 *hist, memra_u32 *before, memra_u32 t0)
{
    for (memra_u32 p0 = lo + threadIdx.x; p0 < hi; p0 += MEMRA_LAYOUT_BATCH * blockDim.x) {
        memra_u32 e[MEMRA_LAYOUT_BATCH];
        MEMRA_UNROLL
        for (memra_u32 i = 0; i < MEMRA_LAYOUT_BATCH; i++) {
            const memra_u32 p = p0 + i * blockDim.x;
            e[i] = p < hi ? memra_layout_expert(ids, p, E, 0) : E;
        }
        MEMRA_UNROLL
        for (memra_u32 i = 0; i < MEMRA_LAYOUT_BATCH; i++) {
            if (e[i] >= E)
                continue;
            atomicAdd(&hist[e[i]], 1u);
            if (before && p0 + i * blockDim.x < t0)
                atomicAdd(&before[e[i]], 1u);
        }
    }
}

/* Place warp `wid`'s range [lo, hi) of the tile [t0, t1) of `tile` pairs
 * (MEMRA_LAYOUT_PLACE_WARPS ranges of whole chunks). */
MEMRA_DEVICE void memra_layout_tile_range(memra_u32 t0, memra_u32 t1, memra_u32 tile, memra_u32 wid,
                                          memra_u32 *lo, memra_u32 *hi)
{
    const memra_u32 sh = memra_layout_range_shift(tile, MEMRA_LAYOUT_PLACE_WARPS);
    *lo = t1 - t0 > (wid << (sh + 5u)) ? t0 + (wid << (sh + 5u)) : t1;
    *hi = t1 - *lo > (32u << sh) ? *lo + (32u << sh) : t1;
}

/* The place warps' starts (every thread of the block calls): range w's
 * count of expert e, hist[w * E + e], becomes the count of e in the ranges
 * before it, and at[e] = a[e] + b[e] is the tile's start in e's run. */
MEMRA_DEVICE void memra_layout_tile_starts(memra_u32 E, memra_u32 *hist, memra_u32 *at,
                                           const memra_u32 *a, const memra_u32 *b)
{
    for (memra_u32 e = threadIdx.x; e < E; e += blockDim.x) {
        memra_u32 run = 0;
        for (memra_u32 w = 0; w < MEMRA_LAYOUT_PLACE_WARPS; w++) {
            const memra_u32 c = hist[w * E + e];
            hist[w * E + e] = run;
            run += c;
        }
        at[e] = a[e] + b[e];
    }
}

/* A one-launch batch of more than a tile (MEMRA_LAYOUT_SMALL_TILE pairs)
 * by a block a tile, with no workspace: block b places tile b's pairs,
 * and every block counts every pair itself, the totals and the pairs
 * before its tile, so no block waits for another's counts (a batch of up
 * to MEMRA_LAYOUT_ONE_LAUNCH pairs is read from L2 once a block). The
 * counts are the same numbers in every block, so every block's sums are
 * too; the runs' padding, labels, per-expert outputs and the tail are
 * shared out over the grid. One block walking all the pairs in order
 * wrote them from one SM, a store of 32 scattered slots a warp each 32
 * pairs: DeepSeek-V3's 2,048 tokens (16,384 pairs) took about 31 us past
 * the routing's on the H100 (BENCHMARKS.md). */
#define MEMRA_LAYOUT_TILED_WORDS(E) (MEMRA_LAYOUT_PLACE_WARPS * (E) + 3u * (E) + 2u * ((E) + 1u))
MEMRA_DEVICE void memra_layout_tiled(const memra_layout_params *lp, const int *ids,
                                     memra_u32 n_pairs, memra_u32 *scratch)
{
    const memra_u32 E = lp->n_expert, tid = threadIdx.x, nthreads = blockDim.x;
    const memra_u32 wid = tid >> 5, PW = MEMRA_LAYOUT_PLACE_WARPS;
    /* range w's count of expert e at hist[w * E + e], then its start */
    memra_u32 *hist = scratch, *total = hist + PW * E, *before = total + E, *at = before + E;
    memra_u32 *cum = at + E, *off = cum + E + 1u;
    const memra_u32 t0 = blockIdx.x * MEMRA_LAYOUT_SMALL_TILE;
    const memra_u32 t1 =
        n_pairs - t0 < MEMRA_LAYOUT_SMALL_TILE ? n_pairs : t0 + MEMRA_LAYOUT_SMALL_TILE;
    memra_u32 lo, hi;
    memra_layout_tile_range(t0, t1, MEMRA_LAYOUT_SMALL_TILE, wid, &lo, &hi);
    memra_u32 first[MEMRA_LAYOUT_BATCH];
    if (wid < PW) /* the same for the whole warp */
        memra_layout_load(lp, ids, lo, hi, first, 0);
    for (memra_u32 i = tid; i < (PW + 2u) * E; i += nthreads)
        scratch[i] = 0;
    memra_block_sync();
    memra_layout_count(ids, 0, n_pairs, E, total, before, t0);
    if (wid < PW)
        memra_layout_walk(lp, ids, lo, hi, first, hist + wid * E, NULL, 0);
    memra_block_sync();
    memra_layout_scans(lp, total, cum, off);
    memra_block_sync();
    memra_layout_tile_starts(E, hist, at, cum, before);
    memra_block_sync();
    if (wid < PW)
        memra_layout_walk(lp, ids, lo, hi, first, hist + wid * E, at, 0);
    memra_layout_finish(lp, total, cum, off, n_pairs, blockIdx.x * nthreads + tid,
                        gridDim.x * nthreads);
}

/* One launch for the whole batch (up to MEMRA_LAYOUT_ONE_LAUNCH pairs):
 * one block up to a tile, a block a tile above (memra_layout_tiled). */
#define MEMRA_LAYOUT_SMALL_WORDS MEMRA_LAYOUT_TILED_WORDS(MEMRA_ABI_LAYOUT_MAX_EXPERT)
MEMRA_KERNEL MEMRA_BOUNDS(MEMRA_LAYOUT_SMALL_THREADS)
    memra_layout_small_kernel(MEMRA_LAYOUT_KPARAMS)
{
    MEMRA_SHARED memra_u32 sh[MEMRA_LAYOUT_SMALL_WORDS];
    memra_grid_wait();
    memra_grid_launch_dependents();
    (void)tile;           /* the three launches' */
    if (gridDim.x > 1u) { /* the same for the whole grid */
        memra_layout_tiled(&lp, ids, n_pairs, sh);
        return;
    }
    memra_layout_prefill(&lp, n_pairs);
    memra_block_sync();
    memra_layout_block(&lp, ids, n_pairs, sh, MEMRA_LAYOUT_SMALL_WORDS, 0);
}

/* Three launches over tiles. 1: each tile's count of each expert, into the
 * workspace (n_tiles x n_expert words). */
MEMRA_KERNEL MEMRA_BOUNDS(MEMRA_LAYOUT_COUNT_THREADS)
    memra_layout_count_kernel(MEMRA_LAYOUT_KPARAMS)
{
    MEMRA_SHARED memra_u32 hist[MEMRA_ABI_LAYOUT_MAX_EXPERT];
    const memra_u32 E = lp.n_expert;
    memra_grid_wait();
    memra_grid_launch_dependents();
    for (memra_u32 e = threadIdx.x; e < E; e += blockDim.x)
        hist[e] = 0;
    memra_block_sync();
    const memra_u32 lo = blockIdx.x * tile;
    const memra_u32 hi = n_pairs - lo < tile ? n_pairs : lo + tile;
    memra_layout_count(ids, lo, hi, E, hist, NULL, 0);
    memra_block_sync();
    memra_u32 *tc = (memra_u32 *)lp.workspace + (memra_u64)blockIdx.x * E;
    for (memra_u32 e = threadIdx.x; e < E; e += blockDim.x)
        tc[e] = hist[e];
}

/* 2 (one block): each tile's count turned into the pairs of each expert
 * before it; the counts, the prefix sums (kept after the tiles' counts in
 * the workspace for launch 3) and everything but the pairs' places. */
MEMRA_KERNEL MEMRA_BOUNDS(MEMRA_LAYOUT_SCAN_THREADS) memra_layout_scan_kernel(MEMRA_LAYOUT_KPARAMS)
{
    MEMRA_SHARED memra_u32 count[MEMRA_ABI_LAYOUT_MAX_EXPERT];
    MEMRA_SHARED memra_u32 cum[MEMRA_ABI_LAYOUT_MAX_EXPERT + 1],
        off[MEMRA_ABI_LAYOUT_MAX_EXPERT + 1];
    /* slot s = q * E + e: part q's sum of expert e's column */
    MEMRA_SHARED memra_u32
        part[MEMRA_LAYOUT_SCAN_THREADS > MEMRA_ABI_LAYOUT_MAX_EXPERT ? MEMRA_LAYOUT_SCAN_THREADS
                                                                     : MEMRA_ABI_LAYOUT_MAX_EXPERT];
    const memra_u32 E = lp.n_expert, nt = lp.n_tiles;
    (void)ids, (void)tile; /* the tiles' counts are all it reads */
    memra_grid_wait();
    memra_grid_launch_dependents();
    memra_u32 *tc = (memra_u32 *)lp.workspace;
    /* Each expert's column of tile counts in Q parts of consecutive tiles
     * (Q threads an expert where the block has them: DeepSeek-V3's 256
     * experts four, Mixtral's eight 128), each part summed, then walked
     * again from the sum of the parts before it. The loads of a part go
     * out MEMRA_LAYOUT_SCAN_BATCH at a time: the stores between them could
     * alias as far as the compiler knows, so one at a time would wait out
     * a memory round trip per tile. */
    const memra_u32 Q = E <= blockDim.x ? blockDim.x / E : 1u, per = (nt + Q - 1u) / Q;
    for (int pass = 0; pass < 2; pass++) {
        for (memra_u32 sl = threadIdx.x; sl < Q * E; sl += blockDim.x) {
            const memra_u32 q = sl / E, e = sl - q * E;
            const memra_u32 lo = q * per < nt ? q * per : nt, hi = nt - lo < per ? nt : lo + per;
            memra_u32 run = 0;
            for (memra_u32 w = 0; pass && w < q; w++)
                run += part[w * E + e];
            for (memra_u32 t0 = lo; t0 < hi; t0 += MEMRA_LAYOUT_SCAN_BATCH) {
                memra_u32 c[MEMRA_LAYOUT_SCAN_BATCH];
                const memra_u32 n =
                    hi - t0 < MEMRA_LAYOUT_SCAN_BATCH ? hi - t0 : MEMRA_LAYOUT_SCAN_BATCH;
                for (memra_u32 i = 0; i < MEMRA_LAYOUT_SCAN_BATCH; i++)
                    c[i] = i < n ? tc[(memra_u64)(t0 + i) * E + e] : 0u;
                for (memra_u32 i = 0; i < MEMRA_LAYOUT_SCAN_BATCH; i++) {
                    if (pass && i < n)
                        tc[(memra_u64)(t0 + i) * E + e] = run;
                    run += c[i];
                }
            }
            if (!pass)
                part[sl] = run;
            else if (q == Q - 1u)
                count[e] = run;
        }
        memra_block_sync();
    }
    memra_layout_scans(&lp, count, cum, off);
    memra_block_sync();
    memra_u32 *wcum = tc + (memra_u64)lp.n_tiles * E;
    for (memra_u32 e = threadIdx.x; e <= E; e += blockDim.x)
        wcum[e] = cum[e];
    memra_layout_finish(&lp, count, cum, off, n_pairs, threadIdx.x, blockDim.x);
}

/* 3: each tile's pairs placed, MEMRA_LAYOUT_PLACE_WARPS warps a tile, each
 * counting and then placing a range of whole chunks. */
MEMRA_KERNEL MEMRA_BOUNDS(MEMRA_LAYOUT_PLACE_THREADS)
    memra_layout_place_kernel(MEMRA_LAYOUT_KPARAMS)
{
    /* range w's count of expert e at hist[w * E + e] */
    MEMRA_SHARED memra_u32 hist[MEMRA_LAYOUT_PLACE_WARPS * MEMRA_ABI_LAYOUT_MAX_EXPERT];
    MEMRA_SHARED memra_u32 at[MEMRA_ABI_LAYOUT_MAX_EXPERT];
    const memra_u32 E = lp.n_expert, wid = threadIdx.x >> 5;
    memra_grid_wait();
    memra_grid_launch_dependents();
    const memra_u32 t0 = blockIdx.x * tile;
    const memra_u32 t1 = n_pairs - t0 < tile ? n_pairs : t0 + tile;
    memra_u32 lo, hi;
    memra_layout_tile_range(t0, t1, tile, wid, &lo, &hi);
    memra_u32 first[MEMRA_LAYOUT_BATCH];
    memra_layout_load(&lp, ids, lo, hi, first, 0);
    for (memra_u32 i = threadIdx.x; i < MEMRA_LAYOUT_PLACE_WARPS * E; i += blockDim.x)
        hist[i] = 0;
    memra_block_sync();
    memra_layout_walk(&lp, ids, lo, hi, first, hist + wid * E, NULL, 0);
    memra_block_sync();
    const memra_u32 *tc = (const memra_u32 *)lp.workspace + (memra_u64)blockIdx.x * E;
    const memra_u32 *wcum = (const memra_u32 *)lp.workspace + (memra_u64)lp.n_tiles * E;
    memra_layout_tile_starts(E, hist, at, wcum, tc);
    memra_block_sync();
    memra_layout_walk(&lp, ids, lo, hi, first, hist + wid * E, at, 0);
}
#endif /* MEMRA_LAYOUT_BLOCK_ONLY */
