/* First use: memra_engine_create, then the time to the first finished
 * launch, with the kernel cache cold, warm, for PTX and off; and routing's
 * own module. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"

static double first_use_us(int ordinal, const char *cache_dir, int force_ptx, double *create_us)
{
    setenv("MEMRA_CACHE_DIR", cache_dir, 1);
    if (force_ptx)
        setenv("MEMRA_FORCE_PTX", "1", 1);
    else
        unsetenv("MEMRA_FORCE_PTX");
    double t0 = now_us();
    memra_engine *eng;
    MK(memra_engine_create(ordinal, &eng));
    double t1 = now_us();
    work w;
    work_init(eng, &w, 8);
    double t2 = now_us();
    MK(memra_vrows_tables(eng, w.sel, w.selw, w.n, w.n_expert, 0, &w.mac, &w.sl, w.ptrs, w.scl,
                          NULL));
    MK(memra_sync(eng, NULL));
    double t3 = now_us();
    work_free(eng, &w);
    memra_engine_destroy(eng);
    unsetenv("MEMRA_FORCE_PTX");
    *create_us = t1 - t0;
    return t3 - t2;
}

/* The same for routing: a fresh engine's first memra_route_tables (one
 * token, DeepSeek-V3's shape: the block kernel's module), finished. */
static double first_route_us(int ordinal, const char *cache_dir)
{
    setenv("MEMRA_CACHE_DIR", cache_dir, 1);
    unsetenv("MEMRA_FORCE_PTX");
    memra_engine *eng;
    MK(memra_engine_create(ordinal, &eng));
    enum { E = 256, K = 8 };
    static float logits[E], bias[E];
    for (int e = 0; e < E; e++)
        logits[e] = (float)(e % 17) / 8.0f, bias[e] = (float)(e % 5) / 64.0f;
    memra_route_spec spec = {.n_expert = E,
                             .top_k = K,
                             .n_group = 8,
                             .topk_group = 4,
                             .scoring = MEMRA_ROUTE_SIGMOID,
                             .renormalize = 1,
                             .routed_scaling_factor = 2.5f,
                             .bias = bias};
    memra_vrows_slabs sl = {{1ull << 40, 2ull << 40, 3ull << 40}, {1 << 20, 1 << 20, 1 << 21}};
    memra_devptr dl, sel, selw, ptrs, scl;
    MK(memra_alloc(eng, sizeof logits, &dl));
    MK(memra_alloc(eng, K * 4, &sel));
    MK(memra_alloc(eng, K * 4, &selw));
    MK(memra_alloc(eng, 3 * K * 8, &ptrs));
    MK(memra_alloc(eng, 3 * K * 4, &scl));
    MK(memra_upload(eng, dl, logits, sizeof logits));
    const double t0 = now_us();
    MK(memra_route_tables(eng, dl, 1, &spec, 0, NULL, &sl, sel, selw, ptrs, scl, NULL));
    MK(memra_sync(eng, NULL));
    const double t1 = now_us();
    memra_free(eng, dl), memra_free(eng, sel), memra_free(eng, selw);
    memra_free(eng, ptrs), memra_free(eng, scl);
    memra_engine_destroy(eng);
    return t1 - t0;
}

void bench_first_use(int ordinal)
{
    printf("\nfirst use: memra_engine_create, then time to the first finished launch\n");
    char tmpl[] = "/tmp/memra-bench-cache-XXXXXX";
    char *dir = mkdtemp(tmpl);
    char sub[128];
    double cu;
    snprintf(sub, sizeof sub, "%s/cubin", dir);
    double cold = first_use_us(ordinal, sub, 0, &cu);
    row("first_use", "engine create", cu, "us", 0, "");
    row("first_use", "cold cache, CUBIN (NVRTC compile + load)", cold, "us", 0, "");
    double warm[5];
    for (int i = 0; i < 5; i++)
        warm[i] = first_use_us(ordinal, sub, 0, &cu);
    row("first_use", "warm cache, CUBIN (median of 5 engines)", median(warm, 5), "us", 0, "");
    snprintf(sub, sizeof sub, "%s/ptx", dir);
    row("first_use", "cold cache, PTX (NVRTC + driver JIT)", first_use_us(ordinal, sub, 1, &cu),
        "us", 0, "");
    row("first_use", "warm cache, PTX (driver JIT)", first_use_us(ordinal, sub, 1, &cu), "us", 0,
        "");
    row("first_use", "cache off (NVRTC compile every start)", first_use_us(ordinal, "off", 0, &cu),
        "us", 0, "");
    snprintf(sub, sizeof sub, "%s/route", dir);
    row("first_use", "routing, cold cache, CUBIN (its module: NVRTC compile + load)",
        first_route_us(ordinal, sub), "us", 0, "");
    row("first_use", "routing, warm cache, CUBIN", first_route_us(ordinal, sub), "us", 0, "");
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}
