/* Reading the environment: a value that is set and not empty, a yes/no
 * flag, and any value made safe to print. Everything memra prints from the
 * environment or the file system goes through memra_escape(): a newline in
 * a variable must not forge a second log line. */
#ifndef MEMRA_ENV_H
#define MEMRA_ENV_H

#include <stddef.h>

/* The value of `name` if it is set and not empty, else NULL. */
const char *memra_env(const char *name);

/* A yes/no variable: 1, true, yes, on or 0, false, no, off, in any case.
 * Unset or empty gives `dflt`; anything else warns once and gives `dflt`. */
int memra_env_flag(const char *name, int dflt);

/* `s` as printable text in buf: backslash, newline, carriage return and tab
 * as \\, \n, \r, \t, other control characters (C0, DEL and the C1 controls
 * U+0080..U+009F) and bytes that are not UTF-8 as \xNN, each byte; other
 * UTF-8 is kept (paths stay readable). Too long for buf: cut, never inside
 * a character, and ended with "...". Returns buf. */
const char *memra_escape(const char *s, char *buf, size_t len);

/* Room that memra_escape needs for any printed value (longer is cut). */
#define MEMRA_ESCAPED_MAX 1024

#endif /* MEMRA_ENV_H */
