/* Loading a shared library by soname without ever blocking (header). */
#include "soname.h"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "base/env.h"

const char *memra_file_type(mode_t m)
{
    return S_ISFIFO(m)   ? "a FIFO"
           : S_ISDIR(m)  ? "a folder"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a plain file";
}

/* Whether [a, a + len) lies in one of the object's loaded segments. */
static int in_segments(const struct dl_phdr_info *info, ElfW(Addr) a, size_t len)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        const ElfW(Addr) lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && a >= lo && len <= ph->p_memsz && a - lo <= ph->p_memsz - len)
            return 1;
    }
    return 0;
}

/* A loaded object's DT_SONAME, read from its dynamic section in memory, or
 * NULL. The loader rewrites the section's addresses to run-time ones on
 * most targets but not on all (nor in the vDSO): DT_STRTAB is taken as it
 * stands where that lies inside the object, else as relative to its base. */
static const char *soname_of(const struct dl_phdr_info *info)
{
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    ElfW(Addr) strtab = 0;
    size_t strsz = 0, soname = 0;
    int has_soname = 0;
    for (; dyn && dyn->d_tag != DT_NULL; dyn++)
        if (dyn->d_tag == DT_STRTAB)
            strtab = dyn->d_un.d_ptr;
        else if (dyn->d_tag == DT_STRSZ)
            strsz = dyn->d_un.d_val;
        else if (dyn->d_tag == DT_SONAME)
            soname = dyn->d_un.d_val, has_soname = 1;
    if (!has_soname || !strtab || soname >= strsz)
        return NULL;
    if (!in_segments(info, strtab, strsz))
        strtab += info->dlpi_addr;
    if (!in_segments(info, strtab, strsz))
        return NULL;
    const char *name = (const char *)strtab + soname;
    return memchr(name, 0, strsz - soname) ? name : NULL;
}

typedef struct loaded_query {
    const char *soname;
    char *path; /* the loaded object's file name */
    size_t n;
    int found;
} loaded_query;

static int find_soname(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    loaded_query *q = arg;
    const char *name = soname_of(info);
    /* A name with a slash is matched among the loaded objects by the loader
     * before it searches anything; one without is not worth the risk. */
    if (!name || strcmp(name, q->soname) != 0 || !info->dlpi_name ||
        !strchr(info->dlpi_name, '/') || strlen(info->dlpi_name) >= q->n)
        return 0;
    snprintf(q->path, q->n, "%s", info->dlpi_name);
    q->found = 1;
    return 1;
}

/* Whether an object of that soname is loaded, its file name into path[n]
 * (nothing opened, no reference taken). */
static int loaded_path(const char *soname, char *path, size_t n)
{
    loaded_query q = {soname, path, n, 0};
    dl_iterate_phdr(find_soname, &q);
    return q.found;
}

void *memra_soname_loaded(const char *soname, char *path, size_t n)
{
    return loaded_path(soname, path, n) ? dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD) : NULL;
}

/* Refuses `path` when it is there and not a regular file. */
static int screen_file(const char *path, const char *where, char *why, size_t n)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || S_ISREG(sb.st_mode))
        return 0;
    char e[MEMRA_ESCAPED_MAX];
    snprintf(why, n, "%s %s is not a regular file (%s)", memra_escape(path, e, sizeof e), where,
             memra_file_type(sb.st_mode));
    return 1;
}

/* The loader does not search a folder alone but first the subfolders its
 * CPU selects: glibc-hwcaps/<level>/ (glibc 2.33 on: x86-64-v4, v3, v2 and
 * the like, whichever the CPU supports; all those present are screened),
 * and before glibc 2.37 the legacy tls/ and <platform>/ ones
 * (tls/x86_64/x86_64, ..., x86_64). A FIFO in any of them blocked dlopen
 * as surely as one in the folder. */
