#include "nvrtc_find.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/env.h"
#include "base/error.h"
#include "base/warn.h"
#include "soname.h"

/* The majors whose API (nvrtcGetCUBIN, nvrtcGetSupportedArchs) memra uses,
 * newest first. */
static const char *const sonames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"};
#define N_SONAMES (sizeof sonames / sizeof sonames[0])

/* How a candidate not opened yet was found, which says what is checked
 * before it is loaded. */
typedef enum {
    NAMED,   /* the user named the file: a regular file, nothing more */
    DERIVED, /* memra built the path: the file and its folder must be trusted */
    SONAME,  /* the loader path: the system's own search */
    REFUSED  /* a setting refused at discovery: listed, with `why`, when its turn comes */
} cand_kind;

typedef struct pending {
    struct pending *next;
    cand_kind kind;
    const char *origin;
    size_t root_len; /* DERIVED: the toolkit folder is path[0, root_len) */
    char path[MEMRA_NVRTC_PATH_MAX + 1];
    char why[256]; /* REFUSED: the reason */
} pending;

/* Listed candidates never change once n_cands covers them, so readers need
 * no lock. Everything else is under `lock`. */
static memra_nvrtc cands[MEMRA_NVRTC_MAX];
static void *handles[MEMRA_NVRTC_MAX];
/* A loaded candidate's file by identity (st_dev, st_ino): what the loader
 * itself compares, whatever name the file was reached by. */
typedef struct file_id {
    dev_t dev;
    ino_t ino;
    int known;
} file_id;
static file_id ids[MEMRA_NVRTC_MAX];
static _Atomic int n_cands, has_usable, discovered;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Not opened yet, in order: named ones before derived ones. Paths set
 * before discovery wait in `early` to go after MEMRA_NVRTC_PATH. */
static pending *named, *derived, *early;

/* The lock, with what is warned under it sent after it is let go: the log
 * callback may call memra_nvrtc_list() and the like, which take it. */
static void lock_discovery(void)
{
    memra_warn_hold();
    pthread_mutex_lock(&lock);
}

static void unlock_discovery(void)
{
    pthread_mutex_unlock(&lock);
    memra_warn_release();
}

static void append(pending **q, pending *p)
{
    while (*q)
        q = &(*q)->next;
    *q = p;
}

static int queued(const pending *q, const char *path)
{
    for (; q; q = q->next)
        if (q->kind != REFUSED && strcmp(q->path, path) == 0)
            return 1;
    return 0;
}

/* ---- the list ------------------------------------------------------------- */

