/* FlashInfer's NoAuxTc (TensorRT-LLM's deepseek_v3_topk_kernel), called through its launcher
 * tensorrt_llm::kernels::invokeNoAuxTc, the function FlashInfer's tvm-ffi binding calls with
 * the tensors' data pointers. The kernels and that launcher are compiled from the unmodified
 * flashinfer/csrc/fused_moe/noAuxTcKernels.cu (its binding against shim/flashinfer, never
 * called); this file only declares the instantiation it uses. Built with FlashInfer's JIT
 * flags: -std=c++17 -use_fast_math -O3 -DNDEBUG -DENABLE_BF16 (build.sh). */
#include <cstdio>
#include <exception>

#include "flashinfer/trtllm/fused_moe/noAuxTcKernels.h"
#include "peers.h"

extern "C" int peer_flashinfer_noauxtc(const float *logits, const float *bias, int n_tokens,
                                       int n_expert, int n_group, int topk_group, int top_k,
                                       double scale, float *weights, int32_t *ids, int pdl,
                                       cudaStream_t s, char *err, size_t errlen)
{
    (void)cudaGetLastError(); /* a stale error is not this launch's */
    try {
        /* FlashInfer's binding dispatches float32 scores + float32 bias to <float, float,
         * float, int32_t>; the launcher takes non-const pointers and only reads these two. */
        tensorrt_llm::kernels::invokeNoAuxTc<float, float, float, int32_t>(
            const_cast<float *>(logits), const_cast<float *>(bias), weights, ids, n_tokens,
            n_expert, n_group, topk_group, top_k, scale, pdl != 0, s, nullptr);
    } catch (const std::exception &e) {
        snprintf(err, errlen, "FlashInfer launcher refused: %s", e.what());
        return 1;
    }
    /* invokeNoAuxTc drops cudaLaunchKernelEx's status (its sync check is off under NDEBUG) */
    const cudaError_t r = cudaGetLastError();
    if (r != cudaSuccess) {
        snprintf(err, errlen, "FlashInfer launch failed: %s", cudaGetErrorString(r));
        return 1;
    }
    return 0;
}
