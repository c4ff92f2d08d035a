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

#include "jit/jit.h"
#include "mock_driver.h"
#include "driver/nvrtc_find.h"
#include "driver/soname.h"
#include "base/warn.h"

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
    /* an empty string is a wrong value, not a NULL pointer (it said NULL_ARG) */
    CHILD_CHECK(memra_set_nvrtc_path("") == MEMRA_ERR_INVALID_ARG);
    CHILD_CHECK(strstr(memra_last_error(), "path is empty") != NULL);
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

/* The first candidate's images are refused by the driver. It served on
 * paper (a CUBIN for sm_90 under CUDA 13.0), so the toolkit behind it was
 * not loaded on speculation; after the refusal the engine opens it and
 * takes its CUBIN. */
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

/* What the engine needs to fall through to a library it did not load on
 * speculation: after the plan's choices failed, memra_jit_plan_more opens
 * the next candidate and offers only its choices. */
static int case_plan_more(void)
{
    char msg[4096] = "";
    memra_kernel_origin o = {0};
    child_driver(13000, 9, 0);
    setenv("MEMRA_NVRTC_PATH", fake("V12_9_BAD"), 1);
    setenv("CUDA_HOME", toolkit_with(fake("V12_8"), 12), 1);
    memra_jit_choice plan[2 * MEMRA_NVRTC_MAX];
    const memra_driver *d = memra_driver_get();
    int seen = 0;
    int n = memra_jit_plan(d, 90, 13000, 0, plan, 2 * MEMRA_NVRTC_MAX, msg, sizeof msg, &seen);
    CHILD_CHECK(n == 2 && plan[0].nv->minor == 9 && !plan[0].is_ptx && plan[1].is_ptx);
    CHILD_CHECK(dlopen(fake("V12_8"), RTLD_NOW | RTLD_NOLOAD) == NULL);
    n = memra_jit_plan_more(d, 90, 13000, 0, plan, 2 * MEMRA_NVRTC_MAX, msg, sizeof msg, &seen);
    CHILD_CHECK(n == 2 && plan[0].nv->major == 12 && plan[0].nv->minor == 8);
    CHILD_CHECK(plan[0].arch == 90 && !plan[0].is_ptx && plan[1].is_ptx);
    CHILD_CHECK(strcmp(plan[0].nv->origin, "CUDA_HOME") == 0);
    return 0;
}

static void test_plan_more_opens_the_next(void **state)
{
    (void)state;
    in_child(case_plan_more);
}

/* Another thread may open the next candidate between this thread's plan and
 * its call for more (test_nvrtc_races failed 1 run in 40 so): the call for
 * more still offers it, though it has nothing left to open itself. */
static int case_plan_more_after_another_opened(void)
{
    char msg[4096] = "";
    memra_kernel_origin o = {0}; /* CHILD_CHECK reports it */
    child_driver(13000, 9, 0);
    setenv("MEMRA_NVRTC_PATH", fake("V12_9_BAD"), 1);
    setenv("CUDA_HOME", toolkit_with(fake("V12_8"), 12), 1);
    memra_jit_choice plan[2 * MEMRA_NVRTC_MAX];
    const memra_driver *d = memra_driver_get();
    int seen = 0;
    int n = memra_jit_plan(d, 90, 13000, 0, plan, 2 * MEMRA_NVRTC_MAX, msg, sizeof msg, &seen);
    CHILD_CHECK(n == 2 && plan[0].nv->minor == 9 && seen == 1);
    while (memra_nvrtc_open_next(d)) /* "another thread" opens the rest */
        ;
    n = memra_jit_plan_more(d, 90, 13000, 0, plan, 2 * MEMRA_NVRTC_MAX, msg, sizeof msg, &seen);
    /* (a real NVRTC on the loader path, where one is, adds its choices after) */
    CHILD_CHECK(n >= 2 && plan[0].nv->major == 12 && plan[0].nv->minor == 8);
    CHILD_CHECK(strcmp(plan[0].nv->origin, "CUDA_HOME") == 0);
    n = memra_jit_plan_more(d, 90, 13000, 0, plan, 2 * MEMRA_NVRTC_MAX, msg, sizeof msg, &seen);
    CHILD_CHECK(n == 0); /* nothing further */
    return 0;
}

static void test_plan_more_after_another_opened(void **state)
{
    (void)state;
    in_child(case_plan_more_after_another_opened);
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

/* Paths that do not work are listed with their reasons, each tried only
 * because the ones before it could not serve. */
static int case_failures_named(void)
{
    char msg[4096] = "";
    memra_kernel_origin o = {0};
    child_driver(13000, 9, 0);
    setenv("MEMRA_NVRTC_PATH", "/no/such/dir/libnvrtc.so.13", 1);
    setenv("CUDA_HOME", "/no/such/cuda", 1);
    memra_nvrtc_info info[16];
    int count = 0;
    CHILD_CHECK(memra_nvrtc_list(info, 16, &count) == MEMRA_OK);
    for (int i = 0, used = 0; i < count && i < 16; i++)
        if (info[i].state == MEMRA_NVRTC_REFUSED)
            used += snprintf(msg + used, sizeof msg - (size_t)used, "  %s (%s): %s\n", info[i].path,
                             info[i].origin, info[i].why);
    CHILD_CHECK(strstr(msg, "/no/such/dir/libnvrtc.so.13 (MEMRA_NVRTC_PATH): ") != NULL);
    CHILD_CHECK(strstr(msg, "No such file") != NULL);
    CHILD_CHECK(strstr(msg, "/no/such/cuda (CUDA_HOME): no libnvrtc.so.13, .12 or .11.2") != NULL);
    /* The loader path was tried next (usable here or not). */
    const memra_nvrtc *list;
    const int n = memra_nvrtc_candidates(memra_driver_get(), &list);
    int loader = 0;
    for (int i = 0; i < n; i++)
        loader |= strcmp(list[i].origin, "loader path") == 0;
    CHILD_CHECK(loader);
    return 0;
}

static void test_every_failure_named(void **state)
{
    (void)state;
    in_child(case_failures_named);
}

/* ---- what discovery refuses to load --------------------------------------- */

/* Warnings, caught through the public callback. */
static char warnings[8192];
static void catch_warning(memra_log_level level, const char *message, void *user)
{
    (void)level, (void)user;
    const size_t n = strlen(warnings);
    snprintf(warnings + n, sizeof warnings - n, "%s\n", message);
}

/* A child that must finish in bounded time: a FIFO that blocked dlopen
 * would hang it, and SIGALRM then fails the test instead of the suite. */
static void bounded_child(void)
{
    alarm(20);
    warnings[0] = 0;
    memra_set_log_callback(catch_warning, NULL);
}

/* The listed state of the candidate at `path` (-1 when not listed). */
static int state_of(const char *path, char *why, size_t n)
{
    memra_nvrtc_info info[MEMRA_NVRTC_MAX + 8];
    int count = 0;
    if (memra_nvrtc_list(info, MEMRA_NVRTC_MAX + 8, &count))
        return -2;
    for (int i = 0; i < count && i < MEMRA_NVRTC_MAX + 8; i++)
        if (strcmp(info[i].path, path) == 0) {
            if (why)
                snprintf(why, n, "%s", info[i].why);
            return (int)info[i].state;
        }
    return -1;
}

static int loaded(const char *lib)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (h)
        dlclose(h);
    return h != NULL;
}

