/* Argument checks shared by the host arm and the device launcher: both arms
 * must refuse exactly the same inputs, before anything is written. */
#ifndef MEMRA_VROWS_SPEC_H
#define MEMRA_VROWS_SPEC_H

#include <memra/memra.h>

/* Addresses are host or device addresses as integers; `fn` names the public
 * entry point in the message. On success *have_macros says whether the three
 * macro planes were given. */
memra_status memra_vrows_validate(const char *fn, uint64_t sel, uint64_t selw, uint32_t n_pairs,
                                  uint32_t n_expert, const memra_vrows_macros *macros,
                                  const memra_vrows_slabs *slabs, uint64_t ptrs, uint64_t scl,
                                  int *have_macros);

/* memra_vrows_validate with options (NULL: none) for n_expert routed
 * experts; the slab check covers every slot. n_pairs = 0 is allowed: then
 * only the scalars and the options are checked (the pointers may be NULL),
 * and the caller does nothing. */
memra_status memra_vrows_validate_ex(const char *fn, uint64_t sel, uint64_t selw, uint32_t n_pairs,
                                     uint32_t n_expert, const memra_vrows_options *options,
                                     const memra_vrows_macros *macros,
                                     const memra_vrows_slabs *slabs, uint64_t ptrs, uint64_t scl,
                                     int *have_macros);

/* The options' own checks for n_expert routed experts, naming fields as
 * `prefix` + name (e.g. "options->", "spec->"); *n_slots gets the slots the
 * slabs and planes hold. */
memra_status memra_vrows_options_check(const char *fn, const char *prefix, uint32_t n_expert,
                                       const memra_vrows_options *options, uint32_t *n_slots);

/* All three planes or none: *present is 1 if planes are given, 0 if not;
 * a partial set is MEMRA_ERR_NULL_ARG naming the missing plane. */
memra_status memra_macros_check(const char *fn, const memra_vrows_macros *macros, int *present);

#endif /* MEMRA_VROWS_SPEC_H */
