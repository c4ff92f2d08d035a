/* The on-disk kernel cache: hit and miss, key sensitivity, corrupt entries,
 * racing processes, eviction, and everything a hostile or broken folder can
 * do (foreign owners, loose modes, symlinks, FIFOs, held locks, debris, file
 * size limits, wrong settings). NVRTC is the mock, so compiles are counted
 * exactly. CI runs as root, so "another user" is uid 65534 by chown. */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

/* Header-only, as the library uses it: no libxxhash needed where the
 * vendored copy is built. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "jit/cache.h"
#include "jit/kernels.h"
#include "mock_driver.h"
#include "base/warn.h"

static char root[256];

static int setup(void **state)
{
    (void)state;
    mock_install();
    memra_warn_reset();
    snprintf(root, sizeof root, "/tmp/memra-cache-test-XXXXXX");
    assert_non_null(mkdtemp(root));
    setenv("MEMRA_CACHE_DIR", root, 1);
    unsetenv("MEMRA_CACHE_MAX_BYTES");
    memra_cache_lock_timeout_ms = MEMRA_CACHE_LOCK_TIMEOUT_MS;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[700];
    snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", root, root);
    assert_int_equal(system(cmd), 0);
    mock_uninstall();
    return 0;
}

static int compiles(void)
{
    return mock.calls[MOCK_nvrtcCompileProgram];
}

/* The table kernel's module: the one memra_engine_warmup loads. */
static memra_source vsrc(void)
{
    return memra_module_source(MEMRA_MODULE_VROWS);
}

static void key_for(int arch, int is_ptx, memra_cache_key *key)
{
    const memra_source src = vsrc();
    memra_cache_key_in in = {src.text, src.len, memra_jit_options,   13, 0,
                             arch,     is_ptx,  MEMRA_VERSION_STRING};
    memra_cache_key_of(&in, key);
}

static void entry_path(int arch, int is_ptx, char *buf, size_t len)
{
    memra_cache_key key;
    key_for(arch, is_ptx, &key);
    char name[MEMRA_CACHE_NAME_MAX], dir[512];
    memra_cache_entry_name(&key, is_ptx, name, sizeof name);
    assert_true(memra_cache_dir(dir, sizeof dir));
    snprintf(buf, len, "%s/%s", dir, name);
}

/* The sm_`arch` CUBIN entry's path, and its lock file's. */
static void lock_path(int arch, char *p, size_t pn, char *lock, size_t ln)
{
    entry_path(arch, 0, p, pn);
    snprintf(lock, ln, "%s.lock", p);
}

/* 1 if the file at `path` is a valid entry for sm_`arch` CUBIN. */
static int entry_valid(const char *path, int arch)
{
    memra_cache_key key;
    key_for(arch, 0, &key);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    memra_image img;
    int ok = memra_cache_parse(buf, n, &key, &img);
    memra_image_free(&img);
    return ok;
}

/* Writes a well-formed entry (right magic, key and checksum) holding
 * `image`: what someone with write access to the folder could plant. */
static void plant_entry(const char *path, int arch, const char *image)
{
    memra_cache_key key;
    key_for(arch, 0, &key);
    char dir[512], name[MEMRA_CACHE_NAME_MAX], tmp[300];
    snprintf(tmp, sizeof tmp, "%s/plant-XXXXXX", root);
    assert_non_null(mkdtemp(tmp));
    setenv("MEMRA_CACHE_DIR", tmp, 1);
    memra_cache_entry_name(&key, 0, name, sizeof name);
    memra_image img = {(char *)image, strlen(image) + 1, 0, arch};
    const memra_source src = vsrc();
    memra_cache_put(&mock_nv, &src, arch, 0, &img);
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    assert_true(entry_valid(dir, arch));
    assert_int_equal(rename(dir, path), 0);
    setenv("MEMRA_CACHE_DIR", root, 1);
}

static memra_image get_img(int arch, int *from_cache)
{
    memra_image img;
    const memra_source src = vsrc();
    assert_int_equal(memra_cache_get_image(&mock_nv, &src, arch, 0, &img, from_cache), MEMRA_OK);
    return img;
}

static void get(int arch, int want_from_cache)
{
    int from_cache = -1;
    memra_image img = get_img(arch, &from_cache);
    assert_int_equal(from_cache, want_from_cache);
    assert_int_equal(img.size, sizeof "MOCKIMG-CUBIN");
    assert_memory_equal(img.data, "MOCKIMG-CUBIN", img.size);
    memra_image_free(&img);
}

/* Runs `fn` with stderr going to a file; returns what it printed. */
static char stderr_text[4096];
static const char *capture_stderr(void (*fn)(void))
{
    char path[300];
    snprintf(path, sizeof path, "%s.stderr", root);
    fflush(stderr);
    int saved = dup(2);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    fn();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    size_t n = fread(stderr_text, 1, sizeof stderr_text - 1, f);
    stderr_text[n] = 0;
    fclose(f);
    unlink(path);
    return stderr_text;
}

static void count_lines(const char *s, const char *needle, int want)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p++)
        n++;
    if (n != want)
        fail_msg("'%s' appears %d times, want %d, in:\n%s", needle, n, want, s);
}

static int file_exists(const char *p)
{
    struct stat sb;
    return lstat(p, &sb) == 0;
}

/* ---- the basics ---------------------------------------------------------- */

