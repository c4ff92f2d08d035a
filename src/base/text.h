/* Which bytes of text memra did not write itself (paths, environment
 * values, messages) are printed as they are, and which as escapes.
 * Header-only, so the `memra` tool, a client of the public API, prints by
 * the same rule as the library's warnings and messages. */
#ifndef MEMRA_TEXT_H
#define MEMRA_TEXT_H

/* Length of the well-formed UTF-8 sequence at p (1..4), or 0 when p does
 * not start one. */
static inline int memra_utf8_len(const unsigned char *p)
{
    const unsigned char c = p[0];
    const int n = c < 0x80                 ? 1
                  : c >= 0xc2 && c <= 0xdf ? 2
                  : c >= 0xe0 && c <= 0xef ? 3
                  : c >= 0xf0 && c <= 0xf4 ? 4
                                           : 0;
    for (int i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    /* Overlong forms, surrogates and code points past U+10FFFF are not UTF-8. */
    if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f) || (c == 0xf0 && p[1] < 0x90) ||
        (c == 0xf4 && p[1] > 0x8f))
        return 0;
    return n;
}

/* How many bytes at p are shown as they are (a character that is not a
 * control: 1..4 bytes), or 0 when the byte at p is shown as an escape: the
 * C0 controls and DEL, the C1 controls U+0080..U+009F (a terminal obeys
 * them: U+009B is CSI), and every byte that is not part of well-formed
 * UTF-8 (a lone 0x80..0x9f is C1 to a terminal in an 8-bit mode). */
static inline int memra_shown_len(const unsigned char *p)
{
    if (*p < 0x20 || *p == 0x7f)
        return 0;
    const int n = memra_utf8_len(p);
    return n == 2 && p[0] == 0xc2 && p[1] < 0xa0 ? 0 : n;
}

#endif /* MEMRA_TEXT_H */
