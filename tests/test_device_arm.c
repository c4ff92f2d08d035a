/* The device arm's host code against the mock driver: what reaches
 * cuLaunchKernel is executed on the host and compared with the host arm;
 * every error path; capture; the macro mirror cache. */
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

#include "device_case.h"
#include "vrows/gate_cases.h"
#include "mock_fixture.h"
#include "vrows/vrows_abi.h"

/* device_case_check plus what only the mock can see: one launch, its grid. */
static void run_device_case(memra_engine *eng, const dcase *c)
{
    char why[512];
    const int launches = mock.launches;
    if (device_case_check(eng, c, why, sizeof why))
        fail_msg("%s", why);
    assert_int_equal(mock.launches, launches + 1);
    /* The grid covers every pair, one per thread. */
    assert_int_equal(mock.last.grid[0], (c->n + 255) / 256);
    assert_int_equal(mock.last.block[0], MEMRA_VROWS_BLOCK);
}

static void test_engine_info_and_lifecycle(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    memra_engine_info info;
    assert_int_equal(memra_engine_get_info(eng, &info), MEMRA_OK);
    assert_string_equal(info.name, "Mock GPU 0");
    assert_int_equal(info.sm, 90);
    assert_int_equal(info.driver_version, 13000);
    assert_int_equal(info.nvrtc_version, 13000);
    assert_int_equal(info.kernel_ready, 0); /* compiled at first use, not before */
    assert_int_equal(mock.ctx_refs, 1);     /* the primary context, retained */
    assert_int_equal(mock.calls[MOCK_nvrtcCompileProgram], 0);
    memra_engine_destroy(eng);
    memra_engine_destroy(NULL);
}

static void test_jit_options_cubin_for_exact_sm(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    assert_int_equal(memra_engine_warmup(eng), MEMRA_OK);
    assert_int_equal(memra_engine_warmup(eng), MEMRA_OK); /* once */
    assert_int_equal(mock.calls[MOCK_nvrtcCompileProgram], 1);
    assert_non_null(strstr(mock.options, "--gpu-architecture=sm_90 "));
    assert_non_null(strstr(mock.options, "--fmad=false"));
    assert_non_null(strstr(mock.options, "--ftz=false"));
    assert_non_null(strstr(mock.options, "--prec-div=true"));
    assert_non_null(strstr(mock.options, "--prec-sqrt=true"));
    assert_null(strstr(mock.options, "fast-math"));
    memra_engine_info info;
    memra_engine_get_info(eng, &info);
    assert_int_equal(info.kernel_ready, 1);
    assert_int_equal(info.kernel_is_ptx, 0);
    memra_engine_destroy(eng);
}

static void test_jit_ptx_for_unknown_sm(void **state)
{
    (void)state;
    mock.sm_major = 13;
    mock.sm_minor = 0;
    memra_engine *eng = mock_engine();
    assert_int_equal(memra_engine_warmup(eng), MEMRA_OK);
    assert_non_null(strstr(mock.options, "--gpu-architecture=compute_120 "));
    memra_engine_info info;
    memra_engine_get_info(eng, &info);
    assert_int_equal(info.kernel_is_ptx, 1);
    memra_engine_destroy(eng);
}

static void test_gate_cases_through_launch(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    char why[512];
    for (size_t i = 0; i < N_GATE_CASES; i++) {
        const int launches = mock.launches;
        if (gate_case_check(eng, i, why, sizeof why))
            fail_msg("gate case %s: %s", gate_cases[i].name, why);
        assert_int_equal(mock.launches, launches + 1);
        assert_int_equal(mock.last.grid[0], 1); /* 8 pairs: one block */
    }
    memra_engine_destroy(eng);
}

