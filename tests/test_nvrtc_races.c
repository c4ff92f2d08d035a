/* NVRTC discovery from many threads at once (run under ThreadSanitizer in
 * CI): the first use, candidates added while others look, engines on a
 * device the first candidate cannot serve (so more are opened while other
 * threads read the list), and the public listing, all racing. The stand-in
 * NVRTC libraries (tests/fake_nvrtc) are the candidates, the mock driver
 * the device. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

#include "mock_driver.h"
#include "driver/nvrtc_find.h"

enum { T = 8, ITERS = 4 };

static const char *fake(const char *name)
{
    char var[64];
    snprintf(var, sizeof var, "FAKE_NVRTC_%s", name);
    const char *p = getenv(var);
    if (!p)
        fail_msg("%s is not set (run through meson test)", var);
    return p;
}

typedef struct job {
    pthread_barrier_t *start;
    int failed;
    char why[1024];
} job;

static void *worker(void *arg)
{
    job *j = arg;
    pthread_barrier_wait(j->start);
    for (int it = 0; it < ITERS && !j->failed; it++) {
        int n = 0;
        if (memra_set_nvrtc_path(fake("V12_8")) || memra_nvrtc_available(&n) || n < 1) {
            j->failed = 1;
            snprintf(j->why, sizeof j->why, "set/available: %s (n %d)", memra_last_error(), n);
            break;
        }
        memra_engine *eng = NULL;
        memra_kernel_origin o = {0};
        if (memra_engine_create(0, &eng) || memra_engine_warmup(eng) ||
            memra_engine_kernel_origin(eng, &o) || !o.ready || o.is_ptx || o.arch != 70 ||
            (o.nvrtc_version != 12080 && o.nvrtc_version != 12090)) {
            j->failed = 1;
            snprintf(j->why, sizeof j->why, "engine: %s (NVRTC %d, %s_%d)", memra_last_error(),
                     o.nvrtc_version, o.is_ptx ? "compute" : "sm", o.arch);
        }
        memra_engine_destroy(eng);
        memra_nvrtc_info info[MEMRA_NVRTC_MAX];
        int count = 0;
        if (memra_nvrtc_list(info, MEMRA_NVRTC_MAX, &count) || count < 2) {
            j->failed = 1;
            snprintf(j->why, sizeof j->why, "list: %s (%d)", memra_last_error(), count);
        }
    }
    return NULL;
}

static void test_discovery_races(void **state)
{
    (void)state;
    mock_install();
    mock_table.nvrtc = NULL;              /* discover, as the real table does */
    mock.sm_major = 7, mock.sm_minor = 0; /* NVRTC 13 (first) has no sm_70 */
    char home[] = "/tmp/memra-nvrtc-threads-XXXXXX", dir[128], link[160];
    assert_non_null(mkdtemp(home));
    snprintf(dir, sizeof dir, "%s/lib64", home);
    snprintf(link, sizeof link, "%s/libnvrtc.so.12", dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(symlink(fake("V12_9"), link), 0);
    setenv("MEMRA_NVRTC_PATH", fake("V13_0"), 1);
    setenv("CUDA_HOME", home, 1);
    unsetenv("CUDA_PATH");
    pthread_t t[T];
    job jobs[T];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, T);
    for (int i = 0; i < T; i++) {
        jobs[i] = (job){&start, 0, ""};
        assert_int_equal(pthread_create(&t[i], NULL, worker, &jobs[i]), 0);
    }
    for (int i = 0; i < T; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < T; i++)
        if (jobs[i].failed)
            fail_msg("thread %d: %s", i, jobs[i].why);
    unlink(link), rmdir(dir), rmdir(home);
    mock_uninstall();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_discovery_races)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
