#include "env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "text.h"
#include "warn.h"

const char *memra_env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int memra_env_flag(const char *name, int dflt)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    const char *v = memra_env(name);
    if (!v)
        return dflt;
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcasecmp(v, yes[i]) == 0)
            return 1;
        if (strcasecmp(v, no[i]) == 0)
            return 0;
    }
    char e[MEMRA_ESCAPED_MAX];
    memra_warn_env(name,
                   "%s=%s is not a yes/no value (1, true, yes, on or 0, false, no, off): ignored, "
                   "taken as %s",
                   name, memra_escape(v, e, sizeof e), dflt ? "yes" : "no");
    return dflt;
}

/* The text at p as printed, in one[]: a character as it is (*taken its
 * bytes), or one byte as an escape (*taken 1). Returns its length. */
static size_t escape_at(const unsigned char *p, size_t *taken, char one[5])
{
    *taken = 1;
    if (*p == '\\')
        return (size_t)snprintf(one, 5, "\\\\");
    if (*p == '\n')
        return (size_t)snprintf(one, 5, "\\n");
    if (*p == '\r')
        return (size_t)snprintf(one, 5, "\\r");
    if (*p == '\t')
        return (size_t)snprintf(one, 5, "\\t");
    const int n = memra_shown_len(p);
    if (n == 0)
        return (size_t)snprintf(one, 5, "\\x%02x", *p);
    memcpy(one, p, (size_t)n);
    one[n] = 0;
    *taken = (size_t)n;
    return (size_t)n;
}

const char *memra_escape(const char *s, char *buf, size_t len)
{
    if (len < 8) { /* room for one escape and the ellipsis, or nothing */
        if (len)
            buf[0] = 0;
        return buf;
    }
    char one[5];
    size_t total = 0, taken;
    for (const unsigned char *p = (const unsigned char *)s; *p; p += taken)
        total += escape_at(p, &taken, one);
    /* Cut only when it does not fit, keeping room for "..." then; never
     * inside a character. */
    const size_t room = total < len ? len - 1 : len - 4;
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p += taken) {
        const size_t n = escape_at(p, &taken, one);
        if (o + n > room)
            break;
        memcpy(buf + o, one, n);
        o += n;
    }
    if (total >= len)
        memcpy(buf + o, "...", 3), o += 3;
    buf[o] = 0;
    return buf;
}
