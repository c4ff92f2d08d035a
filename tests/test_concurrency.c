/* Thread safety on the host paths, with the mock driver (run under
 * ThreadSanitizer in CI): racing first use compiles once; concurrent macro
 * cache hits and misses stay exact; engines created and destroyed at once. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "testutil.h"

#include "device_case.h"
#include "mock_driver.h"

enum { T = 8 };

typedef struct job {
    memra_engine *eng;
    int id;
    int iters;
    int failed;
    char why[512];
    pthread_barrier_t *start;
} job;

static void *tables_worker(void *arg)
{
    job *j = arg;
    pthread_barrier_wait(j->start);
    uint64_t s = 77 + (uint64_t)j->id;
    enum { E = 32 };
    float shared[3 * E], own[3 * E];
    for (int e = 0; e < 3 * E; e++)
        shared[e] = 1.0f + (float)e / 64.0f;
    for (int it = 0; it < j->iters && !j->failed; it++) {
        for (int e = 0; e < 3 * E; e++)
            own[e] = (float)(it + j->id) + (float)e / 32.0f; /* changes every time: misses */
        const int use_shared = it % 2 == 0;
        memra_vrows_macros mac = {{use_shared ? shared : own, use_shared ? shared + E : own + E,
                                   use_shared ? shared + 2 * E : own + 2 * E}};
        const uint32_t n = 1 + (uint32_t)(rng_next(&s) % 700);
        int32_t *sel = malloc(n * 4);
        float *selw = malloc(n * 4);
        for (uint32_t p = 0; p < n; p++)
            sel[p] = (int32_t)(rng_next(&s) % E), selw[p] = rng_special_float(&s);
        memra_vrows_slabs sl = {{(uint64_t)j->id << 40, 0, 1ull << 50}, {1 << 20, 3, 5ull << 30}};
        /* Layer 1 is shared by every thread (hits); 10+id is this thread's,
         * re-uploaded every time (misses). */
        dcase c = {n, E, sel, selw, &mac, &sl, use_shared ? 1 : 10 + j->id, NULL, 0};
        j->failed = device_case_check(j->eng, &c, j->why, sizeof j->why);
        free(sel), free(selw);
    }
    return NULL;
}

static void run_jobs(void *(*fn)(void *), memra_engine *eng, int iters, job *jobs)
{
    pthread_t t[T];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, T);
    for (int i = 0; i < T; i++) {
        jobs[i] = (job){.eng = eng, .id = i, .iters = iters, .start = &start};
        assert_int_equal(pthread_create(&t[i], NULL, fn, &jobs[i]), 0);
    }
    for (int i = 0; i < T; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < T; i++)
        if (jobs[i].failed)
            fail_msg("thread %d: %s", i, jobs[i].why);
}

static void test_racing_first_use_compiles_once(void **state)
{
    (void)state;
    mock_install();
    mock.compile_delay_ms = 50;
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    job jobs[T];
    run_jobs(tables_worker, eng, 1, jobs);
    assert_int_equal(mock.calls[MOCK_nvrtcCompileProgram], 1);
    assert_int_equal(mock.calls[MOCK_cuModuleLoadData], 1);
    memra_engine_destroy(eng);
    assert_int_equal(mock.live_allocs, 0);
}

static void test_concurrent_cache_hits_and_misses(void **state)
{
    (void)state;
    mock_install();
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
    job jobs[T];
    run_jobs(tables_worker, eng, 40, jobs);
    memra_engine_destroy(eng);
    assert_int_equal(mock.live_allocs, 0);
}

static void *lifecycle_worker(void *arg)
{
    job *j = arg;
    pthread_barrier_wait(j->start);
    for (int it = 0; it < j->iters && !j->failed; it++) {
        memra_engine *e;
        if (memra_engine_create(0, &e) != MEMRA_OK) {
            j->failed = 1;
            snprintf(j->why, sizeof j->why, "create: %s", memra_last_error());
            break;
        }
        if (it % 3 == 0 && memra_engine_warmup(e) != MEMRA_OK) {
            j->failed = 1;
            snprintf(j->why, sizeof j->why, "warmup: %s", memra_last_error());
        }
        memra_engine_destroy(e);
    }
    return NULL;
}

static void test_concurrent_engine_create_destroy(void **state)
{
    (void)state;
    mock_install();
    job jobs[T];
    run_jobs(lifecycle_worker, NULL, 25, jobs);
    assert_int_equal(mock.live_allocs, 0);
    assert_int_equal(mock.ctx_refs, 0);
    assert_int_equal(mock.streams_live, 0);
    assert_int_equal(mock.modules_live, 0);
}

/* 8 engines warming up at once against a folder that cannot be created:
 * every one compiles in memory, and the one warning is printed without a
 * data race (ThreadSanitizer runs this in CI). */
static void test_engines_against_unusable_cache_folder(void **state)
{
    (void)state;
    mock_install();
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/memra-tsan-%ld", (long)getpid());
    FILE *f = fopen(dir, "w"); /* a file where a folder should be */
    assert_non_null(f);
    fclose(f);
    char sub[160];
    snprintf(sub, sizeof sub, "%s/cache", dir);
    setenv("MEMRA_CACHE_DIR", sub, 1);
    job jobs[T];
    run_jobs(lifecycle_worker, NULL, 3, jobs);
    unlink(dir);
    assert_int_equal(mock.calls[MOCK_nvrtcCompileProgram], T * 1); /* it % 3 == 0: once each */
    assert_int_equal(mock.live_allocs, 0);
}

static int teardown(void **state)
{
    (void)state;
    mock_uninstall();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_racing_first_use_compiles_once, teardown),
        cmocka_unit_test_teardown(test_concurrent_cache_hits_and_misses, teardown),
        cmocka_unit_test_teardown(test_concurrent_engine_create_destroy, teardown),
        cmocka_unit_test_teardown(test_engines_against_unusable_cache_folder, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
