/* Routing in a decode step: 32 layers in one CUDA graph, each layer a
 * router step and a small consumer kernel that reads what it produced, at
 * 1, 8 and 64 tokens. Side by side in one run:
 *   fused     memra_moe_route_tables: logits to sel, selw and the tables;
 *   two-step  the top-k kernel (same config, same compile), then
 *             memra_moe_vrows_tables_from_sel;
 *   top-k     the top-k kernel alone (its consumer reads sel and selw).
 * GPU time per layer from CUDA events around graph replays. */
#include <string.h>

#include "bench.h"
#include "gate_cases.h"
#include "route_abi.h"
#include "route_cases.h"

#define LAYERS 32

static const char consume_src[] =
    "extern \"C\" __global__ void memra_bench_consume(const unsigned long long *p,\n"
    "    const float *s, unsigned n, float *out)\n"
    "{\n"
    "    float acc = 0.0f;\n"
    "    for (unsigned i = threadIdx.x; i < n; i += blockDim.x)\n"
    "        acc += s[i] + (float)(p[i] & 0xffu);\n"
    "    if (acc == 1234.5f) out[0] = acc;\n"
    "}\n"
    "extern \"C\" __global__ void memra_bench_consume_sel(const int *sel, const float *w,\n"
    "    unsigned n, float *out)\n"
    "{\n"
    "    float acc = 0.0f;\n"
    "    for (unsigned i = threadIdx.x; i < n; i += blockDim.x)\n"
    "        acc += w[i] + (float)sel[i];\n"
    "    if (acc == 1234.5f) out[0] = acc;\n"
    "}\n";

typedef struct layer {
    CUdeviceptr logits, sel, selw, ptrs, scl, bias;
    memra_route_args topk;
} layer;

typedef struct setup {
    memra_engine *eng;
    memra_route_spec spec;
    memra_vrows_macros mac;
    memra_vrows_slabs sl;
    uint32_t T;
    layer L[LAYERS];
    CUfunction consume, consume_sel;
    CUdeviceptr out;
    CUstream s;
} setup;

enum { FUSED, TWO_STEP, TOPK };

static void consume(setup *su, CUfunction f, CUdeviceptr a, CUdeviceptr b, unsigned n)
{
    void *args[] = {&a, &b, &n, &su->out};
    CK(d->cuLaunchKernel(f, 1, 1, 1, 128, 1, 1, 0, su->s, args, NULL));
}

static void topk(setup *su, layer *l)
{
    size_t size = MEMRA_ROUTE_PARAM_BYTES;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &l->topk, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    CK(d->cuLaunchKernel(atomic_load(&su->eng->kernel[MEMRA_KERNEL_ROUTE_TOPK]),
                         memra_route_grid(su->T), 1, 1, MEMRA_ROUTE_BLOCK, 1, 1, 0, su->s, NULL,
                         extra));
}

static void step(setup *su, int variant)
{
    const unsigned np = su->T * su->spec.top_k;
    for (int il = 0; il < LAYERS; il++) {
        layer *l = &su->L[il];
        if (variant == FUSED) {
            MK(memra_moe_route_tables(su->eng, l->logits, su->T, &su->spec, il, &su->mac, &su->sl,
                                      l->sel, l->selw, l->ptrs, l->scl, su->s));
        } else {
            topk(su, l);
            if (variant == TWO_STEP)
                MK(memra_moe_vrows_tables_from_sel(su->eng, l->sel, l->selw, np, su->spec.n_expert,
                                                   LAYERS + il, &su->mac, &su->sl, l->ptrs, l->scl,
                                                   su->s));
        }
        if (variant == TOPK)
            consume(su, su->consume_sel, l->sel, l->selw, np);
        else
            consume(su, su->consume, l->ptrs, l->scl, 3 * np);
    }
}

