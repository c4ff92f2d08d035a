/* Argument checks shared by the host arm and the device launcher: both arms
 * must refuse exactly the same inputs, before anything is written. */
#ifndef MEMRA_VALIDATE_H
#define MEMRA_VALIDATE_H

#include <memra/memra.h>

/* Addresses are host or device addresses as integers; `fn` names the public
 * entry point in the message. On success *have_macros says whether the three
 * macro planes were given. */
memra_status memra_vrows_validate(const char *fn, uint64_t sel, uint64_t selw, uint32_t n_pairs,
                                  uint32_t n_expert, const memra_vrows_macros *macros,
                                  const memra_vrows_slabs *slabs, uint64_t ptrs, uint64_t scl,
                                  int *have_macros);

/* All three planes or none: returns 1 if planes are given, 0 if not, and
 * fails (MEMRA_ERR_NULL_ARG) on a partial set. */
memra_status memra_macros_check(const char *fn, const memra_vrows_macros *macros, int *present);

#endif /* MEMRA_VALIDATE_H */
