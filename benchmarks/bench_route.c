/* Routing: decode steps of 32 layers in one CUDA graph, and prefill.
 *
 * Decode (1, 8, 64, 256 tokens): each layer is a router step and then the
 * same consumer kernel, reading the same bytes (sel, selw and the three
 * table planes), in every arm:
 *   consumer  the consumer alone (the floor every arm stands on);
 *   router    the routing kernel without the tables (sel, selw only);
 *   fused     memra_route_tables, block-per-token and warp-per-token
 *             kernels forced in turn (and what memra picks itself);
 *   two-step  the router, then memra_vrows_tables.
 * Each arm with and without programmatic dependent launch (PDL: memra's
 * kernels and the consumer all launched with it and waiting on it). GPU time
 * per layer from CUDA events around graph replays.
 *
 * Prefill (4k, 16k, 64k tokens): one routing launch, back to back over
 * buffer sets larger than L2 together, as microseconds and as the rate of
 * reading the logits against the H200's 4.8 TB/s and a measured copy. */
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "vrows/gate_cases.h"
#include "engine/launch.h"
#include "layout/layout_spec.h"
#include "route/route.h"
#include "route/route_abi.h"
#include "route/route_cases.h"
#include "route/route_families.h"
#include "route/route_spec.h"

#define LAYERS 32
#define H200_SPEC_GBS 4800.0

/* The consumer reads every byte a layer's router step produced; with PDL it
 * waits for that step first. */
static const char consume_src[] =
    "extern \"C\" __global__ void memra_bench_consume(const int *sel, const float *w,\n"
    "    const unsigned long long *p, const float *s, unsigned n, float *out)\n"
    "{\n"
    "#if __CUDA_ARCH__ >= 900\n"
    "    asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
    "#endif\n"
    "    float acc = 0.0f;\n"
    "    for (unsigned i = threadIdx.x; i < n; i += blockDim.x)\n"
    "        acc += w[i] + (float)sel[i];\n"
    "    for (unsigned i = threadIdx.x; i < 3 * n; i += blockDim.x)\n"
    "        acc += s[i] + (float)(p[i] & 0xffu);\n"
    "    if (acc == 1234.5f) out[0] = acc;\n"
    "}\n"
    "extern \"C\" __global__ void memra_bench_empty_pdl()\n"
    "{\n"
    "#if __CUDA_ARCH__ >= 900\n"
    "    asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
    "#endif\n"
    "}\n";

typedef struct bench_cfg {
    const char *name;
    memra_route_spec spec;
    int bias;
} bench_cfg;

/* The families (route/route_families.h); IN_PLACE and MACROS pick the
 * route cases' test inputs, not the spec: every configuration here mirrors
 * its bias from the host. */
static const bench_cfg cfgs[] = {
#define MEMRA_X(name, E, K, NG, TG, SIG, SCALE, IN_PLACE, MACROS)                                  \
    {name,                                                                                         \
     {ROUTE_SPEC(E, K, NG, TG, (SIG) ? MEMRA_ROUTE_SIGMOID : MEMRA_ROUTE_SOFTMAX,                  \
                 MEMRA_LOGITS_F32, 1, SCALE)},                                                     \
     SIG},
    MEMRA_ROUTE_FAMILIES(MEMRA_X)
#undef MEMRA_X
};
#define N_CFGS (sizeof cfgs / sizeof cfgs[0])

typedef struct layer {
    CUdeviceptr logits, sel, selw, ptrs, scl;
    memra_layout layout;     /* the expert-sorted layout of the fused arm with a layout */
    memra_route_args router; /* the routing kernel's launch without the tables */
} layer;

typedef struct setup {
    memra_engine *eng;
    memra_route_spec spec;
    float bias[MEMRA_ROUTE_MAX_EXPERT], planes[3 * MEMRA_ROUTE_MAX_EXPERT];
    memra_vrows_macros mac;
    memra_vrows_slabs sl;
    uint32_t T;
    layer L[LAYERS];
    CUfunction consume;
    CUdeviceptr out;
    CUstream s;
} setup;

enum { A_CONSUMER, A_ROUTER, A_FUSED, A_TWO_STEP, A_FUSED_LAYOUT };

