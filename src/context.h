/* One call's stay on the device: the engine's context made current, the
 * thread's capture mode relaxed while memra allocates, copies or waits, and
 * the question every ordering rule starts from: would work on this stream
 * be captured? Every public device call enters and leaves exactly once. */
#ifndef MEMRA_CONTEXT_H
#define MEMRA_CONTEXT_H

#include "driver.h"

struct memra_engine;

typedef struct memra_call {
    struct memra_engine *eng;
    const memra_driver *d;
    const char *fn; /* the public function, for messages */
    int pushed;     /* the engine's context was pushed for the call */
    int relaxed;    /* the thread's capture mode was exchanged for relaxed */
    CUstreamCaptureMode old_mode;
} memra_call;

/* Makes the engine's context current for the call, pushing it only when the
 * caller's current context differs (a serving process on the primary
 * context pays one cheap query), after checking that the primary context
 * was not reset under the engine (MEMRA_ERR_CONTEXT_RESET). */
memra_status memra_call_enter(struct memra_engine *eng, const char *fn, memra_call *c);
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
