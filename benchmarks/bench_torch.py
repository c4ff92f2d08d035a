"""memra from Python, beside the bare baselines, in one process:

  host cost per call (n_pairs = 8, median of batch means): a bare ctypes call
  of memra_moe_vrows_tables_from_sel, the package's Engine.tables_from_sel,
  and the torch op torch.ops.memra.vrows_tables_ (checks + dispatch);

  GPU cost per decode layer inside a CUDA graph (32 layers, 64 tokens x
  top-8): memra's op beside building the same tables with PyTorch ops
  (gather + multiply + concatenate), both replayed, timed with CUDA events.

Usage: python benchmarks/bench_torch.py [--json FILE]   (MEMRA_LIB: the library)
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402

import memra  # noqa: E402
import memra.torch as mt  # noqa: E402

DEV = torch.device("cuda", 0)
BASES = [0x7F0000000000, 0x7F4000000000, 0x7F8000000000]
STRIDES = [24 << 20, 24 << 20, 48 << 20]
N_EXPERT = 256


def host_cost_us(fn, batches=30, per=500):
    """Median over batches of the mean host time of one call."""
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    means = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(per):
            fn()
        means.append((time.perf_counter() - t0) / per * 1e6)
        torch.cuda.synchronize()
    return statistics.median(means)


def graph_us_per_layer(build, layers, replays=200):
    """Replay time of a graph of `layers` layers, per layer (median of runs)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        build()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        build()
    for _ in range(20):
        g.replay()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    runs = []
    for _ in range(5):
        e0.record()
        for _ in range(replays):
            g.replay()
        e1.record()
        torch.cuda.synchronize()
        runs.append(e0.elapsed_time(e1) * 1e3 / replays / layers)
    return statistics.median(runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="memra-bench-torch.json")
    args = ap.parse_args()
    rows = []

    def row(group, what, value, unit, base=None):
        ratio = f"  ({value / base:.3f}x)" if base else ""
        print(f"  {what:<58} {value:9.3f} {unit}{ratio}")
        rows.append({"group": group, "what": what, "value": value, "unit": unit,
                     "ratio": value / base if base else None})

    props = torch.cuda.get_device_properties(DEV)
    print(f"device: {props.name}; torch {torch.__version__}; memra {memra.version()}")
    eng = mt.engine(DEV)
    planes = torch.rand(3, N_EXPERT) + 0.5
    mt.prepare_layer(0, planes, DEV)

    n = 8
    sel = torch.randint(0, N_EXPERT, (n,), dtype=torch.int32, device=DEV)
    selw = torch.rand(n, device=DEV)
    ptrs = torch.empty(3 * n, dtype=torch.int64, device=DEV)
    scl = torch.empty(3 * n, device=DEV)
    stream = torch.cuda.current_stream().cuda_stream

    L = memra.lib()
    slab = memra.slabs(BASES, STRIDES)
    m = memra._lib.Macros()
    base = planes.data_ptr()
    m.plane[:] = [base, base + 4 * N_EXPERT, base + 8 * N_EXPERT]
    raw = (eng._ptr(), sel.data_ptr(), selw.data_ptr(), n, N_EXPERT, 0, ctypes.byref(m),
           ctypes.byref(slab), ptrs.data_ptr(), scl.data_ptr(), stream or None)
    fn = L.memra_moe_vrows_tables_from_sel

    print("\nhost cost per call (n_pairs = 8; median of batch means)")
    bare = host_cost_us(lambda: fn(*raw))
    row("host", "bare ctypes call of memra_moe_vrows_tables_from_sel", bare, "us")
    np_planes = planes.numpy()
    row("host", "memra.Engine.tables_from_sel (checks + ctypes)",
        host_cost_us(lambda: eng.tables_from_sel(sel.data_ptr(), selw.data_ptr(), n, N_EXPERT, 0,
                                                 np_planes, slab, ptrs.data_ptr(),
                                                 scl.data_ptr(), stream)), "us", bare)
    op = torch.ops.memra.vrows_tables_
    row("host", "torch.ops.memra.vrows_tables_ (custom op)",
        host_cost_us(lambda: op(sel, selw, ptrs, scl, N_EXPERT, 0, planes, BASES, STRIDES)),
        "us", bare)

    layers, tokens, k = 32, 64, 8
    pl = [torch.rand(3, N_EXPERT) + 0.5 for _ in range(layers)]
    for il in range(layers):
        mt.prepare_layer(il, pl[il], DEV)
    pl_dev = [p.to(DEV) for p in pl]
    np_ = tokens * k
    sels = [torch.randint(0, N_EXPERT, (np_,), dtype=torch.int32, device=DEV)
            for _ in range(layers)]
    selws = [torch.rand(np_, device=DEV) for _ in range(layers)]
    outs = [(torch.empty(3 * np_, dtype=torch.int64, device=DEV),
             torch.empty(3 * np_, device=DEV)) for _ in range(layers)]
    torch.cuda.synchronize()

    def memra_layers():
        for il in range(layers):
            op(sels[il], selws[il], outs[il][0], outs[il][1], N_EXPERT, il, pl[il], BASES,
               STRIDES)

    def torch_layers():
        for il in range(layers):
            s = sels[il].long()
            p = pl_dev[il]
            torch.cat([BASES[0] + s * STRIDES[0], BASES[1] + s * STRIDES[1],
                       BASES[2] + s * STRIDES[2]], out=outs[il][0])
            torch.cat([p[0][s], p[1][s], selws[il] * p[2][s]], out=outs[il][1])

    print(f"\nGPU time per decode layer in a CUDA graph ({layers} layers, {tokens} tokens x top-{k})")
    t_torch = graph_us_per_layer(torch_layers, layers)
    t_memra = graph_us_per_layer(memra_layers, layers)
    row("graph", "PyTorch ops (gather, multiply, concatenate)", t_torch, "us")
    row("graph", "memra op (one kernel)", t_memra, "us", t_torch)

    # Routing: DeepSeek-V3's (sigmoid, bias, 8 groups, top-4 groups, top-8,
    # renormalised, x2.5) router step and its tables, memra's one launch
    # beside the same in PyTorch ops, per layer of a 32-layer graph.
    print("\nrouting + tables per decode layer in a CUDA graph (DeepSeek-V3 config, 32 layers)")
    bias = torch.randn(N_EXPERT) * 0.01
    bias_dev = bias.to(DEV)
    for tokens in (1, 8, 64):
        logits = [torch.randn(tokens, N_EXPERT, device=DEV) for _ in range(layers)]

        def memra_route():
            for il in range(layers):
                mt.route_tables(logits[il], 8, il, pl[il], BASES, STRIDES, scoring="sigmoid",
                                n_group=8, topk_group=4, renormalize=True,
                                routed_scaling_factor=2.5, bias=bias)

        def torch_route():
            for il in range(layers):
                sc = torch.sigmoid(logits[il])
                c = sc + bias_dev
                g = c.view(tokens, 8, 32).topk(2, dim=-1).values.sum(-1)
                gi = g.topk(4, dim=-1).indices
                mask = torch.zeros(tokens, 8, dtype=torch.bool, device=DEV).scatter_(1, gi, True)
                cm = c.masked_fill(~mask.repeat_interleave(32, dim=1), float("-inf"))
                idx = cm.topk(8, dim=-1).indices
                w = sc.gather(1, idx)
                w = w / w.sum(-1, keepdim=True) * 2.5
                s = idx.reshape(-1)
                p = pl_dev[il]
                torch.cat([BASES[0] + s * STRIDES[0], BASES[1] + s * STRIDES[1],
                           BASES[2] + s * STRIDES[2]])
                torch.cat([p[0][s], p[1][s], w.reshape(-1) * p[2][s]])

        for il in range(layers):
            mt.route_tables(logits[il], 8, il, pl[il], BASES, STRIDES, scoring="sigmoid",
                            n_group=8, topk_group=4, renormalize=True, routed_scaling_factor=2.5,
                            bias=bias)
        torch.cuda.synchronize()
        t_torch = graph_us_per_layer(torch_route, layers)
        t_memra = graph_us_per_layer(memra_route, layers)
        row("route", f"{tokens} token(s): PyTorch ops (router + tables)", t_torch, "us")
        row("route", f"{tokens} token(s): memra_moe_route_tables (one kernel)", t_memra, "us",
            t_torch)

    with open(args.json, "w") as f:
        json.dump({"device": props.name, "torch": torch.__version__, "memra": memra.version(),
                   "rows": rows}, f, indent=1)
    print(f"\nJSON: {args.json}")


if __name__ == "__main__":
    main()
