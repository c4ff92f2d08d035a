#include "mock_driver.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "kernel_on_host.h"
#include "route_abi.h"
#include "vrows_abi.h"

mock_state mock;
memra_driver mock_table;
memra_nvrtc mock_nv;

/* ---- objects ---------------------------------------------------------------
 * One mutex guards every object below. Work runs with it held, except while
 * a gate waits and while a test's after_op hook runs. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct fstream fstream;
/* Streams are named by id in everything that outlives a call (events, waits,
 * graphs): a destroyed stream's handle is handed out again by the next
 * cuStreamCreate, as the driver may, while its queued work still runs. */
typedef struct fevent {
    int gen;
    unsigned long long sid; /* the stream of the last record outside capture (0: none) */
    size_t seq;
    int captured; /* last recorded inside a capture */
} fevent;

typedef struct op {
    mock_op_kind kind;
    mock_launch l;
    void *host;
    CUdeviceptr dev;
    size_t n;
    unsigned char *staged; /* pageable source copied at enqueue, as the driver stages it */
    unsigned val;
    unsigned long long target; /* MOCK_OP_WAIT: run stream `target` up to target_seq */
    size_t target_seq;
    fevent *event; /* MOCK_OP_WAIT captured as an external event node, bound at graph launch */
    _Atomic int *gate;
} op;

struct fstream {
    int gen;
    unsigned long long id; /* cuStreamGetId: never reused */
    int blocking, legacy, per_thread;
    int zombie; /* destroyed by its owner, its queued work still to run */
    op *ops;    /* every op ever queued; op i has sequence number i + 1 */
    size_t n_ops, room, done;
    int running;
    pthread_t runner;
    int capturing, invalidated;
    CUstreamCaptureMode mode;
    pthread_t owner;
    op *cap;
    size_t n_cap, cap_room;
    fstream *next; /* live streams */
};

typedef struct fgraph {
    op *ops;
    size_t n;
} fgraph;

typedef struct fmodule {
    int gen;
} fmodule;

typedef struct alloc_rec {
    uintptr_t p;
    size_t n;
    int pinned;
    struct alloc_rec *next;
} alloc_rec;

/* Events and modules, so that those a context reset orphans (their owner
 * must not destroy them) are freed with the test. */
typedef struct obj_rec {
    void *p;
    struct obj_rec *next;
} obj_rec;
static obj_rec *objs;

static void *new_obj(size_t size)
{
    obj_rec *o = calloc(1, sizeof *o);
    o->p = calloc(1, size);
    o->next = objs;
    objs = o;
    return o->p;
}

static void free_obj(void *p)
{
    for (obj_rec **o = &objs; *o; o = &(*o)->next)
        if ((*o)->p == p) {
            obj_rec *dead = *o;
            *o = dead->next;
            free(dead->p);
            free(dead);
            return;
        }
}

static fstream legacy;
static fstream *live;     /* created, per-thread and destroyed-but-busy streams */
static fstream *reusable; /* destroyed streams' handles, handed out again */
static unsigned long long next_stream_id = 2; /* the legacy stream is 1 */
static _Thread_local fstream *per_thread;
static _Thread_local CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static alloc_rec *allocs;
static alloc_rec *recycled; /* freed device blocks, with mock.recycle_memory */
static int gen;
static unsigned long long ctx_id[8], next_ctx_id = 100;
static int fake_ctx[8];
static char fn_vrows, fn_take, fn_route, fn_route_block;

