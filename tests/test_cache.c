/* The on-disk kernel cache: hit and miss, key sensitivity, corrupt entries,
 * racing processes, eviction, unusable folders, "off". NVRTC is the mock, so
 * compiles are counted exactly. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

#include "cache.h"
#include "mock_driver.h"

static char root[256];

static int setup(void **state)
{
    (void)state;
    mock_install();
    snprintf(root, sizeof root, "/tmp/memra-cache-test-XXXXXX");
    assert_non_null(mkdtemp(root));
    setenv("MEMRA_CACHE_DIR", root, 1);
    unsetenv("MEMRA_CACHE_MAX_BYTES");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
    mock_uninstall();
    return 0;
}

static int compiles(void)
{
    return mock.calls[MOCK_nvrtcCompileProgram];
}

static void entry_path(int arch, int is_ptx, char *buf, size_t len)
{
    memra_cache_key_in in = {
        memra_kernel_vrows_src, memra_kernel_vrows_src_len, memra_jit_options, 13, 0, arch, is_ptx,
        MEMRA_VERSION_STRING};
    memra_cache_key key;
    memra_cache_key_of(&in, &key);
    char dir[512];
    assert_true(memra_cache_dir(dir, sizeof dir));
    memra_cache_entry_path(dir, &key, is_ptx, buf, len);
}

static void get(int arch, int want_from_cache)
{
    memra_image img;
    int from_cache = -1;
    assert_int_equal(memra_cache_get_image(&mock_table, arch, 0, &img, &from_cache), MEMRA_OK);
    assert_int_equal(from_cache, want_from_cache);
    assert_int_equal(img.size, sizeof "MOCKIMG-CUBIN");
    assert_memory_equal(img.data, "MOCKIMG-CUBIN", img.size);
    memra_image_free(&img);
}

static void test_miss_then_hit(void **state)
{
    (void)state;
    get(90, 0);
    assert_int_equal(compiles(), 1);
    char p[1200];
    entry_path(90, 0, p, sizeof p);
    assert_int_equal(access(p, R_OK), 0);
    get(90, 1);
    get(90, 1);
    assert_int_equal(compiles(), 1);
    get(80, 0); /* another arch is another entry */
    assert_int_equal(compiles(), 2);
}

static void test_key_sensitivity(void **state)
{
    (void)state;
    const char *opts_a[] = {"--fmad=false", NULL}, *opts_b[] = {"--fmad=true", NULL};
    const char src_a[] = "kernel a", src_b[] = "kernel b";
    memra_cache_key_in base = {src_a, sizeof src_a - 1, opts_a, 13, 0, 90, 0, "0.1.0"};
    memra_cache_key k0, k;
    memra_cache_key_of(&base, &k0);
    memra_cache_key_of(&base, &k);
    assert_memory_equal(k0.bytes, k.bytes, 16);
    memra_cache_key_in v[7];
    for (int i = 0; i < 7; i++)
        v[i] = base;
    v[0].source = src_b;
    v[1].options = opts_b;
    v[2].nvrtc_major = 12;
    v[3].nvrtc_minor = 8;
    v[4].arch = 100;
    v[5].is_ptx = 1;
    v[6].lib_version = "0.1.1";
    for (int i = 0; i < 7; i++) {
        memra_cache_key_of(&v[i], &k);
        if (memcmp(k0.bytes, k.bytes, 16) == 0)
            fail_msg("key field %d does not change the key", i);
    }
}

static void rewrite(const char *p, const char *how)
{
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    if (strcmp(how, "flip") == 0) {
        fseek(f, -3, SEEK_END);
        int c = fgetc(f);
        fseek(f, -3, SEEK_END);
        fputc(c ^ 0x40, f);
        fclose(f);
    } else {
        fclose(f);
        struct stat sb;
        stat(p, &sb);
        assert_int_equal(truncate(p, strcmp(how, "empty") == 0 ? 0 : sb.st_size / 2), 0);
    }
}

static void test_corrupt_entries_are_rebuilt(void **state)
{
    (void)state;
    char p[1200];
    entry_path(90, 0, p, sizeof p);
    get(90, 0);
    const char *hows[] = {"flip", "truncate", "empty"};
    for (int i = 0; i < 3; i++) {
        rewrite(p, hows[i]);
        memra_cache_key_in in = {
            memra_kernel_vrows_src, memra_kernel_vrows_src_len, memra_jit_options, 13, 0, 90, 0,
            MEMRA_VERSION_STRING};
        memra_cache_key key;
        memra_cache_key_of(&in, &key);
        memra_image img;
        assert_int_equal(memra_cache_read(p, &key, &img), 0); /* detected */
        int before = compiles();
        get(90, 0); /* rebuilt, no error to the caller */
        assert_int_equal(compiles(), before + 1);
        assert_int_equal(memra_cache_read(p, &key, &img), 1); /* and replaced */
        memra_image_free(&img);
        get(90, 1);
    }
}

static void test_entry_under_wrong_key_is_rejected(void **state)
{
    (void)state;
    char p90[1200], p80[1200];
    entry_path(90, 0, p90, sizeof p90);
    entry_path(80, 0, p80, sizeof p80);
    get(90, 0);
    assert_int_equal(rename(p90, p80), 0);
    get(80, 0);
    assert_int_equal(compiles(), 2);
}

