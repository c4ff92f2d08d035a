/* One device-arm case through the public API: upload, launch, download, and
 * compare pointer for pointer and scale bit for bit with the host arm, and
 * the engine's fault word with the host arm's faults. Used with the mock
 * driver and on a real GPU; thread-safe (no cmocka asserts inside). */
#ifndef MEMRA_DEVICE_CASE_H
#define MEMRA_DEVICE_CASE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>

#include "gate_cases.h"

typedef struct dcase {
    uint32_t n, n_expert;
    const int32_t *sel;
    const float *selw;
    const memra_vrows_macros *mac;
    const memra_vrows_slabs *sl;
    int il;
    memra_stream stream;
    int check_faults; /* 0 when other threads share the engine's fault word */
} dcase;

#define DC_TRY(call)                                                                               \
    do {                                                                                           \
        memra_status st_ = (call);                                                                 \
        if (st_) {                                                                                 \
            snprintf(why, why_len, "%s: %s (%s)", #call, memra_status_string(st_),                 \
                     memra_last_error());                                                          \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* Returns 0 when the device tables equal the host arm's, else 1 with `why`. */
static inline int device_case_check(memra_engine *eng, const dcase *c, char *why, size_t why_len)
{
    const uint32_t n = c->n;
    int bad = 1;
    memra_devptr dsel = 0, dselw = 0, dptrs = 0, dscl = 0;
    uint64_t *dp = malloc(3 * (size_t)n * 8), *hp = malloc(3 * (size_t)n * 8);
    float *ds = malloc(3 * (size_t)n * 4), *hs = malloc(3 * (size_t)n * 4);
    memra_faults hf, df, f0;
    snprintf(why, why_len, "out of host memory");
    if (!dp || !hp || !ds || !hs)
        goto out;
    DC_TRY(memra_alloc(eng, (size_t)n * 4, &dsel));
    DC_TRY(memra_alloc(eng, (size_t)n * 4, &dselw));
    DC_TRY(memra_alloc(eng, 3 * (size_t)n * 8, &dptrs));
    DC_TRY(memra_alloc(eng, 3 * (size_t)n * 4, &dscl));
    /* Poison the outputs so an unwritten element cannot pass. */
    memset(dp, 0xA7, 3 * (size_t)n * 8);
    memset(ds, 0xA7, 3 * (size_t)n * 4);
    DC_TRY(memra_copy_htod_async(eng, dptrs, dp, 3 * (size_t)n * 8, c->stream));
    DC_TRY(memra_copy_htod_async(eng, dscl, ds, 3 * (size_t)n * 4, c->stream));
    DC_TRY(memra_upload_i32_async(eng, dsel, c->sel, n, c->stream));
    DC_TRY(memra_upload_f32_async(eng, dselw, c->selw, n, c->stream));
    if (c->check_faults)
        DC_TRY(memra_engine_faults(eng, c->stream, &f0, 1));
    DC_TRY(memra_moe_vrows_tables_from_sel(eng, dsel, dselw, n, c->n_expert, c->il, c->mac, c->sl,
                                           dptrs, dscl, c->stream));
    DC_TRY(memra_download_u64_async(eng, dp, dptrs, 3 * (size_t)n, c->stream));
    DC_TRY(memra_download_f32_async(eng, ds, dscl, 3 * (size_t)n, c->stream));
    DC_TRY(memra_sync(eng, c->stream));
    memra_vrows_tables_host(c->sel, c->selw, n, c->n_expert, c->mac, c->sl, hp, hs, &hf);
    for (size_t i = 0; i < 3 * (size_t)n; i++) {
        if (dp[i] != hp[i]) {
            snprintf(why, why_len, "n=%u ptrs[%zu]: device 0x%llx, host 0x%llx", n, i,
                     (unsigned long long)dp[i], (unsigned long long)hp[i]);
            goto out;
        }
        if (memcmp(&ds[i], &hs[i], 4)) {
            uint32_t a, b;
            memcpy(&a, &ds[i], 4), memcpy(&b, &hs[i], 4);
            snprintf(why, why_len, "n=%u scl[%zu]: device 0x%08x, host 0x%08x", n, i, a, b);
            goto out;
        }
    }
    if (c->check_faults) {
        DC_TRY(memra_engine_faults(eng, c->stream, &df, 1));
        if (df.bad_expert != hf.bad_expert || df.nonfinite != hf.nonfinite ||
            df.first_pair != hf.first_pair) {
            snprintf(why, why_len, "faults: device {%u,%u,%u}, host {%u,%u,%u}", df.bad_expert,
                     df.nonfinite, df.first_pair, hf.bad_expert, hf.nonfinite, hf.first_pair);
            goto out;
        }
    }
    bad = 0;
out:
    if (dsel)
        memra_free(eng, dsel);
    if (dselw)
        memra_free(eng, dselw);
    if (dptrs)
        memra_free(eng, dptrs);
    if (dscl)
        memra_free(eng, dscl);
    free(dp), free(hp), free(ds), free(hs);
    return bad;
}

/* Seed gate case i (gate_cases.h) through the device arm. */
static inline int gate_case_check(memra_engine *eng, size_t i, char *why, size_t why_len)
{
    const gate_case *g = &gate_cases[i];
    float selw[GATE_MAX_PAIRS], planes[3][GATE_MAX_EXPERT];
    gate_inputs(g, selw, planes);
    memra_vrows_macros mac = {{planes[0], planes[1], planes[2]}};
    dcase c = {g->n_pairs, g->n_expert, g->sel, selw, g->with_macros ? &mac : NULL,
               &g->slabs,  (int)i,      NULL,   1};
    return device_case_check(eng, &c, why, why_len);
}

#endif /* MEMRA_DEVICE_CASE_H */