/* Counts the call and says whether it is the one chosen to fail. */
static int failing(int idx)
{
    int n = ++mock.calls[idx];
    return mock.fail_result && mock.fail_call == idx && mock.fail_nth == n;
}
#define ENTER_CU(name)                                                                             \
    do {                                                                                           \
        if (failing(MOCK_##name))                                                                  \
            return (CUresult)mock.fail_result;                                                     \
    } while (0)
#define ENTER_NV(name)                                                                             \
    do {                                                                                           \
        if (failing(MOCK_##name))                                                                  \
            return (nvrtcResult)mock.fail_result;                                                  \
    } while (0)
#define LOCKED(expr)                                                                               \
    do {                                                                                           \
        pthread_mutex_lock(&mu);                                                                   \
        CUresult r_ = (expr);                                                                      \
        pthread_mutex_unlock(&mu);                                                                 \
        return r_;                                                                                 \
    } while (0)

static fstream *S(CUstream h)
{
    if (!h || h == CU_STREAM_LEGACY)
        return &legacy;
    if (h == CU_STREAM_PER_THREAD) {
        if (!per_thread) {
            per_thread = calloc(1, sizeof *per_thread);
            per_thread->blocking = per_thread->per_thread = 1;
            per_thread->gen = gen;
            per_thread->id = next_stream_id++;
            per_thread->next = live;
            live = per_thread;
        }
        return per_thread;
    }
    return (fstream *)h;
}

/* The stream with cuStreamGetId `id`, or NULL once it is destroyed and its
 * work has run. */
static fstream *stream_by_id(unsigned long long id)
{
    if (id == legacy.id)
        return &legacy;
    for (fstream *s = live; s; s = s->next)
        if (s->id == id)
            return s;
    return NULL;
}

static int stale(int g)
{
    if (g == gen)
        return 0;
    mock.stale_uses++;
    return 1;
}

static alloc_rec *find_alloc(uintptr_t p, size_t n, int pinned)
{
    for (alloc_rec *a = allocs; a; a = a->next)
        if (a->pinned == pinned && p >= a->p && p + n <= a->p + a->n)
            return a;
    return NULL;
}

int mock_is_pinned(const void *p, size_t n)
{
    pthread_mutex_lock(&mu);
    int r = find_alloc((uintptr_t)p, n, 1) != NULL;
    pthread_mutex_unlock(&mu);
    return r;
}

/* ---- capture rules ----------------------------------------------------------
 * The driver's: in global mode a thread may not make potentially unsafe
 * calls while it captures (unless that capture is relaxed) or while any
 * other thread captures in global mode; in thread-local mode only its own
 * capture counts; in relaxed mode nothing does. Such a call fails and
 * invalidates the capture it would have broken. */
static fstream *all_streams(fstream *it)
{
    return it == NULL ? &legacy : it == &legacy ? live : it->next;
}

static int forbidden_by(const fstream *s)
{
    if (!s->capturing || thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return 0;
    if (pthread_equal(s->owner, pthread_self()))
        return s->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    return thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && s->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
}

static CUresult unsafe_call(void)
{
    int hit = 0;
    for (fstream *s = all_streams(NULL); s; s = all_streams(s))
        if (forbidden_by(s)) {
            s->invalidated = 1;
            hit = 1;
        }
    if (!hit)
        return CUDA_SUCCESS;
    mock.capture_violations++;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

static int blocking_capture_active(void)
{
    for (fstream *s = live; s; s = s->next)
        if (s->blocking && s->capturing && s->mode != CU_STREAM_CAPTURE_MODE_RELAXED)
            return 1;
    return 0;
}

/* ---- queues ----------------------------------------------------------------- */

static void push(fstream *s, op o)
{
    if (s->n_ops == s->room) {
        s->room = s->room ? 2 * s->room : 64;
        s->ops = realloc(s->ops, s->room * sizeof *s->ops);
        assert_non_null(s->ops);
    }
    s->ops[s->n_ops++] = o;
}

static op wait_op(fstream *t)
{
    op w = {.kind = MOCK_OP_WAIT, .target = t->id, .target_seq = t->n_ops};
    return w;
}

/* Appends `o` to the stream, or to its capture. The legacy stream waits for
 * every blocking stream's queued work and they for it. */
static CUresult enqueue(fstream *s, op o)
{
    if (s->capturing) {
        if (s->n_cap == s->cap_room) {
            s->cap_room = s->cap_room ? 2 * s->cap_room : 16;
            s->cap = realloc(s->cap, s->cap_room * sizeof *s->cap);
            assert_non_null(s->cap);
        }
        s->cap[s->n_cap++] = o;
        return CUDA_SUCCESS;
    }
    if (s->legacy) {
        if (blocking_capture_active()) {
            for (fstream *b = live; b; b = b->next)
                if (b->blocking && b->capturing)
                    b->invalidated = 1;
            free(o.staged);
            return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
        }
        for (fstream *b = live; b; b = b->next)
            if (b->blocking && b->done < b->n_ops)
                push(s, wait_op(b));
    } else if (s->blocking && legacy.done < legacy.n_ops) {
        push(s, wait_op(&legacy));
    }
    push(s, o);
    return CUDA_SUCCESS;
}

static void run_until(fstream *s, size_t seq);

static void execute(const op *o)
{
    switch (o->kind) {
    case MOCK_OP_LAUNCH: {
        host_dim3 g = {o->l.grid[0], o->l.grid[1], o->l.grid[2]};
        host_dim3 b = {o->l.block[0], o->l.block[1], o->l.block[2]};
        if (o->l.f == (CUfunction)&fn_vrows) {
            run_vrows_on_host(o->l.args, g, b);
            if (mock.corrupt_tables) {
                uint64_t scl;
                uint32_t n_pairs;
                memcpy(&scl, o->l.args + offsetof(memra_vrows_args, scl), 8);
                memcpy(&n_pairs, o->l.args + offsetof(memra_vrows_args, n_pairs), 4);
                ((unsigned char *)(uintptr_t)scl)[8 * (size_t)n_pairs] ^= 1;
            }
        } else if (o->l.f == (CUfunction)&fn_take) {
            run_take_on_host(o->l.args);
        } else if (!mock.drop_route_launches) {
            /* The lanes run as threads, unlocked: they take no mock lock. */
            pthread_mutex_unlock(&mu);
            run_route_on_host(o->l.args, o->l.args_size, g, b,
                              o->l.f == (CUfunction)&fn_route_block);
            pthread_mutex_lock(&mu);
        }
        break;
    }
    case MOCK_OP_HTOD:
        memcpy((void *)(uintptr_t)o->dev, o->staged ? o->staged : o->host, o->n);
        break;
    case MOCK_OP_DTOH:
        memcpy(o->host, (void *)(uintptr_t)o->dev, o->n);
        break;
    case MOCK_OP_MEMSET:
        for (size_t i = 0; i < o->n; i++)
            memcpy((char *)(uintptr_t)o->dev + 4 * i, &o->val, 4);
        break;
    case MOCK_OP_RECORD:
        break;
    case MOCK_OP_WAIT: {
        fstream *t = stream_by_id(o->target);
        if (t)
            run_until(t, o->target_seq);
        break;
    }
    case MOCK_OP_GATE:
        while (!atomic_load(o->gate)) {
            pthread_mutex_unlock(&mu);
            usleep(1000);
            pthread_mutex_lock(&mu);
        }
        break;
    }
}

/* Runs the stream's queue up to sequence number `seq`, in order. Another
 * thread already running it is waited for. */
static void run_until(fstream *s, size_t seq)
{
    while (s->running && !pthread_equal(s->runner, pthread_self())) {
        pthread_mutex_unlock(&mu);
        usleep(200);
        pthread_mutex_lock(&mu);
    }
    const int outer = !s->running;
    if (outer)
        s->running = 1, s->runner = pthread_self();
    while (s->done < seq && s->done < s->n_ops) {
        op cur = s->ops[s->done]; /* a hook may grow the array */
        execute(&cur);
        free(cur.staged);
        s->ops[s->done].staged = NULL;
        s->done++;
        if (mock.after_op) {
            pthread_mutex_unlock(&mu);
            mock.after_op(cur.kind, (CUstream)s);
            pthread_mutex_lock(&mu);
        }
    }
    if (outer)
        s->running = 0;
}

static void drain_all(void)
{
    for (fstream *s = all_streams(NULL); s; s = all_streams(s))
        run_until(s, s->n_ops);
}

void mock_drain(void)
{
    pthread_mutex_lock(&mu);
    drain_all();
    pthread_mutex_unlock(&mu);
}

void mock_gate(CUstream s, _Atomic int *open)
{
    pthread_mutex_lock(&mu);
    op g = {.kind = MOCK_OP_GATE, .gate = open};
    enqueue(S(s), g);
    pthread_mutex_unlock(&mu);
}

int mock_pending(CUstream s)
{
    pthread_mutex_lock(&mu);
    fstream *f = S(s);
    int n = (int)(f->n_ops - f->done);
    pthread_mutex_unlock(&mu);
    return n;
}

static void free_stream_ops(fstream *s)
{
    for (size_t i = s->done; i < s->n_ops; i++)
        free(s->ops[i].staged);
    for (size_t i = 0; i < s->n_cap; i++)
        free(s->cap[i].staged);
    free(s->ops);
    free(s->cap);
}

/* ---- device, context -------------------------------------------------------- */

static CUresult m_cuInit(unsigned f)
{
    (void)f;
    ENTER_CU(cuInit);
    return CUDA_SUCCESS;
}
static CUresult m_cuDriverGetVersion(int *v)
{
    ENTER_CU(cuDriverGetVersion);
    *v = mock.driver_version;
    return CUDA_SUCCESS;
}
static CUresult m_cuDeviceGetCount(int *n)
{
    ENTER_CU(cuDeviceGetCount);
    *n = mock.n_devices;
    return mock.n_devices ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}
static CUresult m_cuDeviceGet(CUdevice *d, int o)
{
    ENTER_CU(cuDeviceGet);
    if (o < 0 || o >= mock.n_devices)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = o;
    return CUDA_SUCCESS;
}
static CUresult m_cuDeviceGetName(char *s, int len, CUdevice d)
{
    ENTER_CU(cuDeviceGetName);
    snprintf(s, (size_t)len, "Mock GPU %d", d);
    return CUDA_SUCCESS;
}
static CUresult m_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    (void)d;
    ENTER_CU(cuDeviceGetAttribute);
    *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? mock.sm_major : mock.sm_minor;
    return CUDA_SUCCESS;
}
static CUresult m_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    ENTER_CU(cuDevicePrimaryCtxRetain);
    *c = (CUcontext)&fake_ctx[d];
    mock.ctx_refs++;
    return CUDA_SUCCESS;
}
/* Release calls release even when told to fail, as a driver does when it
 * reports an error from a teardown: the failure must still reach the caller,
 * but the sweep's leak accounting stays about memra's own code. */
static CUresult released(int idx)
{
    return failing(idx) ? (CUresult)mock.fail_result : CUDA_SUCCESS;
}

static CUresult m_cuDevicePrimaryCtxRelease(CUdevice d)
{
    (void)d;
    mock.ctx_refs--;
    return released(MOCK_cuDevicePrimaryCtxRelease);
}
static CUresult m_cuCtxGetId(CUcontext c, unsigned long long *id)
{
    ENTER_CU(cuCtxGetId);
    *id = ctx_id[(int *)c - fake_ctx];
    return CUDA_SUCCESS;
}
static CUresult m_cuDevicePrimaryCtxReset(CUdevice d)
{
    ENTER_CU(cuDevicePrimaryCtxReset);
    mock_reset_primary_ctx(d);
    return CUDA_SUCCESS;
}

static _Thread_local CUcontext ctx_stack[16];
static _Thread_local int ctx_depth;
static CUresult m_cuCtxGetCurrent(CUcontext *c)
{
    ENTER_CU(cuCtxGetCurrent);
    *c = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
    return CUDA_SUCCESS;
}
static CUresult m_cuCtxPushCurrent(CUcontext c)
{
    ENTER_CU(cuCtxPushCurrent);
    assert_true(ctx_depth < 16);
    ctx_stack[ctx_depth++] = c;
    return CUDA_SUCCESS;
}
static CUresult m_cuCtxPopCurrent(CUcontext *c)
{
    ENTER_CU(cuCtxPopCurrent);
    assert_true(ctx_depth > 0);
    *c = ctx_stack[--ctx_depth];
    return CUDA_SUCCESS;
}
static CUresult ctx_sync(void)
{
    CUresult r = unsafe_call();
    if (r == CUDA_SUCCESS)
        drain_all();
    return r;
}
static CUresult m_cuCtxSynchronize(void)
{
    ENTER_CU(cuCtxSynchronize);
    LOCKED(ctx_sync());
}

/* ---- streams, events, capture ------------------------------------------------ */

static CUresult m_cuStreamCreate(CUstream *s, unsigned flags)
{
    ENTER_CU(cuStreamCreate);
    pthread_mutex_lock(&mu);
    /* The most recently destroyed handle comes back first, as a driver's
     * pool may hand it out: anything that names streams by handle is
     * caught. */
    fstream *f = reusable;
    if (f)
        reusable = f->next;
    else
        f = malloc(sizeof *f);
    memset(f, 0, sizeof *f);
    f->blocking = !(flags & CU_STREAM_NON_BLOCKING);
    f->gen = gen;
    f->id = next_stream_id++;
    f->next = live;
    live = f;
    pthread_mutex_unlock(&mu);
    *s = (CUstream)f;
    mock.streams_live++;
    return CUDA_SUCCESS;
}
static CUresult m_cuStreamDestroy(CUstream s)
{
    pthread_mutex_lock(&mu);
    fstream *f = S(s);
    if (stale(f->gen)) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    for (fstream **p = &live; *p; p = &(*p)->next)
        if (*p == f) {
            *p = f->next;
            break;
        }
    if (f->done < f->n_ops) {
        /* cuStreamDestroy returns at once; the queued work still runs
         * later, under the stream's id, while the handle is reused. */
        fstream *z = malloc(sizeof *z);
        *z = *f;
        z->zombie = 1;
        z->n_cap = 0, z->cap = NULL, z->cap_room = 0;
        z->next = live;
        live = z;
        free(f->cap);
    } else {
        free_stream_ops(f);
    }
    f->next = reusable;
    reusable = f;
    pthread_mutex_unlock(&mu);
    mock.streams_live--;
    return released(MOCK_cuStreamDestroy);
}
static CUresult m_cuStreamGetId(CUstream s, unsigned long long *id)
{
    ENTER_CU(cuStreamGetId);
    pthread_mutex_lock(&mu);
    fstream *f = S(s);
    const int st = stale(f->gen);
    *id = f->id;
    pthread_mutex_unlock(&mu);
    return st ? CUDA_ERROR_CONTEXT_IS_DESTROYED : CUDA_SUCCESS;
}
static CUresult stream_sync(fstream *f)
{
    if (stale(f->gen))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (f->capturing) {
        f->invalidated = 1;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    CUresult r = unsafe_call();
    if (r == CUDA_SUCCESS)
        run_until(f, f->n_ops);
    return r;
}
static CUresult m_cuStreamSynchronize(CUstream s)
{
    ENTER_CU(cuStreamSynchronize);
    LOCKED(stream_sync(S(s)));
}
static CUresult is_capturing(fstream *f, CUstreamCaptureStatus *st)
{
    if (f->legacy && blocking_capture_active())
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    *st = f->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
          : f->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                         : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
static CUresult m_cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st)
{
    ENTER_CU(cuStreamIsCapturing);
    LOCKED(is_capturing(S(s), st));
}
static CUresult m_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *m)
{
    ENTER_CU(cuThreadExchangeStreamCaptureMode);
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *m;
    *m = old;
    return CUDA_SUCCESS;
}
static CUresult begin_capture(fstream *f, CUstreamCaptureMode m)
{
    if (f->legacy || f->capturing)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    f->capturing = 1, f->invalidated = 0, f->mode = m, f->owner = pthread_self();
    f->n_cap = 0;
    return CUDA_SUCCESS;
}
static CUresult m_cuStreamBeginCapture(CUstream s, CUstreamCaptureMode m)
{
    ENTER_CU(cuStreamBeginCapture);
    LOCKED(begin_capture(S(s), m));
}
static CUresult end_capture(fstream *f, CUgraph *g)
{
    *g = NULL;
    if (!f->capturing)
        return CUDA_ERROR_ILLEGAL_STATE;
    f->capturing = 0;
    if (f->invalidated) {
        f->invalidated = 0;
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    fgraph *gr = calloc(1, sizeof *gr);
    gr->n = f->n_cap;
    gr->ops = calloc(f->n_cap ? f->n_cap : 1, sizeof *gr->ops);
    if (f->n_cap)
        memcpy(gr->ops, f->cap, f->n_cap * sizeof *gr->ops);
    f->n_cap = 0;
    *g = (CUgraph)gr;
    return CUDA_SUCCESS;
}
static CUresult m_cuStreamEndCapture(CUstream s, CUgraph *g)
{
    ENTER_CU(cuStreamEndCapture);
    LOCKED(end_capture(S(s), g));
}
static CUresult m_cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long fl)
{
    (void)fl;
    ENTER_CU(cuGraphInstantiateWithFlags);
    const fgraph *src = (const fgraph *)g;
    fgraph *x = calloc(1, sizeof *x);
    x->n = src->n;
    x->ops = calloc(src->n ? src->n : 1, sizeof *x->ops);
    if (src->n)
        memcpy(x->ops, src->ops, src->n * sizeof *x->ops);
    *e = (CUgraphExec)x;
    return CUDA_SUCCESS;
}
/* An external event wait node waits for the work the event held when the
 * graph was launched, not when it was captured. */
static CUresult graph_launch(const fgraph *x, fstream *f)
{
    for (size_t i = 0; i < x->n; i++) {
        op o = x->ops[i];
        if (o.kind == MOCK_OP_WAIT && o.event)
            o.target = o.event->sid, o.target_seq = o.event->seq, o.event = NULL;
        CUresult r = enqueue(f, o);
        if (r != CUDA_SUCCESS)
            return r;
    }
    return CUDA_SUCCESS;
}
static CUresult m_cuGraphLaunch(CUgraphExec e, CUstream s)
{
    ENTER_CU(cuGraphLaunch);
    LOCKED(graph_launch((const fgraph *)e, S(s)));
}
static CUresult m_cuGraphDestroy(CUgraph g)
{
    fgraph *x = (fgraph *)g;
    free(x->ops);
    free(x);
    return CUDA_SUCCESS;
}
static CUresult m_cuGraphExecDestroy(CUgraphExec e)
{
    return m_cuGraphDestroy((CUgraph)e);
}

static CUresult m_cuEventCreate(CUevent *e, unsigned flags)
{
    (void)flags;
    ENTER_CU(cuEventCreate);
    pthread_mutex_lock(&mu);
    fevent *f = new_obj(sizeof *f);
    f->gen = gen;
    pthread_mutex_unlock(&mu);
    *e = (CUevent)f;
    mock.events_live++;
    return CUDA_SUCCESS;
}
static CUresult m_cuEventDestroy(CUevent e)
{
    pthread_mutex_lock(&mu);
    fevent *f = (fevent *)e;
    int st = stale(f->gen);
    if (!st)
        free_obj(f);
    pthread_mutex_unlock(&mu);
    if (st)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    mock.events_live--;
    return released(MOCK_cuEventDestroy);
}
static CUresult event_record(fevent *e, fstream *f)
{
    if (stale(e->gen) || stale(f->gen))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    op rec = {.kind = MOCK_OP_RECORD};
    if (f->capturing) {
        e->captured = 1;
        return enqueue(f, rec);
    }
    CUresult r = enqueue(f, rec);
    if (r == CUDA_SUCCESS)
        e->sid = f->id, e->seq = f->n_ops, e->captured = 0;
    return r;
}
static CUresult m_cuEventRecord(CUevent e, CUstream s)
{
    ENTER_CU(cuEventRecord);
    LOCKED(event_record((fevent *)e, S(s)));
}
static CUresult event_query(fevent *e)
{
    if (stale(e->gen))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    CUresult r = unsafe_call();
    if (r != CUDA_SUCCESS)
        return r;
    const fstream *t = stream_by_id(e->sid);
    return !t || t->done >= e->seq ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
static CUresult m_cuEventQuery(CUevent e)
{
    ENTER_CU(cuEventQuery);
    LOCKED(event_query((fevent *)e));
}
static CUresult event_sync(fevent *e)
{
    if (stale(e->gen))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    CUresult r = unsafe_call();
    fstream *t = stream_by_id(e->sid);
    if (r == CUDA_SUCCESS && t)
        run_until(t, e->seq);
    return r;
}
static CUresult m_cuEventSynchronize(CUevent e)
{
    ENTER_CU(cuEventSynchronize);
    LOCKED(event_sync((fevent *)e));
}
static CUresult stream_wait(fstream *f, fevent *e, unsigned flags)
{
    if (stale(e->gen) || stale(f->gen))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (f->capturing) {
        if (e->captured)
            return CUDA_SUCCESS; /* an event of this capture: an edge, nothing to run */
        if (!(flags & CU_EVENT_WAIT_EXTERNAL)) {
            /* A capture may not wait on work outside it. */
            f->invalidated = 1;
            return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
        }
        op w = {.kind = MOCK_OP_WAIT, .event = e};
        return enqueue(f, w);
    }
    if (flags & CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!e->sid)
        return CUDA_SUCCESS; /* never recorded: nothing to wait for */
    op w = {.kind = MOCK_OP_WAIT, .target = e->sid, .target_seq = e->seq};
    return enqueue(f, w);
}
static CUresult m_cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags)
{
    ENTER_CU(cuStreamWaitEvent);
    LOCKED(stream_wait(S(s), (fevent *)e, flags));
}
static CUresult m_cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    (void)a, (void)b;
    *ms = 0;
    return CUDA_SUCCESS;
}

/* ---- memory ------------------------------------------------------------------ */

static CUresult alloc_mem(CUdeviceptr *p, size_t n, int pinned)
{
    CUresult r = unsafe_call();
    if (r != CUDA_SUCCESS)
        return r;
    const size_t sz = (n + 255) / 256 * 256;
    for (alloc_rec **a = &recycled; !pinned && *a; a = &(*a)->next)
        if ((*a)->n == sz) {
            alloc_rec *back = *a;
            *a = back->next;
            back->next = allocs;
            allocs = back;
            *p = (CUdeviceptr)back->p;
            return CUDA_SUCCESS;
        }
    void *m = aligned_alloc(256, sz ? sz : 256);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    memset(m, 0xEE, sz);
    alloc_rec *a = calloc(1, sizeof *a);
    a->p = (uintptr_t)m, a->n = sz, a->pinned = pinned;
    a->next = allocs;
    allocs = a;
    *p = (CUdeviceptr)(uintptr_t)m;
    return CUDA_SUCCESS;
}
static CUresult free_mem(uintptr_t p, int pinned)
{
    CUresult r = unsafe_call();
    if (r != CUDA_SUCCESS)
        return r;
    drain_all(); /* cuMemFree waits for the device, as the real one does */
    for (alloc_rec **a = &allocs; *a; a = &(*a)->next)
        if ((*a)->p == p && (*a)->pinned == pinned) {
            alloc_rec *dead = *a;
            *a = dead->next;
            if (mock.recycle_memory && !pinned) {
                /* First freed, first reused: allocations in the same
                 * order get the same blocks back. */
                alloc_rec **end = &recycled;
                while (*end)
                    end = &(*end)->next;
                dead->next = NULL;
                *end = dead;
                return CUDA_SUCCESS;
            }
            free((void *)dead->p);
            free(dead);
            return CUDA_SUCCESS;
        }
    mock.stale_uses++; /* not a live allocation: freed already, or gone with a reset */
    return CUDA_ERROR_INVALID_VALUE;
}
static CUresult m_cuMemAlloc(CUdeviceptr *p, size_t n)
{
    ENTER_CU(cuMemAlloc);
    pthread_mutex_lock(&mu);
    CUresult r = alloc_mem(p, n, 0);
    pthread_mutex_unlock(&mu);
    if (r == CUDA_SUCCESS)
        mock.live_allocs++;
    return r;
}
static CUresult m_cuMemFree(CUdeviceptr p)
{
    pthread_mutex_lock(&mu);
    CUresult r = free_mem(p, 0);
    pthread_mutex_unlock(&mu);
    if (r != CUDA_SUCCESS)
        return r;
    mock.live_allocs--;
    return released(MOCK_cuMemFree);
}
static CUresult m_cuMemAllocHost(void **p, size_t n)
{
    ENTER_CU(cuMemAllocHost);
    CUdeviceptr d;
    pthread_mutex_lock(&mu);
    CUresult r = alloc_mem(&d, n, 1);
    pthread_mutex_unlock(&mu);
    if (r == CUDA_SUCCESS) {
        *p = (void *)(uintptr_t)d;
        mock.live_pinned++;
    }
    return r;
}
static CUresult m_cuMemFreeHost(void *p)
{
    pthread_mutex_lock(&mu);
    CUresult r = free_mem((uintptr_t)p, 1);
    pthread_mutex_unlock(&mu);
    if (r != CUDA_SUCCESS)
        return r;
    mock.live_pinned--;
    return released(MOCK_cuMemFreeHost);
}

/* A pageable host buffer makes a copy synchronous for the host (the driver
 * stages it), which capture forbids; a pinned one keeps it asynchronous. */
static CUresult copy(fstream *f, op o, int to_device)
{
    if (stale(f->gen))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    const int pinned = find_alloc((uintptr_t)o.host, o.n, 1) != NULL;
    if (!pinned) {
        if (f->capturing) {
            f->invalidated = 1;
            return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
        CUresult r = unsafe_call();
        if (r != CUDA_SUCCESS)
            return r;
        if (to_device) {
            o.staged = malloc(o.n ? o.n : 1);
            memcpy(o.staged, o.host, o.n);
        }
    }
    CUresult r = enqueue(f, o);
    if (r == CUDA_SUCCESS && !pinned && !to_device)
        run_until(f, f->n_ops); /* complete on return, like the driver */
    return r;
}
static CUresult m_cuMemcpyHtoDAsync(CUdeviceptr d, const void *h, size_t n, CUstream s)
{
    ENTER_CU(cuMemcpyHtoDAsync);
    op o = {.kind = MOCK_OP_HTOD, .host = (void *)h, .dev = d, .n = n};
    LOCKED(copy(S(s), o, 1));
}
static CUresult m_cuMemcpyDtoHAsync(void *h, CUdeviceptr d, size_t n, CUstream s)
{
    ENTER_CU(cuMemcpyDtoHAsync);
    op o = {.kind = MOCK_OP_DTOH, .host = h, .dev = d, .n = n};
    LOCKED(copy(S(s), o, 0));
}
static CUresult m_cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream s)
{
    ENTER_CU(cuMemsetD32Async);
    op o = {.kind = MOCK_OP_MEMSET, .dev = d, .n = n, .val = v};
    LOCKED(enqueue(S(s), o));
}

/* ---- modules and launches ---------------------------------------------------- */

/* What the driver says of an image: the mock's own are always fine; those
 * of the fake NVRTC libraries ("MOCKIMG-FAKE <kind> <major>.<minor> <arch>")
 * follow the driver's rules; anything else is not an image. */
static CUresult judge_image(const char *img)
{
    if (mock.refuse_loads)
        return mock.refuse_loads;
    if (strncmp(img, "MOCKIMG", 7) != 0)
        return CUDA_ERROR_INVALID_IMAGE;
    char kind[8];
    int maj, min, arch;
    if (sscanf(img, "MOCKIMG-FAKE %7s %d.%d %d", kind, &maj, &min, &arch) != 4)
        return CUDA_SUCCESS;
    const int sm = mock.sm_major * 10 + mock.sm_minor;
    if (strcmp(kind, "PTX") == 0)
        return maj * 1000 + min * 10 > mock.driver_version ? CUDA_ERROR_UNSUPPORTED_PTX_VERSION
               : arch > sm                                 ? CUDA_ERROR_INVALID_PTX
                                                           : CUDA_SUCCESS;
    if (maj > mock.driver_version / 1000)
        return CUDA_ERROR_INVALID_IMAGE;
    return arch / 10 != sm / 10 || arch > sm ? CUDA_ERROR_NO_BINARY_FOR_GPU : CUDA_SUCCESS;
}

static CUresult m_cuModuleLoadData(CUmodule *m, const void *img)
{
    ENTER_CU(cuModuleLoadData);
    CUresult judged = judge_image(img);
    if (judged != CUDA_SUCCESS)
        return judged;
    pthread_mutex_lock(&mu);
    CUresult r = unsafe_call();
    fmodule *f = NULL;
    if (r == CUDA_SUCCESS) {
        f = new_obj(sizeof *f);
        f->gen = gen;
    }
    pthread_mutex_unlock(&mu);
    if (r != CUDA_SUCCESS)
        return r;
    *m = (CUmodule)f;
    mock.modules_live++;
    return CUDA_SUCCESS;
}
static CUresult m_cuModuleUnload(CUmodule m)
{
    fmodule *f = (fmodule *)m;
    pthread_mutex_lock(&mu);
    int st = stale(f->gen);
    if (!st)
        free_obj(f);
    pthread_mutex_unlock(&mu);
    if (st)
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    mock.modules_live--;
    return released(MOCK_cuModuleUnload);
}
static CUresult m_cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    (void)m;
    ENTER_CU(cuModuleGetFunction);
    if (strcmp(name, MEMRA_VROWS_KERNEL) == 0)
        *f = (CUfunction)&fn_vrows;
    else if (strcmp(name, MEMRA_TAKE_KERNEL) == 0)
        *f = (CUfunction)&fn_take;
    else if (strcmp(name, MEMRA_ROUTE_KERNEL) == 0)
        *f = (CUfunction)&fn_route;
    else if (strcmp(name, MEMRA_ROUTE_BLOCK_KERNEL) == 0)
        *f = (CUfunction)&fn_route_block;
    else
        return CUDA_ERROR_NOT_FOUND;
    return CUDA_SUCCESS;
}

static CUresult launch(mock_launch *l)
{
    fstream *f = S(l->stream);
    if (stale(f->gen))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    if (l->f == (CUfunction)&fn_vrows) {
        mock.last = *l;
        mock.launches++;
    }
    op o = {.kind = MOCK_OP_LAUNCH, .l = *l};
    return enqueue(f, o);
}

/* Checks a launch as the real driver would see it and queues it. */
static CUresult checked_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                               void **extra, int pdl)
{
    assert_true(f == (CUfunction)&fn_vrows || f == (CUfunction)&fn_take ||
                f == (CUfunction)&fn_route || f == (CUfunction)&fn_route_block);
    assert_null(params);
    assert_non_null(extra);
    /* The parameter block must be exactly the kernel's: a narrowed field
     * changes its size. */
    void *buf = NULL;
    size_t *size = NULL;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
            buf = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
            size = extra[i + 1];
        else
            fail_msg("unknown launch extra key %p", extra[i]);
    }
    assert_non_null(buf);
    assert_non_null(size);
    if (f == (CUfunction)&fn_vrows) {
        assert_int_equal(*size, sizeof(memra_vrows_args));
    } else if (f == (CUfunction)&fn_take) {
        assert_int_equal(*size, sizeof(memra_take_args));
        assert_int_equal(gx * bx, 1);
    } else {
        assert_int_equal(*size, MEMRA_ROUTE_PARAM_BYTES);
        memra_route_args a;
        memcpy(&a, buf, sizeof a);
        if (f == (CUfunction)&fn_route) {
            assert_int_equal(bx, MEMRA_ROUTE_BLOCK);
            assert_int_equal(gx, memra_route_grid(a.n_tokens));
        } else { /* a block of whole warps per token, a thread per expert */
            assert_int_equal(bx, memra_route_block_threads(a.n_expert));
            assert_int_equal(gx, a.n_tokens);
        }
    }
    assert_int_equal(gy, 1);
    assert_int_equal(gz, 1);
    assert_int_equal(by, 1);
    assert_int_equal(bz, 1);
    assert_int_equal(shmem, 0);
    mock_launch l = {f, {gx, gy, gz}, {bx, by, bz}, {0}, *size, s, pdl};
    memcpy(l.args, buf, *size);
    LOCKED(launch(&l));
}

