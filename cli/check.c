/* memra check: on every GPU, memra_engine_self_check (the seed gate, random
 * batches, the routing gate) and a serving-size batch of 2^20 pairs with
 * every kind of float and out-of-range ids, built by the device arm and
 * compared with the host arm pointer for pointer, scale bit for bit, faults
 * included; and the host arm against a 128-bit model of the addresses.
 * Without a GPU nothing is checked: one line says so, exit 3. */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <memra/memra.h>

#include "cli.h"
#include "vrows/gate_cases.h"

static const char usage[] =
    "usage: memra check [--json]\n"
    "\n"
    "On every GPU: memra_engine_self_check and a batch of 2^20 pairs, the device\n"
    "arm against the host arm, pointer for pointer and scale bit for bit.\n"
    "\n"
    "Options:\n"
    "  --json      one JSON object on stdout (schema memra.check/1, docs/cli.md)\n"
    "  -h, --help  show this help and exit\n"
    "\n"
    "Exit status: 0 all exact; 1 a difference or a failed call; 2 usage error;\n"
    "3 no GPU, nothing was checked.\n";

/* 128-bit: an address model that cannot itself wrap. */
__extension__ typedef unsigned __int128 u128;

typedef struct result {
    const char *verdict; /* "exact", "mismatch", "failed" */
    char message[1024];
} result;

