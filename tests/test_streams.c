/* Streams, capture and contexts as a serving process uses them, on the mock
 * driver (work runs only when waited for, so every missing order shows):
 * NULL is the legacy default stream, uploads are ordered before launches on
 * other streams, a fault reset loses no count, another thread's capture
 * survives memra's allocations and syncs, a reset context is noticed, no
 * launch waits behind a stalled upload, engines keep their own layers. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#include "device_case.h"
#include "vrows/gate_cases.h"
#include "mock_fixture.h"
#include "route/route_cases.h"

#include "stream_work.h"

/* ---- 1. NULL means the legacy default stream -------------------------------- */

/* A router writes sel/selw on stream 0 (PyTorch's default), memra builds on
 * NULL, the GEMV reads on stream 0: one order, as CUDA means it. */
static void test_null_is_the_legacy_default_stream(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    work w;
    work_init(eng, &w, 1.0f, 1);
    upload_inputs(&w, NULL);
    assert_int_equal(launch(eng, &w, 0, NULL), MEMRA_OK);
    expect_tables(&w, (const float(*)[E])w.pl, NULL);
    /* CU_STREAM_LEGACY is the same stream. */
    work_free(eng, &w);
    work_init(eng, &w, 2.0f, 2);
    upload_inputs(&w, CU_STREAM_LEGACY);
    assert_int_equal(launch(eng, &w, 0, CU_STREAM_LEGACY), MEMRA_OK);
    expect_tables(&w, (const float(*)[E])w.pl, CU_STREAM_LEGACY);
    work_free(eng, &w);
    memra_engine_destroy(eng);
}

static void test_per_thread_default_stream(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    work w;
    work_init(eng, &w, 1.0f, 3);
    upload_inputs(&w, CU_STREAM_PER_THREAD);
    assert_int_equal(launch(eng, &w, 0, CU_STREAM_PER_THREAD), MEMRA_OK);
    expect_tables(&w, (const float(*)[E])w.pl, CU_STREAM_PER_THREAD);
    work_free(eng, &w);
    memra_engine_destroy(eng);
}

/* The engine's own stream is named explicitly. */
static void test_engine_stream_is_explicit(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    memra_stream own = NULL;
    assert_int_equal(memra_engine_stream(eng, &own), MEMRA_OK);
    assert_non_null(own);
    assert_int_equal(memra_engine_stream(eng, NULL), MEMRA_ERR_NULL_ARG);
    assert_int_equal(memra_engine_stream(NULL, &own), MEMRA_ERR_NULL_ARG);
    work w;
    work_init(eng, &w, 1.0f, 4);
    upload_inputs(&w, own);
    assert_int_equal(launch(eng, &w, 0, own), MEMRA_OK);
    expect_tables(&w, (const float(*)[E])w.pl, own);
    work_free(eng, &w);
    memra_engine_destroy(eng);
}

/* ---- 2. uploads are ordered before launches on any stream -------------------- */

static void test_upload_on_one_stream_launch_on_another(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    assert_int_equal(memra_engine_warmup(eng), MEMRA_OK);
    CUstream a = make_stream(), b = make_stream();
    work w;
    work_init(eng, &w, 1.0f, 5);
    /* A new layer: prepared on a (a prepare call finishes its upload, so a
     * graph captured next needs no wait for it), launched on b. */
    assert_int_equal(memra_vrows_prepare_layer(eng, 7, E, &w.mac, a), MEMRA_OK);
    assert_int_equal(mock_pending(a), 0);
    upload_inputs(&w, b);
    assert_int_equal(launch(eng, &w, 7, b), MEMRA_OK);
    expect_tables(&w, (const float(*)[E])w.pl, b);
    /* Changed planes, uploaded by a launch on a (queued there), then a
     * launch on b: it waits for a's upload. */
    for (int e = 0; e < E; e++)
        w.pl[2][e] = -3.0f - (float)e;
    assert_int_equal(launch(eng, &w, 7, a), MEMRA_OK);
    assert_true(mock_pending(a) > 0);
    assert_int_equal(launch(eng, &w, 7, b), MEMRA_OK);
    expect_tables(&w, (const float(*)[E])w.pl, b);
    work_free(eng, &w);
    mock_table.cuStreamDestroy(a), mock_table.cuStreamDestroy(b);
    memra_engine_destroy(eng);
}

