/* bench_peers: memra's routing against the routers serving engines ship, in one process on one
 * GPU (issue #28 item 1; the align step of issue #31 item 5).
 *
 * Arms: memra_route_tables (routing + the three pointer/scale planes, one launch), FlashInfer's
 * NoAuxTc, vLLM's topk_softmax / topk_sigmoid, SGLang's moe_fused_gate (this folder),
 * each on the configurations it serves. Sections:
 *   decode   1, 8, 64, 256 tokens: 32 layers in one CUDA graph, each layer the arm's router
 *            launch and the same small consumer kernel reading what the arm wrote; the
 *            consumer-only graph of the same launch mode is subtracted. With and without PDL.
 *   prefill  4096, 16384, 65536 tokens: one call, from DRAM (L2 flushed, buffer sets rotated),
 *            beside a device-to-device copy of the same logit bytes.
 *   exact    4096 tokens per configuration: each arm's expert sets against memra's and against
 *            an fp64 host reference; memra's device output against its host arm, bit for bit.
 *   align    moe_align_block_size after the best peer router (decode graph) and alone
 *            (prefill), with a hook for memra's fused layout.
 * README.md (this folder) says how every number is derived. Host C++ with the CUDA runtime:
 * this is a benchmark, not the library; memra is used through its public API only. */
#include <cuda_runtime.h>
#include <cub/block/block_scan.cuh>
#include <memra/memra.h>

/* The model families, as every routing benchmark and the library's tests take them: macros only,
 * no library internals. */
#include "../../src/route/route_families.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

#include "peers.h"

namespace
{

/* ------------------------------------------------------------------ errors */

/* One arm's measurement failed; the others carry on. */
struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};
/* The GPU context is unusable (a sticky error, a hung kernel): nothing more can be measured. */
struct Fatal : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::string strf(const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

void cu_check(cudaError_t r, const char *what, const char *file, int line)
{
    if (r != cudaSuccess)
        throw Failure(strf("%s:%d: %s: %s (%s)", file, line, what, cudaGetErrorName(r),
                           cudaGetErrorString(r)));
}
#define CU(x) cu_check((x), #x, __FILE__, __LINE__)

void mk_check(memra_status st, const char *what, const char *file, int line)
{
    if (st != MEMRA_OK)
        throw Failure(strf("%s:%d: %s: %s: %s", file, line, what, memra_status_string(st),
                           memra_last_error()));
}
#define MK(x) mk_check((x), #x, __FILE__, __LINE__)

double now_s()
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

/* ------------------------------------------------------------------ options and state */

struct Options {
    const char *json = nullptr;
    bool dry = false, quick = false;
    std::string sections = "decode,prefill,exact,align";
    std::string configs; /* empty: all */
    double wait_timeout_s = 30, budget_s = 300;
} opt;

struct State {
    cudaStream_t s = nullptr;
    memra_engine *eng = nullptr;
    std::string memra_err; /* why memra's arm cannot run at all ("" when it can) */
    int memra_pdl = 0;     /* memra_engine_set_pdl says PDL is in effect */
    float *sink = nullptr; /* the consumer's never-taken store */
    void *flush = nullptr; /* L2 flush buffer */
    size_t flush_bytes = 256u << 20;
    double t0 = 0;
    std::string device;
    int sm = 0;
    bool dead = false; /* the context is lost: free nothing, wait for nothing */
} st;

[[noreturn]] void fatal(const std::string &msg)
{
    st.dead = true;
    throw Fatal(msg);
}

double elapsed()
{
    return now_s() - st.t0;
}
bool over_budget()
{
    return elapsed() > opt.budget_s;
}

/* Waits for an event with a bound: a kernel that never ends must not hang the run. */
void wait_event(cudaEvent_t e)
{
    const double t0 = now_s();
    for (long spin = 0;; spin++) {
        const cudaError_t r = cudaEventQuery(e);
        if (r == cudaSuccess)
            return;
        if (r != cudaErrorNotReady)
            fatal(strf("waiting for the GPU: %s (%s)", cudaGetErrorName(r), cudaGetErrorString(r)));
        if (now_s() - t0 > opt.wait_timeout_s)
            fatal(
                strf("the GPU did not finish within %.0f s (a hung kernel?)", opt.wait_timeout_s));
        if (spin > 64)
            usleep(20);
    }
}

struct Event {
    cudaEvent_t e = nullptr;
    Event()
    {
        CU(cudaEventCreate(&e));
    }
    ~Event()
    {
        if (e && !st.dead)
            cudaEventDestroy(e);
    }
    Event(const Event &) = delete;
    Event &operator=(const Event &) = delete;
};

void sync_stream()
{
    Event e;
    CU(cudaEventRecord(e.e, st.s));
    wait_event(e.e);
}

/* Every copy goes through st.s and is waited for: the legacy stream's cudaMemcpy does not
 * order against a non-blocking stream (and a pageable upload may return before it lands). */
void h2d(void *dst, const void *src, size_t n)
{
    CU(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, st.s));
    sync_stream();
}
void d2h(void *dst, const void *src, size_t n)
{
    CU(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, st.s));
    sync_stream();
}
void d2d(void *dst, const void *src, size_t n)
{
    CU(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, st.s));
    sync_stream();
}

/* After a failed arm: is the context still usable? A sticky error (an illegal address, a
 * kernel fault) makes every later call fail, so stop there. */
void health_check(const std::string &after)
{
    (void)cudaGetLastError();
    cudaEvent_t e;
    cudaError_t r = cudaEventCreate(&e);
    if (r == cudaSuccess) {
        r = cudaEventRecord(e, st.s);
        if (r == cudaSuccess) {
            try {
                wait_event(e);
            } catch (const Fatal &f) {
                cudaEventDestroy(e);
                fatal(strf("after %s: %s", after.c_str(), f.what()));
            }
        }
        cudaEventDestroy(e);
    }
    if (r != cudaSuccess)
        fatal(strf("after %s the CUDA context is unusable: %s", after.c_str(),
                   cudaGetErrorString(r)));
    (void)cudaGetLastError();
}

struct DevMem {
    void *p = nullptr;
    size_t bytes = 0;
    DevMem() = default;
    explicit DevMem(size_t n) : bytes(n)
    {
        if (n)
            CU(cudaMalloc(&p, n));
    }
    ~DevMem()
    {
        if (p && !st.dead)
            cudaFree(p);
    }
    DevMem(DevMem &&o) noexcept : p(o.p), bytes(o.bytes)
    {
        o.p = nullptr;
    }
    DevMem &operator=(DevMem &&o) noexcept
    {
        if (this != &o) {
            if (p && !st.dead)
                cudaFree(p);
            p = o.p, bytes = o.bytes, o.p = nullptr;
        }
        return *this;
    }
    DevMem(const DevMem &) = delete;
    template <typename T> T *as() const
    {
        return static_cast<T *>(p);
    }
};

/* ------------------------------------------------------------------ JSON */

std::vector<std::string> json_rows;
std::string json_meta;

std::string jesc(const std::string &s)
{
    std::string o;
    for (unsigned char c : s) {
        if (c == '"' || c == '\\')
            o += '\\', o += (char)c;
        else if (c < 0x20)
            o += strf("\\u%04x", c);
        else
            o += (char)c;
    }
    return o;
}
std::string jnum(double v)
{
    return std::isfinite(v) ? strf("%.6g", v) : "null";
}

void json_write()
{
    if (!opt.json)
        return;
    const std::string tmp = std::string(opt.json) + ".tmp";
    FILE *f = fopen(tmp.c_str(), "w");
    if (!f) {
        fprintf(stderr, "bench_peers: cannot write %s\n", tmp.c_str());
        return;
    }
    fprintf(f, "{\n  \"meta\": %s,\n  \"rows\": [\n", json_meta.c_str());
    for (size_t i = 0; i < json_rows.size(); i++)
        fprintf(f, "    %s%s\n", json_rows[i].c_str(), i + 1 < json_rows.size() ? "," : "");
    fprintf(f, "  ]\n}\n");
    fclose(f);
    if (rename(tmp.c_str(), opt.json) != 0)
        fprintf(stderr, "bench_peers: cannot rename %s\n", tmp.c_str());
}

/* ------------------------------------------------------------------ configurations, arms */

struct Cfg {
    const char *name;
    int E;
    int sigmoid;
    int n_group, topk_group, top_k;
    int bias;
    float scale;
};
const Cfg CFGS[] = {
/* IN_PLACE, MACROS: the library's test inputs, not the spec */
#define MEMRA_X(name, E, K, NG, TG, SIG, SCALE, IN_PLACE, MACROS)                                  \
    {name, E, SIG, NG, TG, K, SIG, SCALE},
    MEMRA_ROUTE_FAMILIES(MEMRA_X)
#undef MEMRA_X
};
constexpr int N_CFGS = sizeof CFGS / sizeof CFGS[0];
constexpr int LAYERS = 32;
const int DECODE_T[] = {1, 8, 64, 256};
const int PREFILL_T[] = {4096, 16384, 65536};
constexpr int EXACT_T = 4096;

std::string cfg_desc(const Cfg &c)
{
    std::string s = strf("%d experts, %s", c.E, c.sigmoid ? "sigmoid" : "softmax");
    if (c.bias)
        s += " + bias";
    if (c.n_group > 1)
        s += strf(", %d groups / top-%d groups (top-2 sum)", c.n_group, c.topk_group);
    s += strf(", top-%d, renormalize, x%g", c.top_k, (double)c.scale);
    return s;
}

enum Arm { A_MEMRA, A_FI, A_VLLM_SM, A_VLLM_SIG, A_SGL, N_ARMS };
const char *ARM_NAME[N_ARMS] = {"memra", "FlashInfer NoAuxTc", "vLLM topk_softmax",
                                "vLLM topk_sigmoid", "SGLang moe_fused_gate"};
const char *ARM_KEY[N_ARMS] = {"memra", "flashinfer_noauxtc", "vllm_topk_softmax",
                               "vllm_topk_sigmoid", "sglang_moe_fused_gate"};
const char *ARM_COL[N_ARMS] = {"memra", "FlashInfer", "vLLM softmax", "vLLM sigmoid",
                               "SGLang gate"};
bool arm_has_pdl(Arm a)
{
    return a == A_MEMRA || a == A_FI;
}

/* Peers the task names that this folder does not build (README.md says why). */
struct Missing {
    const char *peer, *serves;
};
const Missing MISSING[] = {
    {"SGLang kimi_k2_moe_fused_gate (sgl-kernel/csrc/moe/kimi_k2_moe_fused_gate.cu)", "Kimi-K2"},
    {"SGLang topk_sigmoid (sgl-kernel/csrc/moe/moe_topk_sigmoid_kernels.cu)", "Kimi-K2, GLM-4.5"},
    {"vLLM moe_align_block_size (csrc/moe/moe_align_sum_kernels.cu)", "align section"},
    {"SGLang moe_align_block_size (sgl-kernel/csrc/moe/moe_align_kernel.cu)", "align section"},
};