static void test_miss_then_hit(void **state)
{
    (void)state;
    get(90, 0);
    assert_int_equal(compiles(), 1);
    char p[1200];
    entry_path(90, 0, p, sizeof p);
    assert_true(entry_valid(p, 90));
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
        assert_false(entry_valid(p, 90)); /* detected */
        int before = compiles();
        get(90, 0); /* rebuilt, no error to the caller */
        assert_int_equal(compiles(), before + 1);
        assert_true(entry_valid(p, 90)); /* and replaced */
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

/* 32 processes start at once on an empty cache: one compiles, the others
 * wait on the lock, then read its entry; every one gets a valid image and no
 * torn entry or temp file is left. */
static void test_racing_processes_compile_once(void **state)
{
    (void)state;
    enum { P = 32 };
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
            const memra_source src = vsrc();
            memra_status st = memra_cache_get_image(&mock_nv, &src, 90, 0, &img, &fc);
            int valid = st == MEMRA_OK && img.size == sizeof "MOCKIMG-CUBIN" &&
                        memcmp(img.data, "MOCKIMG-CUBIN", img.size) == 0;
            _exit((valid ? 0 : 100) + mock.calls[MOCK_nvrtcCompileProgram]);
        }
    }
    close(gate[0]);
    close(gate[1]);
    int total = 0;
    for (int i = 0; i < P; i++) {
        int ws;
        assert_int_equal(waitpid(pids[i], &ws, 0), pids[i]);
        assert_true(WIFEXITED(ws));
        assert_true(WEXITSTATUS(ws) < 100); /* a valid image */
        total += WEXITSTATUS(ws);
    }
    assert_int_equal(total, 1);
    char p[1200];
    entry_path(90, 0, p, sizeof p);
    assert_true(entry_valid(p, 90));
    get(90, 1);
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
    assert_false(file_exists(p80)); /* oldest evicted */
    assert_true(file_exists(p86));  /* recently used kept */
    assert_true(file_exists(p89));  /* the new one kept */
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
    static const char *offs[] = {"off", "OFF", "Off"};
    for (int i = 0; i < 3; i++) {
        setenv("MEMRA_CACHE_DIR", offs[i], 1);
        get(90, 0);
        get(90, 0);
        assert_int_equal(compiles(), 2 * (i + 1));
        assert_false(file_exists(dir));
        assert_false(file_exists(offs[i])); /* never a folder named "OFF" */
    }
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

/* ---- trust: planted images never reach the caller ------------------------- */

/* A valid entry holding someone else's image is planted, then the folder or
 * the entry is made foreign in one way or another: the image the caller gets
 * is always the one it compiled, and one warning says why. */
static void expect_planted_ignored(const char *why_fragment)
{
    int from_cache = -1;
    memra_image img = get_img(90, &from_cache);
    assert_int_equal(from_cache, 0);
    assert_memory_equal(img.data, "MOCKIMG-CUBIN", sizeof "MOCKIMG-CUBIN");
    memra_image_free(&img);
    (void)why_fragment;
}

static const char *planted_why;
static void get_planted(void)
{
    expect_planted_ignored(planted_why);
    expect_planted_ignored(planted_why); /* still not used, no second warning */
}

static void check_planted(const char *why)
{
    planted_why = why;
    const char *err = capture_stderr(get_planted);
    count_lines(err, "memra: warning:", 1);
    if (!strstr(err, why))
        fail_msg("warning does not say '%s': %s", why, err);
    assert_int_equal(compiles(), 2);
}

static void test_folder_of_another_user_is_not_used(void **state)
{
    (void)state;
    char p[1200];
    entry_path(90, 0, p, sizeof p);
    plant_entry(p, 90, "MOCKIMG-EVIL");
    assert_int_equal(chown(root, 65534, 65534), 0);
    check_planted("owned by uid 65534");
}

static void test_world_writable_folder_is_not_used(void **state)
{
    (void)state;
    char p[1200];
    entry_path(90, 0, p, sizeof p);
    plant_entry(p, 90, "MOCKIMG-EVIL");
    assert_int_equal(chmod(root, 0777), 0);
    check_planted("writable by group or others");
}

static void test_entry_of_another_user_is_not_used(void **state)
{
    (void)state;
    char p[1200];
    entry_path(90, 0, p, sizeof p);
    plant_entry(p, 90, "MOCKIMG-EVIL");
    assert_int_equal(chown(p, 65534, 65534), 0);
    check_planted("owned by uid 65534");
    assert_true(file_exists(p)); /* not ours to delete either */
}

static void test_group_writable_entry_is_not_used(void **state)
{
    (void)state;
    char p[1200];
    entry_path(90, 0, p, sizeof p);
    plant_entry(p, 90, "MOCKIMG-EVIL");
    assert_int_equal(chmod(p, 0660), 0);
    check_planted("writable by group or others");
}

static void test_symlinked_entry_is_not_followed(void **state)
{
    (void)state;
    char p[1200], elsewhere[400];
    entry_path(90, 0, p, sizeof p);
    snprintf(elsewhere, sizeof elsewhere, "%s.evil-entry", root);
    plant_entry(elsewhere, 90, "MOCKIMG-EVIL");
    assert_int_equal(symlink(elsewhere, p), 0);
    check_planted("symbolic link");
    assert_true(entry_valid(elsewhere, 90)); /* the link's target is untouched */
    unlink(elsewhere);
}

static void test_symlinked_folder_is_not_followed(void **state)
{
    (void)state;
    char link[400];
    snprintf(link, sizeof link, "%s.link", root);
    assert_int_equal(symlink(root, link), 0);
    setenv("MEMRA_CACHE_DIR", link, 1);
    planted_why = "symbolic link";
    const char *err = capture_stderr(get_planted);
    assert_non_null(strstr(err, "symbolic link"));
    assert_int_equal(compiles(), 2);
    unlink(link);
}

/* A link to the folder named with a trailing slash, or with "/." after
 * it: O_NOFOLLOW guards a path's last component as written, and these made
 * the link's target the folder (an outside review wrote entries through
 * both). The slash is dropped and the link refused; a "." or ".."
 * component turns the cache off. */