/* 8 processes start at once on an empty cache: one compiles, the others
 * wait on the lock, then read its entry; every one gets a valid image. */
static void test_racing_processes_compile_once(void **state)
{
    (void)state;
    enum { P = 8 };
    mock.compile_delay_ms = 200;
    int gate[2];
    assert_int_equal(pipe(gate), 0);
    pid_t pids[P];
    for (int i = 0; i < P; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(gate[1]);
            char c;
            (void)!read(gate[0], &c, 1); /* released together */
            memset(mock.calls, 0, sizeof mock.calls);
            memra_image img;
            int fc;
            memra_status st = memra_cache_get_image(&mock_table, 90, 0, &img, &fc);
            int valid = st == MEMRA_OK && img.size == sizeof "MOCKIMG-CUBIN" &&
                        memcmp(img.data, "MOCKIMG-CUBIN", img.size) == 0;
            _exit((valid ? 0 : 10) + mock.calls[MOCK_nvrtcCompileProgram]);
        }
    }
    close(gate[0]);
    close(gate[1]);
    int total = 0;
    for (int i = 0; i < P; i++) {
        int ws;
        assert_int_equal(waitpid(pids[i], &ws, 0), pids[i]);
        assert_true(WIFEXITED(ws));
        assert_true(WEXITSTATUS(ws) < 10); /* a valid image */
        total += WEXITSTATUS(ws);
    }
    assert_int_equal(total, 1);
    get(90, 1);
    /* No temp files left behind. */
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q tmp", root);
    assert_int_not_equal(system(cmd), 0);
}

static void test_eviction_keeps_folder_under_cap(void **state)
{
    (void)state;
    char p80[1200], p86[1200], p89[1200];
    entry_path(80, 0, p80, sizeof p80);
    entry_path(86, 0, p86, sizeof p86);
    entry_path(89, 0, p89, sizeof p89);
    get(80, 0);
    get(86, 0);
    const uint64_t one = memra_cache_size(root) / 2;
    /* Make 80 the oldest, then touch 86 by using it. */
    struct timespec old[2] = {{1000, 0}, {1000, 0}};
    assert_int_equal(utimensat(AT_FDCWD, p80, old, 0), 0);
    assert_int_equal(utimensat(AT_FDCWD, p86, old, 0), 0);
    get(86, 1);
    char cap[32];
    snprintf(cap, sizeof cap, "%llu", (unsigned long long)(2 * one + one / 2));
    setenv("MEMRA_CACHE_MAX_BYTES", cap, 1);
    get(89, 0);
    assert_int_not_equal(access(p80, F_OK), 0); /* oldest evicted */
    assert_int_equal(access(p86, F_OK), 0);     /* recently used kept */
    assert_int_equal(access(p89, F_OK), 0);     /* the new one kept */
    assert_true(memra_cache_size(root) <= 2 * one + one / 2);
}

static void test_unusable_folder_compiles_in_memory(void **state)
{
    (void)state;
    char file[300], dir[340];
    snprintf(file, sizeof file, "%s/not-a-folder", root);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(dir, sizeof dir, "%s/sub", file);
    setenv("MEMRA_CACHE_DIR", dir, 1);
    get(90, 0);
    get(90, 0);
    assert_int_equal(compiles(), 2);
}

static void test_off_disables(void **state)
{
    (void)state;
    char dir[300];
    snprintf(dir, sizeof dir, "%s/never", root);
    setenv("XDG_CACHE_HOME", dir, 1);
    setenv("MEMRA_CACHE_DIR", "off", 1);
    get(90, 0);
    get(90, 0);
    assert_int_equal(compiles(), 2);
    assert_int_not_equal(access(dir, F_OK), 0);
    unsetenv("XDG_CACHE_HOME");
}

static void test_default_folder(void **state)
{
    (void)state;
    char buf[512];
    unsetenv("MEMRA_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "/x/y", 1);
    assert_true(memra_cache_dir(buf, sizeof buf));
    assert_string_equal(buf, "/x/y/memra");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/home/z", 1);
    assert_true(memra_cache_dir(buf, sizeof buf));
    assert_string_equal(buf, "/home/z/.cache/memra");
}

/* A second engine (a second process start) loads from the cache. */
static void test_engine_second_start_pays_no_compile(void **state)
{
    (void)state;
    memra_engine *a, *b;
    memra_engine_info info;
    assert_int_equal(memra_engine_create(0, &a), MEMRA_OK);
    assert_int_equal(memra_engine_warmup(a), MEMRA_OK);
    memra_engine_get_info(a, &info);
    assert_int_equal(info.kernel_from_cache, 0);
    memra_engine_destroy(a);
    assert_int_equal(memra_engine_create(0, &b), MEMRA_OK);
    assert_int_equal(memra_engine_warmup(b), MEMRA_OK);
    memra_engine_get_info(b, &info);
    assert_int_equal(info.kernel_from_cache, 1);
    assert_int_equal(compiles(), 1);
    memra_engine_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_miss_then_hit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_sensitivity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_entries_are_rebuilt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_entry_under_wrong_key_is_rejected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_racing_processes_compile_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eviction_keeps_folder_under_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unusable_folder_compiles_in_memory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_off_disables, setup, teardown),
        cmocka_unit_test_setup_teardown(test_default_folder, setup, teardown),
        cmocka_unit_test_setup_teardown(test_engine_second_start_pays_no_compile, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