/* Two uploads of one layer queued back to back with a launch between them:
 * the first launch sees the first planes, the second the second. The
 * upload's pinned source is swapped, not overwritten, while queued. */
static void test_queued_upload_source_is_not_overwritten(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    assert_int_equal(memra_engine_warmup(eng), MEMRA_OK);
    CUstream a = make_stream();
    work w1, w2;
    work_init(eng, &w1, 1.0f, 6);
    work_init(eng, &w2, 5.0f, 6);
    upload_inputs(&w1, a), upload_inputs(&w2, a);
    assert_int_equal(launch(eng, &w1, 3, a), MEMRA_OK);
    assert_int_equal(launch(eng, &w2, 3, a), MEMRA_OK); /* same layer, new planes */
    expect_tables(&w1, (const float(*)[E])w1.pl, a);
    expect_tables(&w2, (const float(*)[E])w2.pl, a);
    work_free(eng, &w1), work_free(eng, &w2);
    mock_table.cuStreamDestroy(a);
    memra_engine_destroy(eng);
}

/* A hit asks the driver one thing, whether its stream captures (a captured
 * launch must wait for the upload on every replay); on the upload's own
 * stream nothing more; on another stream one wait until the upload is seen
 * finished, then none. */
static void test_hits_cost_nothing_once_ordered(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    CUstream a = make_stream(), b = make_stream();
    work w;
    work_init(eng, &w, 1.0f, 7);
    upload_inputs(&w, a);
    assert_int_equal(launch(eng, &w, 2, a), MEMRA_OK);
    const int q = mock.calls[MOCK_cuEventQuery], wt = mock.calls[MOCK_cuStreamWaitEvent],
              ic = mock.calls[MOCK_cuStreamIsCapturing], up = mock.calls[MOCK_cuMemcpyHtoDAsync];
    for (int i = 0; i < 4; i++)
        assert_int_equal(launch(eng, &w, 2, a), MEMRA_OK);
    assert_int_equal(mock.calls[MOCK_cuEventQuery], q);
    assert_int_equal(mock.calls[MOCK_cuStreamWaitEvent], wt);
    assert_int_equal(mock.calls[MOCK_cuStreamIsCapturing], ic + 4);
    assert_int_equal(mock.calls[MOCK_cuMemcpyHtoDAsync], up);
    /* Another stream, upload still queued: one device-side wait. */
    assert_int_equal(launch(eng, &w, 2, b), MEMRA_OK);
    assert_int_equal(mock.calls[MOCK_cuStreamWaitEvent], wt + 1);
    assert_int_equal(mock_table.cuStreamSynchronize(a), CUDA_SUCCESS);
    /* Once finished, no more waits from any stream. */
    assert_int_equal(launch(eng, &w, 2, b), MEMRA_OK);
    const int q2 = mock.calls[MOCK_cuEventQuery];
    for (int i = 0; i < 4; i++)
        assert_int_equal(launch(eng, &w, 2, b), MEMRA_OK);
    assert_int_equal(mock.calls[MOCK_cuStreamWaitEvent], wt + 1);
    assert_int_equal(mock.calls[MOCK_cuEventQuery], q2);
    expect_tables(&w, (const float(*)[E])w.pl, b);
    work_free(eng, &w);
    mock_table.cuStreamDestroy(a), mock_table.cuStreamDestroy(b);
    memra_engine_destroy(eng);
}

/* A capture meeting an upload not known finished (queued on another stream
 * by an eager launch with new planes): the graph holds an external wait for
 * it, and nothing is asked of the upload's event under the capture (a query
 * there invalidated the caller's own capture on the H200's driver, even in
 * relaxed thread mode). A capture after a prepare call holds no wait: the
 * prepare finished its upload. */
