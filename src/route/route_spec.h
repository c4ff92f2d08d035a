/* The routing spec's checks and its mirrored planes, shared by the host arm
 * and the device launcher: both refuse exactly the same inputs. */
#ifndef MEMRA_ROUTE_SPEC_H
#define MEMRA_ROUTE_SPEC_H

#include <memra/memra.h>

#include "layout_params.h"

/* Every field of the spec (and the host bias's values), naming the field.
 * Floats are judged by their bits, whatever the caller's FTZ/DAZ. */
memra_status memra_route_spec_check(const char *fn, const memra_route_spec *spec);

/* Everything memra_route_tables_host and memra_route_tables check
 * before writing (the spec, logits, n_tokens, then the tables' arguments as
 * memra_vrows_validate_ex for n_tokens * K pairs), so both arms refuse
 * exactly the same inputs. Addresses are host or device addresses.
 * n_tokens = 0 passes with only the spec and macros checked: the caller
 * then does nothing. */
memra_status memra_route_validate(const char *fn, uint64_t logits, uint32_t n_tokens,
                                  const memra_route_spec *spec, const memra_vrows_macros *macros,
                                  const memra_vrows_slabs *slabs, uint64_t sel, uint64_t selw,
                                  uint64_t ptrs, uint64_t scl, int *have_macros);

/* The fused call's layout (memra_route_tables_ex and its host arm): both
 * given, the layout's n_expert the routing's n_expert + n_shared, no map of
 * its own (the routing's labels the blocks), then memra_layout_validate of
 * sel's n_pairs; fills lp with the routing's map. */
memra_status memra_route_layout_check(const char *fn, const memra_route_spec *spec, uint64_t sel,
                                      uint32_t n_pairs, const memra_layout_spec *layout_spec,
                                      const memra_layout *layout, int device,
                                      memra_layout_params *lp);

/* The table options the spec carries (expert_map, n_local, n_shared). */
memra_vrows_options memra_route_spec_options(const memra_route_spec *spec);

/* K: a token's pairs, top_k routed then n_shared shared experts. */
uint32_t memra_route_pairs_per_token(const memra_route_spec *spec);

/* Whether groups are scored by their best (MEMRA_GROUP_MAX, or AUTO without
 * a bias: vLLM's rule) rather than their top-2 sum. */
int memra_route_group_max(const memra_route_spec *spec);

/* The slots this rank's slabs and macro planes hold. */
uint32_t memra_route_n_slots(const memra_route_spec *spec);

/* The host planes a layer mirrors for routing, `*len` floats each: the
 * three macro planes (n_slots floats) if given, then the host bias
 * (n_expert floats) if given. Where those lengths differ (expert
 * parallelism, shared experts), each is copied into `scratch` and padded
 * with zeros to the longer; scratch holds MEMRA_ROUTE_SCRATCH floats.
 * Returns how many planes (0 to 4). */
#define MEMRA_ROUTE_SCRATCH (4 * (MEMRA_ROUTE_MAX_EXPERT + MEMRA_ROUTE_MAX_TOP_K))
int memra_route_planes(const memra_route_spec *spec, const memra_vrows_macros *macros,
                       int have_macros, const float *planes[4], uint32_t *len, float *scratch);

#endif /* MEMRA_ROUTE_SPEC_H */
