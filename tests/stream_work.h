/* One table case on the mock driver for the stream and ordering tests:
 * its inputs, device buffers and the expected tables, read back in the
 * order a stream gives. */
#ifndef MEMRA_STREAM_WORK_H
#define MEMRA_STREAM_WORK_H

#include "testutil.h"

#include "mock_fixture.h"

enum { N = 40, E = 16 };

static inline CUstream make_stream(void)
{
    CUstream s;
    assert_int_equal(mock_table.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    return s;
}

/* One case's inputs, device buffers and expected tables. */
typedef struct work {
    int32_t sel[N];
    float selw[N], pl[3][E];
    memra_vrows_macros mac;
    memra_vrows_slabs sl;
    memra_devptr dsel, dselw, dptrs, dscl;
} work;

static inline void work_init(memra_engine *eng, work *w, float plane_base, uint64_t seed)
{
    for (int p = 0; p < N; p++) {
        w->sel[p] = (int32_t)(rng_next(&seed) % E);
        w->selw[p] = 0.25f + (float)p;
    }
    for (int k = 0; k < 3; k++)
        for (int e = 0; e < E; e++)
            w->pl[k][e] = plane_base + (float)(k * E + e) / 64.0f;
    w->mac = (memra_vrows_macros){{w->pl[0], w->pl[1], w->pl[2]}};
    w->sl =
        (memra_vrows_slabs){{1ull << 40, 2ull << 40, 3ull << 40}, {24 << 20, 24 << 20, 48 << 20}};
    assert_int_equal(memra_alloc(eng, N * 4, &w->dsel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, N * 4, &w->dselw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * N * 8, &w->dptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * N * 4, &w->dscl), MEMRA_OK);
}

static inline void work_free(memra_engine *eng, work *w)
{
    memra_free(eng, w->dsel), memra_free(eng, w->dselw);
    memra_free(eng, w->dptrs), memra_free(eng, w->dscl);
}

static inline memra_status launch(memra_engine *eng, work *w, int il, CUstream s)
{
    return memra_vrows_tables(eng, w->dsel, w->dselw, N, E, il, &w->mac, &w->sl, w->dptrs, w->dscl,
                              s);
}

/* The tables on the device (read with a pageable copy on `s`, which waits
 * for `s`) equal the host arm's for `w` and `planes`. */
static inline void expect_tables(work *w, const float (*planes)[E], CUstream s)
{
    uint64_t dp[3 * N], hp[3 * N];
    float ds[3 * N], hs[3 * N];
    assert_int_equal(mock_table.cuMemcpyDtoHAsync(dp, w->dptrs, sizeof dp, s), CUDA_SUCCESS);
    assert_int_equal(mock_table.cuMemcpyDtoHAsync(ds, w->dscl, sizeof ds, s), CUDA_SUCCESS);
    memra_vrows_macros mac = {{planes[0], planes[1], planes[2]}};
    assert_int_equal(memra_vrows_tables_host(w->sel, w->selw, N, E, &mac, &w->sl, hp, hs, NULL),
                     MEMRA_OK);
    assert_memory_equal(dp, hp, sizeof dp);
    assert_memory_equal(ds, hs, sizeof ds);
}

static inline void upload_inputs(work *w, CUstream s)
{
    assert_int_equal(mock_table.cuMemcpyHtoDAsync(w->dsel, w->sel, sizeof w->sel, s), CUDA_SUCCESS);
    assert_int_equal(mock_table.cuMemcpyHtoDAsync(w->dselw, w->selw, sizeof w->selw, s),
                     CUDA_SUCCESS);
}

#endif
