/* The engine's fault word on the device: what the kernels count (bad expert
 * ids, non-finite scales, the lowest faulting pair) and how the host reads
 * it. The layout is the kernels' (kernels_src/vrows.cu). */
#ifndef MEMRA_FAULTS_H
#define MEMRA_FAULTS_H

#define MEMRA_FAULT_WORDS 4 /* u32s in the word and in each readback area */
#define MEMRA_FAULT_BAD_EXPERT 0
#define MEMRA_FAULT_NONFINITE 1
#define MEMRA_FAULT_FIRST_PAIR 2
#define MEMRA_FAULT_NOT_LOCAL 3

#endif /* MEMRA_FAULTS_H */
