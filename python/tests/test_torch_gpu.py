"""The torch op on a GPU (skipped where there is none): the seed's four gate
cases; a decode step (router logits -> top-k -> tables for 6 layers) eager on
the default stream, inside torch.cuda.graph replayed 200 times with new
logits, and under torch.compile(fullgraph=True), every table compared bit
for bit with PyTorch's own int64/fp32 arithmetic; clear errors for wrong
tensors; torch.library.opcheck."""
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

import numpy as np  # noqa: E402

import memra  # noqa: E402
import memra.torch as mt  # noqa: E402

DEV = torch.device("cuda", 0)
BASES = [0x7F0000000000, 0x7F4000000000, 0x7F8000000000]
BIG = [24 << 20, 24 << 20, 48 << 20]


def torch_tables(sel, selw, planes, bases, strides):
    """The arithmetic in PyTorch's own ops: int64 addresses, one fp32
    multiply per down scale."""
    s = sel.long()
    ptrs = torch.cat([b + s * st for b, st in zip(bases, strides)])
    if planes is None:
        one = torch.ones_like(selw)
        return ptrs, torch.cat([one, one, selw * one])
    p = planes.to(sel.device)
    return ptrs, torch.cat([p[0][s], p[1][s], selw * p[2][s]])


def assert_bits_equal(got, want, what):
    ptrs, scl = got
    wp, ws = want
    bad_p = (ptrs != wp).sum().item()
    bad_s = (scl.view(torch.int32) != ws.view(torch.int32)).sum().item()
    assert bad_p == 0 and bad_s == 0, f"{what}: {bad_p} pointers, {bad_s} scales differ"


def seed_planes(n_expert):
    i = torch.arange(n_expert, dtype=torch.float32)
    return torch.stack([1.0 + i * 1e-3, 2.0 + i * 1e-3, 3.0 + i * 1e-3]).contiguous()


@pytest.mark.parametrize("label,sel,selw,strides,with_macros,il", [
    ("small-strides", [0, 1, 17, 63, 128, 200, 254, 255],
     [0.5, 0.25, 0.125, 1.0, 0.0625, 0.75, 0.375, 0.875], [860160, 860160, 1114112], True, 7),
    ("serving-strides-past-4GiB", [0, 1, 17, 63, 128, 200, 254, 255],
     [0.5, 0.25, 0.125, 1.0, 0.0625, 0.75, 0.375, 0.875], BIG, True, 7),
    ("no-macros", [0, 1, 17, 63, 128, 200, 254, 255],
     [0.5, 0.25, 0.125, 1.0, 0.0625, 0.75, 0.375, 0.875], BIG, False, 9),
    ("spread-selection", [j * 32 + 31 for j in range(8)], [1.0 / (j + 3.0) for j in range(8)],
     BIG, True, 7),
])
def test_seed_gate_through_the_op(label, sel, selw, strides, with_macros, il):
    """The seed's cases, its planes: device tables equal the host arm's."""
    n_expert = 256
    planes = seed_planes(n_expert) if with_macros else None
    sel_t = torch.tensor(sel, dtype=torch.int32, device=DEV)
    selw_t = torch.tensor(selw, dtype=torch.float32, device=DEV)
    ptrs, scl = mt.vrows_tables(sel_t, selw_t, n_expert, il, planes, BASES, strides)
    torch.cuda.synchronize()
    hp, hs, _ = memra.vrows_tables_host(
        np.array(sel, np.int32), np.array(selw, np.float32), n_expert,
        planes.numpy() if planes is not None else None, BASES, strides)
    assert np.array_equal(ptrs.cpu().numpy().view(np.uint64), hp), label
    assert np.array_equal(scl.cpu().numpy().view(np.uint32), hs.view(np.uint32)), label


TOKENS, TOPK, N_EXPERT, LAYERS = 64, 8, 256, 6


def make_model():
    gen = torch.Generator().manual_seed(1234)
    planes = [torch.rand(3, N_EXPERT, generator=gen) * 1.5 + 0.5 for _ in range(LAYERS)]
    return planes


