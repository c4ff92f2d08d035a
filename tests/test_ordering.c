/* Ordering: memra orders its work as CUDA orders the equivalent CUDA calls
 * (docs/streams.md), one test per row of the contract, on the mock driver,
 * where work runs only when something waits for it, so a missing order
 * reads stale memory instead of passing by luck:
 *   1-3  synchronous copies behave like cuMemcpy (after the legacy stream,
 *        and so after blocking streams);
 *   5    the table kernel and routing keep separate slots of one layer;
 *   6    a replay after a later upload reads it (with no node per launch);
 *   7    a reused stream handle is not the stream that uploaded;
 *   8    memra_sync on a capturing stream leaves the capture intact;
 *   9    fault readers on different streams do not wait for each other;
 *   10   uploads of one layer land in the order they were issued;
 * and memory stays flat under 10,000 alternations. (Row 4, the self-check
 * beside another thread's capture, is in test_self_check.c.) */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "stream_work.h"

static CUstream make_blocking_stream(void)
{
    CUstream s;
    assert_int_equal(mock_table.cuStreamCreate(&s, CU_STREAM_DEFAULT), CUDA_SUCCESS);
    return s;
}

/* The device tables, read by the synchronous helpers (no stream: ordered
 * like cuMemcpy), equal the host arm's for `sel` and the planes. */
static void expect_tables_sync(memra_engine *eng, const work *w, const int32_t *sel,
                               const float (*planes)[E])
{
    uint64_t dp[3 * N], hp[3 * N];
    float ds[3 * N], hs[3 * N];
    assert_int_equal(memra_download_u64(eng, dp, w->dptrs, 3 * N), MEMRA_OK);
    assert_int_equal(memra_download(eng, ds, w->dscl, sizeof ds), MEMRA_OK);
    memra_vrows_macros mac = {{planes[0], planes[1], planes[2]}};
    assert_int_equal(memra_vrows_tables_host(sel, w->selw, N, E, &mac, &w->sl, hp, hs, NULL),
                     MEMRA_OK);
    assert_memory_equal(dp, hp, sizeof dp);
    assert_memory_equal(ds, hs, sizeof ds);
}

/* Row 1: a launch on the legacy stream, then a synchronous download. */
static void test_sync_download_after_legacy_launch(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    work w;
    work_init(eng, &w, 1.0f, 11);
    upload_inputs(&w, NULL);
    assert_int_equal(launch(eng, &w, 0, NULL), MEMRA_OK);
    expect_tables_sync(eng, &w, w.sel, (const float(*)[E])w.pl);
    work_free(eng, &w);
    memra_engine_destroy(eng);
}

/* Row 2: a launch on the legacy stream reading sel, then a synchronous
 * upload of a new sel: the upload lands after the launch has read. */
static void test_sync_upload_after_legacy_launch(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    work w;
    work_init(eng, &w, 1.0f, 12);
    upload_inputs(&w, NULL);
    assert_int_equal(launch(eng, &w, 0, NULL), MEMRA_OK);
    int32_t old_sel[N], new_sel[N];
    memcpy(old_sel, w.sel, sizeof old_sel);
    for (int p = 0; p < N; p++)
        new_sel[p] = (w.sel[p] + 1) % E;
    assert_int_equal(memra_upload_i32(eng, w.dsel, new_sel, N), MEMRA_OK);
    expect_tables_sync(eng, &w, old_sel, (const float(*)[E])w.pl);
    int32_t dsel[N];
    assert_int_equal(memra_download_i32(eng, dsel, w.dsel, N), MEMRA_OK);
    assert_memory_equal(dsel, new_sel, sizeof dsel);
    work_free(eng, &w);
    memra_engine_destroy(eng);
}

/* Row 3: a launch on a blocking stream, then a synchronous download. */
static void test_sync_download_after_blocking_stream_launch(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    CUstream b = make_blocking_stream();
    work w;
    work_init(eng, &w, 1.0f, 13);
    upload_inputs(&w, b);
    assert_int_equal(launch(eng, &w, 0, b), MEMRA_OK);
    expect_tables_sync(eng, &w, w.sel, (const float(*)[E])w.pl);
    work_free(eng, &w);
    mock_table.cuStreamDestroy(b);
    memra_engine_destroy(eng);
}

/* The _on forms are ordered on their stream, and complete on return; a
 * synchronous call does not wait for a non-blocking stream. */
