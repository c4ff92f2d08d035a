#include "cli.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <memra/memra.h>

#include "base/text.h"

double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int usage_error(const char *verb, const char *fmt, ...)
{
    fprintf(stderr, "memra%s%s: ", verb ? " " : "", verb ? verb : "");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'memra%s%s --help'.\n", verb ? " " : "", verb ? verb : "");
    return CLI_USAGE;
}

void put_text(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        const int n = memra_shown_len(p);
        if (n > 0)
            fwrite(p, 1, (size_t)n, f);
        else if (*p == '\n')
            fputs("\\n", f);
        else
            fprintf(f, "\\x%02x", *p);
        p += n ? n : 1;
    }
}

void put_json(FILE *f, const char *s)
{
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        const int n = memra_utf8_len(p);
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else if (n == 2 && p[0] == 0xc2 && p[1] < 0xa0)
            fprintf(f, "\\u%04x", p[1]); /* a C1 control, escaped like C0 */
        else if (n == 0)
            /* A byte that is not UTF-8 (a path is bytes): the lone surrogate
             * U+DC00+byte, as Python's surrogateescape spells it, so
             * os.fsencode(json.loads(...)) gives the bytes back. */
            fprintf(f, "\\udc%02x", *p);
        else
            fwrite(p, 1, (size_t)n, f);
        p += n ? n : 1;
    }
    fputc('"', f);
}

static int progress_on, progress_shown;

void progress_enable(int on)
{
    progress_on = on && isatty(STDOUT_FILENO);
}

void progress(const char *fmt, ...)
{
    if (!progress_on)
        return;
    fputs("\r\033[K", stdout);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
    progress_shown = 1;
}

void progress_done(void)
{
    if (progress_shown) {
        fputs("\r\033[K", stdout);
        fflush(stdout);
    }
    progress_shown = 0;
}

const char *device_status(int *n)
{
    static char why[1200];
    *n = 0;
    why[0] = 0;
    if (memra_device_count(n) != MEMRA_OK) {
        *n = 0;
        snprintf(why, sizeof why, "driver not available: %s", memra_last_error());
    } else if (*n == 0) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        snprintf(why, sizeof why, "no CUDA device visible%s%s%s",
                 vis ? " (CUDA_VISIBLE_DEVICES=\"" : "", vis ? vis : "", vis ? "\")" : "");
    }
    return why;
}

const char *library_file(void)
{
    Dl_info dl;
    /* A function pointer as an address: POSIX dladdr takes one this way. */
    void *sym = (void *)(uintptr_t)&memra_version;
    return dladdr(sym, &dl) && dl.dli_fname ? dl.dli_fname : "";
}