def step(logits, planes, outs=None):
    """One decode step: router logits -> top-k -> memra tables per layer."""
    res = []
    for il in range(LAYERS):
        w, idx = torch.topk(torch.softmax(logits * (1.0 + il), dim=-1), TOPK, dim=-1)
        sel = idx.to(torch.int32).reshape(-1)
        selw = w.reshape(-1).contiguous()
        if outs is None:
            ptrs, scl = mt.vrows_tables(sel, selw, N_EXPERT, il, planes[il], BASES, BIG)
        else:
            ptrs, scl = outs[il]
            torch.ops.memra.vrows_tables_(sel, selw, ptrs, scl, N_EXPERT, il, planes[il], BASES,
                                          BIG)
        res.append((sel, selw, ptrs, scl))
    return res


def check_step(res, planes, what):
    for il, (sel, selw, ptrs, scl) in enumerate(res):
        assert_bits_equal((ptrs, scl), torch_tables(sel, selw, planes[il], BASES, BIG),
                          f"{what} layer {il}")


def test_decode_step_eager_on_the_default_stream():
    assert torch.cuda.current_stream().cuda_stream == 0  # the legacy default stream
    planes = make_model()
    for it in range(3):
        logits = torch.randn(TOKENS, N_EXPERT, device=DEV)
        res = step(logits, planes)
        torch.cuda.synchronize()
        check_step(res, planes, f"eager step {it}")


def test_decode_step_in_a_cuda_graph_200_replays():
    planes = make_model()
    for il in range(LAYERS):
        mt.prepare_layer(il, planes[il], DEV)
    torch.cuda.synchronize()
    static_logits = torch.randn(TOKENS, N_EXPERT, device=DEV)
    outs = [(torch.empty(3 * TOKENS * TOPK, dtype=torch.int64, device=DEV),
             torch.empty(3 * TOKENS * TOPK, dtype=torch.float32, device=DEV))
            for _ in range(LAYERS)]
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step(static_logits, planes, outs)  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        res = step(static_logits, planes, outs)
    for rep in range(200):
        static_logits.copy_(torch.randn(TOKENS, N_EXPERT, device=DEV))
        g.replay()
        torch.cuda.synchronize()
        check_step(res, planes, f"replay {rep}")


def test_decode_step_under_torch_compile_fullgraph():
    planes = make_model()
    compiled = torch.compile(lambda logits: step(logits, planes), fullgraph=True)
    for it in range(3):
        logits = torch.randn(TOKENS, N_EXPERT, device=DEV)
        res = compiled(logits)
        torch.cuda.synchronize()
        check_step(res, planes, f"compiled step {it}")


def test_wrong_tensors_are_clear_errors():
    n = 8
    sel = torch.zeros(n, dtype=torch.int32, device=DEV)
    selw = torch.ones(n, device=DEV)
    ptrs = torch.empty(3 * n, dtype=torch.int64, device=DEV)
    scl = torch.empty(3 * n, device=DEV)
    op = torch.ops.memra.vrows_tables_
    cases = [
        ((sel.cpu(), selw, ptrs, scl, 16, 0, None, BASES, BIG), "sel is on cpu"),
        ((sel, selw.double(), ptrs, scl, 16, 0, None, BASES, BIG), "selw is torch.float64"),
        ((sel.long(), selw, ptrs, scl, 16, 0, None, BASES, BIG), "sel is torch.int64"),
        ((sel, selw, ptrs[:-1], scl, 16, 0, None, BASES, BIG), "ptrs holds 23 elements"),
        ((sel, selw, ptrs, scl.view(3, n).t(), 16, 0, None, BASES, BIG), "scl is not contiguous"),
        ((sel, selw, ptrs, scl, 16, 0, torch.ones(3, 15), BASES, BIG), "want (3, 16)"),
        ((sel, selw, ptrs, scl, 16, 0, torch.ones(3, 16, device=DEV), BASES, BIG),
         "pass a CPU tensor"),
        ((sel, selw, ptrs, scl, 16, 70000, None, BASES, BIG), "layer = 70000"),
        ((sel, selw, ptrs, scl, 0, 0, None, BASES, BIG), "n_expert = 0"),
        ((sel, selw, ptrs, scl, 16, 0, None, [-1, 0, 0], BIG), "bases[0] = -1"),
    ]
    for args, words in cases:
        with pytest.raises(memra.Error) as e:
            op(*args)
        assert words in str(e.value), (words, str(e.value))


