/* memra_engine_self_check on the mock driver: exact on a sound device,
 * failing (and saying where) on one that flips a bit. Its routing cases run
 * the routing kernel's source with warps as threads, which valgrind makes
 * very slow: this file runs in the plain and sanitizer builds, not under
 * valgrind (suite mock-threads). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "testutil.h"

#include "mock_fixture.h"
#include "route/route.h"
#include "route/route_cases.h"
#include "engine/engine.h"
#include "check/self_check.h"

/* The gate a serving process runs at boot: exact on a sound device, and it
 * leaves a clear fault word clear. */
static void test_self_check_exact(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    /* Its made-up specs take the generic kernels: with specialisation on,
     * the model's layers still find every module slot free. */
    eng->route_specialize = 1;
    memra_self_check_report rep;
    assert_int_equal(memra_engine_self_check(eng, &rep), MEMRA_OK);
    assert_int_equal(atomic_load(&eng->n_special), 0);
    assert_int_equal(rep.cases, 6 + 2 * N_ROUTE_CASES);
    assert_int_equal(rep.failed, 0);
    assert_true(rep.entries >= 6u * 2 * 65536);
    assert_string_equal(rep.first_failure, "");
    memra_faults f;
    assert_int_equal(memra_engine_faults(eng, NULL, &f, 0), MEMRA_OK);
    assert_int_equal(f.bad_expert, 0);
    assert_int_equal(f.nonfinite, 0);
    assert_int_equal(f.first_pair, MEMRA_NO_FAULT);
    assert_int_equal(memra_engine_self_check(NULL, &rep), MEMRA_ERR_NULL_ARG);
    assert_int_equal(memra_engine_self_check(eng, NULL), MEMRA_ERR_NULL_ARG);
    memra_engine_destroy(eng);
}

/* Row 4 of docs/streams.md: the check while another thread captures a
 * blocking stream in global mode (torch.cuda.graph beside a boot check).
 * It stays on the engine's own stream and its own scratch slots: exact,
 * the capture intact, and no layer of the caller's touched. */
typedef struct capture_job {
    CUstream s;
    pthread_barrier_t *began, *checked;
    CUresult end;
} capture_job;

static void *capture_blocking_stream(void *arg)
{
    capture_job *j = arg;
    mock_table.cuStreamBeginCapture(j->s, CU_STREAM_CAPTURE_MODE_GLOBAL);
    pthread_barrier_wait(j->began);
    pthread_barrier_wait(j->checked);
    CUgraph g = NULL;
    j->end = mock_table.cuStreamEndCapture(j->s, &g);
    if (g)
        mock_table.cuGraphDestroy(g);
    return NULL;
}

static void test_self_check_beside_another_threads_capture(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    CUstream blocking;
    assert_int_equal(mock_table.cuStreamCreate(&blocking, CU_STREAM_DEFAULT), CUDA_SUCCESS);
    pthread_barrier_t began, checked;
    pthread_barrier_init(&began, NULL, 2);
    pthread_barrier_init(&checked, NULL, 2);
    capture_job j = {blocking, &began, &checked, CUDA_ERROR_UNKNOWN};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, capture_blocking_stream, &j), 0);
    pthread_barrier_wait(&began);
    memra_self_check_report rep;
    const memra_status st = memra_engine_self_check(eng, &rep);
    pthread_barrier_wait(&checked);
    pthread_join(t, NULL);
    pthread_barrier_destroy(&began), pthread_barrier_destroy(&checked);
    assert_int_equal(st, MEMRA_OK);
    assert_int_equal(rep.failed, 0);
    assert_int_equal(j.end, CUDA_SUCCESS);
    assert_int_equal(mock.capture_violations, 0);
    /* The public layers are untouched: a layer the check once used is
     * still a miss for the caller. */
    for (int k = MEMRA_MIRROR_VROWS; k <= MEMRA_MIRROR_ROUTE; k++)
        for (size_t i = 0; i < eng->mirror.n_slots[k]; i++)
            assert_null(eng->mirror.slots[k][i]);
    mock_table.cuStreamDestroy(blocking);
    memra_engine_destroy(eng);
}

