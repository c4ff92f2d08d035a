/* libFuzzer target over the host-side entry points: argument validation,
 * the host arm, and kernel-cache entry parsing. Every buffer is sized
 * exactly, so AddressSanitizer sees any overrun; the invariants below abort
 * on a wrong answer, not only on a crash.
 *
 * Input: byte 0 picks the entry point, the rest feeds it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jit/cache.h"
#include "vrows/vrows_spec.h"

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static uint64_t take(reader *r, size_t bytes)
{
    uint64_t v = 0;
    for (size_t i = 0; i < bytes; i++) {
        v = (v << 8) | (r->n ? *r->p : 0);
        if (r->n)
            r->p++, r->n--;
    }
    return v;
}

static void fuzz_host_arm(reader *r)
{
    const uint32_t n = (uint32_t)take(r, 2) % 2048;
    const uint32_t n_expert = (uint32_t)take(r, 2) % 4096;
    const unsigned flags = (unsigned)take(r, 1);
    memra_vrows_slabs sl;
    for (int k = 0; k < 3; k++) {
        sl.base[k] = take(r, 8);
        sl.stride[k] = take(r, 8);
    }
    const size_t np = n ? n : 1, ne = n_expert ? n_expert : 1;
    int32_t *sel = malloc(np * 4);
    float *selw = malloc(np * 4), *pl = malloc(3 * ne * 4);
    uint64_t *ptrs = malloc(3 * np * 8);
    float *scl = malloc(3 * np * 4);
    for (size_t i = 0; i < np; i++) {
        sel[i] = (int32_t)take(r, 4);
        if (flags & 8) /* mostly in range */
            sel[i] = (int32_t)((uint32_t)sel[i] % (n_expert + 2)) - 1;
        uint32_t b = (uint32_t)take(r, 4);
        memcpy(&selw[i], &b, 4);
    }
    for (size_t i = 0; i < 3 * ne; i++) {
        uint32_t b = (uint32_t)take(r, 4);
        memcpy(&pl[i], &b, 4);
    }
    memset(ptrs, 0xA5, 3 * np * 8);
    memset(scl, 0xA5, 3 * np * 4);
    memra_vrows_macros mac = {{pl, (flags & 1) ? NULL : pl + ne, pl + 2 * ne}};
    memra_faults f;
    /* The one judge: the check of the call refuses exactly what the call
     * refuses, with the same message, and passes what it takes. */
    const memra_status judged =
        memra_vrows_check(MEMRA_CALL_VROWS_TABLES_HOST, (flags & 2) ? 0 : (uint64_t)(uintptr_t)sel,
                          (uint64_t)(uintptr_t)selw, n, n_expert, 0, (flags & 4) ? &mac : NULL, &sl,
                          NULL, (uint64_t)(uintptr_t)ptrs, (uint64_t)(uintptr_t)scl);
    char why[512];
    strncpy(why, judged ? memra_last_error() : "", sizeof why - 1);
    why[sizeof why - 1] = 0;
    memra_status st = memra_vrows_tables_host((flags & 2) ? NULL : sel, selw, n, n_expert,
                                              (flags & 4) ? &mac : NULL, &sl, ptrs, scl, &f);
    if (judged
            ? st != judged || strncmp(why, memra_last_error(), sizeof why - 1) != 0
            : !(st == MEMRA_OK || st == MEMRA_ERR_EXPERT_RANGE || st == MEMRA_ERR_NONFINITE_SCALE))
        abort();
    if (st == MEMRA_OK || st == MEMRA_ERR_EXPERT_RANGE || st == MEMRA_ERR_NONFINITE_SCALE) {
        for (uint32_t p = 0; p < n; p++) {
            const int ok = sel[p] >= 0 && (uint32_t)sel[p] < n_expert;
            for (int k = 0; k < 3; k++) {
                /* Never outside the slab: [base, base + (n_expert-1)*stride]. */
                uint64_t off = ptrs[(size_t)k * n + p] - sl.base[k];
                if (ptrs[(size_t)k * n + p] < sl.base[k] ||
                    off != (ok ? (uint64_t)sel[p] * sl.stride[k] : 0))
                    abort();
                uint32_t b;
                memcpy(&b, &scl[(size_t)k * n + p], 4);
                if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffffu) && b != 0x7fc00000u)
                    abort(); /* a NaN that is not the canonical one */
                if (!ok && b != 0)
                    abort();
            }
        }
        if ((st == MEMRA_OK) != (f.bad_expert == 0 && f.nonfinite == 0))
            abort();
    } else {
        /* Refused: nothing written. */
        for (size_t i = 0; i < 3 * np * 8; i++)
            if (((const uint8_t *)ptrs)[i] != 0xA5)
                abort();
        for (size_t i = 0; i < 3 * np * 4; i++)
            if (((const uint8_t *)scl)[i] != 0xA5)
                abort();
    }
    free(sel), free(selw), free(pl), free(ptrs), free(scl);
}

static void fuzz_validate(reader *r)
{
    uint64_t a[4];
    for (int i = 0; i < 4; i++)
        a[i] = take(r, 8);
    const uint32_t n = (uint32_t)take(r, 4), n_expert = (uint32_t)take(r, 4);
    memra_vrows_slabs sl;
    for (int k = 0; k < 3; k++)
        sl.base[k] = take(r, 8), sl.stride[k] = take(r, 8);
    int have_macros = -1;
    memra_status st =
        memra_vrows_validate("fuzz", a[0], a[1], n, n_expert, NULL, &sl, a[2], a[3], &have_macros);
    if (st == MEMRA_OK) {
        if (have_macros != 0)
            abort();
        /* Accepted means the whole slab is addressable. */
        for (int k = 0; k < 3; k++) {
            uint64_t span;
            if (__builtin_mul_overflow((uint64_t)(n_expert - 1), sl.stride[k], &span) ||
                sl.base[k] + span < sl.base[k])
                abort();
        }
        if (n == 0 || n > MEMRA_MAX_PAIRS || n_expert == 0 || a[2] % 8 || a[3] % 4)
            abort();
    }
}

static void fuzz_cache_entry(reader *r)
{
    memra_cache_key key;
    for (int i = 0; i < 16; i++)
        key.bytes[i] = (unsigned char)take(r, 1);
    uint8_t *copy = malloc(r->n ? r->n : 1); /* exact size: overreads are caught */
    memcpy(copy, r->p, r->n);
    memra_image img;
    if (memra_cache_parse(copy, r->n, &key, &img)) {
        if (img.size + MEMRA_CACHE_HEADER_BYTES != r->n)
            abort();
        memra_image_free(&img);
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    reader r = {data + 1, size - 1};
    switch (data[0] % 3) {
    case 0:
        fuzz_host_arm(&r);
        break;
    case 1:
        fuzz_validate(&r);
        break;
    default:
        fuzz_cache_entry(&r);
        break;
    }
    return 0;
}