/* A folder of its own under tmp. */
static const char *fresh_dir(const char *what)
{
    static char d[400];
    static int made;
    snprintf(d, sizeof d, "%s/%s-%ld-%d", tmp, what, (long)getpid(), made++);
    if (mkdir(d, 0700)) {
        perror(d);
        _exit(4);
    }
    return d;
}

/* A copy of `lib` at `to` (a real file, so its owner and mode are its own). */
static void copy_file(const char *lib, const char *to, mode_t mode)
{
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && chmod %o '%s'", lib, to, (unsigned)mode, to);
    if (system(cmd) != 0)
        _exit(5);
}

/* An NVRTC that says its version is 12.300000000: its version code
 * overflowed an int (signed overflow), and went negative, so its PTX was
 * taken on a 12.8 driver. Refused for the version, named in the list; the
 * engine starts from the next candidate. */
static int case_lying_version(void)
{
    char msg[4096], why[256] = "";
    child_driver(12080, 9, 0);
    setenv("MEMRA_NVRTC_PATH", fake("V12_LYING"), 1);
    setenv("CUDA_HOME", toolkit_with(fake("V12_8"), 12), 1);
    memra_kernel_origin o = warm(msg, sizeof msg, NULL);
    CHILD_CHECK(o.ready && o.nvrtc_version == 12080);
    CHILD_CHECK(state_of(fake("V12_LYING"), why, sizeof why) == MEMRA_NVRTC_REFUSED);
    CHILD_CHECK(strstr(why, "says its version is 12.300000000, which no CUDA release has") != NULL);
    return 0;
}

static void test_nvrtc_with_an_impossible_version_is_refused(void **state)
{
    (void)state;
    in_child(case_lying_version);
}

/* A FIFO at MEMRA_NVRTC_PATH: refused at once as not a regular file, and
 * the next candidate serves. */
static int case_fifo_at_env(void)
{
    char msg[4096] = "", why[256] = "", fifo[500];
    memra_kernel_origin o = {0};
    bounded_child();
    child_driver(13000, 9, 0);
    snprintf(fifo, sizeof fifo, "%s/libnvrtc.so.13", fresh_dir("fifo-env"));
    CHILD_CHECK(mkfifo(fifo, 0600) == 0);
    setenv("MEMRA_NVRTC_PATH", fifo, 1);
    setenv("CUDA_HOME", toolkit_with(fake("V12_9"), 12), 1);
    o = warm(msg, sizeof msg, NULL);
    CHILD_CHECK(o.ready && o.nvrtc_version == 12090);
    CHILD_CHECK(state_of(fifo, why, sizeof why) == MEMRA_NVRTC_REFUSED);
    CHILD_CHECK(strstr(why, "is not a regular file (a FIFO)") != NULL);
    CHILD_CHECK(strstr(warnings, "MEMRA_NVRTC_PATH=") != NULL);
    return 0;
}

static void test_fifo_at_env_path(void **state)
{
    (void)state;
    in_child(case_fifo_at_env);
}

/* A FIFO where a toolkit's libnvrtc.so.13 would be: refused, with a
 * warning; the toolkit's libnvrtc.so.12 serves. */
static int case_fifo_in_toolkit(void)
{
    char msg[4096] = "", why[256] = "", fifo[600], link[600];
    memra_kernel_origin o = {0};
    bounded_child();
    child_driver(13000, 9, 0);
    const char *home = toolkit_with(fake("V12_9"), 12);
    snprintf(fifo, sizeof fifo, "%s/lib64/libnvrtc.so.13", home);
    CHILD_CHECK(mkfifo(fifo, 0600) == 0);
    setenv("CUDA_HOME", home, 1);
    o = warm(msg, sizeof msg, NULL);
    CHILD_CHECK(o.ready && o.nvrtc_version == 12090);
    snprintf(link, sizeof link, "%s/lib64/libnvrtc.so.12", home);
    CHILD_CHECK(strcmp(o.nvrtc_path, link) == 0);
    CHILD_CHECK(state_of(fifo, why, sizeof why) == MEMRA_NVRTC_REFUSED);
    CHILD_CHECK(strstr(why, "is not a regular file (a FIFO)") != NULL);
    CHILD_CHECK(strstr(warnings, "libnvrtc.so.13 (from CUDA_HOME) is not a regular file") != NULL);
    return 0;
}

static void test_fifo_in_toolkit(void **state)
{
    (void)state;
    in_child(case_fifo_in_toolkit);
}

/* A FIFO handed to memra_set_nvrtc_path (where a wheel's NVRTC would be):
 * the call fails at once, naming it. */
static int case_fifo_at_set_path(void)
{
    char msg[4096] = "", fifo[600];
    memra_kernel_origin o = {0};
    bounded_child();
    child_driver(13000, 9, 0);
    const char *site = fresh_dir("site-packages");
    snprintf(fifo, sizeof fifo, "%s/nvidia", site);
    CHILD_CHECK(mkdir(fifo, 0700) == 0);
    snprintf(fifo, sizeof fifo, "%s/nvidia/cu13", site);
    CHILD_CHECK(mkdir(fifo, 0700) == 0);
    snprintf(fifo, sizeof fifo, "%s/nvidia/cu13/lib", site);
    CHILD_CHECK(mkdir(fifo, 0700) == 0);
    snprintf(fifo, sizeof fifo, "%s/nvidia/cu13/lib/libnvrtc.so.13", site);
    CHILD_CHECK(mkfifo(fifo, 0600) == 0);
    CHILD_CHECK(memra_set_nvrtc_path(fifo) == MEMRA_ERR_NVRTC);
    snprintf(msg, sizeof msg, "%s", memra_last_error());
    CHILD_CHECK(strstr(msg, fifo) != NULL);
    CHILD_CHECK(strstr(msg, "is not a regular file (a FIFO)") != NULL);
    CHILD_CHECK(memra_set_nvrtc_path(fake("V13_0")) == MEMRA_OK); /* so nothing else is opened */
    CHILD_CHECK(state_of(fifo, NULL, 0) == -1);                   /* a refused call lists nothing */
    return 0;
}

static void test_fifo_at_set_path(void **state)
{
    (void)state;
    in_child(case_fifo_at_set_path);
}

