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

/* X(id, source symbol in kernels_src/meson.build's output) */
#define MEMRA_MODULES(X)                                                                           \
    X(VROWS, vrows)                                                                                \
    X(LAYOUT, layout)                                                                              \
    X(ROUTE_BLOCK, route_block)                                                                    \
    X(ROUTE_WARP1, route_warp1)                                                                    \
    X(ROUTE_WARP4, route_warp4)                                                                    \
    X(ROUTE_WARP8, route_warp8)                                                                    \
    X(ROUTE_WARP16, route_warp16)                                                                  \
    X(ROUTE_SIG4, route_sig4)                                                                      \
    X(ROUTE_SIG8, route_sig8)                                                                      \
    X(ROUTE_SIG16, route_sig16)

/* X(id, entry point name (its __global__ in kernels_src/), module id, the
 * public call that loads it before a capture: what a launch refused under
 * capture tells its caller to make) */
#define MEMRA_KERNELS(X)                                                                           \
    X(VROWS, "memra_vrows_kernel", VROWS, "memra_vrows_prepare_layer() or memra_engine_warmup()")  \
    X(FAULTS_TAKE, "memra_faults_take_kernel", VROWS, "memra_engine_warmup()")                     \
    X(LAYOUT_SMALL, "memra_layout_small_kernel", LAYOUT, "memra_layout_prepare()")                 \
    X(LAYOUT_COUNT, "memra_layout_count_kernel", LAYOUT, "memra_layout_prepare()")                 \
    X(LAYOUT_SCAN, "memra_layout_scan_kernel", LAYOUT, "memra_layout_prepare()")                   \
    X(LAYOUT_PLACE, "memra_layout_place_kernel", LAYOUT, "memra_layout_prepare()")                 \
    X(ROUTE_BLOCK, "memra_route_block_kernel", ROUTE_BLOCK, "memra_route_prepare_layer()")         \
    X(ROUTE_WARP1, "memra_route_warp1_kernel", ROUTE_WARP1, "memra_route_prepare_layer()")         \
    X(ROUTE_WARP4, "memra_route_warp4_kernel", ROUTE_WARP4, "memra_route_prepare_layer()")         \
    X(ROUTE_WARP8, "memra_route_warp8_kernel", ROUTE_WARP8, "memra_route_prepare_layer()")         \
    X(ROUTE_WARP16, "memra_route_warp16_kernel", ROUTE_WARP16, "memra_route_prepare_layer()")      \
    X(ROUTE_SIG4, "memra_route_sig4_kernel", ROUTE_SIG4, "memra_route_prepare_layer()")            \
    X(ROUTE_SIG8, "memra_route_sig8_kernel", ROUTE_SIG8, "memra_route_prepare_layer()")            \
    X(ROUTE_SIG16, "memra_route_sig16_kernel", ROUTE_SIG16, "memra_route_prepare_layer()")

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
