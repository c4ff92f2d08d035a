/* What the benchmark's parts share (bench_util.c), and its scenarios, one
 * file each: tables (bench_tables.c), routing (bench_route.c), first use
 * (bench_first_use.c); bench_main.c runs them. */
#ifndef MEMRA_BENCH_UTIL_H
#define MEMRA_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "engine/engine.h"
#include "jit/jit.h"

extern const memra_driver *d;
extern const memra_nvrtc *nv;
extern int quick;
extern FILE *bench_json; /* the JSON file, or NULL */

#define CK(x)                                                                                      \
    do {                                                                                           \
        CUresult r_ = (x);                                                                         \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *n_ = "?";                                                                  \
            d->cuGetErrorName(r_, &n_);                                                            \
            fprintf(stderr, "%s:%d: %s = %s\n", __FILE__, __LINE__, #x, n_);                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define MK(x)                                                                                      \
    do {                                                                                           \
        memra_status s_ = (x);                                                                     \
        if (s_) {                                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, memra_last_error());        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

double now_us(void);
double median(double *v, int n);
/* The bandwidth ceiling: a 512 MiB device-to-device copy on s, bytes read
 * plus written per second (GB/s), the median of `reps` after warm-up. */
double copy_gbs(CUstream s, int reps);
/* One result row: printed, and kept for the JSON file. */
void row(const char *group, const char *what, double value, const char *unit, double baseline,
         const char *baseline_name);
/* A CUBIN of `src` for sm_`sm`, loaded; returns the function `name`. */
CUfunction compile_cubin(const char *src, const char *name, int sm, const char *const *extra,
                         CUmodule *mod);

/* A workload: device buffers for n pairs, with macros for layer 0. */
typedef struct work {
    uint32_t n, n_expert;
    memra_devptr sel, selw, ptrs, scl;
    float *planes;
    memra_vrows_macros mac;
    memra_vrows_slabs sl;
} work;
void work_init(memra_engine *eng, work *w, uint32_t n);
void work_free(memra_engine *eng, work *w);
CUfunction compile_empty(int sm, CUmodule *mod);

/* The scenarios. */
void bench_tables(int ordinal, int route_only);
void bench_first_use(int ordinal);

/* Routing fused into the table build, beside the two-step path and the
 * top-k kernel alone, per decode layer in a 32-layer CUDA graph. */
void memra_bench_route(memra_engine *eng, int sm, CUstream s);

#endif /* MEMRA_BENCH_UTIL_H */
