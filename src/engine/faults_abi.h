/* memra_faults_take_kernel's parameter block (kernels_src/vrows.cu): the
 * fault word's address and the readback area it is moved into. The kernel
 * lives in the table module, but the fault word is the engine's. */
#ifndef MEMRA_FAULTS_ABI_H
#define MEMRA_FAULTS_ABI_H

#include <stdint.h>

typedef struct memra_take_args {
    uint64_t faults, out;
} memra_take_args;

#endif /* MEMRA_FAULTS_ABI_H */
