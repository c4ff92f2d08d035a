#include "warn.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "text.h"

/* The once-check has its own mutex. The callback is called with no lock
 * held (it may call memra, which may warn again or take the lock of
 * whatever raised the warning): messages raised while this thread holds a
 * memra lock are held back (memra_warn_hold) and sent when it has let go of
 * the last one.
 *
 * Each installed callback is a sink counting the calls into it, so that
 * memra_set_log_callback can wait for the calls into the sink it replaced
 * and return only when none is left (the caller may then free what `user`
 * points at). Calls that start after the swap take the new sink, so the
 * wait is bounded by the calls already running, however many threads keep
 * warning; a swap waits for its own sink only, never for another swap. A
 * call that does not return in time (a callback that waits for the thread
 * swapping it out) turns the wait into an error instead of a hang: the sink
 * is then freed by the last call to leave it. */
static pthread_mutex_t once_lock = PTHREAD_MUTEX_INITIALIZER;
static int sent[MEMRA_WARN_KIND_COUNT];

typedef struct sink {
    memra_log_fn cb;
    void *user;
    int running;  /* calls inside cb now */
    int replaced; /* no new call reaches it */
    int orphaned; /* its swap stopped waiting: the last call out frees it */
} sink;

static void to_stderr(memra_log_level level, const char *message, void *user);
static sink stderr_sink = {to_stderr, NULL, 0, 0, 0}; /* never replaced, never freed */
static pthread_mutex_t cb_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cb_drained; /* on CLOCK_MONOTONIC: set up once */
static pthread_once_t cb_once = PTHREAD_ONCE_INIT;
static sink *current = &stderr_sink;
static _Thread_local int in_callback;
int memra_log_swap_timeout_ms = MEMRA_LOG_SWAP_TIMEOUT_MS;

/* Held back on this thread while it holds a memra lock. Each kind is sent
 * once per process, so a thread never holds more than one of each. */
static _Thread_local int hold_depth, n_held;
static _Thread_local char *held[MEMRA_WARN_KIND_COUNT];

static const char *const level_names[] = {"error", "warning", "info", "debug"};

/* The default: one write per line, so lines of two threads never mix. */
static void to_stderr(memra_log_level level, const char *message, void *user)
{
    (void)user;
    const char *name = (unsigned)level < 4 ? level_names[level] : "log";
    fprintf(stderr, "memra: %s: %s\n", name, message);
}

/* Control characters of the whole message shown as escapes (C0, DEL, the
 * C1 controls and bytes that are not UTF-8, see text.h): whatever a caller
 * put into it, a warning is one line that no terminal takes as a command. */
static void one_line(const char *in, char *out, size_t len)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && o + 5 < len;) {
        const int n = memra_shown_len(p);
        if (n > 0 && o + (size_t)n < len) {
            memcpy(out + o, p, (size_t)n);
            o += (size_t)n, p += n;
            continue;
        }
        if (n > 0) /* a character that does not fit: the line ends before it */
            break;
        if (*p == '\n')
            o += (size_t)snprintf(out + o, len - o, "\\n");
        else if (*p == '\r')
            o += (size_t)snprintf(out + o, len - o, "\\r");
        else if (*p == '\t')
            o += (size_t)snprintf(out + o, len - o, "\\t");
        else
            o += (size_t)snprintf(out + o, len - o, "\\x%02x", *p);
        p++;
    }
    out[o] = 0;
}

static void init_cond(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    /* A wall-clock step must not stretch or cut the bounded wait. */
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&cb_drained, &a);
    pthread_condattr_destroy(&a);
}

static void emit(memra_log_level level, const char *message)
{
    /* A logger must not change what the caller reads: errno, and the
     * message of a failure raised before the warning was sent. */
    const int saved = errno;
    char saved_error[4096];
    snprintf(saved_error, sizeof saved_error, "%s", memra_last_error());
    pthread_mutex_lock(&cb_lock);
    sink *s = current;
    s->running++;
    pthread_mutex_unlock(&cb_lock);
    in_callback++;
    s->cb(level, message, s->user);
    in_callback--;
    pthread_mutex_lock(&cb_lock);
    if (--s->running == 0 && s->replaced) {
        if (s->orphaned)
            free(s);
        else
            pthread_cond_broadcast(&cb_drained);
    }
    pthread_mutex_unlock(&cb_lock);
    memra_error_restore(saved_error);
    errno = saved;
}