static void test_random_launches_match_host_arm(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    uint64_t s = 0xfeed;
    static const uint32_t sizes[] = {1, 3, 255, 256, 257, 511, 513, 4099, 70001};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const uint32_t n = sizes[si], n_expert = 1 + (uint32_t)(rng_next(&s) % 300);
        random_case r;
        assert_int_equal(random_case_make(&r, &s, n, n_expert, si & 1, si % 3 != 0, 33, (int)si),
                         0);
        run_device_case(eng, &r.c);
        random_case_free(&r);
    }
    memra_engine_destroy(eng);
}

/* The parameter block carries full 64-bit strides and bases: decode it
 * independently at the offsets of the kernel's signature. */
static void test_launch_argument_widths(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    memra_devptr b;
    assert_int_equal(memra_alloc(eng, 4096, &b), MEMRA_OK);
    const int32_t sel[1] = {0};
    const float selw[1] = {1};
    assert_int_equal(memra_upload_i32(eng, b, sel, 1), MEMRA_OK);
    assert_int_equal(memra_upload_f32(eng, b + 4, selw, 1), MEMRA_OK);
    memra_vrows_slabs sl = {{0x1122334455667788ull, 0x0000000100000000ull, 0xA0ull << 56},
                            {0x0000000300000001ull, 1ull << 40, 0xFFFFFFFFull + 2}};
    assert_int_equal(memra_vrows_tables(eng, b, b + 4, 1, 3, 0, NULL, &sl, b + 64, b + 128, NULL),
                     MEMRA_OK);
    const unsigned char *a = mock.last.args;
    uint64_t v;
    uint32_t w;
    memcpy(&v, a + 0, 8), assert_true(v == b);
    memcpy(&v, a + 8, 8), assert_true(v == b + 4);
    memcpy(&v, a + 16, 8), assert_true(v == 0); /* no macro planes */
    memcpy(&v, a + 40, 8), assert_true(v == sl.base[0]);
    memcpy(&v, a + 48, 8), assert_true(v == sl.base[1]);
    memcpy(&v, a + 56, 8), assert_true(v == sl.base[2]);
    memcpy(&v, a + 64, 8), assert_true(v == sl.stride[0]);
    memcpy(&v, a + 72, 8), assert_true(v == sl.stride[1]);
    memcpy(&v, a + 80, 8), assert_true(v == sl.stride[2]);
    memcpy(&w, a + 88, 4), assert_int_equal(w, 1);
    memcpy(&w, a + 92, 4), assert_int_equal(w, 3);
    memcpy(&v, a + 96, 8), assert_true(v == b + 64);
    memcpy(&v, a + 104, 8), assert_true(v == b + 128);
    memcpy(&v, a + 112, 8), assert_true(v != 0);
    assert_int_equal(memra_free(eng, b), MEMRA_OK);
    memra_engine_destroy(eng);
}

static void test_macro_cache_hits_and_content_check(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    enum { N = 16, E = 8 };
    float pl[3][E];
    for (int k = 0; k < 3; k++)
        for (int e = 0; e < E; e++)
            pl[k][e] = (float)(k * 10 + e) + 0.25f;
    memra_vrows_macros mac = {{pl[0], pl[1], pl[2]}};
    int32_t sel[N];
    float selw[N];
    for (int p = 0; p < N; p++)
        sel[p] = p % E, selw[p] = 0.5f + (float)p;
    memra_vrows_slabs sl = {{1 << 20, 2 << 20, 3 << 20}, {4096, 4096, 8192}};
    dcase c = {N, E, sel, selw, &mac, &sl, 5, NULL, 0};
    run_device_case(eng, &c);
    uint64_t mg_first;
    memcpy(&mg_first, mock.last.args + 16, 8);

    /* A hit: no upload, no allocation, no sync. */
    memra_devptr d;
    assert_int_equal(memra_alloc(eng, 4096, &d), MEMRA_OK);
    int h2d = mock.calls[MOCK_cuMemcpyHtoDAsync], allocs = mock.calls[MOCK_cuMemAlloc],
        syncs = mock.calls[MOCK_cuStreamSynchronize];
    for (int i = 0; i < 5; i++)
        assert_int_equal(
            memra_vrows_tables(eng, d, d + 64, N, E, 5, &mac, &sl, d + 1024, d + 2048, NULL),
            MEMRA_OK);
    assert_int_equal(mock.calls[MOCK_cuMemcpyHtoDAsync], h2d);
    assert_int_equal(mock.calls[MOCK_cuMemAlloc], allocs);
    assert_int_equal(mock.calls[MOCK_cuStreamSynchronize], syncs);
    memra_free(eng, d);

    /* Same layer, changed contents: re-uploaded into the same buffer. */
    pl[2][3] = -7.0f;
    run_device_case(eng, &c);
    uint64_t mg_second;
    memcpy(&mg_second, mock.last.args + 16, 8);
    assert_true(mg_first == mg_second);

    /* Another layer gets its own mirror. */
    c.il = 6;
    run_device_case(eng, &c);
    memcpy(&mg_second, mock.last.args + 16, 8);
    assert_true(mg_first != mg_second);
    memra_engine_destroy(eng);
}

