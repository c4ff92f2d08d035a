/* The mock driver's insides, shared by its files in tests/mock; tests
 * use tests/mock_driver.h. Generated declarations follow the driver's own
 * list (MEMRA_CU_ENTRY_POINTS): a mock missing for an entry point is a link
 * error, not a NULL call at run time. */
#ifndef MEMRA_MOCK_INTERNAL_H
#define MEMRA_MOCK_INTERNAL_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "jit/kernels.h"
#include "mock_driver.h"

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
    int special;                 /* compiled for one layer spec (its image says which): */
    unsigned spec[5];            /* E, groups, top groups, top-k, the layer's flags */
    char fn[MEMRA_KERNEL_COUNT]; /* its kernels, &fn[k] */
} fmodule;

/* The mock NVRTC's program: whether its source is a layer spec's module,
 * and the spec's values. */
typedef struct mock_program {
    int special;
    unsigned spec[5];
} mock_program;

/* The loaded spec modules (mu held), so a launch finds its kernel's. */
#define MOCK_SPECIAL_MODULES 64
extern fmodule *special_modules[MOCK_SPECIAL_MODULES];

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

extern pthread_mutex_t mu;
extern obj_rec *objs;
extern fstream legacy;
extern fstream *live;     /* created, per-thread and destroyed-but-busy streams */
extern fstream *reusable; /* destroyed streams' handles, handed out again */
extern unsigned long long next_stream_id;
extern alloc_rec *recycled; /* freed device blocks, with mock.recycle_memory */
extern _Thread_local fstream *per_thread;
extern _Thread_local CUstreamCaptureMode thread_mode;
extern alloc_rec *allocs;
extern int gen;
extern unsigned long long ctx_id[8], next_ctx_id;
extern int fake_ctx[8];
extern char fn_kernel[MEMRA_KERNEL_COUNT];
#define MOCK_FN(id) ((CUfunction)&fn_kernel[MEMRA_KERNEL_##id])

/* One layer spec's routing kernels compiled with the spec as constants, run
 * on the host (spec_build.c, built once per spec by tests/meson.build): a
 * launch from a module the library compiled for a spec runs the build for
 * its spec where there is one, so the mock checks the specialised text. */
typedef struct mock_spec_build {
    uint32_t e, ng, tg, k, flags;
    void (*run)(const unsigned char *args, size_t size, unsigned grid, unsigned block,
                memra_kernel_id k);
} mock_spec_build;
#define MOCK_SPEC_BUILDS 7
extern _Thread_local CUcontext ctx_stack[16];
extern _Thread_local int ctx_depth;
extern pthread_mutex_t options_lock;

void *new_obj(size_t size);
void free_obj(void *p);
int failing(int idx);
fstream *S(CUstream h);
fstream *stream_by_id(unsigned long long id);
int stale(int g);
alloc_rec *find_alloc(uintptr_t p, size_t n, int pinned);
fstream *all_streams(fstream *it);
int forbidden_by(const fstream *s);
CUresult unsafe_call(void);
int blocking_capture_active(void);
void push(fstream *s, op o);
op wait_op(fstream *t);
CUresult enqueue(fstream *s, op o);
void execute(const op *o);
void run_until(fstream *s, size_t seq);
void drain_all(void);
void free_stream_ops(fstream *s);
CUresult released(int idx);
CUresult ctx_sync(void);
CUresult stream_sync(fstream *f);
CUresult is_capturing(fstream *f, CUstreamCaptureStatus *st);
CUresult begin_capture(fstream *f, CUstreamCaptureMode m);
CUresult end_capture(fstream *f, CUgraph *g);
CUresult graph_launch(const fgraph *x, fstream *f);
CUresult event_record(fevent *e, fstream *f);
CUresult event_query(fevent *e);
CUresult event_sync(fevent *e);
CUresult stream_wait(fstream *f, fevent *e, unsigned flags);
CUresult alloc_mem(CUdeviceptr *p, size_t n, int pinned);
CUresult free_mem(uintptr_t p, int pinned);
CUresult copy(fstream *f, op o, int to_device);
CUresult judge_image(const char *img);
CUresult launch(mock_launch *l);
CUresult checked_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                        void **extra, int pdl);
void free_all(void);

/* Every entry point's mock, typed by the driver table's own PFN types. */
#define MEMRA_X(name, ver, req) extern __typeof__(*(PFN_##name##_v##ver)0) m_##name;
MEMRA_CU_ENTRY_POINTS(MEMRA_X)
#undef MEMRA_X
#define MEMRA_X(name) extern __typeof__(name) m_##name;
MEMRA_NVRTC_ENTRY_POINTS(MEMRA_X)
#undef MEMRA_X

#endif /* MEMRA_MOCK_INTERNAL_H */