static void test_capture_after_pending_upload(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    assert_int_equal(memra_engine_warmup(eng), MEMRA_OK);
    CUstream a = make_stream(), c = make_stream();
    work w;
    work_init(eng, &w, 1.0f, 8);
    upload_inputs(&w, c);
    assert_int_equal(mock_table.cuStreamSynchronize(c), CUDA_SUCCESS);
    for (int round = 0; round < 2; round++) {
        if (round == 0) {
            assert_int_equal(launch(eng, &w, 4, a), MEMRA_OK); /* uploads on a, queued */
            assert_true(mock_pending(a) > 0);
        } else {
            for (int e = 0; e < E; e++)
                w.pl[1][e] = 0.5f + (float)e;
            assert_int_equal(memra_vrows_prepare_layer(eng, 5, E, &w.mac, a), MEMRA_OK);
            assert_int_equal(mock_pending(a), 0);
        }
        const int il = round == 0 ? 4 : 5, waits = mock.calls[MOCK_cuStreamWaitEvent],
                  queries = mock.calls[MOCK_cuEventQuery];
        assert_int_equal(mock_table.cuStreamBeginCapture(c, CU_STREAM_CAPTURE_MODE_GLOBAL),
                         CUDA_SUCCESS);
        assert_int_equal(launch(eng, &w, il, c), MEMRA_OK);
        CUgraph g;
        assert_int_equal(mock_table.cuStreamEndCapture(c, &g), CUDA_SUCCESS);
        assert_int_equal(mock.capture_violations, 0);
        assert_int_equal(mock.calls[MOCK_cuEventQuery], queries);
        assert_int_equal(mock.calls[MOCK_cuStreamWaitEvent], waits + (round == 0));
        CUgraphExec x;
        assert_int_equal(mock_table.cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
        assert_int_equal(mock_table.cuGraphLaunch(x, c), CUDA_SUCCESS);
        expect_tables(&w, (const float(*)[E])w.pl, c);
        mock_table.cuGraphExecDestroy(x), mock_table.cuGraphDestroy(g);
    }
    work_free(eng, &w);
    mock_table.cuStreamDestroy(a), mock_table.cuStreamDestroy(c);
    memra_engine_destroy(eng);
}

/* A launch whose kernel is not loaded is refused under capture, and the
 * message names the call that loads that kernel: the routing block kernel
 * (up to 512 tokens, the decode path) was told to call
 * memra_vrows_prepare_layer() or memra_engine_warmup(), which never load it. */
static void test_capture_refusal_names_the_call_that_loads_the_kernel(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    const memra_route_spec spec = route_cases[1].spec; /* no bias, no planes */
    const uint32_t tokens[] = {8, 600};                /* the block kernel, the warp kernel */
    const size_t np = 600 * spec.top_k;
    memra_devptr logits, sel, selw, ptrs, scl;
    assert_int_equal(memra_alloc(eng, 600 * spec.n_expert * 4, &logits), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, np * 4, &sel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, np * 4, &selw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * np * 8, &ptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * np * 4, &scl), MEMRA_OK);
    const memra_vrows_slabs slabs = {{1u << 20, 2u << 20, 3u << 20}, {64, 64, 64}};
    CUstream c = make_stream();
    assert_int_equal(mock_table.cuStreamBeginCapture(c, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_SUCCESS);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(memra_route_tables(eng, logits, tokens[i], &spec, 0, NULL, &slabs, sel,
                                            selw, ptrs, scl, c),
                         MEMRA_ERR_CAPTURE);
        const char *m = memra_last_error();
        if (!strstr(m, "call memra_route_prepare_layer() before capture") || strstr(m, "vrows") ||
            strstr(m, "warmup"))
            fail_msg("%u tokens: %s", tokens[i], m);
    }
    assert_int_equal(memra_vrows_tables(eng, sel, selw, 8, 64, 0, NULL, &slabs, ptrs, scl, c),
                     MEMRA_ERR_CAPTURE);
    assert_non_null(strstr(memra_last_error(),
                           "call memra_vrows_prepare_layer() or memra_engine_warmup() before"));
    CUgraph g;
    assert_int_equal(mock_table.cuStreamEndCapture(c, &g), CUDA_SUCCESS); /* intact */
    mock_table.cuGraphDestroy(g);
    const memra_devptr bufs[] = {logits, sel, selw, ptrs, scl};
    for (int i = 0; i < 5; i++)
        memra_free(eng, bufs[i]);
    mock_table.cuStreamDestroy(c);
    memra_engine_destroy(eng);
}

/* A fault reset is a read-and-clear on the device: faults that another
 * stream's launch adds between the read and the clear reach the next read. */