/* Four workers run the boot gate on one engine at once: each is exact (each
 * read the fault word while the others' launches added to it, and all four
 * reported "not exact"). */
typedef struct check_job {
    memra_engine *eng;
    memra_status st;
    memra_self_check_report rep;
    char error[512];
} check_job;

static void *run_check(void *arg)
{
    check_job *j = arg;
    j->st = memra_engine_self_check(j->eng, &j->rep);
    snprintf(j->error, sizeof j->error, "%s", j->st ? memra_last_error() : "");
    return NULL;
}

static void test_concurrent_self_checks_stay_exact(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    check_job jobs[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (check_job){.eng = eng, .st = MEMRA_ERR_DRIVER};
        assert_int_equal(pthread_create(&t[i], NULL, run_check, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 4; i++) {
        if (jobs[i].st || jobs[i].rep.failed)
            fail_msg("check %d: %s (%s)", i, memra_status_string(jobs[i].st), jobs[i].error);
        assert_int_equal(jobs[i].rep.cases, 6 + 2 * N_ROUTE_CASES);
    }
    memra_faults f;
    assert_int_equal(memra_engine_faults(eng, NULL, &f, 0), MEMRA_OK);
    assert_int_equal(f.bad_expert, 0);
    assert_int_equal(f.first_pair, MEMRA_NO_FAULT);
    memra_engine_destroy(eng);
}

/* A serving thread launches tables with bad ids on the engine while the
 * boot gate checks it: the gate stays exact (it compared the engine's
 * shared fault word before and after each case, took the serving thread's
 * faults for its own and reported "not exact"), and every fault the serving
 * thread counted is still in the engine's word afterwards. */
enum { SERVING_PAIRS = 8, SERVING_BAD = 2, SERVING_E = 16 };

typedef struct serving_job {
    memra_engine *eng;
    atomic_int stop;
    atomic_uint launches;
    memra_status st;
} serving_job;

static void *serve_bad_ids(void *arg)
{
    serving_job *j = arg;
    int32_t sel[SERVING_PAIRS] = {0, 1, 2, SERVING_E, 4, -1, 6, 7};
    float selw[SERVING_PAIRS] = {1, 1, 1, 1, 1, 1, 1, 1};
    memra_vrows_slabs sl = {{1ull << 40, 2ull << 40, 3ull << 40}, {1u << 20, 1u << 20, 1u << 20}};
    memra_devptr d[4] = {0};
    const size_t bytes[4] = {4 * SERVING_PAIRS, 4 * SERVING_PAIRS, 24 * SERVING_PAIRS,
                             12 * SERVING_PAIRS};
    for (int i = 0; i < 4 && !j->st; i++)
        j->st = memra_alloc(j->eng, bytes[i], &d[i]);
    if (!j->st)
        j->st = memra_upload_i32_async(j->eng, d[0], sel, SERVING_PAIRS, NULL);
    if (!j->st)
        j->st = memra_upload_f32_async(j->eng, d[1], selw, SERVING_PAIRS, NULL);
    /* A launch a millisecond, as a serving loop paces them: hundreds land
     * inside each of the check's cases, and the check keeps a core. */
    const struct timespec pace = {0, 1000000};
    while (!j->st && !atomic_load(&j->stop)) {
        j->st = memra_vrows_tables(j->eng, d[0], d[1], SERVING_PAIRS, SERVING_E, 0, NULL, &sl, d[2],
                                   d[3], NULL);
        if (!j->st)
            atomic_fetch_add(&j->launches, 1);
        nanosleep(&pace, NULL);
    }
    if (!j->st)
        j->st = memra_sync(j->eng, NULL);
    for (int i = 0; i < 4; i++)
        if (d[i])
            memra_free(j->eng, d[i]);
    if (j->st)
        atomic_store(&j->launches, 0);
    return NULL;
}

static void test_self_check_beside_serving_faults(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    serving_job j = {.eng = eng};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, serve_bad_ids, &j), 0);
    /* The serving thread is launching before the check begins (bounded). */
    const time_t give_up = time(NULL) + 60;
    while (atomic_load(&j.launches) == 0 && !j.st && time(NULL) < give_up)
        sched_yield();
    memra_self_check_report rep;
    const memra_status st = memra_engine_self_check(eng, &rep);
    char error[512];
    snprintf(error, sizeof error, "%s", st ? memra_last_error() : "");
    atomic_store(&j.stop, 1);
    pthread_join(t, NULL);
    assert_int_equal(j.st, MEMRA_OK);
    if (st || rep.failed)
        fail_msg("%s (%s): %u failed: %s", memra_status_string(st), error, rep.failed,
                 rep.first_failure);
    const unsigned launches = atomic_load(&j.launches);
    assert_true(launches > 0);
    memra_faults f;
    assert_int_equal(memra_engine_faults(eng, NULL, &f, 0), MEMRA_OK);
    assert_int_equal(f.bad_expert, SERVING_BAD * launches);
    assert_int_equal(f.first_pair, 3);
    memra_engine_destroy(eng);
}

