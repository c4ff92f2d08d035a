#!/usr/bin/env python3
"""What a router node's store pattern costs the kernel that reads its outputs
next: synthetic writers of one decode batch's outputs (sel, selw, three
pointer planes, three scale planes; T tokens x K pairs), each alone and
followed by bench_peers' consumer (one block reading every byte), in
route_probe.py's 32-node graphs. The writers differ only in which threads
write which pairs:

  token-warp      a block of 32 threads a token, lanes < K write its pairs
                  (the block kernel's warp 0; 32 B of sel a store)
  token-warp-cs   the same with streaming stores (st.global.cs)
  token-256       a block of 256 threads a token, threads < K write
  four-tokens     a block of 32 threads four tokens (K = 8: full 128-byte lines)
  coalesced       256 threads a block, thread p writes pair p (memra_vrows_kernel)
  one-block       one block of 256 threads writes every pair (a few SMs' worth)

    benchmarks/store_probe.py [--build BUILD] [--tokens 64,256] [--k 8]
"""
import argparse
import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import route_probe as rp  # noqa: E402

SRC = r"""
typedef unsigned long long u64;
__device__ __forceinline__ void put(int cs, int *sel, float *selw, u64 *ptrs, float *scl,
                                    unsigned n, unsigned p)
{
    if (cs) {
        __stcs(&sel[p], (int)p); __stcs(&selw[p], 0.5f);
        __stcs(&ptrs[p], (u64)p << 8); __stcs(&ptrs[n + p], (u64)p << 9);
        __stcs(&ptrs[2 * n + p], (u64)p << 10);
        __stcs(&scl[p], 1.0f); __stcs(&scl[n + p], 2.0f); __stcs(&scl[2 * n + p], 3.0f);
    } else {
        sel[p] = (int)p; selw[p] = 0.5f;
        ptrs[p] = (u64)p << 8; ptrs[n + p] = (u64)p << 9; ptrs[2 * n + p] = (u64)p << 10;
        scl[p] = 1.0f; scl[n + p] = 2.0f; scl[2 * n + p] = 3.0f;
    }
}
/* mode 0: a block a token, threads < K; 1: the same, streaming; 2: a block
 * of 32 threads per (32 / K) tokens; 3: thread p pair p; 4: one block loops */
extern "C" __global__ void memra_store_probe_kernel(int *sel, float *selw, u64 *ptrs, float *scl,
                                                    unsigned n, unsigned K, int mode)
{
    const unsigned tid = threadIdx.x;
    if (mode <= 1) {
        if (tid < K) put(mode, sel, selw, ptrs, scl, n, blockIdx.x * K + tid);
    } else if (mode == 2) {
        const unsigned p = blockIdx.x * 32u + tid;
        if (p < n) put(0, sel, selw, ptrs, scl, n, p);
    } else if (mode == 3) {
        const unsigned p = blockIdx.x * blockDim.x + tid;
        if (p < n) put(0, sel, selw, ptrs, scl, n, p);
    } else {
        for (unsigned p = tid; p < n; p += blockDim.x) put(0, sel, selw, ptrs, scl, n, p);
    }
}
"""


class Outputs:
    """A batch's output buffers, as route_probe.Layer holds them (what its
    consumer reads)."""

    def __init__(self, T, K, bufs):
        self.T, self.K = T, K
        self.sel, self.selw, self.ptrs, self.scl = bufs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(rp.ROOT, "build"))
    ap.add_argument("--tokens", default="64,256")
    ap.add_argument("--k", type=int, default=8)
    a = ap.parse_args()
    if a.k < 1 or 32 % a.k:
        ap.error("--k: a divisor of 32 (a warp writes a token's pairs, four-tokens 32 / k tokens)")
    arch, stream = rp.open_device()
    _, fn, _ = rp.compile_block(None, None, arch, [], "store_probe", "memra_store_probe_kernel", SRC)
    _, consumer = rp.neighbours(arch, stream)
    for T in [int(x) for x in a.tokens.split(",")]:
        n = T * a.k
        layer = Outputs(T, a.k, [rp.alloc(per * n) for per in (4, 4, 24, 12)])
        cons = consumer(layer)
        alone = rp.graph_node_us(stream, cons)
        print("%d tokens x %d pairs: consumer alone %.2f us per node" % (T, a.k, alone))
        arms = [("token-warp", 0, T, 32), ("token-warp-cs", 1, T, 32), ("token-256", 0, T, 256),
                ("four-tokens", 2, (n + 31) // 32, 32), ("coalesced", 3, (n + 255) // 256, 256),
                ("one-block", 4, 1, 256)]
        for name, mode, grid, threads in arms:
            ptrs = rp.kernel_params(ctypes.c_uint64(layer.sel), ctypes.c_uint64(layer.selw),
                                    ctypes.c_uint64(layer.ptrs), ctypes.c_uint64(layer.scl),
                                    ctypes.c_uint32(n), ctypes.c_uint32(a.k), ctypes.c_int(mode))

            def w(grid=grid, threads=threads, ptrs=ptrs):
                rp.ck(rp.cu.cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, 0, stream, ptrs, None),
                      "launch writer")

            def both(w=w):
                w()
                cons()
            us = rp.graph_node_us(stream, w)
            pair = rp.graph_node_us(stream, both) - alone
            print("  %-14s grid %4d x %3d: alone %.2f, beside the consumer %.2f (%+.2f) us per node"
                  % (name, grid, threads, us, pair, pair - us))
    return 0


if __name__ == "__main__":
    sys.exit(main())
