"""A PyTorch serving step with memra inside a CUDA graph.

router logits -> top-k in torch -> sel/selw tensors -> memra tables on torch's
current stream, all captured in one torch.cuda.CUDAGraph, replayed with new
logits many times; every replay compared bit for bit with the host arm.
Exits 77 (skipped) without torch or a GPU.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: torch sees no CUDA device")
    sys.exit(77)

import memra  # noqa: E402

TOKENS, TOPK, N_EXPERT, LAYERS, REPLAYS = 512, 8, 256, 4, 200
MiB = 1 << 20


def main():
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    torch.cuda.init()
    assert memra.version() // 10000 == 0, "unexpected major"
    eng = memra.Engine(0)
    info = eng.info()
    print(f"memra on {info.name.decode()} sm_{info.sm}; torch {torch.__version__}")
    n_pairs = TOKENS * TOPK
    rng = np.random.default_rng(1234)
    # Per-layer macro planes (host, float32) and serving-size slabs past 4 GiB.
    planes = [[rng.uniform(0.5, 2.0, N_EXPERT).astype(np.float32) for _ in range(3)]
              for _ in range(LAYERS)]
    slab = memra.slabs([0x7E0000000000, 0x7E4000000000, 0x7E8000000000],
                       [24 * MiB, 24 * MiB, 48 * MiB])

    logits = torch.empty(TOKENS, N_EXPERT, device=dev, dtype=torch.float32)
    ptrs = [torch.empty(3 * n_pairs, device=dev, dtype=torch.int64) for _ in range(LAYERS)]
    scl = [torch.empty(3 * n_pairs, device=dev, dtype=torch.float32) for _ in range(LAYERS)]
    sel_out, selw_out = [None] * LAYERS, [None] * LAYERS

    eng.warmup()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for il in range(LAYERS):
            eng.prepare_layer(il, N_EXPERT, planes[il], stream.cuda_stream)
    stream.synchronize()

    def step():
        s = torch.cuda.current_stream().cuda_stream
        for il in range(LAYERS):
            weights, idx = torch.topk(torch.softmax(logits * (1.0 + il), dim=-1), TOPK, dim=-1)
            sel = idx.to(torch.int32).reshape(-1).contiguous()
            selw = weights.reshape(-1).contiguous()
            sel_out[il], selw_out[il] = sel, selw
            eng.tables_from_sel(sel.data_ptr(), selw.data_ptr(), n_pairs, N_EXPERT, il,
                                planes[il], slab, ptrs[il].data_ptr(), scl[il].data_ptr(), s)

    # Warm up on a side stream as torch requires, then capture.
    logits.copy_(torch.randn(TOKENS, N_EXPERT, device=dev))
    with torch.cuda.stream(stream):
        step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()

    exact = 0
    for rep in range(REPLAYS):
        logits.copy_(torch.randn(TOKENS, N_EXPERT, device=dev) * (1 + rep % 5))
        graph.replay()
        torch.cuda.synchronize()
        for il in range(LAYERS):
            sel = sel_out[il].cpu().numpy()
            selw = selw_out[il].cpu().numpy()
            want_p, want_s, st, _ = memra.tables_host(sel, selw, N_EXPERT, planes[il], slab)
            assert st == 0, f"host arm status {st}"
            got_p = ptrs[il].cpu().numpy().view(np.uint64)
            got_s = scl[il].cpu().numpy()
            if not np.array_equal(got_p, want_p):
                bad = np.nonzero(got_p != want_p)[0][0]
                sys.exit(f"replay {rep} layer {il}: ptrs[{bad}] {got_p[bad]:#x} != {want_p[bad]:#x}")
            if not np.array_equal(got_s.view(np.uint32), want_s.view(np.uint32)):
                bad = np.nonzero(got_s.view(np.uint32) != want_s.view(np.uint32))[0][0]
                sys.exit(f"replay {rep} layer {il}: scl[{bad}] bits differ")
            exact += 1
    f = eng.faults(reset=True)
    assert f.bad_expert == 0 and f.nonfinite == 0, (f.bad_expert, f.nonfinite)
    # The far end of the down slab really was reached: past 8 GiB.
    assert int(want_p[2 * n_pairs:].max()) - 0x7E8000000000 > 8 * (1 << 30)
    print(f"{REPLAYS} graph replays x {LAYERS} layers: {exact} tables, every one bit-exact")
    eng.close()


if __name__ == "__main__":
    main()
