/* memra_set_log_callback: where warnings go. stderr by default, a caller's
 * function when set, stderr again after NULL; safe to swap while other
 * threads warn (no call reaches a callback after it was replaced); a
 * callback may itself make memra warn, but may not swap the callback. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "testutil.h"

#include "warn.h"

static char stderr_text[4096];

static void warn_one(void)
{
    memra_warn(MEMRA_WARN_CACHE_CAP, "cap %d", 7);
}

static const char *capture_stderr(void (*fn)(void))
{
    char path[] = "/tmp/memra-log-test-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
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

typedef struct sink {
    int calls;
    memra_log_level level;
    char last[512];
} sink;

static void to_sink(memra_log_level level, const char *message, void *user)
{
    sink *s = user;
    s->calls++;
    s->level = level;
    snprintf(s->last, sizeof s->last, "%s", message);
}

static int setup(void **state)
{
    (void)state;
    memra_warn_reset();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    memra_set_log_callback(NULL, NULL);
    return 0;
}

static void test_default_is_stderr(void **state)
{
    (void)state;
    assert_string_equal(capture_stderr(warn_one), "memra: warning: cap 7\n");
}

static void test_callback_then_null_restores_stderr(void **state)
{
    (void)state;
    sink s = {0};
    assert_int_equal(memra_set_log_callback(to_sink, &s), MEMRA_OK);
    assert_string_equal(capture_stderr(warn_one), "");
    assert_int_equal(s.calls, 1);
    assert_int_equal(s.level, MEMRA_LOG_WARNING);
    assert_string_equal(s.last, "cap 7"); /* no prefix, no newline */
    assert_int_equal(memra_set_log_callback(NULL, &s), MEMRA_OK);
    memra_warn_reset();
    assert_string_equal(capture_stderr(warn_one), "memra: warning: cap 7\n");
    assert_int_equal(s.calls, 1);
}

static void test_message_is_one_line(void **state)
{
    (void)state;
    sink s = {0};
    memra_set_log_callback(to_sink, &s);
    memra_warn(MEMRA_WARN_CACHE_ENV, "a\nmemra: warning: b\r\x1b");
    assert_string_equal(s.last, "a\\nmemra: warning: b\\r\\x1b");
}

/* A callback that makes memra warn again (another kind) is fine; one that
 * swaps the callback is refused, not a deadlock. */
static memra_status swap_result = MEMRA_OK;
static int nested_calls;
static void nesting(memra_log_level level, const char *message, void *user)
{
    (void)level, (void)user;
    nested_calls++;
    if (strcmp(message, "outer") == 0) {
        memra_warn(MEMRA_WARN_CACHE_LOCK, "inner");
        swap_result = memra_set_log_callback(NULL, NULL);
    }
}

static void test_callback_may_warn_but_not_swap(void **state)
{
    (void)state;
    memra_set_log_callback(nesting, NULL);
    memra_warn(MEMRA_WARN_CACHE_WRITE, "outer");
    assert_int_equal(nested_calls, 2);
    assert_int_equal(swap_result, MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(memra_last_error(), "inside the log callback"));
}

/* ---- threads ---------------------------------------------------------------- */

static _Atomic int inside_old, calls_old_after, stop;
static _Atomic int replaced;

static void slow_old(memra_log_level level, const char *message, void *user)
{
    (void)level, (void)message, (void)user;
    inside_old++;
    if (replaced)
        calls_old_after++;
    usleep(200);
    inside_old--;
}

static void quick_new(memra_log_level level, const char *message, void *user)
{
    (void)level, (void)message;
    ++*(_Atomic int *)user;
}

static void *warner(void *arg)
{
    (void)arg;
    while (!stop) {
        memra_warn_reset();
        for (int k = 0; k < MEMRA_WARN_KIND_COUNT; k++)
            memra_warn((memra_warn_kind)k, "kind %d", k);
    }
    return NULL;
}

/* Eight threads warn while the callback is swapped: once the swap returns,
 * nobody is inside the old callback or enters it again. */
static void test_swap_while_others_warn(void **state)
{
    (void)state;
    _Atomic int new_calls = 0;
    for (int round = 0; round < 20; round++) {
        replaced = 0;
        stop = 0;
        calls_old_after = 0;
        memra_set_log_callback(slow_old, NULL);
        pthread_t t[8];
        for (int i = 0; i < 8; i++)
            assert_int_equal(pthread_create(&t[i], NULL, warner, NULL), 0);
        usleep(2000);
        assert_int_equal(memra_set_log_callback(quick_new, &new_calls), MEMRA_OK);
        replaced = 1;
        const int in_after = inside_old, before = new_calls;
        /* Until the new callback is seen working (bounded: 5 s). */
        for (int waited = 0; new_calls == before && waited < 5000; waited++)
            usleep(1000);
        stop = 1;
        for (int i = 0; i < 8; i++)
            pthread_join(t[i], NULL);
        assert_int_equal(in_after, 0);
        assert_int_equal(calls_old_after, 0);
    }
    assert_true(new_calls >= 20);
}

int main(void)
{
    // clang-format off
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
        T(test_default_is_stderr),
        T(test_callback_then_null_restores_stderr),
        T(test_message_is_one_line),
        T(test_callback_may_warn_but_not_swap),
        T(test_swap_while_others_warn),
#undef T
    };
    // clang-format on
    return cmocka_run_group_tests(tests, NULL, NULL);
}
