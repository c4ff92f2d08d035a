/* The layout's device launches, shared with the fused routing call. */
#ifndef MEMRA_LAYOUT_H
#define MEMRA_LAYOUT_H

#include "engine/context.h"
#include "layout_params.h"

/* The layout of n_pairs device ids by lp (checked): one launch or three.
 * Caller holds the call; `cap` is what work on s meets. */
memra_status memra_layout_launch(memra_call *c, memra_capture cap, uint64_t ids, uint32_t n_pairs,
                                 const memra_layout_params *lp, CUstream s);

/* The kernels the layout of n_pairs launches, in order (one up to
 * MEMRA_LAYOUT_ONE_LAUNCH, else count, scan, place), loaded where they are
 * not (refused under capture): memra_layout_launch's, and a fused call's
 * before its routing launch, so a refusal leaves the capture as it found
 * it. */
memra_status memra_layout_kernels(memra_call *c, memra_capture cap, uint32_t n_pairs,
                                  CUfunction f[3]);

/* memra_layout_launch with the kernels memra_layout_kernels gave for
 * n_pairs (a fused call looked them up before its routing launch). */
memra_status memra_layout_launch_with(memra_call *c, uint64_t ids, uint32_t n_pairs,
                                      const memra_layout_params *lp, CUfunction const f[3],
                                      CUstream s);

/* The device address of layer il's count (scratch: the self-check's
 * layers), allocating the engine's counts at their first use. */
memra_status memra_layout_ticket(memra_call *c, memra_capture cap, int il, int scratch,
                                 uint64_t *out);

#endif /* MEMRA_LAYOUT_H */