/* A device whose tables are off by one bit fails it, and says where. */
static void test_self_check_catches_a_wrong_bit(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    mock.corrupt_tables = 1;
    memra_self_check_report rep;
    assert_int_equal(memra_engine_self_check(eng, &rep), MEMRA_ERR_SELF_CHECK);
    assert_int_equal(rep.failed, 6); /* the table cases; routing writes its own */
    assert_non_null(strstr(rep.first_failure, "gate case fixture"));
    assert_non_null(strstr(rep.first_failure, "scl["));
    char want[64];
    snprintf(want, sizeof want, "6 of %d cases differ", (int)(6 + 2 * N_ROUTE_CASES));
    assert_non_null(strstr(memra_last_error(), want));
    memra_engine_destroy(eng);
}

/* A check that cannot run (its kernel will not load) says why and leaves
 * the report as it was: it once zeroed it first, and a failing call writes
 * no output. */
static void test_check_that_cannot_run_leaves_the_report(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    mock.refuse_loads = CUDA_ERROR_INVALID_IMAGE;
    memra_self_check_report rep;
    memset(&rep, 0x5a, sizeof rep);
    assert_int_equal(memra_engine_self_check(eng, &rep), MEMRA_ERR_MODULE_LOAD);
    mock.refuse_loads = 0;
    const unsigned char *p = (const unsigned char *)&rep;
    for (size_t i = 0; i < sizeof rep; i++)
        assert_int_equal(p[i], 0x5a);
    memra_engine_destroy(eng);
}

/* A routing launch that writes nothing fails the check, even where the
 * driver hands back the previous case's buffers with its answers in them. */
static void test_route_check_catches_unwritten_outputs(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    mock.recycle_memory = 1;
    char why[512];
    for (int v = MEMRA_ROUTE_VARIANT_BLOCK; v <= MEMRA_ROUTE_VARIANT_WARP; v++) {
        mock.drop_route_launches = 0;
        assert_int_equal(memra_route_case_check(eng, 0, 8, 7, 0, 3, 0, v, NULL, why, sizeof why),
                         0);
        mock.drop_route_launches = 1;
        assert_int_equal(memra_route_case_check(eng, 0, 8, 7, 0, 3, 0, v, NULL, why, sizeof why),
                         1);
    }
    assert_non_null(strstr(why, route_cases[0].name));
    memra_engine_destroy(eng);
}

/* Two groups, two meson tests, so the two cores CI has share them (each
 * check runs the kernels' source on the host: seconds, and far more under
 * the sanitizers): the four workers checking one engine at once
 * ("concurrent"), and the rest. */
int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_self_check_exact, mock_setup, mock_teardown),
        cmocka_unit_test_setup_teardown(test_self_check_beside_another_threads_capture, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_self_check_beside_serving_faults, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_self_check_catches_a_wrong_bit, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_check_that_cannot_run_leaves_the_report, mock_setup,
                                        mock_teardown),
        cmocka_unit_test_setup_teardown(test_route_check_catches_unwritten_outputs, mock_setup,
                                        mock_teardown),
    };
    const struct CMUnitTest concurrent[] = {
        cmocka_unit_test_setup_teardown(test_concurrent_self_checks_stay_exact, mock_setup,
                                        mock_teardown),
    };
    if (argc > 1 && strcmp(argv[1], "concurrent") == 0)
        return cmocka_run_group_tests(concurrent, NULL, NULL);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
