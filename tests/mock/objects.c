/* The mock driver: objects, the capture rules and the per-stream queues,
 * the state every other part of the mock works on. */
#include "mock_internal.h"

mock_state mock;
memra_driver mock_table;
memra_nvrtc mock_nv;

/* ---- objects ---------------------------------------------------------------
 * One mutex guards every object below. Work runs with it held, except while
 * a gate waits and while a test's after_op hook runs. It knows its owner, so
 * mock_release_failed_lock can give it back after a failed assertion. */
pthread_mutex_t mu = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;

obj_rec *objs;

void *new_obj(size_t size)
{
    obj_rec *o = calloc(1, sizeof *o);
    o->p = calloc(1, size);
    o->next = objs;
    objs = o;
    return o->p;
}

void free_obj(void *p)
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

fstream legacy;
fstream *live;                         /* created, per-thread and destroyed-but-busy streams */
fstream *reusable;                     /* destroyed streams' handles, handed out again */
unsigned long long next_stream_id = 2; /* the legacy stream is 1 */
_Thread_local fstream *per_thread;
_Thread_local CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
alloc_rec *allocs;
alloc_rec *recycled; /* freed device blocks, with mock.recycle_memory */
int gen;
unsigned long long ctx_id[8], next_ctx_id = 100;
int fake_ctx[8];
/* One marker per kernel of MEMRA_KERNELS: kernel k's CUfunction is
 * &fn_kernel[k]. */
char fn_kernel[MEMRA_KERNEL_COUNT];
fmodule *special_modules[MOCK_SPECIAL_MODULES];

/* Counts the call and says whether it is the one chosen to fail. */
int failing(int idx)
{
    int n = ++mock.calls[idx];
    return mock.fail_result && mock.fail_call == idx && mock.fail_nth == n;
}
fstream *S(CUstream h)
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
fstream *stream_by_id(unsigned long long id)
{
    if (id == legacy.id)
        return &legacy;
    for (fstream *s = live; s; s = s->next)
        if (s->id == id)
            return s;
    return NULL;
}

int stale(int g)
{
    if (g == gen)
        return 0;
    mock.stale_uses++;
    return 1;
}

alloc_rec *find_alloc(uintptr_t p, size_t n, int pinned)
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
 * The driver's: a thread may not make potentially unsafe calls while it
 * captures itself, unless that capture began in relaxed mode -- whatever
 * mode the thread has exchanged to since (driver 580 on the H200: an event
 * query made in relaxed thread mode invalidated the thread's own global
 * capture); in global thread mode it may not while any other thread
 * captures in global mode either; thread-local and relaxed thread modes
 * ignore other threads' captures. Such a call fails and invalidates the
 * capture it would have broken. */
fstream *all_streams(fstream *it)
{
    return it == NULL ? &legacy : it == &legacy ? live : it->next;
}

int forbidden_by(const fstream *s)
{
    if (!s->capturing)
        return 0;
    if (pthread_equal(s->owner, pthread_self()))
        return s->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    return thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && s->mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
}

CUresult unsafe_call(void)
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

int blocking_capture_active(void)
{
    for (fstream *s = live; s; s = s->next)
        if (s->blocking && s->capturing && s->mode != CU_STREAM_CAPTURE_MODE_RELAXED)
            return 1;
    return 0;
}

/* ---- queues ----------------------------------------------------------------- */

void push(fstream *s, op o)
{
    if (s->n_ops == s->room) {
        s->room = s->room ? 2 * s->room : 64;
        s->ops = realloc(s->ops, s->room * sizeof *s->ops);
        assert_non_null(s->ops);
    }
    s->ops[s->n_ops++] = o;
}

op wait_op(fstream *t)
{
    op w = {.kind = MOCK_OP_WAIT, .target = t->id, .target_seq = t->n_ops};
    return w;
}

/* Appends `o` to the stream, or to its capture. The legacy stream waits for
 * every blocking stream's queued work and they for it. */
CUresult enqueue(fstream *s, op o)
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

void run_until(fstream *s, size_t seq);

/* Runs the stream's queue up to sequence number `seq`, in order. Another
 * thread already running it is waited for. */
void run_until(fstream *s, size_t seq)
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

void drain_all(void)
{
    for (fstream *s = all_streams(NULL); s; s = all_streams(s))
        run_until(s, s->n_ops);
}

void mock_release_failed_lock(void)
{
    if (pthread_mutex_trylock(&mu) == 0) { /* free: the usual teardown */
        pthread_mutex_unlock(&mu);
        return;
    }
    /* Held. By this thread, the owner-checking lock answers EDEADLK at
     * once; by another, it waits for it as the teardown would. Either way
     * this thread holds it now. */
    (void)pthread_mutex_lock(&mu);
    pthread_mutex_unlock(&mu);
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

void free_stream_ops(fstream *s)
{
    for (size_t i = s->done; i < s->n_ops; i++)
        free(s->ops[i].staged);
    for (size_t i = 0; i < s->n_cap; i++)
        free(s->cap[i].staged);
    free(s->ops);
    free(s->cap);
}