static void test_capture_and_replay(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    enum { N = 300, E = 64 };
    float pl[3][E];
    for (int k = 0; k < 3; k++)
        for (int e = 0; e < E; e++)
            pl[k][e] = 1.0f / (float)(e + k + 1);
    memra_vrows_macros mac = {{pl[0], pl[1], pl[2]}};
    memra_vrows_slabs sl = GATE_SERVING_SLABS;
    CUstream s;
    assert_int_equal(mock_table.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    memra_devptr dsel, dselw, dptrs, dscl;
    assert_int_equal(memra_alloc(eng, N * 4, &dsel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, N * 4, &dselw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * N * 8, &dptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * N * 4, &dscl), MEMRA_OK);

    /* Not prepared: the kernel is not compiled yet, so capture is refused. */
    CUgraph g;
    assert_int_equal(mock_table.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_SUCCESS);
    assert_int_equal(memra_vrows_tables(eng, dsel, dselw, N, E, 2, &mac, &sl, dptrs, dscl, s),
                     MEMRA_ERR_CAPTURE);
    assert_non_null(strstr(memra_last_error(), "memra_vrows_prepare_layer"));
    assert_int_equal(memra_vrows_prepare_layer(eng, 2, E, &mac, s), MEMRA_ERR_CAPTURE);
    assert_int_equal(mock_table.cuStreamEndCapture(s, &g), CUDA_SUCCESS); /* left intact */
    mock_table.cuGraphDestroy(g);
    assert_int_equal(mock.capture_violations, 0);

    assert_int_equal(memra_vrows_prepare_layer(eng, 2, E, &mac, s), MEMRA_OK);
    assert_int_equal(mock_table.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_SUCCESS);
    /* Layer 3 was never prepared: a clear error, nothing captured. */
    assert_int_equal(memra_vrows_tables(eng, dsel, dselw, N, E, 3, &mac, &sl, dptrs, dscl, s),
                     MEMRA_ERR_CAPTURE);
    assert_int_equal(memra_vrows_tables(eng, dsel, dselw, N, E, 2, &mac, &sl, dptrs, dscl, s),
                     MEMRA_OK);
    assert_int_equal(mock_table.cuStreamEndCapture(s, &g), CUDA_SUCCESS);
    assert_int_equal(mock.capture_violations, 0);
    CUgraphExec x;
    assert_int_equal(mock_table.cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);

    /* Replays see each step's new sel/selw. */
    uint64_t rs = 42;
    for (int rep = 0; rep < 5; rep++) {
        int32_t sel[N];
        float selw[N];
        for (int p = 0; p < N; p++) {
            sel[p] = (int32_t)(rng_next(&rs) % E);
            selw[p] = rng_special_float(&rs);
        }
        assert_int_equal(memra_upload_i32_async(eng, dsel, sel, N, s), MEMRA_OK);
        assert_int_equal(memra_upload_f32_async(eng, dselw, selw, N, s), MEMRA_OK);
        assert_int_equal(mock_table.cuGraphLaunch(x, s), CUDA_SUCCESS);
        static uint64_t dp[3 * N], hp[3 * N];
        static float ds[3 * N], hs[3 * N];
        assert_int_equal(memra_download_u64_async(eng, dp, dptrs, 3 * N, s), MEMRA_OK);
        assert_int_equal(memra_download_f32_async(eng, ds, dscl, 3 * N, s), MEMRA_OK);
        memra_vrows_tables_host(sel, selw, N, E, &mac, &sl, hp, hs, NULL);
        assert_memory_equal(dp, hp, sizeof dp);
        assert_memory_equal(ds, hs, sizeof ds);
    }
    mock_table.cuGraphExecDestroy(x);
    mock_table.cuGraphDestroy(g);
    memra_free(eng, dsel), memra_free(eng, dselw), memra_free(eng, dptrs), memra_free(eng, dscl);
    mock_table.cuStreamDestroy(s);
    memra_engine_destroy(eng);
}

static void test_no_driver(void **state)
{
    (void)state;
    mock_table.cuda_status = MEMRA_ERR_NO_DRIVER;
    snprintf(mock_table.cuda_error, sizeof mock_table.cuda_error,
             "libcuda.so.1 could not be loaded");
    memra_engine *eng = (memra_engine *)1;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_ERR_NO_DRIVER);
    assert_null(eng);
    assert_non_null(strstr(memra_last_error(), "libcuda.so.1"));
    /* named as the call made (it said memra_device_count) */
    assert_non_null(strstr(memra_last_error(), "memra_engine_create"));
    int n = 5;
    assert_int_equal(memra_device_count(&n), MEMRA_ERR_NO_DRIVER);
    assert_int_equal(n, 0);
}