def test_unprepared_layer_under_capture_is_a_capture_error():
    planes = seed_planes(N_EXPERT)
    sel = torch.zeros(8, dtype=torch.int32, device=DEV)
    selw = torch.ones(8, device=DEV)
    ptrs = torch.empty(24, dtype=torch.int64, device=DEV)
    scl = torch.empty(24, device=DEV)
    mt.prepare_layer(0, None, DEV)  # the kernel, not layer 321
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with pytest.raises(memra.CaptureError, match="memra_vrows_prepare_layer"):
        with torch.cuda.graph(g):
            torch.ops.memra.vrows_tables_(sel, selw, ptrs, scl, N_EXPERT, 321, planes, BASES, BIG)


def test_opcheck():
    n = 16
    sel = torch.randint(0, N_EXPERT, (n,), dtype=torch.int32, device=DEV)
    selw = torch.rand(n, device=DEV)
    ptrs = torch.empty(3 * n, dtype=torch.int64, device=DEV)
    scl = torch.empty(3 * n, device=DEV)
    torch.library.opcheck(torch.ops.memra.vrows_tables_.default,
                          (sel, selw, ptrs, scl, N_EXPERT, 11, seed_planes(N_EXPERT), BASES, BIG))


def test_engine_self_check_and_origin():
    eng = mt.engine(DEV)
    rep = eng.self_check()
    assert rep["failed"] == 0 and rep["cases"] > 11  # tables, then routing through both kernels
    o = eng.kernel_origin()
    assert o["ready"] and o["nvrtc_version"] >= 12000


def test_routing_matches_host_and_torch_topk():
    """memra's routing against its host arm (bit for bit) and against
    PyTorch's own top-k wherever PyTorch's scores have no near-ties."""
    torch.manual_seed(3)
    T, E, K = 4096, 64, 8
    logits = torch.randn(T, E, device=DEV)
    sel, selw, ptrs, scl = mt.route_tables(logits, K, 0, None, BASES, BIG, scoring="softmax",
                                           renormalize=True)
    torch.cuda.synchronize()
    hs, hw, hp, hsc, _ = memra.route_tables_host(logits.cpu().numpy(), K, BASES, BIG,
                                                 scoring="softmax", renormalize=True)
    assert np.array_equal(sel.cpu().numpy(), hs)
    assert np.array_equal(selw.cpu().numpy().view(np.uint32), hw.view(np.uint32))
    assert np.array_equal(ptrs.cpu().numpy().view(np.uint64), hp)
    probs = torch.softmax(logits.double(), dim=-1)
    top, idx = torch.topk(probs, K + 1, dim=-1)
    gaps = (top[:, :-1] - top[:, 1:]).min(dim=-1).values
    clear = gaps > 1e-6
    assert clear.sum() > T * 0.9
    ours = sel.view(T, K).long()
    assert torch.equal(ours[clear], idx[clear, :K])
    # DeepSeek-V3 grouping against a PyTorch formulation of it
    bias = torch.randn(256) * 0.01
    logits = torch.randn(T, 256, device=DEV)
    sel, selw, _, _ = mt.route_tables(logits, 8, 1, None, BASES, BIG, scoring="sigmoid",
                                      n_group=8, topk_group=4, renormalize=True,
                                      routed_scaling_factor=2.5, bias=bias)
    torch.cuda.synchronize()
    s = torch.sigmoid(logits.double())
    c = s + bias.double().to(DEV)
    g = c.view(T, 8, 32).topk(2, dim=-1).values.sum(-1)
    gsel = g.topk(4, dim=-1).indices
    mask = torch.zeros(T, 8, device=DEV, dtype=torch.bool).scatter_(1, gsel, True)
    cm = c.masked_fill(~mask.repeat_interleave(32, dim=1), float("-inf"))
    top, idx = cm.topk(9, dim=-1)
    gsorted = g.sort(dim=-1, descending=True).values
    clear = ((top[:, :8] - top[:, 1:9]).min(-1).values > 1e-6) & \
            ((gsorted[:, 3] - gsorted[:, 4]) > 1e-6)
    assert clear.sum() > T * 0.8
    assert torch.equal(sel.view(T, 8).long()[clear], idx[clear, :8])


# ---- ordering (docs/streams.md), row 11 and around it ------------------------

