#include "cache_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/env.h"
#include "base/warn.h"

/* Writes base+suffix into buf; a path that does not fit turns the cache off
 * rather than pointing it somewhere truncated. The folder is opened with
 * O_NOFOLLOW, which guards the path's last component as written: trailing
 * slashes are dropped so that it is the folder's own name, and a "." or
 * ".." component (".../link/." would name a link's target) turns the cache
 * off. Folders above the last may be links: the system's layout (/home ->
 * /var/home), not the cache's. */
static int fit(char *buf, size_t len, const char *var, const char *base, const char *suffix)
{
    char e[MEMRA_ESCAPED_MAX];
    if ((size_t)snprintf(buf, len, "%s%s", base, suffix) >= len) {
        memra_warn_env(var,
                       "%s gives a kernel cache path longer than %zu bytes: the disk cache is off",
                       var, len - 1);
        return 0;
    }
    for (size_t n = strlen(buf); n > 1 && buf[n - 1] == '/'; n--)
        buf[n - 1] = 0;
    for (const char *c = buf; *c;) {
        const size_t n = strcspn(c, "/");
        if ((n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.')) {
            memra_warn_env(
                var,
                "%s gives the kernel cache path %s, which has a \".\" or \"..\" component "
                "(it could lead through a symbolic link): the disk cache is off; name the "
                "folder itself",
                var, memra_escape(buf, e, sizeof e));
            return 0;
        }
        c += n;
        c += *c == '/';
    }
    return 1;
}

int memra_cache_dir(char *buf, size_t len)
{
    char e[MEMRA_ESCAPED_MAX];
    const char *dir = memra_env("MEMRA_CACHE_DIR");
    if (dir && strcasecmp(dir, "off") == 0)
        return 0;
    if (dir) {
        if (dir[0] == '/')
            return fit(buf, len, "MEMRA_CACHE_DIR", dir, "");
        memra_warn_env(
            "MEMRA_CACHE_DIR",
            "MEMRA_CACHE_DIR=%s is not an absolute path: ignored, using the default folder",
            memra_escape(dir, e, sizeof e));
    }
    /* The XDG base directory spec: a relative XDG_CACHE_HOME is invalid and
     * must be ignored. */
    const char *xdg = memra_env("XDG_CACHE_HOME");
    if (xdg) {
        if (xdg[0] == '/')
            return fit(buf, len, "XDG_CACHE_HOME", xdg, "/memra");
        memra_warn_env("XDG_CACHE_HOME",
                       "XDG_CACHE_HOME=%s is not an absolute path: ignored, as the XDG spec says",
                       memra_escape(xdg, e, sizeof e));
    }
    const char *home = memra_env("HOME");
    if (home && home[0] == '/')
        return fit(buf, len, "HOME", home, "/.cache/memra");
    if (home)
        memra_warn_env(
            "HOME", "HOME=%s is not an absolute path: the disk cache is off (set MEMRA_CACHE_DIR)",
            memra_escape(home, e, sizeof e));
    else
        /* A systemd unit or a container without a user: say why there is
         * no cache rather than leave every start paying the compile. */
        memra_warn_env(
            "HOME",
            "neither MEMRA_CACHE_DIR, XDG_CACHE_HOME nor HOME is set: the disk cache is off "
            "(set MEMRA_CACHE_DIR to keep compiled kernels)");
    return 0;
}

int memra_parse_size(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return 0;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++)
        if (__builtin_mul_overflow(v, 10, &v) ||
            __builtin_add_overflow(v, (uint64_t)(*s - '0'), &v))
            return 0;
    int shift = 0;
    switch (*s) {
    case 'k':
    case 'K':
        shift = 10;
        break;
    case 'm':
    case 'M':
        shift = 20;
        break;
    case 'g':
    case 'G':
        shift = 30;
        break;
    case '\0':
        break;
    default:
        return 0;
    }
    if (shift && (*++s != '\0' || v > (UINT64_MAX >> shift)))
        return 0;
    *out = v << shift;
    return 1;
}

uint64_t memra_cache_cap(void)
{
    const char *v = memra_env("MEMRA_CACHE_MAX_BYTES");
    uint64_t cap;
    if (!v)
        return MEMRA_CACHE_DEFAULT_CAP;
    if (memra_parse_size(v, &cap))
        return cap;
    char e[MEMRA_ESCAPED_MAX];
    memra_warn(MEMRA_WARN_CACHE_CAP,
               "MEMRA_CACHE_MAX_BYTES=%s is not a size (an integer with an optional K, M or G "
               "suffix): using the default, %llu MiB",
               memra_escape(v, e, sizeof e), MEMRA_CACHE_DEFAULT_CAP >> 20);
    return MEMRA_CACHE_DEFAULT_CAP;
}