static CUresult m_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned shmem, CUstream s,
                                 void **params, void **extra)
{
    ENTER_CU(cuLaunchKernel);
    return checked_launch(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra, 0);
}

/* Only the attribute memra uses is known: programmatic stream
 * serialization, which the mock records (its streams run in order anyway,
 * the strongest order PDL allows). */
static CUresult m_cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params,
                                   void **extra)
{
    ENTER_CU(cuLaunchKernelEx);
    assert_non_null(c);
    int pdl = 0;
    for (unsigned i = 0; i < c->numAttrs; i++) {
        if (c->attrs[i].id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
            fail_msg("unexpected launch attribute %d", (int)c->attrs[i].id);
        pdl = c->attrs[i].value.programmaticStreamSerializationAllowed != 0;
    }
    if (pdl)
        mock.pdl_launches++;
    return checked_launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                          c->blockDimZ, c->sharedMemBytes, c->hStream, params, extra, pdl);
}
static CUresult m_cuGetErrorName(CUresult r, const char **s)
{
    switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY:
        *s = "CUDA_ERROR_OUT_OF_MEMORY";
        break;
    case CUDA_ERROR_INVALID_IMAGE:
        *s = "CUDA_ERROR_INVALID_IMAGE";
        break;
    case CUDA_ERROR_LAUNCH_FAILED:
        *s = "CUDA_ERROR_LAUNCH_FAILED";
        break;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
        *s = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
        break;
    default:
        *s = "CUDA_ERROR_MOCK";
        break;
    }
    return CUDA_SUCCESS;
}
static CUresult m_cuGetErrorString(CUresult r, const char **s)
{
    (void)r;
    *s = "mock driver error";
    return CUDA_SUCCESS;
}

