/* Every kernel the engine loads, listed once: the loader walks this list,
 * the engine keeps one function slot per row, and the mock driver maps the
 * names to the host runs of the same source. X(id, entry point name). */
#ifndef MEMRA_KERNELS_H
#define MEMRA_KERNELS_H

#include "route_abi.h"
#include "vrows_abi.h"

#define MEMRA_KERNELS(X)                                                                           \
    X(VROWS, MEMRA_VROWS_KERNEL)                                                                   \
    X(FAULTS_TAKE, MEMRA_TAKE_KERNEL)                                                              \
    X(ROUTE, MEMRA_ROUTE_KERNEL)                                                                   \
    X(ROUTE_BLOCK, MEMRA_ROUTE_BLOCK_KERNEL)

typedef enum memra_kernel_id {
#define MEMRA_X(id, name) MEMRA_KERNEL_##id,
    MEMRA_KERNELS(MEMRA_X)
#undef MEMRA_X
        MEMRA_KERNEL_COUNT
} memra_kernel_id;

/* The entry point's name of kernel k. */
const char *memra_kernel_name(memra_kernel_id k);

#endif /* MEMRA_KERNELS_H */