/* A toolkit memra derives a path into must be trusted like the kernel
 * cache: each variant is refused, not loaded, and named in a warning;
 * MEMRA_NVRTC_PATH (the next candidate) serves instead. */
enum {
    LOOSE_FOLDER,
    FOREIGN_FOLDER,
    LOOSE_TOOLKIT,
    FOREIGN_TOOLKIT,
    LOOSE_FILE,
    FOREIGN_FILE,
    LINK_INTO_LOOSE_FOLDER
};
static int untrusted_variant;

static int case_untrusted_toolkit(void)
{
    char msg[4096] = "", why[256] = "", lib64[600], file[700], home[500];
    memra_kernel_origin o = {0};
    (void)msg;
    bounded_child();
    child_driver(13000, 9, 0);
    snprintf(home, sizeof home, "%s", fresh_dir("cuda-untrusted"));
    snprintf(lib64, sizeof lib64, "%s/lib64", home);
    CHILD_CHECK(mkdir(lib64, 0755) == 0);
    snprintf(file, sizeof file, "%s/libnvrtc.so.12", lib64);
    const char *want = "";
    switch (untrusted_variant) {
    case LOOSE_FOLDER:
        CHILD_CHECK(symlink(fake("V12_9"), file) == 0 && chmod(lib64, 0777) == 0);
        want = "its folder is writable by group or others (mode 777)";
        break;
    case FOREIGN_FOLDER:
        CHILD_CHECK(symlink(fake("V12_9"), file) == 0 && chown(lib64, 65534, 65534) == 0);
        want = "its folder is owned by uid 65534";
        break;
    case LOOSE_TOOLKIT: /* $CUDA_HOME itself: whoever writes it can swap lib64 */
        CHILD_CHECK(symlink(fake("V12_9"), file) == 0 && chmod(home, 0777) == 0);
        want = "the toolkit folder is writable by group or others (mode 777)";
        break;
    case FOREIGN_TOOLKIT:
        CHILD_CHECK(symlink(fake("V12_9"), file) == 0 && chown(home, 65534, 65534) == 0);
        want = "the toolkit folder is owned by uid 65534";
        break;
    case LOOSE_FILE:
        copy_file(fake("V12_9"), file, 0666);
        want = "the file is writable by group or others (mode 666)";
        break;
    case FOREIGN_FILE:
        copy_file(fake("V12_9"), file, 0755);
        CHILD_CHECK(chown(file, 65534, 65534) == 0);
        want = "the file is owned by uid 65534";
        break;
    default: { /* a trusted folder whose link points into a world-writable one */
        char loose[600], target[700];
        snprintf(loose, sizeof loose, "%s", fresh_dir("loose"));
        CHILD_CHECK(chmod(loose, 0777) == 0);
        snprintf(target, sizeof target, "%s/libnvrtc.so.12", loose);
        copy_file(fake("V12_9"), target, 0755);
        CHILD_CHECK(symlink(target, file) == 0);
        want = "the folder it links into is writable by group or others";
    }
    }
    setenv("CUDA_HOME", home, 1);
    /* The first candidate opened is the toolkit's (nothing named before it). */
    CHILD_CHECK(memra_nvrtc_open_next(memra_driver_get()) == 1);
    CHILD_CHECK(state_of(file, why, sizeof why) == MEMRA_NVRTC_REFUSED);
    CHILD_CHECK(strstr(why, want) != NULL);
    CHILD_CHECK(strstr(warnings, "(from CUDA_HOME)") != NULL);
    CHILD_CHECK(strstr(warnings, want) != NULL);
    CHILD_CHECK(!loaded(file));
    return 0;
}

static void test_untrusted_toolkits_are_not_loaded(void **state)
{
    (void)state;
    for (untrusted_variant = LOOSE_FOLDER; untrusted_variant <= LINK_INTO_LOOSE_FOLDER;
         untrusted_variant++)
        in_child(case_untrusted_toolkit);
}

/* A path the user names is trusted as named: a file in a world-writable
 * folder at MEMRA_NVRTC_PATH is used (it must still be a regular file). */
static int case_named_path_trusted_as_named(void)
{
    char msg[4096] = "", file[700];
    memra_kernel_origin o = {0};
    bounded_child();
    child_driver(13000, 9, 0);
    const char *loose = fresh_dir("named-loose");
    CHILD_CHECK(chmod(loose, 0777) == 0);
    snprintf(file, sizeof file, "%s/libnvrtc.so.12", loose);
    copy_file(fake("V12_9"), file, 0755);
    setenv("MEMRA_NVRTC_PATH", file, 1);
    o = warm(msg, sizeof msg, NULL);
    CHILD_CHECK(o.ready && o.nvrtc_version == 12090 && strcmp(o.nvrtc_path, file) == 0);
    CHILD_CHECK(warnings[0] == 0);
    return 0;
}

static void test_named_path_trusted_as_named(void **state)
{
    (void)state;
    in_child(case_named_path_trusted_as_named);
}

/* The first candidate that serves stops the search: the toolkit after it
 * is never loaded, and listed as not tried. A device it cannot serve
 * (sm_70: NVRTC 13 dropped it) opens the next one then. */
static int case_first_usable_stops(void)
{
    char msg[4096] = "", lib[600];
    memra_kernel_origin o = {0};
    bounded_child();
    child_driver(13000, 9, 0);
    const char *home = toolkit_with(fake("V12_9"), 12);
    snprintf(lib, sizeof lib, "%s/lib64/libnvrtc.so.12", home);
    setenv("MEMRA_NVRTC_PATH", fake("V13_0"), 1);
    setenv("CUDA_HOME", home, 1);
    int n = -1;
    CHILD_CHECK(memra_nvrtc_available(&n) == MEMRA_OK && n == 1);
    o = warm(msg, sizeof msg, NULL);
    CHILD_CHECK(o.ready && o.nvrtc_version == 13000);
    CHILD_CHECK(!loaded(fake("V12_9")));
    CHILD_CHECK(state_of(lib, NULL, 0) == MEMRA_NVRTC_NOT_TRIED);
    CHILD_CHECK(state_of("libnvrtc.so.13", NULL, 0) == MEMRA_NVRTC_NOT_TRIED); /* loader path */
    mock.sm_major = 7, mock.sm_minor = 0;
    o = warm(msg, sizeof msg, NULL);
    CHILD_CHECK(o.ready && o.nvrtc_version == 12090 && o.arch == 70 && !o.is_ptx);
    CHILD_CHECK(loaded(fake("V12_9")));
    CHILD_CHECK(state_of(lib, NULL, 0) == MEMRA_NVRTC_USABLE);
    CHILD_CHECK(state_of("libnvrtc.so.13", NULL, 0) == MEMRA_NVRTC_NOT_TRIED);
    return 0;
}

