/* The gate on a real GPU: device tables pointer for pointer and scale bit for
 * bit against the host arm. Exits 77 (skipped) where no CUDA device exists. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu_fixture.h"

#include "device_case.h"
#include "engine/engine.h"
#include "vrows/gate_cases.h"
#include "route/route_cases.h"
#include "vrows/vrows_abi.h"

static memra_engine *eng;
static const memra_driver *drv;

#define CHECK_CASE(e, c)                                                                           \
    do {                                                                                           \
        char why_[512];                                                                            \
        if (device_case_check((e), (c), why_, sizeof why_))                                        \
            fail_msg("%s", why_);                                                                  \
    } while (0)

static int group_setup(void **state)
{
    (void)state;
    return gpu_engine_open(&eng, &drv);
}

static int group_teardown(void **state)
{
    (void)state;
    gpu_engine_close(eng, drv);
    return 0;
}

static void test_kernel_compiles_as_cubin_for_this_sm(void **state)
{
    (void)state;
    if (memra_engine_warmup(eng))
        fail_msg("warmup: %s", memra_last_error());
    memra_engine_info info;
    memra_engine_get_info(eng, &info);
    assert_int_equal(info.kernel_ready, 1);
    assert_int_equal(info.kernel_is_ptx, 0);
}

/* The real kernel's parameter layout is the block the launcher packs. */
static void test_param_layout_matches_abi(void **state)
{
    (void)state;
    size_t o0, sz0;
    if (!drv->cuFuncGetParamInfo ||
        drv->cuFuncGetParamInfo(NULL, 0, &o0, &sz0) == CUDA_ERROR_NOT_SUPPORTED)
        skip(); /* an older driver, or the fake one (no compiled layout to report) */
    CUfunction fns[1] = {atomic_load(&eng->kernel[MEMRA_KERNEL_VROWS])};
    static const size_t off[MEMRA_VROWS_NPARAMS] = {0,  8,  16, 24, 32,  40,  48,  56,  64, 72,
                                                    80, 88, 92, 96, 104, 112, 120, 128, 132};
    for (int k = 0; k < 1; k++) {
        CUfunction f = fns[k];
        assert_non_null(f);
        for (int i = 0; i < MEMRA_VROWS_NPARAMS; i++) {
            size_t o = 0, sz = 0;
            assert_int_equal(drv->cuFuncGetParamInfo(f, (size_t)i, &o, &sz), CUDA_SUCCESS);
            assert_int_equal(o, off[i]);
            assert_int_equal(sz, (i == 11 || i == 12 || i >= 17) ? 4 : 8);
        }
        size_t o, sz;
        assert_int_not_equal(drv->cuFuncGetParamInfo(f, MEMRA_VROWS_NPARAMS, &o, &sz),
                             CUDA_SUCCESS);
    }
}

/* The boot-time gate on this GPU, through the public call. */
static void test_self_check(void **state)
{
    (void)state;
    memra_self_check_report rep;
    if (memra_engine_self_check(eng, &rep))
        fail_msg("self check: %s", memra_last_error());
    assert_int_equal(rep.failed, 0);
    assert_int_equal(
        rep.cases, 6 + 2 * N_ROUTE_CASES); /* tables, then each routing case through both kernels */
    printf("self check: %u cases, %llu entries exact\n", rep.cases,
           (unsigned long long)rep.entries);
}

static void test_gate_cases(void **state)
{
    (void)state;
    char why[512];
    for (size_t i = 0; i < N_GATE_CASES; i++) {
        if (gate_case_check(eng, i, why, sizeof why))
            fail_msg("gate case %s: %s", gate_cases[i].name, why);
        printf("gate case %-10s: exact\n", gate_cases[i].name);
    }
}

/* Random selections and special-float weights and planes at many sizes up
 * to 2^20 (block multiples and not), strides up to 2^40 with bases near the
 * top of the address space, some out-of-range ids. */
static void test_random_sizes_special_floats(void **state)
{
    (void)state;
    static const uint32_t sizes[] = {1,
                                     2,
                                     7,
                                     31,
                                     255,
                                     256,
                                     257,
                                     1000,
                                     4097,
                                     65535,
                                     65536,
                                     65537,
                                     300001,
                                     (1u << 20) - 3,
                                     1u << 20,
                                     (1u << 21) - 1,
                                     (1u << 21) + 3};
    uint64_t s = 0xC0FFEE;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const uint32_t n = sizes[si];
        const uint32_t n_expert = 1 + (uint32_t)(rng_next(&s) % 512);
        random_case r;
        assert_int_equal(
            random_case_make(&r, &s, n, n_expert, si % 3 == 2, !(si & 1), 32, 100 + (int)si), 0);
        CHECK_CASE(eng, &r.c);
        random_case_free(&r);
    }
}

