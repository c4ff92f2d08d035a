/* Scratch probe: host microseconds of the driver calls a memra routing call makes. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define CK(x) do { CUresult r_ = (x); if (r_) { printf("%s: %d\n", #x, r_); exit(1); } } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec * 1e-3; }
static const char ptx[] =
    ".version 8.0\n.target sm_90\n.address_size 64\n"
    ".visible .entry k(.param .align 8 .b8 p[296])\n{\n ret;\n}\n"
    ".visible .entry k8(.param .u64 a)\n{\n ret;\n}\n";
int main(void)
{
    CK(cuInit(0));
    CUdevice dev; CK(cuDeviceGet(&dev, 0));
    CUcontext ctx; CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
    CUstream s; CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUmodule m; CK(cuModuleLoadData(&m, ptx));
    CUfunction f, f8; CK(cuModuleGetFunction(&f, m, "k")); CK(cuModuleGetFunction(&f8, m, "k8"));
    const int N = 20000;
    unsigned char buf[296]; memset(buf, 0, sizeof buf);
    size_t size = sizeof buf;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
    void *params[] = {buf};
    unsigned long long u; CUcontext cur; CUstreamCaptureStatus cs;
    for (int rep = 0; rep < 2; rep++) {
        double t0 = now(); for (int i = 0; i < N; i++) CK(cuCtxGetId(ctx, &u));
        double t1 = now(); for (int i = 0; i < N; i++) CK(cuCtxGetCurrent(&cur));
        double t2 = now(); for (int i = 0; i < N; i++) CK(cuStreamIsCapturing(s, &cs));
        double t3 = now(); for (int i = 0; i < N; i++) CK(cuStreamGetId(s, &u));
        double t4 = now();
        double la = 0, lb = 0, lc = 0;
        for (int j = 0; j < N / 500; j++) {
            double a = now(); for (int i = 0; i < 500; i++) CK(cuLaunchKernel(f, 1024, 1, 1, 128, 1, 1, 0, s, NULL, extra));
            la += now() - a; CK(cuStreamSynchronize(s));
            a = now(); for (int i = 0; i < 500; i++) CK(cuLaunchKernel(f, 1024, 1, 1, 128, 1, 1, 0, s, params, NULL));
            lb += now() - a; CK(cuStreamSynchronize(s));
            a = now(); for (int i = 0; i < 500; i++) CK(cuLaunchKernel(f8, 1024, 1, 1, 128, 1, 1, 0, s, params, NULL));
            lc += now() - a; CK(cuStreamSynchronize(s));
        }
        double t5 = t4 + la, t6 = t5 + lb, t7 = t6 + lc;
        CK(cuStreamSynchronize(s));
        printf("us/call: cuCtxGetId %.3f, cuCtxGetCurrent %.3f, cuStreamIsCapturing %.3f, cuStreamGetId %.3f, "
               "cuLaunchKernel 296 B by extra %.3f, 296 B by kernelParams %.3f, 8 B param %.3f\n",
               (t1 - t0) / N, (t2 - t1) / N, (t3 - t2) / N, (t4 - t3) / N, (t5 - t4) / N, (t6 - t5) / N, (t7 - t6) / N);
    }
    return 0;
}
