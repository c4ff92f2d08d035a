/* memra_set_log_callback: where warnings go. stderr by default, a caller's
 * function when set, stderr again after NULL; safe to swap while other
 * threads warn (no call reaches a callback after it was replaced); a
 * callback may itself make memra warn, but may not swap the callback; what
 * is raised under a memra lock reaches the callback after the lock; a swap
 * waits for its own callback only, and for a bounded time. (That a callback
 * may call memra while memra's locks are about is tested where those locks
 * are: test_nvrtc_discovery.) */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "testutil.h"

#include "base/warn.h"

static char stderr_text[4096];

static void warn_one(void)
{
    memra_warn(MEMRA_WARN_CACHE_CAP, "cap %d", 7);
}

static void warn_c1(void)
{
    memra_warn(MEMRA_WARN_CACHE_CAP, "\xc2\x9b"
                                     "31m");
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
    memra_warn(MEMRA_WARN_ENV_MEMRA_CACHE_DIR, "a\nmemra: warning: b\r\x1b");
    assert_string_equal(s.last, "a\\nmemra: warning: b\\r\\x1b");
}

/* C1 controls (U+0080..U+009F) and bytes that are not UTF-8 are control
 * characters to a terminal: escaped like C0, whatever the message holds;
 * other UTF-8 is kept. They passed raw. */
static void test_c1_controls_are_escaped(void **state)
{
    (void)state;
    sink s = {0};
    memra_set_log_callback(to_sink, &s);
    memra_warn(MEMRA_WARN_ENV_MEMRA_CACHE_DIR, "a\xc2\x9b"
                                     "2Jb\x9b"
                                     "c\xc2\x85 caf\xc3\xa9 \xff");
    assert_string_equal(s.last, "a\\xc2\\x9b"
                                "2Jb\\x9b"
                                "c\\xc2\\x85 caf\xc3\xa9 \\xff");
    memra_set_log_callback(NULL, NULL);
    memra_warn_reset();
    assert_string_equal(capture_stderr(warn_c1), "memra: warning: \\xc2\\x9b"
                                                 "31m\n");
}

/* A callback that makes memra warn again (another kind) is fine; one that
 * swaps the callback is refused, not a deadlock. */
static memra_status swap_result = MEMRA_OK;
static char swap_message[512];
static int nested_calls;
static void nesting(memra_log_level level, const char *message, void *user)
{
    (void)level, (void)user;
    nested_calls++;
    if (strcmp(message, "outer") == 0) {
        memra_warn(MEMRA_WARN_CACHE_LOCK, "inner");
        swap_result = memra_set_log_callback(NULL, NULL);
        /* Read here: what the callback's own calls leave behind is not what
         * the code that warned reads once the callback returns. */
        snprintf(swap_message, sizeof swap_message, "%s", memra_last_error());
    }
}