static void test_on_forms_follow_their_stream(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    CUstream s = make_stream();
    work w;
    work_init(eng, &w, 1.0f, 14);
    upload_inputs(&w, s);
    assert_int_equal(launch(eng, &w, 0, s), MEMRA_OK);
    uint64_t dp[3 * N];
    assert_int_equal(memra_download_u64(eng, dp, w.dptrs, 3 * N), MEMRA_OK);
    assert_true(mock_pending(s) > 0); /* the legacy stream does not wait for s */
    assert_int_equal(memra_download_u64_on(eng, dp, w.dptrs, 3 * N, s), MEMRA_OK);
    assert_int_equal(mock_pending(s), 0);
    expect_tables(&w, (const float(*)[E])w.pl, s);
    int32_t back[N];
    assert_int_equal(memra_upload_i32_on(eng, w.dsel, w.sel, N, s), MEMRA_OK);
    assert_int_equal(mock_pending(s), 0);
    assert_int_equal(memra_download_on(eng, back, w.dsel, sizeof back, s), MEMRA_OK);
    assert_memory_equal(back, w.sel, sizeof back);
    work_free(eng, &w);
    mock_table.cuStreamDestroy(s);
    memra_engine_destroy(eng);
}

/* Synchronous calls whose stream is capturing, or that would join another
 * stream's capture through the legacy stream, are refused; the capture
 * survives. */