static void vwarn(memra_warn_kind kind, const char *fmt, va_list ap)
{
    pthread_mutex_lock(&once_lock);
    const int first = !sent[kind];
    sent[kind] = 1;
    pthread_mutex_unlock(&once_lock);
    if (!first)
        return;
    char msg[1536], line[1536 * 4];
    vsnprintf(msg, sizeof msg, fmt, ap);
    one_line(msg, line, sizeof line);
    if (hold_depth == 0) {
        emit(MEMRA_LOG_WARNING, line);
        return;
    }
    /* Out of memory (or more than one of a kind, after a test's reset):
     * the message is lost rather than sent under the lock. */
    char *copy = n_held < MEMRA_WARN_KIND_COUNT ? strdup(line) : NULL;
    if (copy)
        held[n_held++] = copy;
}

void memra_warn(memra_warn_kind kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vwarn(kind, fmt, ap);
    va_end(ap);
}

void memra_warn_env(const char *var, const char *fmt, ...)
{
    static const char *const names[] = {
#define MEMRA_X(v) #v,
        MEMRA_WARN_ENV_VARS(MEMRA_X)
#undef MEMRA_X
    };
    memra_warn_kind kind = MEMRA_WARN_ENV_OTHER;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(var, names[i]) == 0)
            kind = (memra_warn_kind)(MEMRA_WARN_ENV_OTHER + 1 + (int)i);
    va_list ap;
    va_start(ap, fmt);
    vwarn(kind, fmt, ap);
    va_end(ap);
}

void memra_warn_hold(void)
{
    hold_depth++;
}

void memra_warn_release(void)
{
    if (--hold_depth > 0)
        return;
    /* In the order raised. A callback that makes memra warn again (no lock
     * held now) is sent at once, after the one running. */
    const int n = n_held;
    char *lines[MEMRA_WARN_KIND_COUNT];
    memcpy(lines, held, sizeof(char *) * (size_t)n);
    n_held = 0;
    for (int i = 0; i < n; i++) {
        emit(MEMRA_LOG_WARNING, lines[i]);
        free(lines[i]);
    }
}

void memra_warn_reset(void)
{
    pthread_mutex_lock(&once_lock);
    for (int i = 0; i < MEMRA_WARN_KIND_COUNT; i++)
        sent[i] = 0;
    pthread_mutex_unlock(&once_lock);
}

memra_status memra_set_log_callback(memra_log_fn cb, void *user)
{
    static const char fn[] = "memra_set_log_callback";
    /* Waiting for the replaced callback's calls would wait for itself. */
    if (in_callback)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: called from inside the log callback", fn);
    sink *s = &stderr_sink;
    if (cb && !(s = malloc(sizeof *s)))
        return memra_fail(MEMRA_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    if (cb)
        *s = (sink){cb, user, 0, 0, 0};
    pthread_once(&cb_once, init_cond);
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += memra_log_swap_timeout_ms / 1000;
    deadline.tv_nsec += (long)(memra_log_swap_timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L)
        deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&cb_lock);
    sink *old = current;
    current = s;
    int left = 0;
    if (old != &stderr_sink) { /* stderr has no `user` to free */
        old->replaced = 1;
        int r = 0;
        while (old->running > 0 && r != ETIMEDOUT)
            r = pthread_cond_timedwait(&cb_drained, &cb_lock, &deadline);
        if ((left = old->running) > 0)
            old->orphaned = 1;
        else
            free(old);
    }
    pthread_mutex_unlock(&cb_lock);
    if (left)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: the callback it replaced is still running in %d thread%s after "
                          "%d ms (a callback may not wait for a thread that swaps it out); it "
                          "gets no new message, but its user must stay valid",
                          fn, left, left == 1 ? "" : "s", memra_log_swap_timeout_ms);
    return MEMRA_OK;
}
