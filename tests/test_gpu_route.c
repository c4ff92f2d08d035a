/* Routing on a real GPU: device against host arm, bit for bit, for 2^20
 * tokens of every routing configuration (half of them with edge-value
 * logits); a CUDA graph replayed with new logits; the kernel's parameter
 * layout. Exits 77 (skipped) where no CUDA device exists. */
#include <stdio.h>
#include <stdlib.h>

#include "gpu_fixture.h"

#include "engine.h"
#include "gate_cases.h"
#include "route_abi.h"
#include "route_cases.h"
#include "self_check.h"

static memra_engine *eng;
static const memra_driver *drv;

static int group_setup(void **state)
{
    (void)state;
    if (gpu_engine_open(&eng, &drv))
        return -1;
    if (memra_engine_warmup(eng)) {
        fprintf(stderr, "warmup: %s\n", memra_last_error());
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    gpu_engine_close(eng, drv);
    return 0;
}

static void test_route_param_layout(void **state)
{
    (void)state;
    if (!drv->cuFuncGetParamInfo)
        skip();
    static const size_t off[MEMRA_ROUTE_NPARAMS] = {0,   8,   16,  24,  32,  40,  48,  56,
                                                    64,  72,  80,  88,  96,  104, 112, 120,
                                                    128, 132, 136, 140, 144, 148, 152};
    CUfunction fns[2] = {atomic_load(&eng->kernel[MEMRA_KERNEL_ROUTE]),
                         atomic_load(&eng->kernel[MEMRA_KERNEL_ROUTE_TOPK])};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < MEMRA_ROUTE_NPARAMS; i++) {
            size_t o = 0, sz = 0;
            assert_int_equal(drv->cuFuncGetParamInfo(fns[k], (size_t)i, &o, &sz), CUDA_SUCCESS);
            assert_int_equal(o, off[i]);
            assert_int_equal(sz, i < 16 ? 8 : 4);
        }
}

/* 2^20 tokens per configuration, in chunks of 2^17. */
static void test_million_tokens_every_config(void **state)
{
    (void)state;
    memra_stream own;
    memra_engine_stream(eng, &own);
    char why[512];
    for (size_t ci = 0; ci < N_ROUTE_CASES; ci++) {
        for (int chunk = 0; chunk < 8; chunk++) {
            const int r = memra_route_case_check(eng, ci, 1u << 17, 1000 * ci + (uint64_t)chunk,
                                                 chunk & 1, 40 + (int)ci, 0, own, why, sizeof why);
            if (r)
                fail_msg("%s, chunk %d: %s", route_cases[ci].name, chunk, why);
        }
        printf("routing %-72s 2^20 tokens exact\n", route_cases[ci].name);
    }
}

/* Captured once; each replay routes new logits; every replay exact. */
static void test_graph_replay_with_new_logits(void **state)
{
    (void)state;
    if (!drv->cuStreamBeginCapture)
        skip();
    const route_case *rc = &route_cases[2]; /* DeepSeek-V3 */
    memra_route_spec s = rc->spec;
    float bias[256], planes[3 * 256];
    route_case_bias(s.n_expert, bias);
    route_case_planes(s.n_expert, planes);
    s.bias = bias;
    const memra_vrows_macros mac = {{planes, planes + 256, planes + 512}};
    const memra_vrows_slabs sl = GATE_SERVING_SLABS;
    const uint32_t T = 64;
    const size_t np = (size_t)T * s.top_k, lbytes = (size_t)T * s.n_expert * 4;
    CUstream cs;
    assert_int_equal(drv->cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    memra_devptr dl, dsel, dselw, dptrs, dscl;
    assert_int_equal(memra_alloc(eng, lbytes, &dl), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, np * 4, &dsel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, np * 4, &dselw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * np * 8, &dptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * np * 4, &dscl), MEMRA_OK);
    assert_int_equal(memra_route_prepare_layer(eng, 77, &s, &mac, cs), MEMRA_OK);
    assert_int_equal(memra_sync(eng, cs), MEMRA_OK);
    assert_int_equal(drv->cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    memra_status st =
        memra_moe_route_tables(eng, dl, T, &s, 77, &mac, &sl, dsel, dselw, dptrs, dscl, cs);
    CUgraph g = NULL;
    assert_int_equal(drv->cuStreamEndCapture(cs, &g), CUDA_SUCCESS);
    assert_int_equal(st, MEMRA_OK);
    CUgraphExec x;
    assert_int_equal(drv->cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
    int32_t *gsel = malloc(np * 4), *hsel = malloc(np * 4);
    float *gw = malloc(np * 4), *hw = malloc(np * 4), *gscl = malloc(3 * np * 4),
          *hscl = malloc(3 * np * 4);
    uint64_t *gp = malloc(3 * np * 8), *hp = malloc(3 * np * 8);
    for (int rep = 0; rep < 50; rep++) {
        void *logits = route_case_logits(&s, T, 5000 + (uint64_t)rep, rep & 1);
        assert_int_equal(memra_copy_htod_async(eng, dl, logits, lbytes, cs), MEMRA_OK);
        assert_int_equal(drv->cuGraphLaunch(x, cs), CUDA_SUCCESS);
        assert_int_equal(memra_download_i32_async(eng, gsel, dsel, np, cs), MEMRA_OK);
        assert_int_equal(memra_download_f32_async(eng, gw, dselw, np, cs), MEMRA_OK);
        assert_int_equal(memra_download_u64_async(eng, gp, dptrs, 3 * np, cs), MEMRA_OK);
        assert_int_equal(memra_download_f32_async(eng, gscl, dscl, 3 * np, cs), MEMRA_OK);
        assert_int_equal(memra_sync(eng, cs), MEMRA_OK);
        memra_route_tables_host(logits, T, &s, &mac, &sl, hsel, hw, hp, hscl, NULL);
        assert_memory_equal(gsel, hsel, np * 4);
        assert_memory_equal(gw, hw, np * 4);
        assert_memory_equal(gp, hp, 3 * np * 8);
        assert_memory_equal(gscl, hscl, 3 * np * 4);
        free(logits);
    }
    memra_faults f;
    assert_int_equal(memra_engine_faults(eng, cs, &f, 1), MEMRA_OK);
    free(gsel), free(hsel), free(gw), free(hw), free(gscl), free(hscl), free(gp), free(hp);
    drv->cuGraphExecDestroy(x);
    drv->cuGraphDestroy(g);
    memra_free(eng, dl), memra_free(eng, dsel), memra_free(eng, dselw);
    memra_free(eng, dptrs), memra_free(eng, dscl);
    drv->cuStreamDestroy(cs);
}

int main(void)
{
    if (gpu_absent())
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route_param_layout),
        cmocka_unit_test(test_graph_replay_with_new_logits),
        cmocka_unit_test(test_million_tokens_every_config),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