bool is_pow2(int x)
{
    return x > 0 && (x & (x - 1)) == 0;
}
/* vLLM's launcher: a fused kernel for powers of two up to 512 and 192/320/384/448/576; other
 * expert counts take its two-kernel path through a workspace. */
bool vllm_needs_ws(int E)
{
    return !((is_pow2(E) && E <= 512) || E == 192 || E == 320 || E == 384 || E == 448 || E == 576);
}

/* nullptr when the arm serves the configuration, else why not. */
const char *skip_reason(Arm a, const Cfg &c)
{
    switch (a) {
    case A_MEMRA:
        return nullptr;
    case A_FI:
        if (!c.sigmoid || !c.bias)
            return "NoAuxTc is sigmoid + bias only";
        if (c.top_k > 8)
            return "NoAuxTc: top_k <= 8";
        if (c.n_group == 1)
            return c.E <= 384 ? nullptr : "NoAuxTc: <= 384 experts with one group";
        if (c.E <= 256 && c.E / c.n_group <= 32 && c.E / c.n_group * c.topk_group <= 128)
            return nullptr;
        return "NoAuxTc: grouped needs <= 256 experts, <= 32 per group, <= 128 in play";
    case A_VLLM_SM:
        if (c.sigmoid)
            return "topk_softmax is softmax only";
        return c.n_group == 1 ? nullptr : "topk_softmax has no groups";
    case A_VLLM_SIG:
        if (!c.sigmoid)
            return "topk_sigmoid is sigmoid only";
        return c.n_group == 1 ? nullptr : "topk_sigmoid has no groups";
    case A_SGL:
        if (!c.sigmoid || !c.bias)
            return "moe_fused_gate is sigmoid + bias only";
        if (!is_pow2(c.E))
            return "moe_fused_gate: power-of-two experts only";
        if (c.E / c.n_group > 32)
            return "moe_fused_gate: <= 32 experts per group";
        return nullptr;
    default:
        return "unknown arm";
    }
}

/* ------------------------------------------------------------------ data */

struct Rng {
    uint64_t s;
    bool have = false;
    double spare = 0;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull)
    {
        if (!s)
            s = 1;
        for (int i = 0; i < 4; i++)
            next();
    }
    uint64_t next()
    {
        s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
        return s * 0x2545F4914F6CDD1Dull;
    }
    double uni()
    {
        return ((double)(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    }
    double normal()
    {
        if (have) {
            have = false;
            return spare;
        }
        const double r = std::sqrt(-2.0 * std::log(uni())), a = 6.283185307179586 * uni();
        spare = r * std::sin(a), have = true;
        return r * std::cos(a);
    }
};
void fill_normal(float *x, size_t n, uint64_t seed, double sigma)
{
    Rng r(seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(sigma * r.normal());
}
uint64_t seed_of(int cfg, int purpose, int a, int b)
{
    return ((uint64_t)(cfg + 1) << 48) ^ ((uint64_t)purpose << 40) ^ ((uint64_t)a << 20) ^
           (uint64_t)b;
}

/* Per configuration: the bias, memra's spec, macro planes and layers. */
struct CfgState {
    const Cfg *c = nullptr;
    int idx = 0;
    std::vector<float> bias, planes;
    DevMem d_bias;
    memra_route_spec spec;
    memra_vrows_macros mac;
    memra_vrows_slabs sl;
    int il_base = 0;
    std::string memra_err; /* memra cannot run this configuration: why */
    int il_prefill() const
    {
        return il_base + 64;
    }
};

/* The host side of a configuration: bias, planes, slabs, memra's spec. */
void cfg_host_init(CfgState &cs, int idx)
{
    const Cfg &c = CFGS[idx];
    cs.c = &c, cs.idx = idx, cs.il_base = idx * 128;
    cs.bias.assign(c.E, 0.0f);
    if (c.bias)
        fill_normal(cs.bias.data(), c.E, seed_of(idx, 1, 0, 0),
                    0.01); /* like e_score_correction_bias */
    cs.planes.resize(3 * (size_t)c.E);
    for (int k = 0; k < 3; k++)
        for (int e = 0; e < c.E; e++)
            cs.planes[(size_t)k * c.E + e] = 0.5f + 0.001f * (float)((e * 7 + k * 3) % 97);
    for (int k = 0; k < 3; k++)
        cs.mac.plane[k] = cs.planes.data() + (size_t)k * c.E;
    for (int k = 0; k < 3; k++) {
        cs.sl.base[k] = 0x7f0000000000ull + (uint64_t)k * 0x1000000000ull;
        cs.sl.stride[k] = 24ull << 20;
    }
    /* Zero first and set by name: the spec may grow fields. */
    cs.spec = memra_route_spec{};
    cs.spec.n_expert = (uint32_t)c.E;
    cs.spec.top_k = (uint32_t)c.top_k;
    cs.spec.n_group = (uint32_t)c.n_group;
    cs.spec.topk_group = (uint32_t)c.topk_group;
    cs.spec.scoring = c.sigmoid ? MEMRA_ROUTE_SIGMOID : MEMRA_ROUTE_SOFTMAX;
    cs.spec.logits_dtype = MEMRA_LOGITS_F32;
    cs.spec.renormalize = 1;
    cs.spec.routed_scaling_factor = c.scale;
    cs.spec.bias = c.bias ? cs.bias.data() : nullptr;
    cs.spec.group_scoring = MEMRA_GROUP_TOP2_SUM;
}

/* The device side: the bias on the device, memra's layers prepared. */
void cfg_init(CfgState &cs, int idx)
{
    const Cfg &c = CFGS[idx];
    cfg_host_init(cs, idx);
    cs.d_bias = DevMem((size_t)c.E * 4);
    h2d(cs.d_bias.p, cs.bias.data(), (size_t)c.E * 4);
    if (!st.memra_err.empty()) {
        cs.memra_err = st.memra_err;
        return;
    }
    try {
        for (int il = 0; il < LAYERS; il++) {
            MK(memra_route_prepare_layer(st.eng, cs.il_base + il, &cs.spec, &cs.mac, st.s));
            MK(memra_vrows_prepare_layer(st.eng, cs.il_base + il, (uint32_t)c.E, &cs.mac, st.s));
        }
        MK(memra_route_prepare_layer(st.eng, cs.il_prefill(), &cs.spec, &cs.mac, st.s));
        sync_stream();
    } catch (const Failure &f) {
        cs.memra_err = f.what();
        health_check("memra_route_prepare_layer");
    }
}

/* One layer's (or one buffer set's) device buffers; every arm writes the same ones. */
struct Bufs {
    DevMem logits, ids, w, ptrs, scl, tei, ws;
    void alloc(const Cfg &c, int T, bool want_ws)
    {
        const size_t np = (size_t)T * c.top_k;
        logits = DevMem((size_t)T * c.E * 4);
        ids = DevMem(np * 4), w = DevMem(np * 4), tei = DevMem(np * 4);
        ptrs = DevMem(np * 24), scl = DevMem(np * 12);
        if (want_ws)
            ws = DevMem((size_t)T * c.E * 4);
    }
};

/* ------------------------------------------------------------------ kernels of the bench */

/* Reads every byte a layer's router step wrote (ids and weights; with tables, the three
 * planes too), after griddepcontrol.wait when launched with PDL (a no-op otherwise). */
__global__ void consume_kernel(const int32_t *ids, const float *w, const unsigned long long *p,
                               const float *s, unsigned n, unsigned tables, float *out)
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    float acc = 0.0f;
    for (unsigned i = threadIdx.x; i < n; i += blockDim.x)
        acc += w[i] + (float)ids[i];
    if (tables)
        for (unsigned i = threadIdx.x; i < 3 * n; i += blockDim.x)
            acc += s[i] + (float)(p[i] & 0xffu);
    if (acc == 1234.5f)
        out[0] = acc;
}

/* Evicts the L2 by reading a buffer several times its size (reads leave clean lines, so no
 * write-back of the flush lands in the timed span that follows). */
__global__ void flush_kernel(const int4 *p, size_t n, float *out)
{
    int acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x7f3a5c11)
        out[0] = (float)acc;
}

void flush_l2()
{
    flush_kernel<<<1024, 256, 0, st.s>>>((const int4 *)st.flush, st.flush_bytes / 16, st.sink);
    CU(cudaGetLastError());
}

void launch_consumer(const Bufs &b, unsigned n_pairs, bool tables, bool pdl)
{
    cudaLaunchConfig_t lc = {};
    lc.gridDim = dim3(1), lc.blockDim = dim3(128), lc.stream = st.s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    lc.attrs = pdl ? at : nullptr, lc.numAttrs = pdl ? 1 : 0;
    CU(cudaLaunchKernelEx(&lc, consume_kernel, (const int32_t *)b.ids.p, (const float *)b.w.p,
                          (const unsigned long long *)b.ptrs.p, (const float *)b.scl.p, n_pairs,
                          tables ? 1u : 0u, st.sink));
}

/* The bench's own moe_align_block_size (NOT a peer): one block, counts by shared atomics, a
 * block scan of the padded counts, then a scatter. The output contract is vLLM's: sorted ids
 * (pair indices, padding = n_pairs) in expert order, each expert's run padded to block_size;
 * expert_ids per block; the padded total. It exists so the align section runs and is checked
 * end to end until the vendored peers are added (README.md). */
