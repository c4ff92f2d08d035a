/* What memra reads from the environment, and how it says so when a value is
 * wrong: yes/no flags in the spellings people use, the cache folder when no
 * variable gives one, and values printed so that a newline in one cannot
 * forge a log line. Warnings are caught with the public log callback. */
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

#include "jit/cache_env.h"
#include "base/env.h"
#include "mock_driver.h"
#include "base/warn.h"

static char seen[8][2048];
static int n_seen;
static memra_log_level seen_level;

static void catch_log(memra_log_level level, const char *message, void *user)
{
    (void)user;
    seen_level = level;
    if (n_seen < 8)
        snprintf(seen[n_seen], sizeof seen[n_seen], "%s", message);
    n_seen++;
}

static int setup(void **state)
{
    (void)state;
    memra_warn_reset();
    n_seen = 0;
    assert_int_equal(memra_set_log_callback(catch_log, NULL), MEMRA_OK);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    memra_set_log_callback(NULL, NULL);
    unsetenv("MEMRA_FORCE_PTX");
    return 0;
}

static void test_flag_spellings(void **state)
{
    (void)state;
    static const char *yes[] = {"1", "true", "TRUE", "yes", "Yes", "on", "ON"};
    static const char *no[] = {"0", "false", "False", "no", "NO", "off", "Off"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        setenv("MEMRA_FORCE_PTX", yes[i], 1);
        if (memra_env_flag("MEMRA_FORCE_PTX", 0) != 1)
            fail_msg("'%s' is not yes", yes[i]);
        setenv("MEMRA_FORCE_PTX", no[i], 1);
        if (memra_env_flag("MEMRA_FORCE_PTX", 1) != 0)
            fail_msg("'%s' is not no", no[i]);
    }
    assert_int_equal(n_seen, 0);
    unsetenv("MEMRA_FORCE_PTX");
    assert_int_equal(memra_env_flag("MEMRA_FORCE_PTX", 0), 0);
    assert_int_equal(memra_env_flag("MEMRA_FORCE_PTX", 1), 1);
    setenv("MEMRA_FORCE_PTX", "", 1);
    assert_int_equal(memra_env_flag("MEMRA_FORCE_PTX", 0), 0);
    assert_int_equal(n_seen, 0); /* unset and empty are not wrong */
}

static void test_flag_garbage_warns_once(void **state)
{
    (void)state;
    setenv("MEMRA_FORCE_PTX", "yess", 1);
    assert_int_equal(memra_env_flag("MEMRA_FORCE_PTX", 0), 0);
    assert_int_equal(memra_env_flag("MEMRA_FORCE_PTX", 0), 0);
    assert_int_equal(n_seen, 1);
    assert_int_equal(seen_level, MEMRA_LOG_WARNING);
    assert_non_null(strstr(seen[0], "MEMRA_FORCE_PTX=yess is not a yes/no value"));
}

/* Two bad settings, two lines: warnings went once per kind, and different
 * variables shared a kind, so MEMRA_ROUTE_SPECIALIZE=maybe silenced
 * MEMRA_FORCE_PTX=garbage (found by a new-user trial). */
static void test_each_bad_flag_warns(void **state)
{
    (void)state;
    setenv("MEMRA_FORCE_PTX", "garbage", 1);
    setenv("MEMRA_ROUTE_SPECIALIZE", "maybe", 1);
    assert_int_equal(memra_env_flag("MEMRA_ROUTE_SPECIALIZE", 1), 1);
    assert_int_equal(memra_env_flag("MEMRA_FORCE_PTX", 0), 0);
    assert_int_equal(memra_env_flag("MEMRA_FORCE_PTX", 0), 0); /* each still once */
    unsetenv("MEMRA_ROUTE_SPECIALIZE");
    assert_int_equal(n_seen, 2);
    assert_non_null(strstr(seen[0], "MEMRA_ROUTE_SPECIALIZE=maybe is not a yes/no value"));
    assert_non_null(strstr(seen[1], "MEMRA_FORCE_PTX=garbage is not a yes/no value"));
}

