/* The table kernel beside its bare baselines: host cost per launch, launch
 * and sync round trips, graph nodes, the readback path it replaces, the
 * bandwidth of large builds and the kernel-variant sweep. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "vrows/vrows_abi.h"

typedef struct bare {
    CUfunction fn;
    memra_vrows_args a;
    void *params[MEMRA_VROWS_NPARAMS];
    void *extra[5];
    size_t size;
    unsigned grid;
} bare;

static void bare_init(bare *b, memra_engine *eng, const work *w, CUdeviceptr planes)
{
    b->fn = atomic_load(&eng->kernel[MEMRA_KERNEL_VROWS]);
    b->a = (memra_vrows_args){w->sel,
                              w->selw,
                              planes,
                              planes + 4 * w->n_expert,
                              planes + 8 * w->n_expert,
                              w->sl.base[0],
                              w->sl.base[1],
                              w->sl.base[2],
                              w->sl.stride[0],
                              w->sl.stride[1],
                              w->sl.stride[2],
                              w->n,
                              w->n_expert,
                              w->ptrs,
                              w->scl,
                              eng->faults,
                              0,
                              0,
                              0};
    void *p[MEMRA_VROWS_NPARAMS] = {&b->a.sel,      &b->a.selw,    &b->a.mg,      &b->a.mu,
                                    &b->a.md,       &b->a.pg,      &b->a.pu,      &b->a.pd,
                                    &b->a.sg,       &b->a.su,      &b->a.sd,      &b->a.n_pairs,
                                    &b->a.n_expert, &b->a.ptrs,    &b->a.scl,     &b->a.faults,
                                    &b->a.map,      &b->a.n_local, &b->a.n_shared};
    memcpy(b->params, p, sizeof p);
    b->size = sizeof b->a;
    b->extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER, b->extra[1] = &b->a;
    b->extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE, b->extra[3] = &b->size;
    b->extra[4] = CU_LAUNCH_PARAM_END;
    b->grid = memra_vrows_grid(w->n);
}

enum { L_EMPTY, L_BARE, L_BARE_EXTRA, L_MEMRA, L_MEMRA_NOMAC };
typedef struct launcher {
    int kind;
    memra_engine *eng;
    bare *b;
    work *w;
    CUfunction empty;
    CUstream s;
} launcher;

static void launch(const launcher *l)
{
    switch (l->kind) {
    case L_EMPTY:
        CK(d->cuLaunchKernel(l->empty, 1, 1, 1, 32, 1, 1, 0, l->s, NULL, NULL));
        break;
    case L_BARE:
        CK(d->cuLaunchKernel(l->b->fn, l->b->grid, 1, 1, MEMRA_VROWS_BLOCK, 1, 1, 0, l->s,
                             l->b->params, NULL));
        break;
    case L_BARE_EXTRA:
        CK(d->cuLaunchKernel(l->b->fn, l->b->grid, 1, 1, MEMRA_VROWS_BLOCK, 1, 1, 0, l->s, NULL,
                             l->b->extra));
        break;
    case L_MEMRA:
    case L_MEMRA_NOMAC:
        MK(memra_vrows_tables(l->eng, l->w->sel, l->w->selw, l->w->n, l->w->n_expert, 0,
                              l->kind == L_MEMRA ? &l->w->mac : NULL, &l->w->sl, l->w->ptrs,
                              l->w->scl, l->s));
        break;
    }
}

/* Host cost per launch: batches of launches enqueued back to back (short
 * enough that the launch queue never fills), synchronised between batches.
 * The launchers take turns batch by batch, so clock and load drift during
 * the run falls on all of them alike. */
static void host_costs_us(const launcher *const *ls, int n, double *out)
{
    enum { BATCH = 100, MAXB = 400 };
    const int batches = quick ? 40 : MAXB;
    static double v[8][MAXB];
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < 3; i++)
            launch(ls[k]);
        CK(d->cuStreamSynchronize(ls[k]->s));
    }
    for (int b = 0; b < batches; b++)
        for (int k = 0; k < n; k++) {
            const launcher *l = ls[(k + b) % n];
            double t0 = now_us();
            for (int i = 0; i < BATCH; i++)
                launch(l);
            double t1 = now_us();
            CK(d->cuStreamSynchronize(l->s));
            v[(k + b) % n][b] = (t1 - t0) / BATCH;
        }
    for (int k = 0; k < n; k++)
        out[k] = median(v[k], batches);
}

