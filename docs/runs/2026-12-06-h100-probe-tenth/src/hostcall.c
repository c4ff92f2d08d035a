/* Scratch probe: host cost of one memra_route_tables call, and GPU time of
 * the same 8 calls launched directly (as bench_peers' prefill) and from a
 * captured graph (no host cost). */
#include <cuda.h>
#include <memra/memra.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define CK(x) do { CUresult r_ = (x); if (r_) { printf("%s: %d\n", #x, r_); exit(1); } } while (0)
#define MK(x) do { memra_status s_ = (x); if (s_) { printf("%s: %s\n", #x, memra_last_error()); exit(1); } } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
int main(void)
{
    CK(cuInit(0));
    CUdevice dev; CK(cuDeviceGet(&dev, 0));
    CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
    memra_engine *eng; MK(memra_engine_create(0, &eng));
    CUstream s; CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    struct { const char *name; uint32_t E, K; memra_route_scoring sc; } cfg[] = {
        {"Mixtral", 8, 2, MEMRA_ROUTE_SOFTMAX}, {"Qwen3-MoE", 128, 8, MEMRA_ROUTE_SOFTMAX}};
    const uint32_t Ts[] = {4096, 16384, 65536};
    const memra_vrows_slabs sl = {{1u << 20, 2u << 20, 3u << 20}, {4096, 4096, 4096}};
    CUevent e0, e1; CK(cuEventCreate(&e0, 0)); CK(cuEventCreate(&e1, 0));
    for (int c = 0; c < 2; c++)
        for (int ti = 0; ti < 3; ti++) {
            const uint32_t T = Ts[ti], E = cfg[c].E, K = cfg[c].K;
            memra_route_spec sp; memset(&sp, 0, sizeof sp);
            sp.n_expert = E, sp.top_k = K, sp.n_group = 1, sp.topk_group = 1, sp.scoring = cfg[c].sc;
            sp.logits_dtype = MEMRA_LOGITS_F32, sp.renormalize = 1, sp.routed_scaling_factor = 1.0f;
            CUdeviceptr lg, sel, selw, ptrs, scl;
            CK(cuMemAlloc(&lg, (size_t)T * E * 4)); CK(cuMemAlloc(&sel, (size_t)T * K * 4));
            CK(cuMemAlloc(&selw, (size_t)T * K * 4)); CK(cuMemAlloc(&ptrs, (size_t)T * K * 24));
            CK(cuMemAlloc(&scl, (size_t)T * K * 12));
            float *h = malloc((size_t)T * E * 4);
            for (size_t i = 0; i < (size_t)T * E; i++) h[i] = (float)((i * 2654435761u) % 1000) / 100.0f;
            CK(cuMemcpyHtoD(lg, h, (size_t)T * E * 4)); free(h);
            MK(memra_route_prepare_layer(eng, 0, &sp, NULL, (memra_stream)s));
#define CALL() MK(memra_route_tables(eng, lg, T, &sp, 0, NULL, &sl, sel, selw, ptrs, scl, (memra_stream)s))
            for (int i = 0; i < 20; i++) CALL();
            CK(cuStreamSynchronize(s));
            /* host: 400 calls, no sync between */
            double t0 = now();
            for (int i = 0; i < 400; i++) CALL();
            double t1 = now();
            CK(cuStreamSynchronize(s));
            double t2 = now();
            /* direct, 8 calls an event pair */
            double v[25];
            for (int r = 0; r < 25; r++) {
                CK(cuEventRecord(e0, s)); for (int i = 0; i < 8; i++) CALL(); CK(cuEventRecord(e1, s));
                CK(cuEventSynchronize(e1)); float ms; CK(cuEventElapsedTime(&ms, e0, e1)); v[r] = ms * 1e3 / 8;
            }
            qsort(v, 25, sizeof v[0], cmp); const double direct = v[12];
            /* graph of 8 calls */
            CUgraph g; CUgraphExec ge;
            CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
            for (int i = 0; i < 8; i++) CALL();
            CK(cuStreamEndCapture(s, &g)); CK(cuGraphInstantiate(&ge, g, 0));
            CK(cuGraphLaunch(ge, s)); CK(cuStreamSynchronize(s));
            for (int r = 0; r < 25; r++) {
                CK(cuEventRecord(e0, s)); CK(cuGraphLaunch(ge, s)); CK(cuEventRecord(e1, s));
                CK(cuEventSynchronize(e1)); float ms; CK(cuEventElapsedTime(&ms, e0, e1)); v[r] = ms * 1e3 / 8;
            }
            qsort(v, 25, sizeof v[0], cmp); const double graph = v[12];
            /* a bare driver enqueue for scale: cuMemsetD32Async of 1 word */
            double t3 = now();
            for (int i = 0; i < 400; i++) CK(cuMemsetD32Async(sel, 0, 1, s));
            double t4 = now();
            CK(cuStreamSynchronize(s));
            printf("%-10s T=%6u: host %.2f us/call (memset enqueue %.2f), 400 calls end-to-end %.2f us/call, "
                   "direct 8-call %.2f us/call, graph 8-call %.2f us/call\n",
                   cfg[c].name, T, (t1 - t0) / 400, (t4 - t3) / 400, (t2 - t0) / 400, direct, graph);
            cuGraphExecDestroy(ge); cuGraphDestroy(g);
            cuMemFree(lg); cuMemFree(sel); cuMemFree(selw); cuMemFree(ptrs); cuMemFree(scl);
        }
    memra_engine_destroy(eng);
    return 0;
}