/* The layout's block size in the decode arms: vLLM's smallest BLOCK_SIZE_M. */
#define BENCH_LAYOUT_BLOCK 16u

/* A helper kernel, plain or with PDL as memra's own launches are. */
static void launch_ex(CUfunction f, unsigned grid, unsigned block, void **args, CUstream s, int pdl)
{
    if (!pdl) {
        CK(d->cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, s, args, NULL));
        return;
    }
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig c;
    memset(&c, 0, sizeof c);
    c.gridDimX = grid, c.gridDimY = 1, c.gridDimZ = 1;
    c.blockDimX = block, c.blockDimY = 1, c.blockDimZ = 1;
    c.hStream = s, c.attrs = &attr, c.numAttrs = 1;
    CK(d->cuLaunchKernelEx(&c, f, args, NULL));
}

static void consume(setup *su, layer *l, int pdl)
{
    unsigned n = su->T * (su->spec.top_k + su->spec.n_shared);
    void *args[] = {&l->sel, &l->selw, &l->ptrs, &l->scl, &n, &su->out};
    launch_ex(su->consume, 1, 128, args, su->s, pdl);
}

/* The router without tables: the kernel memra would pick, or the forced one. */
static void router(setup *su, layer *l)
{
    const uint32_t E = su->spec.n_expert;
    const int block = memra_route_use_block(su->T, E);
    l->router.flags = (l->router.flags & ~MEMRA_ROUTE_FLAG_FEW_LANES) |
                      memra_route_team_form(memra_route_variant, su->T);
    MK(memra_launch(
        su->eng, "bench",
        atomic_load(&su->eng->kernel[memra_route_kernel(memra_route_variant, su->T, &su->spec)]),
        block ? su->T
              : memra_route_team_grid(su->T, E, su->spec.n_group, su->spec.top_k, l->router.flags),
        block ? memra_route_block_threads(E) : MEMRA_ROUTE_TEAM_THREADS, &l->router,
        MEMRA_ROUTE_PARAM_BYTES, su->s));
}

static void step(setup *su, int arm, int pdl)
{
    const unsigned np = su->T * su->spec.top_k;
    for (int il = 0; il < LAYERS; il++) {
        layer *l = &su->L[il];
        if (arm == A_FUSED)
            MK(memra_route_tables(su->eng, l->logits, su->T, &su->spec, il, &su->mac, &su->sl,
                                  l->sel, l->selw, l->ptrs, l->scl, su->s));
        if (arm == A_FUSED_LAYOUT) {
            const memra_layout_spec ls = {.n_expert = su->spec.n_expert,
                                          .block_size = BENCH_LAYOUT_BLOCK};
            MK(memra_route_tables_ex(su->eng, l->logits, su->T, &su->spec, il, &su->mac, &su->sl,
                                     l->sel, l->selw, l->ptrs, l->scl, &ls, &l->layout, su->s));
        }
        if (arm == A_ROUTER || arm == A_TWO_STEP)
            router(su, l);
        if (arm == A_TWO_STEP)
            MK(memra_vrows_tables(su->eng, l->sel, l->selw, np, su->spec.n_expert, LAYERS + il,
                                  &su->mac, &su->sl, l->ptrs, l->scl, su->s));
        consume(su, l, pdl);
    }
}