static void set(result *r, const char *verdict, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set(result *r, const char *verdict, const char *fmt, ...)
{
    r->verdict = verdict;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
}

/* The host arm on the gate cases against the 128-bit model. */
static int host_case_exact(const gate_case *g)
{
    float selw[GATE_MAX_PAIRS], planes[3][GATE_MAX_EXPERT];
    gate_inputs(g, selw, planes);
    memra_vrows_macros mac = {{planes[0], planes[1], planes[2]}};
    uint64_t ptrs[3 * GATE_MAX_PAIRS];
    float scl[3 * GATE_MAX_PAIRS];
    if (memra_vrows_tables_host(g->sel, selw, g->n_pairs, g->n_expert, g->with_macros ? &mac : NULL,
                                &g->slabs, ptrs, scl, NULL))
        return 0;
    for (uint32_t p = 0; p < g->n_pairs; p++)
        for (int k = 0; k < 3; k++) {
            const u128 want =
                (u128)g->slabs.base[k] + (u128)(uint64_t)g->sel[p] * g->slabs.stride[k];
            if (ptrs[k * g->n_pairs + p] != (uint64_t)want)
                return 0;
        }
    return 1;
}

/* ---- the 2^20-pair batch --------------------------------------------------- */

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* Mostly ordinary weights, and about one in eight a subnormal, a signed
 * zero, an infinity or a NaN with a payload. */
static float any_float(uint64_t *s)
{
    const uint64_t r = next(s);
    uint32_t bits = (uint32_t)(r >> 32);
    const uint32_t sign = bits & 0x80000000u;
    switch (r % 16) {
    case 0:
        bits = sign | (bits % 0x7fffffu + 1); /* subnormal */
        break;
    case 1:
        bits = sign; /* signed zero */
        break;
    case 2:
        bits = sign | 0x7f800000u; /* infinity */
        break;
    case 3:
        bits = sign | 0x7f800000u | (bits % 0x7fffffu + 1); /* NaN */
        break;
    default:
        bits = sign | (0x3a000000u + bits % 0x0a000000u); /* around 1 */
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

typedef struct batch {
    uint32_t n, n_expert;
    int32_t *sel;
    float *selw, *planes, *scl, *scl_dev;
    uint64_t *ptrs, *ptrs_dev;
    memra_vrows_slabs slabs;
    memra_vrows_macros mac;
} batch;

static void batch_free(batch *b)
{
    free(b->sel), free(b->selw), free(b->planes), free(b->scl), free(b->scl_dev);
    free(b->ptrs), free(b->ptrs_dev);
}

static int batch_make(batch *b, uint32_t n, uint32_t n_expert, uint64_t seed)
{
    memset(b, 0, sizeof *b);
    b->n = n, b->n_expert = n_expert;
    b->sel = malloc(n * sizeof *b->sel);
    b->selw = malloc(n * sizeof *b->selw);
    b->planes = malloc(3 * (size_t)n_expert * sizeof *b->planes);
    b->ptrs = malloc(3 * (size_t)n * sizeof *b->ptrs);
    b->ptrs_dev = malloc(3 * (size_t)n * sizeof *b->ptrs_dev);
    b->scl = malloc(3 * (size_t)n * sizeof *b->scl);
    b->scl_dev = malloc(3 * (size_t)n * sizeof *b->scl_dev);
    if (!b->sel || !b->selw || !b->planes || !b->ptrs || !b->ptrs_dev || !b->scl || !b->scl_dev) {
        batch_free(b);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        const uint64_t r = next(&seed);
        /* About one id in 64 outside [0, n_expert), on either side. */
        b->sel[i] = r % 64 == 0   ? (int32_t)(n_expert + r % 7)
                    : r % 64 == 1 ? -(int32_t)(1 + r % 5)
                                  : (int32_t)((r >> 8) % n_expert);
        b->selw[i] = any_float(&seed);
    }
    for (size_t i = 0; i < 3 * (size_t)n_expert; i++)
        b->planes[i] = any_float(&seed);
    /* Strides past 4 GiB and slabs ending near the top of the address
     * space: a 32-bit step or a wrapping add shows. */
    for (int k = 0; k < 3; k++) {
        b->slabs.stride[k] = (1ull << 32) + ((next(&seed) % 4096) << 12);
        b->slabs.base[k] = UINT64_MAX - (uint64_t)(n_expert - 1) * b->slabs.stride[k] -
                           (next(&seed) % (1ull << 20)) * 64;
        b->mac.plane[k] = b->planes + (size_t)k * n_expert;
    }
    return 0;
}

/* Device arm against host arm on `eng` for batch b. */
static void batch_check(memra_engine *eng, batch *b, result *r)
{
    const uint32_t n = b->n;
    memra_faults want = {0}, got = {0};
    const memra_status hs = memra_vrows_tables_host(b->sel, b->selw, n, b->n_expert, &b->mac,
                                                    &b->slabs, b->ptrs, b->scl, &want);
    if (hs && hs != MEMRA_ERR_EXPERT_RANGE && hs != MEMRA_ERR_NONFINITE_SCALE) {
        set(r, "failed", "host arm: %s", memra_last_error());
        return;
    }
    memra_devptr sel = 0, selw = 0, ptrs = 0, scl = 0;
    memra_stream s = NULL;
    memra_status st;
    if ((st = memra_alloc(eng, 4 * (size_t)n, &sel)) ||
        (st = memra_alloc(eng, 4 * (size_t)n, &selw)) ||
        (st = memra_alloc(eng, 24 * (size_t)n, &ptrs)) ||
        (st = memra_alloc(eng, 12 * (size_t)n, &scl)) ||
        (st = memra_upload_i32(eng, sel, b->sel, n)) ||
        (st = memra_upload_f32(eng, selw, b->selw, n)) || (st = memra_engine_stream(eng, &s)) ||
        (st = memra_engine_faults(eng, s, &got, 1)) ||
        (st = memra_vrows_tables(eng, sel, selw, n, b->n_expert, 0, &b->mac, &b->slabs, ptrs, scl,
                                 s)) ||
        (st = memra_engine_faults(eng, s, &got, 1)) ||
        (st = memra_download_u64(eng, b->ptrs_dev, ptrs, 3 * (size_t)n)) ||
        (st = memra_download_f32(eng, b->scl_dev, scl, 3 * (size_t)n)))
        set(r, "failed", "%s", memra_last_error());
    memra_free(eng, sel), memra_free(eng, selw), memra_free(eng, ptrs), memra_free(eng, scl);
    if (st)
        return;
    for (size_t i = 0; i < 3 * (size_t)n; i++)
        if (b->ptrs_dev[i] != b->ptrs[i]) {
            set(r, "mismatch", "pointer %zu (pair %zu): device 0x%llx, host 0x%llx", i, i % n,
                (unsigned long long)b->ptrs_dev[i], (unsigned long long)b->ptrs[i]);
            return;
        }
    for (size_t i = 0; i < 3 * (size_t)n; i++) {
        uint32_t d, h;
        memcpy(&d, &b->scl_dev[i], 4), memcpy(&h, &b->scl[i], 4);
        if (d != h) {
            set(r, "mismatch", "scale %zu (pair %zu): device 0x%08x, host 0x%08x", i, i % n, d, h);
            return;
        }
    }
    if (got.bad_expert != want.bad_expert || got.nonfinite != want.nonfinite ||
        got.first_pair != want.first_pair) {
        set(r, "mismatch",
            "faults: device %u bad ids, %u non-finite, first pair %u; host %u, %u, %u",
            got.bad_expert, got.nonfinite, got.first_pair, want.bad_expert, want.nonfinite,
            want.first_pair);
        return;
    }
    set(r, "exact", "%s", "");
}

/* ---- per device ---------------------------------------------------------- */

typedef struct device_result {
    int ordinal, created;
    memra_engine_info info;
    result self, batch;
    memra_self_check_report rep;
    double self_ms;
} device_result;

#define BATCH_PAIRS (1u << 20)

static int check_device(int ordinal, device_result *d, int text)
{
    memset(d, 0, sizeof *d);
    d->ordinal = ordinal;
    d->self.verdict = d->batch.verdict = "failed";
    memra_engine *eng;
    if (memra_engine_create(ordinal, &eng)) {
        set(&d->self, "failed", "%s", memra_last_error());
        set(&d->batch, "failed", "no engine");
        if (text) {
            printf("device %d: FAILED: ", ordinal);
            put_text(stdout, d->self.message);
            printf("\n");
        }
        return 1;
    }
    d->created = 1;
    memra_engine_get_info(eng, &d->info);
    if (text) {
        printf("device %d: ", ordinal);
        put_text(stdout, d->info.name);
        printf(", sm_%d\n", d->info.sm);
    }
    progress("device %d: self check (the kernel loads first)...", ordinal);
    const double t0 = now_ms();
    const memra_status st = memra_engine_self_check(eng, &d->rep);
    d->self_ms = now_ms() - t0;
    progress_done();
    if (st == MEMRA_OK)
        set(&d->self, "exact", "%s", "");
    else
        set(&d->self, st == MEMRA_ERR_SELF_CHECK ? "mismatch" : "failed", "%s", memra_last_error());
    if (text) {
        if (st == MEMRA_OK)
            printf("  self check: exact (%u cases, %llu entries, %.1f ms with the kernel load)\n",
                   d->rep.cases, (unsigned long long)d->rep.entries, d->self_ms);
        else {
            printf("  self check: %s: ", st == MEMRA_ERR_SELF_CHECK ? "MISMATCH" : "FAILED");
            put_text(stdout, d->self.message);
            printf("\n");
        }
    }
    progress("device %d: 2^20 pairs...", ordinal);
    batch b;
    if (batch_make(&b, BATCH_PAIRS, 256, 0x9e3779b97f4a7c15ull + (uint64_t)ordinal) != 0)
        set(&d->batch, "failed", "out of host memory");
    else {
        batch_check(eng, &b, &d->batch);
        batch_free(&b);
    }
    progress_done();
    if (text) {
        const int exact = strcmp(d->batch.verdict, "exact") == 0;
        printf("  2^20 pairs: %s%s",
               exact                                       ? "exact"
               : strcmp(d->batch.verdict, "mismatch") == 0 ? "MISMATCH: "
                                                           : "FAILED: ",
               "");
        put_text(stdout, d->batch.message);
        printf("\n");
    }
    memra_engine_destroy(eng);
    return strcmp(d->self.verdict, "exact") != 0 || strcmp(d->batch.verdict, "exact") != 0;
}

static void json_result(const char *name, const result *r)
{
    printf("\"%s\": {\"result\": \"%s\", \"message\": ", name, r->verdict);
    put_json(stdout, r->message[0] ? r->message : NULL);
}

int cmd_check(int argc, char **argv)
{
    int help, json;
    int rc = parse_simple(argc, argv, "check", usage, &help, &json);
    if (rc || help)
        return rc;
    progress_enable(!json);
    int n_dev = 0;
    const char *why = device_status(&n_dev);
    if (n_dev == 0) {
        if (json) {
            printf("{\"schema\": \"memra.check/1\", \"memra\": {\"version\": ");
            put_json(stdout, memra_version_string());
            printf(", \"library\": ");
            put_json(stdout, library_file());
            printf("}, \"result\": \"nothing_checked\", \"reason\": ");
            put_json(stdout, why);
            printf(", \"host_arm\": [], \"devices\": []}\n");
        }
        fprintf(stderr, "memra check: no GPU (");
        put_text(stderr, why);
        fprintf(stderr, "): nothing was checked\n");
        return CLI_NOTHING;
    }
    int bad = 0, mismatch = 0;
    int host_ok[N_GATE_CASES];
    for (size_t i = 0; i < N_GATE_CASES; i++) {
        host_ok[i] = host_case_exact(&gate_cases[i]);
        bad |= !host_ok[i];
        if (!json)
            printf("host arm  %-10s %s\n", gate_cases[i].name, host_ok[i] ? "exact" : "MISMATCH");
    }
    device_result *devs = calloc((size_t)n_dev, sizeof *devs);
    if (!devs) {
        fprintf(stderr, "memra check: out of memory\n");
        return CLI_FAIL;
    }
    for (int i = 0; i < n_dev; i++) {
        bad |= check_device(i, &devs[i], !json);
        mismatch |= strcmp(devs[i].self.verdict, "mismatch") == 0 ||
                    strcmp(devs[i].batch.verdict, "mismatch") == 0;
    }
    for (size_t i = 0; i < N_GATE_CASES; i++)
        mismatch |= !host_ok[i];
    if (json) {
        printf("{\"schema\": \"memra.check/1\", \"memra\": {\"version\": ");
        put_json(stdout, memra_version_string());
        printf(", \"library\": ");
        put_json(stdout, library_file());
        printf("}, \"result\": \"%s\", \"reason\": null,\n \"host_arm\": [", mismatch ? "mismatch"
                                                                             : bad    ? "failed"
                                                                                      : "exact");
        for (size_t i = 0; i < N_GATE_CASES; i++)
            printf("%s{\"case\": \"%s\", \"exact\": %s}", i ? ", " : "", gate_cases[i].name,
                   host_ok[i] ? "true" : "false");
        printf("],\n \"devices\": [");
        for (int i = 0; i < n_dev; i++) {
            const device_result *d = &devs[i];
            printf("%s\n  {\"ordinal\": %d, \"name\": ", i ? "," : "", d->ordinal);
            put_json(stdout, d->created ? d->info.name : NULL);
            printf(", \"sm\": %d, ", d->created ? d->info.sm : 0);
            json_result("self_check", &d->self);
            printf(", \"cases\": %u, \"entries\": %llu, \"ms\": %.3f}, ", d->rep.cases,
                   (unsigned long long)d->rep.entries, d->self_ms);
            json_result("batch", &d->batch);
            printf(", \"pairs\": %u}}", BATCH_PAIRS);
        }
        printf("]}\n");
    } else {
        printf("memra check: %s\n", bad ? "FAILED" : "all exact");
    }
    free(devs);
    return bad ? CLI_FAIL : CLI_OK;
}
