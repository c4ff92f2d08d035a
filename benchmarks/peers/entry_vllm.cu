/* vLLM's topk_softmax / topk_sigmoid kernels and launcher, called with raw pointers.
 *
 * The upstream file is included unmodified; its torch binding (after `} // namespace vllm`)
 * compiles against shim/vllm (declarations only) and is never called. Built with vLLM's flags:
 * -std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr (build.sh). */
#include "vllm/csrc/libtorch_stable/moe/topk_softmax_kernels.cu"

#include <cstdio>
#include <exception>

#include "peers.h"

extern "C" int peer_vllm_topk(const float *logits, const float *bias, int n_tokens, int n_expert,
                              int top_k, int sigmoid, int renormalize, double scale, float *weights,
                              int32_t *ids, int32_t *token_expert_indices, float *workspace,
                              cudaStream_t s, char *err, size_t errlen)
{
    (void)cudaGetLastError(); /* a stale error is not this launch's */
    try {
        if (sigmoid)
            vllm::moe::topkGatingKernelLauncher<int, float, vllm::moe::SCORING_SIGMOID>(
                logits, weights, ids, token_expert_indices, workspace, n_tokens, n_expert, top_k,
                renormalize != 0, bias, scale, s);
        else
            vllm::moe::topkGatingKernelLauncher<int, float, vllm::moe::SCORING_SOFTMAX>(
                logits, weights, ids, token_expert_indices, workspace, n_tokens, n_expert, top_k,
                renormalize != 0, bias, scale, s);
    } catch (const std::exception &e) {
        snprintf(err, errlen, "vLLM launcher refused: %s", e.what());
        return 1;
    }
    const cudaError_t r = cudaGetLastError();
    if (r != cudaSuccess) {
        snprintf(err, errlen, "vLLM launch failed: %s", cudaGetErrorString(r));
        return 1;
    }
    return 0;
}
