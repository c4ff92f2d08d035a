/* The peers' entry points (entry_*.cu), as the benchmark calls them: raw device pointers, a
 * stream, and a PDL flag where the peer supports PDL. Each returns 0 when it launched, or
 * nonzero with a message in err (its launcher refused the configuration, or the launch
 * failed: cudaGetLastError right after it). Nothing here synchronises; every call can be
 * captured into a CUDA graph. Logits, bias and weights are float32, ids int32, row-major
 * [n_tokens, n_expert] in and [n_tokens, top_k] out. */
#ifndef MEMRA_BENCH_PEERS_H
#define MEMRA_BENCH_PEERS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* FlashInfer 0.7.2.post1, tensorrt_llm::kernels::invokeNoAuxTc<float, float, float, int32_t>:
 * sigmoid + bias, grouped (n_group > 1) or plain top-k, always renormalised, times scale.
 * Serves: n_group == 1 and n_expert <= 384, or n_group > 1, n_expert <= 256,
 * n_expert / n_group <= 32 and that times topk_group <= 128; top_k <= 8. */
int peer_flashinfer_noauxtc(const float *logits, const float *bias, int n_tokens, int n_expert,
                            int n_group, int topk_group, int top_k, double scale, float *weights,
                            int32_t *ids, int pdl, cudaStream_t s, char *err, size_t errlen);

/* vLLM @085c812b, vllm::moe::topkGatingKernelLauncher<int, float, SCORING_SOFTMAX|SIGMOID>:
 * softmax or sigmoid (+ bias for choosing), top-k, renormalise optionally, times scale (vLLM's
 * topk_softmax binding passes 1.0). token_expert_indices: int32 [n_tokens, top_k] (written);
 * workspace: n_tokens * n_expert floats (used when n_expert is neither a power of two up to
 * 512 nor 192/320/384/448/576). */
int peer_vllm_topk(const float *logits, const float *bias, int n_tokens, int n_expert, int top_k,
                   int sigmoid, int renormalize, double scale, float *weights, int32_t *ids,
                   int32_t *token_expert_indices, float *workspace, cudaStream_t s, char *err,
                   size_t errlen);

/* SGLang @0470ac65 (jit_kernel moe_fused_gate.cuh), moe_fused_gate<float>: sigmoid + bias,
 * grouped top-k (group score: top-2 sum), renormalised; the scale applied on the output
 * (apply_routed_scaling_factor_on_output = true) so the weights compare with the others'.
 * Serves: n_expert a power of two, n_expert / n_group <= 32. bias: float32 (the launcher
 * requires the input's dtype). */
int peer_sglang_fused_gate(const float *logits, const float *bias, int n_tokens, int n_expert,
                           int n_group, int topk_group, int top_k, double scale, float *weights,
                           int32_t *ids, cudaStream_t s, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
