/* The launch: one kernel launch, plain or with programmatic dependent launch
 * (the engine's setting, memra_engine_set_pdl), and the launchers behind
 * the public device calls. */
#ifndef MEMRA_LAUNCH_H
#define MEMRA_LAUNCH_H

#include "engine.h"

/* Launches f over grid x block threads on s with its parameter block
 * (CU_LAUNCH_PARAM_BUFFER_*): through cuLaunchKernelEx with programmatic
 * stream serialization when the engine has PDL in effect, else
 * cuLaunchKernel. A failure is MEMRA_ERR_DRIVER naming the call. Caller
 * holds the context. */
memra_status memra_launch(memra_engine *eng, const char *fn, CUfunction f, unsigned grid,
                          unsigned block, void *args, size_t size, CUstream s);

/* Whether this engine's device and driver can launch with PDL (sm_90+,
 * cuLaunchKernelEx, CUDA 12.3+ so graphs capture it). */
int memra_pdl_supported(const memra_engine *eng);

/* The table launcher behind the public calls (routing's is in route.h). With `scratch` set, il
 * names one of MEMRA_SCRATCH_LAYERS slots of the library's own (the self-check's), which no public
 * layer index reaches. The launch counts its faults into `faults` (MEMRA_FAULT_WORDS words), or
 * into the engine's fault word when it is 0. */
memra_status memra_vrows_launch(memra_engine *eng, const char *fn, memra_devptr sel,
                                memra_devptr selw, uint32_t n_pairs, uint32_t n_expert, int il,
                                int scratch, memra_devptr faults, const memra_vrows_macros *macros,
                                const memra_vrows_slabs *slabs, const memra_vrows_options *options,
                                memra_devptr ptrs, memra_devptr scl, memra_stream stream);

#endif /* MEMRA_LAUNCH_H */
