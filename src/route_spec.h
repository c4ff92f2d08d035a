/* The routing spec's checks and its mirrored planes, shared by the host arm
 * and the device launcher: both refuse exactly the same inputs. */
#ifndef MEMRA_ROUTE_SPEC_H
#define MEMRA_ROUTE_SPEC_H

#include <memra/memra.h>

/* Every field of the spec (and the bias's values), naming the field. */
memra_status memra_route_spec_check(const char *fn, const memra_route_spec *spec);

/* Everything memra_route_tables_host and memra_moe_route_tables check
 * before writing (the spec, logits, n_tokens, then the tables' arguments as
 * memra_vrows_validate for n_tokens * top_k pairs), so both arms refuse
 * exactly the same inputs. Addresses are host or device addresses. */
memra_status memra_route_validate(const char *fn, uint64_t logits, uint32_t n_tokens,
                                  const memra_route_spec *spec, const memra_vrows_macros *macros,
                                  const memra_vrows_slabs *slabs, uint64_t sel, uint64_t selw,
                                  uint64_t ptrs, uint64_t scl, int *have_macros);

/* The host planes a layer mirrors for routing: the three macro planes if
 * given, then the bias if given. Returns how many (0 to 4). */
int memra_route_planes(const memra_route_spec *spec, const memra_vrows_macros *macros,
                       int have_macros, const float *planes[4]);

#endif /* MEMRA_ROUTE_SPEC_H */