static void test_first_usable_stops(void **state)
{
    (void)state;
    in_child(case_first_usable_stops);
}

/* Relative MEMRA_NVRTC_PATH and CUDA_HOME are refused with a warning (not
 * resolved against whatever the working directory is at first use); a
 * relative memra_set_nvrtc_path is resolved when it is called. */
static int case_relative_paths(void)
{
    char msg[4096] = "", dir[PATH_MAX], want[PATH_MAX + 64];
    memra_kernel_origin o = {0};
    bounded_child();
    child_driver(13000, 9, 0);
    setenv("MEMRA_NVRTC_PATH", "lib/libnvrtc.so.13", 1);
    setenv("CUDA_HOME", "cuda", 1);
    snprintf(dir, sizeof dir, "%s", fake("V12_9"));
    *strrchr(dir, '/') = 0;
    CHILD_CHECK(chdir(dir) == 0);
    CHILD_CHECK(memra_set_nvrtc_path(strrchr(fake("V12_9"), '/') + 1) == MEMRA_OK);
    CHILD_CHECK(chdir("/") == 0);
    o = warm(msg, sizeof msg, NULL);
    snprintf(want, sizeof want, "%s", fake("V12_9"));
    CHILD_CHECK(o.ready && strcmp(o.nvrtc_path, want) == 0);
    CHILD_CHECK(strstr(warnings, "MEMRA_NVRTC_PATH=lib/libnvrtc.so.13 is not an absolute path") !=
                NULL);
    CHILD_CHECK(state_of("cuda", NULL, 0) == MEMRA_NVRTC_REFUSED); /* listed, refused */
    return 0;
}

static void test_relative_paths(void **state)
{
    (void)state;
    in_child(case_relative_paths);
}

/* A 491-byte CUDA_HOME (and over-long MEMRA_NVRTC_PATH and
 * memra_set_nvrtc_path) is refused and said, never cut into another file
 * name such as .../libnvrtc.so.1. */
static int case_long_paths(void)
{
    char msg[4096] = "", home[492], path[700];
    memra_kernel_origin o = {0};
    bounded_child();
    child_driver(13000, 9, 0);
    memset(home, 'a', sizeof home - 1);
    home[0] = '/';
    home[sizeof home - 1] = 0;
    setenv("CUDA_HOME", home, 1);
    memset(path, 'b', sizeof path - 1);
    path[0] = '/';
    path[sizeof path - 1] = 0;
    setenv("MEMRA_NVRTC_PATH", path, 1);
    CHILD_CHECK(memra_set_nvrtc_path(fake("V13_0")) == MEMRA_OK); /* so nothing else is opened */
    CHILD_CHECK(memra_set_nvrtc_path(path) == MEMRA_ERR_INVALID_ARG);
    snprintf(msg, sizeof msg, "%s", memra_last_error());
    CHILD_CHECK(strstr(msg, "the path is 699 bytes, longer than the 511 memra keeps") != NULL);
    memra_nvrtc_info info[MEMRA_NVRTC_MAX];
    int n = 0;
    CHILD_CHECK(memra_nvrtc_list(info, MEMRA_NVRTC_MAX, &n) == MEMRA_OK);
    for (int i = 0; i < n && i < MEMRA_NVRTC_MAX; i++)
        CHILD_CHECK(strstr(info[i].path, "aaaa") == NULL && strstr(info[i].path, "bbbb") == NULL);
    /* One warning for each setting found wrong (they once shared one, and
     * CUDA_HOME's was never seen); each refusal is listed with its reason. */
    CHILD_CHECK(strstr(warnings, "MEMRA_NVRTC_PATH is 699 bytes long") != NULL);
    CHILD_CHECK(strstr(warnings, "CUDA_HOME is 491 bytes long") != NULL);
    const char *nl = strchr(warnings, '\n');
    CHILD_CHECK(nl && strchr(nl + 1, '\n') == strrchr(warnings, '\n'));
    int seen_env = 0, seen_home = 0;
    for (int i = 0; i < n && i < MEMRA_NVRTC_MAX; i++) {
        const int said = strstr(info[i].why, "longer than the 511 memra keeps") != NULL;
        seen_env |= strcmp(info[i].origin, "MEMRA_NVRTC_PATH") == 0 && said;
        seen_home |= strcmp(info[i].origin, "CUDA_HOME") == 0 && said;
    }
    CHILD_CHECK(seen_env && seen_home);
    /* the list gives each length as its warning does */
    int said_home = 0;
    for (int i = 0; i < n && i < MEMRA_NVRTC_MAX; i++)
        said_home |= strcmp(info[i].origin, "CUDA_HOME") == 0 &&
                     strstr(info[i].why, "is 491 bytes long, 514 with /lib64/") != NULL;
    CHILD_CHECK(said_home);
    int m = 0;
    CHILD_CHECK(memra_nvrtc_list(NULL, 0, &m) == MEMRA_OK && m == n); /* discovered once */
    return 0;
}

static void test_long_paths_refused_not_cut(void **state)
{
    (void)state;
    in_child(case_long_paths);
}

/* Thirty refused calls use up nothing: a good path then works, and each
 * refusal has a real reason. */
static int case_refusals_then_good(void)
{
    char msg[4096] = "", bad[300];
    memra_kernel_origin o = {0};
    bounded_child();
    child_driver(13000, 9, 0);
    for (int i = 0; i < 30; i++) {
        snprintf(bad, sizeof bad, "/no/such/folder/%d/libnvrtc.so.12", i);
        CHILD_CHECK(memra_set_nvrtc_path(bad) == MEMRA_ERR_NVRTC);
        snprintf(msg, sizeof msg, "%s", memra_last_error());
        CHILD_CHECK(strstr(msg, bad) != NULL && strstr(msg, "No such file or directory") != NULL);
    }
    CHILD_CHECK(memra_set_nvrtc_path(fake("V12_9")) == MEMRA_OK);
    CHILD_CHECK(memra_set_nvrtc_path(fake("V12_9")) == MEMRA_OK); /* twice is once */
    o = warm(msg, sizeof msg, NULL);
    CHILD_CHECK(o.ready && o.nvrtc_version == 12090);
    return 0;
}

static void test_refusals_then_good_path(void **state)
{
    (void)state;
    in_child(case_refusals_then_good);
}

/* The list is in the order engines consider its entries, refusals too:
 * a setting refused at discovery (listed then) came ahead of candidates
 * before it that were still waiting. Returns the index of the first entry
 * from `origin` (-1: none), its state in *st. */
static int list_index(const memra_nvrtc_info *info, int n, const char *origin, int *st)
{
    for (int i = 0; i < n; i++)
        if (strcmp(info[i].origin, origin) == 0) {
            if (st)
                *st = (int)info[i].state;
            return i;
        }
    return -1;
}

