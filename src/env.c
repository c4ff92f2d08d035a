#include "env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
    memra_warn(MEMRA_WARN_ENV_FLAG,
               "%s=%s is not a yes/no value (1, true, yes, on or 0, false, no, off): ignored, "
               "taken as %s",
               name, memra_escape(v, e, sizeof e), dflt ? "yes" : "no");
    return dflt;
}

/* One byte as printed; returns its length. */
static size_t escape_one(unsigned char c, char one[5])
{
    if (c == '\\')
        return (size_t)snprintf(one, 5, "\\\\");
    if (c == '\n')
        return (size_t)snprintf(one, 5, "\\n");
    if (c == '\r')
        return (size_t)snprintf(one, 5, "\\r");
    if (c == '\t')
        return (size_t)snprintf(one, 5, "\\t");
    if (c < 0x20 || c == 0x7f)
        return (size_t)snprintf(one, 5, "\\x%02x", c);
    one[0] = (char)c, one[1] = 0;
    return 1;
}

const char *memra_escape(const char *s, char *buf, size_t len)
{
    if (len < 8) { /* room for one escape and the ellipsis, or nothing */
        if (len)
            buf[0] = 0;
        return buf;
    }
    char one[5];
    size_t total = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        total += escape_one(*p, one);
    /* Cut only when it does not fit, keeping room for "..." then. */
    const size_t room = total < len ? len - 1 : len - 4;
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        const size_t n = escape_one(*p, one);
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
