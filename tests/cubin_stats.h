/* What ptxas made of one kernel, read from the CUBIN itself (no toolkit
 * tool): its register count, the EIATTR_REGCOUNT attribute of the
 * module's .nv.info section; its stack frame in local memory (spilled
 * registers, arrays it could not keep in registers), EIATTR_FRAME_SIZE of
 * the same section, 0 where there is none; and its machine-code length,
 * the size of its .text.<kernel> section over 16 bytes an instruction
 * (sm_70 and later).
 * Every offset is checked against the image's size: an image that does not
 * parse answers 0, never reads past its end. */
#ifndef MEMRA_TEST_CUBIN_STATS_H
#define MEMRA_TEST_CUBIN_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct cubin_elf {
    const unsigned char *d;
    size_t n;
    uint64_t shoff;
    unsigned shentsize, shnum, shstrndx;
} cubin_elf;

static uint64_t cubin_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Whether [at, at + bytes) lies inside the image, without an addition
 * that could wrap. */
static int cubin_fits(const cubin_elf *e, uint64_t at, uint64_t bytes)
{
    return at <= e->n && bytes <= e->n - at;
}

/* Section i's header field at offset off (of the given width), or 0. */
static uint64_t cubin_sh(const cubin_elf *e, unsigned i, unsigned off, int bytes)
{
    /* shnum and shentsize are 16-bit: their product cannot wrap. */
    const uint64_t rel = (uint64_t)i * e->shentsize + off;
    if (i >= e->shnum || !cubin_fits(e, e->shoff, rel) ||
        !cubin_fits(e, e->shoff + rel, (uint64_t)bytes))
        return 0;
    return cubin_le(e->d + e->shoff + rel, bytes);
}

/* The NUL-terminated string at offset off of section strtab, or NULL. */
static const char *cubin_str(const cubin_elf *e, unsigned strtab, uint64_t off)
{
    const uint64_t base = cubin_sh(e, strtab, 24, 8), size = cubin_sh(e, strtab, 32, 8);
    if (off >= size || !cubin_fits(e, base, size))
        return NULL;
    const char *s = (const char *)e->d + base + off;
    return memchr(s, 0, (size_t)(size - off)) ? s : NULL;
}

static int cubin_open(cubin_elf *e, const void *data, size_t n)
{
    e->d = data;
    e->n = n;
    if (n < 64 ||
        memcmp(e->d,
               "\x7f"
               "ELF",
               4) ||
        e->d[4] != 2 /* ELFCLASS64 */)
        return 0;
    e->shoff = cubin_le(e->d + 0x28, 8);
    e->shentsize = (unsigned)cubin_le(e->d + 0x3a, 2);
    e->shnum = (unsigned)cubin_le(e->d + 0x3c, 2);
    e->shstrndx = (unsigned)cubin_le(e->d + 0x3e, 2);
    return e->shentsize >= 64 && e->shstrndx < e->shnum;
}

/* The index of the section named name, or 0 (the null section). */
static unsigned cubin_section(const cubin_elf *e, const char *name)
{
    for (unsigned i = 1; i < e->shnum; i++) {
        const char *s = cubin_str(e, e->shstrndx, cubin_sh(e, i, 0, 4));
        if (s && strcmp(s, name) == 0)
            return i;
    }
    return 0;
}

/* kernel's registers, stack frame bytes and instructions; 1 where the
 * registers and instructions were found. */
static int cubin_kernel_stats(const void *data, size_t n, const char *kernel, unsigned *regs,
                              unsigned *frame, unsigned *instrs)
{
    cubin_elf e;
    char text[160];
    *regs = *frame = *instrs = 0;
    if (!cubin_open(&e, data, n) ||
        (size_t)snprintf(text, sizeof text, ".text.%s", kernel) >= sizeof text)
        return 0;
    const unsigned t = cubin_section(&e, text), sym = cubin_section(&e, ".symtab");
    const unsigned info = cubin_section(&e, ".nv.info");
    if (!t || !sym || !info)
        return 0;
    *instrs = (unsigned)(cubin_sh(&e, t, 32, 8) / 16);
    /* The kernel's symbol index, by name through the symbol table's strings. */
    const unsigned strtab = (unsigned)cubin_sh(&e, sym, 40, 4);
    const uint64_t sbase = cubin_sh(&e, sym, 24, 8), ssize = cubin_sh(&e, sym, 32, 8);
    uint64_t index = 0;
    if (!cubin_fits(&e, sbase, ssize))
        return 0;
    for (uint64_t k = 1; k < ssize / 24; k++) {
        const char *s = cubin_str(&e, strtab, cubin_le(e.d + sbase + k * 24, 4));
        if (s && strcmp(s, kernel) == 0) {
            index = k;
            break;
        }
    }
    /* .nv.info: records of a format byte, an attribute byte and a 16-bit
     * value; format 4 (EIFMT_SVAL) makes that value the size of a payload
     * that follows. REGCOUNT (0x2f) and FRAME_SIZE (0x11) each hold the
     * symbol index, then the count. */
    const uint64_t ibase = cubin_sh(&e, info, 24, 8), isize = cubin_sh(&e, info, 32, 8);
    if (!index || !cubin_fits(&e, ibase, isize))
        return 0;
    for (uint64_t p = ibase; p + 4 <= ibase + isize;) {
        const unsigned fmt = e.d[p], attr = e.d[p + 1], len = (unsigned)cubin_le(e.d + p + 2, 2);
        if (fmt == 4) {
            if (p + 4 + len > ibase + isize)
                return 0;
            if ((attr == 0x2f || attr == 0x11) && len == 8 && cubin_le(e.d + p + 4, 4) == index)
                *(attr == 0x2f ? regs : frame) = (unsigned)cubin_le(e.d + p + 8, 4);
            p += 4 + len;
        } else {
            p += 4;
        }
    }
    return *regs > 0 && *instrs > 0;
}

#endif /* MEMRA_TEST_CUBIN_STATS_H */