static int screen_dir(const char *dir, size_t dlen, const char *soname, const char *where,
                      char *why, size_t n)
{
    char f[PATH_MAX];
    if (dlen + strlen(soname) + 2 >= sizeof f)
        return 0;
    snprintf(f, sizeof f, "%.*s/%s", (int)dlen, dir, soname);
    if (screen_file(f, where, why, n))
        return 1;
    snprintf(f, sizeof f, "%.*s/glibc-hwcaps", (int)dlen, dir);
    DIR *d = opendir(f); /* O_DIRECTORY: a FIFO here fails at once */
    if (d) {
        int bad = 0;
        struct dirent *e;
        while (!bad && (e = readdir(d)))
            if (e->d_name[0] != '.' && snprintf(f, sizeof f, "%.*s/glibc-hwcaps/%s/%s", (int)dlen,
                                                dir, e->d_name, soname) < (int)sizeof f)
                bad = screen_file(f, where, why, n);
        closedir(d);
        if (bad)
            return 1;
    }
    const char *plat = (const char *)getauxval(AT_PLATFORM);
    if (!plat || strlen(plat) > 32 || strchr(plat, '/'))
        plat = NULL;
    char legacy[5][80];
    int n_legacy = 0;
    if (plat) {
        snprintf(legacy[n_legacy++], sizeof legacy[0], "tls/%s/%s/", plat, plat);
        snprintf(legacy[n_legacy++], sizeof legacy[0], "tls/%s/", plat);
    }
    snprintf(legacy[n_legacy++], sizeof legacy[0], "tls/");
    if (plat) {
        snprintf(legacy[n_legacy++], sizeof legacy[0], "%s/%s/", plat, plat);
        snprintf(legacy[n_legacy++], sizeof legacy[0], "%s/", plat);
    }
    for (int i = 0; i < n_legacy; i++)
        if (snprintf(f, sizeof f, "%.*s/%s%s", (int)dlen, dir, legacy[i], soname) < (int)sizeof f &&
            screen_file(f, where, why, n))
            return 1;
    return 0;
}

#ifdef __GLIBC__
/* This object's handle (the caller whose RPATH and RUNPATH the loader
 * searches for a dlopen made from here): the program's, when memra is
 * linked into it. */