/* CUDA_PATH refused (relative) after a CUDA_HOME that serves: CUDA_HOME's
 * file first, CUDA_PATH's refusal after it, still listed though discovery
 * stopped at CUDA_HOME. */
static int case_refused_cuda_path_after_home(void)
{
    char msg[4096] = "";
    memra_kernel_origin o = {0};
    bounded_child();
    child_driver(13000, 9, 0);
    setenv("CUDA_HOME", toolkit_with(fake("V12_9"), 12), 1);
    setenv("CUDA_PATH", "rel/cuda", 1);
    memra_nvrtc_info info[MEMRA_NVRTC_MAX + 8];
    int n = 0, st_home = -1, st_path = -1;
    CHILD_CHECK(memra_nvrtc_list(info, MEMRA_NVRTC_MAX + 8, &n) == MEMRA_OK);
    const int home = list_index(info, n, "CUDA_HOME", &st_home);
    const int path = list_index(info, n, "CUDA_PATH", &st_path);
    snprintf(msg, sizeof msg, "CUDA_HOME at %d (state %d), CUDA_PATH at %d (state %d)", home,
             st_home, path, st_path);
    CHILD_CHECK(home >= 0 && path > home);
    CHILD_CHECK(st_home == MEMRA_NVRTC_USABLE && st_path == MEMRA_NVRTC_REFUSED);
    CHILD_CHECK(strcmp(info[path].why, "is not an absolute path") == 0);
    CHILD_CHECK(strcmp(info[path].path, "rel/cuda") == 0);
    return 0;
}

static void test_list_order_refused_cuda_path_after_home(void **state)
{
    (void)state;
    in_child(case_refused_cuda_path_after_home);
}

/* A CUDA_HOME without NVRTC after MEMRA_NVRTC_PATH and a path set before
 * discovery: env, then the set path, then CUDA_HOME's refusal. */
static int case_empty_home_after_named(void)
{
    char msg[4096] = "";
    memra_kernel_origin o = {0};
    bounded_child();
    child_driver(13000, 9, 0);
    setenv("MEMRA_NVRTC_PATH", fake("V13_0"), 1);
    setenv("CUDA_HOME", "/no/such/cuda", 1);
    CHILD_CHECK(memra_set_nvrtc_path(fake("V12_9")) == MEMRA_OK);
    memra_nvrtc_info info[MEMRA_NVRTC_MAX + 8];
    int n = 0, st_env = -1, st_set = -1, st_home = -1;
    CHILD_CHECK(memra_nvrtc_list(info, MEMRA_NVRTC_MAX + 8, &n) == MEMRA_OK);
    const int env = list_index(info, n, "MEMRA_NVRTC_PATH", &st_env);
    const int set = list_index(info, n, "memra_set_nvrtc_path", &st_set);
    const int home = list_index(info, n, "CUDA_HOME", &st_home);
    snprintf(msg, sizeof msg, "env at %d, set at %d, CUDA_HOME at %d", env, set, home);
    CHILD_CHECK(env >= 0 && set > env && home > set);
    CHILD_CHECK(st_env == MEMRA_NVRTC_USABLE && st_set == MEMRA_NVRTC_NOT_TRIED &&
                st_home == MEMRA_NVRTC_REFUSED);
    CHILD_CHECK(strstr(info[home].why, "no libnvrtc.so.13, .12 or .11.2") != NULL);
    /* The same order once every candidate is tried: an engine that needs
     * the second (none here) would open it next, then list the refusal. */
    CHILD_CHECK(memra_nvrtc_open_next(memra_driver_get()) == 1);
    CHILD_CHECK(memra_nvrtc_open_next(memra_driver_get()) == 1);
    int m = 0;
    CHILD_CHECK(memra_nvrtc_list(info, MEMRA_NVRTC_MAX + 8, &m) == MEMRA_OK && m == n);
    CHILD_CHECK(list_index(info, m, "MEMRA_NVRTC_PATH", NULL) == env &&
                list_index(info, m, "memra_set_nvrtc_path", &st_set) == set &&
                list_index(info, m, "CUDA_HOME", &st_home) == home);
    CHILD_CHECK(st_set == MEMRA_NVRTC_USABLE && st_home == MEMRA_NVRTC_REFUSED);
    return 0;
}

static void test_list_order_empty_home_after_named(void **state)
{
    (void)state;
    in_child(case_empty_home_after_named);
}

/* ---- the log callback may call memra ------------------------------------- */

/* A callback that calls memra: the discovery lock or the engine's load lock
 * held around the warning hung it (and every thread's first engine). */
static memra_engine *cb_engine;
static int cb_calls, cb_failed;
static void calls_memra(memra_log_level level, const char *message, void *user)
{
    catch_warning(level, message, user);
    cb_calls++;
    int n = 0;
    memra_nvrtc_info info[8];
    cb_failed += memra_nvrtc_available(&n) != MEMRA_OK;
    cb_failed += memra_nvrtc_list(info, 8, &n) != MEMRA_OK;
    cb_failed += memra_set_nvrtc_path(fake("V12_9")) != MEMRA_OK;
    if (cb_engine)
        cb_failed += memra_engine_warmup(cb_engine) != MEMRA_OK;
}

/* Warned during discovery (a relative MEMRA_NVRTC_PATH). */
static int case_callback_in_discovery(void)
{
    char msg[4096] = "";
    memra_kernel_origin o = {0};
    bounded_child();
    child_driver(13000, 9, 0);
    memra_set_log_callback(calls_memra, NULL);
    setenv("MEMRA_NVRTC_PATH", "rel/libnvrtc.so.13", 1);
    int n = 0;
    CHILD_CHECK(memra_nvrtc_available(&n) == MEMRA_OK);
    snprintf(msg, sizeof msg, "%.4000s", warnings);
    CHILD_CHECK(cb_calls == 1 && cb_failed == 0);
    CHILD_CHECK(strstr(warnings, "MEMRA_NVRTC_PATH=rel/libnvrtc.so.13 is not an absolute") != NULL);
    CHILD_CHECK(state_of(fake("V12_9"), NULL, 0) >= 0); /* the callback's path was taken */
    return 0;
}

static void test_callback_may_call_memra_during_discovery(void **state)
{
    (void)state;
    in_child(case_callback_in_discovery);
}

/* Warned while an engine loads its kernel (MEMRA_FORCE_PTX neither yes nor
 * no): the callback warms the same engine up and lists NVRTC. */