static CUstream other_stream;
static int hook_fired;
static void run_other_stream_once(mock_op_kind kind, CUstream s)
{
    (void)s;
    if (hook_fired || (kind != MOCK_OP_DTOH && kind != MOCK_OP_LAUNCH))
        return;
    hook_fired = 1;
    mock_table.cuStreamSynchronize(other_stream);
}

static void test_fault_reset_loses_no_count(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    assert_int_equal(memra_engine_warmup(eng), MEMRA_OK);
    CUstream a = make_stream(), b = make_stream();
    work w;
    work_init(eng, &w, 1.0f, 9);
    for (int p = 0; p < 10; p++)
        w.sel[p] = E + p; /* ten out-of-range ids */
    upload_inputs(&w, a);
    assert_int_equal(launch(eng, &w, 1, a), MEMRA_OK); /* queued on a */
    other_stream = a;
    hook_fired = 0;
    mock.after_op = run_other_stream_once; /* a runs in the middle of the read */
    memra_faults f1, f2;
    assert_int_equal(memra_engine_faults(eng, b, &f1, 1), MEMRA_OK);
    mock.after_op = NULL;
    assert_int_equal(hook_fired, 1);
    assert_int_equal(memra_engine_faults(eng, b, &f2, 1), MEMRA_OK);
    assert_int_equal(f1.bad_expert + f2.bad_expert, 10);
    assert_int_equal(f1.bad_expert ? f1.first_pair : f2.first_pair, 0);
    memra_faults f3;
    assert_int_equal(memra_engine_faults(eng, b, &f3, 0), MEMRA_OK);
    assert_int_equal(f3.bad_expert, 0);
    assert_int_equal(f3.first_pair, MEMRA_NO_FAULT);
    work_free(eng, &w);
    mock_table.cuStreamDestroy(a), mock_table.cuStreamDestroy(b);
    memra_engine_destroy(eng);
}

/* ---- 3. another thread's capture is left intact ------------------------------ */

typedef struct capturer {
    CUstream s;
    pthread_barrier_t *began, *done;
    CUresult end;
} capturer;

static void *capture_thread(void *arg)
{
    capturer *c = arg;
    mock_table.cuStreamBeginCapture(c->s, CU_STREAM_CAPTURE_MODE_GLOBAL);
    pthread_barrier_wait(c->began);
    pthread_barrier_wait(c->done);
    CUgraph g = NULL;
    c->end = mock_table.cuStreamEndCapture(c->s, &g);
    if (g)
        mock_table.cuGraphDestroy(g);
    return NULL;
}

static void test_other_threads_global_capture_survives(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    CUstream cs = make_stream(), d = make_stream();
    pthread_barrier_t began, done;
    pthread_barrier_init(&began, NULL, 2);
    pthread_barrier_init(&done, NULL, 2);
    capturer c = {cs, &began, &done, CUDA_ERROR_UNKNOWN};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, capture_thread, &c), 0);
    pthread_barrier_wait(&began);
    /* The thread captures in global mode: everything below would break it. */
    work w;
    work_init(eng, &w, 1.0f, 10);                                                /* cuMemAlloc */
    assert_int_equal(memra_engine_warmup(eng), MEMRA_OK);                        /* module load */
    assert_int_equal(memra_vrows_prepare_layer(eng, 9, E, &w.mac, d), MEMRA_OK); /* first upload */
    assert_int_equal(memra_upload(eng, w.dsel, w.sel, sizeof w.sel), MEMRA_OK);
    assert_int_equal(memra_upload_f32(eng, w.dselw, w.selw, N), MEMRA_OK);
    assert_int_equal(launch(eng, &w, 9, d), MEMRA_OK);
    memra_faults f;
    assert_int_equal(memra_engine_faults(eng, d, &f, 0), MEMRA_OK);
    assert_int_equal(memra_engine_faults(eng, d, &f, 1), MEMRA_OK);
    assert_int_equal(memra_sync(eng, d), MEMRA_OK);
    uint64_t first;
    assert_int_equal(memra_download(eng, &first, w.dptrs, 8), MEMRA_OK);
    work_free(eng, &w); /* cuMemFree */
    assert_int_equal(mock.capture_violations, 0);
    pthread_barrier_wait(&done);
    pthread_join(t, NULL);
    assert_int_equal(c.end, CUDA_SUCCESS);
    pthread_barrier_destroy(&began), pthread_barrier_destroy(&done);
    mock_table.cuStreamDestroy(cs), mock_table.cuStreamDestroy(d);
    memra_engine_destroy(eng);
}

