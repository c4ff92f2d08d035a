/* What every part of the benchmark shares: the driver table, the clock, the
 * result rows (printed, and written to the JSON file when one is asked
 * for), a table workload, and compiling helper kernels. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "base/error.h"

const memra_driver *d;
const memra_nvrtc *nv; /* the NVRTC the engine's kernel came from */
FILE *bench_json;      /* the JSON file, or NULL: rows only printed */
static int json_first = 1;
int quick;

double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void row(const char *group, const char *what, double value, const char *unit, double baseline,
         const char *baseline_name)
{
    if (baseline > 0)
        printf("  %-50s %10.3f %-5s  x%.3f vs %s\n", what, value, unit, value / baseline,
               baseline_name);
    else
        printf("  %-50s %10.3f %-5s\n", what, value, unit);
    if (bench_json) {
        fprintf(bench_json,
                "%s\n  {\"group\": \"%s\", \"what\": \"%s\", \"value\": %.6f, \"unit\": \"%s\"",
                json_first ? "" : ",", group, what, value, unit);
        if (baseline > 0)
            fprintf(bench_json, ", \"baseline\": \"%s\", \"ratio\": %.6f", baseline_name,
                    value / baseline);
        fprintf(bench_json, "}");
        json_first = 0;
    }
}

void work_init(memra_engine *eng, work *w, uint32_t n)
{
    w->n = n;
    w->n_expert = 256;
    MK(memra_alloc(eng, (size_t)n * 4, &w->sel));
    MK(memra_alloc(eng, (size_t)n * 4, &w->selw));
    MK(memra_alloc(eng, (size_t)n * 24, &w->ptrs));
    MK(memra_alloc(eng, (size_t)n * 12, &w->scl));
    int32_t *sel = malloc((size_t)n * 4);
    float *selw = malloc((size_t)n * 4);
    for (uint32_t p = 0; p < n; p++)
        sel[p] = (int32_t)((p * 2654435761u) % w->n_expert), selw[p] = 1.0f / (float)(p % 7 + 1);
    MK(memra_upload_i32(eng, w->sel, sel, n));
    MK(memra_upload_f32(eng, w->selw, selw, n));
    free(sel), free(selw);
    w->planes = malloc(3 * w->n_expert * sizeof(float));
    for (uint32_t e = 0; e < 3 * w->n_expert; e++)
        w->planes[e] = 0.5f + (float)e / 1024.0f;
    w->mac =
        (memra_vrows_macros){{w->planes, w->planes + w->n_expert, w->planes + 2 * w->n_expert}};
    w->sl = (memra_vrows_slabs){{0x7e0000000000ull, 0x7e4000000000ull, 0x7e8000000000ull},
                                {24u << 20, 24u << 20, 48u << 20}};
}

void work_free(memra_engine *eng, work *w)
{
    memra_free(eng, w->sel), memra_free(eng, w->selw), memra_free(eng, w->ptrs),
        memra_free(eng, w->scl);
    free(w->planes);
}

/* The bare baseline: the same kernel through cuLaunchKernel, arguments as
 * an ordinary kernelParams array (what hand-written serving code does). */
/* A CUBIN of `src` for sm_`sm` with the given options, loaded; returns `name`. */
CUfunction compile_cubin(const char *src, const char *name, int sm, const char *const *extra,
                         CUmodule *mod)
{
    memra_image img;
    if (!nv || memra_jit_compile_src(nv, src, "bench.cu", sm, 0, extra, &img) != MEMRA_OK) {
        fprintf(stderr, "%s: %s\n", name, memra_last_error());
        exit(1);
    }
    CUfunction f;
    CK(d->cuModuleLoadData(mod, img.data));
    CK(d->cuModuleGetFunction(&f, *mod, name));
    memra_image_free(&img);
    return f;
}

CUfunction compile_empty(int sm, CUmodule *mod)
{
    return compile_cubin("extern \"C\" __global__ void memra_bench_empty() {}", "memra_bench_empty",
                         sm, NULL, mod);
}

double copy_gbs(CUstream s, int reps)
{
    const size_t cbytes = 512ull << 20;
    CUdeviceptr c0, c1;
    CK(d->cuMemAlloc(&c0, cbytes));
    CK(d->cuMemAlloc(&c1, cbytes));
    CUevent e0, e1;
    CK(d->cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CK(d->cuEventCreate(&e1, CU_EVENT_DEFAULT));
    double cv[32];
    reps = reps > 32 ? 32 : reps;
    for (int r = -3; r < reps; r++) {
        CK(d->cuEventRecord(e0, s));
        CK(d->cuMemcpyDtoDAsync(c1, c0, cbytes, s));
        CK(d->cuEventRecord(e1, s));
        CK(d->cuEventSynchronize(e1));
        float ms;
        CK(d->cuEventElapsedTime(&ms, e0, e1));
        if (r >= 0)
            cv[r] = 2.0 * (double)cbytes / ((double)ms * 1e-3) / 1e9;
    }
    d->cuEventDestroy(e0), d->cuEventDestroy(e1);
    d->cuMemFree(c0), d->cuMemFree(c1);
    return median(cv, reps);
}
