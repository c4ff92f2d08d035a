/* Every kernel the engine loads, and the module (NVRTC program) each lives
 * in, listed once: the loader walks these lists, the engine keeps one
 * function slot per kernel and one module per module, and the mock driver
 * maps the names to the host runs of the same source. A module is compiled
 * at the first use of one of its kernels, so a process pays only for what
 * it launches. Adding a kernel: a row here (and in MEMRA_MODULES and
 * kernels_src/meson.build if it brings a module of its own). */
#ifndef MEMRA_KERNELS_H
#define MEMRA_KERNELS_H

#include "jit.h"
#include "route_abi.h"
#include "vrows_abi.h"

/* X(id, source symbol in kernels_src/meson.build's output) */
#define MEMRA_MODULES(X)                                                                           \
    X(VROWS, vrows)                                                                                \
    X(ROUTE_BLOCK, route_block)                                                                    \
    X(ROUTE_WARP, route_warp)

/* X(id, entry point name, module id, the public call that loads it before
 * a capture: what a launch refused under capture tells its caller to make) */
#define MEMRA_KERNELS(X)                                                                           \
    X(VROWS, MEMRA_VROWS_KERNEL, VROWS, "memra_vrows_prepare_layer() or memra_engine_warmup()")    \
    X(FAULTS_TAKE, MEMRA_TAKE_KERNEL, VROWS, "memra_engine_warmup()")                              \
    X(ROUTE, MEMRA_ROUTE_KERNEL, ROUTE_WARP, "memra_route_prepare_layer()")                        \
    X(ROUTE_BLOCK, MEMRA_ROUTE_BLOCK_KERNEL, ROUTE_BLOCK, "memra_route_prepare_layer()")

typedef enum memra_module_id {
#define MEMRA_X(id, sym) MEMRA_MODULE_##id,
    MEMRA_MODULES(MEMRA_X)
#undef MEMRA_X
        MEMRA_MODULE_COUNT
} memra_module_id;

typedef enum memra_kernel_id {
#define MEMRA_X(id, name, module, prepare) MEMRA_KERNEL_##id,
    MEMRA_KERNELS(MEMRA_X)
#undef MEMRA_X
        MEMRA_KERNEL_COUNT
} memra_kernel_id;

/* Kernel k's entry point name, module, and the call that loads it. */
const char *memra_kernel_name(memra_kernel_id k);
memra_module_id memra_kernel_module(memra_kernel_id k);
const char *memra_kernel_prepare(memra_kernel_id k);
/* Module m's embedded source. */
memra_source memra_module_source(memra_module_id m);

#endif /* MEMRA_KERNELS_H */
