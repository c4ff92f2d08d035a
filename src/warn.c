#include "warn.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

/* The once-check has its own mutex. The callback is called with no lock
 * held (it may make memra warn again), but every call is counted, by the
 * generation of the callback it took, so that memra_set_log_callback can
 * wait for the calls into the callback it replaced and return only when
 * none is left (the caller may then free what `user` points at). Calls
 * that start after the swap take the new callback, so the wait is bounded
 * by the calls already running, however many threads keep warning. */
static pthread_mutex_t once_lock = PTHREAD_MUTEX_INITIALIZER;
static int sent[MEMRA_WARN_KIND_COUNT];
static pthread_mutex_t cb_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cb_drained = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t swap_lock = PTHREAD_MUTEX_INITIALIZER; /* one swap at a time */
static memra_log_fn log_cb;
static void *log_user;
static unsigned generation;
static int running[2]; /* calls in progress, by generation parity */
static _Thread_local int in_callback;

static const char *const level_names[] = {"error", "warning", "info", "debug"};

/* The default: one write per line, so lines of two threads never mix. */
static void to_stderr(memra_log_level level, const char *message, void *user)
{
    (void)user;
    const char *name = (unsigned)level < 4 ? level_names[level] : "log";
    fprintf(stderr, "memra: %s: %s\n", name, message);
}

/* Control characters of the whole message shown as escapes: whatever a
 * caller put into it, a warning is one line. */
static void one_line(const char *in, char *out, size_t len)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && o + 5 < len; p++) {
        if (*p == '\n')
            o += (size_t)snprintf(out + o, len - o, "\\n");
        else if (*p == '\r')
            o += (size_t)snprintf(out + o, len - o, "\\r");
        else if (*p == '\t')
            o += (size_t)snprintf(out + o, len - o, "\\t");
        else if (*p < 0x20 || *p == 0x7f)
            o += (size_t)snprintf(out + o, len - o, "\\x%02x", *p);
        else
            out[o++] = (char)*p;
    }
    out[o] = 0;
}

static void emit(memra_log_level level, const char *message)
{
    const int saved = errno; /* a logger must not change what the caller reads */
    pthread_mutex_lock(&cb_lock);
    memra_log_fn cb = log_cb ? log_cb : to_stderr;
    void *user = log_cb ? log_user : NULL;
    const unsigned gen = generation & 1;
    running[gen]++;
    pthread_mutex_unlock(&cb_lock);
    in_callback++;
    cb(level, message, user);
    in_callback--;
    pthread_mutex_lock(&cb_lock);
    if (--running[gen] == 0)
        pthread_cond_broadcast(&cb_drained);
    pthread_mutex_unlock(&cb_lock);
    errno = saved;
}

void memra_warn(memra_warn_kind kind, const char *fmt, ...)
{
    pthread_mutex_lock(&once_lock);
    const int first = !sent[kind];
    sent[kind] = 1;
    pthread_mutex_unlock(&once_lock);
    if (!first)
        return;
    char msg[1536], line[1536 * 4];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    one_line(msg, line, sizeof line);
    emit(MEMRA_LOG_WARNING, line);
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
    /* Waiting for the replaced callback's calls would wait for itself. */
    if (in_callback)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "memra_set_log_callback: called from inside the log callback");
    pthread_mutex_lock(&swap_lock);
    pthread_mutex_lock(&cb_lock);
    log_cb = cb;
    log_user = cb ? user : NULL;
    const unsigned old = generation++ & 1;
    /* The previous swap waited for its predecessor's calls, so the calls
     * left under the old parity are exactly those into the replaced one. */
    while (running[old] > 0)
        pthread_cond_wait(&cb_drained, &cb_lock);
    pthread_mutex_unlock(&cb_lock);
    pthread_mutex_unlock(&swap_lock);
    return MEMRA_OK;
}
