#include "warn.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

/* The mutex orders both the once-check and the write, so two threads never
 * interleave a message or both print the same kind. */
static pthread_mutex_t warn_lock = PTHREAD_MUTEX_INITIALIZER;
static int printed[MEMRA_WARN_KIND_COUNT];

void memra_warn(memra_warn_kind kind, const char *fmt, ...)
{
    pthread_mutex_lock(&warn_lock);
    if (!printed[kind]) {
        printed[kind] = 1;
        char msg[1536];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        fprintf(stderr, "memra: warning: %s\n", msg);
    }
    pthread_mutex_unlock(&warn_lock);
}

void memra_warn_reset(void)
{
    pthread_mutex_lock(&warn_lock);
    for (int i = 0; i < MEMRA_WARN_KIND_COUNT; i++)
        printed[i] = 0;
    pthread_mutex_unlock(&warn_lock);
}
