/* The layout's host arm after its arguments are checked, for the fused
 * routing host arm, which lays out the sel it chose. */
#ifndef MEMRA_LAYOUT_HOST_H
#define MEMRA_LAYOUT_HOST_H

#include <stdint.h>

#include <memra/memra.h>

#include "layout_params.h"

/* The layout of ids by lp (host addresses, checked by
 * memra_layout_validate): what the kernels write, computed plainly.
 * MEMRA_ERR_OUT_OF_MEMORY (nothing written) if its scratch cannot be had. */
memra_status memra_layout_host_run(const char *fn, const int32_t *ids, uint32_t n_pairs,
                                   const memra_layout_params *lp);

#endif /* MEMRA_LAYOUT_HOST_H */