/* Per-layer GPU time of a graph holding one decode step. */
static double graph_layer_us(setup *su, int variant)
{
    CUgraph g;
    CUgraphExec ge;
    CK(d->cuStreamBeginCapture(su->s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    step(su, variant);
    CK(d->cuStreamEndCapture(su->s, &g));
    CK(d->cuGraphInstantiateWithFlags(&ge, g, 0));
    CUevent e0, e1;
    CK(d->cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CK(d->cuEventCreate(&e1, CU_EVENT_DEFAULT));
    for (int i = 0; i < 20; i++)
        CK(d->cuGraphLaunch(ge, su->s));
    const int reps = quick ? 10 : 40, per = 20;
    double v[40];
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

static void bench_config(memra_engine *eng, size_t ci, uint32_t T, CUfunction c1, CUfunction c2,
                         CUstream s)
{
    static setup su;
    static float bias[MEMRA_ROUTE_MAX_EXPERT], planes[3 * MEMRA_ROUTE_MAX_EXPERT];
    memset(&su, 0, sizeof su);
    const route_case *rc = &route_cases[ci];
    su.eng = eng, su.spec = rc->spec, su.T = T, su.s = s, su.consume = c1, su.consume_sel = c2;
    route_case_planes(su.spec.n_expert, planes);
    su.mac = (memra_vrows_macros){
        {planes, planes + su.spec.n_expert, planes + 2 * (size_t)su.spec.n_expert}};
    if (rc->with_bias) {
        route_case_bias(su.spec.n_expert, bias);
        su.spec.bias = bias;
    }
    su.sl = (memra_vrows_slabs)GATE_SERVING_SLABS;
    const size_t np = (size_t)T * su.spec.top_k;
    const size_t lb = (size_t)T * su.spec.n_expert * (su.spec.logits_dtype ? 2 : 4);
    CK(d->cuMemAlloc(&su.out, 64));
    for (int il = 0; il < LAYERS; il++) {
        layer *l = &su.L[il];
        CK(d->cuMemAlloc(&l->logits, lb));
        CK(d->cuMemAlloc(&l->sel, np * 4));
        CK(d->cuMemAlloc(&l->selw, np * 4));
        CK(d->cuMemAlloc(&l->ptrs, 3 * np * 8));
        CK(d->cuMemAlloc(&l->scl, 3 * np * 4));
        void *logits = route_case_logits(&su.spec, T, 77 + (uint64_t)il, 0);
        CK(d->cuMemcpyHtoDAsync(l->logits, logits, lb, s));
        CK(d->cuStreamSynchronize(s));
        free(logits);
        MK(memra_route_prepare_layer(eng, il, &su.spec, &su.mac, s));
        /* the two-step path's table kernel mirrors the planes alone */
        MK(memra_vrows_prepare_layer(eng, LAYERS + il, su.spec.n_expert, &su.mac, s));
        CK(d->cuStreamSynchronize(s));
        /* The top-k kernel's own launch, as memra_moe_route_tables makes it. */
        const CUdeviceptr planes_dev = eng->slots[MEMRA_MIRROR_ROUTE][il]->dev;
        const uint64_t E4 = (uint64_t)su.spec.n_expert * 4;
        l->topk = (memra_route_args){
            .logits = l->logits,
            .bias = su.spec.bias ? planes_dev + 3 * E4 : 0,
            .mg = planes_dev,
            .mu = planes_dev + E4,
            .md = planes_dev + 2 * E4,
            .pg = su.sl.base[0],
            .pu = su.sl.base[1],
            .pd = su.sl.base[2],
            .sg = su.sl.stride[0],
            .su = su.sl.stride[1],
            .sd = su.sl.stride[2],
            .sel = l->sel,
            .selw = l->selw,
            .ptrs = l->ptrs,
            .scl = l->scl,
            .faults = eng->faults,
            .n_tokens = T,
            .n_expert = su.spec.n_expert,
            .top_k = su.spec.top_k,
            .n_group = su.spec.n_group,
            .topk_group = su.spec.topk_group,
            .flags = (su.spec.scoring == MEMRA_ROUTE_SIGMOID ? MEMRA_ROUTE_FLAG_SIGMOID : 0u) |
                     (su.spec.logits_dtype ? MEMRA_ROUTE_FLAG_BF16 : 0u) |
                     (su.spec.renormalize ? MEMRA_ROUTE_FLAG_RENORM : 0u),
            .scale = su.spec.routed_scaling_factor};
    }
    const double fused = graph_layer_us(&su, FUSED);
    const double two = graph_layer_us(&su, TWO_STEP);
    const double alone = graph_layer_us(&su, TOPK);
    char what[200];
    snprintf(what, sizeof what, "%s, %u token(s): top-k kernel alone", rc->name, T);
    row("route", what, alone, "us/layer", 0, "");
    snprintf(what, sizeof what, "%s, %u token(s): two-step (top-k, then table kernel)", rc->name,
             T);
    row("route", what, two, "us/layer", alone, "top-k alone");
    snprintf(what, sizeof what, "%s, %u token(s): fused (memra_moe_route_tables)", rc->name, T);
    row("route", what, fused, "us/layer", alone, "top-k alone");
    snprintf(what, sizeof what, "%s, %u token(s): fused vs two-step", rc->name, T);
    row("route", what, fused / two, "ratio", 0, "");
    for (int il = 0; il < LAYERS; il++) {
        layer *l = &su.L[il];
        d->cuMemFree(l->logits), d->cuMemFree(l->sel), d->cuMemFree(l->selw);
        d->cuMemFree(l->ptrs), d->cuMemFree(l->scl);
    }
    d->cuMemFree(su.out);
}

void memra_bench_route(memra_engine *eng, int sm, CUstream s)
{
    printf("\nrouting per decode layer: 32 layers in one CUDA graph, each router step + a "
           "consumer kernel\n");
    CUmodule mod;
    CUfunction c1 = compile_cubin(consume_src, "memra_bench_consume", sm, NULL, &mod);
    CUfunction c2;
    CK(d->cuModuleGetFunction(&c2, mod, "memra_bench_consume_sel"));
    static const uint32_t tokens[] = {1, 8, 64};
    static const size_t cases[] = {2, 0}; /* DeepSeek-V3, softmax top-8 of 64 */
    for (size_t c = 0; c < 2; c++)
        for (size_t t = 0; t < 3; t++)
            bench_config(eng, cases[c], tokens[t], c1, c2, s);
    d->cuModuleUnload(mod);
}