/* The same for the cache's chain: a relative MEMRA_CACHE_DIR and a
 * relative XDG_CACHE_HOME each say so. */
static void test_each_bad_cache_variable_warns(void **state)
{
    (void)state;
    char buf[1024], home[1024] = "";
    if (getenv("HOME"))
        snprintf(home, sizeof home, "%s", getenv("HOME"));
    setenv("MEMRA_CACHE_DIR", "rel/a", 1);
    setenv("XDG_CACHE_HOME", "rel/b", 1);
    setenv("HOME", "/tmp", 1);
    assert_true(memra_cache_dir(buf, sizeof buf));
    assert_string_equal(buf, "/tmp/.cache/memra");
    unsetenv("MEMRA_CACHE_DIR");
    unsetenv("XDG_CACHE_HOME");
    if (home[0])
        setenv("HOME", home, 1);
    else
        unsetenv("HOME");
    assert_int_equal(n_seen, 2);
    assert_non_null(strstr(seen[0], "MEMRA_CACHE_DIR=rel/a is not an absolute path"));
    assert_non_null(strstr(seen[1], "XDG_CACHE_HOME=rel/b is not an absolute path"));
}

/* MEMRA_FORCE_PTX=true takes the PTX path (it once took only "1"). */
static void test_force_ptx_true_loads_ptx(void **state)
{
    (void)state;
    static const char *values[] = {"true", "yes", "On", "1"};
    for (int i = 0; i < 4; i++) {
        mock_install();
        setenv("MEMRA_FORCE_PTX", values[i], 1);
        memra_engine *eng;
        assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
        assert_int_equal(memra_engine_warmup(eng), MEMRA_OK);
        memra_kernel_origin o;
        assert_int_equal(memra_engine_kernel_origin(eng, &o), MEMRA_OK);
        if (!o.is_ptx)
            fail_msg("MEMRA_FORCE_PTX=%s loaded a CUBIN", values[i]);
        memra_engine_destroy(eng);
        setenv("MEMRA_FORCE_PTX", "off", 1);
        assert_int_equal(memra_engine_create(0, &eng), MEMRA_OK);
        assert_int_equal(memra_engine_warmup(eng), MEMRA_OK);
        assert_int_equal(memra_engine_kernel_origin(eng, &o), MEMRA_OK);
        assert_int_equal(o.is_ptx, 0);
        memra_engine_destroy(eng);
        mock_uninstall();
    }
    assert_int_equal(n_seen, 0);
}

static char dir[1024];

/* A systemd unit: no HOME, no XDG_CACHE_HOME. The cache is off and one
 * warning says so and why. */
static void test_no_home_warns_cache_off(void **state)
{
    (void)state;
    char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    unsetenv("HOME");
    unsetenv("XDG_CACHE_HOME");
    unsetenv("MEMRA_CACHE_DIR");
    assert_int_equal(memra_cache_dir(dir, sizeof dir), 0);
    assert_int_equal(memra_cache_dir(dir, sizeof dir), 0);
    assert_int_equal(n_seen, 1);
    assert_non_null(strstr(seen[0], "HOME"));
    assert_non_null(strstr(seen[0], "the disk cache is off"));
    assert_non_null(strstr(seen[0], "MEMRA_CACHE_DIR"));
    if (home)
        setenv("HOME", home, 1);
    free(home);
}

/* A value with a newline and other control bytes is printed escaped: one
 * line, whatever it holds. */
