/* How memra finds NVRTC and which one an engine takes, without the
 * hardware: stand-in NVRTC libraries built by the suite (fake_nvrtc/, each a
 * libnvrtc.so.<major> in a folder of its own, found by the real discovery
 * code) and the mock driver set to chosen driver versions and SMs, judging
 * each image by the driver's rules. Discovery runs once per process, so each
 * discovery case runs in a child of its own. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#include "jit.h"
#include "mock_driver.h"
#include "nvrtc_find.h"

static char tmp[256];

static const char *fake(const char *name)
{
    char var[64];
    snprintf(var, sizeof var, "FAKE_NVRTC_%s", name);
    const char *p = getenv(var);
    if (!p) { /* in a child: no cmocka assertion may jump out of it */
        fprintf(stderr, "%s is not set (run through meson test)\n", var);
        _exit(3);
    }
    return p;
}

/* A toolkit folder holding `lib` as lib64/libnvrtc.so.<major>, the name a
 * toolkit gives it. */
static const char *toolkit_with(const char *lib, int major)
{
    static char home[400];
    static int made;
    snprintf(home, sizeof home, "%s/cuda-%ld-%d", tmp, (long)getpid(), made++);
    char d[500], link[700];
    snprintf(d, sizeof d, "%s/lib64", home);
    snprintf(link, sizeof link, "%s/libnvrtc.so.%d", d, major);
    if (mkdir(home, 0700) || mkdir(d, 0700) || symlink(lib, link)) {
        perror(link);
        _exit(4);
    }
    return home;
}

static void clean_env(void)
{
    unsetenv("MEMRA_NVRTC_PATH");
    unsetenv("CUDA_HOME");
    unsetenv("CUDA_PATH");
    unsetenv("MEMRA_FORCE_PTX");
}

/* In a child: the mock driver at (driver_version, sm), real discovery. */
static void child_driver(int driver_version, int sm_major, int sm_minor)
{
    mock_install();
    mock_table.nvrtc = NULL; /* discover, as the real table does */
    mock.driver_version = driver_version;
    mock.sm_major = sm_major, mock.sm_minor = sm_minor;
}

/* Warms up an engine; returns its kernel's origin (ready = 0 on failure,
 * with the message in msg). */
static memra_kernel_origin warm(char *msg, size_t n, memra_status *st_out)
{
    memra_engine *eng = NULL;
    memra_kernel_origin o = {0};
    memra_status st = memra_engine_create(0, &eng);
    if (!st)
        st = memra_engine_warmup(eng);
    snprintf(msg, n, "%s", st ? memra_last_error() : "");
    if (!st)
        memra_engine_kernel_origin(eng, &o);
    memra_engine_destroy(eng);
    if (st_out)
        *st_out = st;
    return o;
}

#define CHILD_CHECK(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: %s\n  origin: NVRTC %d (%s) %s_%d, message: %s\n", __FILE__,   \
                    __LINE__, #cond, o.nvrtc_version, o.nvrtc_path, o.is_ptx ? "compute" : "sm",   \
                    o.arch, msg);                                                                  \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static void in_child(int (*fn)(void))
{
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        clean_env();
        _exit(fn());
    }
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0);
}

/* Driver 12.8 with NVRTC 13.0 (first in line) and 12.9 present: 13 is
 * refused, 12.9 builds the exact SM's CUBIN (minor-version compatible). */
static int case_newer_major_skipped(void)
{
    char msg[4096];
    child_driver(12080, 9, 0);
    setenv("MEMRA_NVRTC_PATH", fake("V13_0"), 1);
    setenv("CUDA_HOME", toolkit_with(fake("V12_9"), 12), 1);
    memra_kernel_origin o = warm(msg, sizeof msg, NULL);
    CHILD_CHECK(o.ready);
    CHILD_CHECK(o.nvrtc_version == 12090);
    CHILD_CHECK(!o.is_ptx && o.arch == 90);
    CHILD_CHECK(strstr(o.nvrtc_path, "/lib64/libnvrtc.so.12") != NULL); /* via CUDA_HOME */
    return 0;
}

static void test_newer_major_skipped(void **state)
{
    (void)state;
    in_child(case_newer_major_skipped);
}

