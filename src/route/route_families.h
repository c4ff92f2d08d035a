/* The six model families the routing benchmarks measure, listed once. Everything that names them
 * takes them from here:
 * - the benchmarks: memra-bench's routing section (benchmarks/bench_route.c), bench_peers
 *   (benchmarks/peers/bench_peers.cu, C++ under nvcc: this file holds macros only) and the phase
 *   probe (benchmarks/route_probe.py, which reads the rows as text);
 * - the route cases (route_cases.h): one family case a row, the benchmark's spec exactly, so the
 *   spec builds tests/kernel_budgets.inc holds to a budget are the builds the benchmarks time;
 * - the mock's spec builds (tests/meson.build reads the rows at configure time and compiles
 *   tests/mock/spec_build.c once a row, in this order).
 *
 * X(name, n_expert, top_k, n_group, topk_group, sigmoid, routed_scaling_factor, bias_in_place,
 *   macros): sigmoid families score with sigmoid and add a per-expert bias (DeepSeek-V3's
 * e_score_correction_bias), the others score with softmax and have no bias; every one takes
 * float32 logits, renormalizes the chosen weights and scores groups by vLLM's default. The last
 * two columns change how the route case feeds the spec, never the spec, and the benchmarks ignore
 * them: they keep some variety in the family cases' inputs without cases of their own.
 * bias_in_place (sigmoid only): the bias is read in place as a device float32 array (bias_ptr)
 * rather than mirrored from the host; macros: the case passes macro planes.
 *
 * One row a line, plain literals, names without '(' or ')': route_probe.py and tests/meson.build
 * parse the rows as text. */
#ifndef MEMRA_ROUTE_FAMILIES_H
#define MEMRA_ROUTE_FAMILIES_H

#define MEMRA_ROUTE_FAMILIES(X)                                                                    \
    X("DeepSeek-V3", 256, 8, 8, 4, 1, 2.5f, 0, 1)                                                  \
    X("Kimi-K2", 384, 8, 1, 1, 1, 2.827f, 1, 1)                                                    \
    X("GLM-4.5", 160, 8, 1, 1, 1, 2.5f, 0, 1)                                                      \
    X("Qwen3-MoE", 128, 8, 1, 1, 0, 1.0f, 0, 1)                                                    \
    X("Qwen3-Next", 512, 10, 1, 1, 0, 1.0f, 0, 0)                                                  \
    X("Mixtral", 8, 2, 1, 1, 0, 1.0f, 0, 1)

#endif /* MEMRA_ROUTE_FAMILIES_H */
