"""memra.torch on a GPU (skipped where there is none; meson test torch_gpu).

Device against host: every op's outputs bit for bit against the host arm
(memra.route_tables_host / vrows_tables_host) and against PyTorch's own
arithmetic for the tables; vLLM's grouped_topk call site with memra's op
imported, on CUDA tensors; SGLang's biased_grouped_topk call site
(DeepSeek-V3, GLM-4.5, Kimi-K2; a fused shared expert or none; scaling on
output or not; padded batches) against SGLang's own code and the host arm,
moe_fused_gate, and a padded decode step in a CUDA graph whose count
changes between replays; expert parallelism and shared experts; float16
logits and a bfloat16 bias read in place; zero tokens. Graphs: a decode step
in torch.cuda.graph replayed with new logits, new planes and a new bias;
torch.compile(fullgraph=True), and mode="reduce-overhead" with its CUDA
graphs recorded and replayed (no skip). Errors: wrong dtype, shape or device
refused alike by the op and its fake; opcheck on every op. The
expert-sorted layout (moe_align_block_size, sgl-kernel's shape, routing
fused with its layout): device against host byte for byte at decode and
prefill sizes (one launch, three with their workspace), vLLM's golden
sets, the same bytes 1,000 calls running, a CUDA graph and
mode="reduce-overhead". Ordering
(docs/streams.md row 11): the route and table ops on one layer in one
graph; a fault read on the current stream; engines per model.

MEMRA_TORCH_TEST_DEVICE=cpu runs the tests that have a CPU twin on CPU
tensors (the host arm through the same ops), to try this file without a
GPU; the CUDA-only ones then skip."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
DEV = torch.device(os.environ.get("MEMRA_TORCH_TEST_DEVICE", "cuda"))
if DEV.type == "cuda":
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device", allow_module_level=True)
    DEV = torch.device("cuda", 0)

import memra  # noqa: E402
import memra.torch as mt  # noqa: E402
from memra.torch import fused_topk, grouped_topk, sglang  # noqa: E402

from routing_reference import MODELS, route64, tables64, vllm_style_call_site  # noqa: E402
from sglang_reference import (SGLANG_MODELS, assert_matches_sglang,  # noqa: E402
                              biased_grouped_topk_impl, sglang_style_call_site)

cuda_only = pytest.mark.skipif(DEV.type != "cuda", reason="CUDA streams and graphs")
BASES = [0x7F0000000000, 0x7F4000000000, 0x7F8000000000]
BIG = [24 << 20, 24 << 20, 48 << 20]


def sync():
    if DEV.type == "cuda":
        torch.cuda.synchronize()


def bits(t):
    return t.contiguous().view(torch.int32)


def assert_bits_equal(got, want, what):
    ptrs, scl = got
    wp, ws = want
    bad_p = (ptrs.reshape(-1) != wp.reshape(-1)).sum().item()
    bad_s = (bits(scl).reshape(-1) != bits(ws).reshape(-1)).sum().item()
    assert bad_p == 0 and bad_s == 0, f"{what}: {bad_p} pointers, {bad_s} scales differ"


def seed_planes(n_expert):
    i = torch.arange(n_expert, dtype=torch.float32)
    return torch.stack([1.0 + i * 1e-3, 2.0 + i * 1e-3, 3.0 + i * 1e-3]).contiguous()


def host_route(logits, top_k, macros=None, bases=(0, 0, 0), strides=(0, 0, 0), **spec):
    """The host arm (NumPy) on a device tensor's values, shaped as the ops
    shape their outputs."""
    x = logits.cpu()
    arr = x.view(torch.int16).numpy().view(np.uint16) if x.dtype == torch.bfloat16 else x.numpy()
    for k in ("bias", "expert_map"):
        if spec.get(k) is not None:
            t = spec[k].cpu()
            spec[k] = t.float().numpy() if k == "bias" else t.numpy()  # bf16 -> f32: exact
    sel, selw, ptrs, scl, f = memra.route_tables_host(
        arr, top_k, bases, strides, macros.numpy() if macros is not None else None, **spec)
    T = x.shape[0]
    K = top_k + spec.get("n_shared", 0)
    return (torch.from_numpy(sel).view(T, K), torch.from_numpy(selw).view(T, K),
            torch.from_numpy(ptrs.view(np.int64)).view(3, T, K),
            torch.from_numpy(scl).view(3, T, K), f)


def assert_route_equal(got, want, what):
    ids, w, ptrs, scl = (t.cpu() if t is not None else None for t in got)
    hs, hw, hp, hsc = want[:4]
    assert torch.equal(ids, hs), f"{what}: ids differ"
    assert torch.equal(bits(w), bits(hw)), f"{what}: weights differ"
    if ptrs is not None:
        assert torch.equal(ptrs, hp), f"{what}: pointers differ"
        assert torch.equal(bits(scl), bits(hsc)), f"{what}: scales differ"


# ---- the table op ------------------------------------------------------------

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
    mt.prepare_layer(il, planes, DEV)
    sel_t = torch.tensor(sel, dtype=torch.int32, device=DEV)
    selw_t = torch.tensor(selw, dtype=torch.float32, device=DEV)
    ptrs, scl = mt.vrows_tables(sel_t, selw_t, n_expert, il, BASES, strides)
    sync()
    hp, hs, _ = memra.vrows_tables_host(
        np.array(sel, np.int32), np.array(selw, np.float32), n_expert,
        planes.numpy() if planes is not None else None, BASES, strides)
    assert np.array_equal(ptrs.cpu().numpy().reshape(-1).view(np.uint64), hp), label
    assert np.array_equal(scl.cpu().numpy().reshape(-1).view(np.uint32), hs.view(np.uint32)), \
        label


TOKENS, TOPK, N_EXPERT, LAYERS = 64, 8, 256, 6


def make_model(model=""):
    gen = torch.Generator().manual_seed(1234)
    planes = [torch.rand(3, N_EXPERT, generator=gen) * 1.5 + 0.5 for _ in range(LAYERS)]
    for il in range(LAYERS):
        mt.prepare_layer(il, planes[il], DEV, model=model)
    return planes


def step(logits, outs=None, model=""):
    """One decode step: router logits -> top-k -> memra tables per layer."""
    res = []
    for il in range(LAYERS):
        w, idx = torch.topk(torch.softmax(logits * (1.0 + il), dim=-1), TOPK, dim=-1)
        sel = idx.to(torch.int32)
        selw = w.contiguous()
        if outs is None:
            ptrs, scl = mt.vrows_tables(sel, selw, N_EXPERT, il, BASES, BIG, model=model)
        else:
            ptrs, scl = outs[il]
            mt.vrows_tables_(sel, selw, ptrs, scl, N_EXPERT, il, BASES, BIG, model=model)
        res.append((sel, selw, ptrs, scl))
    return res


def check_step(res, planes, what):
    for il, (sel, selw, ptrs, scl) in enumerate(res):
        assert_bits_equal((ptrs, scl), tables64(sel, selw, planes[il], BASES, BIG),
                          f"{what} layer {il}")


def test_decode_step_eager():
    planes = make_model()
    for it in range(3):
        logits = torch.randn(TOKENS, N_EXPERT, device=DEV)
        res = step(logits)
        sync()
        check_step(res, planes, f"eager step {it}")


@cuda_only
def test_decode_step_on_the_legacy_stream():
    assert torch.cuda.current_stream().cuda_stream == 0  # PyTorch's default: the legacy stream
    planes = make_model()
    res = step(torch.randn(TOKENS, N_EXPERT, device=DEV))
    sync()
    check_step(res, planes, "legacy stream")


def capture(fn):
    """fn() once outside capture on a side stream (as PyTorch recommends),
    then captured; returns (graph, fn's outputs in the graph)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g, out


@cuda_only
def test_decode_step_in_a_cuda_graph_200_replays():
    planes = make_model()
    sync()
    static_logits = torch.randn(TOKENS, N_EXPERT, device=DEV)
    outs = [(torch.empty(3 * TOKENS * TOPK, dtype=torch.int64, device=DEV),
             torch.empty(3 * TOKENS * TOPK, dtype=torch.float32, device=DEV))
            for _ in range(LAYERS)]
    g, res = capture(lambda: step(static_logits, outs))
    for rep in range(200):
        static_logits.copy_(torch.randn(TOKENS, N_EXPERT, device=DEV))
        g.replay()
        sync()
        check_step(res, planes, f"replay {rep}")


def test_decode_step_under_torch_compile_fullgraph():
    planes = make_model()
    torch._dynamo.reset()
    backend = "inductor" if DEV.type == "cuda" else "aot_eager"
    compiled = torch.compile(step, fullgraph=True, backend=backend)
    for it in range(3):
        logits = torch.randn(TOKENS, N_EXPERT, device=DEV)
        res = compiled(logits)
        sync()
        check_step(res, planes, f"compiled step {it}")


# ---- routing ---------------------------------------------------------------

@pytest.mark.parametrize("model", ["deepseek-v3", "deepseek-v2", "kimi-k2", "glm-4.5"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_vllm_call_site_runs_unchanged_bit_for_bit(model, dtype):
    """vLLM's grouped-top-k call site with memra's grouped_topk imported in
    place of vLLM's, on device tensors: vLLM's dtypes and shapes, the host
    arm's bits."""
    E, K, scoring, n_group, topk_group, renorm, rsf, has_bias = MODELS[model]
    T = 300
    gen = torch.Generator().manual_seed(17)
    logits = (torch.randn(T, E, generator=gen) * 2).to(dtype).to(DEV)
    bias = (torch.randn(E, generator=gen) * 0.05).to(DEV) if has_bias else None
    hidden = torch.randn(T, 128, dtype=torch.bfloat16, device=DEV)
    w, ids = vllm_style_call_site(grouped_topk, hidden, logits, K, n_group, topk_group, renorm,
                                  scoring, rsf, bias)
    sync()
    assert w.dtype == torch.float32 and ids.dtype == torch.int32
    assert w.shape == (T, K) and w.device == DEV and ids.device == DEV
    want = host_route(logits, K, scoring=scoring, n_group=n_group, topk_group=topk_group,
                      renormalize=renorm, routed_scaling_factor=rsf, bias=bias)
    assert_route_equal((ids, w, None, None), want, model)


def test_routing_matches_host_and_torch_topk():
    """memra's routing against its host arm (bit for bit) and against
    PyTorch's own top-k wherever PyTorch's scores have no near-ties."""
    torch.manual_seed(3)
    T, E, K = 4096, 64, 8
    logits = torch.randn(T, E, device=DEV)
    mt.route_prepare_layer(0, None, DEV)
    out = mt.route_tables(logits, K, 0, BASES, BIG, scoring="softmax", renormalize=True)
    sync()
    assert_route_equal(out, host_route(logits, K, None, BASES, BIG, scoring="softmax",
                                       renormalize=True), "softmax")
    w64, ids64, margins = route64(logits.cpu(), K, "softmax", renormalize=True)
    clear = margins > 1e-6
    assert clear.sum() > T * 0.9
    assert torch.equal(out[0].cpu().long()[clear], ids64[clear])
    # DeepSeek-V3 grouping against a PyTorch formulation of it
    bias = (torch.randn(256) * 0.01).to(DEV)
    logits = torch.randn(T, 256, device=DEV)
    mt.route_prepare_layer(1, None, DEV)
    out = mt.route_tables(logits, 8, 1, BASES, BIG, scoring="sigmoid", n_group=8, topk_group=4,
                          renormalize=True, routed_scaling_factor=2.5, bias=bias)
    sync()
    _, ids64, margins = route64(logits.cpu(), 8, "sigmoid", 8, 4, True, 2.5, bias.cpu())
    clear = margins > 1e-6
    assert clear.sum() > T * 0.8
    assert torch.equal(out[0].cpu().long()[clear], ids64[clear])


def test_fp16_logits_bf16_bias_in_place_and_fused_topk():
    T, E = 257, 256
    gen = torch.Generator().manual_seed(5)
    logits = (torch.randn(T, E, generator=gen) * 2).half().to(DEV)
    bias = (torch.randn(E, generator=gen) * 0.05).bfloat16().to(DEV)
    planes = torch.rand(3, E, generator=gen) + 0.5
    mt.route_prepare_layer(2, planes, DEV)
    kw = dict(scoring="sigmoid", n_group=8, topk_group=4, renormalize=True,
              routed_scaling_factor=2.5)
    out = mt.route_tables(logits, 8, 2, BASES, BIG, bias=bias, **kw)
    sync()
    assert_route_equal(out, host_route(logits, 8, planes, BASES, BIG, bias=bias, **kw), "fp16")
    bias.mul_(-1.0)  # read in place: the next call sees the new values, nothing to prepare
    out = mt.route_tables(logits, 8, 2, BASES, BIG, bias=bias, **kw)
    sync()
    assert_route_equal(out, host_route(logits, 8, planes, BASES, BIG, bias=bias, **kw),
                       "new bias")
    w, ids, tei = fused_topk(torch.empty(T, 1, device=DEV), logits, 4, True)
    sync()
    want = host_route(logits, 4, renormalize=True)
    assert_route_equal((ids, w, None, None), want, "fused_topk")
    assert torch.equal(tei.cpu().long(), torch.arange(4) * T + torch.arange(T).view(T, 1))


def test_expert_map_and_shared_experts_device_equals_host():
    T, E, K, S = 200, 256, 8, 1
    gen = torch.Generator().manual_seed(9)
    logits = torch.randn(T, E, generator=gen).to(DEV)
    emap = torch.full((E,), -1, dtype=torch.int32)
    emap[64:128] = torch.arange(64, dtype=torch.int32)
    emap[200] = 70  # out of [-1, n_local): a fault
    planes = torch.rand(3, 64 + S, generator=gen) + 0.5
    mt.route_prepare_layer(3, planes, DEV, model="ep")
    mt.faults(DEV, reset=True, model="ep")
    kw = dict(scoring="softmax", renormalize=True, expert_map=emap.to(DEV), n_local=64,
              n_shared=S, shared_weight=1.0)
    out = mt.route_tables(logits, K, 3, BASES, BIG, model="ep", **kw)
    f = mt.faults(DEV, reset=True, model="ep")
    want = host_route(logits, K, planes, BASES, BIG, **kw)
    assert_route_equal(out, want, "expert parallelism")
    hf = want[4]
    assert (f.not_local, f.bad_expert, f.first_pair) == (hf.not_local, hf.bad_expert,
                                                         hf.first_pair)
    assert f.not_local > 0
    mt.prepare_layer(3, planes, DEV, model="ep")
    tp, ts = mt.vrows_tables(out[0], out[1], E, 3, BASES, BIG, expert_map=emap.to(DEV),
                             n_local=64, n_shared=S, model="ep")
    sync()
    assert_bits_equal((tp, ts), (out[2], out[3]), "table op with the map")


def test_zero_tokens_give_empty_outputs():
    z = torch.zeros(0, 64, device=DEV, dtype=torch.bfloat16)
    w, ids = grouped_topk(torch.zeros(0, 8, device=DEV), z, 4, True, 8, 2)
    assert w.shape == (0, 4) and ids.shape == (0, 4) and ids.device == DEV
    mt.route_prepare_layer(0, None, DEV)
    out = mt.route_tables(z, 4, 0, n_shared=1)
    assert [tuple(o.shape) for o in out] == [(0, 5), (0, 5), (3, 0, 5), (3, 0, 5)]


# ---- SGLang's shapes -------------------------------------------------------------

def sglang_host(logits, K, S, n_group, topk_group, renormalize, rsf, apply, bias, count):
    """SGLang's biased_grouped_topk spelled in memra's spec, on the host arm:
    (weights, ids) [T, K + S]."""
    x = logits.cpu()
    sel, selw, _, _, _ = memra.route_tables_host(
        x.numpy(), K, scoring="sigmoid", n_group=n_group, topk_group=topk_group,
        renormalize=renormalize, routed_scaling_factor=rsf if apply and renormalize else 1.0,
        bias=bias.cpu().numpy(), group_scoring="top2_sum", n_shared=S,
        shared_divisor=rsf if S else None,
        n_real=None if count is None else count.cpu().numpy())
    T = x.shape[0]
    return torch.from_numpy(selw).view(T, -1), torch.from_numpy(sel).view(T, -1)


@pytest.mark.parametrize("model", sorted(SGLANG_MODELS))
@pytest.mark.parametrize("S,apply,padded", [(0, False, None), (1, False, torch.int32),
                                            (1, True, torch.int64), (0, True, torch.int64)])
def test_sglang_call_site_device_equals_host_and_sglang(model, S, apply, padded):
    """SGLang's select_experts call of biased_grouped_topk with memra's
    imported, on device tensors: the host arm's bits, SGLang's choice,
    shared expert and padding."""
    E, K, n_group, topk_group, rsf = SGLANG_MODELS[model]
    T = 512
    gen = torch.Generator().manual_seed(23)
    logits = (torch.randn(T, E, generator=gen) * 2).to(DEV)
    bias = (torch.randn(E, generator=gen) * 0.05).to(DEV)
    count = None if padded is None else torch.tensor(T - 100, dtype=padded, device=DEV)
    hidden = torch.zeros(T, 8, device=DEV)
    got = sglang_style_call_site(sglang.biased_grouped_topk, hidden, logits, bias, K + S, True,
                                 n_group, topk_group, S, rsf, count, apply)
    sync()
    assert got[0].device == DEV and got[1].dtype == torch.int32 and got[0].shape == (T, K + S)
    hw, hids = sglang_host(logits, K, S, n_group, topk_group, True, rsf, apply, bias, count)
    assert torch.equal(got[1].cpu(), hids) and torch.equal(bits(got[0].cpu()), bits(hw)), model
    c = None if count is None else count.cpu()
    want = biased_grouped_topk_impl(hidden.cpu(), logits.cpu(), bias.cpu(), K + S, True,
                                    n_group, topk_group, S, rsf, c, None, apply)
    assert_matches_sglang(got, want, logits.cpu(), bias.cpu(), K, S, n_group, topk_group,
                          "sigmoid", "top2_sum", None if c is None else int(c), model)
    # sgl-kernel's moe_fused_gate on the same logits: biased_grouped_topk renormalized
    g = sglang.moe_fused_gate(logits, bias, n_group, topk_group, K + S, S, rsf, apply)
    sync()
    hw, hids = sglang_host(logits, K, S, n_group, topk_group, True, rsf, apply, bias, None)
    assert torch.equal(g[1].cpu(), hids) and torch.equal(bits(g[0].cpu()), bits(hw))


@cuda_only
def test_sglang_padded_decode_step_in_a_cuda_graph():
    """A decode step captured at a padded batch size, as SGLang captures
    them: the count of real tokens is a device tensor read by the kernel on
    every replay, so one graph serves every batch up to its size. Each
    replay against the host arm and SGLang's padding (-1 from the count)."""
    E, K, n_group, topk_group, rsf = SGLANG_MODELS["deepseek-v3"]
    T = 32
    logits = torch.zeros(T, E, device=DEV)
    bias = (torch.randn(E) * 0.05).to(DEV)
    count = torch.tensor(T, dtype=torch.int32, device=DEV)
    hidden = torch.zeros(T, 8, device=DEV)

    def decode():
        return sglang.biased_grouped_topk(hidden, logits, bias, K + 1, True, n_group,
                                          topk_group, 1, rsf, count, None, True)

    g, (w, ids) = capture(decode)
    for n in (32, 1, 17, 0, 9):
        logits.copy_(torch.randn(T, E, device=DEV) * 2)
        count.fill_(n)
        g.replay()
        sync()
        hw, hids = sglang_host(logits, K, 1, n_group, topk_group, True, rsf, True, bias, count)
        assert torch.equal(ids.cpu(), hids) and torch.equal(bits(w.cpu()), bits(hw)), n
        assert (ids[n:] == -1).all() and (ids[:n] >= 0).all(), n


@cuda_only
def test_sglang_ops_under_reduce_overhead():
    """torch.compile(mode="reduce-overhead") over SGLang's call site with a
    padded batch: CUDA graphs recorded, no skip, the host arm's bits."""
    from torch._dynamo.utils import counters
    E, K, n_group, topk_group, rsf = SGLANG_MODELS["deepseek-v3"]
    T = 16
    bias = (torch.randn(E) * 0.05).to(DEV)

    def decode(hidden, logits, count):
        return sglang_style_call_site(sglang.biased_grouped_topk, hidden, logits, bias, K + 1,
                                      True, n_group, topk_group, 1, rsf, count, False)

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(decode, mode="reduce-overhead", fullgraph=True)
    hidden = torch.zeros(T, 8, device=DEV)
    for it in range(5):
        logits = torch.randn(T, E, device=DEV)
        count = torch.tensor(T - it, dtype=torch.int64, device=DEV)
        w, ids = (t.clone() for t in compiled(hidden, logits, count))
        sync()
        hw, hids = sglang_host(logits, K, 1, n_group, topk_group, True, rsf, False, bias, count)
        assert torch.equal(ids.cpu(), hids) and torch.equal(bits(w.cpu()), bits(hw)), it
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])


def test_opcheck_sglang_ops():
    E, K, n_group, topk_group, rsf = SGLANG_MODELS["deepseek-v3"]
    T = 9
    gen = torch.Generator().manual_seed(2)
    h = torch.zeros(T, 4, device=DEV)
    x = torch.randn(T, E, generator=gen).to(DEV)
    bias = (torch.randn(E, generator=gen) * 0.05).to(DEV)
    O = torch.ops.memra
    for op, args in [
        (O.sglang_biased_grouped_topk, (h, x, bias, K + 1, True, n_group, topk_group, 1, rsf,
                                        torch.tensor(7, dtype=torch.int32, device=DEV), True)),
        (O.sglang_grouped_topk, (h, x[:, :160], 6, True, 8, 3, 1, 16.0,
                                 torch.tensor(5, device=DEV))),
        (O.sglang_fused_topk, (h, x[:, :64], 6, True, torch.tensor(5, device=DEV))),
        (O.moe_fused_gate, (x, bias, n_group, topk_group, K + 1, 1, rsf, True)),
    ]:
        torch.library.opcheck(op.default, args)


# ---- graphs and compile ------------------------------------------------------

@cuda_only
def test_reduce_overhead_records_and_replays_cuda_graphs():
    """torch.compile(mode="reduce-overhead") over vLLM's grouped_topk, the
    fused route op and the table op: no CUDA-graph skip, graphs recorded,
    and every replay's outputs are the host arm's."""
    from torch._dynamo.utils import counters
    from torch._inductor import cudagraph_trees
    T, E = 16, 256
    planes = torch.rand(3, E) + 0.5
    mt.route_prepare_layer(5, planes, DEV)
    mt.prepare_layer(5, planes, DEV)
    bias = (torch.randn(E) * 0.05).to(DEV)
    kw = dict(scoring="sigmoid", n_group=8, topk_group=4, renormalize=True,
              routed_scaling_factor=2.5)

    def decode(hidden, logits):
        w, ids = grouped_topk(hidden, logits, 8, True, 8, 4, "sigmoid", 2.5, bias)
        r = mt.route_tables(logits, 8, 5, BASES, BIG, bias=bias, **kw)
        t = mt.vrows_tables(ids, w, E, 5, BASES, BIG)
        return w, ids, r[2], r[3], t[0], t[1]

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(decode, mode="reduce-overhead", fullgraph=True)
    hidden = torch.zeros(T, 8, device=DEV)
    for it in range(6):
        logits = torch.randn(T, E, device=DEV)
        got = [t.clone() for t in compiled(hidden, logits)]
        sync()
        ids, w, ptrs, scl, _ = host_route(logits, 8, planes, BASES, BIG, bias=bias, **kw)
        assert torch.equal(got[1].cpu(), ids) and torch.equal(bits(got[0].cpu()), bits(w)), it
        assert torch.equal(got[2].cpu(), ptrs) and torch.equal(bits(got[3].cpu()), bits(scl)), it
        assert_bits_equal((got[4], got[5]), (ptrs.to(DEV), scl.to(DEV)), f"tables {it}")
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
    mgr = cudagraph_trees.get_manager(DEV.index, create_if_none_exists=False)
    assert mgr is not None and sum(len(v) for v in mgr.roots.values()) >= 1


@cuda_only
def test_route_and_table_ops_share_a_layer_in_one_graph():
    """route_tables with a bias and vrows_tables_ on layer 0: both captured in
    one torch.cuda.graph, replayed; then a new bias (read in place) and new
    planes (prepared on another stream) and the same graph replays with
    them. Every output against the host arm, bit for bit."""
    torch.manual_seed(11)
    T, E, K = 32, 256, 8
    planes = seed_planes(E)
    bias = (torch.randn(E) * 0.01).to(DEV)
    logits = torch.randn(T, E, device=DEV)
    sel = torch.randint(0, E, (T * K,), dtype=torch.int32, device=DEV)
    selw = torch.rand(T * K, device=DEV)
    kw = dict(scoring="sigmoid", n_group=8, topk_group=4, renormalize=True,
              routed_scaling_factor=2.5)
    mt.prepare_layer(0, planes, DEV)
    mt.route_prepare_layer(0, planes, DEV)
    sync()

    def both():
        r = mt.route_tables(logits, K, 0, BASES, BIG, bias=bias, **kw)
        t = mt.vrows_tables(sel, selw, E, 0, BASES, BIG)
        return r, t

    g, (r, t) = capture(both)
    for rep in range(3):
        if rep >= 1:
            bias.copy_(torch.randn(E, device=DEV) * 0.02)
        if rep == 2:
            planes = planes * 1.5
            with torch.cuda.stream(torch.cuda.Stream(DEV)):
                # prepared on another stream: the replay on this one waits for it
                mt.route_prepare_layer(0, planes, DEV)
                mt.prepare_layer(0, planes, DEV)
        logits.copy_(torch.randn(T, E, device=DEV))
        g.replay()
        sync()
        assert_route_equal(r, host_route(logits, K, planes, BASES, BIG, bias=bias, **kw),
                           f"replay {rep}")
        assert_bits_equal(t, tables64(sel, selw, planes, BASES, BIG), f"tables {rep}")


# ---- errors, fakes, opcheck --------------------------------------------------

def test_wrong_tensors_are_clear_errors_from_op_and_fake():
    from torch._subclasses.fake_tensor import FakeTensorMode
    n = 8
    other = torch.device("cpu") if DEV.type == "cuda" else torch.device("meta")
    sel = torch.zeros(n, dtype=torch.int32, device=DEV)
    selw = torch.ones(n, device=DEV)
    ptrs = torch.empty(3 * n, dtype=torch.int64, device=DEV)
    scl = torch.empty(3 * n, device=DEV)
    logits = torch.zeros(4, 64, device=DEV)
    mt.prepare_layer(0, None, DEV)
    mt.route_prepare_layer(0, None, DEV)
    V, R, G = (torch.ops.memra.vrows_tables_.default, torch.ops.memra.route_tables.default,
               torch.ops.memra.grouped_topk.default)
    cases = [
        (V, (sel, selw.to(other), ptrs, scl, 16, 0), f"selw is on {other}, but sel is on"),
        (V, (sel, selw.double(), ptrs, scl, 16, 0), "selw is torch.float64"),
        (V, (sel.long(), selw, ptrs, scl, 16, 0), "sel is torch.int64"),
        (V, (sel, selw, ptrs[:-1], scl, 16, 0), "ptrs holds 23 elements"),
        (V, (sel, selw, ptrs, scl.view(3, n).t(), 16, 0), "scl is not contiguous"),
        (V, (sel, selw, ptrs, scl, 16, 0, BASES, BIG, None, 3),
         "n_local = 3 without an expert_map"),
        (V, (sel, selw, ptrs, scl, 0, 0), "vrows_tables_: n_expert is 0"),
        (V, (sel, selw, ptrs, scl, 16, 0, [-1, 0, 0], BIG), "bases[0] = -1"),
        (R, (logits, 2, 0, BASES, BIG, "sigmoid", 1, 1, False, 1.0,
             torch.zeros(64, device=other)), "bias is on"),
        (R, (logits, 2, 0, BASES, BIG, "sigmoid", 1, 1, False, 1.0, None, None,
             torch.zeros(64, dtype=torch.int32, device=other), 8), "expert_map is on"),
        (G, (torch.zeros(4, 2, device=other), logits, 2, True, 8, 2), "hidden_states is on"),
        (G, (torch.zeros(4, 2, device=DEV), logits.double(), 2, True, 8, 2),
         "gating_output is torch.float64"),
    ]
    for op, args, words in cases:
        with pytest.raises(memra.Error) as e:
            op(*args)
        real = str(e.value)
        assert words in real, (words, real)
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        with mode, pytest.raises(Exception) as e:
            op(*[mode.from_tensor(a) if isinstance(a, torch.Tensor) and a.device.type != "meta"
                 else a for a in args])
        err = e.value
        while not isinstance(err, memra.Error) and err.__cause__ is not None:
            err = err.__cause__
        assert str(err) == real, (real, str(err))  # one judge: the same words


@cuda_only
def test_kernel_not_loaded_under_capture_is_a_capture_error():
    """A fresh engine (model) whose kernel was never loaded: the op inside a
    capture is the library's CaptureError, and the capture survives."""
    sel = torch.zeros(8, dtype=torch.int32, device=DEV)
    selw = torch.ones(8, device=DEV)
    mt.engine(DEV, "never-prepared")  # the engine, not its kernel
    sync()
    g = torch.cuda.CUDAGraph()
    with pytest.raises(memra.CaptureError, match="prepare_layer"):
        with torch.cuda.graph(g):
            mt.vrows_tables(sel, selw, N_EXPERT, 321, BASES, BIG, model="never-prepared")
    mt.prepare_layer(321, None, DEV, model="never-prepared")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        ptrs, scl = mt.vrows_tables(sel, selw, N_EXPERT, 321, BASES, BIG,
                                    model="never-prepared")
    g.replay()
    sync()
    assert_bits_equal((ptrs, scl), tables64(sel, selw, None, BASES, BIG), "after prepare")


def test_opcheck_every_op():
    n, T, E = 16, 9, 64
    gen = torch.Generator().manual_seed(1)
    h = torch.randn(T, 16, device=DEV)
    x = torch.randn(T, E, generator=gen).to(DEV)
    bias = (torch.randn(E, generator=gen) * 0.05).to(DEV)
    emap = (torch.arange(E, dtype=torch.int32) % 40 - 8).to(DEV)
    sel = torch.randint(0, N_EXPERT, (n,), dtype=torch.int32, device=DEV)
    selw = torch.rand(n, device=DEV)
    mt.prepare_layer(11, seed_planes(N_EXPERT), DEV)
    mt.route_prepare_layer(11, seed_planes(E), DEV)
    mt.route_prepare_layer(12, seed_planes(33), DEV)
    O = torch.ops.memra
    for op, args, kw in [
        (O.vrows_tables_.default, (sel, selw, torch.empty(3 * n, dtype=torch.int64, device=DEV),
                                   torch.empty(3 * n, device=DEV), N_EXPERT, 11, BASES, BIG), {}),
        (O.vrows_tables.default, (sel, selw, N_EXPERT, 11, BASES, BIG), {}),
        (O.grouped_topk.default, (h, x, 4, True, 8, 2, "sigmoid", 2.5, bias), {}),
        (O.grouped_topk.default, (h, x.bfloat16(), 4, False, 8, 2), {}),
        (O.fused_topk.default, (h, x.half(), 3, True), {}),
        (O.fused_topk.default, (h, x, 3, False, torch.int64, "sigmoid"), {}),
        (O.route_tables.default, (x.bfloat16(), 4, 11, BASES, BIG),
         {"scoring": "sigmoid", "bias": bias.bfloat16(), "n_group": 8, "topk_group": 4}),
        (O.route_tables.default, (x, 4, 12, BASES, BIG),
         {"expert_map": emap, "n_local": 32, "n_shared": 1}),
        (O.route_tables.default, (x[:0], 4, 11, BASES, BIG), {}),
    ]:
        torch.library.opcheck(op, args, kw)


# ---- engines, faults, ordering -------------------------------------------------

@cuda_only
def test_engine_self_check_and_origin():
    eng = mt.engine(DEV)
    rep = eng.self_check()
    assert rep["failed"] == 0 and rep["cases"] > 11  # tables, then routing through both kernels
    o = eng.kernel_origin()
    assert o["ready"] and o["nvrtc_version"] >= 12000


@cuda_only
def test_fault_read_follows_the_current_stream():
    """A table op on a side stream with 4096 bad ids, then a fault read inside
    torch.cuda.stream(side): it reads after the op, on that stream."""
    n = 4096
    side = torch.cuda.Stream(DEV)
    mt.prepare_layer(0, None, DEV)
    mt.faults(DEV, reset=True)
    with torch.cuda.stream(side):
        sel = torch.full((n,), 1000, dtype=torch.int32, device=DEV)
        selw = torch.ones(n, device=DEV)
        torch.cuda._sleep(50_000_000)  # the op runs well after the read is asked for
        mt.vrows_tables(sel, selw, 256, 0, BASES, BIG)
        f = mt.faults(DEV, reset=True)
        g = mt.engine(DEV).faults(reset=False)  # the Engine defaults to the current stream too
    assert f.bad_expert == n and f.first_pair == 0
    assert g.bad_expert == 0


@cuda_only
def test_first_engine_is_shared_by_racing_threads():
    import threading

    from memra import _torch_engines
    got = []
    _torch_engines._engines.pop((0, "race"), None)
    ts = [threading.Thread(target=lambda: got.append(mt.engine(DEV, "race"))) for _ in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert len({id(e) for e in got}) == 1


def test_engine_per_model():
    """Speculative decoding: draft and target use the same layer index with
    different planes; each model's tables use its own."""
    E = 256
    draft, target = seed_planes(E), seed_planes(E) * 2.0
    mt.prepare_layer(3, draft, DEV, model="draft")
    mt.prepare_layer(3, target, DEV, model="target")
    sel = torch.arange(64, dtype=torch.int32, device=DEV)
    selw = torch.rand(64, device=DEV)
    for _ in range(3):
        a = mt.vrows_tables(sel, selw, E, 3, BASES, BIG, model="draft")
        b = mt.vrows_tables(sel, selw, E, 3, BASES, BIG, model="target")
        assert_bits_equal(a, tables64(sel, selw, draft, BASES, BIG), "draft")
        assert_bits_equal(b, tables64(sel, selw, target, BASES, BIG), "target")
    if DEV.type == "cuda":
        assert mt.engine(DEV, "draft") is not mt.engine(DEV, "target")


def test_dispatcher_and_direct_calls_agree():
    T, E = 33, 128
    logits = torch.randn(T, E, device=DEV).bfloat16()
    bias = (torch.randn(E) * 0.05).to(DEV)
    h = torch.zeros(T, 1, device=DEV)
    a = grouped_topk(h, logits, 6, True, 8, 3, "sigmoid", 2.5, bias)
    b = torch.ops.memra.grouped_topk(h, logits, 6, True, 8, 3, "sigmoid", 2.5, bias)
    sync()
    assert torch.equal(a[1], b[1]) and torch.equal(bits(a[0]), bits(b[0]))


# ---- the expert-sorted layout (issue #31) ------------------------------------------

def layout_ids(m, topk, n_expert, seed, minus_one=False):
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(n_expert, generator=g)[:topk] for _ in range(m)]) if m \
        else torch.empty(0, topk, dtype=torch.int64)
    if minus_one:  # padding rows
        ids[m // 2::3] = -1
    return ids.to(torch.int32)


def assert_same_layout(got, want, what):
    for name, g_, w_ in zip(("sorted_ids", "expert_ids", "num_tokens_post_pad"), got, want):
        g_ = g_.cpu()
        assert g_.dtype == w_.dtype and g_.shape == w_.shape, f"{what}: {name} shape"
        bad = (g_ != w_).sum().item()
        assert bad == 0, f"{what}: {bad} entries of {name} differ"


@pytest.mark.parametrize("m,topk,n_expert,block_size,pad,mapped", [
    (1, 8, 256, 16, False, False), (64, 8, 256, 64, True, True), (256, 8, 256, 16, False, True),
    (2048, 8, 256, 64, False, False),   # 16,384 pairs: the last one-launch size
    (4096, 8, 256, 64, True, True),     # 32,768 pairs: three launches and their workspace
    (9000, 2, 1056, 128, False, False),  # the most experts
    (0, 8, 256, 16, False, False),
])
def test_layout_device_equals_host(m, topk, n_expert, block_size, pad, mapped):
    """moe_align_block_size on DEV against the host arm (the CPU op), every
    byte, with vLLM's golden per-expert sets as a second opinion."""
    from layout_reference import expert_sets, vllm_golden
    ids = layout_ids(m, topk, n_expert, m + block_size, minus_one=m > 100)
    emap = None
    if mapped:
        emap = torch.full((n_expert,), -1, dtype=torch.int32)
        emap[1::2] = torch.arange(n_expert // 2, dtype=torch.int32)
    got = mt.moe_align_block_size(ids.to(DEV), block_size, n_expert,
                                  None if emap is None else emap.to(DEV), pad)
    sync()
    host = mt.moe_align_block_size(ids, block_size, n_expert, emap, pad)
    assert_same_layout(got, host, f"{m}x{topk}")
    want = vllm_golden(ids, block_size, n_expert, emap, pad)
    n, post = ids.numel(), int(host[2])
    assert torch.equal(host[2], want[2])
    assert expert_sets(host[0], host[1], block_size, post, n) == \
        expert_sets(want[0], want[1], block_size, post, n)


@pytest.mark.parametrize("m,calls", [(64, 1000), (2048, 1000), (4096, 100)])
def test_layout_the_same_bytes_every_call(m, calls):
    """Deterministic on the device: decode sizes 1,000 times, prefill 100,
    the same bytes each time (vLLM's and SGLang's kernels place pairs with
    atomics; their order inside an expert changes from run to run)."""
    if DEV.type == "cpu":
        calls = min(calls, 20)
    ids = layout_ids(m, 8, 256, 3).to(DEV)
    first = [t.clone() for t in mt.moe_align_block_size(ids, 64, 256)]
    for _ in range(calls):
        again = mt.moe_align_block_size(ids, 64, 256)
        assert all(torch.equal(a, b) for a, b in zip(first, again))
    sync()


@pytest.mark.parametrize("T,kw", [
    (33, dict()),
    (64, dict(scoring="sigmoid", n_group=8, topk_group=4, renormalize=True,
              routed_scaling_factor=2.5, bias=True)),
    (47, dict(expert_map=True, n_local=128, n_shared=1, shared_weight=1.0, n_real=30)),
    (2100, dict(scoring="sigmoid", n_group=8, topk_group=4, bias=True)),  # 16,800 pairs
    (0, dict()),
])
def test_route_tables_layout_device_equals_host(T, kw):
    """Routing fused with its layout (one launch at decode sizes, two past
    them, four past 16,384 pairs) on DEV against the same call on the CPU (the host arm):
    all seven outputs, every bit."""
    E = 256
    g = torch.Generator().manual_seed(T)
    x = torch.randn(T, E, generator=g) * 2
    host_kw, dev_kw = dict(kw), dict(kw)
    if kw.get("bias"):
        b = torch.randn(E, generator=g) * 0.05
        host_kw["bias"], dev_kw["bias"] = b, b.to(DEV)
    if kw.get("expert_map"):
        emap = (torch.arange(E, dtype=torch.int32) % 2 * (torch.arange(E) // 2 + 1) - 1)
        emap = emap.to(torch.int32)
        host_kw["expert_map"], dev_kw["expert_map"] = emap, emap.to(DEV)
    if "n_real" in kw:
        c = torch.tensor([kw["n_real"]], dtype=torch.int32)
        host_kw["n_real"], dev_kw["n_real"] = c, c.to(DEV)
    mt.route_prepare_layer(21, None, DEV)
    mt.route_prepare_layer(21, None, "cpu")
    mt.layout_prepare(DEV)
    got = mt.route_tables_layout(x.to(DEV), 8, 21, 64, BASES, BIG, **dev_kw)
    sync()
    want = mt.route_tables_layout(x, 8, 21, 64, BASES, BIG, **host_kw)
    for name, g_, w_ in zip(("ids", "weights", "ptrs", "scl", "sorted_ids", "expert_ids",
                             "num_tokens_post_pad"), got, want):
        g_ = g_.cpu()
        assert g_.shape == w_.shape, name
        assert torch.equal(bits(g_) if g_.dtype == torch.float32 else g_,
                           bits(w_) if w_.dtype == torch.float32 else w_), f"T={T}: {name}"


def test_sglang_align_device_equals_host():
    """sgl-kernel's shape on DEV, as SGLang calls it, against the CPU."""
    from layout_reference import sglang_style_align
    for m, bs in ((8, 16), (300, 64), (3000, 64)):
        ids = layout_ids(m, 8, 256, m)
        got = sglang_style_align(sglang.moe_align_block_size, ids.to(DEV), bs, 256)
        sync()
        want = sglang_style_align(sglang.moe_align_block_size, ids, bs, 256)
        used = int(want[2]) // bs
        assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[2].cpu(), want[2])
        assert torch.equal(got[1].cpu()[:used], want[1][:used])
        assert torch.equal(got[3].cpu(), want[3])


@cuda_only
def test_layout_ops_in_a_cuda_graph():
    """After layout_prepare, moe_align_block_size and the fused op captured in
    one graph (decode) and replayed with new ids and logits: each replay's
    bytes the host arm's."""
    E, T, K = 256, 32, 8
    mt.route_prepare_layer(22, None, DEV)
    mt.layout_prepare(DEV)
    ids = layout_ids(T, K, E, 1).to(DEV)
    logits = torch.randn(T, E, device=DEV)

    def step():
        return (mt.moe_align_block_size(ids, 16, E),
                mt.route_tables_layout(logits, K, 22, 16, scoring="sigmoid"))

    g, (align, fused) = capture(step)
    for rep in range(20):
        ids.copy_(layout_ids(T, K, E, rep + 10).to(DEV))
        logits.copy_(torch.randn(T, E, device=DEV))
        g.replay()
        sync()
        assert_same_layout(align, mt.moe_align_block_size(ids.cpu(), 16, E), f"replay {rep}")
        want = mt.route_tables_layout(logits.cpu(), K, 22, 16, scoring="sigmoid")
        for a, b in zip(fused, want):
            assert torch.equal(a.cpu(), b), f"replay {rep}"


@cuda_only
def test_layout_ops_under_reduce_overhead():
    """torch.compile(mode="reduce-overhead") over routing then the layout
    (vLLM's two calls) and the fused op: CUDA graphs recorded, no skip, the
    host arm's bytes."""
    from torch._dynamo.utils import counters
    E = 256
    mt.route_prepare_layer(23, None, DEV)
    mt.layout_prepare(DEV)

    def decode(hidden, logits):
        w, ids = grouped_topk(hidden, logits, 8, True, 8, 4, "sigmoid", 2.5)
        return (w, ids) + tuple(mt.moe_align_block_size(ids, 16, E)) + \
            tuple(mt.route_tables_layout(logits, 8, 23, 16, scoring="sigmoid", n_group=8,
                                         topk_group=4)[4:])

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(decode, mode="reduce-overhead", fullgraph=True)
    hidden = torch.zeros(16, 8, device=DEV)
    for it in range(5):
        logits = torch.randn(16, E, device=DEV)
        got = [t.clone() for t in compiled(hidden, logits)]
        sync()
        want = decode(hidden.cpu(), logits.cpu())
        for a, b in zip(got, want):
            assert torch.equal(a.cpu(), b), it
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])


def test_opcheck_layout_ops():
    ids = layout_ids(9, 4, 64, 5).to(DEV)
    emap = (torch.arange(64, dtype=torch.int32) % 40 - 8).to(DEV)
    x = torch.randn(9, 64).to(DEV)
    n = ids.numel()
    mt.route_prepare_layer(24, None, DEV)
    O = torch.ops.memra
    for op, args, kw in [
        (O.moe_align_block_size.default, (ids, 16, 64), {}),
        (O.moe_align_block_size.default, (ids, 4, 64, emap, True), {}),
        (O.sglang_moe_align_block_size.default,
         (ids, 65, 16, torch.empty(n + 65 * 15, dtype=torch.int32, device=DEV),
          torch.empty(70, dtype=torch.int32, device=DEV),
          torch.empty(1, dtype=torch.int32, device=DEV),
          torch.empty(66, dtype=torch.int32, device=DEV), True), {}),
        (O.route_tables_layout.default, (x, 4, 24, 16), {"scoring": "sigmoid"}),
        (O.route_tables_layout.default, (x.bfloat16(), 4, 24, 8),
         {"expert_map": emap, "n_local": 32, "n_shared": 1, "pad_sorted_ids": True}),
    ]:
        torch.library.opcheck(op, args, kw)
