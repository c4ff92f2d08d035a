/* The launchers behind the public device calls. With `scratch` set, il
 * names one of MEMRA_SCRATCH_LAYERS slots of the library's own (the
 * self-check's), which no public layer index reaches. */
#ifndef MEMRA_LAUNCH_H
#define MEMRA_LAUNCH_H

#include <memra/memra.h>

memra_status memra_vrows_launch(memra_engine *eng, const char *fn, memra_devptr sel,
                                memra_devptr selw, uint32_t n_pairs, uint32_t n_expert, int il,
                                int scratch, const memra_vrows_macros *macros,
                                const memra_vrows_slabs *slabs, memra_devptr ptrs, memra_devptr scl,
                                memra_stream stream);

memra_status memra_route_launch(memra_engine *eng, const char *fn, memra_devptr logits,
                                uint32_t n_tokens, const memra_route_spec *spec, int il,
                                int scratch, const memra_vrows_macros *macros,
                                const memra_vrows_slabs *slabs, memra_devptr sel, memra_devptr selw,
                                memra_devptr ptrs, memra_devptr scl, memra_stream stream);

#endif /* MEMRA_LAUNCH_H */