def test_route_and_table_ops_share_a_layer_in_one_graph():
    """route_tables with a bias and vrows_tables_ on layer 0: both captured in
    one torch.cuda.graph, replayed; then a new bias is prepared and the same
    graph replays with it. Every output against the host arm, bit for bit."""
    torch.manual_seed(11)
    T, E, K = 32, 256, 8
    planes = seed_planes(E)
    bias = (torch.randn(E) * 0.01).contiguous()
    logits = torch.randn(T, E, device=DEV)
    sel = torch.randint(0, E, (T * K,), dtype=torch.int32, device=DEV)
    selw = torch.rand(T * K, device=DEV)
    kw = dict(scoring="sigmoid", n_group=8, topk_group=4, renormalize=True,
              routed_scaling_factor=2.5)
    mt.prepare_layer(0, planes, DEV)
    # the first eager calls mirror both kinds; the capture needs no upload
    mt.route_tables(logits, K, 0, planes, BASES, BIG, bias=bias, **kw)
    mt.vrows_tables(sel, selw, E, 0, planes, BASES, BIG)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        rsel, rselw, rptrs, rscl = mt.route_tables(logits, K, 0, planes, BASES, BIG, bias=bias,
                                                   **kw)
        tp, ts = mt.vrows_tables(sel, selw, E, 0, planes, BASES, BIG)
    for rep in range(2):
        if rep == 1:
            bias.copy_(torch.randn(E) * 0.02)
            with torch.cuda.stream(torch.cuda.Stream(DEV)):
                # prepared on another stream: the replay on this one waits for it
                mt.route_tables(logits, K, 0, planes, BASES, BIG, bias=bias, **kw)
        logits.copy_(torch.randn(T, E, device=DEV))
        g.replay()
        torch.cuda.synchronize()
        hs, hw, hp, hsc, _ = memra.route_tables_host(
            logits.cpu().numpy(), K, BASES, BIG, macros=planes.numpy(), bias=bias.numpy(), **kw)
        assert np.array_equal(rsel.cpu().numpy(), hs), rep
        assert np.array_equal(rselw.cpu().numpy().view(np.uint32), hw.view(np.uint32)), rep
        assert np.array_equal(rptrs.cpu().numpy().view(np.uint64), hp), rep
        assert np.array_equal(rscl.cpu().numpy().view(np.uint32), hsc.view(np.uint32)), rep
        assert_bits_equal((tp, ts), torch_tables(sel, selw, planes, BASES, BIG), f"tables {rep}")


def test_fault_read_follows_the_current_stream():
    """A table op on a side stream with 4096 bad ids, then a fault read inside
    torch.cuda.stream(side): it reads after the op, on that stream."""
    n = 4096
    side = torch.cuda.Stream(DEV)
    mt.faults(DEV, reset=True)
    with torch.cuda.stream(side):
        sel = torch.full((n,), 1000, dtype=torch.int32, device=DEV)
        selw = torch.ones(n, device=DEV)
        torch.cuda._sleep(50_000_000)  # the op runs well after the read is asked for
        mt.vrows_tables(sel, selw, 256, 0, None, BASES, BIG)
        f = mt.faults(DEV, reset=True)
        g = mt.engine(DEV).faults(reset=False)  # the Engine defaults to the current stream too
    assert f.bad_expert == n and f.first_pair == 0
    assert g.bad_expert == 0


def test_first_engine_is_shared_by_racing_threads():
    import threading
    got = []
    mt._engines.pop((0, "race"), None)
    ts = [threading.Thread(target=lambda: got.append(mt.engine(DEV, "race"))) for _ in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert len({id(e) for e in got}) == 1


def test_engine_per_model():
    """Speculative decoding: draft and target use the same layer index with
    different planes; each model's tables use its own."""
    E = 256
    draft, target = seed_planes(E), seed_planes(E) * 2.0
    sel = torch.arange(64, dtype=torch.int32, device=DEV)
    selw = torch.rand(64, device=DEV)
    for _ in range(3):
        a = mt.vrows_tables(sel, selw, E, 3, draft, BASES, BIG, model="draft")
        b = mt.vrows_tables(sel, selw, E, 3, target, BASES, BIG, model="target")
        assert_bits_equal(a, torch_tables(sel, selw, draft, BASES, BIG), "draft")
        assert_bits_equal(b, torch_tables(sel, selw, target, BASES, BIG), "target")
    assert mt.engine(DEV, "draft") is not mt.engine(DEV, "target")