constexpr int ALIGN_THREADS = 1024;
__global__ void __launch_bounds__(ALIGN_THREADS)
    ref_align_kernel(const int32_t *ids, int n_pairs, int n_expert, int bs, int32_t *sorted,
                     int32_t *expert_ids, int32_t *total_out)
{
    using Scan = cub::BlockScan<int, ALIGN_THREADS>;
    __shared__ typename Scan::TempStorage tmp;
    __shared__ int cnt[ALIGN_THREADS], cursor[ALIGN_THREADS];
    const int t = threadIdx.x;
    cnt[t] = 0;
    __syncthreads();
    for (int i = t; i < n_pairs; i += ALIGN_THREADS) {
        const int e = ids[i];
        if ((unsigned)e < (unsigned)n_expert)
            atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    const int padded = t < n_expert ? (cnt[t] + bs - 1) / bs * bs : 0;
    int off = 0, total = 0;
    Scan(tmp).ExclusiveSum(padded, off, total);
    if (t < n_expert) {
        cursor[t] = off;
        for (int b = off / bs; b < (off + padded) / bs; b++)
            expert_ids[b] = t;
        for (int p = off + cnt[t]; p < off + padded; p++)
            sorted[p] = n_pairs;
    }
    if (t == 0)
        *total_out = total;
    __syncthreads();
    for (int i = t; i < n_pairs; i += ALIGN_THREADS) {
        const int e = ids[i];
        if ((unsigned)e < (unsigned)n_expert)
            sorted[atomicAdd(&cursor[e], 1)] = i;
    }
}

/* ------------------------------------------------------------------ launching an arm */

void peer_check(int rc, const char *err)
{
    if (rc != 0)
        throw Failure(err);
}

/* One router call of arm a on buffers b (il: memra's layer). memra's PDL is the engine's
 * setting; a peer with PDL (FlashInfer) takes it per call. */
void run_arm(Arm a, const CfgState &cs, int T, const Bufs &b, int il, bool pdl)
{
    const Cfg &c = *cs.c;
    char err[512] = "";
    switch (a) {
    case A_MEMRA:
        if (!cs.memra_err.empty())
            throw Failure(cs.memra_err);
        MK(memra_route_tables(st.eng, (memra_devptr)b.logits.p, (uint32_t)T, &cs.spec, il, &cs.mac,
                              &cs.sl, (memra_devptr)b.ids.p, (memra_devptr)b.w.p,
                              (memra_devptr)b.ptrs.p, (memra_devptr)b.scl.p, (memra_stream)st.s));
        return;
    case A_FI:
        peer_check(peer_flashinfer_noauxtc(b.logits.as<float>(), cs.d_bias.as<float>(), T, c.E,
                                           c.n_group, c.topk_group, c.top_k, c.scale,
                                           b.w.as<float>(), b.ids.as<int32_t>(), pdl ? 1 : 0, st.s,
                                           err, sizeof err),
                   err);
        return;
    case A_VLLM_SM:
    case A_VLLM_SIG:
        peer_check(peer_vllm_topk(b.logits.as<float>(), c.bias ? cs.d_bias.as<float>() : nullptr, T,
                                  c.E, c.top_k, a == A_VLLM_SIG, 1, c.scale, b.w.as<float>(),
                                  b.ids.as<int32_t>(), b.tei.as<int32_t>(), b.ws.as<float>(), st.s,
                                  err, sizeof err),
                   err);
        return;
    case A_SGL:
        peer_check(peer_sglang_fused_gate(b.logits.as<float>(), cs.d_bias.as<float>(), T, c.E,
                                          c.n_group, c.topk_group, c.top_k, c.scale,
                                          b.w.as<float>(), b.ids.as<int32_t>(), st.s, err,
                                          sizeof err),
                   err);
        return;
    default:
        throw Failure("unknown arm");
    }
}

/* memra's PDL setting for the scope of one capture, always restored. */
struct MemraPdl {
    bool set = false;
    explicit MemraPdl(bool on)
    {
        if (on && st.eng) {
            int active = 0;
            MK(memra_engine_set_pdl(st.eng, 1, &active));
            if (!active) { /* no destructor runs for a constructor that throws */
                memra_engine_set_pdl(st.eng, 0, nullptr);
                throw Failure("memra_engine_set_pdl: PDL not in effect here");
            }
            set = true;
        }
    }
    ~MemraPdl()
    {
        if (set)
            memra_engine_set_pdl(st.eng, 0, nullptr);
    }
};

struct Graph {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    ~Graph()
    {
        if (st.dead)
            return;
        if (ge)
            cudaGraphExecDestroy(ge);
        if (g)
            cudaGraphDestroy(g);
    }
};

double median(std::vector<double> v)
{
    if (v.empty())
        return NAN;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* GPU microseconds per layer of a graph holding LAYERS calls of body(layer): median of
 * samples of `replays` replays each, after a warm-up. */
double graph_us_per_layer(const std::function<void(int)> &body, bool memra_pdl)
{
    Graph gr;
    {
        MemraPdl pdl(memra_pdl);
        CU(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal));
        try {
            for (int il = 0; il < LAYERS; il++)
                body(il);
        } catch (...) {
            cudaGraph_t bad = nullptr;
            cudaStreamEndCapture(st.s, &bad);
            if (bad)
                cudaGraphDestroy(bad);
            (void)cudaGetLastError();
            throw;
        }
        CU(cudaStreamEndCapture(st.s, &gr.g));
    }
    CU(cudaGraphInstantiateWithFlags(&gr.ge, gr.g, 0));
    Event e0, e1;
    for (int i = 0; i < 5; i++)
        CU(cudaGraphLaunch(gr.ge, st.s));
    sync_stream();
    const int samples = opt.quick ? 5 : 20, replays = opt.quick ? 20 : 50;
    std::vector<double> v;
    for (int r = 0; r < samples; r++) {
        CU(cudaEventRecord(e0.e, st.s));
        for (int i = 0; i < replays; i++)
            CU(cudaGraphLaunch(gr.ge, st.s));
        CU(cudaEventRecord(e1.e, st.s));
        wait_event(e1.e);
        float ms = 0;
        CU(cudaEventElapsedTime(&ms, e0.e, e1.e));
        v.push_back((double)ms * 1e3 / replays / LAYERS);
    }
    return median(v);
}

/* GPU microseconds of one call of fn(set): samples of `per` back-to-back calls over rotating
 * buffer sets, each sample after an L2 flush (outside the timed span). */
double calls_us(const std::function<void(int)> &fn, int sets, bool flush)
{
    Event e0, e1;
    fn(0);
    fn(1 % sets);
    sync_stream();
    const int samples = opt.quick ? 5 : 20, per = 8;
    std::vector<double> v;
    for (int r = 0; r < samples; r++) {
        if (flush)
            flush_l2();
        CU(cudaEventRecord(e0.e, st.s));
        for (int i = 0; i < per; i++)
            fn((r * per + i) % sets);
        CU(cudaEventRecord(e1.e, st.s));
        wait_event(e1.e);
        float ms = 0;
        CU(cudaEventElapsedTime(&ms, e0.e, e1.e));
        v.push_back((double)ms * 1e3 / per);
    }
    return median(v);
}

/* ------------------------------------------------------------------ results */

enum CellState { C_NONE, C_OK, C_NA, C_FAIL, C_SKIP };
struct Cell {
    CellState s = C_NONE;
    double v = NAN;
    std::string msg;
    static Cell ok(double v)
    {
        return Cell{C_OK, v, ""};
    }
    static Cell na(const std::string &m)
    {
        return Cell{C_NA, NAN, m};
    }
    static Cell fail(const std::string &m)
    {
        return Cell{C_FAIL, NAN, m};
    }
    bool good() const
    {
        return s == C_OK && std::isfinite(v);
    }
};
/* a - b when both were measured; else why not */
Cell diff_cell(const Cell &a, const Cell &b)
{
    if (!a.good())
        return a;
    if (!b.good())
        return Cell::fail("its baseline was not measured");
    return Cell::ok(a.v - b.v);
}
const char *state_name(CellState s)
{
    switch (s) {
    case C_OK:
        return "ok";
    case C_NA:
        return "n/a";
    case C_FAIL:
        return "failed";
    case C_SKIP:
        return "skipped";
    default:
        return "none";
    }
}
std::string cell_str(const Cell &c, const char *fmt = "%.2f")
{
    switch (c.s) {
    case C_OK:
        return strf(fmt, c.v);
    case C_NA:
        return "—";
    case C_FAIL:
        return "failed";
    case C_SKIP:
        return "skipped";
    default:
        return "";
    }
}
std::vector<std::string> failures; /* printed after the tables */

/* Runs one measurement; a Failure becomes a failed cell (after checking the context). */
Cell attempt(const std::string &what, const std::function<double()> &fn)
{
    try {
        return Cell::ok(fn());
    } catch (const Fatal &) {
        throw;
    } catch (const std::exception &e) {
        failures.push_back(what + ": " + e.what());
        fprintf(stderr, "  FAILED %s: %s\n", what.c_str(), e.what());
        health_check(what);
        return Cell::fail(e.what());
    }
}

void json_cell(const char *section, const Cfg &c, int T, const std::string &arm, int pdl,
               const char *metric, const Cell &cell, const std::string &extra = "")
{
    json_rows.push_back(strf("{\"section\": \"%s\", \"config\": \"%s\", \"tokens\": %d, "
                             "\"arm\": \"%s\", \"pdl\": %d, \"metric\": \"%s\", \"value\": %s, "
                             "\"status\": \"%s\", \"note\": \"%s\"%s}",
                             section, c.name, T, jesc(arm).c_str(), pdl, metric,
                             jnum(cell.v).c_str(), state_name(cell.s), jesc(cell.msg).c_str(),
                             extra.c_str()));
}

std::vector<CfgState> cfgs; /* the configurations selected */

bool section_on(const char *name)
{
    return opt.sections.find(name) != std::string::npos;
}

/* ------------------------------------------------------------------ decode */

struct DecodeRow {
    const Cfg *c;
    int T;
    Cell cons[2][2];      /* [tables][pdl] consumer alone, us per layer */
    Cell node[N_ARMS][2]; /* arm node (arm + consumer - consumer), us per layer */
    Cell two_step[2];     /* best plain peer, then memra_vrows_tables (+ table consumer) */
    int best = -1, best_any = -1, best_any_pdl = 0;
};
std::vector<DecodeRow> decode_rows;

const DecodeRow *find_decode(const Cfg *c, int T)
{
    for (const DecodeRow &r : decode_rows)
        if (r.c == c && r.T == T)
            return &r;
    return nullptr;
}

void upload_layers(std::vector<Bufs> &L, const CfgState &cs, int T)
{
    const Cfg &c = *cs.c;
    std::vector<float> h((size_t)T * c.E);
    for (int il = 0; il < LAYERS; il++) {
        fill_normal(h.data(), h.size(), seed_of(cs.idx, 2, T, il), 1.0);
        h2d(L[il].logits.p, h.data(), h.size() * 4);
    }
}

void decode_one(CfgState &cs, int T)
{
    const Cfg &c = *cs.c;
    DecodeRow row;
    row.c = &c, row.T = T;
    const unsigned np = (unsigned)(T * c.top_k);
    std::vector<Bufs> L(LAYERS);
    for (Bufs &b : L)
        b.alloc(c, T, vllm_needs_ws(c.E));
    upload_layers(L, cs, T);
    const std::string where = strf("decode %s T=%d", c.name, T);

    for (int tables = 0; tables < 2; tables++)
        for (int pdl = 0; pdl < 2; pdl++)
            row.cons[tables][pdl] = attempt(
                strf("%s consumer%s%s", where.c_str(), tables ? "+tables" : "", pdl ? " PDL" : ""),
                [&] {
                    return graph_us_per_layer(
                        [&](int il) { launch_consumer(L[il], np, tables, pdl); }, false);
                });

    for (int a = 0; a < N_ARMS; a++) {
        const Arm arm = (Arm)a;
        const char *why = skip_reason(arm, c);
        if (why) {
            row.node[a][0] = row.node[a][1] = Cell::na(why);
            continue;
        }
        const bool tables = arm == A_MEMRA;
        /* a probe outside any graph: a launcher that refuses, or a kernel that faults, is
         * seen here, by name, before any capture */
        Cell probe = attempt(strf("%s %s (probe)", where.c_str(), ARM_NAME[a]), [&] {
            run_arm(arm, cs, T, L[0], cs.il_base, false);
            sync_stream();
            CU(cudaGetLastError());
            return 0.0;
        });
        if (probe.s != C_OK) {
            row.node[a][0] = row.node[a][1] = probe;
            continue;
        }
        for (int pdl = 0; pdl < 2; pdl++) {
            if (pdl && !arm_has_pdl(arm)) {
                row.node[a][1] = Cell::na("no PDL in this peer");
                continue;
            }
            if (pdl && arm == A_MEMRA && !st.memra_pdl) {
                row.node[a][1] = Cell::na("memra: PDL not in effect on this GPU/driver");
                continue;
            }
            const Cell &base = row.cons[tables][pdl];
            if (!base.good()) {
                row.node[a][pdl] = Cell::fail("consumer baseline failed");
                continue;
            }
            Cell full =
                attempt(strf("%s %s%s", where.c_str(), ARM_NAME[a], pdl ? " PDL" : ""), [&] {
                    return graph_us_per_layer(
                        [&](int il) {
                            run_arm(arm, cs, T, L[il], cs.il_base + il, pdl);
                            launch_consumer(L[il], np, tables, pdl);
                        },
                        arm == A_MEMRA && pdl);
                });
            row.node[a][pdl] = full.good() ? Cell::ok(full.v - base.v) : full;
            json_cell("decode", c, T, ARM_KEY[a], pdl, "graph_us_per_layer", full,
                      strf(", \"consumer_us_per_layer\": %s", jnum(base.v).c_str()));
            json_cell("decode", c, T, ARM_KEY[a], pdl, "node_us", row.node[a][pdl]);
        }
    }
    /* the best peer, plain; and as deployed (plain or PDL, whichever is faster) */
    for (int a = A_FI; a < N_ARMS; a++) {
        if (row.node[a][0].good() && (row.best < 0 || row.node[a][0].v < row.node[row.best][0].v))
            row.best = a;
        for (int pdl = 0; pdl < 2; pdl++)
            if (row.node[a][pdl].good() &&
                (row.best_any < 0 ||
                 row.node[a][pdl].v < row.node[row.best_any][row.best_any_pdl].v))
                row.best_any = a, row.best_any_pdl = pdl;
    }
    /* the best peer followed by memra's table kernel: what a peer router needs to give what
     * memra's one launch gives (sel, selw and the three planes) */
    for (int pdl = 0; pdl < 2; pdl++) {
        if (row.best < 0) {
            row.two_step[pdl] = Cell::na("no peer serves this configuration");
            continue;
        }
        const Arm best = (Arm)row.best;
        if (pdl && (!arm_has_pdl(best) || !st.memra_pdl)) {
            row.two_step[pdl] = Cell::na("no PDL in the best peer");
            continue;
        }
        if (!cs.memra_err.empty()) {
            row.two_step[pdl] = Cell::fail(cs.memra_err);
            continue;
        }
        const Cell &base = row.cons[1][pdl];
        if (!base.good()) {
            row.two_step[pdl] = Cell::fail("consumer baseline failed");
            continue;
        }
        Cell full = attempt(
            strf("%s %s + memra_vrows_tables%s", where.c_str(), ARM_NAME[best], pdl ? " PDL" : ""),
            [&] {
                return graph_us_per_layer(
                    [&](int il) {
                        run_arm(best, cs, T, L[il], cs.il_base + il, pdl);
                        MK(memra_vrows_tables(st.eng, (memra_devptr)L[il].ids.p,
                                              (memra_devptr)L[il].w.p, np, (uint32_t)c.E,
                                              cs.il_base + il, &cs.mac, &cs.sl,
                                              (memra_devptr)L[il].ptrs.p, (memra_devptr)L[il].scl.p,
                                              (memra_stream)st.s));
                        launch_consumer(L[il], np, true, pdl);
                    },
                    pdl);
            });
        row.two_step[pdl] = full.good() ? Cell::ok(full.v - base.v) : full;
        json_cell("decode", c, T, std::string(ARM_KEY[best]) + "+memra_vrows_tables", pdl,
                  "node_us", row.two_step[pdl]);
    }
    for (int t = 0; t < 2; t++)
        for (int p = 0; p < 2; p++)
            json_cell("decode", c, T, t ? "consumer_tables" : "consumer_ids", p,
                      "graph_us_per_layer", row.cons[t][p]);
    decode_rows.push_back(row);
}

double ratio(const Cell &a, const Cell &b)
{
    return a.good() && b.good() && b.v > 0 ? a.v / b.v : NAN;
}
std::string rstr(double r)
{
    return std::isfinite(r) ? strf("%.2f", r) : "—";
}

void print_decode_table()
{
    printf("\n## Decode: µs per layer (node = arm + consumer − consumer alone), 32 layers in "
           "one CUDA graph\n\n");
    printf("| config | tokens | memra | memra PDL | FlashInfer | FlashInfer PDL | vLLM softmax "
           "| vLLM sigmoid | SGLang gate | best peer | memra / best | best peer, any mode | "
           "memra PDL / that | best peer + memra tables | memra / that |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | "
           "---: | ---: | ---: |\n");
    for (const DecodeRow &r : decode_rows) {
        const Cell &bp = r.best >= 0 ? r.node[r.best][0] : Cell();
        const Cell &ba = r.best_any >= 0 ? r.node[r.best_any][r.best_any_pdl] : Cell();
        const Cell &mem_pdl = r.node[A_MEMRA][1].good() ? r.node[A_MEMRA][1] : r.node[A_MEMRA][0];
        printf(
            "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
            r.c->name, r.T, cell_str(r.node[A_MEMRA][0]).c_str(),
            cell_str(r.node[A_MEMRA][1]).c_str(), cell_str(r.node[A_FI][0]).c_str(),
            cell_str(r.node[A_FI][1]).c_str(), cell_str(r.node[A_VLLM_SM][0]).c_str(),
            cell_str(r.node[A_VLLM_SIG][0]).c_str(), cell_str(r.node[A_SGL][0]).c_str(),
            r.best >= 0 ? ARM_COL[r.best] : "none", rstr(ratio(r.node[A_MEMRA][0], bp)).c_str(),
            r.best_any >= 0
                ? strf("%s%s %.2f", ARM_COL[r.best_any], r.best_any_pdl ? " PDL" : "", ba.v).c_str()
                : "none",
            rstr(ratio(mem_pdl, ba)).c_str(), cell_str(r.two_step[0]).c_str(),
            rstr(ratio(r.node[A_MEMRA][0], r.two_step[0])).c_str());
    }
    printf("\nConsumer alone (µs per layer; ids+weights / +tables; plain / PDL):\n\n");
    printf("| config | tokens | ids | ids PDL | +tables | +tables PDL | best peer + memra "
           "tables, PDL |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const DecodeRow &r : decode_rows)
        printf("| %s | %d | %s | %s | %s | %s | %s |\n", r.c->name, r.T,
               cell_str(r.cons[0][0]).c_str(), cell_str(r.cons[0][1]).c_str(),
               cell_str(r.cons[1][0]).c_str(), cell_str(r.cons[1][1]).c_str(),
               cell_str(r.two_step[1]).c_str());
    fflush(stdout);
}

/* ------------------------------------------------------------------ prefill */

struct PrefillRow {
    const Cfg *c;
    int T;
    double mb = 0;
    int sets = 0;
    Cell copy, arm[N_ARMS];
    int best = -1;
};
std::vector<PrefillRow> prefill_rows;

/* One configuration's logits for the largest prefill size (the smaller ones are prefixes). */
std::vector<float> prefill_logits(const CfgState &cs, int T)
{
    std::vector<float> h((size_t)T * cs.c->E);
    fill_normal(h.data(), h.size(), seed_of(cs.idx, 3, 0, 0), 1.0);
    return h;
}

void prefill_one(CfgState &cs, int T, const std::vector<float> &h)
{
    const Cfg &c = *cs.c;
    PrefillRow row;
    row.c = &c, row.T = T;
    const size_t lb = (size_t)T * c.E * 4;
    row.mb = (double)lb / 1e6;
    /* sets: at least 4x the 60 MB L2 together, 2..8 of them; each sample starts after an L2
     * flush and touches distinct sets (or sets each larger than L2) */
    int sets = (int)std::ceil(240e6 / (double)lb);
    sets = std::max(2, std::min(8, sets));
    row.sets = sets;
    const std::string where = strf("prefill %s T=%d", c.name, T);
    std::vector<Bufs> S(sets);
    std::vector<DevMem> dst;
    try {
        for (Bufs &b : S)
            b.alloc(c, T, vllm_needs_ws(c.E));
        for (int k = 0; k < sets; k++)
            dst.emplace_back(lb);
        h2d(S[0].logits.p, h.data(), lb);
        for (int k = 1; k < sets; k++)
            d2d(S[k].logits.p, S[0].logits.p, lb);
    } catch (const Failure &f) {
        for (int a = 0; a < N_ARMS; a++)
            row.arm[a] = Cell::fail(f.what());
        row.copy = Cell::fail(f.what());
        failures.push_back(where + ": " + f.what());
        health_check(where);
        prefill_rows.push_back(row);
        return;
    }
    row.copy = attempt(where + " copy", [&] {
        return calls_us(
            [&](int k) {
                CU(cudaMemcpyAsync(dst[k].p, S[k].logits.p, lb, cudaMemcpyDeviceToDevice, st.s));
            },
            sets, true);
    });
    json_cell("prefill", c, T, "d2d_copy", 0, "us", row.copy,
              strf(", \"logits_mb\": %.3f, \"sets\": %d", row.mb, sets));
    for (int a = 0; a < N_ARMS; a++) {
        const char *why = skip_reason((Arm)a, c);
        if (why) {
            row.arm[a] = Cell::na(why);
            continue;
        }
        row.arm[a] = attempt(strf("%s %s", where.c_str(), ARM_NAME[a]), [&] {
            return calls_us([&](int k) { run_arm((Arm)a, cs, T, S[k], cs.il_prefill(), false); },
                            sets, true);
        });
        json_cell("prefill", c, T, ARM_KEY[a], 0, "us", row.arm[a],
                  strf(", \"logits_mb\": %.3f, \"sets\": %d", row.mb, sets));
        if (a != A_MEMRA && row.arm[a].good() &&
            (row.best < 0 || row.arm[a].v < row.arm[row.best].v))
            row.best = a;
    }
    prefill_rows.push_back(row);
}

void print_prefill_table()
{
    printf("\n## Prefill: µs per call (logits from DRAM: L2 flushed before each sample of 8 calls, "
           "2-8 buffer sets rotated)\n\n");
    printf("| config | tokens | logits MB | D2D copy of the logits | memra | FlashInfer | vLLM "
           "softmax | vLLM sigmoid | SGLang gate | best peer | memra / best | memra / copy |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: "
           "|\n");
    for (const PrefillRow &r : prefill_rows)
        printf("| %s | %d | %.1f | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.c->name, r.T,
               r.mb, cell_str(r.copy, "%.1f").c_str(), cell_str(r.arm[A_MEMRA], "%.1f").c_str(),
               cell_str(r.arm[A_FI], "%.1f").c_str(), cell_str(r.arm[A_VLLM_SM], "%.1f").c_str(),
               cell_str(r.arm[A_VLLM_SIG], "%.1f").c_str(), cell_str(r.arm[A_SGL], "%.1f").c_str(),
               r.best >= 0 ? ARM_COL[r.best] : "none",
               rstr(ratio(r.arm[A_MEMRA], r.best >= 0 ? r.arm[r.best] : Cell())).c_str(),
               rstr(ratio(r.arm[A_MEMRA], r.copy)).c_str());
    fflush(stdout);
}

/* ------------------------------------------------------------------ exactness */

/* The fp64 reference of one token: double softmax or sigmoid, + bias for choosing, group
 * top-2 sums, top-k; every order by score, ties to the lower index. ids sorted ascending. */
void ref_route(const float *x, const CfgState &cs, std::vector<int> &ids, std::vector<double> &w)
{
    const Cfg &c = *cs.c;
    const int E = c.E;
    std::vector<double> s(E), ch(E);
    if (c.sigmoid) {
        for (int e = 0; e < E; e++)
            s[e] = 1.0 / (1.0 + std::exp(-(double)x[e]));
    } else {
        double m = -INFINITY, sum = 0;
        for (int e = 0; e < E; e++)
            m = std::max(m, (double)x[e]);
        for (int e = 0; e < E; e++)
            sum += (s[e] = std::exp((double)x[e] - m));
        for (int e = 0; e < E; e++)
            s[e] /= sum;
    }
    for (int e = 0; e < E; e++)
        ch[e] = s[e] + (c.bias ? (double)cs.bias[e] : 0.0);
    auto better = [&](int a, int b) { return ch[a] > ch[b] || (ch[a] == ch[b] && a < b); };
    std::vector<char> in_play(E, 1);
    if (c.n_group > 1) {
        const int per = E / c.n_group;
        std::vector<double> gs(c.n_group);
        for (int g = 0; g < c.n_group; g++) {
            std::vector<double> v(ch.begin() + g * per, ch.begin() + (g + 1) * per);
            std::sort(v.begin(), v.end(), std::greater<double>());
            gs[g] = per >= 2 ? v[0] + v[1] : v[0];
        }
        std::vector<int> go(c.n_group);
        for (int g = 0; g < c.n_group; g++)
            go[g] = g;
        std::sort(go.begin(), go.end(),
                  [&](int a, int b) { return gs[a] > gs[b] || (gs[a] == gs[b] && a < b); });
        std::fill(in_play.begin(), in_play.end(), 0);
        for (int i = 0; i < c.topk_group; i++)
            for (int e = go[i] * per; e < (go[i] + 1) * per; e++)
                in_play[e] = 1;
    }
    std::vector<int> order;
    for (int e = 0; e < E; e++)
        if (in_play[e])
            order.push_back(e);
    std::partial_sort(order.begin(), order.begin() + c.top_k, order.end(), better);
    ids.assign(order.begin(), order.begin() + c.top_k);
    double sum = 0;
    for (int e : ids)
        sum += s[e];
    std::sort(ids.begin(), ids.end());
    w.resize(c.top_k);
    for (int j = 0; j < c.top_k; j++)
        w[j] = s[ids[j]] / sum * (double)c.scale;
}

/* The exactness batches: the prefill data's first EXACT_T tokens as they are (float32 normal
 * values), and the same rounded to bfloat16 values (as a bf16 router GEMM writes them), where
 * exact ties between experts are common and near-ties more so. */
const char *BATCHES[] = {"f32", "bf16-valued"};
constexpr int N_BATCHES = 2;
float bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u); /* to nearest even; the inputs are finite and small */
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}
std::vector<float> exact_batch(const std::vector<float> &h, int E, int batch)
{
    std::vector<float> v(h.begin(), h.begin() + (size_t)EXACT_T * E);
    if (batch == 1)
        for (float &x : v)
            x = bf16_round(x);
    return v;
}

