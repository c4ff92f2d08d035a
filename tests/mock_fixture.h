/* The cmocka fixture every mock-driver test file shares: install the fake
 * driver before a test, and after it prove the library gave everything
 * back (memory, pinned shadows, contexts, streams, events, modules) and
 * never touched a handle after freeing it. */
#ifndef MEMRA_MOCK_FIXTURE_H
#define MEMRA_MOCK_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "mock_driver.h"

static inline int mock_setup(void **state)
{
    (void)state;
    mock_install();
    return 0;
}

static inline int mock_teardown(void **state)
{
    (void)state;
    mock_release_failed_lock();
    mock_drain();
    assert_int_equal(mock.live_allocs, 0);
    assert_int_equal(mock.live_pinned, 0);
    assert_int_equal(mock.ctx_refs, 0);
    assert_int_equal(mock.streams_live, 0);
    assert_int_equal(mock.events_live, 0);
    assert_int_equal(mock.modules_live, 0);
    assert_int_equal(mock.stale_uses, 0);
    mock_uninstall();
    return 0;
}

static inline memra_engine *mock_engine(void)
{
    memra_engine *eng = NULL;
    if (memra_engine_create(0, &eng))
        fail_msg("engine_create: %s", memra_last_error());
    return eng;
}

/* The MEMRA_SPEC_FLAGS of the last program compiled for a layer spec (the
 * mock's NVRTC keeps its leading defines). */
static inline unsigned mock_last_spec_flags(void)
{
    const char *f = strstr(mock.spec_defines, "MEMRA_SPEC_FLAGS ");
    assert_non_null(f);
    return (unsigned)strtoul(f + strlen("MEMRA_SPEC_FLAGS "), NULL, 10);
}

#endif
