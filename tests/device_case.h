/* The device-arm case runner and random cases for the test programs: the
 * library's own (src/check/self_check.h), under the names the tests use. */
#ifndef MEMRA_DEVICE_CASE_H
#define MEMRA_DEVICE_CASE_H

#include "check/self_check.h"

typedef memra_case dcase;
typedef memra_random_case random_case;
#define device_case_check memra_case_check
#define random_case_make memra_random_case_make
#define random_case_free memra_random_case_free
/* Seed gate case i on layer i. */
#define gate_case_check(eng, i, why, len)                                                          \
    memra_gate_case_check((eng), (i), (int)(i), 0, NULL, (why), (len))

#endif /* MEMRA_DEVICE_CASE_H */
