#!/usr/bin/env python3
"""Where the expert-sorted layout's time goes at prefill sizes: memra_layout_tables
(through memra.torch.moe_align_block_size, vLLM's call) on random top-k ids of
each size, timed two ways in one process: eagerly (each call's host work and
launches included, as an engine that does not capture pays) and as one CUDA
graph of 20 calls (what the GPU takes). (`memra bench --route` times the
three-launch path's tile sizes.)

    MEMRA_LIB=build/src/libmemra.so.2 benchmarks/layout_probe.py \\
        [--sizes 256:8:512,8:2:4096] [--block 64]

With --once it makes one call a size and times nothing: under Nsight Compute
(`ncu -k regex:memra_layout --metrics gpu__time_duration.sum
benchmarks/layout_probe.py --once`) that gives each layout kernel's own
duration.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import torch  # noqa: E402
import memra.torch as mt  # noqa: E402

SIZES = "256:8:512,256:8:2048,256:8:4096,256:8:16384,256:8:65536,8:2:4096,8:2:65536,512:10:4096"


def ids_for(E, K, T, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.rand(T, E, device="cuda", generator=g).topk(K, dim=1).indices.to(torch.int32)


def timed(fn, reps, per):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) * 1e3 / per)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default=SIZES, help="E:K:T,... (experts, top-k, tokens)")
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--once", action="store_true", help="one call a size, nothing timed")
    a = ap.parse_args()
    mt.layout_prepare(torch.device("cuda"))
    print("| experts | top-k | tokens | pairs | eager µs/call | graph µs/call |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for i, sz in enumerate(a.sizes.split(",")):
        E, K, T = (int(x) for x in sz.split(":"))
        ids = ids_for(E, K, T, 7 + i)

        def one():
            mt.moe_align_block_size(ids, a.block, E)

        if a.once:
            one()
            torch.cuda.synchronize()
            print(f"{E} experts, top-{K}, {T} tokens: one call", flush=True)
            continue
        for _ in range(3):
            one()
        torch.cuda.synchronize()
        per = 20
        eager = timed(lambda: [one() for _ in range(per)], a.reps, per)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(per):
                one()
        graph = timed(g.replay, a.reps, per)
        print(f"| {E} | {K} | {T} | {T * K} | {eager:.2f} | {graph:.2f} |", flush=True)
        del g


if __name__ == "__main__":
    main()