static const char self_anchor;
static void *self_handle(void)
{
    Dl_info info;
    struct link_map *lm = NULL;
    if (!dladdr1(&self_anchor, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
        return NULL;
    if (!lm->l_name || !*lm->l_name)
        return dlopen(NULL, RTLD_LAZY);
    /* by the name the loader holds it under: matched, nothing opened */
    return strchr(lm->l_name, '/') ? dlopen(lm->l_name, RTLD_LAZY | RTLD_NOLOAD) : NULL;
}
#endif

/* Calls fn(dir, dlen, where, arg) for every folder the loader would search
 * for a soname dlopen'ed from here, until one returns non-zero (returned):
 * LD_LIBRARY_PATH's elements as set now, the empty ones too (the loader
 * searches an empty element, first, last or between two separators, as the
 * working directory; it reads the variable once, at the start, so today's
 * value is screened in case it was set for a child to inherit), then the
 * loader's own list (dlinfo RTLD_DI_SERINFO: the RPATHs, LD_LIBRARY_PATH as
 * it read it, RUNPATH, the system folders; an empty element as "."). */
typedef int (*dir_fn)(const char *dir, size_t dlen, const char *where, void *arg);
static int each_search_dir(dir_fn fn, void *arg)
{
    const char *llp = getenv("LD_LIBRARY_PATH");
    for (const char *p = llp && *llp ? llp : NULL; p;) {
        const size_t len = strcspn(p, ":;");
        const int r = fn(len ? p : ".", len ? len : 1u, "in LD_LIBRARY_PATH", arg);
        if (r)
            return r;
        p = p[len] ? p + len + 1 : NULL;
    }
#ifdef __GLIBC__ /* RTLD_DI_SERINFO */
    void *self = self_handle();
    if (!self)
        return 0;
    Dl_serinfo size;
    Dl_serinfo *si = NULL;
    int r = 0;
    if (dlinfo(self, RTLD_DI_SERINFOSIZE, &size) == 0 && size.dls_size >= sizeof *si &&
        (si = malloc(size.dls_size))) {
        *si = size;
        if (dlinfo(self, RTLD_DI_SERINFOSIZE, si) == 0 && dlinfo(self, RTLD_DI_SERINFO, si) == 0)
            for (unsigned i = 0; !r && i < si->dls_cnt; i++) {
                const char *dir = si->dls_serpath[i].dls_name;
                if (dir && *dir)
                    r = fn(dir, strlen(dir), "on the loader's search path", arg);
            }
        free(si);
    }
    dlclose(self);
    return r;
#else
    (void)fn, (void)arg;
    return 0;
#endif
}

/* A name looked for in each folder, and a buffer for what is found (why
 * it is refused; the file's path). */
typedef struct name_arg {
    const char *name;
    char *buf;
    size_t n;
} name_arg;

static int screen_one(const char *dir, size_t dlen, const char *where, void *arg)
{
    const name_arg *a = arg;
    return screen_dir(dir, dlen, a->name, where, a->buf, a->n);
}

/* ---- ld.so.cache --------------------------------------------------------- */

/* Reads exactly n bytes at off (0), else -1. */
static int read_at(int fd, void *buf, size_t n, uint64_t off)
{
    char *p = buf;
    while (n) {
        const ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r, n -= (size_t)r, off += (uint64_t)r;
    }
    return 0;
}

const char *memra_ld_cache_path = "/etc/ld.so.cache";

/* The loader also takes a soname from ld.so.cache, whose folders
 * (/etc/ld.so.conf.d: a conda environment's lib, say) need not be on any
 * list above. The file's current format ("glibc-ld.so.cache" "1.1": a
 * header of 48 bytes, then entries of 24, flags, key and value offsets
 * from the header's start), read whole (at most 16 MiB), never blocking;
 * once a screening, when a name first gets this far (a library's DT_NEEDED
 * names are several; most are loaded already and never ask).
 * head == NULL: no cache to screen. */
typedef struct ld_cache {
    char *buf;
    const char *head;
    size_t room;
    int read; /* tried once: buf and head are what there is */
} ld_cache;

static void ld_cache_read(ld_cache *c)
{
    c->read = 1;
    const int fd = open(memra_ld_cache_path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 48 && sb.st_size <= (16 << 20) &&
        (c->buf = malloc((size_t)sb.st_size + 1)) &&
        read_at(fd, c->buf, (size_t)sb.st_size, 0) == 0) {
        const size_t size = (size_t)sb.st_size;
        c->buf[size] = 0; /* every string ends inside the buffer */
        static const char magic[] = "glibc-ld.so.cache1.1";
        const char *head = memmem(c->buf, size, magic, sizeof magic - 1);
        if (head && (size_t)(head - c->buf) + 48 <= size)
            c->head = head, c->room = size - (size_t)(head - c->buf);
    }
    close(fd);
}

/* Each entry whose key is `name`, screened at its path. */
static int screen_ld_cache(ld_cache *c, const char *name, char *why, size_t n)
{
    if (!c->read)
        ld_cache_read(c);
    if (!c->head)
        return 0;
    uint32_t nlibs;
    memcpy(&nlibs, c->head + 20, 4);
    for (uint32_t i = 0; i < nlibs && 48 + (size_t)(i + 1) * 24 <= c->room; i++) {
        uint32_t kv[2];
        memcpy(kv, c->head + 48 + (size_t)i * 24 + 4, 8);
        if (kv[0] < c->room && kv[1] < c->room && strcmp(c->head + kv[0], name) == 0 &&
            screen_file(c->head + kv[1], "(ld.so.cache's entry for it)", why, n))
            return 1;
    }
    return 0;
}

static int screen_name_in(ld_cache *c, const char *name, const char *origin, char *why, size_t n)
{
    name_arg a = {name, why, n};
    if (each_search_dir(screen_one, &a) || screen_ld_cache(c, name, why, n))
        return 1;
    if (!origin)
        return 0;
    const char *slash = strrchr(origin, '/');
    return slash && slash > origin &&
           screen_dir(origin, (size_t)(slash - origin), name, "beside it", why, n);
}

int memra_screen_name(const char *name, const char *origin, char *why, size_t n)
{
    ld_cache c = {0};
    const int bad = screen_name_in(&c, name, origin, why, n);
    free(c.buf);
    return bad;
}

/* ---- what a library needs ------------------------------------------------- */

static int screen_needed_in(ld_cache *c, int fd, const char *origin, char *why, size_t n)
{
    /* The file's DT_NEEDED names, from its program headers (a native
     * ELFCLASS64 object; anything else is left to the loader, which
     * refuses it). Bounded: at most 64 headers, 1,024 dynamic entries. */
    ElfW(Ehdr) eh;
    if (read_at(fd, &eh, sizeof eh, 0) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(ElfW(Phdr)) ||
        eh.e_phnum == 0 || eh.e_phnum > 64)
        return 0;
    ElfW(Phdr) ph[64];
    if (read_at(fd, ph, sizeof ph[0] * eh.e_phnum, eh.e_phoff))
        return 0;
    const ElfW(Phdr) *dyn = NULL;
    for (int i = 0; i < eh.e_phnum; i++)
        if (ph[i].p_type == PT_DYNAMIC)
            dyn = &ph[i];
    if (!dyn)
        return 0;
    size_t n_dyn = dyn->p_filesz / sizeof(ElfW(Dyn));
    n_dyn = n_dyn > 1024 ? 1024 : n_dyn;
    ElfW(Dyn) *d = malloc(n_dyn * sizeof *d + 1);
    if (!d || read_at(fd, d, n_dyn * sizeof *d, dyn->p_offset)) {
        free(d);
        return 0;
    }
    uint64_t strtab = 0, strsz = 0;
    for (size_t i = 0; i < n_dyn && d[i].d_tag != DT_NULL; i++)
        if (d[i].d_tag == DT_STRTAB)
            strtab = d[i].d_un.d_ptr;
        else if (d[i].d_tag == DT_STRSZ)
            strsz = d[i].d_un.d_val;
    /* the string table's place in the file, through the segment holding it */
    uint64_t stroff = UINT64_MAX;
    for (int i = 0; i < eh.e_phnum; i++)
        if (ph[i].p_type == PT_LOAD && strtab >= ph[i].p_vaddr &&
            strtab - ph[i].p_vaddr < ph[i].p_filesz)
            stroff = ph[i].p_offset + (strtab - ph[i].p_vaddr);
    int bad = 0;
    for (size_t i = 0; !bad && stroff != UINT64_MAX && i < n_dyn && d[i].d_tag != DT_NULL; i++) {
        if (d[i].d_tag != DT_NEEDED || d[i].d_un.d_val >= strsz)
            continue;
        char name[256] = "";
        const uint64_t left = strsz - d[i].d_un.d_val;
        if (read_at(fd, name, left < sizeof name - 1 ? (size_t)left : sizeof name - 1,
                    stroff + d[i].d_un.d_val))
            continue;
        /* a name with a slash is opened as given; one already loaded is
         * matched by the loader without a search */
        char path[PATH_MAX];
        if (!*name || strchr(name, '/') || loaded_path(name, path, sizeof path))
            continue;
        char said[256];
        if ((bad = screen_name_in(c, name, origin, said, sizeof said)))
            snprintf(why, n, "needs %s, and %s", name, said);
    }
    free(d);
    return bad;
}

int memra_screen_needed(int fd, const char *origin, char *why, size_t n)
{
    ld_cache c = {0};
    const int bad = screen_needed_in(&c, fd, origin, why, n);
    free(c.buf);
    return bad;
}

/* The file the loader would take for `soname` from the folders it searches
 * (their CPU subfolders aside; a soname only ld.so.cache knows is not
 * found here), into a->buf: 1 when there is one. */
static int find_one(const char *dir, size_t dlen, const char *where, void *arg)
{
    (void)where;
    const name_arg *a = arg;
    struct stat sb;
    return snprintf(a->buf, a->n, "%.*s/%s", (int)dlen, dir, a->name) < (int)a->n &&
           stat(a->buf, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* `soname` and what the file the loader will take for it needs, screened
 * with one reading of ld.so.cache: a FIFO named after NVRTC's librt.so.1
 * on LD_LIBRARY_PATH blocked the load as surely as one named after NVRTC. */
static int soname_screen(ld_cache *c, const char *soname, char *why, size_t n)
{
    if (screen_name_in(c, soname, NULL, why, n))
        return 1;
    char path[PATH_MAX];
    name_arg f = {soname, path, sizeof path};
    if (!each_search_dir(find_one, &f))
        return 0;
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat sb;
    const int bad = fd >= 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) &&
                    screen_needed_in(c, fd, path, why, n);
    if (fd >= 0)
        close(fd);
    return bad;
}

void *memra_soname_load(const char *soname, char *why, size_t n)
{
    ld_cache c = {0};
    const int bad = soname_screen(&c, soname, why, n);
    free(c.buf);
    if (bad)
        return NULL;
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        snprintf(why, n, "%s", dlerror());
    return h;
}
