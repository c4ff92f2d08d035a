/* A fake CUDA driver and NVRTC behind memra's function table: device memory
 * is host memory, launches run the real kernel source on the host, stream
 * capture records launches for replay, and any call can be made to fail. */
#ifndef MEMRA_MOCK_DRIVER_H
#define MEMRA_MOCK_DRIVER_H

#include <stdatomic.h>

#include "driver.h"

enum {
#define MEMRA_X(name, ver, req) MOCK_##name,
    MEMRA_CU_ENTRY_POINTS(MEMRA_X)
#undef MEMRA_X
#define MEMRA_X(name) MOCK_##name,
        MEMRA_NVRTC_ENTRY_POINTS(MEMRA_X)
#undef MEMRA_X
            MOCK_N_CALLS
};

#define MOCK_MAX_CAPTURED 64

typedef struct mock_launch {
    unsigned grid[3], block[3];
    unsigned char args[120];
    size_t args_size;
    CUstream stream;
} mock_launch;

typedef struct mock_state {
    /* configuration */
    int n_devices;
    int sm_major, sm_minor;
    int archs[16], n_archs;
    const char *compile_log; /* non-NULL: nvrtcCompileProgram fails with it */
    int compile_delay_ms;    /* widens the window for racing processes */
    int fail_call, fail_nth; /* the fail_nth'th call of fail_call fails */
    int fail_result;
    /* observations (atomic: the thread tests call in from many threads) */
    _Atomic int calls[MOCK_N_CALLS];
    char options[512]; /* the last compile's options, space separated */
    _Atomic int live_allocs;
    _Atomic int ctx_refs;
    _Atomic int streams_live;
    _Atomic int modules_live;
    _Atomic int capture_violations; /* alloc/copy/sync while some stream captured */
    _Atomic int launches;
    mock_launch last;
    mock_launch captured[MOCK_MAX_CAPTURED];
    int n_captured;
} mock_state;

extern mock_state mock;
extern memra_driver mock_table;

/* Resets the state to one sm_90 device and installs the mock table. */
void mock_install(void);
/* Capture on/off for a stream made through mock_table.cuStreamCreate. */
void mock_set_capturing(CUstream s, int on);
/* Runs what was recorded under capture, as a graph replay would. */
void mock_replay(void);
/* Ends the mock: the real table again. */
void mock_uninstall(void);

#endif /* MEMRA_MOCK_DRIVER_H */
