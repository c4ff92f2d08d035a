/* memra: the command-line face of the library.
 *   memra info    library, driver, every NVRTC candidate, the kernel cache,
 *                 and per device what it will load and how long that takes
 *   memra check   memra_engine_self_check and a 2^20-pair batch on every
 *                 device found (the host arm alone where there is none)
 *   memra bench   the library beside the bare baselines (benchmarks/bench.c)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <memra/memra.h>

#include "cache.h"
#include "driver.h"
#include "gate_cases.h"
#include "jit.h"
#include "nvrtc_find.h"
#include "self_check.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The device count, or a line saying plainly why there is no device. */
static int devices(const char *indent)
{
    int n = 0;
    if (memra_device_count(&n) != MEMRA_OK) {
        printf("%sdriver: not available: %s\n", indent, memra_last_error());
        return 0;
    }
    if (n == 0) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        printf("%sno CUDA device visible%s%s%s\n", indent, vis ? " (CUDA_VISIBLE_DEVICES=\"" : "",
               vis ? vis : "", vis ? "\")" : "");
    }
    return n;
}

static void print_candidates(const memra_driver *d, int driver_version)
{
    const memra_nvrtc *list;
    const int n = memra_nvrtc_candidates(d, &list);
    printf("NVRTC candidates, in the order they are tried:\n");
    if (n == 0)
        printf("  none\n");
    for (int i = 0; i < n; i++) {
        const memra_nvrtc *c = &list[i];
        printf("  %d. %s (%s): ", i + 1, c->path, c->origin);
        if (c->status) {
            printf("not usable: %s\n", c->why);
            continue;
        }
        printf("NVRTC %d.%d, sm_%d..sm_%d (%d archs)", c->major, c->minor, c->archs[0],
               c->archs[c->n_archs - 1], c->n_archs);
        if (driver_version && c->major > driver_version / 1000)
            printf(": refused, newer than the driver (CUDA %d.%d)", driver_version / 1000,
                   driver_version % 1000 / 10);
        printf("\n");
    }
}

static void print_device(const memra_driver *d, int ordinal)
{
    memra_engine *eng;
    if (memra_engine_create(ordinal, &eng)) {
        printf("device %d: %s\n", ordinal, memra_last_error());
        return;
    }
    memra_engine_info info;
    memra_engine_get_info(eng, &info);
    printf("device %d: %s, sm_%d\n", ordinal, info.name, info.sm);
    memra_jit_choice plan[2 * MEMRA_NVRTC_MAX];
    char why[2048] = "";
    const char *force = getenv("MEMRA_FORCE_PTX");
    const int n = memra_jit_plan(d, info.sm, info.driver_version, force && !strcmp(force, "1"),
                                 plan, 2 * MEMRA_NVRTC_MAX, why, sizeof why);
    if (n) {
        char path[1200] = "";
        const int cached =
            memra_cache_has_entry(plan[0].nv, plan[0].arch, plan[0].is_ptx, path, sizeof path);
        printf("  will use: %s_%d %s from NVRTC %d.%d (%s); cache entry %s\n",
               plan[0].is_ptx ? "compute" : "sm", plan[0].arch, plan[0].is_ptx ? "PTX" : "CUBIN",
               plan[0].nv->major, plan[0].nv->minor, plan[0].nv->path,
               cached ? "present" : "absent");
    } else {
        printf("  will use: no NVRTC can build for it; only an entry in the kernel cache\n");
    }
    if (why[0])
        printf("  refused:%s\n", why);
    double t0 = now_ms();
    memra_status st = memra_engine_warmup(eng);
    double t1 = now_ms();
    memra_kernel_origin o;
    memra_engine_kernel_origin(eng, &o);
    if (st)
        printf("  kernel: NOT loaded: %s\n", memra_last_error());
    else
        printf("  kernel: %s and loaded as %s_%d %s in %.1f ms (NVRTC %d.%d%s%s)\n",
               o.from_cache ? "read from the cache" : "compiled", o.is_ptx ? "compute" : "sm",
               o.arch, o.is_ptx ? "PTX (driver JIT)" : "CUBIN", t1 - t0, o.nvrtc_version / 1000,
               o.nvrtc_version % 1000 / 10, o.nvrtc_path[0] ? ", " : "", o.nvrtc_path);
    memra_engine_destroy(eng);
}

static int cmd_info(void)
{
    printf("memra %s (header %s)\n", memra_version_string(), MEMRA_VERSION_STRING);
    const memra_driver *d = memra_driver_get();
    int dv = 0;
    if (d->cuda_status == MEMRA_OK && d->cuDriverGetVersion(&dv) == CUDA_SUCCESS)
        printf("driver: CUDA %d.%d\n", dv / 1000, dv % 1000 / 10);
    print_candidates(d, dv);
    char dir[1024];
    if (memra_cache_dir(dir, sizeof dir))
        printf("kernel cache: %s (%llu bytes, cap %llu)\n", dir,
               (unsigned long long)memra_cache_size(dir), (unsigned long long)memra_cache_cap());
    else
        printf("kernel cache: off\n");
    const int n = devices("");
    for (int i = 0; i < n; i++)
        print_device(d, i);
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
    memra_self_check_report rep;
    double t0 = now_ms();
    memra_status st = memra_engine_self_check(eng, &rep);
    double t1 = now_ms();
    int bad = st != MEMRA_OK;
    if (st == MEMRA_OK)
        printf("  self check: exact (%u cases, %llu entries, %.1f ms with the kernel load)\n",
               rep.cases, (unsigned long long)rep.entries, t1 - t0);
    else
        printf("  self check: %s: %s\n", st == MEMRA_ERR_SELF_CHECK ? "MISMATCH" : "FAILED",
               memra_last_error());
    /* A serving-size batch with every kind of float. */
    uint64_t seed = 7;
    memra_random_case r;
    if (memra_random_case_make(&r, &seed, 1u << 20, 256, 1, 1, 32, 99) == 0) {
        char why[512];
        int f = memra_case_check(eng, &r.c, why, sizeof why);
        printf("  %-10s %s%s\n", "2^20 pairs", f ? "MISMATCH: " : "exact", f ? why : "");
        bad |= f != 0;
        memra_random_case_free(&r);
    }
    memra_engine_destroy(eng);
    return bad;
}

static int cmd_check(void)
{
    int bad = check_host_arm();
    const int n = devices("");
    if (n == 0)
        printf("no GPU to check: checked the host arm only\n");
    for (int i = 0; i < n; i++)
        bad |= check_device(i);
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