static void symlinked_folder_as(const char *tail, const char *why)
{
    char link[400], dir[420];
    snprintf(link, sizeof link, "%s.link", root);
    assert_int_equal(symlink(root, link), 0);
    snprintf(dir, sizeof dir, "%s%s", link, tail);
    setenv("MEMRA_CACHE_DIR", dir, 1);
    planted_why = why;
    const char *err = capture_stderr(get_planted);
    if (!strstr(err, why))
        fail_msg("warning does not say '%s': %s", why, err);
    assert_int_equal(compiles(), 2);
    unlink(link);
}

static void test_symlinked_folder_with_a_trailing_slash_is_not_followed(void **state)
{
    (void)state;
    symlinked_folder_as("//", "symbolic link");
}

static void test_symlinked_folder_with_a_dot_is_not_followed(void **state)
{
    (void)state;
    symlinked_folder_as("/.", "\".\" or \"..\" component");
}

static void test_dot_dot_in_the_folder_turns_the_cache_off(void **state)
{
    (void)state;
    symlinked_folder_as("/../x", "\".\" or \"..\" component");
}

/* A trailing slash on a good folder is the folder: the second get reads
 * the first's entry. */
static void test_folder_with_a_trailing_slash_is_used(void **state)
{
    (void)state;
    char dir[420];
    snprintf(dir, sizeof dir, "%s/", root);
    setenv("MEMRA_CACHE_DIR", dir, 1);
    get(90, 0);
    get(90, 1);
    assert_int_equal(compiles(), 1);
}

/* What memra_cache_get_info (memra info) says of a folder is what the
 * cache makes of it: it said "enabled" of a regular file, a link, a FIFO
 * (found by a new-user trial). */
static int info_enabled(const char *dir, char *shown, size_t n)
{
    setenv("MEMRA_CACHE_DIR", dir, 1);
    memra_warn_reset();
    memra_cache_info info;
    assert_int_equal(memra_cache_get_info(&info), MEMRA_OK);
    snprintf(shown, n, "%s", info.dir);
    return info.enabled;
}

static void test_info_says_off_for_a_folder_the_cache_refuses(void **state)
{
    (void)state;
    char p[420], shown[1024];
    snprintf(p, sizeof p, "%s/a-file", root);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
    assert_false(info_enabled(p, shown, sizeof shown));
    assert_string_equal(shown, "");
    snprintf(p, sizeof p, "%s/a-fifo", root);
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_false(info_enabled(p, shown, sizeof shown));
    snprintf(p, sizeof p, "%s.link", root);
    assert_int_equal(symlink(root, p), 0);
    assert_false(info_enabled(p, shown, sizeof shown));
    unlink(p);
}

/* A setting the cache refuses before any folder is opened (a . or ..
 * component, a path too long to keep): off, and no dir (it once held the
 * refused path, or a 1,023-byte cut of a long one). */
static void test_info_gives_no_dir_for_a_refused_setting(void **state)
{
    (void)state;
    char p[1400], shown[1024];
    snprintf(p, sizeof p, "%s/./c", root);
    assert_false(info_enabled(p, shown, sizeof shown));
    assert_string_equal(shown, "");
    memset(p, 'a', sizeof p - 1);
    p[0] = '/';
    p[sizeof p - 1] = 0;
    assert_false(info_enabled(p, shown, sizeof shown));
    assert_string_equal(shown, "");
    setenv("MEMRA_CACHE_DIR", root, 1);
}

static void test_info_says_on_for_a_good_or_absent_folder(void **state)
{
    (void)state;
    char p[420], shown[1024];
    assert_true(info_enabled(root, shown, sizeof shown));
    assert_string_equal(shown, root);
    snprintf(p, sizeof p, "%s/not-yet", root); /* made by the first entry */
    assert_true(info_enabled(p, shown, sizeof shown));
    assert_string_equal(shown, p);
    assert_false(file_exists(p)); /* nothing created by asking */
}