/* Launch + synchronise, the launchers taking turns. */
static void round_trips_us(const launcher *const *ls, int n, double *out)
{
    enum { MAXR = 3000 };
    const int reps = quick ? 300 : MAXR;
    static double v[4][MAXR];
    for (int i = 0; i < 10; i++)
        for (int k = 0; k < n; k++) {
            launch(ls[k]);
            CK(d->cuStreamSynchronize(ls[k]->s));
        }
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < n; k++) {
            double t0 = now_us();
            launch(ls[k]);
            CK(d->cuStreamSynchronize(ls[k]->s));
            v[k][r] = now_us() - t0;
        }
    for (int k = 0; k < n; k++)
        out[k] = median(v[k], reps);
}

static double round_trip_us(const launcher *l)
{
    double t;
    round_trips_us(&l, 1, &t);
    return t;
}

/* The table kernel's source as "memra_vrows_var_kernel", with
 * -DMEMRA_VROWS_VARIANT=k (k pairs per thread) and optionally
 * -DMEMRA_VROWS_PLAIN_STORES (no streaming stores), for the variant sweep. */
static CUfunction compile_variant(int sm, const char *def1, const char *def2, CUmodule *mod)
{
    const char *opts[16] = {def1};
    int n = 1;
    if (def2)
        opts[n++] = def2;
    for (int i = 0; memra_jit_options[i]; i++)
        opts[n++] = memra_jit_options[i];
    return compile_cubin(memra_module_source(MEMRA_MODULE_VROWS).text, "memra_vrows_var_kernel", sm,
                         opts, mod);
}

/* Median GPU time of one call of `run(ctx, k)`, from events around runs of
 * 10 calls (k = 0..9), after 3 warm-up runs. */
static double events_us(CUstream s, CUevent e0, CUevent e1, void (*run)(void *, int), void *ctx)
{
    double v[30];
    for (int r = -3; r < 30; r++) {
        CK(d->cuEventRecord(e0, s));
        for (int k = 0; k < 10; k++)
            run(ctx, k);
        CK(d->cuEventRecord(e1, s));
        CK(d->cuEventSynchronize(e1));
        float ms;
        CK(d->cuEventElapsedTime(&ms, e0, e1));
        if (r >= 0)
            v[r] = (double)ms * 1e3 / 10;
    }
    return median(v, 30);
}

/* A sweep variant or the memset floor over `sets` rotating buffer sets. */
typedef struct sweep {
    CUfunction f;
    unsigned grid;
    bare *bb;
    work *ws;
    int sets;
    CUstream s;
} sweep;

static void run_variant(void *ctx, int k)
{
    const sweep *v = ctx;
    CK(d->cuLaunchKernel(v->f, v->grid, 1, 1, 256, 1, 1, 0, v->s, NULL, v->bb[k % v->sets].extra));
}

static void run_memset(void *ctx, int k)
{
    const sweep *v = ctx;
    const work *w = &v->ws[k % v->sets];
    CK(d->cuMemsetD32Async(w->ptrs, 0x11111111u, (size_t)w->n * 6, v->s));
    CK(d->cuMemsetD32Async(w->scl, 0x3f800000u, (size_t)w->n * 3, v->s));
}