struct ExactRow {
    const Cfg *c;
    int T;
    const char *batch;
    Cell run[N_ARMS];
    long vs_ref[N_ARMS] = {};  /* tokens whose set differs from the fp64 reference */
    double w_err[N_ARMS] = {}; /* max |w - w64| over tokens whose set equals the reference's */
    long diff[N_ARMS] = {}, memra_right[N_ARMS] = {}, peer_right[N_ARMS] = {},
         neither[N_ARMS] = {}; /* per peer, against memra */
    std::string host_arm;      /* memra device vs memra_route_tables_host */
};
std::vector<ExactRow> exact_rows;

void exact_one(CfgState &cs, const std::vector<float> &h, const char *batch)
{
    const Cfg &c = *cs.c;
    const int T = EXACT_T, K = c.top_k;
    ExactRow row;
    row.c = &c, row.T = T, row.batch = batch;
    const std::string where = strf("exact %s T=%d %s", c.name, T, batch);
    Bufs b;
    b.alloc(c, T, vllm_needs_ws(c.E));
    h2d(b.logits.p, h.data(), (size_t)T * c.E * 4);
    /* the reference, every token */
    std::vector<std::vector<int>> rid(T);
    std::vector<std::vector<double>> rw(T);
    for (int t = 0; t < T; t++)
        ref_route(h.data() + (size_t)t * c.E, cs, rid[t], rw[t]);
    std::vector<std::vector<int32_t>> ids(N_ARMS);
    std::vector<std::vector<float>> ws(N_ARMS);
    for (int a = 0; a < N_ARMS; a++) {
        const char *why = skip_reason((Arm)a, c);
        if (why) {
            row.run[a] = Cell::na(why);
            continue;
        }
        row.run[a] = attempt(strf("%s %s", where.c_str(), ARM_NAME[a]), [&] {
            CU(cudaMemsetAsync(b.ids.p, 0xff, (size_t)T * K * 4, st.s));
            run_arm((Arm)a, cs, T, b, cs.il_prefill(), false);
            sync_stream();
            ids[a].resize((size_t)T * K), ws[a].resize((size_t)T * K);
            d2h(ids[a].data(), b.ids.p, (size_t)T * K * 4);
            d2h(ws[a].data(), b.w.p, (size_t)T * K * 4);
            if (a == A_MEMRA) {
                /* the device output against memra's host arm, bit for bit */
                const size_t np = (size_t)T * K;
                std::vector<uint64_t> dp(3 * np), hp(3 * np);
                std::vector<float> ds(3 * np), hs(3 * np), hw(np);
                std::vector<int32_t> hid(np);
                d2h(dp.data(), b.ptrs.p, 24 * np);
                d2h(ds.data(), b.scl.p, 12 * np);
                memra_faults f;
                const memra_status hs_st =
                    memra_route_tables_host(h.data(), (uint32_t)T, &cs.spec, &cs.mac, &cs.sl,
                                            hid.data(), hw.data(), hp.data(), hs.data(), &f);
                if (hs_st != MEMRA_OK)
                    row.host_arm =
                        strf("host arm: %s: %s", memra_status_string(hs_st), memra_last_error());
                else {
                    long bad = 0;
                    for (int t = 0; t < T; t++) {
                        bool same = true;
                        for (int j = 0; j < K; j++) {
                            const size_t p = (size_t)t * K + j;
                            same = same && hid[p] == ids[a][p] && !memcmp(&hw[p], &ws[a][p], 4);
                            for (int k = 0; k < 3; k++)
                                same = same && hp[k * np + p] == dp[k * np + p] &&
                                       !memcmp(&hs[k * np + p], &ds[k * np + p], 4);
                        }
                        bad += !same;
                    }
                    row.host_arm = bad ? strf("%ld of %d tokens differ", bad, T)
                                       : strf("bit-exact (%d tokens: sel, selw, ptrs, scl)", T);
                }
            }
            return 0.0;
        });
        if (row.run[a].s != C_OK)
            continue;
        double werr = 0;
        long vs = 0;
        for (int t = 0; t < T; t++) {
            std::vector<std::pair<int, float>> got(K);
            for (int j = 0; j < K; j++)
                got[j] = {ids[a][(size_t)t * K + j], ws[a][(size_t)t * K + j]};
            std::sort(got.begin(), got.end());
            bool same = true;
            for (int j = 0; j < K; j++)
                same = same && got[j].first == rid[t][j];
            if (!same) {
                vs++;
                continue;
            }
            for (int j = 0; j < K; j++)
                werr = std::max(werr, std::fabs((double)got[j].second - rw[t][j]));
        }
        row.vs_ref[a] = vs, row.w_err[a] = werr;
    }
    /* each peer against memra, and who matches the reference where they differ */
    auto set_of = [&](int a, int t) {
        std::vector<int> v(ids[a].begin() + (size_t)t * K, ids[a].begin() + (size_t)(t + 1) * K);
        std::sort(v.begin(), v.end());
        return v;
    };
    if (row.run[A_MEMRA].s == C_OK)
        for (int a = A_FI; a < N_ARMS; a++) {
            if (row.run[a].s != C_OK)
                continue;
            for (int t = 0; t < T; t++) {
                const std::vector<int> m = set_of(A_MEMRA, t), p = set_of(a, t);
                if (m == p)
                    continue;
                row.diff[a]++;
                const bool mr = m == rid[t], pr = p == rid[t];
                row.memra_right[a] += mr, row.peer_right[a] += pr, row.neither[a] += !mr && !pr;
            }
        }
    for (int a = 0; a < N_ARMS; a++) {
        const std::string x =
            strf(", \"tokens_differing_from_fp64\": %ld, \"max_abs_weight_err_vs_fp64\": %s",
                 row.vs_ref[a], jnum(row.w_err[a]).c_str()) +
            (a == A_MEMRA
                 ? strf(", \"device_vs_host_arm\": \"%s\"", jesc(row.host_arm).c_str())
                 : strf(", \"sets_differing_from_memra\": %ld, \"memra_matches_fp64\": "
                        "%ld, \"peer_matches_fp64\": %ld, \"neither\": %ld",
                        row.diff[a], row.memra_right[a], row.peer_right[a], row.neither[a]));
        json_cell("exact", c, T, ARM_KEY[a], 0, "run", row.run[a],
                  strf(", \"batch\": \"%s\"", batch) + x);
    }
    exact_rows.push_back(row);
}