static void test_lock_file_of_another_user_is_not_used(void **state)
{
    (void)state;
    char p[1200], lock[1300];
    lock_path(90, p, sizeof p, lock, sizeof lock);
    int fd = open(lock, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(chown(lock, 65534, 65534), 0);
    check_planted("owned by uid 65534");
    assert_false(file_exists(p)); /* nothing published past a foreign lock */
}

static void test_created_folders_are_private(void **state)
{
    (void)state;
    char dir[400];
    snprintf(dir, sizeof dir, "%s/a/b", root);
    setenv("MEMRA_CACHE_DIR", dir, 1);
    mode_t old = umask(0);
    get(90, 0);
    umask(old);
    struct stat sb;
    char a[400];
    snprintf(a, sizeof a, "%s/a", root);
    assert_int_equal(stat(a, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    assert_int_equal(stat(dir, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    char p[1200], lock[1300];
    lock_path(90, p, sizeof p, lock, sizeof lock);
    assert_int_equal(stat(p, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_false(file_exists(lock)); /* removed by its holder (release_lock) */
    get(90, 1);
}

/* The name older versions wrote their temp file under, planted as a link to
 * a file of the user's: publishing must neither follow nor truncate it. */
static void test_planted_temp_link_is_not_written_through(void **state)
{
    (void)state;
    char p[1200], tmp[1300], victim[400];
    entry_path(90, 0, p, sizeof p);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", p, (long)getpid());
    snprintf(victim, sizeof victim, "%s.victim", root);
    FILE *f = fopen(victim, "w");
    fputs("the user's precious file", f);
    fclose(f);
    assert_int_equal(symlink(victim, tmp), 0);
    get(90, 0);
    get(90, 1);
    f = fopen(victim, "r");
    char buf[64] = {0};
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_string_equal(buf, "the user's precious file");
    struct stat sb;
    assert_int_equal(lstat(p, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    unlink(victim);
}

/* ---- eviction touches only memra's own files ------------------------------ */

static void write_file(const char *path, const char *text, size_t size)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (size_t i = 0; i < size; i++)
        fputc(text[i % strlen(text)], f);
    fclose(f);
}

static void test_eviction_spares_the_users_files(void **state)
{
    (void)state;
    char mine[400], lookalike[400], lookalike_ptx[400];
    snprintf(mine, sizeof mine, "%s/my_project_kernel_for_hopper_sm90.cubin", root);
    snprintf(lookalike, sizeof lookalike, "%s/0123456789abcdef0123456789abcdef.cubin", root);
    snprintf(lookalike_ptx, sizeof lookalike_ptx, "%s/fedcba9876543210fedcba9876543210.ptx", root);
    write_file(mine, "user cubin", 4096);
    write_file(lookalike, "not memra's", 4096);
    write_file(lookalike_ptx, ".version 8.0", 4096);
    struct timespec old[2] = {{1000, 0}, {1000, 0}};
    utimensat(AT_FDCWD, mine, old, 0);
    utimensat(AT_FDCWD, lookalike, old, 0);
    utimensat(AT_FDCWD, lookalike_ptx, old, 0);
    assert_int_equal(memra_cache_size(root), 0); /* none of them counts */
    setenv("MEMRA_CACHE_MAX_BYTES", "1", 1);     /* evict everything evictable */
    get(90, 0);
    get(80, 0);
    assert_true(file_exists(mine));
    assert_true(file_exists(lookalike));
    assert_true(file_exists(lookalike_ptx));
}

static void test_debris_counted_then_removed(void **state)
{
    (void)state;
    char p[1200], dead[1300], live[1300], old_fmt[1300];
    entry_path(80, 0, p, sizeof p);
    /* A killed writer's temp file (pid 2^22+1 is past Linux's pid_max
     * default, so no such process), an old-format one, and a live one of
     * ours being written. */
    snprintf(dead, sizeof dead, "%s.tmp.4194305.0123456789abcdef", p);
    snprintf(old_fmt, sizeof old_fmt, "%s.tmp.4194306", p);
    snprintf(live, sizeof live, "%s.tmp.%ld.fedcba9876543210", p, (long)getpid());
    write_file(dead, "x", 1000);
    write_file(old_fmt, "y", 2000);
    write_file(live, "z", 3000);
    struct timespec minute_ago[2] = {{time(NULL) - 60, 0}, {time(NULL) - 60, 0}};
    utimensat(AT_FDCWD, dead, minute_ago, 0);
    utimensat(AT_FDCWD, old_fmt, minute_ago, 0);
    assert_int_equal(memra_cache_size(root), 6000); /* debris takes room: counted */
    get(90, 0);                                     /* publishing runs the eviction pass */
    assert_false(file_exists(dead));
    assert_false(file_exists(old_fmt));
    assert_true(file_exists(live)); /* its writer is alive and it is fresh */
    /* A live writer's file that is hours old is debris too. */
    struct timespec hours_ago[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
    utimensat(AT_FDCWD, live, hours_ago, 0);
    get(86, 0);
    assert_false(file_exists(live));
}

/* ---- lock files ------------------------------------------------------------ */

/* A child that takes the lock on `fd` (flock) and holds it until killed;
 * returns once it holds it. */
static pid_t hold_lock(int fd)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    const pid_t holder = fork();
    assert_true(holder >= 0);
    if (holder == 0) {
        flock(fd, LOCK_EX);
        (void)!write(ready[1], "x", 1);
        pause();
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    close(ready[0]), close(ready[1]);
    return holder;
}

static int count_locks(void)
{
    DIR *d = opendir(root);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const size_t len = strlen(e->d_name);
        n += len > 5 && strcmp(e->d_name + len - 5, ".lock") == 0;
    }
    closedir(d);
    return n;
}

/* One lock file was left for every entry ever made (empty, never
 * evicted): the holder now removes its own before letting go. */
static void test_lock_files_do_not_pile_up(void **state)
{
    (void)state;
    get(90, 0);
    get(80, 0);
    get(86, 0);
    get(90, 1);
    assert_int_equal(count_locks(), 0);
}

/* Lock files an older memra or a killed process left are removed by the
 * next eviction pass, each taken first; one a live process holds stays. */
static void test_idle_lock_files_are_removed_held_one_kept(void **state)
{
    (void)state;
    char p[1200], stale_a[1300], stale_b[1300], held[1300];
    get(80, 0); /* an entry, whose lock an older memra would have left */
    entry_path(80, 0, p, sizeof p);
    snprintf(stale_a, sizeof stale_a, "%s.lock", p);
    entry_path(75, 0, p, sizeof p); /* an entry never published */
    snprintf(stale_b, sizeof stale_b, "%s.lock", p);
    entry_path(70, 0, p, sizeof p);
    snprintf(held, sizeof held, "%s.lock", p);
    const char *all[] = {stale_a, stale_b, held};
    for (int i = 0; i < 3; i++) {
        int fd = open(all[i], O_CREAT | O_WRONLY, 0600);
        assert_true(fd >= 0);
        close(fd);
    }
    int fd = open(held, O_RDWR);
    assert_true(fd >= 0);
    const pid_t holder = hold_lock(fd); /* a peer compiling sm_70 right now */
    assert_int_equal(count_locks(), 3);
    get(90, 0); /* publishing runs the eviction pass */
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    close(fd);
    assert_false(file_exists(stale_a));
    assert_false(file_exists(stale_b));
    assert_true(file_exists(held));
    get(80, 1); /* the entry itself untouched */
}

static int child_get_compiles_in_memory(void);
static int child_get_times_out(void)
{
    memra_cache_lock_timeout_ms = 1500;
    return child_get_compiles_in_memory();
}

/* A process that opened a lock file and locks it after its holder removed
 * it must not take itself for the holder: the name now holds another file,
 * which someone else may hold. Here the holder swaps the file under a
 * waiter and holds the new one: the waiter must wait on the new one (and
 * time out, compiling in memory), not compile and publish. */
static void test_waiter_on_a_removed_lock_file_locks_the_new_one(void **state)
{
    (void)state;
    char p[1200], lock[1300];
    lock_path(90, p, sizeof p, lock, sizeof lock);
    int old = open(lock, O_CREAT | O_RDWR, 0600);
    assert_true(old >= 0);
    assert_int_equal(flock(old, LOCK_EX), 0);
    pid_t waiter = fork();
    assert_true(waiter >= 0);
    if (waiter == 0) {
        alarm(20);
        _exit(child_get_times_out());
    }
    const struct timespec pause_ = {0, 300 * 1000 * 1000}; /* the waiter opens the old file */
    nanosleep(&pause_, NULL);
    assert_int_equal(unlink(lock), 0);
    int fresh = open(lock, O_CREAT | O_RDWR, 0600);
    assert_true(fresh >= 0);
    assert_int_equal(flock(fresh, LOCK_EX), 0);
    assert_int_equal(flock(old, LOCK_UN), 0);
    int ws;
    assert_int_equal(waitpid(waiter, &ws, 0), waiter);
    assert_true(WIFEXITED(ws));
    assert_int_equal(WEXITSTATUS(ws), 0); /* compiled in memory: did not take the lock */
    assert_false(file_exists(p));         /* and published nothing */
    close(fresh);
    close(old);
}

/* ---- nothing hangs -------------------------------------------------------- */

/* Runs fn in a child that must finish within `seconds`; returns its exit. */
static int within(int seconds, int (*fn)(void))
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm((unsigned)seconds); /* SIGALRM kills a hung child */
        _exit(fn());
    }
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (WIFSIGNALED(ws))
        fail_msg("the child was killed by signal %d (a hang, or SIGXFSZ)", WTERMSIG(ws));
    return WEXITSTATUS(ws);
}

static int child_get_compiles_in_memory(void)
{
    memset(mock.calls, 0, sizeof mock.calls);
    memra_image img;
    int fc = -1;
    const memra_source src = vsrc();
    memra_status st = memra_cache_get_image(&mock_nv, &src, 90, 0, &img, &fc);
    int ok = st == MEMRA_OK && fc == 0 && img.size == sizeof "MOCKIMG-CUBIN" &&
             memcmp(img.data, "MOCKIMG-CUBIN", img.size) == 0 &&
             mock.calls[MOCK_nvrtcCompileProgram] == 1;
    memra_image_free(&img);
    return ok ? 0 : 1;
}

static void test_held_lock_costs_a_compile_not_a_hang(void **state)
{
    (void)state;
    char p[1200], lock[1300];
    lock_path(90, p, sizeof p, lock, sizeof lock);
    int fd = open(lock, O_CREAT | O_RDWR, 0600);
    assert_true(fd >= 0);
    const pid_t holder = hold_lock(fd); /* a hung peer: takes the lock and never lets go */
    memra_cache_lock_timeout_ms = 300;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(within(20, child_get_compiles_in_memory), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_true(t1.tv_sec - t0.tv_sec < 10);
    assert_false(file_exists(p)); /* compiled in memory, not published */
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    close(fd);
}

/* Two modules, sm_90 and sm_80, each compiled in memory within the wait of
 * one: the first lock's wait ran out, so the second is only tried. */
static int child_two_gets_one_wait(void)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int bad = 0;
    for (int arch = 90; arch >= 80; arch -= 10) {
        memra_image img;
        int fc = -1;
        const memra_source src = vsrc();
        bad |= memra_cache_get_image(&mock_nv, &src, arch, 0, &img, &fc) != MEMRA_OK || fc != 0;
        memra_image_free(&img);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double ms =
        (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    /* one wait is 400 ms, the second a tenth of it; two whole waits would be 800 */
    return bad ? 1 : ms < 700 ? 0 : 2;
}

/* A peer that hangs holding every lock (a shared folder, another user's
 * process) costs one wait per process, not one per module: an engine loads
 * a dozen modules and more, and each added the full timeout. */
static void test_hung_locks_cost_one_wait_not_one_per_module(void **state)
{
    (void)state;
    char p90[1200], l90[1300], p80[1200], l80[1300];
    lock_path(90, p90, sizeof p90, l90, sizeof l90);
    lock_path(80, p80, sizeof p80, l80, sizeof l80);
    const int f90 = open(l90, O_CREAT | O_RDWR, 0600), f80 = open(l80, O_CREAT | O_RDWR, 0600);
    assert_true(f90 >= 0 && f80 >= 0);
    const pid_t h90 = hold_lock(f90), h80 = hold_lock(f80);
    memra_cache_lock_timeout_ms = 400;
    const int r = within(20, child_two_gets_one_wait);
    const int published = file_exists(p90) || file_exists(p80);
    /* the holders go before any assertion: one left alive would keep the
     * test's output open and its runner waiting */
    kill(h90, SIGKILL), kill(h80, SIGKILL);
    waitpid(h90, NULL, 0), waitpid(h80, NULL, 0);
    close(f90), close(f80);
    assert_int_equal(r, 0); /* 2: two waits */
    assert_false(published);
    get(90, 0); /* the peer gone: this process locks, compiles and publishes again */
    assert_true(file_exists(p90));
}

/* The peer of the test below: holds sm_90's lock, and when told to go
 * publishes the entry (put aside beforehand) and lets go as a memra holder
 * does, removing its lock file first. */
static int go_pipe[2], ready_pipe[2];
static char aside[1300];

static void live_peer(int lfd, const char *entry, const char *lock)
{
    flock(lfd, LOCK_EX);
    (void)!write(ready_pipe[1], "x", 1);
    char c;
    (void)!read(go_pipe[0], &c, 1);
    const struct timespec t = {0, 20 * 1000 * 1000};
    nanosleep(&t, NULL);
    rename(aside, entry);
    unlink(lock);
    flock(lfd, LOCK_UN);
    _exit(0);
}

/* After a wait ran out (sm_80's hung holder), sm_90's lock is held by a live
 * peer that publishes 20 ms after this process starts waiting: this process
 * must still wait for it (a tenth of the timeout) and read the entry, not
 * give up at once and compile (as the first form of the shortened waits did). */
static int child_flag_then_live_peer(void)
{
    memra_image img;
    int fc = -1;
    const memra_source src = vsrc();
    if (memra_cache_get_image(&mock_nv, &src, 80, 0, &img, &fc) != MEMRA_OK || fc != 0)
        return 1;
    memra_image_free(&img);
    memset(mock.calls, 0, sizeof mock.calls);
    (void)!write(go_pipe[1], "x", 1);
    const int ok = memra_cache_get_image(&mock_nv, &src, 90, 0, &img, &fc) == MEMRA_OK && fc == 1 &&
                   mock.calls[MOCK_nvrtcCompileProgram] == 0;
    memra_image_free(&img);
    return ok ? 0 : 2;
}

static void test_a_live_peer_is_waited_for_after_a_wait_ran_out(void **state)
{
    (void)state;
    char p90[1200], l90[1300], p80[1200], l80[1300];
    get(90, 0); /* the entry the peer will publish, put aside */
    lock_path(90, p90, sizeof p90, l90, sizeof l90);
    lock_path(80, p80, sizeof p80, l80, sizeof l80);
    snprintf(aside, sizeof aside, "%s.aside", p90);
    assert_int_equal(rename(p90, aside), 0);
    const int f80 = open(l80, O_CREAT | O_RDWR, 0600), f90 = open(l90, O_CREAT | O_RDWR, 0600);
    assert_true(f80 >= 0 && f90 >= 0);
    const pid_t hung = hold_lock(f80);
    assert_int_equal(pipe(go_pipe), 0);
    assert_int_equal(pipe(ready_pipe), 0);
    const pid_t peer = fork();
    assert_true(peer >= 0);
    if (peer == 0)
        live_peer(f90, p90, l90);
    char c;
    assert_int_equal(read(ready_pipe[0], &c, 1), 1);
    memra_cache_lock_timeout_ms = 1000; /* the short wait: 100 ms */
    const int r = within(20, child_flag_then_live_peer);
    kill(hung, SIGKILL), kill(peer, SIGKILL);
    waitpid(hung, NULL, 0), waitpid(peer, NULL, 0);
    close(f80), close(f90);
    close(go_pipe[0]), close(go_pipe[1]), close(ready_pipe[0]), close(ready_pipe[1]);
    assert_int_equal(r, 0);
    assert_true(file_exists(p90));
}

static int child_has_entry(void)
{
    char path[1200];
    const memra_source src = vsrc();
    return memra_cache_has_entry(&mock_nv, &src, 90, 0, path, sizeof path) ? 1 : 0;
}

static int child_size(void)
{
    return memra_cache_size(root) == 0 ? 0 : 1;
}

static void test_fifo_at_entry_path_blocks_nothing(void **state)
{
    (void)state;
    char p[1200];
    entry_path(90, 0, p, sizeof p);
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_int_equal(within(20, child_get_compiles_in_memory), 0);
    assert_int_equal(within(20, child_has_entry), 0); /* memra info */
    assert_int_equal(within(20, child_size), 0);
}

static void test_folder_at_entry_path(void **state)
{
    (void)state;
    char p[1200];
    entry_path(90, 0, p, sizeof p);
    assert_int_equal(mkdir(p, 0700), 0);
    assert_int_equal(within(20, child_get_compiles_in_memory), 0);
    struct stat sb;
    assert_int_equal(stat(p, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode)); /* left alone */
}

static int child_under_file_size_limit(void)
{
    struct rlimit rl = {32, 32}; /* smaller than any entry */
    setrlimit(RLIMIT_FSIZE, &rl);
    return child_get_compiles_in_memory();
}

static void test_file_size_limit_does_not_kill_the_caller(void **state)
{
    (void)state;
    assert_int_equal(within(20, child_under_file_size_limit), 0);
    char p[1200];
    entry_path(90, 0, p, sizeof p);
    assert_false(file_exists(p));
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q tmp", root);
    assert_int_not_equal(system(cmd), 0); /* no half-written temp file left */
}

/* ---- a verified entry the driver refuses is replaced ------------------------ */

static void test_refused_entry_is_replaced(void **state)
{
    (void)state;
    char p[1200];
    entry_path(90, 0, p, sizeof p);
    plant_entry(p, 90, "NOT-A-LOADABLE-IMAGE"); /* valid entry, refused by the driver */
    memra_engine *a, *b;
    memra_engine_info info;
    assert_int_equal(memra_engine_create(0, &a), MEMRA_OK);
    assert_int_equal(memra_engine_warmup(a), MEMRA_OK);
    memra_engine_get_info(a, &info);
    assert_int_equal(info.kernel_from_cache, 0);
    assert_int_equal(compiles(), 1);
    memra_engine_destroy(a);
    assert_int_equal(memra_engine_create(0, &b), MEMRA_OK);
    assert_int_equal(memra_engine_warmup(b), MEMRA_OK);
    memra_engine_get_info(b, &info);
    assert_int_equal(info.kernel_from_cache, 1); /* the replacement */
    assert_int_equal(compiles(), 1);
    memra_engine_destroy(b);
}

/* ---- the header is checked as a whole --------------------------------------- */

/* Every bit of an entry, header included, flipped alone: refused. Bytes
 * 48-63 (the NVRTC version and target) were once outside the checksum. */
static void test_every_bit_flip_is_detected(void **state)
{
    (void)state;
    memra_cache_key key;
    key_for(90, 0, &key);
    char image[96];
    for (size_t i = 0; i < sizeof image; i++)
        image[i] = (char)(i * 13 + 5);
    memra_image img = {image, sizeof image, 0, 90}, out;
    unsigned char *e;
    size_t n;
    assert_int_equal(memra_cache_entry_bytes(&key, 13, 0, &img, &e, &n), 0);
    assert_int_equal(n, MEMRA_CACHE_HEADER_BYTES + sizeof image);
    assert_true(memra_cache_parse(e, n, &key, &out));
    assert_memory_equal(out.data, image, sizeof image);
    memra_image_free(&out);
    for (size_t bit = 0; bit < 8 * n; bit++) {
        e[bit / 8] ^= (unsigned char)(1u << bit % 8);
        if (memra_cache_parse(e, n, &key, &out)) {
            memra_image_free(&out);
            fail_msg("bit %zu (byte %zu) flipped is accepted", bit, bit / 8);
        }
        e[bit / 8] ^= (unsigned char)(1u << bit % 8);
    }
    free(e);
}

/* An entry whose header says an impossible NVRTC version (a bit flip in
 * the version, or a planted file): find_any, which an engine with no NVRTC
 * runs, scored its numbers before it saw the entry was not ours, and the
 * score's version code overflowed an int (the sanitizer build halts on
 * that). Not ours, so not found, with nothing computed from its numbers. */
static void test_find_any_skips_an_impossible_version(void **state)
{
    (void)state;
    char p[1200];
    static const int32_t minors[] = {300000000, -300000000, 0x7fffffff};
    for (size_t i = 0; i < 2 * sizeof minors / sizeof minors[0]; i++) {
        const int is_ptx = (int)(i & 1u);
        const memra_source s0 = vsrc();
        memra_image made = {(char *)"MOCKIMG-CUBIN", sizeof "MOCKIMG-CUBIN", is_ptx, 90};
        memra_cache_put(&mock_nv, &s0, 90, is_ptx, &made);
        entry_path(90, is_ptx, p, sizeof p);
        FILE *f = fopen(p, "r+b");
        assert_non_null(f);
        assert_int_equal(fseek(f, 52, SEEK_SET), 0); /* the header's nvrtc_minor */
        assert_int_equal(fwrite(&minors[i / 2], 4, 1, f), 1);
        assert_int_equal(fclose(f), 0);
        const memra_source src = vsrc();
        memra_image img;
        memra_cache_found found;
        assert_int_equal(memra_cache_find_any(&src, 90, 12000, 0, &img, &found), 0);
        assert_int_equal(memra_cache_find_any(&src, 90, 13000, 0, &img, &found), 0);
    }
}

/* The same on disk, for the header's last 16 bytes: each flip is a miss
 * that compiles and replaces the entry. */
static void test_header_tail_flips_on_disk_are_rebuilt(void **state)
{
    (void)state;
    char p[1200];
    entry_path(90, 0, p, sizeof p);
    get(90, 0);
    for (int bit = 48 * 8; bit < 64 * 8; bit += 3) {
        FILE *f = fopen(p, "r+b");
        assert_non_null(f);
        fseek(f, bit / 8, SEEK_SET);
        const int c = fgetc(f);
        fseek(f, bit / 8, SEEK_SET);
        fputc(c ^ (1 << bit % 8), f);
        fclose(f);
        assert_false(entry_valid(p, 90));
        const int before = compiles();
        get(90, 0);
        assert_int_equal(compiles(), before + 1);
        assert_true(entry_valid(p, 90));
    }
}

/* An entry of the previous format (its checksum over the image only) at
 * the entry's name: never read, replaced by a fresh one; still memra's to
 * count. */
static void test_old_format_entry_is_replaced(void **state)
{
    (void)state;
    char p[1200];
    entry_path(90, 0, p, sizeof p);
    memra_cache_key key;
    key_for(90, 0, &key);
    static const char img[] = "MOCKIMG-CUBIN";
    struct {
        char magic[8];
        uint64_t size;
        unsigned char key[16], checksum[16];
        int32_t nums[4];
    } h = {{'M', 'E', 'M', 'R', 'A', 'K', '0', '2'}, sizeof img, {0}, {0}, {13, 0, 90, 0}};
    memcpy(h.key, key.bytes, 16);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(img, sizeof img));
    memcpy(h.checksum, c.digest, 16);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(&h, sizeof h, 1, f), 1);
    assert_int_equal(fwrite(img, sizeof img, 1, f), 1);
    assert_int_equal(fclose(f), 0);
    chmod(p, 0600);
    char dir[512];
    assert_true(memra_cache_dir(dir, sizeof dir));
    assert_int_equal(memra_cache_size(dir), sizeof h + sizeof img); /* counted as memra's */
    get(90, 0);                                                     /* not trusted: compiled */
    assert_int_equal(compiles(), 1);
    assert_true(entry_valid(p, 90)); /* replaced in the new format */
    get(90, 1);
    assert_int_equal(compiles(), 1);
}

/* ---- clear words for wrong settings --------------------------------------- */

static void test_size_parsing(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        int ok;
        uint64_t v;
    } cases[] = {
        {"0", 1, 0},
        {"4096", 1, 4096},
        {"1K", 1, 1024},
        {"3m", 1, 3ull << 20},
        {"2G", 1, 2ull << 30},
        {"17179869184", 1, 17179869184ull},
        {"-1", 0, 0},
        {"", 0, 0},
        {"12abc", 0, 0},
        {"1KB", 0, 0},
        {" 1", 0, 0},
        {"1.5G", 0, 0},
        {"99999999999999999999", 0, 0},
        {"17179869184G", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t v = 12345;
        int ok = memra_parse_size(cases[i].s, &v);
        if (ok != cases[i].ok || (ok && v != cases[i].v))
            fail_msg("'%s': ok %d value %llu", cases[i].s, ok, (unsigned long long)v);
    }
}

static uint64_t cap_seen;
static void read_cap(void)
{
    cap_seen = memra_cache_cap();
    cap_seen = memra_cache_cap(); /* the second read warns no more */
}

static void test_cap_garbage_warns_once_and_uses_default(void **state)
{
    (void)state;
    static const char *bad[] = {"-5", "lots", "10 MB"};
    for (int i = 0; i < 3; i++) {
        memra_warn_reset();
        setenv("MEMRA_CACHE_MAX_BYTES", bad[i], 1);
        const char *err = capture_stderr(read_cap);
        assert_int_equal(cap_seen, MEMRA_CACHE_DEFAULT_CAP);
        count_lines(err, "memra: warning:", 1);
        assert_non_null(strstr(err, bad[i]));
        assert_non_null(strstr(err, "256 MiB"));
    }
    setenv("MEMRA_CACHE_MAX_BYTES", "64M", 1);
    assert_int_equal(memra_cache_cap(), 64ull << 20);
}

static void test_cap_zero_keeps_nothing(void **state)
{
    (void)state;
    get(80, 0); /* an entry from before */
    setenv("MEMRA_CACHE_MAX_BYTES", "0", 1);
    get(90, 0);
    get(90, 0);
    assert_int_equal(compiles(), 3);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -qE '(cubin|ptx)$'", root);
    assert_int_not_equal(system(cmd), 0);
}

static int dir_result;
static char dir_buf[2048];
static void read_dir(void)
{
    dir_result = memra_cache_dir(dir_buf, 1024);
}

static void test_folder_settings(void **state)
{
    (void)state;
    setenv("HOME", "/home/z", 1);
    setenv("XDG_CACHE_HOME", "/x/y", 1);
    /* A relative MEMRA_CACHE_DIR: ignored, with a warning naming it. */
    setenv("MEMRA_CACHE_DIR", "relative/cache", 1);
    const char *err = capture_stderr(read_dir);
    assert_int_equal(dir_result, 1);
    assert_string_equal(dir_buf, "/x/y/memra");
    assert_non_null(strstr(err, "MEMRA_CACHE_DIR=relative/cache is not an absolute path"));
    /* A relative XDG_CACHE_HOME: ignored, per the XDG spec. */
    memra_warn_reset();
    unsetenv("MEMRA_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "rel/xdg", 1);
    err = capture_stderr(read_dir);
    assert_int_equal(dir_result, 1);
    assert_string_equal(dir_buf, "/home/z/.cache/memra");
    assert_non_null(strstr(err, "XDG_CACHE_HOME=rel/xdg"));
    /* Too long: off, and said so (not a silent "off"). */
    memra_warn_reset();
    char longp[1500];
    memset(longp, 'a', sizeof longp - 1);
    longp[0] = '/';
    longp[sizeof longp - 1] = 0;
    setenv("MEMRA_CACHE_DIR", longp, 1);
    err = capture_stderr(read_dir);
    assert_int_equal(dir_result, 0);
    assert_non_null(strstr(err, "longer than"));
    unsetenv("XDG_CACHE_HOME");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
        T(test_miss_then_hit),
        T(test_key_sensitivity),
        T(test_corrupt_entries_are_rebuilt),
        T(test_entry_under_wrong_key_is_rejected),
        T(test_racing_processes_compile_once),
        T(test_eviction_keeps_folder_under_cap),
        T(test_unusable_folder_compiles_in_memory),
        T(test_off_disables),
        T(test_default_folder),
        T(test_engine_second_start_pays_no_compile),
        T(test_folder_of_another_user_is_not_used),
        T(test_world_writable_folder_is_not_used),
        T(test_entry_of_another_user_is_not_used),
        T(test_group_writable_entry_is_not_used),
        T(test_symlinked_entry_is_not_followed),
        T(test_symlinked_folder_is_not_followed),
        T(test_find_any_skips_an_impossible_version),
        T(test_info_says_off_for_a_folder_the_cache_refuses),
        T(test_info_says_on_for_a_good_or_absent_folder),
        T(test_info_gives_no_dir_for_a_refused_setting),
        T(test_symlinked_folder_with_a_trailing_slash_is_not_followed),
        T(test_symlinked_folder_with_a_dot_is_not_followed),
        T(test_dot_dot_in_the_folder_turns_the_cache_off),
        T(test_folder_with_a_trailing_slash_is_used),
        T(test_lock_file_of_another_user_is_not_used),
        T(test_created_folders_are_private),
        T(test_planted_temp_link_is_not_written_through),
        T(test_eviction_spares_the_users_files),
        T(test_debris_counted_then_removed),
        T(test_held_lock_costs_a_compile_not_a_hang),
        T(test_hung_locks_cost_one_wait_not_one_per_module),
        T(test_a_live_peer_is_waited_for_after_a_wait_ran_out),
        T(test_lock_files_do_not_pile_up),
        T(test_idle_lock_files_are_removed_held_one_kept),
        T(test_waiter_on_a_removed_lock_file_locks_the_new_one),
        T(test_fifo_at_entry_path_blocks_nothing),
        T(test_folder_at_entry_path),
        T(test_file_size_limit_does_not_kill_the_caller),
        T(test_refused_entry_is_replaced),
        T(test_every_bit_flip_is_detected),
        T(test_header_tail_flips_on_disk_are_rebuilt),
        T(test_old_format_entry_is_replaced),
        T(test_size_parsing),
        T(test_cap_garbage_warns_once_and_uses_default),
        T(test_cap_zero_keeps_nothing),
        T(test_folder_settings),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