static void test_callback_may_warn_but_not_swap(void **state)
{
    (void)state;
    memra_set_log_callback(nesting, NULL);
    memra_warn(MEMRA_WARN_CACHE_WRITE, "outer");
    assert_int_equal(nested_calls, 2);
    assert_int_equal(swap_result, MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(swap_message, "inside the log callback"));
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

/* ---- no lock held, no wait without a bound --------------------------------- */

/* Held messages wait for the outermost release, in the order raised. */
static void test_held_until_released(void **state)
{
    (void)state;
    sink s = {0};
    memra_set_log_callback(to_sink, &s);
    memra_warn_hold();
    memra_warn(MEMRA_WARN_ENV_MEMRA_CACHE_DIR, "first");
    memra_warn_hold();
    memra_warn(MEMRA_WARN_CACHE_CAP, "second");
    memra_warn_release();
    assert_int_equal(s.calls, 0);
    memra_warn_release();
    assert_int_equal(s.calls, 2);
    assert_string_equal(s.last, "second");
    memra_warn(MEMRA_WARN_CACHE_LOCK, "third"); /* nothing held: at once */
    assert_int_equal(s.calls, 3);
}

/* Waits up to 10 s for *flag; 0 when it did not come. */
static int wait_for(_Atomic int *flag)
{
    for (int ms = 0; !*flag; ms++) {
        if (ms == 10000)
            return 0;
        usleep(1000);
    }
    return 1;
}

static _Atomic int entered, swapped_back, waited_in_vain;
static _Atomic int swap_st[2];
static char swap_msg[2][512];

/* A callback that waits (bounded) for another thread's swap to return. */
static void waits_for_swap(memra_log_level level, const char *message, void *user)
{
    (void)level, (void)message, (void)user;
    entered = 1;
    if (!wait_for(&swapped_back))
        waited_in_vain = 1;
}

static void quiet(memra_log_level level, const char *message, void *user)
{
    (void)level, (void)message, (void)user;
}

static void *warn_once(void *arg)
{
    (void)arg;
    memra_warn(MEMRA_WARN_CACHE_WRITE, "wait");
    return NULL;
}

static void *swap_to_quiet(void *arg)
{
    const int i = (int)(intptr_t)arg;
    swap_st[i] = memra_set_log_callback(quiet, NULL);
    snprintf(swap_msg[i], sizeof swap_msg[i], "%s", memra_last_error());
    return NULL;
}

static void start_waiting_callback(pthread_t *warner_thread)
{
    entered = swapped_back = waited_in_vain = 0;
    swap_st[0] = swap_st[1] = -1;
    alarm(60); /* the test fails, not the suite, if it hangs all the same */
    assert_int_equal(memra_set_log_callback(waits_for_swap, NULL), MEMRA_OK);
    assert_int_equal(pthread_create(warner_thread, NULL, warn_once, NULL), 0);
    assert_true(wait_for(&entered));
}

/* A callback waits for thread C's swap while thread B's swap waits for the
 * callback. C's swap replaces B's callback, which nobody is inside: it has
 * nothing to wait for, and must not wait behind B (it did: every swap was
 * serialised behind the one before, and the three threads hung). */
static void test_a_swap_waits_for_its_own_callback_only(void **state)
{
    (void)state;
    pthread_t a, b, c;
    start_waiting_callback(&a);
    assert_int_equal(pthread_create(&b, NULL, swap_to_quiet, (void *)0), 0);
    usleep(200000); /* B is waiting for the callback by now */
    assert_int_equal(pthread_create(&c, NULL, swap_to_quiet, (void *)1), 0);
    pthread_join(c, NULL);
    swapped_back = 1;
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    alarm(0);
    assert_false(waited_in_vain);
    assert_int_equal(swap_st[1], MEMRA_OK);
    assert_int_equal(swap_st[0], MEMRA_OK);
}

/* A callback that waits for the thread swapping it out cannot be waited
 * for: the swap gives up after its bound with an error (the callback is
 * replaced, its user must stay valid) instead of hanging both threads. */
static void test_a_callback_waiting_for_its_swap_does_not_hang(void **state)
{
    (void)state;
    memra_log_swap_timeout_ms = 300;
    pthread_t a, b;
    start_waiting_callback(&a);
    assert_int_equal(pthread_create(&b, NULL, swap_to_quiet, (void *)0), 0);
    pthread_join(b, NULL);
    swapped_back = 1;
    pthread_join(a, NULL);
    alarm(0);
    memra_log_swap_timeout_ms = MEMRA_LOG_SWAP_TIMEOUT_MS;
    assert_false(waited_in_vain);
    assert_int_equal(swap_st[0], MEMRA_ERR_INVALID_ARG);
    assert_non_null(strstr(swap_msg[0], "still running in 1 thread after 300 ms"));
    /* The replaced callback gets nothing more. */
    entered = 0;
    memra_warn(MEMRA_WARN_CACHE_LOCK, "after");
    assert_int_equal(entered, 0);
}

int main(void)
{
    // clang-format off
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
        T(test_default_is_stderr),
        T(test_callback_then_null_restores_stderr),
        T(test_message_is_one_line),
        T(test_c1_controls_are_escaped),
        T(test_callback_may_warn_but_not_swap),
        T(test_swap_while_others_warn),
        T(test_held_until_released),
        T(test_a_swap_waits_for_its_own_callback_only),
        T(test_a_callback_waiting_for_its_swap_does_not_hang),
#undef T
    };
    // clang-format on
    return cmocka_run_group_tests(tests, NULL, NULL);
}