void print_exact_table()
{
    printf("\n## Exactness: %d tokens per configuration, expert sets against an fp64 host "
           "reference and against memra\n\n",
           EXACT_T);
    printf("| config | logits | arm | tokens ≠ fp64 | max abs weight err vs fp64 (agreeing "
           "tokens) | sets ≠ memra | of those memra = fp64 | peer = fp64 | neither |\n");
    printf("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const ExactRow &r : exact_rows)
        for (int a = 0; a < N_ARMS; a++) {
            if (r.run[a].s == C_NA)
                continue;
            if (r.run[a].s != C_OK) {
                printf("| %s | %s | %s | %s | | | | | |\n", r.c->name, r.batch, ARM_NAME[a],
                       state_name(r.run[a].s));
                continue;
            }
            if (a == A_MEMRA)
                printf("| %s | %s | %s | %ld | %.3g | — | — | — | — |\n", r.c->name, r.batch,
                       ARM_NAME[a], r.vs_ref[a], r.w_err[a]);
            else
                printf("| %s | %s | %s | %ld | %.3g | %ld | %ld | %ld | %ld |\n", r.c->name,
                       r.batch, ARM_NAME[a], r.vs_ref[a], r.w_err[a], r.diff[a], r.memra_right[a],
                       r.peer_right[a], r.neither[a]);
        }
    printf("\nmemra's device output against its host arm (memra_route_tables_host):\n\n");
    for (const ExactRow &r : exact_rows)
        printf("- %s, %s logits: %s\n", r.c->name, r.batch,
               r.host_arm.empty() ? "not run" : r.host_arm.c_str());
    fflush(stdout);
}

/* ------------------------------------------------------------------ align */

/* vLLM's fused_moe without a tuned config file (get_default_config): BLOCK_SIZE_M = 16 when
 * the token count M <= E, else 64. Tuned H200 configs differ per model; this is the rule a
 * fresh install uses. */
int align_block_size(int T, int E)
{
    return T <= E ? 16 : 64;
}

struct AlignBufs {
    DevMem sorted, expert_ids, total;
    int cap = 0, nblocks = 0;
    void alloc(int n_pairs, int E, int bs)
    {
        cap = n_pairs + E * (bs - 1);
        nblocks = (cap + bs - 1) / bs;
        sorted = DevMem((size_t)cap * 4), expert_ids = DevMem((size_t)nblocks * 4);
        total = DevMem(4);
    }
};

/* An align implementation: sorts topk ids into per-expert runs padded to block_size. */
struct AlignArm {
    const char *name, *key;
    void (*run)(const int32_t *ids, int n_pairs, int E, int bs, AlignBufs &ab);
};
void run_ref_align(const int32_t *ids, int n_pairs, int E, int bs, AlignBufs &ab)
{
    if (E > ALIGN_THREADS)
        throw Failure("the reference align serves <= 1024 experts");
    ref_align_kernel<<<1, ALIGN_THREADS, 0, st.s>>>(ids, n_pairs, E, bs, ab.sorted.as<int32_t>(),
                                                    ab.expert_ids.as<int32_t>(),
                                                    ab.total.as<int32_t>());
    CU(cudaGetLastError());
}
const AlignArm ALIGN_ARMS[] = {
    {"bench reference align (one block; not a peer)", "bench_ref_align", run_ref_align},
    /* the vendored vLLM and SGLang moe_align_block_size go here (README.md, "align peers") */
};
constexpr int N_ALIGN = sizeof ALIGN_ARMS / sizeof ALIGN_ARMS[0];

/* HOOK (issue #31): memra's fused layout. When memra's route call can also write the
 * per-expert sorted layout (the align step's output), make this run it (one memra launch on
 * the layer's buffers, for layer il, on st.s) and return; the align section then times it
 * in the same graph as the peers' router + align and prints it beside them. Until then it
 * throws, and the row says "n/a". */
struct NotAvailable : std::runtime_error {
    using std::runtime_error::runtime_error;
};
void memra_fused_layout(const CfgState &cs, int T, const Bufs &b, AlignBufs &ab, int il, int bs)
{
    if (!cs.memra_err.empty())
        throw Failure(cs.memra_err);
    /* memra's routing, tables and expert-sorted layout in one call (one launch at decode
     * sizes; past them the layout's own launch after the routing one, three above 16,384
     * pairs, in the workspace held here). */
    memra_layout_spec ls;
    memset(&ls, 0, sizeof ls);
    ls.n_expert = cs.c->E, ls.block_size = (uint32_t)bs;
    uint64_t ws = 0;
    MK(memra_layout_workspace_bytes((uint32_t)(T * cs.c->top_k), &ls, &ws));
    static DevMem workspace;
    if (ws > workspace.bytes)
        workspace = DevMem(ws);
    memra_layout lo;
    memset(&lo, 0, sizeof lo);
    lo.sorted_ids = (uint64_t)ab.sorted.p, lo.expert_ids = (uint64_t)ab.expert_ids.p;
    lo.n_post_pad = (uint64_t)ab.total.p, lo.workspace = ws ? (uint64_t)workspace.p : 0;
    MK(memra_route_tables_ex(st.eng, (memra_devptr)b.logits.p, (uint32_t)T, &cs.spec, il,
                             &cs.mac, &cs.sl, (memra_devptr)b.ids.p, (memra_devptr)b.w.p,
                             (memra_devptr)b.ptrs.p, (memra_devptr)b.scl.p, &ls, &lo,
                             (memra_stream)st.s));
}

/* Checks an align output against the host: runs, padding, block experts, total. */
std::string align_check(const std::vector<int32_t> &ids, int E, int bs, AlignBufs &ab)
{
    const int n = (int)ids.size();
    int32_t total = 0;
    d2h(&total, ab.total.p, 4);
    std::vector<std::vector<int>> want(E);
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < E)
            want[ids[i]].push_back(i);
    int expect = 0;
    for (int e = 0; e < E; e++)
        expect += ((int)want[e].size() + bs - 1) / bs * bs;
    if (total != expect)
        return strf("total %d, expected %d", total, expect);
    if (total > ab.cap)
        return strf("total %d past the buffer (%d)", total, ab.cap);
    std::vector<int32_t> sorted(total), eids(total / bs);
    d2h(sorted.data(), ab.sorted.p, (size_t)total * 4);
    d2h(eids.data(), ab.expert_ids.p, (size_t)(total / bs) * 4);
    int off = 0;
    for (int e = 0; e < E; e++) {
        const int cnt = (int)want[e].size(), padded = (cnt + bs - 1) / bs * bs;
        std::vector<int> got(sorted.begin() + off, sorted.begin() + off + cnt);
        std::sort(got.begin(), got.end());
        if (got != want[e])
            return strf("expert %d: wrong pairs in its run", e);
        for (int p = off + cnt; p < off + padded; p++)
            if (sorted[p] != n)
                return strf("expert %d: padding %d is %d, not %d", e, p, sorted[p], n);
        for (int b = off / bs; b < (off + padded) / bs; b++)
            if (eids[b] != e)
                return strf("block %d: expert %d, not %d", b, eids[b], e);
        off += padded;
    }
    return "";
}

