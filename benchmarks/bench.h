/* What the benchmark's parts share: the driver table, the output rows, and
 * compiling a helper kernel. */
#ifndef MEMRA_BENCH_H
#define MEMRA_BENCH_H

#include <stdio.h>
#include <stdlib.h>

#include "engine.h"
#include "jit.h"

extern const memra_driver *d;
extern const memra_nvrtc *nv;
extern int quick;

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

double median(double *v, int n);
/* One result row: printed, and kept for the JSON file. */
void row(const char *group, const char *what, double value, const char *unit, double baseline,
         const char *baseline_name);
/* A CUBIN of `src` for sm_`sm`, loaded; returns the function `name`. */
CUfunction compile_cubin(const char *src, const char *name, int sm, const char *const *extra,
                         CUmodule *mod);

/* Routing fused into the table build, beside the two-step path and the
 * top-k kernel alone, per decode layer in a 32-layer CUDA graph. */
void memra_bench_route(memra_engine *eng, int sm, CUstream s);

#endif /* MEMRA_BENCH_H */
