#include "self_check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi.h"
#include "base/error.h"
#include "engine/launch.h"
#include "vrows/gate_cases.h"
#include "base/rng.h"
#include "route/route.h"
#include "route/route_cases.h"
#include "base/warn.h"

#define TRY(call)                                                                                  \
    do {                                                                                           \
        memra_status st_ = (call);                                                                 \
        if (st_) {                                                                                 \
            snprintf(why, why_len, "%s: %s (%s)", #call, memra_status_string(st_),                 \
                     memra_last_error());                                                          \
            bad = -(int)st_;                                                                       \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* Frees the device buffers a check allocated (0: not allocated). */
static void free_buffers(memra_engine *eng, const memra_devptr *bufs, int n)
{
    for (int i = 0; i < n; i++)
        if (bufs[i])
            memra_free(eng, bufs[i]);
}

/* A fault word of the check's own, starting clear: the launch under check
 * counts into it alone, so what it holds afterwards is that launch's,
 * whatever the serving process or another check launches on the engine
 * meanwhile (a check reading the engine's word took their faults for its
 * own and reported "not exact"). */
static memra_status own_faults(memra_engine *eng, memra_stream stream, memra_devptr *area)
{
    uint32_t w[MEMRA_FAULT_WORDS] = {0};
    w[MEMRA_FAULT_FIRST_PAIR] = MEMRA_NO_FAULT;
    memra_status st = memra_alloc(eng, sizeof w, area);
    /* Complete on return: w lives on this stack frame. */
    return st ? st : memra_upload_on(eng, *area, w, sizeof w, stream);
}

/* Whether the faults a launch counted into its own word w differ from the
 * host arm's hf. */
static int faults_differ(const uint32_t *w, const memra_faults *hf, const char *label, char *why,
                         size_t why_len)
{
    if (w[MEMRA_FAULT_BAD_EXPERT] == hf->bad_expert && w[MEMRA_FAULT_NONFINITE] == hf->nonfinite &&
        w[MEMRA_FAULT_NOT_LOCAL] == hf->not_local && w[MEMRA_FAULT_PADDED] == hf->padded &&
        w[MEMRA_FAULT_FIRST_PAIR] == hf->first_pair)
        return 0;
    snprintf(why, why_len, "%s: faults: device {%u,%u,%u,%u,%u}, host {%u,%u,%u,%u,%u}", label,
             w[MEMRA_FAULT_BAD_EXPERT], w[MEMRA_FAULT_NONFINITE], w[MEMRA_FAULT_FIRST_PAIR],
             w[MEMRA_FAULT_NOT_LOCAL], w[MEMRA_FAULT_PADDED], hf->bad_expert, hf->nonfinite,
             hf->first_pair, hf->not_local, hf->padded);
    return 1;
}

int memra_case_check(memra_engine *eng, const memra_case *c, char *why, size_t why_len)
{
    const uint32_t n = c->n;
    const size_t n3 = 3 * (size_t)n;
    int bad = 1;
    memra_devptr dsel = 0, dselw = 0, dptrs = 0, dscl = 0, dfaults = 0;
    uint64_t *dp = malloc(n3 * 8), *hp = malloc(n3 * 8);
    float *ds = malloc(n3 * 4), *hs = malloc(n3 * 4);
    uint32_t fw[MEMRA_FAULT_WORDS];
    memra_faults hf;
    snprintf(why, why_len, "out of host memory");
    if (!dp || !hp || !ds || !hs)
        goto out;
    TRY(memra_alloc(eng, (size_t)n * 4, &dsel));
    TRY(memra_alloc(eng, (size_t)n * 4, &dselw));
    TRY(memra_alloc(eng, n3 * 8, &dptrs));
    TRY(memra_alloc(eng, n3 * 4, &dscl));
    /* Poison the outputs so an unwritten element cannot pass. */
    memset(dp, 0xA7, n3 * 8);
    memset(ds, 0xA7, n3 * 4);
    TRY(memra_upload_async(eng, dptrs, dp, n3 * 8, c->stream));
    TRY(memra_upload_async(eng, dscl, ds, n3 * 4, c->stream));
    TRY(memra_upload_i32_async(eng, dsel, c->sel, n, c->stream));
    TRY(memra_upload_f32_async(eng, dselw, c->selw, n, c->stream));
    TRY(own_faults(eng, c->stream, &dfaults));
    TRY(memra_vrows_launch(eng, "memra_case_check", dsel, dselw, n, c->n_expert, c->il, c->scratch,
                           dfaults, c->mac, c->sl, NULL, dptrs, dscl, c->stream));
    TRY(memra_download_u64_async(eng, dp, dptrs, n3, c->stream));
    TRY(memra_download_f32_async(eng, ds, dscl, n3, c->stream));
    TRY(memra_download_async(eng, fw, dfaults, sizeof fw, c->stream));
    TRY(memra_sync(eng, c->stream));
    memra_vrows_tables_host(c->sel, c->selw, n, c->n_expert, c->mac, c->sl, hp, hs, &hf);
    for (size_t i = 0; i < n3; i++) {
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
    char label[24];
    snprintf(label, sizeof label, "n=%u", n);
    if (faults_differ(fw, &hf, label, why, why_len))
        goto out;
    bad = 0;
out:;
    const memra_devptr bufs[] = {dsel, dselw, dptrs, dscl, dfaults};
    free_buffers(eng, bufs, 5);
    free(dp), free(hp), free(ds), free(hs);
    return bad;
}

int memra_gate_case_check(memra_engine *eng, size_t i, int il, int scratch, memra_stream stream,
                          char *why, size_t why_len)
{
    const gate_case *g = &gate_cases[i];
    float selw[GATE_MAX_PAIRS], planes[3][GATE_MAX_EXPERT];
    gate_inputs(g, selw, planes);
    memra_vrows_macros mac = {{planes[0], planes[1], planes[2]}};
    memra_case c = {g->n_pairs, g->n_expert, g->sel, selw,   g->with_macros ? &mac : NULL,
                    &g->slabs,  il,          stream, scratch};
    return memra_case_check(eng, &c, why, why_len);
}

int memra_random_case_make(memra_random_case *r, uint64_t *s, uint32_t n, uint32_t n_expert,
                           int bad_ids, int with_macros, int min_stride_bit, int il)
{
    r->sel = malloc((size_t)n * 4);
    r->selw = malloc((size_t)n * 4);
    r->pl = malloc(3 * (size_t)n_expert * 4);
    if (!r->sel || !r->selw || !r->pl) {
        free(r->sel), free(r->selw), free(r->pl);
        return -1;
    }
    for (uint32_t p = 0; p < n; p++) {
        r->sel[p] = (int32_t)(rng_next(s) % n_expert);
        if (bad_ids && rng_next(s) % 64 == 0)
            r->sel[p] = (rng_next(s) & 1) ? -(int32_t)(1 + rng_next(s) % 5)
                                          : (int32_t)(n_expert + rng_next(s) % 5);
        r->selw[p] = rng_special_float(s);
    }
    for (uint32_t e = 0; e < 3 * n_expert; e++)
        r->pl[e] = rng_special_float(s);
    r->mac = (memra_vrows_macros){{r->pl, r->pl + n_expert, r->pl + 2 * (size_t)n_expert}};
    rng_high_slabs(s, n_expert, min_stride_bit, &r->sl);
    r->c = (memra_case){n,      n_expert, r->sel, r->selw, with_macros ? &r->mac : NULL,
                        &r->sl, il,       NULL,   0};
    return 0;
}

void memra_random_case_free(memra_random_case *r)
{
    free(r->sel), free(r->selw), free(r->pl);
}

static const char *variant_name(int variant, uint32_t n_tokens, uint32_t n_expert)
{
    if (variant == MEMRA_ROUTE_VARIANT_AUTO)
        variant = memra_route_use_block(n_tokens, n_expert) ? MEMRA_ROUTE_VARIANT_BLOCK
                                                            : MEMRA_ROUTE_VARIANT_WARP;
    return variant == MEMRA_ROUTE_VARIANT_BLOCK ? "block" : "team";
}

/* A layout's outputs back to back in one buffer at `base`: sorted_ids,
 * expert_ids, n_post_pad, counts, offsets, padded offsets; the same carving
 * for the device's buffer and the host arm's. */
static memra_layout layout_in(uint64_t base, uint64_t len, uint64_t blocks, uint32_t n_expert,
                              uint64_t workspace)
{
    const uint64_t e1 = (uint64_t)n_expert + 1, n_post_pad = base + 4 * (len + blocks);
    return (memra_layout){.sorted_ids = base,
                          .expert_ids = base + 4 * len,
                          .n_post_pad = n_post_pad,
                          .offsets = n_post_pad + 4 * (1 + e1),
                          .padded_offsets = n_post_pad + 4 * (1 + 2 * e1),
                          .counts = n_post_pad + 4,
                          .workspace = workspace};
}

int memra_route_case_check(memra_engine *eng, size_t ci, uint32_t T, uint64_t seed, int edges,
                           int il, int scratch, int variant, memra_stream stream, char *why,
                           size_t why_len)
{
    const route_case *rc = &route_cases[ci];
    route_inputs *in = malloc(sizeof *in);
    memra_route_spec s = {0}, ds;
    if (in) {
        s = route_case_inputs(rc, in);
        route_case_padding(rc, in, &s, T);
    }
    ds = s;
    const memra_vrows_macros *m = rc->with_macros && in ? &in->mac : NULL;
    const memra_vrows_slabs sl = GATE_SERVING_SLABS;
    const size_t np = (size_t)T * (s.top_k + s.n_shared);
    const size_t lbytes = (size_t)T * s.n_expert * route_logit_bytes(&s);
    const size_t bias_bytes = (size_t)s.n_expert * (s.bias_dtype == MEMRA_BIAS_BF16 ? 2 : 4);
    int bad = 1;
    memra_devptr dl = 0, dsel = 0, dselw = 0, dptrs = 0, dscl = 0, dbias = 0, dmap = 0, dreal = 0,
                 dfaults = 0;
    /* The batch's expert-sorted layout too, laid out by the same launch
     * (decode sizes) or the layout's own after it: block sizes 16 to 64. */
    const memra_layout_spec ls = {.n_expert = s.n_expert + s.n_shared,
                                  .block_size = 16u << (ci % 3)};
    uint64_t len = 0, blocks = 0, ws = 0;
    memra_layout_sizes((uint32_t)((size_t)T * (s.top_k + s.n_shared)), &ls, &len, &blocks);
    memra_layout_workspace_bytes((uint32_t)((size_t)T * (s.top_k + s.n_shared)), &ls, &ws);
    const size_t lay_words = len + blocks + 1 + 3 * ((size_t)ls.n_expert + 1);
    int32_t *hlay = malloc(lay_words * 4), *glay = malloc(lay_words * 4);
    memra_devptr dlay = 0, dws = 0;
    void *logits = in ? route_case_logits(&s, T, seed, edges) : NULL;
    int32_t *hsel = malloc(np * 4), *gsel = malloc(np * 4);
    float *hselw = malloc(np * 4), *gselw = malloc(np * 4);
    float *hscl = malloc(3 * np * 4), *gscl = malloc(3 * np * 4);
    uint64_t *hptrs = malloc(3 * np * 8), *gptrs = malloc(3 * np * 8);
    uint32_t fw[MEMRA_FAULT_WORDS];
    memra_faults hf;
    snprintf(why, why_len, "out of host memory");
    if (!in || !logits || !hsel || !gsel || !hselw || !gselw || !hscl || !gscl || !hptrs ||
        !gptrs || !hlay || !glay)
        goto out;
    TRY(memra_alloc(eng, lay_words * 4, &dlay));
    if (ws)
        TRY(memra_alloc(eng, ws, &dws));
    TRY(memra_alloc(eng, lbytes, &dl));
    TRY(memra_alloc(eng, np * 4, &dsel));
    TRY(memra_alloc(eng, np * 4, &dselw));
    TRY(memra_alloc(eng, 3 * np * 8, &dptrs));
    TRY(memra_alloc(eng, 3 * np * 4, &dscl));
    TRY(memra_upload_async(eng, dl, logits, lbytes, stream));
    /* The bias read in place and the map live on the device. */
    if (s.bias_ptr) {
        TRY(memra_alloc(eng, bias_bytes, &dbias));
        TRY(memra_upload_async(eng, dbias, (const void *)(uintptr_t)s.bias_ptr, bias_bytes,
                               stream));
        ds.bias_ptr = dbias;
    }
    if (s.expert_map) {
        TRY(memra_alloc(eng, (size_t)s.n_expert * 4, &dmap));
        TRY(memra_upload_i32_async(eng, dmap, in->map, s.n_expert, stream));
        ds.expert_map = dmap;
    }
    if (s.n_real) {
        TRY(memra_alloc(eng, 8, &dreal));
        TRY(memra_upload_async(eng, dreal, &in->n_real, 8, stream));
        ds.n_real = dreal;
    }
    /* Poison the outputs so an unwritten element cannot pass (a buffer freed
     * by the previous case may come back holding its answers). */
    memset(gsel, 0xA7, np * 4), memset(gselw, 0xA7, np * 4);
    memset(gptrs, 0xA7, 3 * np * 8), memset(gscl, 0xA7, 3 * np * 4);
    memset(glay, 0xA7, lay_words * 4);
    TRY(memra_upload_async(eng, dlay, glay, lay_words * 4, stream));
    TRY(memra_upload_async(eng, dsel, gsel, np * 4, stream));
    TRY(memra_upload_async(eng, dselw, gselw, np * 4, stream));
    TRY(memra_upload_async(eng, dptrs, gptrs, 3 * np * 8, stream));
    TRY(memra_upload_async(eng, dscl, gscl, 3 * np * 4, stream));
    TRY(own_faults(eng, stream, &dfaults));
    const memra_layout dl_out = layout_in(dlay, len, blocks, ls.n_expert, dws);
    TRY(memra_route_launch(eng, "memra_route_case_check", dl, T, &ds, il, scratch, dfaults, m, &sl,
                           dsel, dselw, dptrs, dscl, &ls, &dl_out, stream, variant));
    TRY(memra_download_async(eng, glay, dlay, lay_words * 4, stream));
    TRY(memra_download_i32_async(eng, gsel, dsel, np, stream));
    TRY(memra_download_f32_async(eng, gselw, dselw, np, stream));
    TRY(memra_download_u64_async(eng, gptrs, dptrs, 3 * np, stream));
    TRY(memra_download_f32_async(eng, gscl, dscl, 3 * np, stream));
    TRY(memra_download_async(eng, fw, dfaults, sizeof fw, stream));
    TRY(memra_sync(eng, stream));
    const memra_layout hl_out = layout_in((uint64_t)(uintptr_t)hlay, len, blocks, ls.n_expert, 0);
    memset(hlay, 0xA7, lay_words * 4); /* as the device's buffer began */
    memra_route_tables_host_ex(logits, T, &s, m, &sl, hsel, hselw, hptrs, hscl, &hf, &ls, &hl_out);
    const size_t K = s.top_k + s.n_shared;
    for (size_t p = 0; p < np; p++)
        if (gsel[p] != hsel[p] || memcmp(&gselw[p], &hselw[p], 4)) {
            uint32_t a, b;
            memcpy(&a, &gselw[p], 4), memcpy(&b, &hselw[p], 4);
            snprintf(why, why_len,
                     "%s (%s kernel): token %zu pair %zu: device (%d, 0x%08x), host (%d, 0x%08x)",
                     rc->name, variant_name(variant, T, rc->spec.n_expert), p / K, p % K, gsel[p],
                     a, hsel[p], b);
            goto out;
        }
    if (memcmp(gptrs, hptrs, 3 * np * 8) || memcmp(gscl, hscl, 3 * np * 4)) {
        snprintf(why, why_len, "%s (%s kernel): the tables differ", rc->name,
                 variant_name(variant, T, rc->spec.n_expert));
        goto out;
    }
    if (faults_differ(fw, &hf, rc->name, why, why_len))
        goto out;
    for (size_t i = 0; i < lay_words; i++)
        if (glay[i] != hlay[i]) {
            snprintf(why, why_len,
                     "%s (%s kernel): the expert-sorted layout differs at word %zu of %zu: device "
                     "%d, host %d",
                     rc->name, variant_name(variant, T, rc->spec.n_expert), i, lay_words, glay[i],
                     hlay[i]);
            goto out;
        }
    bad = 0;
out:;
    const memra_devptr bufs[] = {dl,   dsel,  dselw, dptrs, dscl,   dbias,
                                 dmap, dreal, dlay,  dws,   dfaults};
    free_buffers(eng, bufs, 11);
    free(hlay), free(glay);
    free(logits), free(hsel), free(gsel), free(hselw), free(gselw);
    free(hscl), free(gscl), free(hptrs), free(gptrs), free(in);
    return bad;
}

static memra_status self_check(memra_engine *eng, memra_self_check_report *report);

memra_status memra_engine_self_check(memra_engine *eng, memra_self_check_report *report)
{
    static const char fn[] = "memra_engine_self_check";
    if (!eng || !report)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: %s is NULL", fn, eng ? "report" : "eng");
    /* One check at a time per engine: the checks share the scratch layers,
     * so a second one at once would only repeat the first's uploads. A check's
     * warnings wait for the lock, as under every memra lock: the log
     * callback may run a check itself. */
    memra_warn_hold();
    pthread_mutex_lock(&eng->check_lock);
    memra_self_check_report r;
    const memra_status st = self_check(eng, &r);
    pthread_mutex_unlock(&eng->check_lock);
    memra_warn_release();
    /* The report says how the check went; a check that could not run (the
     * kernel would not load, memory ran out) leaves it as it was, as every
     * failing call leaves its outputs. */
    if (st == MEMRA_OK || st == MEMRA_ERR_SELF_CHECK)
        *report = r;
    return st;
}

static memra_status self_check(memra_engine *eng, memra_self_check_report *report)
{
    static const char fn[] = "memra_engine_self_check";
    memset(report, 0, sizeof *report);
    memra_status st = memra_engine_warmup(eng);
    if (st)
        return st;
    memra_stream own;
    memra_engine_stream(eng, &own);
    char why[512];
    for (size_t i = 0; i < N_GATE_CASES; i++) {
        report->cases++;
        report->entries += 6ull * gate_cases[i].n_pairs;
        const int r = memra_gate_case_check(eng, i, (int)i, 1, own, why, sizeof why);
        if (r < 0)
            return memra_fail((memra_status)-r, "%s: %s", fn, why);
        if (r && !report->failed++)
            snprintf(report->first_failure, sizeof report->first_failure, "gate case %s: %.200s",
                     gate_cases[i].name, why);
    }
    /* A batch with every kind of float and some out-of-range ids, at serving
     * strides past 4 GiB, with and without macro planes. */
    uint64_t seed = 0x5e1fc4ec;
    for (int k = 0; k < 2; k++) {
        memra_random_case r;
        if (memra_random_case_make(&r, &seed, 1u << 16, 256, 1, k == 0, 32, 4 + k))
            return memra_fail(MEMRA_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
        r.c.stream = own;
        r.c.scratch = 1;
        report->cases++;
        report->entries += 6ull * r.c.n;
        const int bad = memra_case_check(eng, &r.c, why, sizeof why);
        memra_random_case_free(&r);
        if (bad < 0)
            return memra_fail((memra_status)-bad, "%s: %s", fn, why);
        if (bad && !report->failed++)
            snprintf(report->first_failure, sizeof report->first_failure,
                     "random batch %d (2^16 pairs, special floats): %.180s", k, why);
    }
    /* The routing gate: every routing case, 64 tokens with edge logits
     * through each of the two kernels. */
    for (size_t i = 0; i < 2 * N_ROUTE_CASES; i++) {
        const size_t ci = i / 2;
        report->cases++;
        report->entries += 64ull * (route_cases[ci].spec.top_k + route_cases[ci].spec.n_shared) * 8;
        const int variant = i % 2 ? MEMRA_ROUTE_VARIANT_WARP : MEMRA_ROUTE_VARIANT_BLOCK;
        const int bad = memra_route_case_check(eng, ci, 64, 0x70a7e + ci, 1, 6 + (int)(i % 2), 1,
                                               variant, own, why, sizeof why);
        if (bad < 0)
            return memra_fail((memra_status)-bad, "%s: %s", fn, why);
        if (bad && !report->failed++)
            snprintf(report->first_failure, sizeof report->first_failure, "routing: %.220s", why);
    }
    if (report->failed)
        return memra_fail(MEMRA_ERR_SELF_CHECK, "%s: %u of %u cases differ from the host arm: %s",
                          fn, report->failed, report->cases, report->first_failure);
    return MEMRA_OK;
}
