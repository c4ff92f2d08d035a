/* Streams, capture and contexts on a real GPU: what the mock suite shows in
 * CI, shown where it happens. A kernel that spins for tens of milliseconds
 * before it writes makes every missing order visible. Exits 77 (skipped)
 * where no CUDA device exists. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "gpu_fixture.h"

#include "device_case.h"
#include "engine/engine.h"
#include "vrows/gate_cases.h"
#include "jit/jit.h"

static memra_engine *eng;
static const memra_driver *drv;
static CUmodule spin_mod;
static CUfunction spin_fn;
static long long spin_cycles;

static const char spin_src[] =
    "extern \"C\" __global__ void memra_test_spin_copy(const int *src, int *dst, int n,\n"
    "                                                  long long cycles)\n"
    "{\n"
    "    const long long t0 = clock64();\n"
    "    while (clock64() - t0 < cycles) {}\n"
    "    for (int i = threadIdx.x; dst && i < n; i += blockDim.x)\n"
    "        dst[i] = src[i];\n"
    "}\n";

#define CU(x) assert_int_equal((x), CUDA_SUCCESS)

/* Spins for about 50 ms on `s`, then copies n ints (dst NULL: only spins). */
static void spin_copy(CUstream s, memra_devptr src, memra_devptr dst, int n)
{
    void *args[] = {&src, &dst, &n, &spin_cycles};
    CU(drv->cuLaunchKernel(spin_fn, 1, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

static int group_setup(void **state)
{
    (void)state;
    if (gpu_engine_open(&eng, &drv))
        return -1;
    memra_engine_info info;
    memra_engine_get_info(eng, &info);
    memra_image img;
    if (memra_engine_warmup(eng) || !eng->nvrtc ||
        memra_jit_compile_src(eng->nvrtc, spin_src, "spin.cu", info.sm, 0, NULL, &img)) {
        fprintf(stderr, "spin kernel: %s\n", memra_last_error());
        return -1;
    }
    CU(drv->cuModuleLoadData(&spin_mod, img.data));
    memra_image_free(&img);
    CU(drv->cuModuleGetFunction(&spin_fn, spin_mod, "memra_test_spin_copy"));
    int khz = 0;
    drv->cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, eng->cx.dev);
    spin_cycles = (long long)(khz > 0 ? khz : 2000000) * 50; /* 50 ms */
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (spin_mod)
        drv->cuModuleUnload(spin_mod);
    gpu_engine_close(eng, drv);
    return 0;
}

enum { N = 8192, E = 256 };

typedef struct work {
    int32_t sel[N];
    float selw[N], pl[3 * E];
    memra_vrows_macros mac;
    memra_devptr src, dsel, dselw, dptrs, dscl;
} work;

static work *work_new(uint64_t seed, float base)
{
    work *w = calloc(1, sizeof *w);
    for (int p = 0; p < N; p++) {
        w->sel[p] = (int32_t)(rng_next(&seed) % E);
        w->selw[p] = 0.5f + (float)(p % 13);
    }
    for (int e = 0; e < 3 * E; e++)
        w->pl[e] = base + (float)e / 256.0f;
    w->mac = (memra_vrows_macros){{w->pl, w->pl + E, w->pl + 2 * E}};
    assert_int_equal(memra_alloc(eng, N * 4, &w->src), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, N * 4, &w->dsel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, N * 4, &w->dselw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * N * 8, &w->dptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * N * 4, &w->dscl), MEMRA_OK);
    assert_int_equal(memra_upload_i32(eng, w->src, w->sel, N), MEMRA_OK);
    assert_int_equal(memra_upload_f32(eng, w->dselw, w->selw, N), MEMRA_OK);
    /* sel starts as zeros: a launch that runs early builds expert 0's rows. */
    const int32_t zero[N] = {0};
    assert_int_equal(memra_upload_i32(eng, w->dsel, zero, N), MEMRA_OK);
    return w;
}

static void work_free(work *w)
{
    memra_free(eng, w->src), memra_free(eng, w->dsel), memra_free(eng, w->dselw);
    memra_free(eng, w->dptrs), memra_free(eng, w->dscl);
    free(w);
}

static memra_status launch(work *w, int il, CUstream s)
{
    return memra_vrows_tables(eng, w->dsel, w->dselw, N, E, il, &w->mac, &gate_cases[1].slabs,
                              w->dptrs, w->dscl, s);
}

/* Reads the tables on `s` and compares them bit for bit with the host arm;
 * returns the number of differing entries. */
static size_t mismatches(work *w, CUstream s)
{
    static uint64_t dp[3 * N], hp[3 * N];
    static float ds[3 * N], hs[3 * N];
    CU(drv->cuMemcpyDtoHAsync(dp, w->dptrs, sizeof dp, s));
    CU(drv->cuMemcpyDtoHAsync(ds, w->dscl, sizeof ds, s));
    CU(drv->cuStreamSynchronize(s));
    memra_vrows_tables_host(w->sel, w->selw, N, E, &w->mac, &gate_cases[1].slabs, hp, hs, NULL);
    size_t bad = 0;
    for (size_t i = 0; i < 3 * N; i++)
        bad += dp[i] != hp[i] || memcmp(&ds[i], &hs[i], 4) != 0;
    return bad;
}

/* 1. The router writes sel on stream 0 (slowly), memra builds on NULL, the
 *    consumer reads on stream 0: one order. */
static void test_null_is_the_legacy_stream(void **state)
{
    (void)state;
    work *w = work_new(1, 1.0f);
    assert_int_equal(memra_vrows_prepare_layer(eng, 0, E, &w->mac, NULL), MEMRA_OK);
    CU(drv->cuStreamSynchronize(NULL));
    spin_copy(NULL, w->src, w->dsel, N);
    assert_int_equal(launch(w, 0, NULL), MEMRA_OK);
    size_t bad = mismatches(w, NULL);
    if (bad)
        fail_msg("%zu of %d table entries built before the router's sel landed", bad, 6 * N);
    work_free(w);
}

/* 2. Planes uploaded on a stream held up by 50 ms of work; the launch on
 *    another stream must wait for them: a new layer, then changed planes. */
static void test_upload_ordered_for_other_streams(void **state)
{
    (void)state;
    memra_stream own;
    assert_int_equal(memra_engine_stream(eng, &own), MEMRA_OK);
    CUstream b;
    CU(drv->cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    work *w = work_new(2, 2.0f);
    CU(drv->cuMemcpyDtoDAsync(w->dsel, w->src, N * 4, b));
    CU(drv->cuStreamSynchronize(b));
    spin_copy(own, 0, 0, 0);
    assert_int_equal(memra_vrows_prepare_layer(eng, 21, E, &w->mac, own), MEMRA_OK);
    assert_int_equal(launch(w, 21, b), MEMRA_OK);
    size_t bad = mismatches(w, b);
    if (bad)
        fail_msg("new layer: %zu of %d entries read planes before their upload", bad, 6 * N);
    for (int e = 0; e < 3 * E; e++)
        w->pl[e] = -1.0f - (float)e / 128.0f;
    spin_copy(own, 0, 0, 0);
    assert_int_equal(memra_vrows_prepare_layer(eng, 21, E, &w->mac, own), MEMRA_OK);
    assert_int_equal(launch(w, 21, b), MEMRA_OK);
    bad = mismatches(w, b);
    if (bad)
        fail_msg("changed planes: %zu of %d entries read the old planes", bad, 6 * N);
    CU(drv->cuStreamSynchronize(own));
    CU(drv->cuStreamDestroy(b));
    work_free(w);
}

/* 3. Another thread captures in global mode (torch.cuda.graph's default)
 *    while memra allocates, uploads, reads faults, syncs and copies. */
typedef struct capturer {
    CUstream s;
    pthread_barrier_t *began, *done;
    CUresult end, inst;
} capturer;

static void *capture_thread(void *arg)
{
    capturer *c = arg;
    drv->cuCtxPushCurrent(eng->cx.ctx);
    c->end = drv->cuStreamBeginCapture(c->s, CU_STREAM_CAPTURE_MODE_GLOBAL);
    spin_copy(c->s, 0, 0, 0);
    pthread_barrier_wait(c->began);
    pthread_barrier_wait(c->done);
    CUgraph g = NULL;
    if (c->end == CUDA_SUCCESS)
        c->end = drv->cuStreamEndCapture(c->s, &g);
    if (g) {
        CUgraphExec x;
        c->inst = drv->cuGraphInstantiateWithFlags(&x, g, 0);
        if (c->inst == CUDA_SUCCESS)
            drv->cuGraphExecDestroy(x);
        drv->cuGraphDestroy(g);
    }
    CUcontext ctx;
    drv->cuCtxPopCurrent(&ctx);
    return NULL;
}

static void test_other_threads_capture_survives(void **state)
{
    (void)state;
    work *w = work_new(3, 3.0f);
    CUstream cs, d;
    CU(drv->cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
    CU(drv->cuStreamCreate(&d, CU_STREAM_NON_BLOCKING));
    pthread_barrier_t began, done;
    pthread_barrier_init(&began, NULL, 2);
    pthread_barrier_init(&done, NULL, 2);
    capturer c = {cs, &began, &done, CUDA_ERROR_UNKNOWN, CUDA_ERROR_UNKNOWN};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, capture_thread, &c), 0);
    pthread_barrier_wait(&began);
    memra_status st[6];
    st[0] = memra_vrows_prepare_layer(eng, 33, E, &w->mac, d); /* cuMemAlloc, first upload */
    memra_faults f;
    st[1] = memra_engine_faults(eng, d, &f, 1);
    st[2] = memra_sync(eng, d);
    st[3] = memra_upload(eng, w->dselw, w->selw, sizeof w->selw);
    memra_devptr extra = 0;
    st[4] = memra_alloc(eng, 1 << 20, &extra);
    st[5] = extra ? memra_free(eng, extra) : MEMRA_OK;
    pthread_barrier_wait(&done);
    pthread_join(t, NULL);
    for (int i = 0; i < 6; i++)
        if (st[i])
            fail_msg("call %d under another thread's capture: %s", i, memra_last_error());
    if (c.end != CUDA_SUCCESS)
        fail_msg("the other thread's capture was broken: cuStreamEndCapture = %d", (int)c.end);
    assert_int_equal(c.inst, CUDA_SUCCESS);
    pthread_barrier_destroy(&began), pthread_barrier_destroy(&done);
    CU(drv->cuStreamDestroy(cs));
    CU(drv->cuStreamDestroy(d));
    work_free(w);
}

/* ---- the ordering contract, row by row (docs/streams.md) ------------------- */

/* The tables read with the synchronous helpers (no stream, ordered like
 * cuMemcpy) against the host arm for `sel`: the entries that differ. */
static size_t mismatches_sync(work *w, const int32_t *sel)
{
    static uint64_t dp[3 * N], hp[3 * N];
    static float ds[3 * N], hs[3 * N];
    assert_int_equal(memra_download_u64(eng, dp, w->dptrs, 3 * N), MEMRA_OK);
    assert_int_equal(memra_download(eng, ds, w->dscl, sizeof ds), MEMRA_OK);
    memra_vrows_tables_host(sel, w->selw, N, E, &w->mac, &gate_cases[1].slabs, hp, hs, NULL);
    size_t bad = 0;
    for (size_t i = 0; i < 3 * N; i++)
        bad += dp[i] != hp[i] || memcmp(&ds[i], &hs[i], 4) != 0;
    return bad;
}

/* Row 1: a launch on the legacy stream behind a slow router, then a
 * synchronous download. */
static void test_row1_sync_download_after_legacy_launch(void **state)
{
    (void)state;
    work *w = work_new(11, 1.5f);
    assert_int_equal(memra_vrows_prepare_layer(eng, 101, E, &w->mac, NULL), MEMRA_OK);
    spin_copy(NULL, w->src, w->dsel, N);
    assert_int_equal(launch(w, 101, NULL), MEMRA_OK);
    const size_t bad = mismatches_sync(w, w->sel);
    if (bad)
        fail_msg("%zu of %d entries read before the launch finished", bad, 6 * N);
    work_free(w);
}

/* Row 2: a launch on the legacy stream reading sel, still queued, then a
 * synchronous upload of a new sel: the launch reads the old one. */
static void test_row2_sync_upload_after_legacy_launch(void **state)
{
    (void)state;
    work *w = work_new(12, 2.5f);
    assert_int_equal(memra_upload_i32(eng, w->dsel, w->sel, N), MEMRA_OK);
    assert_int_equal(memra_vrows_prepare_layer(eng, 102, E, &w->mac, NULL), MEMRA_OK);
    spin_copy(NULL, 0, 0, 0);
    assert_int_equal(launch(w, 102, NULL), MEMRA_OK);
    static int32_t old_sel[N], new_sel[N];
    memcpy(old_sel, w->sel, sizeof old_sel);
    for (int p = 0; p < N; p++)
        new_sel[p] = (w->sel[p] + 7) % E;
    assert_int_equal(memra_upload_i32(eng, w->dsel, new_sel, N), MEMRA_OK);
    const size_t bad = mismatches_sync(w, old_sel);
    if (bad)
        fail_msg("%zu of %d entries built from the sel uploaded after the launch", bad, 6 * N);
    work_free(w);
}

/* Row 3: a launch on a blocking stream, then a synchronous download. */
static void test_row3_sync_download_after_blocking_stream(void **state)
{
    (void)state;
    CUstream b;
    CU(drv->cuStreamCreate(&b, CU_STREAM_DEFAULT));
    work *w = work_new(13, 3.5f);
    assert_int_equal(memra_vrows_prepare_layer(eng, 103, E, &w->mac, b), MEMRA_OK);
    spin_copy(b, w->src, w->dsel, N);
    assert_int_equal(launch(w, 103, b), MEMRA_OK);
    const size_t bad = mismatches_sync(w, w->sel);
    if (bad)
        fail_msg("%zu of %d entries read before the blocking stream's launch", bad, 6 * N);
    CU(drv->cuStreamDestroy(b));
    work_free(w);
}

/* Row 4: the self-check while another thread captures a blocking stream. */
static void test_row4_self_check_beside_blocking_capture(void **state)
{
    (void)state;
    CUstream bs;
    CU(drv->cuStreamCreate(&bs, CU_STREAM_DEFAULT));
    pthread_barrier_t began, done;
    pthread_barrier_init(&began, NULL, 2);
    pthread_barrier_init(&done, NULL, 2);
    capturer c = {bs, &began, &done, CUDA_ERROR_UNKNOWN, CUDA_ERROR_UNKNOWN};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, capture_thread, &c), 0);
    pthread_barrier_wait(&began);
    memra_self_check_report rep;
    const memra_status st = memra_engine_self_check(eng, &rep);
    const char *why = memra_last_error();
    pthread_barrier_wait(&done);
    pthread_join(t, NULL);
    pthread_barrier_destroy(&began), pthread_barrier_destroy(&done);
    if (st)
        fail_msg("self check beside a blocking capture: %s", why);
    if (c.end != CUDA_SUCCESS)
        fail_msg("the other thread's capture was broken: cuStreamEndCapture = %d", (int)c.end);
    CU(drv->cuStreamDestroy(bs));
}