/* Driver 12.8 with only NVRTC 13: a clear error naming both versions. */
static int case_only_newer_major(void)
{
    char msg[4096];
    child_driver(12080, 9, 0);
    setenv("MEMRA_NVRTC_PATH", fake("V13_0"), 1);
    memra_status st;
    memra_kernel_origin o = warm(msg, sizeof msg, &st);
    CHILD_CHECK(!o.ready);
    CHILD_CHECK(st == MEMRA_ERR_NVRTC);
    CHILD_CHECK(strstr(msg, "NVRTC 13.0 is newer than the driver (CUDA 12.8)") != NULL);
    CHILD_CHECK(strstr(msg, fake("V13_0")) != NULL);
    CHILD_CHECK(strstr(msg, "MEMRA_NVRTC_PATH") != NULL);
    return 0;
}

static void test_only_newer_major(void **state)
{
    (void)state;
    in_child(case_only_newer_major);
}

/* An NVRTC the process already loaded (PyTorch's, from a wheel folder)
 * comes first, wherever it lives. */
static int case_already_loaded(void)
{
    char msg[4096];
    child_driver(13000, 9, 0);
    void *h = dlopen(fake("V12_9"), RTLD_NOW | RTLD_LOCAL);
    memra_kernel_origin o = {0};
    snprintf(msg, sizeof msg, "%s", h ? "" : dlerror());
    CHILD_CHECK(h != NULL);
    o = warm(msg, sizeof msg, NULL);
    CHILD_CHECK(o.ready && o.nvrtc_version == 12090);
    CHILD_CHECK(strcmp(o.nvrtc_path, fake("V12_9")) == 0);
    const memra_nvrtc *list;
    CHILD_CHECK(memra_nvrtc_candidates(memra_driver_get(), &list) > 0);
    CHILD_CHECK(strcmp(list[0].origin, "already loaded in the process") == 0);
    return 0;
}

static void test_already_loaded_comes_first(void **state)
{
    (void)state;
    in_child(case_already_loaded);
}

/* MEMRA_NVRTC_PATH wins over the loader path (which has NVRTC 13 here). */
static int case_env_wins(void)
{
    char msg[4096];
    child_driver(13000, 9, 0);
    setenv("MEMRA_NVRTC_PATH", fake("V12_8"), 1);
    memra_kernel_origin o = warm(msg, sizeof msg, NULL);
    CHILD_CHECK(o.ready && o.nvrtc_version == 12080);
    CHILD_CHECK(strcmp(o.nvrtc_path, fake("V12_8")) == 0);
    return 0;
}

static void test_env_wins_over_loader_path(void **state)
{
    (void)state;
    in_child(case_env_wins);
}

/* The public call, for bindings that know where their wheel put NVRTC. */
static int case_set_path(void)
{
    char msg[4096] = "";
    child_driver(13000, 9, 0);
    memra_kernel_origin o = {0};
    CHILD_CHECK(memra_set_nvrtc_path(NULL) == MEMRA_ERR_NULL_ARG);
    CHILD_CHECK(memra_set_nvrtc_path("/no/such/folder/libnvrtc.so.12") == MEMRA_ERR_NVRTC);
    CHILD_CHECK(strstr(memra_last_error(), "/no/such/folder/libnvrtc.so.12") != NULL);
    CHILD_CHECK(memra_set_nvrtc_path(fake("V12_9")) == MEMRA_OK);
    o = warm(msg, sizeof msg, NULL);
    CHILD_CHECK(o.ready && o.nvrtc_version == 12090);
    const memra_nvrtc *list;
    const int n = memra_nvrtc_candidates(memra_driver_get(), &list);
    int seen = 0;
    for (int i = 0; i < n; i++)
        seen |= strcmp(list[i].path, fake("V12_9")) == 0 &&
                strcmp(list[i].origin, "memra_set_nvrtc_path") == 0;
    CHILD_CHECK(seen);
    return 0;
}

static void test_set_nvrtc_path(void **state)
{
    (void)state;
    in_child(case_set_path);
}

/* The first candidate's images are refused by the driver: the next one's
 * CUBIN is taken. */
static int case_load_failure_falls_through(void)
{
    char msg[4096];
    child_driver(13000, 9, 0);
    setenv("MEMRA_NVRTC_PATH", fake("V12_9_BAD"), 1);
    setenv("CUDA_HOME", toolkit_with(fake("V12_8"), 12), 1);
    memra_kernel_origin o = warm(msg, sizeof msg, NULL);
    CHILD_CHECK(o.ready && o.nvrtc_version == 12080 && !o.is_ptx && o.arch == 90);
    return 0;
}

static void test_load_failure_falls_through(void **state)
{
    (void)state;
    in_child(case_load_failure_falls_through);
}

/* A compile failure falls through too; the error, when nothing works, names
 * every candidate and its reason, the NVRTC log included. */
