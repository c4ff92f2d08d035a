/* One kernel launch, plain or with programmatic dependent launch (the
 * engine's setting, memra_engine_set_pdl). */
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

#endif /* MEMRA_LAUNCH_H */