/* Resolves every entry point and asks the library what it is. */
static void describe(memra_nvrtc *c, void *h)
{
#define MEMRA_X(name)                                                                              \
    memra_set_fn(&c->name, dlsym(h, #name));                                                       \
    if (!c->name) {                                                                                \
        c->status = MEMRA_ERR_NVRTC;                                                               \
        snprintf(c->why, sizeof c->why, "lacks %s (older than NVRTC 11.2?)", #name);               \
        return;                                                                                    \
    }
    MEMRA_NVRTC_ENTRY_POINTS(MEMRA_X)
#undef MEMRA_X
    int n = 0;
    if (c->nvrtcVersion(&c->major, &c->minor) != NVRTC_SUCCESS ||
        c->nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0 ||
        n > (int)(sizeof c->archs / sizeof c->archs[0]) ||
        c->nvrtcGetSupportedArchs(c->archs) != NVRTC_SUCCESS) {
        c->status = MEMRA_ERR_NVRTC;
        snprintf(c->why, sizeof c->why, "does not say its version or archs");
        return;
    }
    if (!MEMRA_NVRTC_VERSION_OK(c->major, c->minor)) {
        c->status = MEMRA_ERR_NVRTC;
        snprintf(c->why, sizeof c->why, "says its version is %d.%d, which no CUDA release has",
                 c->major, c->minor);
        return;
    }
    /* NVRTC loads its builtins library by soname at its first compile, by
     * the loader's search and its own folder: a FIFO of that name there
     * would block that compile (under an engine's load lock) for ever. */
    char builtins[48], said[200];
    snprintf(builtins, sizeof builtins, "libnvrtc-builtins.so.%d.%d", c->major, c->minor);
    if (memra_screen_name(builtins, c->path, said, sizeof said)) {
        c->status = MEMRA_ERR_NVRTC;
        snprintf(c->why, sizeof c->why, "loads %.40s when it compiles, and %.180s", builtins, said);
        return;
    }
    c->n_archs = n;
    /* Ascending, whatever order the library reports. */
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && c->archs[k - 1] > c->archs[k]; k--) {
            int t = c->archs[k];
            c->archs[k] = c->archs[k - 1];
            c->archs[k - 1] = t;
        }
    c->status = MEMRA_OK;
}

static file_id id_of(const struct stat *sb)
{
    return (file_id){sb->st_dev, sb->st_ino, 1};
}

/* The listed library that is the file `id`, or -1. */
static int listed_file(const file_id *id)
{
    const int n = atomic_load(&n_cands);
    for (int i = 0; id && id->known && i < n; i++)
        if (handles[i] && ids[i].known && ids[i].dev == id->dev && ids[i].ino == id->ino)
            return i;
    return -1;
}

/* Lists a loaded library (h, the file `id` when known) or a refusal (h
 * NULL, the reason in fmt); a library already listed (the same handle) is
 * not listed again. */
static void list_locked(const char *path, const char *origin, void *h, const file_id *id,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void list_locked(const char *path, const char *origin, void *h, const file_id *id,
                        const char *fmt, ...)
{
    const int n = atomic_load(&n_cands);
    for (int i = 0; h && i < n; i++)
        if (handles[i] == h)
            return;
    if (n == MEMRA_NVRTC_MAX)
        return; /* full: what it would say, the caller's message says */
    memra_nvrtc *c = &cands[n];
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    c->origin = origin;
    if (h) {
        describe(c, h);
    } else {
        va_list ap;
        va_start(ap, fmt);
        c->status = MEMRA_ERR_NVRTC;
        vsnprintf(c->why, sizeof c->why, fmt, ap);
        va_end(ap);
    }
    handles[n] = h;
    ids[n] = h && id ? *id : (file_id){0, 0, 0};
    atomic_store(&n_cands, n + 1);
    if (c->status == MEMRA_OK)
        atomic_store(&has_usable, 1);
}

/* ---- checking a file before it is loaded ---------------------------------- */

/* Root's or ours, and writable by nobody else. */
static int trusted(const struct stat *sb, const char *what, char *why, size_t n)
{
    if (sb->st_uid != 0 && sb->st_uid != geteuid()) {
        snprintf(why, n, "%s is owned by uid %u, neither root nor this process's uid %u", what,
                 (unsigned)sb->st_uid, (unsigned)geteuid());
        return 0;
    }
    if (sb->st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, n, "%s is writable by group or others (mode %03o)", what,
                 (unsigned)(sb->st_mode & 0777));
        return 0;
    }
    return 1;
}

/* The folder that holds `file` (a path with at least one '/'). */
static int folder_trusted(const char *file, const char *what, char *why, size_t n)
{
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s", file) >= (int)sizeof dir)
        return snprintf(why, n, "%s: path too long", what), 0;
    char *slash = strrchr(dir, '/');
    if (!slash)
        return 1;
    slash[slash == dir] = 0; /* "/lib.so" is in "/" */
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        snprintf(why, n, "%s cannot be examined (%s)", what, strerror(errno));
        return 0;
    }
    return trusted(&sb, what, why, n);
}

/* The toolkit folder itself (whoever can write it can swap lib64). */
static int root_trusted(const char *path, size_t root_len, char *why, size_t n)
{
    char root[PATH_MAX];
    struct stat sb;
    if (!root_len || root_len >= sizeof root)
        return 1;
    memcpy(root, path, root_len);
    root[root_len] = 0;
    if (stat(root, &sb) != 0) {
        snprintf(why, n, "the toolkit folder cannot be examined (%s)", strerror(errno));
        return 0;
    }
    return trusted(&sb, "the toolkit folder", why, n);
}

/* Opens `path` without blocking (a FIFO or a device answers at once) and
 * checks what was opened: a regular file, and for a derived path the file,
 * the toolkit folder, the folder the file is named in and the folder it
 * really lives in (a toolkit's libnvrtc.so.13 is a link) trusted. The
 * descriptor, or -1 with why. */
static int open_checked(const char *path, cand_kind kind, size_t root_len, file_id *id, char *why,
                        size_t n)
{
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, n, "cannot be opened (%s)", strerror(errno));
        return -1;
    }
    struct stat sb;
    char real[PATH_MAX];
    int ok = fstat(fd, &sb) == 0;
    if (!ok)
        snprintf(why, n, "cannot be examined (%s)", strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        ok = 0, snprintf(why, n, "is not a regular file (%s)", memra_file_type(sb.st_mode));
    else if (kind == DERIVED)
        ok = trusted(&sb, "the file", why, n) && root_trusted(path, root_len, why, n) &&
             folder_trusted(path, "its folder", why, n) &&
             (realpath(path, real)
                  ? folder_trusted(real, "the folder it links into", why, n)
                  : (snprintf(why, n, "cannot be resolved (%s)", strerror(errno)), 0));
    if (!ok) {
        close(fd);
        return -1;
    }
    *id = id_of(&sb);
    return fd;
}