static int case_callback_in_load(void)
{
    char msg[4096] = "";
    memra_kernel_origin o = {0};
    bounded_child();
    child_driver(13000, 9, 0);
    setenv("MEMRA_NVRTC_PATH", fake("V13_0"), 1);
    CHILD_CHECK(memra_engine_create(0, &cb_engine) == MEMRA_OK);
    memra_set_log_callback(calls_memra, NULL);
    setenv("MEMRA_FORCE_PTX", "perhaps", 1);
    memra_status st = memra_engine_warmup(cb_engine);
    snprintf(msg, sizeof msg, "%.4000s", st ? memra_last_error() : warnings);
    CHILD_CHECK(st == MEMRA_OK);
    CHILD_CHECK(cb_calls == 1 && cb_failed == 0);
    CHILD_CHECK(strstr(warnings, "MEMRA_FORCE_PTX=perhaps is not a yes/no value") != NULL);
    memra_engine_kernel_origin(cb_engine, &o);
    CHILD_CHECK(o.ready && !o.is_ptx);
    memra_engine_destroy(cb_engine);
    return 0;
}

static void test_callback_may_call_memra_during_a_load(void **state)
{
    (void)state;
    in_child(case_callback_in_load);
}

/* ---- the duplicate and the FIFO ---------------------------------------------- */

/* A toolkit for an older driver beside one whose lib/ and lib64/ hold the
 * same libnvrtc.so.13: under a CUDA 12.8 driver the second toolkit's 12.9
 * serves. The duplicate was loaded by /proc/self/fd/N; the loader gave back
 * the 13.0 already loaded and memra closed N, and the loader, remembering
 * the name, gave back 13.0 again for the next file opened as N: 12.9 was
 * never listed and no engine started. Candidates are known by file identity
 * now, and every load takes a descriptor number never used in a name. */
static int case_duplicate_then_older_toolkit(void)
{
    char msg[4096] = "", lib64[700], lib[700], older[700];
    memra_kernel_origin o = {0};
    bounded_child();
    child_driver(12080, 9, 0);
    const char *home = toolkit_with(fake("V13_0"), 13);
    char home_copy[400];
    snprintf(home_copy, sizeof home_copy, "%s", home);
    snprintf(lib64, sizeof lib64, "%s/lib64/libnvrtc.so.13", home_copy);
    snprintf(lib, sizeof lib, "%s/lib", home_copy);
    CHILD_CHECK(mkdir(lib, 0700) == 0);
    snprintf(lib, sizeof lib, "%s/lib/libnvrtc.so.13", home_copy);
    CHILD_CHECK(symlink(fake("V13_0"), lib) == 0);
    setenv("CUDA_HOME", home_copy, 1);
    const char *older_home = toolkit_with(fake("V12_9"), 12);
    snprintf(older, sizeof older, "%s/lib64/libnvrtc.so.12", older_home);
    setenv("CUDA_PATH", older_home, 1);
    o = warm(msg, sizeof msg, NULL);
    CHILD_CHECK(o.ready && o.nvrtc_version == 12090 && !o.is_ptx && o.arch == 90);
    CHILD_CHECK(strcmp(o.nvrtc_path, older) == 0);
    CHILD_CHECK(state_of(lib64, NULL, 0) == MEMRA_NVRTC_USABLE);
    CHILD_CHECK(state_of(lib, NULL, 0) == -1); /* the same file: listed once */
    CHILD_CHECK(state_of(older, NULL, 0) == MEMRA_NVRTC_USABLE);
    return 0;
}

static void test_duplicate_toolkit_file_then_older_toolkit(void **state)
{
    (void)state;
    in_child(case_duplicate_then_older_toolkit);
}

/* The FIFO case runs in a program started with LD_LIBRARY_PATH naming a
 * folder of FIFOs (the loader reads it at start only): this test program
 * again, with this argument. By the path it was started as (meson gives an
 * absolute one): under valgrind /proc/self/exe is valgrind's. */
#define FIFO_CHILD_ARG "--discover-with-fifos-on-the-loader-path"
static const char *self_path = "/proc/self/exe";

/* Discovery with libnvrtc.so.13, .12 and .11.2 FIFOs on LD_LIBRARY_PATH:
 * "is one already loaded?" asked dlopen(soname, RTLD_NOLOAD), which opens
 * what it finds on the search path, and blocked on the FIFO for ever. Each
 * soname candidate is refused as not a regular file, and the named NVRTC
 * serves. */
static int fifo_child(const char *where)
{
    char msg[4096] = "", why[256] = "";
    memra_kernel_origin o = {0};
    bounded_child();
    child_driver(13000, 9, 0);
    setenv("MEMRA_NVRTC_PATH", fake("V13_0"), 1);
    int n = 0;
    CHILD_CHECK(memra_nvrtc_available(&n) == MEMRA_OK && n == 1);
    while (memra_nvrtc_open_next(memra_driver_get()))
        ;
    CHILD_CHECK(state_of("libnvrtc.so.12", why, sizeof why) == MEMRA_NVRTC_REFUSED);
    snprintf(msg, sizeof msg, "%s", why);
    CHILD_CHECK(strstr(why, where) != NULL);
    o = warm(msg, sizeof msg, NULL);
    CHILD_CHECK(o.ready && o.nvrtc_version == 13000);
    return 0;
}

/* This test program run again as a child with `arg mode` (a child's part
 * of a test), a clean environment, LD_LIBRARY_PATH `llp` (NULL: unset) and
 * working directory `cwd` (NULL: this one's): its wait status. */
static int exec_self(const char *llp, const char *cwd, const char *arg, const char *mode)
{
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        clean_env();
        if (llp)
            setenv("LD_LIBRARY_PATH", llp, 1);
        else
            unsetenv("LD_LIBRARY_PATH");
        if (cwd && chdir(cwd) != 0)
            _exit(7);
        char *const argv[] = {"test_nvrtc_discovery", (char *)arg, (char *)mode, NULL};
        execv(self_path, argv);
        perror("execv");
        _exit(6);
    }
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    return ws;
}

/* The FIFO child, started with LD_LIBRARY_PATH `llp` (with "%s" in it: the
 * folder of FIFOs; NULL: unset) and, where `in_cwd`, that folder as its
 * working directory: the loader searches an empty element of the path as
 * the working directory, and the screen must too. The FIFOs go in `dir`
 * (NULL: a fresh folder) under `sub` (a folder the loader searches for
 * its CPU, or ""); the child's refusal must say `where`. */
static void run_fifo_child_in(const char *llp, int in_cwd, const char *dir_, const char *sub,
                              const char *where)
{
    char dir[1100], fifo[1300], path[1200];
    static int made;
    if (dir_)
        snprintf(dir, sizeof dir, "%s", dir_);
    else
        snprintf(dir, sizeof dir, "%s/fifo-llp-%ld-%d", tmp, (long)getpid(), made++);
    snprintf(path, sizeof path, "mkdir -p '%s/%s'", dir, sub);
    assert_int_equal(system(path), 0);
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"};
    for (int i = 0; i < 3; i++) {
        snprintf(fifo, sizeof fifo, "%s/%s/%s", dir, sub, names[i]);
        assert_int_equal(mkfifo(fifo, 0600), 0);
    }
    if (llp)
        snprintf(path, sizeof path, llp, dir);
    const int ws = exec_self(llp ? path : NULL, in_cwd ? dir : NULL, FIFO_CHILD_ARG, where);
    for (int i = 0; i < 3; i++) {
        snprintf(fifo, sizeof fifo, "%s/%s/%s", dir, sub, names[i]);
        unlink(fifo);
    }
    assert_true(WIFEXITED(ws)); /* killed by SIGALRM: discovery blocked */
    assert_int_equal(WEXITSTATUS(ws), 0);
}

