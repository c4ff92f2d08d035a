/* The mock driver: Streams, events, capture and graphs. */
#include "mock_internal.h"

/* ---- streams, events, capture ------------------------------------------------ */

CUresult m_cuStreamCreate(CUstream *s, unsigned flags)
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
CUresult m_cuStreamDestroy(CUstream s)
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
CUresult m_cuStreamGetId(CUstream s, unsigned long long *id)
{
    ENTER_CU(cuStreamGetId);
    pthread_mutex_lock(&mu);
    fstream *f = S(s);
    const int st = stale(f->gen);
    *id = f->id;
    pthread_mutex_unlock(&mu);
    return st ? CUDA_ERROR_CONTEXT_IS_DESTROYED : CUDA_SUCCESS;
}
CUresult stream_sync(fstream *f)
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
CUresult m_cuStreamSynchronize(CUstream s)
{
    ENTER_CU(cuStreamSynchronize);
    LOCKED(stream_sync(S(s)));
}
CUresult is_capturing(fstream *f, CUstreamCaptureStatus *st)
{
    if (f->legacy && blocking_capture_active())
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    *st = f->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
          : f->capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                         : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
CUresult m_cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st)
{
    ENTER_CU(cuStreamIsCapturing);
    LOCKED(is_capturing(S(s), st));
}
CUresult m_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *m)
{
    ENTER_CU(cuThreadExchangeStreamCaptureMode);
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *m;
    *m = old;
    return CUDA_SUCCESS;
}
CUresult begin_capture(fstream *f, CUstreamCaptureMode m)
{
    if (f->legacy || f->capturing)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    f->capturing = 1, f->invalidated = 0, f->mode = m, f->owner = pthread_self();
    f->n_cap = 0;
    return CUDA_SUCCESS;
}
CUresult m_cuStreamBeginCapture(CUstream s, CUstreamCaptureMode m)
{
    ENTER_CU(cuStreamBeginCapture);
    LOCKED(begin_capture(S(s), m));
}
CUresult end_capture(fstream *f, CUgraph *g)
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
CUresult m_cuStreamEndCapture(CUstream s, CUgraph *g)
{
    ENTER_CU(cuStreamEndCapture);
    LOCKED(end_capture(S(s), g));
}
CUresult m_cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long fl)
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
CUresult graph_launch(const fgraph *x, fstream *f)
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
CUresult m_cuGraphLaunch(CUgraphExec e, CUstream s)
{
    ENTER_CU(cuGraphLaunch);
    LOCKED(graph_launch((const fgraph *)e, S(s)));
}
CUresult m_cuGraphDestroy(CUgraph g)
{
    fgraph *x = (fgraph *)g;
    free(x->ops);
    free(x);
    return CUDA_SUCCESS;
}
CUresult m_cuGraphExecDestroy(CUgraphExec e)
{
    return m_cuGraphDestroy((CUgraph)e);
}

CUresult m_cuEventCreate(CUevent *e, unsigned flags)
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
CUresult m_cuEventDestroy(CUevent e)
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
CUresult event_record(fevent *e, fstream *f)
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
CUresult m_cuEventRecord(CUevent e, CUstream s)
{
    ENTER_CU(cuEventRecord);
    LOCKED(event_record((fevent *)e, S(s)));
}
CUresult event_query(fevent *e)
{
    if (stale(e->gen))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    CUresult r = unsafe_call();
    if (r != CUDA_SUCCESS)
        return r;
    const fstream *t = stream_by_id(e->sid);
    return !t || t->done >= e->seq ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult m_cuEventQuery(CUevent e)
{
    ENTER_CU(cuEventQuery);
    LOCKED(event_query((fevent *)e));
}
CUresult event_sync(fevent *e)
{
    if (stale(e->gen))
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    CUresult r = unsafe_call();
    fstream *t = stream_by_id(e->sid);
    if (r == CUDA_SUCCESS && t)
        run_until(t, e->seq);
    return r;
}
CUresult m_cuEventSynchronize(CUevent e)
{
    ENTER_CU(cuEventSynchronize);
    LOCKED(event_sync((fevent *)e));
}
CUresult stream_wait(fstream *f, fevent *e, unsigned flags)
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
CUresult m_cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags)
{
    ENTER_CU(cuStreamWaitEvent);
    LOCKED(stream_wait(S(s), (fevent *)e, flags));
}
CUresult m_cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
    (void)a, (void)b;
    *ms = 0;
    return CUDA_SUCCESS;
}
