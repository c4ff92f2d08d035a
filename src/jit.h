/* NVRTC compile of the embedded kernel source and the module load. */
#ifndef MEMRA_JIT_H
#define MEMRA_JIT_H

#include <stddef.h>

#include "driver.h"

extern const char memra_kernel_vrows_src[];
extern const size_t memra_kernel_vrows_src_len;

typedef struct memra_image {
    char *data;
    size_t size;
    int is_ptx;
    int arch; /* the XY of sm_XY or compute_XY */
} memra_image;

/* The arch NVRTC is asked for when the device is sm_`sm`: the exact SM as
 * CUBIN if NVRTC knows it, else PTX for the highest compute_XY not above it. */
memra_status memra_jit_pick_arch(const memra_driver *d, int sm, int *arch, int *is_ptx);

/* Compiles `src` for one arch (CUBIN for sm_arch, or PTX for compute_arch)
 * with `options` (NULL-terminated, without the arch option); a compile error
 * returns MEMRA_ERR_NVRTC with NVRTC's log in the message. */
memra_status memra_jit_compile_src(const memra_driver *d, const char *src, const char *file,
                                   int arch, int is_ptx, const char *const *options,
                                   memra_image *out);

/* The embedded table kernel with the fixed exactness options. */
memra_status memra_jit_compile(const memra_driver *d, int arch, int is_ptx, memra_image *out);
void memra_image_free(memra_image *img);

/* The fixed options (NULL-terminated, without the arch option). */
extern const char *const memra_jit_options[];

#endif /* MEMRA_JIT_H */