struct AlignRow {
    const Cfg *c;
    int T, bs;
    bool prefill;
    std::string router; /* the router before it (decode) */
    Cell router_node;   /* router + consumer - consumer, measured beside it */
    Cell node[N_ALIGN + 1], incr[N_ALIGN + 1]; /* last: memra's fused layout (the hook) */
    std::string check[N_ALIGN + 1];
};
std::vector<AlignRow> align_rows;

void align_decode_one(CfgState &cs, int T)
{
    const Cfg &c = *cs.c;
    AlignRow row;
    row.c = &c, row.T = T, row.prefill = false, row.bs = align_block_size(T, c.E);
    const DecodeRow *dr = find_decode(&c, T);
    const unsigned np = (unsigned)(T * c.top_k);
    const std::string where = strf("align %s T=%d", c.name, T);
    if (!dr || dr->best < 0) {
        row.router = "none";
        for (int i = 0; i <= N_ALIGN; i++)
            row.node[i] = row.incr[i] = Cell::na("no peer router measured for this size");
        align_rows.push_back(row);
        return;
    }
    const Arm best = (Arm)dr->best;
    row.router = ARM_COL[best];
    std::vector<Bufs> L(LAYERS);
    std::vector<AlignBufs> A(LAYERS);
    for (int il = 0; il < LAYERS; il++) {
        L[il].alloc(c, T, vllm_needs_ws(c.E));
        A[il].alloc((int)np, c.E, row.bs);
    }
    upload_layers(L, cs, T);
    const Cell cons = attempt(where + " consumer", [&] {
        return graph_us_per_layer([&](int il) { launch_consumer(L[il], np, false, false); }, false);
    });
    const Cell rc = attempt(strf("%s %s + consumer", where.c_str(), ARM_NAME[best]), [&] {
        return graph_us_per_layer(
            [&](int il) {
                run_arm(best, cs, T, L[il], cs.il_base + il, false);
                launch_consumer(L[il], np, false, false);
            },
            false);
    });
    row.router_node = diff_cell(rc, cons);
    for (int i = 0; i < N_ALIGN; i++) {
        const Cell full = attempt(
            strf("%s %s + %s + consumer", where.c_str(), ARM_NAME[best], ALIGN_ARMS[i].name), [&] {
                return graph_us_per_layer(
                    [&](int il) {
                        run_arm(best, cs, T, L[il], cs.il_base + il, false);
                        ALIGN_ARMS[i].run(L[il].ids.as<int32_t>(), (int)np, c.E, row.bs, A[il]);
                        launch_consumer(L[il], np, false, false);
                    },
                    false);
            });
        row.node[i] = diff_cell(full, cons);
        row.incr[i] = diff_cell(full, rc);
        json_cell("align_decode", c, T, ALIGN_ARMS[i].key, 0, "router_plus_align_node_us",
                  row.node[i],
                  strf(", \"router\": \"%s\", \"block_size\": %d", ARM_KEY[best], row.bs));
        json_cell("align_decode", c, T, ALIGN_ARMS[i].key, 0, "align_increment_us", row.incr[i]);
    }
    /* the hook: memra's fused route + layout in the same graph shape */
    try {
        memra_fused_layout(cs, T, L[0], A[0], cs.il_base, row.bs);
        const Cell full = attempt(where + " memra fused layout", [&] {
            return graph_us_per_layer(
                [&](int il) {
                    memra_fused_layout(cs, T, L[il], A[il], cs.il_base + il, row.bs);
                    launch_consumer(L[il], np, false, false);
                },
                false);
        });
        row.node[N_ALIGN] = diff_cell(full, cons);
    } catch (const NotAvailable &e) {
        row.node[N_ALIGN] = Cell::na(e.what());
    }
    json_cell("align_decode", c, T, "memra_fused_layout", 0, "node_us", row.node[N_ALIGN]);
    json_cell("align_decode", c, T, std::string(ARM_KEY[best]) + "+consumer", 0, "router_node_us",
              row.router_node);
    align_rows.push_back(row);
}