static void test_no_device(void **state)
{
    (void)state;
    memra_engine *eng = (memra_engine *)&state; /* a stale value: set to NULL, as documented */
    assert_int_equal(memra_engine_create(1, &eng), MEMRA_ERR_NO_DEVICE);
    assert_non_null(strstr(memra_last_error(), "ordinal 1"));
    assert_null(eng);
    memra_engine_destroy(eng);
    assert_int_equal(memra_engine_create(-1, &eng), MEMRA_ERR_NO_DEVICE);
    mock.n_devices = 0;
    int n = 5;
    assert_int_equal(memra_device_count(&n), MEMRA_OK);
    assert_int_equal(n, 0);
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_ERR_NO_DEVICE);
}

static void test_nvrtc_failure_carries_log(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    mock.compile_log = "vrows.cu(12): error: identifier \"oops\" is undefined";
    assert_int_equal(memra_engine_warmup(eng), MEMRA_ERR_NVRTC);
    assert_non_null(strstr(memra_last_error(), "identifier \"oops\" is undefined"));
    assert_non_null(strstr(memra_last_error(), "sm_90"));
    /* A later call tries again and can succeed. */
    mock.compile_log = NULL;
    assert_int_equal(memra_engine_warmup(eng), MEMRA_OK);
    memra_engine_destroy(eng);
}

static void test_nvrtc_absent(void **state)
{
    (void)state;
    mock_nv.status = MEMRA_ERR_NVRTC;
    snprintf(mock_nv.why, sizeof mock_nv.why, "libnvrtc.so.13: cannot open shared object file");
    memra_engine *eng = mock_engine();
    assert_int_equal(memra_engine_warmup(eng), MEMRA_ERR_NVRTC);
    assert_non_null(strstr(memra_last_error(), "mock-nvrtc"));
    assert_non_null(strstr(memra_last_error(), "cannot open shared object file"));
    memra_engine_destroy(eng);
}

