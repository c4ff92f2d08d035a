/* Loading a shared library by soname without ever blocking (header). */
#include "soname.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void *memra_soname_load(const char *soname, char *why, size_t n)
{
    const char *llp = getenv("LD_LIBRARY_PATH");
    /* Every element, the empty ones too: the loader searches an empty
     * element (first, last or between two separators) as the working
     * directory, and a FIFO there would block dlopen as surely. */
    for (const char *p = llp && *llp ? llp : NULL; p;) {
        const size_t len = strcspn(p, ":;");
        const char *dir = len ? p : ".";
        const size_t dlen = len ? len : 1u;
        char f[PATH_MAX];
        if (dlen + strlen(soname) + 2 < sizeof f) {
            struct stat sb;
            snprintf(f, sizeof f, "%.*s/%s", (int)dlen, dir, soname);
            if (stat(f, &sb) == 0 && !S_ISREG(sb.st_mode)) {
                char e[MEMRA_ESCAPED_MAX];
                snprintf(why, n, "%s in LD_LIBRARY_PATH is not a regular file (%s)",
                         memra_escape(f, e, sizeof e), memra_file_type(sb.st_mode));
                return NULL;
            }
        }
        p = p[len] ? p + len + 1 : NULL;
    }
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        snprintf(why, n, "%s", dlerror());
    return h;
}
