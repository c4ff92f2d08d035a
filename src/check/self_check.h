/* Device arm against host arm on the caller's GPU: one case at a time
 * (memra_case_check), the seed gate, random batches, and the public
 * memra_engine_self_check built from them. The test suites use the same
 * functions, so the gate a serving process runs at boot is the gate CI and
 * the GPU suite run. */
#ifndef MEMRA_SELF_CHECK_H
#define MEMRA_SELF_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include <memra/memra.h>

/* One device-arm case: host inputs, the layer and stream to use. */
typedef struct memra_case {
    uint32_t n, n_expert;
    const int32_t *sel;
    const float *selw;
    const memra_vrows_macros *mac;
    const memra_vrows_slabs *sl;
    int il;
    memra_stream stream;
    int scratch; /* il names one of the library's scratch slots (the self-check's) */
} memra_case;

/* Uploads, launches, downloads on c->stream and compares pointer for
 * pointer and scale bit for bit with the host arm, and the faults the
 * launch counted (into a fault word of the check's own, so other launches
 * on the engine neither disturb the check nor lose their counts to it) with
 * the host arm's. Returns 0; 1 when they differ; -status when a call failed (the
 * message in `why`). Thread-safe. */
int memra_case_check(memra_engine *eng, const memra_case *c, char *why, size_t why_len);

/* Seed gate case i (gate_cases.h) with its macro planes on layer il (a
 * scratch slot with `scratch`), on `stream`. */
int memra_gate_case_check(memra_engine *eng, size_t i, int il, int scratch, memra_stream stream,
                          char *why, size_t why_len);

/* A random case owning its inputs: ids in [0, n_expert) except, with
 * bad_ids, about one pair in 64 out of range on either side; special floats
 * in the weights and planes; slabs at the top of the address space with
 * strides of at least 2^min_stride_bit. */
typedef struct memra_random_case {
    int32_t *sel;
    float *selw, *pl;
    memra_vrows_macros mac;
    memra_vrows_slabs sl;
    memra_case c;
} memra_random_case;

/* 0, or -1 when out of host memory (then nothing is held). */
int memra_random_case_make(memra_random_case *r, uint64_t *seed, uint32_t n, uint32_t n_expert,
                           int bad_ids, int with_macros, int min_stride_bit, int il);
void memra_random_case_free(memra_random_case *r);

/* Routing case i (route_cases.h) for n_tokens tokens of logits from `seed`
 * (edge values when `edges`), device arm (the kernel `variant` picks, a
 * MEMRA_ROUTE_VARIANT_*) against host arm: sel, selw, the tables and the
 * faults (counted into a word of the check's own), bit for bit; the
 * planes and bias on layer il (a scratch slot with `scratch`), a bias read
 * in place and an expert map in device buffers of their own. Returns as memra_case_check. */
int memra_route_case_check(memra_engine *eng, size_t i, uint32_t n_tokens, uint64_t seed, int edges,
                           int il, int scratch, int variant, memra_stream stream, char *why,
                           size_t why_len);

#endif /* MEMRA_SELF_CHECK_H */
