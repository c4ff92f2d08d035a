/* The table host arm after its arguments are checked, for the routing host
 * arm, which checks its own (memra_route_validate) and then builds the
 * tables of the sel/selw it chose. */
#ifndef MEMRA_VROWS_HOST_H
#define MEMRA_VROWS_HOST_H

#include <memra/memra.h>

/* memra_vrows_tables_host_ex's work on checked arguments, n_pairs >= 1;
 * macros NULL or all three planes. Pairs from n_live on are a padded
 * batch's padding (NULL pointers, +0 scales, counted in `padded`); n_live =
 * n_pairs for none. Messages name `fn`. */
memra_status memra_vrows_tables_host_checked(const char *fn, const int32_t *sel, const float *selw,
                                             uint32_t n_pairs, uint32_t n_live, uint32_t n_expert,
                                             const memra_vrows_macros *macros,
                                             const memra_vrows_slabs *slabs,
                                             const memra_vrows_options *options, uint64_t *ptrs,
                                             float *scl, memra_faults *faults);

#endif /* MEMRA_VROWS_HOST_H */
