/* A fake CUDA driver and NVRTC behind memra's function table.
 *
 * Device memory is host memory and launches run the real kernel source on
 * the host. Work is queued per stream and runs only when something waits
 * for it (a stream or event sync, a wait by another stream, a pageable
 * device-to-host copy, cuMemFree), in stream order, with the legacy default
 * stream's implicit ordering against blocking streams, events and
 * cuStreamWaitEvent. Stream capture follows the driver's rules: global,
 * thread-local and relaxed modes, potentially unsafe calls refused and the
 * capture invalidated, graphs instantiated and replayed. The primary
 * context can be reset under an engine. Any call can be made to fail. */
#ifndef MEMRA_MOCK_DRIVER_H
#define MEMRA_MOCK_DRIVER_H

#include <stdatomic.h>

#include "driver/driver.h"

enum {
#define MEMRA_X(name, ver, req) MOCK_##name,
    MEMRA_CU_ENTRY_POINTS(MEMRA_X)
#undef MEMRA_X
#define MEMRA_X(name) MOCK_##name,
        MEMRA_NVRTC_ENTRY_POINTS(MEMRA_X)
#undef MEMRA_X
            MOCK_N_CALLS
};

typedef struct mock_launch {
    CUfunction f;
    unsigned grid[3], block[3];
    unsigned char args[512]; /* the largest parameter block, with room */
    size_t args_size;
    CUstream stream;
    int pdl;     /* launched with programmatic stream serialization */
    int special; /* f came from a module compiled for one layer spec */
} mock_launch;

typedef enum {
    MOCK_OP_LAUNCH,
    MOCK_OP_HTOD,
    MOCK_OP_DTOH,
    MOCK_OP_DTOD,
    MOCK_OP_MEMSET,
    MOCK_OP_RECORD,
    MOCK_OP_WAIT,
    MOCK_OP_GATE
} mock_op_kind;

typedef struct mock_state {
    /* configuration */
    int n_devices;
    int sm_major, sm_minor;
    int driver_version;
    /* Every cuModuleLoadData fails with this when set (a driver refusing all). */
    CUresult refuse_loads;
    /* A broken GPU: each table launch flips the low bit of its first down
     * scale after it runs. */
    int corrupt_tables;
    /* A device whose routing launches are accepted but never run. */
    int drop_route_launches;
    /* cuMemFree keeps device blocks and cuMemAlloc hands them out again,
     * contents and all, as a real driver's pool may. */
    int recycle_memory;
    const char *compile_log; /* non-NULL: nvrtcCompileProgram fails with it */
    int compile_delay_ms;    /* widens the window for racing processes */
    int fail_call, fail_nth; /* the fail_nth'th call of fail_call fails */
    int fail_result;
    /* Called after each queued operation runs (a test interleaving work). */
    void (*after_op)(mock_op_kind kind, CUstream s);
    /* observations (atomic: the thread tests call in from many threads) */
    _Atomic int calls[MOCK_N_CALLS];
    char options[512]; /* the last compile's options, space separated */
    /* Programs compiled for one layer spec (their source begins with
     * "#define MEMRA_SPEC_"), and the last one's leading defines. */
    _Atomic int spec_programs;
    char spec_defines[256];
    _Atomic int spec_host_runs;  /* launches run by a spec's own host build */
    _Atomic int route_host_runs; /* routing launches run on the host, either build */
    _Atomic int live_allocs;
    _Atomic int live_pinned;
    _Atomic int ctx_refs;
    _Atomic int streams_live;
    _Atomic int events_live;
    _Atomic int modules_live;
    _Atomic int capture_violations; /* unsafe calls refused because of a capture */
    _Atomic int stale_uses;         /* handles used after a context reset */
    _Atomic int launches;
    _Atomic int pdl_launches; /* cuLaunchKernelEx with programmatic serialization */
    mock_launch last;
} mock_state;

extern mock_state mock;
extern memra_driver mock_table;
/* The mock's own NVRTC: the table's one candidate (13.0, sm_75..sm_120),
 * whose version and archs a test may change after mock_install. */
extern memra_nvrtc mock_nv;

/* Resets the state to one sm_90 device and installs the mock table. */
void mock_install(void);
/* Ends the mock: the real table again. */
void mock_uninstall(void);
/* Queues an operation on `s` that holds the stream until *open is set. */
void mock_gate(CUstream s, _Atomic int *open);
/* Operations queued on `s` that have not run. */
int mock_pending(CUstream s);
/* A failed assertion raised while this thread held the mock's lock (cmocka
 * jumps out of the test with it held) leaves it held, and the teardown's
 * wait for it would never end: this gives it back. Elsewhere, a no-op. */
void mock_release_failed_lock(void);
/* Runs every stream's queued work (as the device eventually would). */
void mock_drain(void);
/* cuDevicePrimaryCtxReset as an application would call it: every
 * allocation, stream, event and module of the context is gone. */
void mock_reset_primary_ctx(int dev);
/* Whether the host range is pinned memory from cuMemAllocHost. */
int mock_is_pinned(const void *p, size_t n);

#endif /* MEMRA_MOCK_DRIVER_H */
