/* Two GPUs in one serving process (a pipeline pair): one engine per device,
 * each with its own module; tables built on all devices at once from one
 * thread per device, with different layers, planes and strides, checked bit
 * for bit; faults stay on their device; destroy in either order.
 * Exits 77 where fewer than two devices exist. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

#include "device_case.h"
#include "engine/engine.h"

#define MAX_DEV 8
static int n_dev;
static memra_engine *engs[MAX_DEV];

typedef struct job {
    int dev;
    int failed;
    char why[512];
} job;

static void *device_worker(void *arg)
{
    job *j = arg;
    memra_engine *eng = engs[j->dev];
    CUcontext c;
    memra_driver_get()->cuCtxPushCurrent(eng->cx.ctx);
    enum { E = 128 };
    float pl[3 * E];
    for (int e = 0; e < 3 * E; e++)
        pl[e] = (float)(j->dev + 1) * 0.5f + (float)e / 256.0f; /* per-device planes */
    memra_vrows_macros mac = {{pl, pl + E, pl + 2 * E}};
    uint64_t s = 500 + (uint64_t)j->dev;
    for (int it = 0; it < 30 && !j->failed; it++) {
        const uint32_t n = 1 + (uint32_t)(rng_next(&s) % 300000);
        int32_t *sel = malloc(n * 4);
        float *selw = malloc(n * 4);
        for (uint32_t p = 0; p < n; p++)
            sel[p] = (int32_t)(rng_next(&s) % E), selw[p] = rng_special_float(&s);
        /* Each device holds half the experts: different bases and strides. */
        memra_vrows_slabs sl = {{(uint64_t)(j->dev + 1) << 44, (uint64_t)(j->dev + 2) << 44,
                                 (uint64_t)(j->dev + 3) << 44},
                                {(24ull + (uint64_t)j->dev) << 20, 24ull << 20, 48ull << 20}};
        dcase cs = {n, E, sel, selw, &mac, &sl, 2 * it + j->dev, NULL, 0};
        j->failed = device_case_check(eng, &cs, j->why, sizeof j->why);
        free(sel), free(selw);
    }
    memra_driver_get()->cuCtxPopCurrent(&c);
    return NULL;
}

static void test_engines_have_own_modules(void **state)
{
    (void)state;
    for (int i = 0; i < n_dev; i++) {
        assert_int_equal(memra_engine_warmup(engs[i]), MEMRA_OK);
        for (int k = 0; k < i; k++)
            assert_ptr_not_equal(engs[i]->module[MEMRA_MODULE_VROWS],
                                 engs[k]->module[MEMRA_MODULE_VROWS]);
    }
}

static void test_all_devices_at_once(void **state)
{
    (void)state;
    pthread_t t[MAX_DEV];
    job jobs[MAX_DEV];
    for (int i = 0; i < n_dev; i++) {
        jobs[i] = (job){.dev = i};
        assert_int_equal(pthread_create(&t[i], NULL, device_worker, &jobs[i]), 0);
    }
    for (int i = 0; i < n_dev; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < n_dev; i++)
        if (jobs[i].failed)
            fail_msg("device %d: %s", i, jobs[i].why);
}

static void test_faults_stay_on_their_device(void **state)
{
    (void)state;
    memra_faults f;
    for (int i = 0; i < n_dev; i++)
        assert_int_equal(memra_engine_faults(engs[i], NULL, &f, 1), MEMRA_OK);
    /* Out-of-range ids on device 1 only. */
    const int32_t sel[4] = {0, 7, 99, 1};
    const float selw[4] = {1, 1, 1, 1};
    memra_vrows_slabs sl = {{0, 0, 0}, {64, 64, 64}};
    memra_devptr d;
    assert_int_equal(memra_alloc(engs[1], 4096, &d), MEMRA_OK);
    assert_int_equal(memra_upload_i32(engs[1], d, sel, 4), MEMRA_OK);
    assert_int_equal(memra_upload_f32(engs[1], d + 64, selw, 4), MEMRA_OK);
    assert_int_equal(
        memra_vrows_tables(engs[1], d, d + 64, 4, 8, 0, NULL, &sl, d + 1024, d + 2048, NULL),
        MEMRA_OK);
    assert_int_equal(memra_engine_faults(engs[1], NULL, &f, 1), MEMRA_OK);
    assert_int_equal(f.bad_expert, 1);
    assert_int_equal(f.first_pair, 2);
    for (int i = 0; i < n_dev; i++) {
        if (i == 1)
            continue;
        assert_int_equal(memra_engine_faults(engs[i], NULL, &f, 0), MEMRA_OK);
        assert_int_equal(f.bad_expert, 0);
        assert_int_equal(f.first_pair, MEMRA_NO_FAULT);
    }
    memra_free(engs[1], d);
}

static void test_destroy_in_either_order(void **state)
{
    (void)state;
    /* Engine 0 first, then the rest, then recreate and destroy last first. */
    for (int i = 0; i < n_dev; i++)
        memra_engine_destroy(engs[i]);
    for (int i = 0; i < n_dev; i++)
        assert_int_equal(memra_engine_create(i, &engs[i]), MEMRA_OK);
    for (int i = n_dev - 1; i >= 0; i--) {
        assert_int_equal(memra_engine_warmup(engs[i]), MEMRA_OK);
        memra_engine_destroy(engs[i]);
        engs[i] = NULL;
    }
}

int main(void)
{
    memra_status st = memra_device_count(&n_dev);
    if (st || n_dev < 2) {
        printf("SKIP: needs two CUDA devices, found %d (%s)\n", st ? 0 : n_dev,
               st ? memra_last_error() : "one engine per device is what this tests");
        return 77;
    }
    if (n_dev > MAX_DEV)
        n_dev = MAX_DEV;
    for (int i = 0; i < n_dev; i++)
        if (memra_engine_create(i, &engs[i])) {
            fprintf(stderr, "engine %d: %s\n", i, memra_last_error());
            return 1;
        }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engines_have_own_modules),
        cmocka_unit_test(test_all_devices_at_once),
        cmocka_unit_test(test_faults_stay_on_their_device),
        cmocka_unit_test(test_destroy_in_either_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