/* memra's own stream capturing is refused before anything that would break
 * it, and the caller's thread mode is what it was. */
static void test_capture_mode_restored(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    mock_table.cuThreadExchangeStreamCaptureMode(&m);
    work w;
    work_init(eng, &w, 1.0f, 11);
    assert_int_equal(memra_vrows_prepare_layer(eng, 1, E, &w.mac, NULL), MEMRA_OK);
    memra_faults f;
    assert_int_equal(memra_engine_faults(eng, NULL, &f, 1), MEMRA_OK);
    m = CU_STREAM_CAPTURE_MODE_GLOBAL;
    mock_table.cuThreadExchangeStreamCaptureMode(&m);
    assert_int_equal(m, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    work_free(eng, &w);
    memra_engine_destroy(eng);
}

/* ---- 4. a reset primary context is noticed ----------------------------------- */

static void test_context_reset_is_noticed(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    work w;
    work_init(eng, &w, 1.0f, 12);
    upload_inputs(&w, NULL);
    assert_int_equal(launch(eng, &w, 0, NULL), MEMRA_OK);
    expect_tables(&w, (const float(*)[E])w.pl, NULL);
    /* The application resets the device (its buffers go with it). */
    mock_reset_primary_ctx(0);
    assert_int_equal(launch(eng, &w, 0, NULL), MEMRA_ERR_CONTEXT_RESET);
    assert_non_null(strstr(memra_last_error(), "reset"));
    memra_faults f;
    assert_int_equal(memra_engine_faults(eng, NULL, &f, 1), MEMRA_ERR_CONTEXT_RESET);
    memra_devptr p;
    assert_int_equal(memra_alloc(eng, 64, &p), MEMRA_ERR_CONTEXT_RESET);
    assert_int_equal(memra_vrows_prepare_layer(eng, 0, E, &w.mac, NULL), MEMRA_ERR_CONTEXT_RESET);
    assert_int_equal(memra_engine_warmup(eng), MEMRA_ERR_CONTEXT_RESET);
    /* the accessors too: the stream is a stale handle now (they once
     * answered as if nothing had happened) */
    memra_stream st = (memra_stream)&w;
    assert_int_equal(memra_engine_stream(eng, &st), MEMRA_ERR_CONTEXT_RESET);
    assert_true(st == (memra_stream)&w);
    memra_engine_info info;
    assert_int_equal(memra_engine_get_info(eng, &info), MEMRA_ERR_CONTEXT_RESET);
    assert_int_equal(memra_engine_set_pdl(eng, 0, NULL), MEMRA_ERR_CONTEXT_RESET);
    memra_engine_destroy(eng); /* frees nothing of the old context */
    assert_int_equal(mock.stale_uses, 0);
    assert_int_equal(mock.ctx_refs, 0);
    /* A new engine on the new context works. */
    eng = mock_engine();
    char why[512];
    if (gate_case_check(eng, 1, why, sizeof why))
        fail_msg("after the reset: %s", why);
    memra_engine_destroy(eng);
}

/* ---- 5. no launch waits behind a stalled upload ------------------------------ */

typedef struct launcher_job {
    memra_engine *eng;
    work *w;
    CUstream s;
    _Atomic int done;
    memra_status st;
} launcher_job;

static void *launch_thread(void *arg)
{
    launcher_job *j = arg;
    j->st = launch(j->eng, j->w, 1, j->s);
    atomic_store(&j->done, 1);
    return NULL;
}

typedef struct preparer_job {
    memra_engine *eng;
    const memra_vrows_macros *mac;
    uint32_t n_expert;
    CUstream s;
    memra_status st;
} preparer_job;

static void *prepare_thread(void *arg)
{
    preparer_job *j = arg;
    j->st = memra_vrows_prepare_layer(j->eng, 2, j->n_expert, j->mac, j->s);
    return NULL;
}

/* Thread 1 changes layer 2's expert count on a stream held up behind work
 * that thread 2 will release only after its own launch (on layer 1)
 * returns. A library that waits for the stream under a lock the launch
 * needs deadlocks here. */
static void test_no_launch_waits_behind_a_stalled_upload(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    CUstream s1 = make_stream(), s2 = make_stream();
    work w;
    work_init(eng, &w, 1.0f, 13);
    upload_inputs(&w, s2);
    assert_int_equal(launch(eng, &w, 1, s2), MEMRA_OK);
    float big[3 * 2 * E];
    for (int i = 0; i < 3 * 2 * E; i++)
        big[i] = 0.5f + (float)i;
    memra_vrows_macros mac_small = w.mac, mac_big = {{big, big + 2 * E, big + 4 * E}};
    assert_int_equal(memra_vrows_prepare_layer(eng, 2, E, &mac_small, s1), MEMRA_OK);
    assert_int_equal(mock_table.cuStreamSynchronize(s1), CUDA_SUCCESS);
    _Atomic int open = 0;
    mock_gate(s1, &open);
    preparer_job pj = {eng, &mac_big, 2 * E, s1, MEMRA_ERR_DRIVER};
    pthread_t t1, t2;
    assert_int_equal(pthread_create(&t1, NULL, prepare_thread, &pj), 0);
    usleep(50 * 1000); /* thread 1 is inside (or past) its upload */
    launcher_job lj = {eng, &w, s2, 0, MEMRA_ERR_DRIVER};
    assert_int_equal(pthread_create(&t2, NULL, launch_thread, &lj), 0);
    for (int i = 0; i < 500 && !atomic_load(&lj.done); i++)
        usleep(10 * 1000);
    const int launched = atomic_load(&lj.done);
    atomic_store(&open, 1); /* release the stream either way, to unwind */
    pthread_join(t2, NULL);
    pthread_join(t1, NULL);
    if (!launched)
        fail_msg("%s", "a launch on layer 1 waited behind layer 2's stalled stream for 5 s");
    assert_int_equal(lj.st, MEMRA_OK);
    assert_int_equal(pj.st, MEMRA_OK);
    expect_tables(&w, (const float(*)[E])w.pl, s2);
    work_free(eng, &w);
    mock_table.cuStreamDestroy(s1), mock_table.cuStreamDestroy(s2);
    memra_engine_destroy(eng);
}

/* ---- 7. one engine per model --------------------------------------------------- */

static void test_two_engines_same_layer_index(void **state)
{
    (void)state;
    memra_engine *draft = mock_engine(), *target = mock_engine();
    work wd, wt;
    work_init(draft, &wd, 1.0f, 14);
    work_init(target, &wt, 7.0f, 14);
    for (int round = 0; round < 2; round++) {
        upload_inputs(&wd, NULL), upload_inputs(&wt, NULL);
        const int uploads = mock.calls[MOCK_cuMemcpyHtoDAsync];
        assert_int_equal(launch(draft, &wd, 0, NULL), MEMRA_OK);
        assert_int_equal(launch(target, &wt, 0, NULL), MEMRA_OK);
        /* Each engine mirrors its own layer 0: uploaded once, then hits. */
        assert_int_equal(mock.calls[MOCK_cuMemcpyHtoDAsync], uploads + (round == 0 ? 2 : 0));
        expect_tables(&wd, (const float(*)[E])wd.pl, NULL);
        expect_tables(&wt, (const float(*)[E])wt.pl, NULL);
    }
    work_free(draft, &wd), work_free(target, &wt);
    memra_engine_destroy(draft), memra_engine_destroy(target);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, mock_setup, mock_teardown)
        T(test_null_is_the_legacy_default_stream),
        T(test_per_thread_default_stream),
        T(test_engine_stream_is_explicit),
        T(test_upload_on_one_stream_launch_on_another),
        T(test_queued_upload_source_is_not_overwritten),
        T(test_hits_cost_nothing_once_ordered),
        T(test_capture_after_pending_upload),
        T(test_capture_refusal_names_the_call_that_loads_the_kernel),
        T(test_fault_reset_loses_no_count),
        T(test_other_threads_global_capture_survives),
        T(test_capture_mode_restored),
        T(test_context_reset_is_noticed),
        T(test_no_launch_waits_behind_a_stalled_upload),
        T(test_two_engines_same_layer_index),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