/* The lowest descriptor number never yet put in a /proc/self/fd name. */
static int fresh_fd_name;

/* dlopen of the file behind fd, through /proc/self/fd, so the file checked
 * is the file loaded whatever happens to the path meanwhile. The loader
 * knows objects by name first, and remembers every name it was handed for
 * an object (the one an object was loaded under, and each name that turned
 * out to be a file already loaded): a /proc/self/fd/N name it has seen
 * would give that object back, whatever file N is now. So every load takes
 * a number never used in such a name before (moving the descriptor up
 * when needed), and a name some other code loaded an object under is
 * traded for a fresh one too. The descriptor of a loaded library stays
 * open for the process's life (the handle is never closed either), so no
 * one else's name reuses its number. Without /proc the checked path is
 * loaded by name. *fd is closed unless loaded. */
static void *load_fd(int *fd, const char *path, char *why, size_t n)
{
    char via[64];
    snprintf(via, sizeof via, "/proc/self/fd/%d", *fd);
    if (access(via, R_OK) != 0) {
        close(*fd);
        *fd = -1;
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            snprintf(why, n, "%s", dlerror());
        return h;
    }
    for (int tries = 0; tries < 8; tries++) {
        if (*fd < fresh_fd_name) {
            const int fresh = fcntl(*fd, F_DUPFD_CLOEXEC, fresh_fd_name);
            close(*fd);
            if ((*fd = fresh) < 0) {
                snprintf(why, n, "cannot be loaded (no file descriptor: %s)", strerror(errno));
                return NULL;
            }
        }
        fresh_fd_name = *fd + 1;
        snprintf(via, sizeof via, "/proc/self/fd/%d", *fd);
        /* A name some other code loaded an object under (its descriptor
         * since closed and the number reused): the loader answers NOLOAD by
         * name before it looks at any file. */
        void *old = dlopen(via, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        struct link_map *lm = NULL;
        const int stale = old && dlinfo(old, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name &&
                          strcmp(lm->l_name, via) == 0;
        if (old)
            dlclose(old); /* NOLOAD took a reference */
        if (stale)
            continue;
        void *h = dlopen(via, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(why, n, "%s", dlerror());
            close(*fd);
            *fd = -1;
        }
        return h;
    }
    snprintf(why, n, "cannot be loaded (the loader holds other objects under its names)");
    close(*fd);
    *fd = -1;
    return NULL;
}

/* ---- opening the next candidate --------------------------------------------- */

/* The file a loaded object was loaded from, by identity (stat does not
 * open it). */
static file_id loaded_id(void *h)
{
    struct link_map *lm = NULL;
    struct stat sb;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name &&
        stat(lm->l_name, &sb) == 0)
        return id_of(&sb);
    return (file_id){0, 0, 0};
}

static void open_one_locked(const pending *p)
{
    char why[256] = "", e[MEMRA_ESCAPED_MAX];
    void *h = NULL;
    const char *path = p->path;
    struct link_map *lm = NULL;
    file_id id = {0, 0, 0};
    if (p->kind == REFUSED) {
        list_locked(p->path, p->origin, NULL, NULL, "%s", p->why);
        return;
    }
    if (p->kind == SONAME) {
        h = memra_soname_load(p->path, why, sizeof why);
        /* Say which file the loader took. */
        if (h && dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name &&
            strlen(lm->l_name) <= MEMRA_NVRTC_PATH_MAX)
            path = lm->l_name;
        if (h)
            id = loaded_id(h);
    } else {
        int fd = open_checked(p->path, p->kind, p->root_len, &id, why, sizeof why);
        /* A derived file that is there but fails the checks is worth a
         * word: someone may be planting code, or a toolkit is misinstalled. */
        if (fd < 0 && p->kind == DERIVED && strncmp(why, "cannot be opened", 16) != 0)
            memra_warn(MEMRA_WARN_NVRTC_TRUST, "%s (from %s) %s: not loaded",
                       memra_escape(p->path, e, sizeof e), p->origin, why);
        /* A library already listed, reached by another name (a toolkit's
         * lib and lib64 holding the same file): not loaded or listed again. */
        if (fd >= 0 && listed_file(&id) >= 0) {
            close(fd);
            return;
        }
        /* what it needs is searched for as it loads: a FIFO named after
         * one (librt.so.1 on LD_LIBRARY_PATH) blocked the load for ever */
        if (fd >= 0 && memra_screen_needed(fd, p->path, why, sizeof why)) {
            close(fd);
            fd = -1;
        }
        if (fd >= 0)
            h = load_fd(&fd, p->path, why, sizeof why);
        /* The loader gave back a library already listed as another file:
         * never take it for this one. */
        const int n = atomic_load(&n_cands);
        for (int i = 0; h && i < n; i++)
            if (handles[i] == h && !ids[i].known) { /* found another way, file unknown */
                if (fd >= 0)
                    close(fd);
                return;
            } else if (handles[i] == h) {
                snprintf(why, sizeof why, "the loader gave back %s for it instead",
                         memra_escape(cands[i].path, e, sizeof e));
                h = NULL;
            }
        if (!h && fd >= 0) {
            close(fd);
            fd = -1;
        }
        if (!h && strcmp(p->origin, "MEMRA_NVRTC_PATH") == 0)
            memra_warn_env("MEMRA_NVRTC_PATH", "MEMRA_NVRTC_PATH=%s %s: not used",
                           memra_escape(p->path, e, sizeof e), why);
    }
    list_locked(path, p->origin, h, &id, "%s", why);
}

static int open_next_locked(void)
{
    pending **q = named ? &named : &derived;
    pending *p = *q;
    if (!p)
        return 0;
    *q = p->next;
    open_one_locked(p);
    free(p);
    return 1;
}

/* ---- discovery --------------------------------------------------------------- */

static pending *new_pending(cand_kind kind, const char *origin, const char *path)
{
    pending *p = calloc(1, sizeof *p);
    if (p) {
        p->kind = kind, p->origin = origin;
        snprintf(p->path, sizeof p->path, "%s", path);
    }
    return p;
}

/* A setting refused at discovery, queued in `q` where its candidates would
 * have gone, so the list keeps the order engines consider them in (listed
 * at once, a refused CUDA_PATH came before CUDA_HOME's files). */
static void refuse_locked(pending **q, const char *origin, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void refuse_locked(pending **q, const char *origin, const char *path, const char *fmt, ...)
{
    pending *p = new_pending(REFUSED, origin, path);
    if (!p) { /* out of memory: said now rather than not at all */
        list_locked(path, origin, NULL, NULL, "refused (and out of host memory to queue why)");
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->why, sizeof p->why, fmt, ap);
    va_end(ap);
    append(q, p);
}

/* A variable naming a path: absolute and short enough, else refused with a
 * warning and queued in `q` with why (never resolved against whatever the
 * working directory is when the first engine starts). */
static const char *path_var_locked(const char *var, size_t suffix, pending **q)
{
    const char *v = memra_env(var);
    char e[MEMRA_ESCAPED_MAX];
    if (!v)
        return NULL;
    if (v[0] != '/') {
        memra_warn_env(var,
                       "%s=%s is not an absolute path: not searched for NVRTC (give the full path)",
                       var, memra_escape(v, e, sizeof e));
        refuse_locked(q, var, v, "is not an absolute path");
        return NULL;
    }
    if (strlen(v) + suffix > MEMRA_NVRTC_PATH_MAX) {
        if (suffix)
            memra_warn_env(
                var,
                "%s is %zu bytes long: with /lib64/libnvrtc.so.11.2 added it passes the %zu "
                "bytes memra keeps for a path, so it is not searched for NVRTC",
                var, strlen(v), (size_t)MEMRA_NVRTC_PATH_MAX);
        else
            memra_warn_env(
                var,
                "%s is %zu bytes long, more than the %zu bytes memra keeps for a path: not "
                "used",
                var, strlen(v), (size_t)MEMRA_NVRTC_PATH_MAX);
        /* its length as the warning gives it (the list said the length with
         * the suffix: 624 bytes where the warning said 601) */
        if (suffix)
            refuse_locked(q, var, "(too long)",
                          "is %zu bytes long, %zu with /lib64/libnvrtc.so.11.2 added: longer "
                          "than the %zu memra keeps",
                          strlen(v), strlen(v) + suffix, (size_t)MEMRA_NVRTC_PATH_MAX);
        else
            refuse_locked(q, var, "(too long)",
                          "is %zu bytes long, longer than the %zu memra keeps", strlen(v),
                          (size_t)MEMRA_NVRTC_PATH_MAX);
        return NULL;
    }
    return v;
}

/* A toolkit folder: each soname present in lib64, then lib. */
static void add_toolkit_locked(const char *var)
{
    const char *home = path_var_locked(var, strlen("/lib64/libnvrtc.so.11.2"), &derived);
    if (!home)
        return;
    int found = 0;
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < N_SONAMES; i++) {
            char p[MEMRA_NVRTC_PATH_MAX + 1];
            struct stat sb;
            snprintf(p, sizeof p, "%s/%s/%s", home, d ? "lib" : "lib64", sonames[i]);
            if (lstat(p, &sb) == 0) {
                pending *c = new_pending(DERIVED, var, p);
                if (c) {
                    c->root_len = strlen(home);
                    append(&derived, c);
                }
                found = 1;
            }
        }
    if (!found)
        refuse_locked(&derived, var, home, "no libnvrtc.so.13, .12 or .11.2 in its lib64 or lib");
}

/* Once: what the process already loaded (listed at once: it is in the
 * process anyway), then the rest queued in order. "Already loaded" is read
 * from the loader's own list of objects (dl_iterate_phdr, each object's
 * soname), never by dlopen(soname, RTLD_NOLOAD): for a soname nothing
 * loaded has, that searches the loader path and opens what it finds there,
 * and a FIFO on LD_LIBRARY_PATH would block it for ever. The handle is then
 * taken by the object's own file name, which the loader matches among what
 * it has loaded without opening anything. */
static void discover_locked(void)
{
    if (atomic_load(&discovered))
        return;
    for (size_t i = 0; i < N_SONAMES; i++) {
        char path[MEMRA_NVRTC_PATH_MAX + 1];
        void *h = memra_soname_loaded(sonames[i], path, sizeof path);
        if (!h)
            continue;
        const file_id id = loaded_id(h);
        list_locked(path, "already loaded in the process", h, &id, "%s", "");
    }
    const char *env = path_var_locked("MEMRA_NVRTC_PATH", 0, &named);
    pending *p = env ? new_pending(NAMED, "MEMRA_NVRTC_PATH", env) : NULL;
    if (p)
        append(&named, p);
    append(&named, early);
    early = NULL;
    add_toolkit_locked("CUDA_HOME");
    add_toolkit_locked("CUDA_PATH");
    for (size_t i = 0; i < N_SONAMES; i++)
        if ((p = new_pending(SONAME, "loader path", sonames[i])))
            append(&derived, p);
    atomic_store(&discovered, 1);
}

int memra_nvrtc_candidates(const memra_driver *d, const memra_nvrtc **list)
{
    if (d->nvrtc) {
        *list = d->nvrtc;
        return d->n_nvrtc;
    }
    if (!atomic_load(&discovered) || !atomic_load(&has_usable)) {
        lock_discovery();
        discover_locked();
        while (!atomic_load(&has_usable) && open_next_locked())
            ;
        unlock_discovery();
    }
    *list = cands;
    return atomic_load(&n_cands);
}

int memra_nvrtc_open_next(const memra_driver *d)
{
    if (d->nvrtc)
        return 0;
    lock_discovery();
    discover_locked();
    const int r = open_next_locked();
    unlock_discovery();
    return r;
}

/* ---- the public calls ---------------------------------------------------------- */

memra_status memra_set_nvrtc_path(const char *path)
{
    static const char fn[] = "memra_set_nvrtc_path";
    if (!path)
        return memra_fail(MEMRA_ERR_NULL_ARG, "%s: path is NULL", fn);
    if (!*path) /* a string, not a NULL pointer: a wrong value */
        return memra_fail(MEMRA_ERR_INVALID_ARG, "%s: path is empty", fn);
    char e[MEMRA_ESCAPED_MAX], abs[MEMRA_NVRTC_PATH_MAX + 1], why[256];
    /* A relative path means the working directory now, not at first use.
     * snprintf's count is the whole length, cut or not: what decides
     * whether the path fits (and, being used, what keeps gcc's
     * -Wformat-truncation quiet at -O0, where it cannot see a check made
     * before the call). */
    int len;
    if (path[0] != '/') {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd))
            return memra_fail(MEMRA_ERR_NVRTC,
                              "%s: %s is relative and the working directory cannot be read (%s)",
                              fn, memra_escape(path, e, sizeof e), strerror(errno));
        len = snprintf(abs, sizeof abs, "%s/%s", cwd, path);
    } else {
        len = snprintf(abs, sizeof abs, "%s", path);
    }
    if (len < 0 || (size_t)len > MEMRA_NVRTC_PATH_MAX)
        return memra_fail(MEMRA_ERR_INVALID_ARG,
                          "%s: the path is %d bytes%s, longer than the %zu memra keeps: %s", fn,
                          len, path[0] == '/' ? "" : " once made absolute",
                          (size_t)MEMRA_NVRTC_PATH_MAX, memra_escape(path, e, sizeof e));
    /* Checked now, so a wrong path is said to the caller; loaded only when
     * no candidate before it serves. */
    file_id id;
    const int fd = open_checked(abs, NAMED, 0, &id, why, sizeof why);
    if (fd < 0)
        return memra_fail(MEMRA_ERR_NVRTC, "%s: %s %s", fn, memra_escape(abs, e, sizeof e), why);
    close(fd);
    lock_discovery();
    memra_status st = MEMRA_OK;
    int listed = 0;
    for (int i = 0; i < atomic_load(&n_cands); i++)
        listed |= strcmp(cands[i].path, abs) == 0;
    if (!listed && !queued(named, abs) && !queued(early, abs) && !queued(derived, abs)) {
        pending *p = new_pending(NAMED, "memra_set_nvrtc_path", abs);
        if (!p)
            st = memra_fail(MEMRA_ERR_OUT_OF_MEMORY, "%s: out of host memory", fn);
        else
            append(atomic_load(&discovered) ? &named : &early, p);
    }
    unlock_discovery();
    return st;
}

