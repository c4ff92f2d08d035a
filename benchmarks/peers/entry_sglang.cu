/* SGLang's moe_fused_gate (the JIT kernel's header), called through its own host launcher.
 *
 * The upstream header is included unmodified against shim/sglang (see memra_sgl_shim.h for
 * what the shim provides). Built with SGLang's JIT flags: -std=c++20 -O3
 * --expt-relaxed-constexpr (build.sh). */
#include "sglang/python/sglang/jit_kernel/csrc/moe/moe_fused_gate.cuh"

#include <cstdio>
#include <exception>

#include "peers.h"

extern "C" int peer_sglang_fused_gate(const float *logits, const float *bias, int n_tokens,
                                      int n_expert, int n_group, int topk_group, int top_k,
                                      double scale, float *weights, int32_t *ids, cudaStream_t s,
                                      char *err, size_t errlen)
{
    (void)cudaGetLastError(); /* a stale error is not this launch's */
    const DLDataType f32{kDLFloat, 32, 1}, i32{0, 32, 1};
    const DLDevice dev{kDLCUDA, 0};
    try {
        tvm::ffi::TensorView input((void *)logits, f32, {n_tokens, n_expert}, dev);
        tvm::ffi::TensorView b((void *)bias, f32, {n_expert}, dev);
        tvm::ffi::TensorView out(weights, f32, {n_tokens, top_k}, dev);
        tvm::ffi::TensorView idx(ids, i32, {n_tokens, top_k}, dev);
        host::memra_shim_current_stream() = s;
        moe_fused_gate<fp32_t>(input, b, out, idx, n_group, topk_group, top_k,
                               /*num_fused_shared_experts=*/0, scale,
                               /*apply_routed_scaling_factor_on_output=*/true);
    } catch (const std::exception &e) {
        snprintf(err, errlen, "SGLang launcher refused: %s", e.what());
        return 1;
    }
    const cudaError_t r = cudaGetLastError();
    if (r != cudaSuccess) {
        snprintf(err, errlen, "SGLang launch failed: %s", cudaGetErrorString(r));
        return 1;
    }
    return 0;
}