static void run_fifo_child(const char *llp, int in_cwd)
{
    run_fifo_child_in(llp, in_cwd, NULL, "", "in LD_LIBRARY_PATH is not a regular file (a FIFO)");
}

static void test_fifo_on_the_loader_path(void **state)
{
    (void)state;
    run_fifo_child("%s", 0);
}

/* An empty element of LD_LIBRARY_PATH (last, first or between two) is the
 * working directory to the loader: FIFOs there were not screened, and
 * discovery blocked on them for ever. */
static void test_fifo_in_cwd_by_a_trailing_empty_element(void **state)
{
    (void)state;
    run_fifo_child("/nonexistent-memra:", 1);
}

static void test_fifo_in_cwd_by_a_leading_empty_element(void **state)
{
    (void)state;
    run_fifo_child(":/nonexistent-memra", 1);
}

static void test_fifo_in_cwd_by_an_inner_empty_element(void **state)
{
    (void)state;
    run_fifo_child("/nonexistent-memra::/nonexistent-memra-2", 1);
}

/* The loader searches a folder's CPU subfolders before the folder:
 * glibc-hwcaps/x86-64-v2 and the like (glibc 2.33 on), and before glibc
 * 2.37 tls/ and <platform>/. A FIFO there was not screened and blocked
 * discovery for ever. */
static void test_fifo_in_a_glibc_hwcaps_subfolder(void **state)
{
    (void)state;
    run_fifo_child_in("%s", 0, NULL, "glibc-hwcaps/x86-64-v2",
                      "glibc-hwcaps/x86-64-v2/libnvrtc.so.12 in LD_LIBRARY_PATH is not a regular "
                      "file (a FIFO)");
}

static void test_fifo_in_a_legacy_tls_subfolder(void **state)
{
    (void)state;
    run_fifo_child_in("%s", 0, NULL, "tls",
                      "tls/libnvrtc.so.12 in LD_LIBRARY_PATH is not a regular file (a FIFO)");
}

/* The program's RUNPATH (tests/meson.build gives this one
 * $ORIGIN/nvrtc-runpath) is searched too, LD_LIBRARY_PATH or not: the
 * screen asks the loader for its whole search path. */
static void test_fifo_on_the_programs_runpath(void **state)
{
    (void)state;
    char dir[1100];
    snprintf(dir, sizeof dir, "%s", self_path);
    char *slash = strrchr(dir, '/');
    assert_non_null(slash);
    snprintf(slash, sizeof dir - (size_t)(slash - dir), "/nvrtc-runpath");
    run_fifo_child_in(NULL, 0, dir, "",
                      "nvrtc-runpath/libnvrtc.so.12 on the loader's search path is not a regular "
                      "file (a FIFO)");
    rmdir(dir);
}

/* A FIFO named after what a candidate needs, on LD_LIBRARY_PATH: a library
 * it needs (DT_NEEDED: the real NVRTC's librt.so.1; here the stand-in's
 * libmemra-fake-dep.so.1), which the loader searches for as it loads the
 * candidate, by descriptor too; or the builtins library NVRTC loads at its
 * first compile (libnvrtc-builtins.so.13.0). Each blocked the process for
 * ever (an outside review); now the candidate is refused, saying why, and
 * the next serves. */
#define NEEDS_CHILD_ARG "--discover-with-a-fifo-it-needs"

static int needs_child(const char *mode)
{
    char msg[4096] = "", why[256] = "";
    memra_kernel_origin o = {0};
    bounded_child();
    child_driver(13000, 9, 0);
    const int dep = strcmp(mode, "dep") == 0;
    const char *first = fake(dep ? "V13_0_NEEDS" : "V13_0");
    setenv("MEMRA_NVRTC_PATH", first, 1);
    CHILD_CHECK(memra_set_nvrtc_path(fake("V12_9")) == MEMRA_OK);
    o = warm(msg, sizeof msg, NULL);
    CHILD_CHECK(o.ready && o.nvrtc_version == 12090);
    CHILD_CHECK(state_of(first, why, sizeof why) == MEMRA_NVRTC_REFUSED);
    snprintf(msg, sizeof msg, "%s", why);
    CHILD_CHECK(strstr(why, dep ? "needs libmemra-fake-dep.so.1, and "
                                : "loads libnvrtc-builtins.so.13.0 when it compiles, and ") !=
                NULL);
    CHILD_CHECK(strstr(why, "in LD_LIBRARY_PATH is not a regular file (a FIFO)") != NULL);
    return 0;
}

static void run_needs_child(const char *mode, const char *fifo_name)
{
    char dir[400], fifo[700];
    snprintf(dir, sizeof dir, "%s/needs-%s-%ld", tmp, mode, (long)getpid());
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(fifo, sizeof fifo, "%s/%s", dir, fifo_name);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    const int ws = exec_self(dir, NULL, NEEDS_CHILD_ARG, mode);
    unlink(fifo);
    rmdir(dir);
    assert_true(WIFEXITED(ws)); /* killed by SIGALRM: the load blocked */
    assert_int_equal(WEXITSTATUS(ws), 0);
}

static void test_fifo_named_after_a_library_nvrtc_needs(void **state)
{
    (void)state;
    run_needs_child("dep", "libmemra-fake-dep.so.1");
}

static void test_fifo_named_after_nvrtcs_builtins(void **state)
{
    (void)state;
    run_needs_child("builtins", "libnvrtc-builtins.so.13.0");
}

/* A soname only ld.so.cache knows (a folder of /etc/ld.so.conf.d: a conda
 * environment's lib, say) is screened at the cache's path for it: a FIFO
 * there blocked dlopen as one on LD_LIBRARY_PATH did. A cache of the
 * loader's current format ("glibc-ld.so.cache1.1", 48-byte header, 24-byte
 * entries of flags, key, value offsets from the header), written here. */