/* Every load refused: the error names the call and the driver's word. */
static void test_module_load_failure(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    mock.refuse_loads = CUDA_ERROR_INVALID_IMAGE;
    assert_int_equal(memra_engine_warmup(eng), MEMRA_ERR_MODULE_LOAD);
    assert_non_null(strstr(memra_last_error(), "cuModuleLoadData"));
    assert_non_null(strstr(memra_last_error(), "CUDA_ERROR_INVALID_IMAGE"));
    mock.refuse_loads = 0;
    memra_engine_destroy(eng);
}

/* A refused CUBIN falls through to the next image: PTX from the same NVRTC. */
static void test_refused_cubin_falls_back_to_ptx(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    mock.fail_call = MOCK_cuModuleLoadData, mock.fail_nth = 1;
    mock.fail_result = CUDA_ERROR_NO_BINARY_FOR_GPU;
    assert_int_equal(memra_engine_warmup(eng), MEMRA_OK);
    memra_kernel_origin o;
    assert_int_equal(memra_engine_kernel_origin(eng, &o), MEMRA_OK);
    assert_int_equal(o.ready, 1);
    assert_int_equal(o.is_ptx, 1);
    assert_int_equal(o.arch, 90);
    assert_int_equal(o.nvrtc_version, 13000);
    assert_string_equal(o.nvrtc_path, "mock-nvrtc");
    memra_engine_destroy(eng);
}

/* An upload that fails must not leave a shadow that matches: the next call
 * uploads again instead of launching over the old device planes. */
static void test_failed_upload_leaves_mirror_invalid(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    enum { N = 8, E = 4 };
    float pl[3][E];
    for (int k = 0; k < 3; k++)
        for (int e = 0; e < E; e++)
            pl[k][e] = 2.0f;
    memra_vrows_macros mac = {{pl[0], pl[1], pl[2]}};
    const int32_t sel[N] = {0, 1, 2, 3, 0, 1, 2, 3};
    const float selw[N] = {1, 1, 1, 1, 1, 1, 1, 1};
    memra_vrows_slabs sl = {{1 << 20, 2 << 20, 3 << 20}, {4096, 4096, 8192}};
    dcase c = {N, E, sel, selw, &mac, &sl, 3, NULL, 0};
    run_device_case(eng, &c);
    /* New contents; their upload fails. */
    for (int k = 0; k < 3; k++)
        for (int e = 0; e < E; e++)
            pl[k][e] = 3.0f;
    memra_devptr d;
    assert_int_equal(memra_alloc(eng, 4096, &d), MEMRA_OK);
    mock.fail_call = MOCK_cuMemcpyHtoDAsync, mock.fail_nth = mock.calls[MOCK_cuMemcpyHtoDAsync] + 1;
    mock.fail_result = CUDA_ERROR_LAUNCH_FAILED;
    assert_int_equal(memra_vrows_prepare_layer(eng, 3, E, &mac, NULL), MEMRA_ERR_DRIVER);
    assert_non_null(strstr(memra_last_error(), "macro planes"));
    mock.fail_call = -1;
    /* The retry uploads and the device scales are 3, not the stale 2. */
    const int uploads = mock.calls[MOCK_cuMemcpyHtoDAsync];
    assert_int_equal(memra_vrows_prepare_layer(eng, 3, E, &mac, NULL), MEMRA_OK);
    assert_int_equal(mock.calls[MOCK_cuMemcpyHtoDAsync], uploads + 1);
    run_device_case(eng, &c);
    memra_free(eng, d);
    memra_engine_destroy(eng);
}