/* Out-of-range ids: expert 0's pointers, +0 scales, and the fault word
 * counts them and keeps the first bad pair. */
static void test_out_of_range_and_fault_word(void **state)
{
    (void)state;
    enum { N = 1000, E = 16 };
    int32_t sel[N];
    float selw[N];
    for (int p = 0; p < N; p++)
        sel[p] = p % E, selw[p] = 1.0f;
    sel[417] = E, sel[733] = -1, sel[900] = INT32_MAX, sel[901] = INT32_MIN;
    selw[500] = NAN;
    memra_vrows_slabs sl = {{1ull << 40, 2ull << 40, 3ull << 40},
                            {5ull << 20, 5ull << 20, 9ull << 20}};
    dcase c = {N, E, sel, selw, NULL, &sl, 0, NULL, 0};
    CHECK_CASE(eng, &c); /* the faults it counted (into a word of its own) against the host arm */
    /* The public call counts into the engine's word. */
    memra_devptr dsel, dselw, dptrs, dscl;
    assert_int_equal(memra_alloc(eng, N * 4, &dsel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, N * 4, &dselw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * N * 8, &dptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * N * 4, &dscl), MEMRA_OK);
    assert_int_equal(memra_upload_i32_async(eng, dsel, sel, N, NULL), MEMRA_OK);
    assert_int_equal(memra_upload_f32_async(eng, dselw, selw, N, NULL), MEMRA_OK);
    memra_faults f;
    assert_int_equal(memra_engine_faults(eng, NULL, &f, 1), MEMRA_OK); /* start clear */
    assert_int_equal(memra_vrows_tables(eng, dsel, dselw, N, E, 0, NULL, &sl, dptrs, dscl, NULL),
                     MEMRA_OK);
    assert_int_equal(memra_engine_faults(eng, NULL, &f, 1), MEMRA_OK); /* read and clear */
    assert_int_equal(f.bad_expert, 4);
    assert_int_equal(f.nonfinite, 1);
    assert_int_equal(f.first_pair, 417);
    assert_int_equal(memra_engine_faults(eng, NULL, &f, 0), MEMRA_OK);
    assert_int_equal(f.bad_expert, 0);
    assert_int_equal(f.first_pair, MEMRA_NO_FAULT);
    const memra_devptr bufs[] = {dsel, dselw, dptrs, dscl};
    for (int i = 0; i < 4; i++)
        assert_int_equal(memra_free(eng, bufs[i]), MEMRA_OK);
}

/* Graph capture: no alloc/copy/sync inside; replays see new sel/selw each
 * time; the fault word accumulates across replays. */