static void write_ld_cache(const char *file, const char *const *kv, uint32_t n)
{
    char buf[4096] = {0};
    memcpy(buf, "glibc-ld.so.cache1.1", 20);
    memcpy(buf + 20, &n, 4);
    size_t str = 48 + 24 * (size_t)n;
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t key = (uint32_t)str;
        str += (size_t)snprintf(buf + str, sizeof buf - str, "%s", kv[2 * i]) + 1;
        const uint32_t value = (uint32_t)str;
        str += (size_t)snprintf(buf + str, sizeof buf - str, "%s", kv[2 * i + 1]) + 1;
        const int32_t flags = 0x0303; /* ELF, x86-64 libc6 */
        memcpy(buf + 48 + 24 * i, &flags, 4);
        memcpy(buf + 48 + 24 * i + 4, &key, 4);
        memcpy(buf + 48 + 24 * i + 8, &value, 4);
    }
    const uint32_t len = (uint32_t)(str - 48 - 24 * (size_t)n);
    memcpy(buf + 24, &len, 4);
    FILE *f = fopen(file, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, str, f), str);
    fclose(f);
}

static void test_fifo_known_only_to_ld_so_cache(void **state)
{
    (void)state;
    char dir[400], fifo[500], lib[500], cache[500], why[512] = "";
    snprintf(dir, sizeof dir, "%s/ldcache-%ld", tmp, (long)getpid());
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(fifo, sizeof fifo, "%s/libnvrtc.so.12", dir);
    snprintf(lib, sizeof lib, "%s/libnvrtc.so.13", dir);
    snprintf(cache, sizeof cache, "%s/ld.so.cache", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    copy_file(fake("V13_0"), lib, 0644);
    const char *const kv[] = {"libnvrtc.so.13", lib, "libnvrtc.so.12", fifo};
    write_ld_cache(cache, kv, 2);
    const char *saved = memra_ld_cache_path;
    memra_ld_cache_path = cache;
    const int bad12 = memra_screen_name("libnvrtc.so.12", NULL, why, sizeof why);
    char why13[512] = "";
    const int bad13 = memra_screen_name("libnvrtc.so.13", NULL, why13, sizeof why13);
    memra_ld_cache_path = saved;
    unlink(fifo), unlink(lib), unlink(cache), rmdir(dir);
    assert_true(bad12);
    assert_non_null(strstr(why, "libnvrtc.so.12 (ld.so.cache's entry for it) is not a regular "
                                "file (a FIFO)"));
    assert_false(bad13); /* a regular file: taken as the loader takes it */
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

/* A version no release has (a cache entry's header says which NVRTC built
 * it, and a corrupt one may say anything): no target, and no int overflow
 * on the way. */
static void test_target_of_an_impossible_version(void **state)
{
    (void)state;
    memra_nvrtc nv = mock_nv;
    char why[256];
    int arch;
    static const int a[] = {75, 80, 86, 89, 90, 100, 120};
    memcpy(nv.archs, a, sizeof a), nv.n_archs = 7;
    static const int bad[][2] = {{12, 300000000}, {12, -1}, {0, 0}, {-5, 0}, {1000, 0}, {12, 100}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        nv.major = bad[i][0], nv.minor = bad[i][1];
        for (int is_ptx = 0; is_ptx < 2; is_ptx++) {
            why[0] = 0;
            assert_false(memra_jit_target(&nv, 90, 13000, is_ptx, &arch, why, sizeof why));
            assert_non_null(strstr(why, "is no CUDA release's"));
        }
    }
    nv.major = 999, nv.minor = 99; /* the largest there may be: judged, not refused */
    assert_false(memra_jit_target(&nv, 90, 13000, 0, &arch, why, sizeof why));
    assert_non_null(strstr(why, "newer than the driver"));
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

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], FIFO_CHILD_ARG) == 0)
        return fifo_child(argv[2]);
    if (argc == 3 && strcmp(argv[1], NEEDS_CHILD_ARG) == 0)
        return needs_child(argv[2]);
    static char resolved[PATH_MAX];
    if (argc > 0 && argv[0][0] == '/')
        self_path = argv[0];
    else if (argc > 0 && strchr(argv[0], '/') && realpath(argv[0], resolved))
        self_path = resolved; /* run by hand as ./test_nvrtc_discovery */
    snprintf(tmp, sizeof tmp, "/tmp/memra-nvrtc-choice-XXXXXX");
    assert_non_null(mkdtemp(tmp));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_newer_major_skipped),
        cmocka_unit_test(test_only_newer_major),
        cmocka_unit_test(test_already_loaded_comes_first),
        cmocka_unit_test(test_env_wins_over_loader_path),
        cmocka_unit_test(test_nvrtc_with_an_impossible_version_is_refused),
        cmocka_unit_test(test_set_nvrtc_path),
        cmocka_unit_test(test_load_failure_falls_through),
        cmocka_unit_test(test_plan_more_opens_the_next),
        cmocka_unit_test(test_plan_more_after_another_opened),
        cmocka_unit_test(test_compile_failure_names_everything),
        cmocka_unit_test(test_every_failure_named),
        cmocka_unit_test(test_fifo_at_env_path),
        cmocka_unit_test(test_fifo_in_toolkit),
        cmocka_unit_test(test_fifo_at_set_path),
        cmocka_unit_test(test_untrusted_toolkits_are_not_loaded),
        cmocka_unit_test(test_named_path_trusted_as_named),
        cmocka_unit_test(test_first_usable_stops),
        cmocka_unit_test(test_relative_paths),
        cmocka_unit_test(test_long_paths_refused_not_cut),
        cmocka_unit_test(test_refusals_then_good_path),
        cmocka_unit_test(test_list_order_refused_cuda_path_after_home),
        cmocka_unit_test(test_list_order_empty_home_after_named),
        cmocka_unit_test(test_callback_may_call_memra_during_discovery),
        cmocka_unit_test(test_callback_may_call_memra_during_a_load),
        cmocka_unit_test(test_duplicate_toolkit_file_then_older_toolkit),
        cmocka_unit_test(test_fifo_on_the_loader_path),
        cmocka_unit_test(test_fifo_in_cwd_by_a_trailing_empty_element),
        cmocka_unit_test(test_fifo_in_cwd_by_a_leading_empty_element),
        cmocka_unit_test(test_fifo_in_cwd_by_an_inner_empty_element),
        cmocka_unit_test(test_fifo_in_a_glibc_hwcaps_subfolder),
        cmocka_unit_test(test_fifo_in_a_legacy_tls_subfolder),
        cmocka_unit_test(test_fifo_on_the_programs_runpath),
        cmocka_unit_test(test_fifo_named_after_a_library_nvrtc_needs),
        cmocka_unit_test(test_fifo_named_after_nvrtcs_builtins),
        cmocka_unit_test(test_fifo_known_only_to_ld_so_cache),
        cmocka_unit_test_setup_teardown(test_newer_minor_sm_takes_compatible_cubin, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_old_sm_takes_older_nvrtc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cubin_preferred_over_earlier_ptx, setup, teardown),
        cmocka_unit_test_setup_teardown(test_target_rules, setup, teardown),
        cmocka_unit_test_setup_teardown(test_target_of_an_impossible_version, setup, teardown),
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