/* Row 5: routing (with a bias) and the table kernel on one layer: both
 * prepared, captured in one graph, alternated without uploads, and a graph
 * captured earlier replays with a new bias. */
enum { RT = 64, RK = 8, RE = 256 };
static void test_row5_route_and_tables_share_a_layer(void **state)
{
    (void)state;
    CUstream c;
    CU(drv->cuStreamCreate(&c, CU_STREAM_NON_BLOCKING));
    work *w = work_new(15, 5.5f);
    assert_int_equal(memra_upload_i32(eng, w->dsel, w->sel, N), MEMRA_OK);
    static float logits[RT * RE], bias[RE];
    uint64_t seed = 55;
    for (int i = 0; i < RT * RE; i++)
        logits[i] = (float)(rng_next(&seed) % 4096) / 512.0f - 4.0f;
    for (int e = 0; e < RE; e++)
        bias[e] = (float)(e % 7) * 0.0625f;
    memra_route_spec spec = {.n_expert = RE,
                             .top_k = RK,
                             .n_group = 8,
                             .topk_group = 4,
                             .scoring = MEMRA_ROUTE_SIGMOID,
                             .logits_dtype = MEMRA_LOGITS_F32,
                             .renormalize = 1,
                             .routed_scaling_factor = 2.5f,
                             .bias = bias};
    memra_devptr dl, rsel, rselw, rptrs, rscl;
    assert_int_equal(memra_alloc(eng, sizeof logits, &dl), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, RT * RK * 4, &rsel), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, RT * RK * 4, &rselw), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * RT * RK * 8, &rptrs), MEMRA_OK);
    assert_int_equal(memra_alloc(eng, 3 * RT * RK * 4, &rscl), MEMRA_OK);
    assert_int_equal(memra_upload(eng, dl, logits, sizeof logits), MEMRA_OK);
    const int il = 105;
    assert_int_equal(memra_vrows_prepare_layer(eng, il, E, &w->mac, c), MEMRA_OK);
    assert_int_equal(memra_route_prepare_layer(eng, il, &spec, &w->mac, c), MEMRA_OK);
    assert_int_equal(memra_sync(eng, c), MEMRA_OK);
    const CUdeviceptr vdev = eng->mirror.slots[MEMRA_MIRROR_VROWS][il]->dev,
                      rdev = eng->mirror.slots[MEMRA_MIRROR_ROUTE][il]->dev;
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(launch(w, il, c), MEMRA_OK);
        assert_int_equal(memra_route_tables(eng, dl, RT, &spec, il, &w->mac, &gate_cases[1].slabs,
                                            rsel, rselw, rptrs, rscl, c),
                         MEMRA_OK);
    }
    assert_int_equal(memra_sync(eng, c), MEMRA_OK);
    assert_true(eng->mirror.slots[MEMRA_MIRROR_VROWS][il]->dev == vdev);
    assert_true(eng->mirror.slots[MEMRA_MIRROR_ROUTE][il]->dev == rdev);
    assert_int_equal(eng->mirror.slots[MEMRA_MIRROR_VROWS][il]->version, 1);
    assert_int_equal(eng->mirror.slots[MEMRA_MIRROR_ROUTE][il]->version, 1);
    CUgraph g;
    CUgraphExec x;
    CU(drv->cuStreamBeginCapture(c, CU_STREAM_CAPTURE_MODE_GLOBAL));
    assert_int_equal(launch(w, il, c), MEMRA_OK);
    assert_int_equal(memra_route_tables(eng, dl, RT, &spec, il, &w->mac, &gate_cases[1].slabs, rsel,
                                        rselw, rptrs, rscl, c),
                     MEMRA_OK);
    CU(drv->cuStreamEndCapture(c, &g));
    CU(drv->cuGraphInstantiateWithFlags(&x, g, 0));
    for (int round = 0; round < 2; round++) {
        if (round == 1) { /* a new bias, prepared behind 50 ms of work */
            for (int e = 0; e < RE; e++)
                bias[e] = (float)((e * 5) % 11) * 0.03125f;
            spin_copy(c, 0, 0, 0);
            assert_int_equal(memra_route_prepare_layer(eng, il, &spec, &w->mac, c), MEMRA_OK);
        }
        CU(drv->cuGraphLaunch(x, c));
        static int32_t dsel[RT * RK], hsel[RT * RK];
        static float dselw[RT * RK], hselw[RT * RK], dscl[3 * RT * RK], hscl[3 * RT * RK];
        static uint64_t dptrs[3 * RT * RK], hptrs[3 * RT * RK];
        assert_int_equal(memra_download_i32_on(eng, dsel, rsel, RT * RK, c), MEMRA_OK);
        assert_int_equal(memra_download_f32_on(eng, dselw, rselw, RT * RK, c), MEMRA_OK);
        assert_int_equal(memra_download_u64_on(eng, dptrs, rptrs, 3 * RT * RK, c), MEMRA_OK);
        assert_int_equal(memra_download_f32_on(eng, dscl, rscl, 3 * RT * RK, c), MEMRA_OK);
        memra_route_tables_host(logits, RT, &spec, &w->mac, &gate_cases[1].slabs, hsel, hselw,
                                hptrs, hscl, NULL);
        size_t bad = 0;
        for (int p = 0; p < RT * RK; p++)
            bad += dsel[p] != hsel[p] || memcmp(&dselw[p], &hselw[p], 4) != 0;
        bad += memcmp(dptrs, hptrs, sizeof dptrs) != 0 || memcmp(dscl, hscl, sizeof dscl) != 0;
        if (bad)
            fail_msg("replay %d: %zu routing pairs differ from the host arm%s", round, bad,
                     round ? " (the graph read the old bias)" : "");
        const size_t tb = mismatches(w, c);
        if (tb)
            fail_msg("replay %d: %zu table entries differ", round, tb);
    }
    CU(drv->cuGraphExecDestroy(x));
    CU(drv->cuGraphDestroy(g));
    memra_free(eng, dl), memra_free(eng, rsel), memra_free(eng, rselw);
    memra_free(eng, rptrs), memra_free(eng, rscl);
    CU(drv->cuStreamDestroy(c));
    work_free(w);
}

