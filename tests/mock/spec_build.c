/* The mock's host run of one layer spec's routing kernels, compiled with
 * that spec as constants, as the library compiles them with
 * MEMRA_ROUTE_SPECIALIZE: tests/meson.build builds this file once per spec
 * of its list, with the spec's -DMEMRA_SPEC_* and -DMOCK_SPEC_INDEX. The
 * kernels' host machinery (kernel_on_host.h) is this file's own. */
#include "mock_internal.h"
#include "kernel_on_host.h"

static void run(const unsigned char *args, size_t size, unsigned grid, unsigned block,
                memra_kernel_id k)
{
    run_route_on_host(args, size, (host_dim3){grid, 1, 1}, (host_dim3){block, 1, 1},
                      host_route_kernel(k));
}

const mock_spec_build MEMRA_ROUTE_CAT(mock_spec_build_, MOCK_SPEC_INDEX) = {
    MEMRA_SPEC_E, MEMRA_SPEC_NG, MEMRA_SPEC_TG, MEMRA_SPEC_K, MEMRA_SPEC_FLAGS, run};