static void test_values_are_escaped(void **state)
{
    (void)state;
    setenv("MEMRA_CACHE_DIR", "rel\nmemra: warning: forged\r\t\x1b[31m\x7f\\", 1);
    memra_cache_dir(dir, sizeof dir);
    assert_int_equal(n_seen, 1);
    assert_null(strchr(seen[0], '\n'));
    assert_null(strchr(seen[0], '\r'));
    assert_null(strchr(seen[0], '\x1b'));
    assert_non_null(strstr(seen[0], "rel\\nmemra: warning: forged\\r\\t\\x1b[31m\\x7f\\\\ is not"));
    unsetenv("MEMRA_CACHE_DIR");
    /* The same for the flag and the size. */
    memra_warn_reset();
    setenv("MEMRA_FORCE_PTX", "y\nmemra: warning: x", 1);
    memra_env_flag("MEMRA_FORCE_PTX", 0);
    setenv("MEMRA_CACHE_MAX_BYTES", "1\n2", 1);
    memra_cache_cap();
    unsetenv("MEMRA_CACHE_MAX_BYTES");
    assert_int_equal(n_seen, 3);
    for (int i = 1; i < 3; i++)
        assert_null(strchr(seen[i], '\n'));
    assert_non_null(strstr(seen[1], "y\\nmemra: warning: x"));
    assert_non_null(strstr(seen[2], "1\\n2"));
}

/* C1 control characters (U+0080..U+009F; U+009B is CSI, which a terminal
 * obeys like ESC [) and bytes that are not UTF-8 (a lone 0x9b is CSI to a
 * terminal in an 8-bit mode) are escaped too; other UTF-8 stays readable.
 * They passed raw into warnings, the log callback and memra info. */
static void test_c1_controls_are_escaped(void **state)
{
    (void)state;
    char b[128];
    assert_string_equal(memra_escape("a\xc2\x9b"
                                     "31mb\x9b"
                                     "c\xc2\x85\xc2\xa0"
                                     "caf\xc3\xa9",
                                     b, sizeof b),
                        "a\\xc2\\x9b"
                        "31mb\\x9b"
                        "c\\xc2\\x85\xc2\xa0"
                        "caf\xc3\xa9");
    assert_string_equal(memra_escape("\xff\xc3", b, sizeof b), "\\xff\\xc3");
    /* Cut between characters, never inside one (6 bytes of room before the
     * "...": not "abcd\xe2\x82"). */
    char small[10];
    assert_string_equal(memra_escape("abcd\xe2\x82\xac\xe2\x82\xac", small, sizeof small),
                        "abcd...");
    setenv("MEMRA_CACHE_DIR", "rel\xc2\x9b[2J\x9b[31m", 1);
    memra_cache_dir(dir, sizeof dir);
    unsetenv("MEMRA_CACHE_DIR");
    assert_int_equal(n_seen, 1);
    for (const unsigned char *p = (const unsigned char *)seen[0]; *p; p++)
        assert_false(*p >= 0x80 && *p <= 0x9f);
    assert_non_null(strstr(seen[0], "rel\\xc2\\x9b[2J\\x9b[31m is not"));
}

static void test_escape_cuts_with_an_ellipsis(void **state)
{
    (void)state;
    char b[8];
    assert_string_equal(memra_escape("abcdefg", b, sizeof b), "abcdefg");
    assert_string_equal(memra_escape("abcdefgh", b, sizeof b), "abcd...");
    assert_string_equal(memra_escape("a\nb", b, sizeof b), "a\\nb");
    assert_string_equal(memra_escape("\x01\x02", b, sizeof b), "\\x01...");
    char big[MEMRA_ESCAPED_MAX], in[3000];
    memset(in, '\n', sizeof in - 1);
    in[sizeof in - 1] = 0;
    memra_escape(in, big, sizeof big);
    assert_true(strlen(big) < sizeof big);
    assert_string_equal(big + strlen(big) - 3, "...");
}

int main(void)
{
    // clang-format off
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
        T(test_flag_spellings),
        T(test_flag_garbage_warns_once),
        T(test_each_bad_flag_warns),
        T(test_each_bad_cache_variable_warns),
        T(test_force_ptx_true_loads_ptx),
        T(test_no_home_warns_cache_off),
        T(test_values_are_escaped),
        T(test_escape_cuts_with_an_ellipsis),
        T(test_c1_controls_are_escaped),
#undef T
    };
    // clang-format on
    return cmocka_run_group_tests(tests, NULL, NULL);
}
