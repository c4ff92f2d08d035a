/* The model families every routing benchmark measures, listed once: memra-bench's routing
 * section (bench_route.c), bench_peers (peers/bench_peers.cu) and the phase probe
 * (route_probe.py, which reads this file's rows) take them from here.
 *
 * X(name, n_expert, top_k, n_group, topk_group, sigmoid, routed_scaling_factor): sigmoid
 * configs score with sigmoid and add a per-expert bias (DeepSeek-V3's e_score_correction_bias),
 * the others with softmax and no bias; every one renormalizes the chosen weights. One row a
 * line, plain literals: route_probe.py parses them. */
#ifndef MEMRA_BENCH_ROUTE_CONFIGS_H
#define MEMRA_BENCH_ROUTE_CONFIGS_H

#define MEMRA_BENCH_ROUTE_CONFIGS(X)                                                               \
    X("DeepSeek-V3", 256, 8, 8, 4, 1, 2.5f)                                                        \
    X("Kimi-K2", 384, 8, 1, 1, 1, 2.827f)                                                          \
    X("GLM-4.5", 160, 8, 1, 1, 1, 2.5f)                                                            \
    X("Qwen3-MoE", 128, 8, 1, 1, 0, 1.0f)                                                          \
    X("Qwen3-Next", 512, 10, 1, 1, 0, 1.0f)                                                        \
    X("Mixtral", 8, 2, 1, 1, 0, 1.0f)

#endif /* MEMRA_BENCH_ROUTE_CONFIGS_H */
