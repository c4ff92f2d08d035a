/* One call's stay on the device: the engine's context made current, the
 * thread's capture mode relaxed while memra allocates, copies or waits, and
 * the question every ordering rule starts from: would work on this stream
 * be captured? Every public device call enters and leaves exactly once. */
#ifndef MEMRA_CONTEXT_H
#define MEMRA_CONTEXT_H

#include <stdatomic.h>

#include "driver/driver.h"

struct memra_engine;

/* The device's primary context as an engine holds it: retained once, and
 * known by the id it had then, since a reset keeps the handle but not the
 * memory behind it. */
typedef struct memra_context {
    const memra_driver *d;
    CUdevice dev;
    CUcontext ctx;         /* NULL until retained */
    unsigned long long id; /* cuCtxGetId at the retain: a reset context has another */
    _Atomic int lost;      /* the primary context was reset: touch no handle again */
} memra_context;

/* Retains `dev`'s primary context, not a new one: a serving process
 * (PyTorch, vLLM) already lives on it, so memory and streams are shared,
 * not duplicated. On failure `*call` names the driver call. */
CUresult memra_context_retain(memra_context *cx, const memra_driver *d, CUdevice dev,
                              const char **call);
/* Releases the retain (a reset does not release it); a no-op before one. */
void memra_context_release(memra_context *cx);
/* Retained and not reset: the handles made on it may still be touched. */
int memra_context_live(const memra_context *cx);

typedef struct memra_call {
    struct memra_engine *eng; /* set by the engine's memra_call_enter (engine.h) */
    memra_context *cx;
    const memra_driver *d;
    const char *fn; /* the public function, for messages */
    int pushed;     /* the engine's context was pushed for the call */
    int relaxed;    /* the thread's capture mode was exchanged for relaxed */
    CUstreamCaptureMode old_mode;
} memra_call;

/* Makes the context current for the call, pushing it only when the
 * caller's current context differs (a serving process on the primary
 * context pays one cheap query), after checking that the primary context
 * was not reset under its holder (MEMRA_ERR_CONTEXT_RESET). */
memra_status memra_context_enter(memra_context *cx, const char *fn, memra_call *c);
/* Restores the capture mode and the caller's context. */
void memra_call_leave(memra_call *c);

/* Relaxed stream-capture mode for this thread until memra_call_leave, for
 * allocations, synchronous copies, event queries and waits on streams that
 * are not capturing: another thread's global-mode capture
 * (torch.cuda.graph's default) would otherwise be invalidated by them.
 * Idempotent. */
void memra_call_relax(memra_call *c);

typedef enum memra_capture {
    MEMRA_CAPTURE_NONE,    /* work on the stream runs when it is issued */
    MEMRA_CAPTURE_ACTIVE,  /* the stream is capturing: work becomes graph nodes */
    MEMRA_CAPTURE_JOINS,   /* the legacy stream while a blocking stream captures:
                            * any work on it would join, and break, that capture */
    MEMRA_CAPTURE_INVALID, /* the stream's capture was already invalidated */
} memra_capture;

/* What work on `s` would meet right now (MEMRA_ERR_DRIVER if the driver
 * cannot say). */
memra_status memra_capture_of(const memra_call *c, CUstream s, memra_capture *out);

/* MEMRA_OK when `s` is not capturing and joins no capture; otherwise
 * MEMRA_ERR_CAPTURE saying that the call would `what`, with `remedy`
 * (may be NULL) as the way out. The capture is left untouched. */
memra_status memra_refuse_capture(const memra_call *c, CUstream s, const char *what,
                                  const char *remedy);

/* A stream's identity for ordering (cuStreamGetId: handles are reused after
 * cuStreamDestroy, ids are not). 0 where the driver cannot say (before CUDA
 * 12.0): then no two streams are taken to be the same. */
unsigned long long memra_stream_id(const memra_driver *d, CUstream s);

#endif /* MEMRA_CONTEXT_H */