void mock_reset_primary_ctx(int dev)
{
    pthread_mutex_lock(&mu);
    /* Queued work is dropped, every allocation freed; streams, events and
     * modules of the old generation answer CONTEXT_IS_DESTROYED. */
    int n_dev = 0, n_pinned = 0;
    while (allocs) {
        alloc_rec *a = allocs;
        allocs = a->next;
        if (a->pinned)
            n_pinned++;
        else
            n_dev++;
        free((void *)a->p);
        free(a);
    }
    mock.live_allocs -= n_dev;
    mock.live_pinned -= n_pinned;
    for (fstream *s = all_streams(NULL); s; s = all_streams(s)) {
        for (size_t i = s->done; i < s->n_ops; i++) {
            free(s->ops[i].staged);
            s->ops[i].staged = NULL;
        }
        s->done = s->n_ops;
    }
    /* The handles stay allocated (their owners may still call into them);
     * they no longer count as live objects of the context. */
    int n_streams = 0;
    for (fstream *s = live; s; s = s->next)
        n_streams += !s->per_thread && s->gen == gen;
    mock.streams_live -= n_streams;
    mock.events_live = 0;
    mock.modules_live = 0;
    gen++;
    legacy.gen = gen;
    ctx_id[dev] = next_ctx_id++;
    pthread_mutex_unlock(&mu);
}

