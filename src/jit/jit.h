/* NVRTC compile of the embedded kernel source, and the choice of which
 * NVRTC and which image (CUBIN or PTX, which arch) a device gets. */
#ifndef MEMRA_JIT_H
#define MEMRA_JIT_H

#include <stddef.h>

#include "driver/driver.h"

/* One kernel module's embedded source (kernels_src/meson.build): compiled
 * by NVRTC as its own program at its first use, cached on disk by its own
 * key. `name` is the file NVRTC's messages name. */
typedef struct memra_source {
    const char *name;
    const char *text;
    size_t len;
} memra_source;

typedef struct memra_image {
    char *data;
    size_t size;
    int is_ptx;
    int arch; /* the XY of sm_XY or compute_XY */
} memra_image;

/* The image `nv` would build for a device of sm_`sm` under a driver of
 * `driver_version` (cuDriverGetVersion), as CUBIN (is_ptx = 0) or PTX:
 * 1 with *arch, or 0 with why not. The rules:
 *  - an NVRTC whose major is newer than the driver's is never used;
 *  - CUBIN: the exact SM, else the highest arch of the same major below it
 *    (binary compatible: sm_121 takes sm_120's CUBIN);
 *  - PTX: the highest arch at or below the SM, only from an NVRTC whose
 *    version is not newer than the driver (the driver JIT-compiles it). */
int memra_jit_target(const memra_nvrtc *nv, int sm, int driver_version, int is_ptx, int *arch,
                     char *why, size_t n);

typedef struct memra_jit_choice {
    const memra_nvrtc *nv;
    int arch;
    int is_ptx;
} memra_jit_choice;

/* Every usable (NVRTC, image) for the device, best first: CUBINs from the
 * candidates in discovery order, then PTX. With force_ptx only PTX. Opens
 * candidates not tried yet, one at a time, only while none serves (a CUBIN
 * for the SM; PTX with force_ptx). Each refusal is appended to `why` as a
 * line naming the candidate. *seen is how many candidates the plan looked
 * at, for memra_jit_plan_more. */
int memra_jit_plan(const memra_driver *d, int sm, int driver_version, int force_ptx,
                   memra_jit_choice *plan, int max, char *why, size_t n, int *seen);

/* After every choice of memra_jit_plan failed (a compile error, an image
 * the driver refused): the choices of candidates past the *seen the caller
 * has looked at -- opened by another thread meanwhile, or opened here one at
 * a time until they offer one -- and *seen moves past them (0 choices when
 * no candidate is left). For the engine's load to fall through to libraries
 * it did not load on speculation. */
int memra_jit_plan_more(const memra_driver *d, int sm, int driver_version, int force_ptx,
                        memra_jit_choice *plan, int max, char *why, size_t n, int *seen);

/* Compiles `src` for one arch (CUBIN for sm_arch, or PTX for compute_arch)
 * with `options` (NULL-terminated, without the arch option); a compile error
 * returns MEMRA_ERR_NVRTC with NVRTC's log in the message. */
memra_status memra_jit_compile_src(const memra_nvrtc *nv, const char *src, const char *file,
                                   int arch, int is_ptx, const char *const *options,
                                   memra_image *out);

/* A module's embedded source with the fixed exactness options. */
memra_status memra_jit_compile(const memra_nvrtc *nv, const memra_source *src, int arch, int is_ptx,
                               memra_image *out);
void memra_image_free(memra_image *img);

/* The fixed options (NULL-terminated, without the arch option). */
extern const char *const memra_jit_options[];

#endif /* MEMRA_JIT_H */
