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

/* A server's start: 60 layers of DeepSeek-V3 prepared, both kinds (the
 * table kernel's three planes; routing's planes and bias), in a fresh
 * engine whose modules are already loaded (warm cache): every layer's
 * first upload, pinned shadows included. */
static double prepare_layers_us(int ordinal, const char *cache_dir)
{
    setenv("MEMRA_CACHE_DIR", cache_dir, 1);
    memra_engine *eng;
    MK(memra_engine_create(ordinal, &eng));
    MK(memra_engine_warmup(eng));
    enum { E = 256, LAYERS = 60 };
    static float planes[LAYERS][3][E], bias[LAYERS][E];
    for (int l = 0; l < LAYERS; l++)
        for (int e = 0; e < E; e++) {
            for (int k = 0; k < 3; k++)
                planes[l][k][e] = 0.5f + (float)((e * 7 + l + k) % 13) / 16.0f;
            bias[l][e] = (float)((e + l) % 11) / 128.0f;
        }
    memra_route_spec spec = {.n_expert = E,
                             .top_k = 8,
                             .n_group = 8,
                             .topk_group = 4,
                             .scoring = MEMRA_ROUTE_SIGMOID,
                             .renormalize = 1,
                             .routed_scaling_factor = 2.5f};
    /* The routing kernels' modules too, before the clock starts. */
    const memra_vrows_macros m0 = {{planes[0][0], planes[0][1], planes[0][2]}};
    spec.bias = bias[0];
    MK(memra_route_prepare_layer(eng, LAYERS, &spec, &m0, NULL));
    const double t0 = now_us();
    for (int l = 0; l < LAYERS; l++) {
        const memra_vrows_macros m = {{planes[l][0], planes[l][1], planes[l][2]}};
        spec.bias = bias[l];
        MK(memra_vrows_prepare_layer(eng, l, E, &m, NULL));
        MK(memra_route_prepare_layer(eng, l, &spec, &m, NULL));
    }
    const double t1 = now_us();
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
    row("first_use", "prepare 60 DeepSeek-V3 layers, both kinds (planes + bias), warm engine",
        prepare_layers_us(ordinal, sub), "us", 0, "");
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}
