/* memra: the command-line face of the library.
 *   memra info    library, driver, NVRTC and every device
 *   memra check   the gate on every device found (host arm only where none)
 *   memra bench   the library beside the bare baselines (benchmarks/bench.c)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <memra/memra.h>

#include "cache.h"
#include "device_case.h"
#include "driver.h"
#include "gate_cases.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmd_info(void)
{
    printf("memra %s (header %s)\n", memra_version_string(), MEMRA_VERSION_STRING);
    const memra_driver *d = memra_driver_get();
    if (d->nvrtc_status == MEMRA_OK) {
        int maj = 0, min = 0;
        d->nvrtcVersion(&maj, &min);
        printf("NVRTC: %d.%d (%s)\n", maj, min, d->nvrtc_path);
    } else {
        printf("NVRTC: not available: %s\n", d->nvrtc_error);
    }
    char dir[1024];
    if (memra_cache_dir(dir, sizeof dir))
        printf("kernel cache: %s (%llu bytes, cap %llu)\n", dir,
               (unsigned long long)memra_cache_size(dir), (unsigned long long)memra_cache_cap());
    else
        printf("kernel cache: off\n");
    int n = 0;
    if (memra_device_count(&n) != MEMRA_OK) {
        printf("driver: not available: %s\n", memra_last_error());
        return 0;
    }
    int dv = 0;
    d->cuDriverGetVersion(&dv);
    printf("driver: CUDA %d.%d, %d device(s)\n", dv / 1000, dv % 1000 / 10, n);
    for (int i = 0; i < n; i++) {
        memra_engine *eng;
        if (memra_engine_create(i, &eng)) {
            printf("device %d: %s\n", i, memra_last_error());
            continue;
        }
        memra_engine_info info;
        memra_engine_get_info(eng, &info);
        int arch, is_ptx;
        char path[1100] = "";
        if (d->nvrtc_status == MEMRA_OK &&
            memra_jit_pick_arch(d, info.sm, &arch, &is_ptx) == MEMRA_OK)
            printf("device %d: cache entry for %s_%d: %s\n", i, is_ptx ? "compute" : "sm", arch,
                   memra_cache_has_entry(d, arch, is_ptx, path, sizeof path) ? "present"
                                                                             : "absent");
        double t0 = now_ms();
        memra_status st = memra_engine_warmup(eng);
        double t1 = now_ms();
        memra_engine_get_info(eng, &info);
        printf("device %d: %s, sm_%d\n", i, info.name, info.sm);
        if (st)
            printf("  kernel: NOT compiled: %s\n", memra_last_error());
        else
            printf("  kernel: %s and loaded as %s in %.1f ms\n",
                   info.kernel_from_cache ? "read from the cache" : "compiled",
                   info.kernel_is_ptx ? "PTX (driver JIT)" : "CUBIN", t1 - t0);
        memra_engine_destroy(eng);
    }
    return 0;
}

/* 128-bit: an address model that cannot itself wrap. */
__extension__ typedef unsigned __int128 u128;

/* Host arm on the gate cases against a 128-bit model of the addresses. */
static int check_host_arm(void)
{
    int bad = 0;
    for (size_t i = 0; i < N_GATE_CASES; i++) {
        const gate_case *g = &gate_cases[i];
        float selw[GATE_MAX_PAIRS], planes[3][GATE_MAX_EXPERT];
        gate_inputs(g, selw, planes);
        memra_vrows_macros mac = {{planes[0], planes[1], planes[2]}};
        uint64_t ptrs[3 * GATE_MAX_PAIRS];
        float scl[3 * GATE_MAX_PAIRS];
        memra_status st =
            memra_vrows_tables_host(g->sel, selw, g->n_pairs, g->n_expert,
                                    g->with_macros ? &mac : NULL, &g->slabs, ptrs, scl, NULL);
        int ok = st == MEMRA_OK;
        for (uint32_t p = 0; ok && p < g->n_pairs; p++)
            for (int k = 0; k < 3; k++) {
                u128 want = (u128)g->slabs.base[k] + (u128)(uint64_t)g->sel[p] * g->slabs.stride[k];
                ok &= ptrs[k * g->n_pairs + p] == (uint64_t)want;
            }
        printf("  host arm  %-10s %s\n", g->name, ok ? "exact" : "MISMATCH");
        bad |= !ok;
    }
    return bad;
}

static int check_device(int ordinal)
{
    memra_engine *eng;
    if (memra_engine_create(ordinal, &eng)) {
        printf("device %d: FAIL: %s\n", ordinal, memra_last_error());
        return 1;
    }
    memra_engine_info info;
    memra_engine_get_info(eng, &info);
    printf("device %d: %s, sm_%d\n", ordinal, info.name, info.sm);
    int bad = 0;
    char why[512];
    for (size_t i = 0; i < N_GATE_CASES; i++) {
        int f = gate_case_check(eng, i, why, sizeof why);
        printf("  device    %-10s %s%s\n", gate_cases[i].name, f ? "MISMATCH: " : "exact",
               f ? why : "");
        bad |= f;
    }
    /* A serving-size batch with every kind of float. */
    const uint32_t n = 1u << 20, E = 256;
    int32_t *sel = malloc(n * 4);
    float *selw = malloc(n * 4), *pl = malloc(3 * E * 4);
    uint64_t s = 7;
    for (uint32_t p = 0; p < n; p++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        sel[p] = (int32_t)((s >> 33) % E);
        uint32_t b = (uint32_t)(s >> 17);
        memcpy(&selw[p], &b, 4);
    }
    for (uint32_t e = 0; e < 3 * E; e++)
        pl[e] = 1.0f / (float)(e + 1);
    memra_vrows_macros mac = {{pl, pl + E, pl + 2 * E}};
    dcase c = {n, E, sel, selw, &mac, &gate_cases[1].slabs, 99, NULL, 1};
    int f = device_case_check(eng, &c, why, sizeof why);
    printf("  device    %-10s %s%s\n", "2^20 pairs", f ? "MISMATCH: " : "exact", f ? why : "");
    bad |= f;
    free(sel), free(selw), free(pl);
    memra_engine_destroy(eng);
    return bad;
}

static int cmd_check(void)
{
    int bad = check_host_arm();
    int n = 0;
    memra_status st = memra_device_count(&n);
    if (st || n == 0) {
        printf("no GPU found (%s): checked the host arm only\n",
               st ? memra_last_error() : "0 CUDA devices");
    } else {
        for (int i = 0; i < n; i++)
            bad |= check_device(i);
    }
    printf("memra check: %s\n", bad ? "FAILED" : "all exact");
    return bad;
}

int memra_bench_main(int argc, char **argv);

static const char usage[] = "usage: memra info | check | bench [--json FILE] [--quick]\n";

/* Output that could not be written is a failure, not a silent success: a
 * script reading `memra check` from a full disk must see a non-zero exit. */
static int finish(int rc)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "memra: writing standard output failed: %s\n", strerror(errno));
        return rc ? rc : 1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *verb = argv[1];
    if (strcmp(verb, "bench") == 0)
        return finish(memra_bench_main(argc - 1, argv + 1));
    if (strcmp(verb, "info") != 0 && strcmp(verb, "check") != 0) {
        fprintf(stderr, "memra: unknown command '%s'\n%s", verb, usage);
        return 2;
    }
    if (argc > 2) {
        fprintf(stderr, "memra %s: unknown argument '%s'\n%s", verb, argv[2], usage);
        return 2;
    }
    return finish(strcmp(verb, "info") == 0 ? cmd_info() : cmd_check());
}