/* GPU time per replay of a graph holding `nodes` table builds. */
static double graph_us(const launcher *l, int nodes, CUstream s)
{
    CUgraph g;
    CUgraphExec ge;
    CK(d->cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    launcher lc = *l;
    lc.s = s;
    for (int i = 0; i < nodes; i++)
        launch(&lc);
    CK(d->cuStreamEndCapture(s, &g));
    CK(d->cuGraphInstantiateWithFlags(&ge, g, 0));
    CUevent e0, e1;
    CK(d->cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CK(d->cuEventCreate(&e1, CU_EVENT_DEFAULT));
    for (int i = 0; i < 20; i++)
        CK(d->cuGraphLaunch(ge, s));
    const int reps = quick ? 10 : 50, per = 50;
    double v[50];
    for (int r = 0; r < reps; r++) {
        CK(d->cuEventRecord(e0, s));
        for (int i = 0; i < per; i++)
            CK(d->cuGraphLaunch(ge, s));
        CK(d->cuEventRecord(e1, s));
        CK(d->cuEventSynchronize(e1));
        float ms;
        CK(d->cuEventElapsedTime(&ms, e0, e1));
        v[r] = (double)ms * 1e3 / per;
    }
    d->cuEventDestroy(e0), d->cuEventDestroy(e1);
    d->cuGraphExecDestroy(ge), d->cuGraphDestroy(g);
    return median(v, reps);
}

/* GPU time of one launch: events around each single launch (includes the
 * launch's fixed GPU-side overhead), and around runs of back-to-back
 * launches (how a decode step issues them), per launch. The runs rotate
 * over `nl` launchers with their own buffers, so that what they touch
 * together is several times the L2 and the time is DRAM's, not the cache's. */
static double gpu_us(const launcher *ls, int nl, double *single)
{
    const launcher *l = &ls[0];
    CUevent e0, e1;
    CK(d->cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CK(d->cuEventCreate(&e1, CU_EVENT_DEFAULT));
    for (int i = 0; i < 5; i++)
        launch(l);
    const int reps = quick ? 15 : 60, per = 20;
    double v[60], v1[60];
    for (int r = 0; r < reps; r++) {
        float ms;
        CK(d->cuEventRecord(e0, l->s));
        launch(l);
        CK(d->cuEventRecord(e1, l->s));
        CK(d->cuEventSynchronize(e1));
        CK(d->cuEventElapsedTime(&ms, e0, e1));
        v1[r] = (double)ms * 1e3;
        CK(d->cuEventRecord(e0, l->s));
        for (int i = 0; i < per; i++)
            launch(&ls[i % nl]);
        CK(d->cuEventRecord(e1, l->s));
        CK(d->cuEventSynchronize(e1));
        CK(d->cuEventElapsedTime(&ms, e0, e1));
        v[r] = (double)ms * 1e3 / per;
    }
    d->cuEventDestroy(e0), d->cuEventDestroy(e1);
    *single = median(v1, reps);
    return median(v, reps);
}

/* The path memra replaces: read sel/selw back, build on the host, copy up. */
static double readback_us(memra_engine *eng, work *w, int pinned, CUstream s)
{
    const uint32_t n = w->n;
    void *hsel, *hselw, *hptrs, *hscl;
    if (pinned) {
        CK(d->cuMemAllocHost(&hsel, n * 4));
        CK(d->cuMemAllocHost(&hselw, n * 4));
        CK(d->cuMemAllocHost(&hptrs, n * 24));
        CK(d->cuMemAllocHost(&hscl, n * 12));
    } else {
        hsel = malloc(n * 4), hselw = malloc(n * 4), hptrs = malloc(n * 24), hscl = malloc(n * 12);
    }
    const int reps = quick ? 200 : 1000;
    double *v = malloc(sizeof *v * (size_t)reps);
    for (int i = -10; i < reps; i++) {
        double t0 = now_us();
        CK(d->cuMemcpyDtoHAsync(hsel, w->sel, n * 4, s));
        CK(d->cuMemcpyDtoHAsync(hselw, w->selw, n * 4, s));
        CK(d->cuStreamSynchronize(s));
        memra_status st = memra_vrows_tables_host(hsel, hselw, n, w->n_expert, &w->mac, &w->sl,
                                                  hptrs, hscl, NULL);
        if (st) {
            fprintf(stderr, "host arm: %s\n", memra_last_error());
            exit(1);
        }
        CK(d->cuMemcpyHtoDAsync(w->ptrs, hptrs, n * 24, s));
        CK(d->cuMemcpyHtoDAsync(w->scl, hscl, n * 12, s));
        CK(d->cuStreamSynchronize(s));
        if (i >= 0)
            v[i] = now_us() - t0;
    }
    double m = median(v, reps);
    free(v);
    (void)eng;
    if (pinned) {
        d->cuMemFreeHost(hsel), d->cuMemFreeHost(hselw), d->cuMemFreeHost(hptrs),
            d->cuMemFreeHost(hscl);
    } else {
        free(hsel), free(hselw), free(hptrs), free(hscl);
    }
    return m;
}

/* memra_engine_create, then the time to the first finished launch. */
void bench_tables(int ordinal, int route_only)
{
    memra_engine *eng;
    MK(memra_engine_create(ordinal, &eng));
    memra_engine_info info;
    MK(memra_engine_warmup(eng));
    nv = eng->nvrtc;
    memra_engine_get_info(eng, &info);
    printf("device %d: %s, sm_%d, driver %d, NVRTC %d\n", ordinal, info.name, info.sm,
           info.driver_version, info.nvrtc_version);
    memra_call call;
    MK(memra_call_enter(eng, "bench", &call));
    CUstream s;
    CK(d->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUmodule emod;
    CUfunction empty = compile_empty(info.sm, &emod);

    work w8;
    work_init(eng, &w8, 8);
    MK(memra_vrows_prepare_layer(eng, 0, w8.n_expert, &w8.mac, s));
    MK(memra_sync(eng, s));
    CUdeviceptr planes = eng->mirror.slots[MEMRA_MIRROR_VROWS][0]->dev;
    bare b8;
    bare_init(&b8, eng, &w8, planes);
    launcher le = {L_EMPTY, eng, &b8, &w8, empty, s};
    launcher lb = {L_BARE, eng, &b8, &w8, empty, s};
    launcher lx = {L_BARE_EXTRA, eng, &b8, &w8, empty, s};
    launcher lm = {L_MEMRA, eng, &b8, &w8, empty, s};
    launcher ln = {L_MEMRA_NOMAC, eng, &b8, &w8, empty, s};

    if (route_only)
        goto route;
    printf("\nhost cost per launch (n_pairs = 8; median of batch means, launchers interleaved)\n");
    const launcher *all[5] = {&le, &lb, &lx, &lm, &ln};
    double c[5];
    host_costs_us(all, 5, c);
    const double c_empty = c[0], c_bare = c[1], c_x = c[2], c_m = c[3], c_n = c[4];
    row("launch", "bare cuLaunchKernel, empty kernel", c_empty, "us", 0, "");
    row("launch", "bare cuLaunchKernel, table kernel", c_bare, "us", 0, "");
    row("launch", "bare cuLaunchKernel, table kernel, param buffer", c_x, "us", c_bare, "bare");
    row("launch", "memra_vrows_tables (macros)", c_m, "us", c_bare, "bare");
    row("launch", "memra_vrows_tables (no macros)", c_n, "us", c_bare, "bare");

    printf("\nlaunch + sync round trip (n_pairs = 8)\n");
    const launcher *rt[2] = {&lb, &lm};
    double r[2];
    round_trips_us(rt, 2, r);
    const double r_bare = r[0], r_m = r[1];
    row("roundtrip", "bare table kernel", r_bare, "us", 0, "");
    row("roundtrip", "memra (macros)", r_m, "us", r_bare, "bare");

    printf("\ngraph replay, GPU time (n_pairs = 8)\n");
    double g1b = graph_us(&lb, 1, s), g1m = graph_us(&lm, 1, s);
    double g32b = graph_us(&lb, 32, s) / 32, g32m = graph_us(&lm, 32, s) / 32;
    row("graph", "1-node graph, bare kernel node", g1b, "us", 0, "");
    row("graph", "1-node graph, memra node", g1m, "us", g1b, "bare");
    row("graph", "32-node graph, bare, per node", g32b, "us", 0, "");
    row("graph", "32-node graph, memra, per node", g32m, "us", g32b, "bare");

    printf("\nhost readback path it replaces (sync D2H sel/selw, host arm, H2D tables)\n");
    static const uint32_t rb_n[] = {8, 64, 512};
    for (int i = 0; i < 3; i++) {
        work w;
        work_init(eng, &w, rb_n[i]);
        launcher l = {L_MEMRA, eng, NULL, &w, empty, s};
        double rm = round_trip_us(&l);
        char what[96];
        snprintf(what, sizeof what, "memra launch+sync, n=%u", rb_n[i]);
        row("readback", what, rm, "us", 0, "");
        snprintf(what, sizeof what, "readback path, pinned, n=%u", rb_n[i]);
        row("readback", what, readback_us(eng, &w, 1, s), "us", rm, "memra");
        snprintf(what, sizeof what, "readback path, pageable, n=%u", rb_n[i]);
        row("readback", what, readback_us(eng, &w, 0, s), "us", rm, "memra");
        work_free(eng, &w);
    }

    printf("\ntable build bandwidth (GPU time per launch, runs of 20 back-to-back launches\n"
           " rotating over buffer sets >= 4x L2; 44 bytes of table traffic per pair:\n"
           " sel+selw read, ptrs+scl written)\n");
    /* The ceiling: a device-to-device copy, bytes read + written. */
    const double copy = copy_gbs(s, 20);
    CUevent e0, e1;
    CK(d->cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CK(d->cuEventCreate(&e1, CU_EVENT_DEFAULT));
    row("bandwidth", "device-to-device copy (read+write)", copy, "GB/s", 0, "");
    enum { MAX_SETS = 16 };
    for (uint32_t n = 8; n <= (1u << 22); n *= (n < 4096 ? 8 : 4)) {
        /* Buffer sets to rotate over: together at least 4x the H200's 60 MB L2. */
        int sets = (int)((240e6 + 44.0 * n - 1) / (44.0 * n));
        sets = sets < 1 ? 1 : sets > MAX_SETS ? MAX_SETS : sets;
        work w[MAX_SETS];
        bare bb[MAX_SETS];
        launcher l[MAX_SETS], lbb[MAX_SETS];
        for (int k = 0; k < sets; k++) {
            work_init(eng, &w[k], n);
            MK(memra_vrows_prepare_layer(eng, 0, w[k].n_expert, &w[k].mac, s));
            bare_init(&bb[k], eng, &w[k], eng->mirror.slots[MEMRA_MIRROR_VROWS][0]->dev);
            l[k] = (launcher){L_MEMRA, eng, NULL, &w[k], empty, s};
            lbb[k] = (launcher){L_BARE, eng, &bb[k], &w[k], empty, s};
        }
        double t1, tb1;
        double t = gpu_us(l, sets, &t1), tb = gpu_us(lbb, sets, &tb1);
        double gbs = 44.0 * n / (t * 1e-6) / 1e9;
        char what[128];
        snprintf(what, sizeof what, "n=%u x%d sets: %.2f us/launch (bare %.2f; single %.2f)", n,
                 sets, t, tb, t1);
        row("bandwidth", what, gbs, "GB/s", copy, "copy");
        for (int k = 0; k < sets; k++)
            work_free(eng, &w[k]);
    }

    printf("\nwhere the bandwidth goes (GPU time per launch, back-to-back runs over buffer sets >= "
           "4x L2)\n");
    static const uint32_t vn[] = {1u << 20, 1u << 22};
    for (int i = 0; i < 2; i++) {
        const uint32_t n = vn[i];
        const int sets = n < (1u << 22) ? 6 : 2; /* >= 4x L2 together */
        work ws[6];
        bare bbs[6];
        for (int k = 0; k < sets; k++) {
            work_init(eng, &ws[k], n);
            MK(memra_vrows_prepare_layer(eng, 0, ws[k].n_expert, &ws[k].mac, s));
            bare_init(&bbs[k], eng, &ws[k], eng->mirror.slots[MEMRA_MIRROR_VROWS][0]->dev);
        }
        /* Write-only floor: memset of the same output tables (36 bytes/pair). */
        sweep sw = {NULL, 0, bbs, ws, sets, s};
        double mt = events_us(s, e0, e1, run_memset, &sw);
        char what[128];
        snprintf(what, sizeof what, "n=%u memset of the tables (36 B/pair): %.2f us", n, mt);
        row("variants", what, 36.0 * n / (mt * 1e-6) / 1e9, "GB/s", copy, "copy");
        static const int pts[] = {1, 2, 4, 8};
        for (int a = 0; a < 8; a++) {
            const int pt = pts[a % 4], plain = a >= 4;
            char def[48];
            snprintf(def, sizeof def, "-DMEMRA_VROWS_VARIANT=%d", pt);
            CUmodule vm;
            CUfunction vf =
                compile_variant(info.sm, def, plain ? "-DMEMRA_VROWS_PLAIN_STORES" : NULL, &vm);
            const unsigned grid = (n + 256u * (unsigned)pt - 1) / (256u * (unsigned)pt);
            sw.f = vf;
            sw.grid = grid;
            double vt = events_us(s, e0, e1, run_variant, &sw);
            snprintf(what, sizeof what, "n=%u kernel %d pairs/thread, %s stores: %.2f us", n, pt,
                     plain ? "plain" : "streaming", vt);
            row("variants", what, 44.0 * n / (vt * 1e-6) / 1e9, "GB/s", copy, "copy");
            d->cuModuleUnload(vm);
        }
        for (int k = 0; k < sets; k++)
            work_free(eng, &ws[k]);
    }

    d->cuEventDestroy(e0), d->cuEventDestroy(e1);
route:
    memra_bench_route(eng, info.sm, s);
    work_free(eng, &w8);
    d->cuModuleUnload(emod);
    d->cuStreamDestroy(s);
    memra_call_leave(&call);
    memra_engine_destroy(eng);
}
