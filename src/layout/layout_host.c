/* The layout's host arm: the definition (memra.h, docs/layout-sorted.md)
 * written out plainly, pair by pair in ascending index, which is the order
 * the kernels' counting reproduces. */
#include "layout_host.h"

#include <stdlib.h>

#include "base/error.h"
#include "layout_spec.h"

memra_status memra_layout_host_run(const char *fn, const int32_t *ids, uint32_t n_pairs,
                                   const memra_layout_params *lp)
{
    const uint32_t E = lp->n_expert, bs = lp->block_size;
    uint32_t *count = calloc((size_t)E * 3 + 2, sizeof *count);
    if (!count)
        return memra_fail(MEMRA_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    uint32_t *cum = count + E, *next = cum + E + 1;
    for (uint32_t p = 0; p < n_pairs; p++)
        if ((uint32_t)ids[p] < E)
            count[ids[p]]++;
    cum[0] = 0;
    for (uint32_t e = 0; e < E; e++)
        cum[e + 1] = cum[e] + (count[e] + bs - 1) / bs * bs;
    int32_t *sorted = (int32_t *)(uintptr_t)lp->sorted_ids;
    int32_t *eids = (int32_t *)(uintptr_t)lp->expert_ids;
    for (uint32_t q = 0; q < lp->sorted_len; q++)
        sorted[q] = (int32_t)n_pairs;
    for (uint32_t e = 0; e < E; e++)
        next[e] = cum[e];
    for (uint32_t p = 0; p < n_pairs; p++)
        if ((uint32_t)ids[p] < E)
            sorted[next[ids[p]]++] = (int32_t)p;
    const int32_t *map = (const int32_t *)(uintptr_t)lp->map;
    for (uint32_t b = 0; b < lp->n_blocks; b++)
        eids[b] = -1;
    for (uint32_t e = 0; e < E; e++) {
        const int32_t label = !map              ? (int32_t)e
                              : e < lp->map_len ? map[e]
                                                : (int32_t)(lp->n_local + (e - lp->map_len));
        for (uint32_t b = cum[e] / bs; b < cum[e + 1] / bs; b++)
            eids[b] = label;
    }
    *(int32_t *)(uintptr_t)lp->n_post_pad = (int32_t)cum[E];
    uint32_t off = 0;
    for (uint32_t e = 0; e <= E; e++) {
        if (lp->offsets)
            ((int32_t *)(uintptr_t)lp->offsets)[e] = (int32_t)off;
        if (lp->padded_offsets)
            ((int32_t *)(uintptr_t)lp->padded_offsets)[e] = (int32_t)cum[e];
        if (e == E)
            break;
        if (lp->counts)
            ((int32_t *)(uintptr_t)lp->counts)[e] = (int32_t)count[e];
        /* Added in, wrapping as the device's atomics do. */
        if (lp->load && (lp->flags & MEMRA_LAYOUT_FLAG_LOAD_I64))
            ((uint64_t *)(uintptr_t)lp->load)[e] += count[e];
        else if (lp->load)
            ((uint32_t *)(uintptr_t)lp->load)[e] += count[e];
        off += count[e];
    }
    free(count);
    return MEMRA_OK;
}

memra_status memra_layout_tables_host(const int32_t *ids, uint32_t n_pairs,
                                      const memra_layout_spec *spec, const memra_layout *out)
{
    static const char fn[] = "memra_layout_tables_host";
    memra_layout_params lp;
    memra_status st =
        memra_layout_validate(fn, (uint64_t)(uintptr_t)ids, n_pairs, spec, out, 0, &lp);
    if (st)
        return st;
    return memra_layout_host_run(fn, ids, n_pairs, &lp);
}