static void test_graph_capture_and_replay(void **state)
{
    (void)state;
    if (!drv->cuStreamBeginCapture)
        skip();
    enum { N = 4099, E = 256 };
    float *pl = malloc(3 * E * 4);
    for (int e = 0; e < 3 * E; e++)
        pl[e] = 0.75f + (float)e / 1024.0f;
    memra_vrows_macros mac = {{pl, pl + E, pl + 2 * E}};
    const gate_case *g = &gate_cases[1];
    CUstream s;
    assert_int_equal(drv->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    memra_devptr dsel, dselw, dptrs, dscl;
    assert_int_equal(memra_alloc(eng, N * 4, &dsel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, N * 4, &dselw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * N * 8, &dptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * N * 4, &dscl), MEMRA_OK);
    assert_int_equal(memra_vrows_prepare_layer(eng, 7, E, &mac, s), MEMRA_OK);
    assert_int_equal(memra_sync(eng, s), MEMRA_OK);
    memra_faults f;
    assert_int_equal(memra_engine_faults(eng, s, &f, 1), MEMRA_OK);

    assert_int_equal(drv->cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    /* A layer that was never prepared: refused, capture left intact. */
    memra_status miss =
        memra_vrows_tables(eng, dsel, dselw, N, E, 8, &mac, &g->slabs, dptrs, dscl, s);
    memra_status hit =
        memra_vrows_tables(eng, dsel, dselw, N, E, 7, &mac, &g->slabs, dptrs, dscl, s);
    CUgraph graph = NULL;
    assert_int_equal(drv->cuStreamEndCapture(s, &graph), CUDA_SUCCESS);
    assert_int_equal(miss, MEMRA_ERR_CAPTURE);
    assert_int_equal(hit, MEMRA_OK);
    CUgraphExec exec;
    assert_int_equal(drv->cuGraphInstantiateWithFlags(&exec, graph, 0), CUDA_SUCCESS);

    uint64_t rs = 99;
    int32_t *sel = malloc(N * 4);
    float *selw = malloc(N * 4);
    uint64_t *dp = malloc(3 * N * 8), *hp = malloc(3 * N * 8);
    float *ds = malloc(3 * N * 4), *hs = malloc(3 * N * 4);
    uint32_t bad_total = 0;
    for (int rep = 0; rep < 20; rep++) {
        for (int p = 0; p < N; p++) {
            sel[p] = (int32_t)(rng_next(&rs) % E);
            selw[p] = rng_special_float(&rs);
        }
        sel[rep * 7] = E + rep; /* one out-of-range pair per replay */
        assert_int_equal(memra_upload_i32_async(eng, dsel, sel, N, s), MEMRA_OK);
        assert_int_equal(memra_upload_f32_async(eng, dselw, selw, N, s), MEMRA_OK);
        assert_int_equal(drv->cuGraphLaunch(exec, s), CUDA_SUCCESS);
        assert_int_equal(memra_download_u64_async(eng, dp, dptrs, 3 * N, s), MEMRA_OK);
        assert_int_equal(memra_download_f32_async(eng, ds, dscl, 3 * N, s), MEMRA_OK);
        assert_int_equal(memra_sync(eng, s), MEMRA_OK);
        memra_faults hf;
        memra_vrows_tables_host(sel, selw, N, E, &mac, &g->slabs, hp, hs, &hf);
        assert_memory_equal(dp, hp, 3 * N * 8);
        assert_memory_equal(ds, hs, 3 * N * 4);
        bad_total += hf.bad_expert;
    }
    assert_int_equal(memra_engine_faults(eng, s, &f, 1), MEMRA_OK);
    assert_int_equal(f.bad_expert, bad_total);
    assert_int_equal(f.first_pair, 0);

    /* Changed planes under the same layer: prepare re-uploads into the same
     * buffer and the existing graph sees the new contents. */
    for (int e = 0; e < 3 * E; e++)
        pl[e] = -0.5f - (float)e / 512.0f;
    assert_int_equal(memra_vrows_prepare_layer(eng, 7, E, &mac, s), MEMRA_OK);
    for (int p = 0; p < N; p++)
        sel[p] = p % E, selw[p] = 0.25f;
    assert_int_equal(memra_upload_i32_async(eng, dsel, sel, N, s), MEMRA_OK);
    assert_int_equal(memra_upload_f32_async(eng, dselw, selw, N, s), MEMRA_OK);
    assert_int_equal(drv->cuGraphLaunch(exec, s), CUDA_SUCCESS);
    assert_int_equal(memra_download_f32_async(eng, ds, dscl, 3 * N, s), MEMRA_OK);
    assert_int_equal(memra_sync(eng, s), MEMRA_OK);
    memra_vrows_tables_host(sel, selw, N, E, &mac, &g->slabs, hp, hs, NULL);
    assert_memory_equal(ds, hs, 3 * N * 4);

    drv->cuGraphExecDestroy(exec);
    drv->cuGraphDestroy(graph);
    memra_free(eng, dsel), memra_free(eng, dselw), memra_free(eng, dptrs), memra_free(eng, dscl);
    drv->cuStreamDestroy(s);
    free(sel), free(selw), free(dp), free(hp), free(ds), free(hs), free(pl);
}

typedef struct worker {
    int id;
    memra_engine *eng;
    int failed;
    char why[512];
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    CUstream s;
    CUcontext c;
    if (memra_driver_get()->cuCtxPushCurrent(w->eng->cx.ctx) != CUDA_SUCCESS ||
        memra_driver_get()->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        w->failed = 1;
        snprintf(w->why, sizeof w->why, "cuStreamCreate");
        return NULL;
    }
    uint64_t rs = 1000 + (uint64_t)w->id;
    enum { E = 128 };
    float pl[3 * E];
    for (int e = 0; e < 3 * E; e++)
        pl[e] = 1.0f + (float)(e % 7) / 8.0f; /* same contents in every thread */
    memra_vrows_macros mac = {{pl, pl + E, pl + 2 * E}};
    for (int it = 0; it < 25 && !w->failed; it++) {
        uint32_t n = 1 + (uint32_t)(rng_next(&rs) % 20000);
        int32_t *sel = malloc(n * 4);
        float *selw = malloc(n * 4);
        for (uint32_t p = 0; p < n; p++) {
            sel[p] = (int32_t)(rng_next(&rs) % E);
            selw[p] = rng_special_float(&rs);
        }
        memra_vrows_slabs sl = {{(uint64_t)w->id << 44, 1ull << 45, 1ull << 46},
                                {24ull << 20, 24ull << 20, 48ull << 20}};
        /* Layer 40 is shared (concurrent hits), 50+id is this thread's. */
        dcase c = {n, E, sel, selw, &mac, &sl, (it & 1) ? 40 : 50 + w->id, s, 0};
        w->failed = device_case_check(w->eng, &c, w->why, sizeof w->why);
        free(sel), free(selw);
    }
    memra_driver_get()->cuStreamDestroy(s);
    memra_driver_get()->cuCtxPopCurrent(&c);
    return NULL;
}

static void run_workers(memra_engine *const *engines, int n_engines, int n_threads)
{
    pthread_t t[16];
    worker w[16];
    for (int i = 0; i < n_threads; i++) {
        w[i] = (worker){.id = i, .eng = engines[i % n_engines]};
        assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < n_threads; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < n_threads; i++)
        if (w[i].failed)
            fail_msg("thread %d: %s", i, w[i].why);
}

static void test_eight_threads_own_streams(void **state)
{
    (void)state;
    run_workers(&eng, 1, 8);
}

static void test_two_engines_one_device(void **state)
{
    (void)state;
    memra_engine *second;
    assert_int_equal(memra_engine_create(0, &second), MEMRA_OK);
    memra_engine *both[2] = {eng, second};
    run_workers(both, 2, 4);
    /* Faults on one engine do not show on the other. */
    enum { N = 4 };
    const int32_t sel[N] = {0, 9, 1, 2};
    const float selw[N] = {1, 1, 1, 1};
    memra_vrows_slabs sl = {{0, 0, 0}, {64, 64, 64}};
    memra_faults f;
    assert_int_equal(memra_engine_faults(eng, NULL, &f, 1), MEMRA_OK);
    dcase c = {N, 4, sel, selw, NULL, &sl, 0, NULL, 0};
    CHECK_CASE(second, &c);
    /* A checked case counts into a fault word of its own (the self-check's
     * rule), so the engine's stays as the serving launches left it. */
    assert_int_equal(memra_engine_faults(second, NULL, &f, 1), MEMRA_OK);
    assert_int_equal(f.bad_expert, 0);
    memra_devptr d;
    assert_int_equal(memra_alloc(second, 4096, &d), MEMRA_OK);
    assert_int_equal(memra_upload_i32(second, d, sel, N), MEMRA_OK);
    assert_int_equal(memra_upload_f32(second, d + 64, selw, N), MEMRA_OK);
    assert_int_equal(
        memra_vrows_tables(second, d, d + 64, N, 4, 0, NULL, &sl, d + 1024, d + 2048, NULL),
        MEMRA_OK);
    assert_int_equal(memra_engine_faults(second, NULL, &f, 1), MEMRA_OK);
    assert_int_equal(f.bad_expert, 1);
    assert_int_equal(f.first_pair, 1);
    assert_int_equal(memra_engine_faults(eng, NULL, &f, 1), MEMRA_OK);
    assert_int_equal(f.bad_expert, 0);
    memra_free(second, d);
    memra_engine_destroy(second);
}

int main(void)
{
    if (gpu_absent())
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_compiles_as_cubin_for_this_sm),
        cmocka_unit_test(test_param_layout_matches_abi),
        cmocka_unit_test(test_gate_cases),
        cmocka_unit_test(test_self_check),
        cmocka_unit_test(test_random_sizes_special_floats),
        cmocka_unit_test(test_out_of_range_and_fault_word),
        cmocka_unit_test(test_graph_capture_and_replay),
        cmocka_unit_test(test_eight_threads_own_streams),
        cmocka_unit_test(test_two_engines_one_device),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