static int case_compile_failure(void)
{
    char msg[4096];
    child_driver(12080, 9, 0);
    setenv("MEMRA_NVRTC_PATH", fake("V12_6_FAIL"), 1);
    memra_status st;
    memra_kernel_origin o = warm(msg, sizeof msg, &st);
    CHILD_CHECK(!o.ready && st == MEMRA_ERR_NVRTC);
    CHILD_CHECK(strstr(msg, "this one refuses every compile") != NULL);
    CHILD_CHECK(strstr(msg, fake("V12_6_FAIL")) != NULL);
    return 0;
}

static void test_compile_failure_names_everything(void **state)
{
    (void)state;
    in_child(case_compile_failure);
}

/* Paths that do not work are listed with their reasons. */
static int case_failures_named(void)
{
    char msg[4096] = "";
    memra_kernel_origin o = {0};
    child_driver(13000, 9, 0);
    setenv("MEMRA_NVRTC_PATH", "/no/such/dir/libnvrtc.so.13", 1);
    setenv("CUDA_HOME", "/no/such/cuda", 1);
    memra_nvrtc_describe_failures(memra_driver_get(), msg, sizeof msg);
    CHILD_CHECK(strstr(msg, "/no/such/dir/libnvrtc.so.13 (MEMRA_NVRTC_PATH): ") != NULL);
    CHILD_CHECK(strstr(msg, "No such file") != NULL);
    CHILD_CHECK(strstr(msg, "/no/such/cuda (CUDA_HOME): no libnvrtc.so.13, .12 or .11.2") != NULL);
    CHILD_CHECK(strstr(msg, "libnvrtc.so.11.2 (loader path)") != NULL);
    return 0;
}

static void test_every_failure_named(void **state)
{
    (void)state;
    in_child(case_failures_named);
}

/* ---- the choice itself, with in-process candidates ----------------------- */

static memra_nvrtc cands[2];

static void two_candidates(int maj0, int min0, const int *archs0, int n0, int maj1, int min1,
                           const int *archs1, int n1)
{
    cands[0] = mock_nv, cands[1] = mock_nv;
    cands[0].major = maj0, cands[0].minor = min0, cands[0].n_archs = n0;
    memcpy(cands[0].archs, archs0, sizeof(int) * (size_t)n0);
    snprintf(cands[0].path, sizeof cands[0].path, "first");
    cands[1].major = maj1, cands[1].minor = min1, cands[1].n_archs = n1;
    memcpy(cands[1].archs, archs1, sizeof(int) * (size_t)n1);
    snprintf(cands[1].path, sizeof cands[1].path, "second");
    mock_table.nvrtc = cands;
    mock_table.n_nvrtc = 2;
}

static memra_kernel_origin warm_in_process(void)
{
    char msg[4096];
    memra_status st;
    memra_kernel_origin o = warm(msg, sizeof msg, &st);
    if (st)
        fail_msg("%s", msg);
    return o;
}

static int setup(void **state)
{
    (void)state;
    mock_install();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    mock_uninstall();
    return 0;
}

/* sm_121 with NVRTCs that know sm_120 at most: sm_120's CUBIN (binary
 * compatible within the major), not PTX. */
static void test_newer_minor_sm_takes_compatible_cubin(void **state)
{
    (void)state;
    static const int a13[] = {75, 80, 86, 89, 90, 100, 120};
    two_candidates(13, 0, a13, 7, 13, 0, a13, 7);
    mock.sm_major = 12, mock.sm_minor = 1;
    memra_kernel_origin o = warm_in_process();
    assert_int_equal(o.is_ptx, 0);
    assert_int_equal(o.arch, 120);
}

/* sm_70 (dropped by NVRTC 13) under driver 13.0: NVRTC 13 cannot, an older
 * NVRTC makes the CUBIN. */
static void test_old_sm_takes_older_nvrtc(void **state)
{
    (void)state;
    static const int a13[] = {75, 80, 86, 89, 90, 100, 120}, a12[] = {50, 60, 70, 75, 80, 90};
    two_candidates(13, 0, a13, 7, 12, 4, a12, 6);
    mock.sm_major = 7, mock.sm_minor = 0;
    memra_kernel_origin o = warm_in_process();
    assert_int_equal(o.nvrtc_version, 12040);
    assert_int_equal(o.is_ptx, 0);
    assert_int_equal(o.arch, 70);
}

/* A CUBIN from any candidate beats PTX from an earlier one. */
static void test_cubin_preferred_over_earlier_ptx(void **state)
{
    (void)state;
    static const int a_old[] = {75, 80, 86}, a_new[] = {75, 80, 86, 89, 90};
    two_candidates(13, 0, a_old, 3, 13, 0, a_new, 5);
    memra_kernel_origin o = warm_in_process();
    assert_string_equal(o.nvrtc_path, "second");
    assert_int_equal(o.is_ptx, 0);
}