memra_status memra_nvrtc_available(int *count)
{
    if (!count)
        return memra_fail(MEMRA_ERR_NULL_ARG, "memra_nvrtc_available: count is NULL");
    const memra_nvrtc *list;
    const int n = memra_nvrtc_candidates(memra_driver_get(), &list);
    *count = 0;
    for (int i = 0; i < n; i++)
        *count += list[i].status == MEMRA_OK;
    return MEMRA_OK;
}

static void info_of(const memra_nvrtc *c, memra_nvrtc_info *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->path, sizeof o->path, "%s", c->path);
    snprintf(o->origin, sizeof o->origin, "%s", c->origin ? c->origin : "");
    o->state = c->status == MEMRA_OK ? MEMRA_NVRTC_USABLE : MEMRA_NVRTC_REFUSED;
    snprintf(o->why, sizeof o->why, "%s", c->status ? c->why : "");
    if (c->status == MEMRA_OK) {
        o->version = MEMRA_CUDA_VERSION_CODE(c->major, c->minor);
        o->n_archs = c->n_archs;
        memcpy(o->archs, c->archs, sizeof(int) * (size_t)c->n_archs);
    }
}

memra_status memra_nvrtc_list(memra_nvrtc_info *out, int max, int *count)
{
    if (!count || (max > 0 && !out))
        return memra_fail(MEMRA_ERR_NULL_ARG, "memra_nvrtc_list: %s is NULL",
                          count ? "out" : "count");
    if (max < 0)
        return memra_fail(MEMRA_ERR_INVALID_ARG, "memra_nvrtc_list: max = %d is negative", max);
    const memra_driver *d = memra_driver_get();
    const memra_nvrtc *list;
    int n = memra_nvrtc_candidates(d, &list);
    if (d->nvrtc) {
        for (int i = 0; i < n && i < max; i++)
            info_of(&list[i], &out[i]);
        *count = n;
        return MEMRA_OK;
    }
    /* One consistent view: the listed ones, then those not tried yet in
     * the order they would be. */
    lock_discovery();
    n = atomic_load(&n_cands);
    for (int i = 0; i < n && i < max; i++)
        info_of(&cands[i], &out[i]);
    const pending *qs[] = {named, early, derived};
    for (int k = 0; k < 3; k++)
        for (const pending *p = qs[k]; p; p = p->next, n++)
            if (n < max) {
                memset(&out[n], 0, sizeof out[n]);
                snprintf(out[n].path, sizeof out[n].path, "%s", p->path);
                snprintf(out[n].origin, sizeof out[n].origin, "%s", p->origin);
                out[n].state = p->kind == REFUSED ? MEMRA_NVRTC_REFUSED : MEMRA_NVRTC_NOT_TRIED;
                if (p->kind == REFUSED)
                    snprintf(out[n].why, sizeof out[n].why, "%s", p->why);
            }
    unlock_discovery();
    *count = n;
    return MEMRA_OK;
}
