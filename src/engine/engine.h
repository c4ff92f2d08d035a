/* The engine: one device's primary context, its own stream, the loaded
 * kernels, the fault word and the mirror of host planes. */
#ifndef MEMRA_ENGINE_H
#define MEMRA_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>

#include "context.h"
#include "driver/driver.h"
#include "jit/kernels.h"
#include "layer_spec.h"
#include "mirror.h"

/* Readback areas of the fault word: each reset takes one for the length of
 * its copy, so concurrent readers on different streams never share one and
 * no lock is held across a device wait. More readers at once than this get
 * a temporary area of their own. */
#define MEMRA_FAULT_READBACKS 32

/* A kernel compiled with `n` defines ahead of its module's source: names[i]
 * (static strings, compared by address) as the unsigned vals[i]. The
 * routing kernels take a layer's spec so (route.c, with specialisation
 * on). */
#define MEMRA_SPECIAL_MAX_DEFINES 8
typedef struct memra_special_key {
    memra_kernel_id k;
    int n;
    const char *const *names;
    uint32_t vals[MEMRA_SPECIAL_MAX_DEFINES];
} memra_special_key;

/* The most such modules an engine loads (or fails to build: an entry with
 * f NULL); past them, the generic kernels. A layer spec takes up to four
 * (the block and team kernels, each with and without a fused layout), so 32
 * hold eight specs' whole: a model and its draft model with room to spare,
 * or bench_peers' six families in one engine (at 16 its last families'
 * fused layouts fell back to the generic kernel). */
#define MEMRA_SPECIAL_MODULES 32
typedef struct memra_special {
    memra_special_key key;
    CUmodule mod;
    CUfunction f;
} memra_special;

struct memra_engine {
    const memra_driver *d;
    memra_context cx; /* the device and its primary context */
    CUstream stream;  /* the engine's own non-blocking stream */
    _Atomic int pdl;  /* launch with programmatic dependent launch (launch.c) */
    /* 4 x u32: the fault word (kernels_src/vrows.cu), then
     * MEMRA_FAULT_READBACKS areas of 4 x u32 that memra_faults_take_kernel moves it
     * into. */
    CUdeviceptr faults;
    _Atomic unsigned long long readbacks_busy; /* bit i: area i is taken */

    /* The first load of each module (NVRTC, the disk cache's lock).
     * Launches of a loaded kernel never take it. */
    pthread_mutex_t load_lock;
    _Atomic(CUfunction) kernel[MEMRA_KERNEL_COUNT]; /* non-NULL once its module is loaded */
    CUmodule module[MEMRA_MODULE_COUNT];
    const memra_nvrtc *nvrtc; /* the NVRTC that built the first module (NULL: the cache alone) */
    /* Kernels compiled for one key each: entries below n_special are
     * complete (published with release, added under load_lock). */
    memra_special special[MEMRA_SPECIAL_MODULES];
    _Atomic int n_special;
    /* Routing compiles a module per layer spec (MEMRA_ROUTE_SPECIALIZE at
     * create, on unless set off; the tests and the benchmark set it). */
    int route_specialize;

    /* One memra_engine_self_check at a time: the checks share the scratch
     * layers, so a second one at once would only repeat the first's
     * uploads. No launch or other call takes it. */
    pthread_mutex_t check_lock;

    /* Short critical sections only, no driver call inside: info, origin and
     * layout_tickets. */
    pthread_mutex_t state_lock;
    CUdeviceptr layout_tickets; /* per-layer counts of the fused layout (layout.c), or 0 */
    memra_mirror mirror;        /* the host planes kernels read (mirror.h) */
    memra_engine_info info;
    memra_kernel_origin origin;
};

/* memra_context_enter on the engine's context, the call knowing its engine. */
memra_status memra_call_enter(memra_engine *eng, const char *fn, memra_call *c);
/* MEMRA_ERR_CONTEXT_RESET (naming fn) when the engine's context was reset:
 * the accessors that touch no driver handle answer as every call does. */
memra_status memra_engine_live(memra_engine *eng, const char *fn);

/* Kernel `k`, compiling and loading its module on first use (once, even
 * with racing threads). Loading allocates, so while the stream is captured
 * (`cap`) a first use is MEMRA_ERR_CAPTURE instead. */
memra_status memra_engine_kernel(memra_call *c, memra_capture cap, memra_kernel_id k,
                                 CUfunction *out);

/* Kernel key->k compiled with key's defines, compiled and loaded at its
 * first use as memra_engine_kernel's are; *out NULL (MEMRA_OK) where it
 * cannot be had: while the stream is captured (a first use allocates),
 * with MEMRA_SPECIAL_MODULES taken already, or where the module could not
 * be built (remembered, warned once). The caller then takes the generic
 * kernel. */
memra_status memra_engine_special_kernel(memra_call *c, memra_capture cap,
                                         const memra_special_key *key, CUfunction *out);
/* The text compiled for key: its defines ("#define NAME Vu" lines) ahead
 * of base's text; malloc'd, NUL-terminated, *len without the NUL; NULL when
 * out of memory. */
char *memra_engine_special_text(const memra_special_key *key, const memra_source *base,
                                size_t *len);

#endif /* MEMRA_ENGINE_H */