void align_prefill_one(CfgState &cs, int T, const std::vector<float> &h, bool check)
{
    const Cfg &c = *cs.c;
    AlignRow row;
    row.c = &c, row.T = T, row.prefill = true, row.bs = align_block_size(T, c.E);
    const int np = T * c.top_k;
    const std::string where = strf("align prefill %s T=%d", c.name, T);
    /* ids from a router run on this batch: memra's, else the first peer that serves it */
    Bufs b;
    b.alloc(c, T, vllm_needs_ws(c.E));
    AlignBufs ab;
    ab.alloc(np, c.E, row.bs);
    h2d(b.logits.p, h.data(), (size_t)T * c.E * 4);
    int src = -1;
    for (int a = 0; a < N_ARMS && src < 0; a++) {
        if (skip_reason((Arm)a, c))
            continue;
        try {
            run_arm((Arm)a, cs, T, b, cs.il_prefill(), false);
            sync_stream();
            src = a;
        } catch (const Failure &) {
            health_check(where + " ids");
        }
    }
    if (src < 0) {
        row.router = "none";
        for (int i = 0; i <= N_ALIGN; i++)
            row.node[i] = Cell::fail("no router produced ids");
        align_rows.push_back(row);
        return;
    }
    row.router = ARM_COL[src];
    std::vector<int32_t> hid((size_t)np);
    d2h(hid.data(), b.ids.p, (size_t)np * 4);
    for (int i = 0; i < N_ALIGN; i++) {
        row.node[i] = attempt(strf("%s %s", where.c_str(), ALIGN_ARMS[i].name), [&] {
            /* right after the router: its ids are in L2, as in serving */
            return calls_us(
                [&](int) { ALIGN_ARMS[i].run(b.ids.as<int32_t>(), np, c.E, row.bs, ab); }, 1,
                false);
        });
        if (check && row.node[i].good()) {
            try {
                ALIGN_ARMS[i].run(b.ids.as<int32_t>(), np, c.E, row.bs, ab);
                sync_stream();
                const std::string bad = align_check(hid, c.E, row.bs, ab);
                row.check[i] = bad.empty() ? "valid" : "INVALID: " + bad;
            } catch (const Failure &f) {
                row.check[i] = std::string("check failed: ") + f.what();
                health_check(where + " check");
            }
        }
        json_cell("align_prefill", c, T, ALIGN_ARMS[i].key, 0, "us", row.node[i],
                  strf(", \"block_size\": %d, \"ids_from\": \"%s\", \"check\": \"%s\"", row.bs,
                       ARM_KEY[src], jesc(row.check[i]).c_str()));
    }
    /* memra: routing + tables + layout, the whole step, against the best peer's router
     * and the best align above */
    row.node[N_ALIGN] = attempt(where + " memra fused layout", [&] {
        return calls_us([&](int) { memra_fused_layout(cs, T, b, ab, cs.il_prefill(), row.bs); },
                        1, false);
    });
    if (check && row.node[N_ALIGN].good()) {
        try {
            memra_fused_layout(cs, T, b, ab, cs.il_prefill(), row.bs);
            sync_stream();
            std::vector<int32_t> mid((size_t)np);
            d2h(mid.data(), b.ids.p, (size_t)np * 4);
            const std::string bad = align_check(mid, c.E, row.bs, ab);
            row.check[N_ALIGN] = bad.empty() ? "valid" : "INVALID: " + bad;
        } catch (const Failure &f) {
            row.check[N_ALIGN] = std::string("check failed: ") + f.what();
            health_check(where + " memra check");
        }
    }
    json_cell("align_prefill", c, T, "memra_fused_layout", 0, "us", row.node[N_ALIGN],
              strf(", \"block_size\": %d", row.bs));
    align_rows.push_back(row);
}

void print_align_table()
{
    printf("\n## Align (moe_align_block_size): decode, µs per layer in the 32-layer graph after "
           "the best peer router\n\n");
    printf("| config | tokens | block size | router | router node | align arm | router + align "
           "node | align increment | memra fused layout |\n");
    printf("| --- | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: |\n");
    for (const AlignRow &r : align_rows) {
        if (r.prefill)
            continue;
        for (int i = 0; i < N_ALIGN; i++)
            printf("| %s | %d | %d | %s | %s | %s | %s | %s | %s |\n", r.c->name, r.T, r.bs,
                   r.router.c_str(), cell_str(r.router_node).c_str(), ALIGN_ARMS[i].name,
                   cell_str(r.node[i]).c_str(), cell_str(r.incr[i]).c_str(),
                   cell_str(r.node[N_ALIGN]).c_str());
    }
    printf(
        "\nAlign alone at prefill sizes (µs per call, ids in L2 as right after the router):\n\n");
    printf("| config | tokens | block size | ids from | align arm | µs | output check | memra "
           "fused layout |\n| --- | ---: | ---: | --- | --- | ---: | --- | ---: |\n");
    for (const AlignRow &r : align_rows) {
        if (!r.prefill)
            continue;
        for (int i = 0; i < N_ALIGN; i++)
            printf("| %s | %d | %d | %s | %s | %s | %s | %s |\n", r.c->name, r.T, r.bs,
                   r.router.c_str(), ALIGN_ARMS[i].name, cell_str(r.node[i], "%.1f").c_str(),
                   r.check[i].empty() ? "—" : r.check[i].c_str(),
                   cell_str(r.node[N_ALIGN]).c_str());
    }
    printf("\nNot built here (README.md): ");
    for (const Missing &m : MISSING)
        if (strstr(m.serves, "align"))
            printf("%s; ", m.peer);
    printf("\n");
    fflush(stdout);
}

/* ------------------------------------------------------------------ plan, setup, main */

/* Host only, no GPU: memra's host arm (the bits its device arm must reproduce) against the
 * fp64 reference, on the exactness section's batch. Checks the reference itself before a GPU
 * run, and says how often binary32 routing meets an fp64 near-tie. */
void host_check()
{
    printf("\nHost check (no GPU): memra_route_tables_host against the fp64 reference, %d "
           "tokens per batch:\n\n",
           EXACT_T);
    printf("| config | logits | tokens ≠ fp64 | max abs weight err vs fp64 (agreeing tokens) "
           "|\n| --- | --- | ---: | ---: |\n");
    for (CfgState &cs : cfgs)
        for (int bt = 0; bt < N_BATCHES; bt++) {
            const Cfg &c = *cs.c;
            cfg_host_init(cs, cs.idx);
            const int T = EXACT_T, K = c.top_k;
            const std::vector<float> h = exact_batch(prefill_logits(cs, T), c.E, bt);
            const size_t np = (size_t)T * K;
            std::vector<int32_t> sel(np);
            std::vector<float> selw(np), scl(3 * np);
            std::vector<uint64_t> ptrs(3 * np);
            memra_faults f;
            const memra_status r =
                memra_route_tables_host(h.data(), (uint32_t)T, &cs.spec, &cs.mac, &cs.sl,
                                        sel.data(), selw.data(), ptrs.data(), scl.data(), &f);
            if (r != MEMRA_OK) {
                printf("| %s | %s | host arm: %s: %s | |\n", c.name, BATCHES[bt],
                       memra_status_string(r), memra_last_error());
                continue;
            }
            long differ = 0;
            double werr = 0;
            std::vector<int> rid;
            std::vector<double> rw;
            for (int t = 0; t < T; t++) {
                ref_route(h.data() + (size_t)t * c.E, cs, rid, rw);
                std::vector<std::pair<int, float>> got(K);
                for (int j = 0; j < K; j++)
                    got[j] = {sel[(size_t)t * K + j], selw[(size_t)t * K + j]};
                std::sort(got.begin(), got.end());
                bool same = true;
                for (int j = 0; j < K; j++)
                    same = same && got[j].first == rid[j];
                if (!same) {
                    differ++;
                    continue;
                }
                for (int j = 0; j < K; j++)
                    werr = std::max(werr, std::fabs((double)got[j].second - rw[j]));
            }
            printf("| %s | %s | %ld | %.3g |\n", c.name, BATCHES[bt], differ, werr);
        }
    fflush(stdout);
}

void print_plan()
{
    printf("# bench_peers: memra against the peer routers, one process, one GPU\n\n");
    printf("Configurations and arms (— : the arm does not serve it, and why):\n\n");
    printf("| config | spec | memra | FlashInfer | vLLM softmax | vLLM sigmoid | SGLang gate |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- |\n");
    for (const CfgState &cs : cfgs) {
        printf("| %s | %s |", cs.c->name, cfg_desc(*cs.c).c_str());
        for (int a = 0; a < N_ARMS; a++) {
            const char *why = skip_reason((Arm)a, *cs.c);
            printf(" %s |",
                   why ? strf("— (%s)", why).c_str() : (arm_has_pdl((Arm)a) ? "yes, +PDL" : "yes"));
        }
        printf("\n");
    }
    printf("\nPeers the task names that are not built here (README.md, \"not vendored\"):\n");
    for (const Missing &m : MISSING)
        printf("- %s (would serve: %s)\n", m.peer, m.serves);
    printf("\nSections: %s. Decode %s tokens, %d layers per graph, %s; prefill %s tokens; "
           "exactness %d tokens; align block size 16 when tokens <= experts, else 64.\n",
           opt.sections.c_str(), "1/8/64/256", LAYERS,
           opt.quick ? "median of 5 samples x 20 replays (--quick)"
                     : "median of 20 samples x 50 replays",
           "4096/16384/65536", EXACT_T);
    fflush(stdout);
}

void usage()
{
    fprintf(stderr, "usage: bench_peers [--json PATH] [--dry|--list] [--quick] [--sections LIST]\n"
                    "                   [--configs LIST] [--wait-timeout-s S] [--budget-s S]\n"
                    "  --sections  comma list of decode,prefill,exact,align (default all)\n"
                    "  --configs   comma list of names (DeepSeek-V3,Kimi-K2,GLM-4.5,Qwen3-MoE,\n"
                    "              Qwen3-Next,Mixtral; default all)\n"
                    "  --dry       print the plan, check for a GPU and exit (77: no GPU)\n"
                    "  --budget-s  skip what is left after this many seconds (default 300)\n"
                    "exit: 0 ran (failed arms are listed), 1 the GPU context was lost, 2 usage,\n"
                    "      77 no GPU\n");
}

