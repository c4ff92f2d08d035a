/* What every single-GPU test program shares: skip (exit 77) where no CUDA
 * device exists, and a group engine on device 0 whose primary context is
 * current, as it is in a serving process. */
#ifndef MEMRA_GPU_FIXTURE_H
#define MEMRA_GPU_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

#include "engine/engine.h"

/* Nonzero (after saying why) where there is no device to test on. */
static inline int gpu_absent(void)
{
    /* MEMRA_TEST_FILTER=name* runs the matching tests alone (a short
     * device run, or the suite on the fake driver: LD_LIBRARY_PATH to
     * tests/fake_cuda). */
    const char *filter = getenv("MEMRA_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    int n = 0;
    memra_status st = memra_device_count(&n);
    if (st || n == 0) {
        printf("SKIP: no CUDA device here (%s)\n",
               st ? memra_last_error() : "the driver reports 0 devices");
        return 1;
    }
    return 0;
}

static inline int gpu_engine_open(memra_engine **eng, const memra_driver **drv)
{
    if (memra_engine_create(0, eng)) {
        fprintf(stderr, "engine_create: %s\n", memra_last_error());
        return -1;
    }
    *drv = memra_driver_get();
    assert_int_equal((*drv)->cuCtxPushCurrent((*eng)->cx.ctx), CUDA_SUCCESS);
    memra_engine_info info;
    memra_engine_get_info(*eng, &info);
    printf("device 0: %s, sm_%d, driver %d, NVRTC %d\n", info.name, info.sm, info.driver_version,
           info.nvrtc_version);
    return 0;
}

static inline void gpu_engine_close(memra_engine *eng, const memra_driver *drv)
{
    CUcontext c;
    drv->cuCtxPopCurrent(&c);
    memra_engine_destroy(eng);
}

#endif
