/* Loading a shared library by soname without ever blocking (header). */
#include "soname.h"

#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

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

void *memra_soname_loaded(const char *soname, char *path, size_t n)
{
    loaded_query q = {soname, path, n, 0};
    dl_iterate_phdr(find_soname, &q);
    return q.found ? dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD) : NULL;
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

/* Every folder the loader would search for a soname dlopen'ed from here,
 * as it says itself (dlinfo RTLD_DI_SERINFO: the RPATHs, LD_LIBRARY_PATH as
 * it read it at the process's start, RUNPATH, the system folders; an empty
 * LD_LIBRARY_PATH element as "."), each with its CPU subfolders. */
static int screen_search_path(const char *soname, char *why, size_t n)
{
#ifdef __GLIBC__ /* RTLD_DI_SERINFO */
    void *self = self_handle();
    if (!self)
        return 0;
    Dl_serinfo size;
    Dl_serinfo *si = NULL;
    int bad = 0;
    if (dlinfo(self, RTLD_DI_SERINFOSIZE, &size) == 0 && size.dls_size >= sizeof *si &&
        (si = malloc(size.dls_size))) {
        *si = size;
        if (dlinfo(self, RTLD_DI_SERINFOSIZE, si) == 0 && dlinfo(self, RTLD_DI_SERINFO, si) == 0)
            for (unsigned i = 0; !bad && i < si->dls_cnt; i++) {
                const char *dir = si->dls_serpath[i].dls_name;
                if (dir && *dir)
                    bad =
                        screen_dir(dir, strlen(dir), soname, "on the loader's search path", why, n);
            }
        free(si);
    }
    dlclose(self);
    return bad;
#else
    (void)soname, (void)why, (void)n;
    return 0;
#endif
}

void *memra_soname_load(const char *soname, char *why, size_t n)
{
    const char *llp = getenv("LD_LIBRARY_PATH");
    /* Every element, the empty ones too: the loader searches an empty
     * element (first, last or between two separators) as the working
     * directory, and a FIFO there would block dlopen as surely. (The
     * loader reads the variable once, at the start; this is today's, in
     * case it was set for a child to inherit; the loader's own list comes
     * next.) */
    for (const char *p = llp && *llp ? llp : NULL; p;) {
        const size_t len = strcspn(p, ":;");
        if (screen_dir(len ? p : ".", len ? len : 1u, soname, "in LD_LIBRARY_PATH", why, n))
            return NULL;
        p = p[len] ? p + len + 1 : NULL;
    }
    if (screen_search_path(soname, why, n))
        return NULL;
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        snprintf(why, n, "%s", dlerror());
    return h;
}