/* ---- NVRTC ---- */

static nvrtcResult m_nvrtcVersion(int *maj, int *min)
{
    ENTER_NV(nvrtcVersion);
    *maj = mock_nv.major;
    *min = mock_nv.minor;
    return NVRTC_SUCCESS;
}
static const char *m_nvrtcGetErrorString(nvrtcResult r)
{
    return r == NVRTC_ERROR_COMPILATION ? "NVRTC_ERROR_COMPILATION" : "NVRTC_ERROR_MOCK";
}
static nvrtcResult m_nvrtcGetNumSupportedArchs(int *n)
{
    ENTER_NV(nvrtcGetNumSupportedArchs);
    *n = mock_nv.n_archs;
    return NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcGetSupportedArchs(int *a)
{
    ENTER_NV(nvrtcGetSupportedArchs);
    memcpy(a, mock_nv.archs, sizeof(int) * (size_t)mock_nv.n_archs);
    return NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcCreateProgram(nvrtcProgram *p, const char *src, const char *name, int nh,
                                        const char *const *h, const char *const *hn)
{
    (void)name, (void)nh, (void)h, (void)hn;
    ENTER_NV(nvrtcCreateProgram);
    assert_non_null(strstr(src, "MEMRA_KERNEL")); /* one of memra's modules */
    /* Heap-allocated so that a program the library never destroys is a leak
     * that AddressSanitizer and valgrind report. */
    *p = (nvrtcProgram)calloc(1, 1);
    return NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcDestroyProgram(nvrtcProgram *p)
{
    free(*p);
    *p = NULL;
    return failing(MOCK_nvrtcDestroyProgram) ? (nvrtcResult)mock.fail_result : NVRTC_SUCCESS;
}
static pthread_mutex_t options_lock = PTHREAD_MUTEX_INITIALIZER;
static nvrtcResult m_nvrtcCompileProgram(nvrtcProgram p, int n, const char *const *opts)
{
    (void)p;
    ENTER_NV(nvrtcCompileProgram);
    pthread_mutex_lock(&options_lock); /* engines compile concurrently */
    mock.options[0] = 0;
    for (int i = 0; i < n; i++) {
        strncat(mock.options, opts[i], sizeof mock.options - strlen(mock.options) - 2);
        strcat(mock.options, " ");
    }
    pthread_mutex_unlock(&options_lock);
    if (mock.compile_delay_ms)
        usleep((useconds_t)mock.compile_delay_ms * 1000);
    if (mock.compile_log)
        return NVRTC_ERROR_COMPILATION;
    return NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcGetProgramLogSize(nvrtcProgram p, size_t *n)
{
    (void)p;
    ENTER_NV(nvrtcGetProgramLogSize);
    *n = mock.compile_log ? strlen(mock.compile_log) + 1 : 1;
    return NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcGetProgramLog(nvrtcProgram p, char *log)
{
    (void)p;
    ENTER_NV(nvrtcGetProgramLog);
    strcpy(log, mock.compile_log ? mock.compile_log : "");
    return NVRTC_SUCCESS;
}
static const char cubin_img[] = "MOCKIMG-CUBIN";
static const char ptx_img[] = "MOCKIMG-PTX";
static nvrtcResult m_nvrtcGetPTXSize(nvrtcProgram p, size_t *n)
{
    (void)p;
    ENTER_NV(nvrtcGetPTXSize);
    *n = sizeof ptx_img;
    return NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcGetPTX(nvrtcProgram p, char *out)
{
    (void)p;
    ENTER_NV(nvrtcGetPTX);
    memcpy(out, ptx_img, sizeof ptx_img);
    return NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcGetCUBINSize(nvrtcProgram p, size_t *n)
{
    (void)p;
    ENTER_NV(nvrtcGetCUBINSize);
    *n = sizeof cubin_img;
    return NVRTC_SUCCESS;
}
static nvrtcResult m_nvrtcGetCUBIN(nvrtcProgram p, char *out)
{
    (void)p;
    ENTER_NV(nvrtcGetCUBIN);
    memcpy(out, cubin_img, sizeof cubin_img);
    return NVRTC_SUCCESS;
}

/* Frees every object a test left behind (mu held). */
static void free_all(void)
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
#define SET(name) d->name = m_##name;
    /* clang-format off */
    SET(cuInit)
    SET(cuDriverGetVersion)
    SET(cuDeviceGetCount)
    SET(cuDeviceGet)
    SET(cuDeviceGetName)
    SET(cuDeviceGetAttribute)
    SET(cuDevicePrimaryCtxRetain)
    SET(cuDevicePrimaryCtxRelease)
    SET(cuDevicePrimaryCtxReset)
    SET(cuCtxGetId)
    SET(cuCtxGetCurrent)
    SET(cuCtxPushCurrent)
    SET(cuCtxPopCurrent)
    SET(cuCtxSynchronize)
    SET(cuStreamCreate)
    SET(cuStreamDestroy)
    SET(cuStreamSynchronize)
    SET(cuStreamGetId)
    SET(cuStreamIsCapturing)
    SET(cuStreamWaitEvent)
    SET(cuThreadExchangeStreamCaptureMode)
    SET(cuStreamBeginCapture)
    SET(cuStreamEndCapture)
    SET(cuGraphInstantiateWithFlags)
    SET(cuGraphLaunch)
    SET(cuGraphDestroy)
    SET(cuGraphExecDestroy)
    SET(cuEventCreate)
    SET(cuEventRecord)
    SET(cuEventQuery)
    SET(cuEventSynchronize)
    SET(cuEventElapsedTime)
    SET(cuEventDestroy)
    SET(cuMemAlloc)
    SET(cuMemFree)
    SET(cuMemAllocHost)
    SET(cuMemFreeHost)
    SET(cuMemcpyHtoDAsync)
    SET(cuMemcpyDtoHAsync)
    SET(cuMemsetD32Async)
    SET(cuModuleLoadData)
    SET(cuModuleUnload)
    SET(cuModuleGetFunction)
    SET(cuLaunchKernel)
    SET(cuLaunchKernelEx)
    SET(cuGetErrorName)
    SET(cuGetErrorString)
    /* clang-format on */
#undef SET
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
