"""memra from Python, beside the bare baselines, in one process.

1. Eager call overhead (CPU or CUDA tensors): the time of one eager call of
   the routing ops (vLLM's and SGLang's signatures, memra's route_tables)
   beside torch.topk of the same scores (what a router costs at least; the
   goal is 1.2x), and where the time goes: the C call alone, what the
   package adds to it, the dispatcher (torch.library.Library kernel, and
   the same function registered with torch.library.custom_op), PyTorch's
   allocations and current-stream lookup. Decode-sized (1 and 16 tokens,
   DeepSeek-V3's 256 experts). Host time per call, median of batch means;
   on CUDA the batches end with a synchronize, and the kernels are small
   enough that the host is the bound. On CPU tensors the C call is the
   host arm, which computes the routing itself: there, the package's share
   (the call less the C call alone) is the number to read.

2. (CUDA) GPU time per decode layer inside a CUDA graph: the table op
   beside the same tables in PyTorch ops, and routing + tables beside the
   same in PyTorch ops (DeepSeek-V3), 32 layers, timed with CUDA events.

Usage: python benchmarks/bench_torch.py [--device cuda|cpu] [--json FILE]
       (MEMRA_LIB: the library)
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
from memra import _torch_ops  # noqa: E402
from memra.torch import sglang  # noqa: E402

BASES = [0x7F0000000000, 0x7F4000000000, 0x7F8000000000]
STRIDES = [24 << 20, 24 << 20, 48 << 20]
N_EXPERT = 256


def host_cost_us(fn, dev, batches=25, per=400):
    """Median over batches of the mean host time of one call."""
    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    for _ in range(300):
        fn()
    sync()
    means = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(per):
            fn()
        sync()
        means.append((time.perf_counter() - t0) / per * 1e6)
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


# The same implementation behind torch.library.custom_op, to show what the
# higher-level registration costs per call (memra registers with Library).
@torch.library.custom_op("memra_bench::grouped_topk", mutates_args=())
def _grouped_custom_op(hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int,
                       renormalize: bool, num_expert_group: int, topk_group: int,
                       scoring_func: str, routed_scaling_factor: float,
                       e_score_correction_bias: torch.Tensor) -> tuple[torch.Tensor,
                                                                        torch.Tensor]:
    return _torch_ops.grouped_topk_impl(hidden_states, gating_output, topk, renormalize,
                                        num_expert_group, topk_group, scoring_func,
                                        routed_scaling_factor, e_score_correction_bias)


@_grouped_custom_op.register_fake
def _(hidden_states, gating_output, topk, *rest):
    return (gating_output.new_empty((gating_output.shape[0], topk), dtype=torch.float32),
            gating_output.new_empty((gating_output.shape[0], topk), dtype=torch.int32))


def eager_section(dev, row):
    print(f"\neager call overhead on {dev} (DeepSeek-V3 routing: sigmoid, bias, 8 groups, "
          f"top-4 groups, top-8; host time per call, median of batch means)")
    bias = (torch.randn(N_EXPERT) * 0.01).to(dev)
    mt.route_prepare_layer(0, torch.rand(3, N_EXPERT) + 0.5, dev)
    L = memra.lib()
    for T in (1, 16, 4096):
        logits = torch.randn(T, N_EXPERT, device=dev)
        hidden = torch.zeros(T, 8, device=dev)
        scores = torch.sigmoid(logits)
        count = torch.tensor(T, dtype=torch.int32, device=dev)
        g = f"eager T={T}"
        base = host_cost_us(lambda: torch.topk(scores, 8), dev)
        row(g, f"T={T}: torch.topk(scores, 8) (the baseline)", base, "us")
        # the C call alone, its arguments prebuilt (what no binding can save)
        spec = memra.route_spec(N_EXPERT, 8, "sigmoid", 8, 4, True, 2.5,
                                bias_ptr=bias.data_ptr(), group_scoring="top2_sum")
        slab = memra.slabs((0, 0, 0), (0, 0, 0))
        outs = [torch.empty(T * 8, dtype=torch.int32, device=dev),
                torch.empty(T * 8, device=dev),
                torch.empty(3 * T * 8, dtype=torch.int64, device=dev),
                torch.empty(3 * T * 8, device=dev)]
        ptrs = [o.data_ptr() for o in outs]
        if dev.type == "cuda":
            eng = mt.engine(dev)
            stream = torch.cuda.current_stream(dev).cuda_stream
            fn, raw = L.memra_route_tables, (eng._ptr(), logits.data_ptr(), T,
                                             ctypes.byref(spec), 0, None,
                                             ctypes.byref(slab), *ptrs, stream)
            name = "memra_route_tables"
        else:
            f = memra.Faults()
            fn, raw = L.memra_route_tables_host, (logits.data_ptr(), T, ctypes.byref(spec), None,
                                                  ctypes.byref(slab), *ptrs, ctypes.byref(f))
            name = "memra_route_tables_host"
        c_alone = host_cost_us(lambda: fn(*raw), dev)
        args = (hidden, logits, 8, True, 8, 4, "sigmoid", 2.5, bias)
        for what, call in [
                ("memra.torch.grouped_topk (vLLM's signature)", lambda: mt.grouped_topk(*args)),
                ("memra.torch.sglang.biased_grouped_topk (SGLang's, padded batch)",
                 lambda: sglang.biased_grouped_topk(hidden, logits, bias, 8, True, 8, 4, 0, 2.5,
                                                    count)),
                ("memra.torch.sglang.moe_fused_gate (sgl-kernel's)",
                 lambda: sglang.moe_fused_gate(logits, bias, 8, 4, 8, 0, 2.5)),
                ("memra.torch.route_tables (+ the tables)",
                 lambda: mt.route_tables(logits, 8, 0, BASES, STRIDES, "sigmoid", 8, 4, True, 2.5,
                                         bias)),
                ("memra.torch.fused_topk (softmax, top-8)",
                 lambda: mt.fused_topk(hidden, logits, 8, True))]:
            t = host_cost_us(call, dev)
            row(g, f"T={T}: {what}", t, "us", base)
            row(g, f"T={T}:   of which the package (the call less the C call alone)",
                t - c_alone, "us", base)
        op = torch.ops.memra.grouped_topk.default
        row(g, f"T={T}: torch.ops.memra.grouped_topk (through the dispatcher)",
            host_cost_us(lambda: op(*args), dev), "us", base)
        row(g, f"T={T}: the same via torch.library.custom_op (for comparison)",
            host_cost_us(lambda: _grouped_custom_op(*args), dev), "us", base)
        # where the time goes
        row(g, f"T={T}:   the C call alone ({name}, ctypes, arguments prebuilt)", c_alone, "us",
            base)
        row(g, f"T={T}:   2 x torch.empty (ids, weights; the tables go to kept scratch)",
            host_cost_us(lambda: (torch.empty(T, 8, dtype=torch.int32, device=dev),
                                  torch.empty(T, 8, dtype=torch.float32, device=dev)),
                         dev), "us", base)
        row(g, f"T={T}:   memra.torch._direct (is the dispatcher needed?)",
            host_cost_us(lambda: mt._direct(hidden, logits, bias), dev), "us", base)
        row(g, f"T={T}:   the configuration's lookup (memra._torch_ops.grouped_topk_config)",
            host_cost_us(lambda: _torch_ops.grouped_topk_config(8, True, 8, 4, "sigmoid", 2.5),
                         dev), "us", base)
        if dev.type == "cuda":
            row(g, f"T={T}:   torch.cuda.current_stream(dev).cuda_stream",
                host_cost_us(lambda: torch.cuda.current_stream(dev).cuda_stream, dev), "us",
                base)
            row(g, f"T={T}:   torch._C._cuda_getCurrentRawStream (what memra uses)",
                host_cost_us(lambda: torch._C._cuda_getCurrentRawStream(dev.index), dev), "us",
                base)


def graph_section(dev, row):
    layers = 32
    pl = [torch.rand(3, N_EXPERT) + 0.5 for _ in range(layers)]
    for il in range(layers):
        mt.prepare_layer(il, pl[il], dev)
        mt.route_prepare_layer(il, pl[il], dev)
    pl_dev = [p.to(dev) for p in pl]
    tokens, k = 64, 8
    np_ = tokens * k
    sels = [torch.randint(0, N_EXPERT, (np_,), dtype=torch.int32, device=dev)
            for _ in range(layers)]
    selws = [torch.rand(np_, device=dev) for _ in range(layers)]
    outs = [(torch.empty(3 * np_, dtype=torch.int64, device=dev),
             torch.empty(3 * np_, device=dev)) for _ in range(layers)]
    torch.cuda.synchronize()

    def memra_layers():
        for il in range(layers):
            mt.vrows_tables_(sels[il], selws[il], outs[il][0], outs[il][1], N_EXPERT, il, BASES,
                             STRIDES)

    def torch_layers():
        for il in range(layers):
            s = sels[il].long()
            p = pl_dev[il]
            torch.cat([BASES[0] + s * STRIDES[0], BASES[1] + s * STRIDES[1],
                       BASES[2] + s * STRIDES[2]], out=outs[il][0])
            torch.cat([p[0][s], p[1][s], selws[il] * p[2][s]], out=outs[il][1])

    print(f"\nGPU time per decode layer in a CUDA graph ({layers} layers, {tokens} tokens x "
          f"top-{k})")
    t_torch = graph_us_per_layer(torch_layers, layers)
    t_memra = graph_us_per_layer(memra_layers, layers)
    row("graph", "PyTorch ops (gather, multiply, concatenate)", t_torch, "us")
    row("graph", "memra op (one kernel)", t_memra, "us", t_torch)

    print(f"\nrouting + tables per decode layer in a CUDA graph (DeepSeek-V3 config, {layers} "
          f"layers)")
    bias = (torch.randn(N_EXPERT) * 0.01).to(dev)
    for tokens in (1, 8, 64):
        logits = [torch.randn(tokens, N_EXPERT, device=dev) for _ in range(layers)]

        def memra_route():
            for il in range(layers):
                mt.route_tables(logits[il], 8, il, BASES, STRIDES, scoring="sigmoid", n_group=8,
                                topk_group=4, renormalize=True, routed_scaling_factor=2.5,
                                bias=bias)

        def torch_route():
            for il in range(layers):
                sc = torch.sigmoid(logits[il])
                c = sc + bias
                g = c.view(tokens, 8, 32).topk(2, dim=-1).values.sum(-1)
                gi = g.topk(4, dim=-1).indices
                mask = torch.zeros(tokens, 8, dtype=torch.bool, device=dev).scatter_(1, gi, True)
                cm = c.masked_fill(~mask.repeat_interleave(32, dim=1), float("-inf"))
                idx = cm.topk(8, dim=-1).indices
                w = sc.gather(1, idx)
                w = w / w.sum(-1, keepdim=True) * 2.5
                s = idx.reshape(-1)
                p = pl_dev[il]
                torch.cat([BASES[0] + s * STRIDES[0], BASES[1] + s * STRIDES[1],
                           BASES[2] + s * STRIDES[2]])
                torch.cat([p[0][s], p[1][s], w.reshape(-1) * p[2][s]])

        torch.cuda.synchronize()
        t_torch = graph_us_per_layer(torch_route, layers)
        t_memra = graph_us_per_layer(memra_route, layers)
        row("route", f"{tokens} token(s): PyTorch ops (router + tables)", t_torch, "us")
        row("route", f"{tokens} token(s): memra route_tables (one kernel)", t_memra, "us",
            t_torch)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", default="memra-bench-torch.json")
    args = ap.parse_args()
    dev = torch.device(args.device)
    if dev.type == "cuda":
        dev = torch.device("cuda", dev.index or 0)
    rows = []

    def row(group, what, value, unit, base=None):
        ratio = f"  ({value / base:.2f}x)" if base else ""
        print(f"  {what:<72} {value:9.2f} {unit}{ratio}")
        rows.append({"group": group, "what": what, "value": value, "unit": unit,
                     "ratio": value / base if base else None})

    name = torch.cuda.get_device_properties(dev).name if dev.type == "cuda" else "CPU"
    print(f"device: {name}; torch {torch.__version__}; memra {memra.version()}")
    eager_section(dev, row)
    if dev.type == "cuda":
        graph_section(dev, row)
    with open(args.json, "w") as f:
        json.dump({"device": name, "torch": torch.__version__, "memra": memra.version(),
                   "rows": rows}, f, indent=1)
    print(f"\nJSON: {args.json}")


if __name__ == "__main__":
    main()