static void test_out_of_memory(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    assert_int_equal(memra_engine_warmup(eng), MEMRA_OK);
    const float pl[4] = {1, 2, 3, 4};
    memra_vrows_macros mac = {{pl, pl, pl}};
    mock.fail_call = MOCK_cuMemAlloc, mock.fail_nth = mock.calls[MOCK_cuMemAlloc] + 1;
    mock.fail_result = CUDA_ERROR_OUT_OF_MEMORY;
    assert_int_equal(memra_vrows_prepare_layer(eng, 0, 4, &mac, NULL), MEMRA_ERR_OUT_OF_MEMORY);
    assert_non_null(strstr(memra_last_error(), "CUDA_ERROR_OUT_OF_MEMORY"));
    memra_devptr p;
    mock.fail_nth = mock.calls[MOCK_cuMemAlloc] + 1;
    assert_int_equal(memra_alloc(eng, 1 << 20, &p), MEMRA_ERR_OUT_OF_MEMORY);
    /* The engine is still usable afterwards. */
    assert_int_equal(memra_vrows_prepare_layer(eng, 0, 4, &mac, NULL), MEMRA_OK);
    memra_engine_destroy(eng);
}

/* Bad input on the device arm: refused before any driver call. */
static void test_device_bad_input_touches_nothing(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    memra_devptr d;
    assert_int_equal(memra_alloc(eng, 4096, &d), MEMRA_OK);
    memra_vrows_slabs sl = {{0, 0, 0}, {1, 1, 1}}, wrap = {{~0ull, 0, 0}, {1, 1, 1}};
    int calls_before[MOCK_N_CALLS];
    memcpy(calls_before, mock.calls, sizeof calls_before);
    struct {
        memra_status want;
        memra_status got;
    } r[] = {
        {MEMRA_ERR_NULL_ARG, memra_vrows_tables(NULL, d, d, 1, 1, 0, NULL, &sl, d, d, NULL)},
        {MEMRA_ERR_NULL_ARG, memra_vrows_tables(eng, 0, d, 1, 1, 0, NULL, &sl, d, d, NULL)},
        {MEMRA_ERR_NULL_ARG, memra_vrows_tables(eng, d, d, 1, 1, 0, NULL, NULL, d, d, NULL)},
        {MEMRA_ERR_INVALID_ARG, memra_vrows_tables(eng, d, d, 0, 1, 0, NULL, &sl, d, d, NULL)},
        {MEMRA_ERR_INVALID_ARG, memra_vrows_tables(eng, d, d, 1, 0, 0, NULL, &sl, d, d, NULL)},
        {MEMRA_ERR_MISALIGNED, memra_vrows_tables(eng, d, d, 1, 1, 0, NULL, &sl, d + 4, d, NULL)},
        {MEMRA_ERR_MISALIGNED, memra_vrows_tables(eng, d + 2, d, 1, 1, 0, NULL, &sl, d, d, NULL)},
        {MEMRA_ERR_SLAB_OVERFLOW, memra_vrows_tables(eng, d, d, 1, 2, 0, NULL, &wrap, d, d, NULL)},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if (r[i].got != r[i].want)
            fail_msg("case %zu: got %s want %s", i, memra_status_string(r[i].got),
                     memra_status_string(r[i].want));
    const float pl[1] = {1};
    memra_vrows_macros mac = {{pl, pl, pl}};
    assert_int_equal(memra_vrows_tables(eng, d, d, 1, 1, -1, &mac, &sl, d, d, NULL),
                     MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(memra_last_error(), "il = -1"));
    assert_memory_equal(calls_before, mock.calls, sizeof calls_before);
    memra_free(eng, d);
    memra_engine_destroy(eng);
}

/* The serving process's context is already the engine's: no push/pop. */
static void test_no_context_push_when_current(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    assert_int_equal(memra_engine_warmup(eng), MEMRA_OK);
    CUcontext ctx;
    mock_table.cuDevicePrimaryCtxRetain(&ctx, 0);
    mock_table.cuCtxPushCurrent(ctx);
    int pushes = mock.calls[MOCK_cuCtxPushCurrent];
    memra_devptr d;
    assert_int_equal(memra_alloc(eng, 4096, &d), MEMRA_OK);
    memra_vrows_slabs sl = {{0, 0, 0}, {1, 1, 1}};
    const int32_t z = 0;
    assert_int_equal(memra_upload_i32(eng, d, &z, 1), MEMRA_OK);
    assert_int_equal(memra_vrows_tables(eng, d, d, 1, 1, 0, NULL, &sl, d + 64, d + 128, NULL),
                     MEMRA_OK);
    assert_int_equal(mock.calls[MOCK_cuCtxPushCurrent], pushes);
    memra_free(eng, d);
    mock_table.cuCtxPopCurrent(&ctx);
    mock_table.cuDevicePrimaryCtxRelease(0);
    memra_engine_destroy(eng);
}

/* Every driver and NVRTC call failing in turn, at each of its first few
 * calls, across engine creation, JIT, mirror upload, launch, faults and
 * destroy: a clear status every time, nothing leaked, the context stack
 * balanced. */
static void test_fault_injection_sweep(void **state)
{
    (void)state;
    int injected = 0;
    for (int call = 0; call < MOCK_N_CALLS; call++) {
        for (int nth = 1; nth <= 4; nth++) {
            mock_install();
            mock.fail_call = call, mock.fail_nth = nth;
            mock.fail_result =
                call >= MOCK_nvrtcVersion ? NVRTC_ERROR_INTERNAL_ERROR : CUDA_ERROR_UNKNOWN;
            memra_engine *eng = NULL;
            memra_status st = memra_engine_create(0, &eng);
            if (st == MEMRA_OK) {
                const float pl[2] = {1, 2};
                memra_vrows_macros mac = {{pl, pl, pl}};
                memra_vrows_slabs sl = {{0, 0, 0}, {8, 8, 8}};
                memra_devptr d = 0;
                if (memra_alloc(eng, 4096, &d) == MEMRA_OK) {
                    const int32_t sel[2] = {0, 1};
                    memra_upload_i32(eng, d, sel, 2);
                    for (int i = 0; i < 2; i++)
                        memra_vrows_tables(eng, d, d, 2, 2, 1, &mac, &sl, d + 64, d + 128, NULL);
                    memra_faults f;
                    memra_engine_faults(eng, NULL, &f, 1);
                    memra_free(eng, d);
                }
                /* Whatever failed, the engine still works once the driver does. */
                mock.fail_call = -1;
                char why[512];
                if (gate_case_check(eng, 1, why, sizeof why))
                    fail_msg("call #%d failing at its call %d left the engine unusable: %s", call,
                             nth, why);
                memra_engine_destroy(eng);
            } else {
                assert_null(eng);
                assert_true(strlen(memra_last_error()) > 10);
            }
            if (mock.calls[call] >= nth)
                injected++;
            assert_int_equal(mock.live_allocs, 0);
            assert_int_equal(mock.ctx_refs, 0);
            assert_int_equal(mock.streams_live, 0);
            assert_int_equal(mock.modules_live, 0);
            CUcontext cur = (CUcontext)1;
            mock.fail_call = -1;
            mock_table.cuCtxGetCurrent(&cur);
            if (cur && call != MOCK_cuCtxPopCurrent)
                fail_msg("call #%d failing at its call %d left a context pushed", call, nth);
            while (cur) { /* a failed pop is the driver's; unwind for the next round */
                mock_table.cuCtxPopCurrent(&cur);
                mock_table.cuCtxGetCurrent(&cur);
            }
        }
    }
    assert_true(injected > 40);
    mock_install(); /* leave a clean state for teardown */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_engine_info_and_lifecycle, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_jit_options_cubin_for_exact_sm, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_jit_ptx_for_unknown_sm, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_gate_cases_through_launch, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_random_launches_match_host_arm, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_launch_argument_widths, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_macro_cache_hits_and_content_check, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_capture_and_replay, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_no_driver, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_no_device, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_nvrtc_failure_carries_log, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_nvrtc_absent, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_module_load_failure, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_refused_cubin_falls_back_to_ptx, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_failed_upload_leaves_mirror_invalid, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_out_of_memory, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_device_bad_input_touches_nothing, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_no_context_push_when_current, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_fault_injection_sweep, mock_setup, mock_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
