/* The routing spec's checks and its mirrored planes, shared by the host arm
 * and the device launcher: both refuse exactly the same inputs. */
#ifndef MEMRA_ROUTE_SPEC_H
#define MEMRA_ROUTE_SPEC_H

#include <memra/memra.h>

/* Every field of the spec (and the bias's values), naming the field. */
memra_status memra_route_spec_check(const char *fn, const memra_route_spec *spec);

/* The host planes a layer mirrors for routing: the three macro planes if
 * given, then the bias if given. Returns how many (0 to 4). */
int memra_route_planes(const memra_route_spec *spec, const memra_vrows_macros *macros,
                       int have_macros, const float *planes[4]);

#endif /* MEMRA_ROUTE_SPEC_H */