static void test_sync_calls_refused_under_capture(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    CUstream c = make_stream(), b = make_blocking_stream();
    work w;
    work_init(eng, &w, 1.0f, 15);
    uint64_t dp[3 * N];
    memra_faults f;
    CUgraph g;
    assert_int_equal(mock_table.cuStreamBeginCapture(c, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_SUCCESS);
    assert_int_equal(memra_download_u64_on(eng, dp, w.dptrs, 3 * N, c), MEMRA_ERR_CAPTURE);
    assert_int_equal(memra_upload_i32_on(eng, w.dsel, w.sel, N, c), MEMRA_ERR_CAPTURE);
    assert_int_equal(memra_engine_faults(eng, c, &f, 0), MEMRA_ERR_CAPTURE);
    assert_int_equal(mock_table.cuStreamEndCapture(c, &g), CUDA_SUCCESS);
    mock_table.cuGraphDestroy(g);
    /* A blocking stream captures: the legacy stream would join it. */
    assert_int_equal(mock_table.cuStreamBeginCapture(b, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_SUCCESS);
    assert_int_equal(memra_download_u64(eng, dp, w.dptrs, 3 * N), MEMRA_ERR_CAPTURE);
    assert_non_null(strstr(memra_last_error(), "legacy"));
    assert_int_equal(memra_upload_i32(eng, w.dsel, w.sel, N), MEMRA_ERR_CAPTURE);
    assert_int_equal(memra_engine_faults(eng, NULL, &f, 1), MEMRA_ERR_CAPTURE);
    assert_int_equal(launch(eng, &w, 0, NULL), MEMRA_ERR_CAPTURE);
    assert_int_equal(mock_table.cuStreamEndCapture(b, &g), CUDA_SUCCESS);
    mock_table.cuGraphDestroy(g);
    assert_int_equal(mock.capture_violations, 0);
    work_free(eng, &w);
    mock_table.cuStreamDestroy(b), mock_table.cuStreamDestroy(c);
    memra_engine_destroy(eng);
}

/* ---- row 5: routing and the table kernel on one layer ----------------------- */

enum { RT = 4, RK = 2 }; /* tokens, top_k */

typedef struct route_work {
    float logits[RT * E], bias[E];
    memra_route_spec spec;
    memra_devptr dlogits, dsel, dselw, dptrs, dscl;
} route_work;

static void route_init(memra_engine *eng, route_work *r, uint64_t seed)
{
    for (int i = 0; i < RT * E; i++)
        r->logits[i] = (float)(rng_next(&seed) % 1000) / 250.0f - 2.0f;
    for (int e = 0; e < E; e++)
        r->bias[e] = (float)(e % 3) * 0.125f;
    r->spec = (memra_route_spec){.n_expert = E,
                                 .top_k = RK,
                                 .n_group = 1,
                                 .topk_group = 1,
                                 .scoring = MEMRA_ROUTE_SIGMOID,
                                 .logits_dtype = MEMRA_LOGITS_F32,
                                 .renormalize = 1,
                                 .routed_scaling_factor = 1.0f,
                                 .bias = r->bias};
    assert_int_equal(memra_alloc(eng, sizeof r->logits, &r->dlogits), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, RT * RK * 4, &r->dsel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, RT * RK * 4, &r->dselw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * RT * RK * 8, &r->dptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * RT * RK * 4, &r->dscl), MEMRA_OK);
    assert_int_equal(memra_upload(eng, r->dlogits, r->logits, sizeof r->logits), MEMRA_OK);
}

static void route_free(memra_engine *eng, route_work *r)
{
    memra_free(eng, r->dlogits), memra_free(eng, r->dsel), memra_free(eng, r->dselw);
    memra_free(eng, r->dptrs), memra_free(eng, r->dscl);
}

static memra_status route_launch(memra_engine *eng, route_work *r, work *w, int il, CUstream s)
{
    return memra_route_tables(eng, r->dlogits, RT, &r->spec, il, &w->mac, &w->sl, r->dsel, r->dselw,
                              r->dptrs, r->dscl, s);
}

/* The routing outputs read after `s` equal the host arm's. */
static void expect_route(memra_engine *eng, const route_work *r, const work *w, CUstream s)
{
    int32_t dsel[RT * RK], hsel[RT * RK];
    float dselw[RT * RK], hselw[RT * RK], dscl[3 * RT * RK], hscl[3 * RT * RK];
    uint64_t dptrs[3 * RT * RK], hptrs[3 * RT * RK];
    assert_int_equal(memra_download_i32_on(eng, dsel, r->dsel, RT * RK, s), MEMRA_OK);
    assert_int_equal(memra_download_f32_on(eng, dselw, r->dselw, RT * RK, s), MEMRA_OK);
    assert_int_equal(memra_download_u64_on(eng, dptrs, r->dptrs, 3 * RT * RK, s), MEMRA_OK);
    assert_int_equal(memra_download_f32_on(eng, dscl, r->dscl, 3 * RT * RK, s), MEMRA_OK);
    assert_int_equal(memra_route_tables_host(r->logits, RT, &r->spec, &w->mac, &w->sl, hsel, hselw,
                                             hptrs, hscl, NULL),
                     MEMRA_OK);
    assert_memory_equal(dsel, hsel, sizeof dsel);
    assert_memory_equal(dselw, hselw, sizeof dselw);
    assert_memory_equal(dptrs, hptrs, sizeof dptrs);
    assert_memory_equal(dscl, hscl, sizeof dscl);
}

static void test_route_and_tables_share_a_layer(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    CUstream c = make_stream();
    work w;
    work_init(eng, &w, 1.0f, 16);
    upload_inputs(&w, c);
    route_work r;
    route_init(eng, &r, 17);
    assert_int_equal(memra_vrows_prepare_layer(eng, 0, E, &w.mac, c), MEMRA_OK);
    assert_int_equal(memra_route_prepare_layer(eng, 0, &r.spec, &w.mac, c), MEMRA_OK);
    assert_int_equal(memra_sync(eng, c), MEMRA_OK);
    /* Alternating costs no upload and no allocation. */
    const int uploads = mock.calls[MOCK_cuMemcpyHtoDAsync], allocs = mock.live_allocs,
              pinned = mock.live_pinned;
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(memra_vrows_prepare_layer(eng, 0, E, &w.mac, c), MEMRA_OK);
        assert_int_equal(memra_route_prepare_layer(eng, 0, &r.spec, &w.mac, c), MEMRA_OK);
    }
    assert_int_equal(mock.calls[MOCK_cuMemcpyHtoDAsync], uploads);
    assert_int_equal(mock.live_allocs, allocs);
    assert_int_equal(mock.live_pinned, pinned);
    /* Both in one graph. */
    CUgraph g;
    CUgraphExec x;
    assert_int_equal(mock_table.cuStreamBeginCapture(c, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_SUCCESS);
    assert_int_equal(launch(eng, &w, 0, c), MEMRA_OK);
    assert_int_equal(route_launch(eng, &r, &w, 0, c), MEMRA_OK);
    assert_int_equal(mock_table.cuStreamEndCapture(c, &g), CUDA_SUCCESS);
    assert_int_equal(mock_table.cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
    assert_int_equal(mock_table.cuGraphLaunch(x, c), CUDA_SUCCESS);
    expect_tables(&w, (const float(*)[E])w.pl, c);
    expect_route(eng, &r, &w, c);
    /* A new bias, prepared: the graph captured before it replays with it. */
    for (int e = 0; e < E; e++)
        r.bias[e] = (float)((e * 7) % 5) * 0.25f;
    assert_int_equal(memra_route_prepare_layer(eng, 0, &r.spec, &w.mac, c), MEMRA_OK);
    assert_int_equal(mock_table.cuGraphLaunch(x, c), CUDA_SUCCESS);
    expect_tables(&w, (const float(*)[E])w.pl, c);
    expect_route(eng, &r, &w, c);
    mock_table.cuGraphExecDestroy(x), mock_table.cuGraphDestroy(g);
    route_free(eng, &r);
    work_free(eng, &w);
    mock_table.cuStreamDestroy(c);
    memra_engine_destroy(eng);
}

/* Row 6: a graph captured, then new planes prepared on a busy stream: the
 * replay reads them. The graph holds no wait for a later upload (a node per
 * launch would cost every replay), so the prepare finishes its upload
 * before it returns: it waits here until the busy stream has run. */
static void *open_gate_later(void *arg)
{
    usleep(20000);
    atomic_store((_Atomic int *)arg, 1);
    return NULL;
}

static void test_replay_waits_for_a_later_upload(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    CUstream a = make_stream(), c = make_stream();
    work w;
    work_init(eng, &w, 1.0f, 18);
    upload_inputs(&w, c);
    assert_int_equal(memra_vrows_prepare_layer(eng, 1, E, &w.mac, c), MEMRA_OK);
    assert_int_equal(memra_sync(eng, c), MEMRA_OK);
    CUgraph g;
    CUgraphExec x;
    const int waits = mock.calls[MOCK_cuStreamWaitEvent];
    assert_int_equal(mock_table.cuStreamBeginCapture(c, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_SUCCESS);
    assert_int_equal(launch(eng, &w, 1, c), MEMRA_OK);
    assert_int_equal(mock_table.cuStreamEndCapture(c, &g), CUDA_SUCCESS);
    /* The upload was finished: no wait node in the graph. */
    assert_int_equal(mock.calls[MOCK_cuStreamWaitEvent], waits);
    assert_int_equal(mock_table.cuGraphInstantiateWithFlags(&x, g, 0), CUDA_SUCCESS);
    _Atomic int open = 0;
    mock_gate(a, &open);
    for (int k = 0; k < 3; k++)
        for (int e = 0; e < E; e++)
            w.pl[k][e] += 100.0f;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, open_gate_later, &open), 0);
    assert_int_equal(memra_vrows_prepare_layer(eng, 1, E, &w.mac, a), MEMRA_OK);
    assert_true(atomic_load(&open)); /* it returned only once the upload had run */
    pthread_join(t, NULL);
    assert_int_equal(mock_table.cuGraphLaunch(x, c), CUDA_SUCCESS);
    expect_tables(&w, (const float(*)[E])w.pl, c);
    mock_table.cuGraphExecDestroy(x), mock_table.cuGraphDestroy(g);
    work_free(eng, &w);
    mock_table.cuStreamDestroy(a), mock_table.cuStreamDestroy(c);
    memra_engine_destroy(eng);
}

/* Row 7: the upload's stream is destroyed with the upload still queued and
 * its handle goes to a new stream: a launch there still waits. The upload
 * comes from a launch (a prepare call would finish it before returning). */
static void test_reused_stream_handle_still_waits(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    CUstream s = make_stream();
    work w;
    work_init(eng, &w, 1.0f, 19);
    _Atomic int open = 0;
    mock_gate(s, &open);
    upload_inputs(&w, s);
    assert_int_equal(launch(eng, &w, 2, s), MEMRA_OK); /* the layer's upload, queued */
    assert_true(mock_pending(s) > 0);
    assert_int_equal(mock_table.cuStreamDestroy(s), CUDA_SUCCESS);
    CUstream t = make_stream();
    assert_ptr_equal(t, s); /* the driver may hand the handle out again */
    upload_inputs(&w, t);
    assert_int_equal(launch(eng, &w, 2, t), MEMRA_OK);
    atomic_store(&open, 1);
    expect_tables(&w, (const float(*)[E])w.pl, t);
    work_free(eng, &w);
    mock_table.cuStreamDestroy(t);
    memra_engine_destroy(eng);
}

/* Row 8: memra_sync on a capturing stream. */
static void test_sync_on_capturing_stream_keeps_the_capture(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    CUstream c = make_stream();
    assert_int_equal(mock_table.cuStreamBeginCapture(c, CU_STREAM_CAPTURE_MODE_GLOBAL),
                     CUDA_SUCCESS);
    assert_int_equal(memra_sync(eng, c), MEMRA_ERR_CAPTURE);
    assert_non_null(strstr(memra_last_error(), "memra_sync"));
    CUgraph g;
    assert_int_equal(mock_table.cuStreamEndCapture(c, &g), CUDA_SUCCESS);
    mock_table.cuGraphDestroy(g);
    mock_table.cuStreamDestroy(c);
    memra_engine_destroy(eng);
}

/* Row 9: a fault read on a busy stream does not hold up one on an idle
 * stream. */
typedef struct reader {
    memra_engine *eng;
    CUstream s;
    memra_status st;
    memra_faults f;
    _Atomic int done;
} reader;

static void *read_faults(void *arg)
{
    reader *r = arg;
    r->st = memra_engine_faults(r->eng, r->s, &r->f, 1);
    atomic_store(&r->done, 1);
    return NULL;
}

static int wait_done(_Atomic int *done, int ms)
{
    for (int i = 0; i < ms && !atomic_load(done); i++)
        usleep(1000);
    return atomic_load(done);
}

static void test_fault_readers_do_not_wait_for_each_other(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    assert_int_equal(memra_engine_warmup(eng), MEMRA_OK);
    CUstream busy = make_stream(), idle = make_stream();
    _Atomic int open = 0;
    mock_gate(busy, &open);
    reader slow = {eng, busy, MEMRA_OK, {0, 0, 0, 0, 0}, 0},
           fast = {eng, idle, MEMRA_OK, {0, 0, 0, 0, 0}, 0};
    pthread_t t1, t2;
    assert_int_equal(pthread_create(&t1, NULL, read_faults, &slow), 0);
    usleep(20000); /* the slow reader is inside its wait */
    assert_int_equal(pthread_create(&t2, NULL, read_faults, &fast), 0);
    const int fast_done = wait_done(&fast.done, 5000);
    const int slow_done_early = atomic_load(&slow.done);
    atomic_store(&open, 1);
    pthread_join(t1, NULL), pthread_join(t2, NULL);
    assert_true(fast_done);
    assert_false(slow_done_early);
    assert_int_equal(fast.st, MEMRA_OK);
    assert_int_equal(slow.st, MEMRA_OK);
    assert_int_equal(fast.f.first_pair, MEMRA_NO_FAULT);
    mock_table.cuStreamDestroy(busy), mock_table.cuStreamDestroy(idle);
    memra_engine_destroy(eng);
}

/* Row 10: planes B uploaded on a busy stream (by a launch there), then C
 * prepared on an idle one: C lands after B, the prepare returns once it
 * has, and C is what the layer holds, as memra believes. */
static void test_uploads_land_in_issue_order(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    CUstream a = make_stream(), b = make_stream();
    work w, wb;
    work_init(eng, &w, 1.0f, 20);
    work_init(eng, &wb, 1.0f, 20);
    _Atomic int open = 0;
    mock_gate(a, &open);
    float planes_b[3][E];
    for (int k = 0; k < 3; k++)
        for (int e = 0; e < E; e++)
            planes_b[k][e] = w.pl[k][e] + 50.0f;
    memra_vrows_macros mac_b = {{planes_b[0], planes_b[1], planes_b[2]}};
    upload_inputs(&wb, a);
    assert_int_equal(
        memra_vrows_tables(eng, wb.dsel, wb.dselw, N, E, 3, &mac_b, &wb.sl, wb.dptrs, wb.dscl, a),
        MEMRA_OK); /* B's upload, queued behind the gate */
    pthread_t opener;
    assert_int_equal(pthread_create(&opener, NULL, open_gate_later, &open), 0);
    assert_int_equal(memra_vrows_prepare_layer(eng, 3, E, &w.mac, b), MEMRA_OK); /* C */
    assert_true(atomic_load(&open)); /* C's upload waited for B's */
    pthread_join(opener, NULL);
    upload_inputs(&w, b);
    assert_int_equal(launch(eng, &w, 3, b), MEMRA_OK);
    expect_tables(&w, (const float(*)[E])w.pl, b);
    mock_drain();
    /* Both uploads have run: a later launch on any stream still reads C. */
    CUstream c = make_stream();
    upload_inputs(&w, c);
    assert_int_equal(launch(eng, &w, 3, c), MEMRA_OK);
    expect_tables(&w, (const float(*)[E])w.pl, c);
    work_free(eng, &w), work_free(eng, &wb);
    mock_table.cuStreamDestroy(a), mock_table.cuStreamDestroy(b), mock_table.cuStreamDestroy(c);
    memra_engine_destroy(eng);
}

/* Memory stays flat under 10,000 alternations of contents (uploads still in
 * flight), of shapes (n_expert) and of kinds on one layer, with the device
 * making progress now and then as a real one does. */
static void test_memory_flat_under_alternation(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    CUstream a = make_stream();
    work w;
    work_init(eng, &w, 1.0f, 21);
    route_work r;
    route_init(eng, &r, 22);
    float other[3][E];
    for (int k = 0; k < 3; k++)
        for (int e = 0; e < E; e++)
            other[k][e] = w.pl[k][e] * 2.0f;
    const memra_vrows_macros mac2 = {{other[0], other[1], other[2]}};
    /* The most held in the first thousand steps bounds every later step. */
    int allocs = 0, pinned = 0;
    for (int i = 0; i < 10000; i++) {
        const memra_vrows_macros *m = (i & 1) ? &mac2 : &w.mac;
        const uint32_t n_expert = (i % 3 == 0) ? E : E / 2;
        assert_int_equal(memra_vrows_prepare_layer(eng, 4, n_expert, m, a), MEMRA_OK);
        assert_int_equal(memra_route_prepare_layer(eng, 4, &r.spec, m, a), MEMRA_OK);
        if (i % 16 == 15)
            assert_int_equal(memra_sync(eng, a), MEMRA_OK);
        if (i < 1000) {
            allocs = mock.live_allocs > allocs ? mock.live_allocs : allocs;
            pinned = mock.live_pinned > pinned ? mock.live_pinned : pinned;
        } else if (mock.live_allocs > allocs || mock.live_pinned > pinned) {
            fail_msg("step %d holds %d device and %d pinned buffers, more than the %d and %d of "
                     "the first 1000 steps",
                     i, mock.live_allocs, mock.live_pinned, allocs, pinned);
        }
    }
    route_free(eng, &r);
    work_free(eng, &w);
    mock_table.cuStreamDestroy(a);
    memra_engine_destroy(eng);
}

/* Planes that change on every step while the device keeps up: two host
 * shadows take turns, nothing is allocated or freed after the first steps
 * (a pinned free would wait for the whole device). */
static void test_changing_planes_allocate_nothing(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    CUstream a = make_stream();
    work w;
    work_init(eng, &w, 1.0f, 23);
    int pinned_allocs = 0, frees = 0;
    for (int i = 0; i < 200; i++) {
        w.pl[0][0] = (float)i;
        assert_int_equal(memra_vrows_prepare_layer(eng, 5, E, &w.mac, a), MEMRA_OK);
        if (i % 2)
            assert_int_equal(memra_sync(eng, a), MEMRA_OK);
        if (i == 10)
            pinned_allocs = mock.calls[MOCK_cuMemAllocHost], frees = mock.calls[MOCK_cuMemFreeHost];
    }
    assert_int_equal(mock.calls[MOCK_cuMemAllocHost], pinned_allocs);
    assert_int_equal(mock.calls[MOCK_cuMemFreeHost], frees);
    work_free(eng, &w);
    mock_table.cuStreamDestroy(a);
    memra_engine_destroy(eng);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, mock_setup, mock_teardown)
    const struct CMUnitTest tests[] = {
        T(test_sync_download_after_legacy_launch),
        T(test_sync_upload_after_legacy_launch),
        T(test_sync_download_after_blocking_stream_launch),
        T(test_on_forms_follow_their_stream),
        T(test_sync_calls_refused_under_capture),
        T(test_route_and_tables_share_a_layer),
        T(test_replay_waits_for_a_later_upload),
        T(test_reused_stream_handle_still_waits),
        T(test_sync_on_capturing_stream_keeps_the_capture),
        T(test_fault_readers_do_not_wait_for_each_other),
        T(test_uploads_land_in_issue_order),
        T(test_memory_flat_under_alternation),
        T(test_changing_planes_allocate_nothing),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