/* Row 6: a graph captured, then new planes prepared on a busy stream, then
 * a replay on another stream: the replay waits for the upload. */
static void test_row6_replay_waits_for_a_later_upload(void **state)
{
    (void)state;
    CUstream a, c;
    CU(drv->cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    CU(drv->cuStreamCreate(&c, CU_STREAM_NON_BLOCKING));
    work *w = work_new(16, 6.5f);
    assert_int_equal(memra_upload_i32(eng, w->dsel, w->sel, N), MEMRA_OK);
    assert_int_equal(memra_vrows_prepare_layer(eng, 106, E, &w->mac, c), MEMRA_OK);
    assert_int_equal(memra_sync(eng, c), MEMRA_OK);
    CUgraph g;
    CUgraphExec x;
    CU(drv->cuStreamBeginCapture(c, CU_STREAM_CAPTURE_MODE_GLOBAL));
    assert_int_equal(launch(w, 106, c), MEMRA_OK);
    CU(drv->cuStreamEndCapture(c, &g));
    CU(drv->cuGraphInstantiateWithFlags(&x, g, 0));
    for (int e = 0; e < 3 * E; e++)
        w->pl[e] = -2.0f - (float)e / 64.0f;
    spin_copy(a, 0, 0, 0);
    assert_int_equal(memra_vrows_prepare_layer(eng, 106, E, &w->mac, a), MEMRA_OK);
    CU(drv->cuGraphLaunch(x, c));
    const size_t bad = mismatches(w, c);
    if (bad)
        fail_msg("%zu of %d entries: the replay read the planes before their upload", bad, 6 * N);
    CU(drv->cuGraphExecDestroy(x));
    CU(drv->cuGraphDestroy(g));
    CU(drv->cuStreamSynchronize(a));
    CU(drv->cuStreamDestroy(a));
    CU(drv->cuStreamDestroy(c));
    work_free(w);
}

/* Row 7: the upload's stream destroyed with the upload queued; a new stream
 * (the driver may give it the same handle) launches: it waits. */
static void test_row7_new_stream_after_destroy_waits(void **state)
{
    (void)state;
    work *w = work_new(17, 7.5f);
    assert_int_equal(memra_upload_i32(eng, w->dsel, w->sel, N), MEMRA_OK);
    int reused = 0;
    for (int round = 0; round < 4; round++) {
        CUstream s, t;
        CU(drv->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        for (int e = 0; e < 3 * E; e++)
            w->pl[e] = (float)round + (float)e / 32.0f;
        spin_copy(s, 0, 0, 0);
        assert_int_equal(memra_vrows_prepare_layer(eng, 107, E, &w->mac, s), MEMRA_OK);
        CU(drv->cuStreamDestroy(s));
        CU(drv->cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
        reused += t == s;
        assert_int_equal(launch(w, 107, t), MEMRA_OK);
        const size_t bad = mismatches(w, t);
        if (bad)
            fail_msg("round %d (%s handle): %zu of %d entries read before the upload", round,
                     t == s ? "the same" : "another", bad, 6 * N);
        CU(drv->cuStreamDestroy(t));
    }
    printf("row 7: the driver handed the destroyed stream's handle out again %d of 4 times\n",
           reused);
    work_free(w);
}

/* Row 8: memra_sync on a capturing stream. */
static void test_row8_sync_on_capturing_stream(void **state)
{
    (void)state;
    CUstream c;
    CU(drv->cuStreamCreate(&c, CU_STREAM_NON_BLOCKING));
    CU(drv->cuStreamBeginCapture(c, CU_STREAM_CAPTURE_MODE_GLOBAL));
    spin_copy(c, 0, 0, 0);
    assert_int_equal(memra_sync(eng, c), MEMRA_ERR_CAPTURE);
    CUgraph g;
    CU(drv->cuStreamEndCapture(c, &g));
    CU(drv->cuGraphDestroy(g));
    CU(drv->cuStreamDestroy(c));
}

/* Row 9: a fault read on a stream busy for about 500 ms does not hold up a
 * read on an idle stream. */
typedef struct reader {
    CUstream s;
    memra_status st;
    double ms;
} reader;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void *read_faults(void *arg)
{
    reader *r = arg;
    drv->cuCtxPushCurrent(eng->cx.ctx);
    memra_faults f;
    const double t0 = now_ms();
    r->st = memra_engine_faults(eng, r->s, &f, 1);
    r->ms = now_ms() - t0;
    CUcontext ctx;
    drv->cuCtxPopCurrent(&ctx);
    return NULL;
}

static void test_row9_fault_readers_do_not_wait_for_each_other(void **state)
{
    (void)state;
    CUstream busy, idle;
    CU(drv->cuStreamCreate(&busy, CU_STREAM_NON_BLOCKING));
    CU(drv->cuStreamCreate(&idle, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 10; i++)
        spin_copy(busy, 0, 0, 0);
    reader slow = {busy, MEMRA_OK, 0}, fast = {idle, MEMRA_OK, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, read_faults, &slow), 0);
    usleep(50000);
    read_faults(&fast);
    pthread_join(t, NULL);
    printf("row 9: fault read on the busy stream %.1f ms, on the idle stream %.1f ms\n", slow.ms,
           fast.ms);
    assert_int_equal(slow.st, MEMRA_OK);
    assert_int_equal(fast.st, MEMRA_OK);
    if (fast.ms > 100.0)
        fail_msg("the idle stream's read waited %.1f ms behind the busy one", fast.ms);
    CU(drv->cuStreamDestroy(busy));
    CU(drv->cuStreamDestroy(idle));
}

/* Row 10: planes B on a busy stream, then C on an idle one: C is what the
 * layer holds, now and after both have run. */
static void test_row10_uploads_land_in_issue_order(void **state)
{
    (void)state;
    CUstream a, b, c;
    CU(drv->cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    CU(drv->cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    CU(drv->cuStreamCreate(&c, CU_STREAM_NON_BLOCKING));
    work *w = work_new(20, 10.5f);
    assert_int_equal(memra_upload_i32(eng, w->dsel, w->sel, N), MEMRA_OK);
    static float planes_b[3 * E];
    for (int e = 0; e < 3 * E; e++)
        planes_b[e] = w->pl[e] + 1000.0f;
    memra_vrows_macros mac_b = {{planes_b, planes_b + E, planes_b + 2 * E}};
    spin_copy(a, 0, 0, 0);
    assert_int_equal(memra_vrows_prepare_layer(eng, 110, E, &mac_b, a), MEMRA_OK);
    assert_int_equal(memra_vrows_prepare_layer(eng, 110, E, &w->mac, b), MEMRA_OK);
    assert_int_equal(launch(w, 110, b), MEMRA_OK);
    size_t bad = mismatches(w, b);
    CU(drv->cuStreamSynchronize(a));
    assert_int_equal(launch(w, 110, c), MEMRA_OK);
    bad += mismatches(w, c);
    if (bad)
        fail_msg("%zu entries read planes B after C was prepared", bad);
    CU(drv->cuStreamDestroy(a));
    CU(drv->cuStreamDestroy(b));
    CU(drv->cuStreamDestroy(c));
    work_free(w);
}

/* 4. The application resets the primary context: the engine says so and
 *    touches none of its stale handles; a new engine works. Runs last. */
static void test_context_reset_is_noticed(void **state)
{
    (void)state;
    if (!drv->cuDevicePrimaryCtxReset || !drv->cuCtxGetId)
        skip();
    memra_engine *old;
    assert_int_equal(memra_engine_create(0, &old), MEMRA_OK);
    char why[512];
    if (gate_case_check(old, 1, why, sizeof why))
        fail_msg("before the reset: %s", why);
    CU(drv->cuDevicePrimaryCtxReset(eng->cx.dev));
    /* The application carries on: its next allocation may land where the
     * engine's fault word was. */
    CUcontext ctx;
    CU(drv->cuDevicePrimaryCtxRetain(&ctx, eng->cx.dev));
    CU(drv->cuCtxPushCurrent(ctx));
    CUdeviceptr app;
    CU(drv->cuMemAlloc(&app, 4096));
    const uint32_t pattern[4] = {0xA5A5A5A5u, 0xA5A5A5A5u, 0xA5A5A5A5u, 0xA5A5A5A5u};
    CU(drv->cuMemcpyHtoDAsync(app, pattern, sizeof pattern, NULL));
    CU(drv->cuStreamSynchronize(NULL));
    memra_faults f;
    assert_int_equal(memra_engine_faults(old, NULL, &f, 1), MEMRA_ERR_CONTEXT_RESET);
    assert_int_equal(gate_case_check(old, 1, why, sizeof why), -(int)MEMRA_ERR_CONTEXT_RESET);
    assert_non_null(strstr(why, "reset"));
    memra_engine_destroy(old);
    uint32_t back[4];
    CU(drv->cuMemcpyDtoHAsync(back, app, sizeof back, NULL));
    CU(drv->cuStreamSynchronize(NULL));
    assert_memory_equal(back, pattern, sizeof back); /* the app's buffer is untouched */
    CU(drv->cuMemFree(app));
    memra_engine *fresh;
    assert_int_equal(memra_engine_create(0, &fresh), MEMRA_OK);
    if (gate_case_check(fresh, 1, why, sizeof why))
        fail_msg("a new engine after the reset: %s", why);
    memra_engine_destroy(fresh);
    CU(drv->cuCtxPopCurrent(&ctx));
    drv->cuDevicePrimaryCtxRelease(eng->cx.dev);
    /* The group's engine went with the context too. */
    assert_int_equal(memra_engine_warmup(eng), MEMRA_ERR_CONTEXT_RESET);
    spin_mod = NULL;
}

int main(void)
{
    if (gpu_absent())
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_is_the_legacy_stream),
        cmocka_unit_test(test_upload_ordered_for_other_streams),
        cmocka_unit_test(test_other_threads_capture_survives),
        cmocka_unit_test(test_row1_sync_download_after_legacy_launch),
        cmocka_unit_test(test_row2_sync_upload_after_legacy_launch),
        cmocka_unit_test(test_row3_sync_download_after_blocking_stream),
        cmocka_unit_test(test_row4_self_check_beside_blocking_capture),
        cmocka_unit_test(test_row5_route_and_tables_share_a_layer),
        cmocka_unit_test(test_row6_replay_waits_for_a_later_upload),
        cmocka_unit_test(test_row7_new_stream_after_destroy_waits),
        cmocka_unit_test(test_row8_sync_on_capturing_stream),
        cmocka_unit_test(test_row9_fault_readers_do_not_wait_for_each_other),
        cmocka_unit_test(test_row10_uploads_land_in_issue_order),
        cmocka_unit_test(test_context_reset_is_noticed),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