/* Per-layer GPU time of a graph holding one decode step. */
static double graph_layer_us(setup *su, int arm, int pdl)
{
    CUgraph g;
    CUgraphExec ge;
    MK(memra_engine_set_pdl(su->eng, pdl, NULL));
    CK(d->cuStreamBeginCapture(su->s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    step(su, arm, pdl);
    CK(d->cuStreamEndCapture(su->s, &g));
    MK(memra_engine_set_pdl(su->eng, 0, NULL));
    CK(d->cuGraphInstantiateWithFlags(&ge, g, 0));
    CUevent e0, e1;
    CK(d->cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CK(d->cuEventCreate(&e1, CU_EVENT_DEFAULT));
    for (int i = 0; i < 10; i++)
        CK(d->cuGraphLaunch(ge, su->s));
    const int reps = quick ? 7 : 21, per = 10;
    double v[21];
    for (int r = 0; r < reps; r++) {
        CK(d->cuEventRecord(e0, su->s));
        for (int i = 0; i < per; i++)
            CK(d->cuGraphLaunch(ge, su->s));
        CK(d->cuEventRecord(e1, su->s));
        CK(d->cuEventSynchronize(e1));
        float ms;
        CK(d->cuEventElapsedTime(&ms, e0, e1));
        v[r] = (double)ms * 1e3 / per / LAYERS;
    }
    d->cuEventDestroy(e0), d->cuEventDestroy(e1);
    d->cuGraphExecDestroy(ge), d->cuGraphDestroy(g);
    return median(v, reps);
}

/* The router's own launch, as memra_route_tables makes it, without the
 * tables. */
static memra_route_args router_args(setup *su, layer *l, int il)
{
    const CUdeviceptr planes = su->eng->mirror.slots[MEMRA_MIRROR_ROUTE][il]->dev;
    const uint64_t E4 = (uint64_t)su->spec.n_expert * 4;
    return (memra_route_args){.logits = l->logits,
                              .bias = su->spec.bias ? planes + 3 * E4 : 0,
                              .mg = planes,
                              .mu = planes + E4,
                              .md = planes + 2 * E4,
                              .pg = su->sl.base[0],
                              .pu = su->sl.base[1],
                              .pd = su->sl.base[2],
                              .sg = su->sl.stride[0],
                              .su = su->sl.stride[1],
                              .sd = su->sl.stride[2],
                              .sel = l->sel,
                              .selw = l->selw,
                              .ptrs = l->ptrs,
                              .scl = l->scl,
                              .faults = su->eng->faults,
                              .n_tokens = su->T,
                              .n_expert = su->spec.n_expert,
                              .top_k = su->spec.top_k,
                              .n_group = su->spec.n_group,
                              .topk_group = su->spec.topk_group,
                              .flags = memra_route_flags(&su->spec) | MEMRA_ROUTE_FLAG_NO_TABLES,
                              .scale = su->spec.routed_scaling_factor};
}

static void setup_init(setup *su, memra_engine *eng, const bench_cfg *c, uint32_t T,
                       CUfunction consume_fn, CUstream s)
{
    memset(su, 0, sizeof *su);
    su->eng = eng, su->spec = c->spec, su->T = T, su->s = s, su->consume = consume_fn;
    const uint32_t E = su->spec.n_expert;
    route_case_planes(E, su->planes);
    su->mac = (memra_vrows_macros){{su->planes, su->planes + E, su->planes + 2 * (size_t)E}};
    if (c->bias) {
        route_case_bias(E, su->bias);
        su->spec.bias = su->bias;
    }
    su->sl = (memra_vrows_slabs)GATE_SERVING_SLABS;
    const size_t np = (size_t)T * su->spec.top_k, lb = (size_t)T * E * 4;
    CK(d->cuMemAlloc(&su->out, 64));
    for (int il = 0; il < LAYERS; il++) {
        layer *l = &su->L[il];
        CK(d->cuMemAlloc(&l->logits, lb));
        CK(d->cuMemAlloc(&l->sel, np * 4));
        CK(d->cuMemAlloc(&l->selw, np * 4));
        CK(d->cuMemAlloc(&l->ptrs, 3 * np * 8));
        CK(d->cuMemAlloc(&l->scl, 3 * np * 4));
        const memra_layout_spec ls = {.n_expert = E, .block_size = BENCH_LAYOUT_BLOCK};
        uint64_t len, blocks;
        MK(memra_layout_sizes((uint32_t)np, &ls, &len, &blocks));
        CUdeviceptr sorted, eids, post;
        CK(d->cuMemAlloc(&sorted, len * 4 + 4));
        CK(d->cuMemAlloc(&eids, blocks * 4 + 4));
        CK(d->cuMemAlloc(&post, 4));
        l->layout = (memra_layout){.sorted_ids = sorted, .expert_ids = eids, .n_post_pad = post};
        void *logits = route_case_logits(&su->spec, T, 77 + (uint64_t)il, 0);
        CK(d->cuMemcpyHtoDAsync(l->logits, logits, lb, s));
        CK(d->cuStreamSynchronize(s));
        free(logits);
        MK(memra_route_prepare_layer(eng, il, &su->spec, &su->mac, s));
        MK(memra_layout_prepare(eng));
        /* the two-step path's table kernel mirrors the planes alone */
        MK(memra_vrows_prepare_layer(eng, LAYERS + il, E, &su->mac, s));
        CK(d->cuStreamSynchronize(s));
        l->router = router_args(su, l, il);
    }
}

static void setup_free(setup *su)
{
    for (int il = 0; il < LAYERS; il++) {
        layer *l = &su->L[il];
        d->cuMemFree(l->logits), d->cuMemFree(l->sel), d->cuMemFree(l->selw);
        d->cuMemFree(l->ptrs), d->cuMemFree(l->scl);
        d->cuMemFree(l->layout.sorted_ids), d->cuMemFree(l->layout.expert_ids);
        d->cuMemFree(l->layout.n_post_pad);
    }
    d->cuMemFree(su->out);
}

/* Whether a configuration is measured: MEMRA_BENCH_ROUTE_CONFIGS, a comma
 * list of names (route/route_families.h), picks some (a short device call measures
 * the families a change touches); unset or empty, all. */
static int cfg_selected(const bench_cfg *c)
{
    const char *only = getenv("MEMRA_BENCH_ROUTE_CONFIGS");
    if (!only || !*only)
        return 1;
    const size_t n = strlen(c->name);
    for (const char *p = only; *p;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, c->name, n) == 0)
            return 1;
        p += len + (end ? 1 : 0);
    }
    return 0;
}

static void decode_config(memra_engine *eng, const bench_cfg *c, uint32_t T, CUfunction consume_fn,
                          CUstream s, int pdl_ok)
{
    static setup su;
    setup_init(&su, eng, c, T, consume_fn, s);
    const char *kname = memra_route_use_block(T, c->spec.n_expert) ? "block" : "team";
    for (int pdl = 0; pdl <= pdl_ok; pdl++) {
        const char *p = pdl ? ", PDL" : "";
        char what[240];
        const double cons = graph_layer_us(&su, A_CONSUMER, pdl);
        const double rout = graph_layer_us(&su, A_ROUTER, pdl);
        const double fused = graph_layer_us(&su, A_FUSED, pdl);
        memra_route_variant = MEMRA_ROUTE_VARIANT_BLOCK;
        const double fblock = graph_layer_us(&su, A_FUSED, pdl);
        memra_route_variant = MEMRA_ROUTE_VARIANT_WARP;
        const double fwarp = graph_layer_us(&su, A_FUSED, pdl);
        memra_route_variant = MEMRA_ROUTE_VARIANT_AUTO;
        const double two = graph_layer_us(&su, A_TWO_STEP, pdl);
        const double flay = graph_layer_us(&su, A_FUSED_LAYOUT, pdl);
        /* The same calls through the modules compiled for this spec
         * (MEMRA_ROUTE_SPECIALIZE), loaded before the graphs are captured. */
        eng->route_specialize = 1;
        MK(memra_route_prepare_layer(eng, 0, &su.spec, &su.mac, s));
        const double fspec = graph_layer_us(&su, A_FUSED, pdl);
        const double flayspec = graph_layer_us(&su, A_FUSED_LAYOUT, pdl);
        eng->route_specialize = 0; /* memra_bench_route's generic rows */
        snprintf(what, sizeof what, "%s, %u tok%s: consumer alone", c->name, T, p);
        row("route", what, cons, "us/layer", 0, "");
        snprintf(what, sizeof what, "%s, %u tok%s: router alone (%s kernel) + consumer", c->name, T,
                 p, kname);
        row("route", what, rout, "us/layer", cons, "consumer");
        snprintf(what, sizeof what, "%s, %u tok%s: fused (%s kernel) + consumer", c->name, T, p,
                 kname);
        row("route", what, fused, "us/layer", rout, "router alone");
        snprintf(what, sizeof what, "%s, %u tok%s: fused, block kernel + consumer", c->name, T, p);
        row("route", what, fblock, "us/layer", rout, "router alone");
        snprintf(what, sizeof what, "%s, %u tok%s: fused, team kernel + consumer", c->name, T, p);
        row("route", what, fwarp, "us/layer", rout, "router alone");
        snprintf(what, sizeof what, "%s, %u tok%s: two-step (router, tables) + consumer", c->name,
                 T, p);
        row("route", what, two, "us/layer", fused, "fused");
        snprintf(what, sizeof what, "%s, %u tok%s: fused node alone (fused - consumer)", c->name, T,
                 p);
        row("route", what, fused - cons, "us/layer", rout - cons, "router node alone");
        snprintf(what, sizeof what,
                 "%s, %u tok%s: fused + layout node alone (block_size %u, - consumer)", c->name, T,
                 p, BENCH_LAYOUT_BLOCK);
        row("route", what, flay - cons, "us/layer", fused - cons, "fused node");
        snprintf(what, sizeof what,
                 "%s, %u tok%s: fused node alone, specialised (MEMRA_ROUTE_SPECIALIZE)", c->name, T,
                 p);
        row("route", what, fspec - cons, "us/layer", fused - cons, "fused node");
        snprintf(what, sizeof what, "%s, %u tok%s: fused + layout node alone, specialised", c->name,
                 T, p);
        row("route", what, flayspec - cons, "us/layer", flay - cons, "fused + layout node");
    }
    setup_free(&su);
}

/* The buffer sets of a prefill run (prefill_config). */
typedef struct prefill_sets {
    int n;
    const CUdeviceptr *logits, *sel, *selw, *ptrs, *scl;
} prefill_sets;

/* Median microseconds per fused call (with the layout `lo` when given;
 * `split`: by its own memra_layout_tables call on sel after the routing's,
 * not fused into it), runs of 8 back-to-back calls per event pair rotating
 * over the sets, after two warm-up runs. */
static double prefill_us(memra_engine *eng, const prefill_sets *b, uint32_t T,
                         const memra_route_spec *spec, const memra_vrows_slabs *sl,
                         const memra_layout_spec *ls, const memra_layout *lo, int split, CUevent e0,
                         CUevent e1, CUstream s)
{
    const int reps = quick ? 5 : 15, per = 8;
    double t[15];
    for (int r = -2; r < reps; r++) {
        CK(d->cuEventRecord(e0, s));
        for (int i = 0; i < per; i++) {
            const int k = (r * per + i + 2 * per) % b->n;
            MK(memra_route_tables_ex(eng, b->logits[k], T, spec, 0, NULL, sl, b->sel[k], b->selw[k],
                                     b->ptrs[k], b->scl[k], split ? NULL : ls, split ? NULL : lo,
                                     s));
            if (split)
                MK(memra_layout_tables(eng, b->sel[k], T * (spec->top_k + spec->n_shared), ls, lo,
                                       s));
        }
        CK(d->cuEventRecord(e1, s));
        CK(d->cuEventSynchronize(e1));
        float ms;
        CK(d->cuEventElapsedTime(&ms, e0, e1));
        if (r >= 0)
            t[r] = (double)ms * 1e3 / per;
    }
    return median(t, reps);
}

/* Prefill: back-to-back launches over buffer sets that together exceed
 * 4x L2, so the logits come from DRAM. */
static void prefill_config(memra_engine *eng, const bench_cfg *c, uint32_t T, CUstream s,
                           double copy_gbs)
{
    enum { MAX_SETS = 64 };
    memra_route_spec spec = c->spec;
    float bias[MEMRA_ROUTE_MAX_EXPERT];
    if (c->bias) {
        route_case_bias(spec.n_expert, bias);
        spec.bias = bias;
    }
    const size_t lb = (size_t)T * spec.n_expert * 4, np = (size_t)T * spec.top_k;
    int sets = (int)((240e6 + (double)lb - 1) / (double)lb);
    sets = sets < 2 ? 2 : sets > MAX_SETS ? MAX_SETS : sets;
    CUdeviceptr logits[MAX_SETS], sel[MAX_SETS], selw[MAX_SETS], ptrs[MAX_SETS], scl[MAX_SETS];
    void *h = route_case_logits(&spec, T, 5, 0);
    const memra_vrows_slabs sl = GATE_SERVING_SLABS;
    for (int k = 0; k < sets; k++) {
        CK(d->cuMemAlloc(&logits[k], lb));
        CK(d->cuMemAlloc(&sel[k], np * 4));
        CK(d->cuMemAlloc(&selw[k], np * 4));
        CK(d->cuMemAlloc(&ptrs[k], np * 24));
        CK(d->cuMemAlloc(&scl[k], np * 12));
        CK(d->cuMemcpyHtoDAsync(logits[k], h, lb, s));
    }
    CK(d->cuStreamSynchronize(s));
    free(h);
    MK(memra_route_prepare_layer(eng, 0, &spec, NULL, s));
    const prefill_sets b = {sets, logits, sel, selw, ptrs, scl};
    CUevent e0, e1;
    CK(d->cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CK(d->cuEventCreate(&e1, CU_EVENT_DEFAULT));
    for (int v = MEMRA_ROUTE_VARIANT_BLOCK; v <= MEMRA_ROUTE_VARIANT_WARP_EXACT; v++) {
        if (v == MEMRA_ROUTE_VARIANT_WARP_EXACT && spec.scoring != MEMRA_ROUTE_SIGMOID)
            continue; /* the same kernel as the team's */
        memra_route_variant = v;
        const double us = prefill_us(eng, &b, T, &spec, &sl, NULL, NULL, 0, e0, e1, s);
        memra_route_variant = MEMRA_ROUTE_VARIANT_AUTO;
        const double gbs = (double)lb / (us * 1e-6) / 1e9;
        char what[240];
        snprintf(what, sizeof what,
                 "prefill %s, %u tokens, fused, %s kernel: %.1f us, logits at %.0f GB/s = %.0f%% "
                 "of 4.8 TB/s",
                 c->name, T,
                 v == MEMRA_ROUTE_VARIANT_BLOCK  ? "block"
                 : v == MEMRA_ROUTE_VARIANT_WARP ? "team"
                                                 : "team unscreened",
                 us, gbs, 100.0 * gbs / H200_SPEC_GBS);
        row("route_prefill", what, gbs, "GB/s", copy_gbs, "copy");
    }
    /* memra's own choice of kernel through the modules compiled for this
     * spec (MEMRA_ROUTE_SPECIALIZE). */
    {
        MK(memra_route_prepare_layer(eng, 0, &spec, NULL, s)); /* the generic, for the ratio */
        const double plain = prefill_us(eng, &b, T, &spec, &sl, NULL, NULL, 0, e0, e1, s);
        eng->route_specialize = 1;
        MK(memra_route_prepare_layer(eng, 0, &spec, NULL, s));
        const double us = prefill_us(eng, &b, T, &spec, &sl, NULL, NULL, 0, e0, e1, s);
        eng->route_specialize = 0; /* memra_bench_route's generic rows */
        char what[240];
        snprintf(what, sizeof what, "prefill %s, %u tokens, fused, specialised: %.1f us", c->name,
                 T, us);
        row("route_prefill", what, us, "us", plain, "generic");
    }
    /* The fused call with the expert-sorted layout (block_size 64, vLLM's
     * prefill BLOCK_SIZE_M), memra's own choice of kernel. */
    {
        const memra_layout_spec ls = {.n_expert = spec.n_expert, .block_size = 64};
        uint64_t len, blocks, ws;
        MK(memra_layout_sizes((uint32_t)np, &ls, &len, &blocks));
        memra_layout_tile_pairs = MEMRA_LAYOUT_TILE_MIN; /* the most tiles: room for every size */
        MK(memra_layout_workspace_bytes((uint32_t)np, &ls, &ws));
        memra_layout_tile_pairs = 0;
        CUdeviceptr sorted, eids, post, wsp = 0;
        CK(d->cuMemAlloc(&sorted, len * 4 + 4));
        CK(d->cuMemAlloc(&eids, blocks * 4 + 4));
        CK(d->cuMemAlloc(&post, 4));
        if (ws)
            CK(d->cuMemAlloc(&wsp, ws));
        const memra_layout lo = {
            .sorted_ids = sorted, .expert_ids = eids, .n_post_pad = post, .workspace = wsp};
        const double us = prefill_us(eng, &b, T, &spec, &sl, &ls, &lo, 0, e0, e1, s);
        char what[240];
        snprintf(what, sizeof what, "prefill %s, %u tokens, fused + layout (block_size 64)",
                 c->name, T);
        row("route_prefill", what, us, "us", 0, "");
        /* Where the layout is cheaper by its own launches than by the
         * routing launch's last block (a team kernel's block is 4 warps,
         * memra_layout_tables' one-block kernel 16, its three launches
         * many blocks), spec-compiled as memra routes by default. */
        eng->route_specialize = 1;
        MK(memra_route_prepare_layer(eng, 0, &spec, NULL, s));
        const double fused = prefill_us(eng, &b, T, &spec, &sl, &ls, &lo, 0, e0, e1, s);
        const double split = prefill_us(eng, &b, T, &spec, &sl, &ls, &lo, 1, e0, e1, s);
        eng->route_specialize = 0;
        snprintf(what, sizeof what, "prefill %s, %u tokens, fused + layout, specialised", c->name,
                 T);
        row("route_prefill", what, fused, "us", us, "generic");
        snprintf(what, sizeof what,
                 "prefill %s, %u tokens, routing then memra_layout_tables, specialised", c->name,
                 T);
        row("route_prefill", what, split, "us", fused, "fused");
        /* The three launches' tile sizes, each against memra's choice. */
        for (uint32_t tile = MEMRA_LAYOUT_TILE_MIN;
             np > MEMRA_LAYOUT_ONE_LAUNCH && tile <= MEMRA_LAYOUT_TILE_MAX; tile *= 2) {
            memra_layout_tile_pairs = tile, eng->route_specialize = 1;
            const double t_us = prefill_us(eng, &b, T, &spec, &sl, &ls, &lo, 1, e0, e1, s);
            memra_layout_tile_pairs = 0, eng->route_specialize = 0;
            snprintf(what, sizeof what,
                     "prefill %s, %u tokens, routing then memra_layout_tables, tiles of %u pairs",
                     c->name, T, tile);
            row("route_prefill", what, t_us, "us", split, "memra's tile");
        }
        d->cuMemFree(lo.sorted_ids), d->cuMemFree(lo.expert_ids), d->cuMemFree(lo.n_post_pad);
        if (lo.workspace)
            d->cuMemFree(lo.workspace);
    }
    d->cuEventDestroy(e0), d->cuEventDestroy(e1);
    for (int k = 0; k < sets; k++) {
        d->cuMemFree(logits[k]), d->cuMemFree(sel[k]), d->cuMemFree(selw[k]);
        d->cuMemFree(ptrs[k]), d->cuMemFree(scl[k]);
    }
}

/* The table kernel's own cost per node of a 32-node graph, beside an empty
 * kernel's, with and without PDL. */
static void table_node_cost(memra_engine *eng, CUfunction empty_pdl, CUstream s, int pdl_ok)
{
    const uint32_t n = 8, E = 256;
    memra_devptr dsel, dselw, dptrs, dscl;
    MK(memra_alloc(eng, n * 4, &dsel));
    MK(memra_alloc(eng, n * 4, &dselw));
    MK(memra_alloc(eng, n * 24, &dptrs));
    MK(memra_alloc(eng, n * 12, &dscl));
    int32_t sel[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    float selw[8] = {1, 1, 1, 1, 1, 1, 1, 1}, planes[3 * 256];
    route_case_planes(E, planes);
    MK(memra_upload_i32(eng, dsel, sel, n));
    MK(memra_upload_f32(eng, dselw, selw, n));
    const memra_vrows_macros mac = {{planes, planes + E, planes + 2 * E}};
    const memra_vrows_slabs sl = GATE_SERVING_SLABS;
    MK(memra_vrows_prepare_layer(eng, 0, E, &mac, s));
    CK(d->cuStreamSynchronize(s));
    for (int pdl = 0; pdl <= pdl_ok; pdl++) {
        double t[2];
        for (int which = 0; which < 2; which++) {
            CUgraph g;
            CUgraphExec ge;
            MK(memra_engine_set_pdl(eng, pdl, NULL));
            CK(d->cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
            for (int i = 0; i < 32; i++) {
                if (which)
                    MK(memra_vrows_tables(eng, dsel, dselw, n, E, 0, &mac, &sl, dptrs, dscl, s));
                else
                    launch_ex(empty_pdl, 1, 32, NULL, s, pdl);
            }
            CK(d->cuStreamEndCapture(s, &g));
            MK(memra_engine_set_pdl(eng, 0, NULL));
            CK(d->cuGraphInstantiateWithFlags(&ge, g, 0));
            CUevent e0, e1;
            CK(d->cuEventCreate(&e0, CU_EVENT_DEFAULT));
            CK(d->cuEventCreate(&e1, CU_EVENT_DEFAULT));
            for (int i = 0; i < 10; i++)
                CK(d->cuGraphLaunch(ge, s));
            double v[21];
            const int reps = quick ? 7 : 21;
            for (int r = 0; r < reps; r++) {
                CK(d->cuEventRecord(e0, s));
                for (int i = 0; i < 20; i++)
                    CK(d->cuGraphLaunch(ge, s));
                CK(d->cuEventRecord(e1, s));
                CK(d->cuEventSynchronize(e1));
                float ms;
                CK(d->cuEventElapsedTime(&ms, e0, e1));
                v[r] = (double)ms * 1e3 / 20 / 32;
            }
            t[which] = median(v, reps);
            d->cuEventDestroy(e0), d->cuEventDestroy(e1);
            d->cuGraphExecDestroy(ge), d->cuGraphDestroy(g);
        }
        char what[160];
        snprintf(what, sizeof what, "32-node graph%s: empty kernel, per node", pdl ? ", PDL" : "");
        row("route_nodes", what, t[0], "us", 0, "");
        snprintf(what, sizeof what, "32-node graph%s: table kernel (8 pairs), per node",
                 pdl ? ", PDL" : "");
        row("route_nodes", what, t[1], "us", t[0], "empty kernel");
    }
    memra_free(eng, dsel), memra_free(eng, dselw), memra_free(eng, dptrs), memra_free(eng, dscl);
}

void memra_bench_route(memra_engine *eng, int sm, CUstream s)
{
    /* The rows without "specialised" in their names measure the generic
     * kernels, whatever MEMRA_ROUTE_SPECIALIZE says; the specialised rows
     * turn it on for their own calls. */
    const int specialize = eng->route_specialize;
    eng->route_specialize = 0;
    int pdl_ok = 0;
    MK(memra_engine_set_pdl(eng, 1, &pdl_ok));
    MK(memra_engine_set_pdl(eng, 0, NULL));
    printf("\nrouting per decode layer: 32 layers in one CUDA graph, each a router step + the same "
           "consumer kernel (PDL %s)\n",
           pdl_ok ? "measured too" : "not available here");
    CUmodule mod;
    CUfunction consume_fn = compile_cubin(consume_src, "memra_bench_consume", sm, NULL, &mod);
    CUfunction empty_pdl;
    CK(d->cuModuleGetFunction(&empty_pdl, mod, "memra_bench_empty_pdl"));
    table_node_cost(eng, empty_pdl, s, pdl_ok);
    static const uint32_t tokens[] = {1, 8, 64, 256};
    for (size_t c = 0; c < N_CFGS; c++)
        for (size_t t = 0; t < sizeof tokens / sizeof tokens[0]; t++)
            if (cfg_selected(&cfgs[c]))
                decode_config(eng, &cfgs[c], tokens[t], consume_fn, s, pdl_ok);

    /* The ceiling for prefill: a device-to-device copy's read rate. */
    const double copy = copy_gbs(s, 10);
    printf("\nrouting, prefill: one launch per batch (fused), logits from DRAM\n");
    row("route_prefill", "device-to-device copy (read+write)", copy, "GB/s", 0, "");
    /* 512-2048: where the block kernel hands over to the team kernel. */
    static const uint32_t big[] = {512, 1024, 2048, 4096, 16384, 65536};
    for (size_t c = 0; c < N_CFGS; c++)
        for (size_t t = 0; t < sizeof big / sizeof big[0]; t++)
            if (cfg_selected(&cfgs[c]))
                prefill_config(eng, &cfgs[c], big[t], s, copy);
    d->cuModuleUnload(mod);
    eng->route_specialize = specialize;
}