/* PTX only from an NVRTC not newer than the driver; a newer-minor NVRTC may
 * still give a CUBIN. */
static void test_target_rules(void **state)
{
    (void)state;
    memra_nvrtc nv = mock_nv;
    char why[256];
    int arch;
    nv.major = 12, nv.minor = 9;
    static const int a[] = {75, 80, 86, 89, 90, 100, 120};
    memcpy(nv.archs, a, sizeof a), nv.n_archs = 7;
    assert_true(memra_jit_target(&nv, 90, 12080, 0, &arch, why, sizeof why));
    assert_int_equal(arch, 90);
    assert_false(memra_jit_target(&nv, 90, 12080, 1, &arch, why, sizeof why));
    assert_non_null(strstr(why, "needs a driver of CUDA 12.9 or newer (this one is 12.8)"));
    assert_true(memra_jit_target(&nv, 90, 12090, 1, &arch, why, sizeof why));
    assert_true(memra_jit_target(&nv, 130, 13000, 1, &arch, why, sizeof why)); /* newer SM: PTX */
    assert_int_equal(arch, 120);
    assert_false(memra_jit_target(&nv, 130, 13000, 0, &arch, why, sizeof why));
    assert_true(memra_jit_target(&nv, 89, 12080, 0, &arch, why, sizeof why));
    assert_int_equal(arch, 89);
    assert_false(memra_jit_target(&nv, 70, 12080, 1, &arch, why, sizeof why));
    assert_non_null(strstr(why, "knows neither sm_70"));
    nv.major = 13, nv.minor = 0;
    assert_false(memra_jit_target(&nv, 90, 12080, 0, &arch, why, sizeof why));
    assert_non_null(strstr(why, "NVRTC 13.0 is newer than the driver (CUDA 12.8)"));
}

/* An engine whose kernel is in the cache starts with no NVRTC at all. */
static void test_cache_alone_starts_an_engine(void **state)
{
    (void)state;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/cache", tmp);
    setenv("MEMRA_CACHE_DIR", dir, 1);
    memra_kernel_origin o = warm_in_process(); /* compiles, publishes */
    assert_int_equal(o.from_cache, 0);
    mock_table.n_nvrtc = 0; /* no NVRTC anywhere */
    o = warm_in_process();
    assert_int_equal(o.from_cache, 1);
    assert_int_equal(o.nvrtc_version, 13000);
    assert_string_equal(o.nvrtc_path, "");
    assert_int_equal(o.arch, 90);
    /* A device the entry does not suit: the error says what was tried. */
    mock.sm_major = 8, mock.sm_minor = 0;
    char msg[4096];
    memra_status st;
    o = warm(msg, sizeof msg, &st);
    assert_int_equal(st, MEMRA_ERR_NVRTC);
    assert_non_null(strstr(msg, "the kernel cache holds none"));
    setenv("MEMRA_CACHE_DIR", "off", 1);
}

/* CUDA_VISIBLE_DEVICES="": no device, said as such, not a driver error. */
static void test_no_visible_device(void **state)
{
    (void)state;
    mock_table.no_device = 1;
    int n = -1;
    assert_int_equal(memra_device_count(&n), MEMRA_OK);
    assert_int_equal(n, 0);
    memra_engine *eng;
    assert_int_equal(memra_engine_create(0, &eng), MEMRA_ERR_NO_DEVICE);
    assert_non_null(strstr(memra_last_error(), "0 CUDA device(s)"));
}

int main(void)
{
    snprintf(tmp, sizeof tmp, "/tmp/memra-nvrtc-choice-XXXXXX");
    assert_non_null(mkdtemp(tmp));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_newer_major_skipped),
        cmocka_unit_test(test_only_newer_major),
        cmocka_unit_test(test_already_loaded_comes_first),
        cmocka_unit_test(test_env_wins_over_loader_path),
        cmocka_unit_test(test_set_nvrtc_path),
        cmocka_unit_test(test_load_failure_falls_through),
        cmocka_unit_test(test_compile_failure_names_everything),
        cmocka_unit_test(test_every_failure_named),
        cmocka_unit_test_setup_teardown(test_newer_minor_sm_takes_compatible_cubin, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_old_sm_takes_older_nvrtc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cubin_preferred_over_earlier_ptx, setup, teardown),
        cmocka_unit_test_setup_teardown(test_target_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_alone_starts_an_engine, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_visible_device, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0)
        rc = 1;
    return rc;
}
