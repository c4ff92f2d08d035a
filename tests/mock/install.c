/* The mock driver: Installing the mock table, and freeing what a test left behind. */
#include "mock_internal.h"

/* Frees every object a test left behind (mu held). */
void free_all(void)
{
    for (alloc_rec **list = &allocs; list; list = list == &allocs ? &recycled : NULL)
        while (*list) {
            alloc_rec *a = *list;
            *list = a->next;
            free((void *)a->p);
            free(a);
        }
    while (objs) {
        obj_rec *o = objs;
        objs = o->next;
        free(o->p);
        free(o);
    }
    free_stream_ops(&legacy);
    memset(&legacy, 0, sizeof legacy);
    legacy.blocking = legacy.legacy = 1;
    legacy.id = 1;
    while (reusable) {
        fstream *f = reusable;
        reusable = f->next;
        free(f);
    }
    for (fstream *s = live, *next; s; s = next) {
        next = s->next;
        if (s == per_thread)
            continue; /* the thread still points at it */
        free_stream_ops(s);
        free(s);
    }
    live = NULL;
    if (per_thread) {
        free_stream_ops(per_thread);
        memset(per_thread, 0, sizeof *per_thread);
        per_thread->blocking = per_thread->per_thread = 1;
        per_thread->id = next_stream_id++;
        live = per_thread;
    }
}

void mock_install(void)
{
    /* Mock images must never reach a real kernel cache. Cache tests point
     * MEMRA_CACHE_DIR at their own folders after this. */
    setenv("MEMRA_CACHE_DIR", "off", 1);
    pthread_mutex_lock(&mu);
    /* Whatever an earlier test left: its objects are gone with it. */
    free_all();
    gen = 0;
    for (int i = 0; i < 8; i++)
        ctx_id[i] = (unsigned long long)(i + 1);
    pthread_mutex_unlock(&mu);
    memset(&mock, 0, sizeof mock);
    memset(&mock_table, 0, sizeof mock_table);
    ctx_depth = 0;
    thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    mock.n_devices = 1;
    mock.sm_major = 9;
    mock.sm_minor = 0;
    mock.driver_version = 13000;
    static const int archs[] = {75, 80, 86, 89, 90, 100, 120};
    memset(&mock_nv, 0, sizeof mock_nv);
    snprintf(mock_nv.path, sizeof mock_nv.path, "mock-nvrtc");
    mock_nv.origin = "the mock driver";
    mock_nv.major = 13, mock_nv.minor = 0;
    mock_nv.n_archs = (int)(sizeof archs / sizeof archs[0]);
    memcpy(mock_nv.archs, archs, sizeof archs);

    memra_driver *d = &mock_table;
    d->cuda_status = MEMRA_OK;
    d->nvrtc = &mock_nv;
    d->n_nvrtc = 1;
#define MEMRA_X(name, ver, req) d->name = m_##name;
    MEMRA_CU_ENTRY_POINTS(MEMRA_X)
#undef MEMRA_X
#define SET(name) mock_nv.name = m_##name;
    MEMRA_NVRTC_ENTRY_POINTS(SET)
#undef SET
    memra_driver_install(d);
}

void mock_uninstall(void)
{
    memra_driver_install(NULL);
    pthread_mutex_lock(&mu);
    free_all();
    pthread_mutex_unlock(&mu);
}