int parse(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        auto val = [&]() -> const char * {
            if (i + 1 >= argc) {
                usage();
                exit(2);
            }
            return argv[++i];
        };
        if (a == "--json")
            opt.json = val();
        else if (a == "--dry" || a == "--list")
            opt.dry = true;
        else if (a == "--quick")
            opt.quick = true;
        else if (a == "--sections")
            opt.sections = val();
        else if (a == "--configs")
            opt.configs = val();
        else if (a == "--wait-timeout-s")
            opt.wait_timeout_s = atof(val());
        else if (a == "--budget-s")
            opt.budget_s = atof(val());
        else if (a == "-h" || a == "--help") {
            usage();
            exit(0);
        } else {
            fprintf(stderr, "bench_peers: unknown argument %s\n", argv[i]);
            usage();
            return 2;
        }
    }
    if (opt.wait_timeout_s <= 0)
        opt.wait_timeout_s = 30;
    return 0;
}

bool cfg_selected(const char *name)
{
    if (opt.configs.empty())
        return true;
    const std::string list = "," + opt.configs + ",";
    return list.find("," + std::string(name) + ",") != std::string::npos;
}

void write_meta(int runtime_ver, int driver_ver)
{
    json_meta = strf("{\"program\": \"bench_peers\", \"device\": \"%s\", \"sm\": %d, "
                     "\"cuda_runtime\": %d, \"cuda_driver\": %d, \"memra_version\": \"%s\", "
                     "\"memra_pdl\": %d, \"memra_error\": \"%s\", \"quick\": %d, "
                     "\"layers\": %d, \"exact_tokens\": %d, \"commit\": \"%s\"}",
                     jesc(st.device).c_str(), st.sm, runtime_ver, driver_ver,
                     jesc(memra_version_string()).c_str(), st.memra_pdl, jesc(st.memra_err).c_str(),
                     opt.quick ? 1 : 0, LAYERS, EXACT_T,
                     jesc(getenv("MEMRA_COMMIT") ? getenv("MEMRA_COMMIT") : "").c_str());
}

void print_failures()
{
    if (failures.empty())
        return;
    printf("\n## Failed measurements (%zu)\n\n", failures.size());
    for (const std::string &f : failures)
        printf("- %s\n", f.c_str());
    fflush(stdout);
}

int run_all()
{
    /* decode */
    if (section_on("decode")) {
        for (CfgState &cs : cfgs)
            for (int T : DECODE_T) {
                if (over_budget()) {
                    failures.push_back(
                        strf("decode %s T=%d: skipped (time budget)", cs.c->name, T));
                    continue;
                }
                fprintf(stderr, "[%6.1f s] decode %s, %d tokens\n", elapsed(), cs.c->name, T);
                decode_one(cs, T);
            }
        print_decode_table();
        json_write();
    }
    if (section_on("prefill") || section_on("exact") || section_on("align")) {
        for (CfgState &cs : cfgs) {
            const int tmax = section_on("prefill") ? PREFILL_T[2] : EXACT_T;
            std::vector<float> h = prefill_logits(cs, tmax);
            if (section_on("prefill"))
                for (int T : PREFILL_T) {
                    if (over_budget()) {
                        failures.push_back(
                            strf("prefill %s T=%d: skipped (time budget)", cs.c->name, T));
                        continue;
                    }
                    fprintf(stderr, "[%6.1f s] prefill %s, %d tokens\n", elapsed(), cs.c->name, T);
                    prefill_one(cs, T, h);
                }
            if (section_on("exact") && !over_budget()) {
                fprintf(stderr, "[%6.1f s] exact %s\n", elapsed(), cs.c->name);
                for (int bt = 0; bt < N_BATCHES; bt++)
                    try {
                        exact_one(cs, exact_batch(h, cs.c->E, bt), BATCHES[bt]);
                    } catch (const Failure &f) {
                        failures.push_back(
                            strf("exact %s %s: %s", cs.c->name, BATCHES[bt], f.what()));
                        health_check("exact");
                    }
            }
            if (section_on("align") && section_on("prefill"))
                for (int T : PREFILL_T) {
                    if (over_budget())
                        continue;
                    try {
                        align_prefill_one(cs, T, h, T == EXACT_T);
                    } catch (const Failure &f) {
                        failures.push_back(
                            strf("align prefill %s T=%d: %s", cs.c->name, T, f.what()));
                        health_check("align prefill");
                    }
                }
            else if (section_on("align") && !over_budget()) {
                try {
                    align_prefill_one(cs, EXACT_T, h, true);
                } catch (const Failure &f) {
                    failures.push_back(strf("align prefill %s: %s", cs.c->name, f.what()));
                    health_check("align prefill");
                }
            }
        }
        if (section_on("prefill"))
            print_prefill_table();
        if (section_on("exact"))
            print_exact_table();
        json_write();
    }
    if (section_on("align")) {
        if (section_on("decode"))
            for (CfgState &cs : cfgs)
                for (int T : DECODE_T) {
                    if (over_budget())
                        continue;
                    fprintf(stderr, "[%6.1f s] align decode %s, %d tokens\n", elapsed(), cs.c->name,
                            T);
                    try {
                        align_decode_one(cs, T);
                    } catch (const Failure &f) {
                        failures.push_back(
                            strf("align decode %s T=%d: %s", cs.c->name, T, f.what()));
                        health_check("align decode");
                    }
                }
        else
            printf("\n(align in the decode graph needs the decode section: it follows the "
                   "best peer router found there)\n");
        print_align_table();
        json_write();
    }
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    setvbuf(stdout, nullptr, _IOLBF, 0);
    st.t0 = now_s();
    if (parse(argc, argv))
        return 2;
    for (int i = 0; i < N_CFGS; i++)
        if (cfg_selected(CFGS[i].name)) {
            CfgState cs;
            cs.c = &CFGS[i], cs.idx = i;
            cfgs.push_back(std::move(cs));
        }
    if (cfgs.empty()) {
        fprintf(stderr, "bench_peers: --configs selects nothing\n");
        return 2;
    }
    print_plan();
    printf("\nmemra library: %s (header %s)\n", memra_version_string(), MEMRA_VERSION_STRING);
    if (opt.dry)
        host_check();

    int ndev = 0;
    const cudaError_t dr = cudaGetDeviceCount(&ndev);
    if (dr != cudaSuccess || ndev == 0) {
        const std::string why = strf("no CUDA device (cudaGetDeviceCount: %s)",
                                     dr != cudaSuccess ? cudaGetErrorString(dr) : "0 devices");
        printf("\nbench_peers: %s; nothing measured.\n", why.c_str());
        if (!opt.dry) {
            st.memra_err = why;
            write_meta(0, 0);
            json_rows.push_back(strf("{\"section\": \"summary\", \"error\": \"%s\", \"exit\": 77}",
                                     jesc(why).c_str()));
            json_write();
        }
        return 77;
    }
    int rt = 0, drv = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
        st.device = prop.name;
        st.sm = prop.major * 10 + prop.minor;
        printf("device 0: %s, sm_%d, %d SMs, L2 %d MB, %.0f GB; CUDA runtime %d, driver %d\n",
               prop.name, st.sm, prop.multiProcessorCount, prop.l2CacheSize >> 20,
               (double)prop.totalGlobalMem / 1e9, rt, drv);
    }
    if (opt.dry) {
        printf("\n--dry: a GPU is present; nothing measured.\n");
        return 0;
    }
    if (st.sm != 90)
        printf("note: the peers and the bench kernels are built for sm_90a only; on sm_%d "
               "their launches fail (each arm then says so)\n",
               st.sm);

    int rc = 0;
    try {
        CU(cudaSetDevice(0));
        CU(cudaFree(nullptr)); /* the primary context, which memra's engine retains too */
        CU(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
        CU(cudaMalloc(&st.sink, 64));
        CU(cudaMalloc(&st.flush, st.flush_bytes));
        CU(cudaMemsetAsync(st.flush, 0x5a, st.flush_bytes, st.s));
        sync_stream();
        memra_status ms = memra_engine_create(0, &st.eng);
        if (ms != MEMRA_OK) {
            st.memra_err =
                strf("memra_engine_create: %s: %s", memra_status_string(ms), memra_last_error());
            st.eng = nullptr;
        } else {
            int active = 0;
            if (memra_engine_set_pdl(st.eng, 1, &active) == MEMRA_OK)
                st.memra_pdl = active;
            memra_engine_set_pdl(st.eng, 0, nullptr);
        }
        if (!st.memra_err.empty())
            printf("memra's arm cannot run: %s\n", st.memra_err.c_str());
        printf("memra PDL: %s\n", st.memra_pdl ? "in effect" : "not in effect");
        write_meta(rt, drv);
        for (CfgState &cs : cfgs)
            cfg_init(cs, cs.idx);
        for (const CfgState &cs : cfgs)
            if (!cs.memra_err.empty())
                printf("memra cannot prepare %s: %s\n", cs.c->name, cs.memra_err.c_str());
        run_all();
    } catch (const Fatal &f) {
        printf("\nbench_peers: STOPPED: %s\n", f.what());
        failures.push_back(std::string("STOPPED: ") + f.what());
        if (!decode_rows.empty())
            print_decode_table();
        if (!prefill_rows.empty())
            print_prefill_table();
        if (!exact_rows.empty())
            print_exact_table();
        rc = 1;
    } catch (const std::exception &e) {
        printf("\nbench_peers: setup failed: %s\n", e.what());
        failures.push_back(std::string("setup: ") + e.what());
        rc = 1;
    }
    print_failures();
    if (json_meta.empty())
        write_meta(rt, drv);
    json_rows.push_back(strf("{\"section\": \"summary\", \"failures\": %zu, \"seconds\": %.1f, "
                             "\"exit\": %d}",
                             failures.size(), elapsed(), rc));
    json_write();
    printf("\nbench_peers: done in %.1f s, %zu failed measurement(s)%s\n", elapsed(),
           failures.size(), opt.json ? strf(", JSON in %s", opt.json).c_str() : "");
    fflush(stdout);
    fflush(stderr);
    if (st.dead || rc != 0)
        _exit(rc ? rc : 1); /* a lost context: no teardown that could wait on it */
    cfgs.clear();
    if (st.eng)
        memra_engine_destroy(st.eng);
    cudaFree(st.flush);
    cudaFree(st.sink);
    cudaStreamDestroy(st.s);
    return rc;
}
