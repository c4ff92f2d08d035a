#include "nvrtc_find.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"

/* The majors whose API (nvrtcGetCUBIN, nvrtcGetSupportedArchs) memra uses,
 * newest first. */
static const char *const sonames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"};
#define N_SONAMES (sizeof sonames / sizeof sonames[0])

static memra_nvrtc cands[MEMRA_NVRTC_MAX];
static void *handles[MEMRA_NVRTC_MAX];
static _Atomic int n_cands;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int discovered;

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

/* Records a candidate; a library already listed (the same handle) is not
 * listed again. Caller holds the lock. */
static memra_status add_locked(const char *path, const char *origin, void *h, const char *fail)
{
    const int n = atomic_load(&n_cands);
    for (int i = 0; i < n; i++)
        if (h ? handles[i] == h : !handles[i] && strcmp(cands[i].path, path) == 0)
            return cands[i].status;
    if (n == MEMRA_NVRTC_MAX)
        return memra_fail(MEMRA_ERR_NVRTC, "too many NVRTC candidates (%d)", MEMRA_NVRTC_MAX);
    memra_nvrtc *c = &cands[n];
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    c->origin = origin;
    if (h) {
        describe(c, h);
    } else {
        c->status = MEMRA_ERR_NVRTC;
        snprintf(c->why, sizeof c->why, "%s", fail);
    }
    handles[n] = h;
    atomic_store(&n_cands, n + 1);
    return c->status;
}

static memra_status open_and_add(const char *path, const char *origin)
{
    /* Handles are never closed: a kernel compiled by it may be loaded. */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const char *err = h ? NULL : dlerror();
    return add_locked(path, origin, h, err ? err : "could not be loaded");
}

/* A toolkit folder: the first soname present in lib64, then lib. */
static void add_toolkit(const char *var)
{
    const char *home = getenv(var);
    if (!home || !*home)
        return;
    char p[512];
    int found = 0;
    for (int d = 0; d < 2; d++)
        for (size_t i = 0; i < N_SONAMES; i++) {
            snprintf(p, sizeof p, "%s/%s/%s", home, d ? "lib" : "lib64", sonames[i]);
            if (access(p, F_OK) == 0) {
                open_and_add(p, var);
                found = 1;
            }
        }
    if (!found) {
        char why[300];
        snprintf(why, sizeof why, "no libnvrtc.so.13, .12 or .11.2 in %s/lib64 or %s/lib", home,
                 home);
        add_locked(home, var, NULL, why);
    }
}

/* The candidates that come before memra_set_nvrtc_path's: an NVRTC the
 * process already loaded, then MEMRA_NVRTC_PATH. Caller holds the lock. */
static void add_first_locked(void)
{
    for (size_t i = 0; i < N_SONAMES; i++) {
        void *h = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (!h)
            continue;
        struct link_map *lm = NULL;
        const char *where = sonames[i];
        if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name)
            where = lm->l_name;
        add_locked(where, "already loaded in the process", h, NULL);
    }
    const char *env = getenv("MEMRA_NVRTC_PATH");
    if (env && *env)
        open_and_add(env, "MEMRA_NVRTC_PATH");
}

/* The ones after it: the toolkit folders, then the loader path. */
static void add_rest_locked(void)
{
    add_toolkit("CUDA_HOME");
    add_toolkit("CUDA_PATH");
    for (size_t i = 0; i < N_SONAMES; i++)
        open_and_add(sonames[i], "loader path");
    discovered = 1;
}

int memra_nvrtc_candidates(const memra_driver *d, const memra_nvrtc **list)
{
    if (d->nvrtc) {
        *list = d->nvrtc;
        return d->n_nvrtc;
    }
    if (!discovered) {
        pthread_mutex_lock(&lock);
        if (!discovered) {
            add_first_locked();
            add_rest_locked();
        }
        pthread_mutex_unlock(&lock);
    }
    *list = cands;
    return atomic_load(&n_cands);
}

memra_status memra_nvrtc_add(const char *path, const char *origin)
{
    pthread_mutex_lock(&lock);
    /* Before discovery it takes its place in the order after
     * MEMRA_NVRTC_PATH; after it, it joins the list for engines that have
     * not loaded their kernel yet. */
    const int first = !discovered;
    if (first)
        add_first_locked();
    const int before = atomic_load(&n_cands);
    memra_status st = open_and_add(path, origin);
    if (st) {
        const memra_nvrtc *c = &cands[atomic_load(&n_cands) - 1];
        st = memra_fail(st, "memra_set_nvrtc_path: %s: %s", path,
                        atomic_load(&n_cands) > before ? c->why : "refused");
    }
    if (first)
        add_rest_locked();
    pthread_mutex_unlock(&lock);
    return st;
}

void memra_nvrtc_describe_failures(const memra_driver *d, char *buf, size_t len)
{
    const memra_nvrtc *list;
    const int n = memra_nvrtc_candidates(d, &list);
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < n && used < len; i++)
        if (list[i].status)
            used += (size_t)snprintf(buf + used, len - used, "%s  %s (%s): %s", used ? "\n" : "",
                                     list[i].path, list[i].origin, list[i].why);
    if (n == 0)
        snprintf(buf, len, "  no NVRTC candidate at all");
}

memra_status memra_set_nvrtc_path(const char *path)
{
    if (!path || !*path)
        return memra_fail(MEMRA_ERR_NULL_ARG, "memra_set_nvrtc_path: path is %s",
                          path ? "empty" : "NULL");
    return memra_nvrtc_add(path, "memra_set_nvrtc_path");
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
