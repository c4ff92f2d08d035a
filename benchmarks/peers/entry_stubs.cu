/* Stand-ins for a peer whose entry point did not compile on this machine (build.sh compiles
 * this file with -DSTUB_<PEER> instead, and says so loudly): the arm then fails at run time
 * with this message, and every other arm still runs. */
#include <cstdio>

#include "peers.h"

#define NOT_BUILT(name)                                                                            \
    snprintf(err, errlen, "%s was not built: its compile failed (see build.sh's log)", name);      \
    return 1

#ifdef STUB_FLASHINFER
extern "C" int peer_flashinfer_noauxtc(const float *, const float *, int, int, int, int, int,
                                       double, float *, int32_t *, int, cudaStream_t, char *err,
                                       size_t errlen)
{
    NOT_BUILT("FlashInfer NoAuxTc");
}
#endif
#ifdef STUB_VLLM
extern "C" int peer_vllm_topk(const float *, const float *, int, int, int, int, int, double,
                              float *, int32_t *, int32_t *, float *, cudaStream_t, char *err,
                              size_t errlen)
{
    NOT_BUILT("vLLM topk_softmax/topk_sigmoid");
}
#endif
#ifdef STUB_SGLANG
extern "C" int peer_sglang_fused_gate(const float *, const float *, int, int, int, int, int, double,
                                      float *, int32_t *, cudaStream_t, char *err, size_t errlen)
{
    NOT_BUILT("SGLang moe_fused_gate");
}
#endif
