"""memra.torch on CPU tensors (the host arm), in CI: every op against routers
written the way vLLM and the models write them, for seven models' routing;
a vLLM-style grouped_topk call site with memra's op imported instead, bit
for bit against the host arm; expert parallelism and shared experts; zero
tokens; bad arguments refused alike by the op and its fake; opcheck; and
torch.compile(fullgraph=True). The same ops on CUDA tensors are
test_torch_gpu.py's."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the memra.torch tests "
                            "need it (tools/test.sh installs it where it can)")

import memra  # noqa: E402
import memra.torch as mt  # noqa: E402
from memra.torch import fused_topk, grouped_topk  # noqa: E402

from routing_reference import (MODELS, llama4_router64, route64, tables64,  # noqa: E402
                               vllm_style_call_site)

CPU = torch.device("cpu")
BASES = [0x7F0000000000, 0x7F4000000000, 0x7F8000000000]
STRIDES = [24 << 20, 24 << 20, 48 << 20]
EPS32 = 2.0 ** -23


def bits(t):
    """A float32 tensor's bits, for comparing bit for bit."""
    return t.contiguous().view(torch.int32)


def logits_for(T, E, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(T, E, generator=g) * 2.0).to(dtype)


def bias_for(E, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed + 1)
    return (torch.randn(E, generator=g) * 0.05).to(dtype)


def host_arm(logits, top_k, macros=None, bases=(0, 0, 0), strides=(0, 0, 0), **spec):
    """memra's host arm on NumPy (memra.route_tables_host), outputs shaped
    as the ops shape them."""
    if logits.dtype == torch.bfloat16:
        arr = logits.view(torch.int16).numpy().view(np.uint16)
    else:
        arr = logits.numpy()
    bias = spec.pop("bias", None)
    if bias is not None:
        spec["bias"] = bias.float().numpy()  # bfloat16 -> float32 is exact
    em = spec.pop("expert_map", None)
    if em is not None:
        spec["expert_map"] = em.numpy()
    sel, selw, ptrs, scl, f = memra.route_tables_host(
        arr, top_k, bases, strides, macros.numpy() if macros is not None else None, **spec)
    T = logits.shape[0]
    K = sel.size // T if T else top_k + spec.get("n_shared", 0)
    return (torch.from_numpy(sel).view(T, K), torch.from_numpy(selw).view(T, K),
            torch.from_numpy(ptrs.view(np.int64)).view(3, T, K),
            torch.from_numpy(scl).view(3, T, K), f)


def assert_close_to64(w32, w64, what):
    """memra's binary32 weights against a float64 evaluation: within 8 ulp
    (exp to 1 ulp, a sum, a division and a scaling, each rounded once)."""
    err = (w32.double() - w64).abs() / w64.abs().clamp_min(1e-30)
    assert err.max().item() <= 8 * EPS32, f"{what}: weights off by {err.max().item():.3g}"


# ---- each model's routing against its PyTorch formulation -----------------

@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_models_against_pytorch_references(model, dtype):
    E, K, scoring, n_group, topk_group, renorm, rsf, has_bias = MODELS[model]
    T = 512
    logits = logits_for(T, E, hash(model) % 1000, dtype)
    bias = bias_for(E, 7) if has_bias else None
    hidden = torch.zeros(T, 4)
    if model == "llama-4-scout":
        w, ids, _ = fused_topk(hidden, logits, K, False, scoring_func="sigmoid")
        want_w, want_ids = llama4_router64(logits.float(), K)
        top = logits.double().sort(dim=-1, descending=True, stable=True)
        want_ids = top.indices[:, :K]
        gap = top.values[:, K - 1] - top.values[:, K]
        clear = (gap == 0) | (gap > 1e-6)
    elif n_group == 1 and bias is None:
        w, ids, _ = fused_topk(hidden, logits, K, renorm, scoring_func=scoring)
        want_w, want_ids, m = route64(logits.float(), K, scoring, renormalize=renorm)
        clear = m > 1e-6
    else:
        w, ids = grouped_topk(hidden, logits, K, renorm, n_group, topk_group, scoring, rsf, bias)
        want_w, want_ids, m = route64(logits.float(), K, scoring, n_group, topk_group, renorm,
                                      rsf, bias)
        clear = m > 1e-6
    assert w.dtype == torch.float32 and ids.dtype == torch.int32
    assert w.shape == (T, K) and ids.shape == (T, K)
    assert clear.sum() > 0.9 * T, clear.sum()
    assert torch.equal(ids[clear].long(), want_ids[clear]), model
    assert_close_to64(w[clear], want_w[clear], model)
    # and the host arm, bit for bit, on every token
    spec = dict(scoring=scoring, n_group=n_group, topk_group=topk_group, renormalize=renorm,
                routed_scaling_factor=rsf if (n_group > 1 or bias is not None) else 1.0,
                bias=bias)
    hs, hw, _, _, _ = host_arm(logits, K, **spec)
    assert torch.equal(ids, hs) and torch.equal(bits(w), bits(hw)), model


def test_grouped_topk_without_a_bias_scores_groups_by_their_best():
    """vLLM's grouped_topk and DeepSeek-V2: without a bias a group scores
    its best expert; with one, its two best. Tokens built so the two rules
    choose different groups: memra follows vLLM in each case."""
    T, E = 256, 64
    logits = logits_for(T, E, 11) * 0.25
    # group 0: one very strong expert; group 1: two good ones
    logits[:, 0] = 4.0
    logits[:, 8] = 3.5
    logits[:, 9] = 3.5
    logits[:, 1:8] = -4.0
    hidden = torch.zeros(T, 1)
    w, ids = grouped_topk(hidden, logits, 2, False, 8, 1, "softmax")
    _, want, _ = route64(logits, 2, "softmax", 8, 1, group_scoring="max")
    _, other, _ = route64(logits, 2, "softmax", 8, 1, group_scoring="top2_sum")
    assert torch.equal(ids.long(), want)
    assert not torch.equal(want, other)  # the rules do differ on these tokens
    # the rule given explicitly wins over the default
    mt.route_prepare_layer(0, None, device="cpu")
    ids2 = mt.route_tables(logits, 2, 0, n_group=8, topk_group=1, group_scoring="top2_sum")[0]
    assert torch.equal(ids2.long(), other)


@pytest.mark.parametrize("model", ["deepseek-v3", "deepseek-v2", "kimi-k2", "glm-4.5"])
def test_vllm_call_site_runs_unchanged_bit_for_bit(model):
    """vLLM's call site with memra's grouped_topk imported in place of
    vLLM's: runs as written, returns vLLM's dtypes and shapes, and is the
    host arm bit for bit."""
    E, K, scoring, n_group, topk_group, renorm, rsf, has_bias = MODELS[model]
    T = 333
    logits = logits_for(T, E, 5, torch.bfloat16)
    bias = bias_for(E, 5) if has_bias else None
    hidden = torch.randn(T, 64, dtype=torch.bfloat16)
    w, ids = vllm_style_call_site(grouped_topk, hidden, logits, K, n_group, topk_group, renorm,
                                  scoring, rsf, bias)
    assert w.dtype == torch.float32 and ids.dtype == torch.int32 and w.shape == (T, K)
    hs, hw, _, _, _ = host_arm(logits, K, scoring=scoring, n_group=n_group,
                               topk_group=topk_group, renormalize=renorm,
                               routed_scaling_factor=rsf, bias=bias)
    assert torch.equal(ids, hs)
    assert torch.equal(bits(w), bits(hw))


def test_fused_topk_outputs_are_vllms():
    T, E, K = 37, 64, 6
    logits = logits_for(T, E, 3, torch.float16)
    hidden = torch.zeros(T, 8)
    w, ids, tei = fused_topk(hidden, logits, K, True)
    assert (w.dtype, ids.dtype, tei.dtype) == (torch.float32, torch.int32, torch.int32)
    assert tei.is_contiguous() and tei.shape == (T, K)
    want = torch.arange(K).view(1, K) * T + torch.arange(T).view(T, 1)  # k * T + t
    assert torch.equal(tei.long(), want)
    w64, ids64, tei64 = fused_topk(hidden, logits, K, True, indices_type=torch.int64)
    assert ids64.dtype == torch.int64 and torch.equal(ids64, ids.long())
    _, idsu, _ = fused_topk(hidden, logits, K, True, indices_type=torch.uint32)  # pplx's
    assert idsu.dtype == torch.uint32 and torch.equal(idsu.long(), ids.long())
    assert torch.equal(bits(w64), bits(w))
    hs, hw, _, _, _ = host_arm(logits, K, renormalize=True)
    assert torch.equal(ids, hs) and torch.equal(bits(w), bits(hw))


# ---- route_tables: the tables beside the choice -----------------------------

def test_route_tables_matches_host_arm_and_pytorch_tables():
    T, E, K = 100, 256, 8
    logits = logits_for(T, E, 21, torch.bfloat16)
    bias = bias_for(E, 21, torch.bfloat16)
    planes = torch.rand(3, E, generator=torch.Generator().manual_seed(2)) + 0.5
    mt.route_prepare_layer(3, planes, device="cpu")
    kw = dict(scoring="sigmoid", n_group=8, topk_group=4, renormalize=True,
              routed_scaling_factor=2.5)
    ids, w, ptrs, scl = mt.route_tables(logits, K, 3, BASES, STRIDES, bias=bias, **kw)
    assert ids.shape == (T, K) and ptrs.shape == (3, T, K) and scl.shape == (3, T, K)
    assert ptrs.dtype == torch.int64 and scl.dtype == torch.float32
    hs, hw, hp, hsc, _ = host_arm(logits, K, planes, BASES, STRIDES, bias=bias, **kw)
    assert torch.equal(ids, hs) and torch.equal(bits(w), bits(hw))
    assert torch.equal(ptrs, hp) and torch.equal(bits(scl), bits(hsc))
    wp, ws = tables64(ids, w, planes, BASES, STRIDES)
    assert torch.equal(ptrs, wp) and torch.equal(bits(scl), bits(ws))
    # the same choice as grouped_topk (vLLM's default is top2_sum with a bias)
    gw, gids = grouped_topk(torch.zeros(T, 1), logits, K, True, 8, 4, "sigmoid", 2.5, bias)
    assert torch.equal(gids, ids) and torch.equal(bits(gw), bits(w))


def test_planes_are_taken_when_prepared_not_later():
    """prepare copies the planes: a later change of the caller's tensor
    does nothing until the layer is prepared again."""
    T, E, K = 16, 64, 4
    logits = logits_for(T, E, 4)
    planes = torch.ones(3, E)
    mt.route_prepare_layer(5, planes, device="cpu", model="copy")
    a = mt.route_tables(logits, K, 5, BASES, STRIDES, model="copy")[3]
    planes.mul_(2.0)
    b = mt.route_tables(logits, K, 5, BASES, STRIDES, model="copy")[3]
    assert torch.equal(bits(a), bits(b))
    mt.route_prepare_layer(5, planes, device="cpu", model="copy")
    c = mt.route_tables(logits, K, 5, BASES, STRIDES, model="copy")[3]
    assert torch.equal(c[0], a[0] * 2.0)


def test_unprepared_layer_has_no_planes_and_wrong_planes_are_clear_errors():
    logits = logits_for(4, 64, 1)
    mt.route_prepare_layer(4320, None, device="cpu", model="nobody")
    prepared = mt.route_tables(logits, 2, 4320, BASES, STRIDES, model="nobody")
    never = mt.route_tables(logits, 2, 4321, BASES, STRIDES, model="nobody")
    for a, b in zip(prepared, never):
        assert torch.equal(a.view(torch.int32) if a.dtype == torch.float32 else a,
                           b.view(torch.int32) if b.dtype == torch.float32 else b)
    assert (never[3][:2] == 1.0).all()  # gate and up scales: no planes
    mt.route_prepare_layer(6, torch.ones(3, 64), device="cpu", model="wrong")
    with pytest.raises(memra.InvalidArgError, match="planes hold 64 experts, this call has 66"):
        mt.route_tables(logits, 2, 6, n_shared=2, model="wrong")
    mt.prepare_layer(6, torch.ones(3, 64), device="cpu", model="wrong")
    with pytest.raises(memra.InvalidArgError, match="planes hold 64 experts, this call has 65"):
        mt.vrows_tables(torch.zeros(4, dtype=torch.int32), torch.ones(4), 64, 6, n_shared=1,
                        model="wrong")
    with pytest.raises(memra.InvalidArgError, match="macros is torch.float64"):
        mt.route_prepare_layer(6, torch.ones(3, 64, dtype=torch.float64), device="cpu")
    with pytest.raises(memra.InvalidArgError, match=r"macros has shape \(2, 64\)"):
        mt.prepare_layer(6, torch.ones(2, 64), device="cpu")


# ---- expert parallelism and fused shared experts ----------------------------

def test_expert_map_and_shared_experts_match_the_host_arm():
    """Two ranks split 64 experts; each appends 2 shared experts. A rank's
    tables hold NULL pointers and +0 scales for the other rank's experts,
    counted in not_local, and both ranks agree on every choice."""
    T, E, K, S = 64, 64, 6, 2
    logits = logits_for(T, E, 31)
    half = E // 2
    per_rank = []
    for rank in range(2):
        emap = torch.full((E,), -1, dtype=torch.int32)
        emap[rank * half:(rank + 1) * half] = torch.arange(half, dtype=torch.int32)
        planes = torch.rand(3, half + S, generator=torch.Generator().manual_seed(rank)) + 0.5
        mt.route_prepare_layer(9, planes, device="cpu", model=f"rank{rank}")
        mt.faults("cpu", reset=True)
        kw = dict(scoring="softmax", renormalize=True, expert_map=emap, n_local=half,
                  n_shared=S, shared_weight=0.5)
        ids, w, ptrs, scl = mt.route_tables(logits, K, 9, BASES, STRIDES, model=f"rank{rank}",
                                            **kw)
        f = mt.faults("cpu", reset=True)
        assert ids.shape == (T, K + S)
        assert torch.equal(ids[:, K:], torch.tensor([E, E + 1], dtype=torch.int32).expand(T, S))
        assert torch.equal(w[:, K:], torch.full((T, S), 0.5))
        remote = (ids < rank * half) | (ids >= (rank + 1) * half)
        remote[:, K:] = False
        assert f.not_local == int(remote.sum()) and f.bad_expert == 0
        assert f.first_pair == memra.NO_FAULT  # not a fault
        assert (ptrs[:, remote] == 0).all() and (bits(scl)[:, remote] == 0).all()
        hs, hw, hp, hsc, hf = host_arm(logits, K, planes, BASES, STRIDES, **kw)
        assert torch.equal(ids, hs) and torch.equal(bits(w), bits(hw))
        assert torch.equal(ptrs, hp) and torch.equal(bits(scl), bits(hsc))
        assert hf.not_local == f.not_local
        # the table op on the same selection gives the same tables
        mt.prepare_layer(9, planes, device="cpu", model=f"rank{rank}")
        tp, ts = mt.vrows_tables(ids, w, E, 9, BASES, STRIDES, expert_map=emap, n_local=half,
                                 n_shared=S, model=f"rank{rank}")
        assert torch.equal(tp, ptrs) and torch.equal(bits(ts), bits(scl))
        per_rank.append((ids, w))
    assert torch.equal(per_rank[0][0], per_rank[1][0])
    assert torch.equal(bits(per_rank[0][1]), bits(per_rank[1][1]))


# ---- zero tokens, faults, bad arguments -------------------------------------

def test_zero_tokens_give_empty_outputs():
    z = torch.zeros(0, 64, dtype=torch.bfloat16)
    w, ids = grouped_topk(torch.zeros(0, 8), z, 4, True, 8, 2)
    assert w.shape == (0, 4) and ids.shape == (0, 4) and ids.dtype == torch.int32
    w, ids, tei = fused_topk(torch.zeros(0, 8), z, 4, True)
    assert tei.shape == (0, 4)
    mt.route_prepare_layer(0, None, device="cpu")
    out = mt.route_tables(z, 4, 0, n_shared=1)
    assert [tuple(o.shape) for o in out] == [(0, 5), (0, 5), (3, 0, 5), (3, 0, 5)]
    mt.prepare_layer(0, None, device="cpu")
    p, s = mt.vrows_tables(torch.zeros(0, 5, dtype=torch.int32), torch.zeros(0, 5), 64, 0)
    assert p.shape == (3, 0, 5) and s.shape == (3, 0, 5)


def test_faults_on_cpu_are_counted_like_the_device_counts_them():
    mt.faults("cpu", reset=True)
    logits = logits_for(8, 32, 2)
    logits[3, 5] = float("nan")
    w, ids = grouped_topk(torch.zeros(8, 1), logits, 4, True, 4, 2)
    assert torch.equal(ids[3], torch.arange(4, dtype=torch.int32))
    assert (bits(w[3]) == 0).all()
    mt.prepare_layer(1, None, device="cpu")
    mt.vrows_tables(torch.tensor([0, 99, 1, -1], dtype=torch.int32), torch.ones(4), 32, 1)
    f = mt.faults("cpu")
    assert (f.nonfinite, f.bad_expert, f.first_pair) == (4, 2, 1)
    assert mt.faults("cpu", reset=True).nonfinite == 4
    assert mt.faults("cpu").nonfinite == 0


def _fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    return FakeTensorMode()


def _z(*shape, dtype=torch.float32):
    return torch.zeros(*shape, dtype=dtype)


R0 = ([0, 0, 0], [0, 0, 0])  # route_tables' bases and strides, before its keywords
# route_tables' arguments after `layer`, by position: bases, strides, scoring, n_group,
# topk_group, renormalize, routed_scaling_factor, bias, group_scoring, expert_map, n_local,
# n_shared, shared_weight
BAD_CALLS = [
    # (op, args, error class, the message; "*" where the library's rule is judged)
    # what only Python can see: types, dtypes, shapes, devices, contiguity
    ("grouped_topk", lambda: (_z(4, 2), _z(4, 64, dtype=torch.float64), 2, True, 8, 2),
     memra.InvalidArgError,
     "grouped_topk: gating_output is torch.float64, want torch.float32 or torch.bfloat16 or "
     "torch.float16"),
    ("grouped_topk", lambda: (_z(3, 2), _z(4, 64), 2, True, 8, 2), memra.InvalidArgError,
     "grouped_topk: Number of tokens mismatch: hidden_states (3, 2), gating_output (4, 64)"),
    ("grouped_topk", lambda: (_z(4, 2), _z(4, 64), 2, True, 8, 2, "relu"),
     memra.InvalidArgError, "grouped_topk: scoring_func must be one of 'softmax', 'sigmoid', "
                            "not 'relu'"),
    ("grouped_topk", lambda: (_z(4, 2), _z(4, 64), 2, True, 8, 2, "sigmoid", 1.0, _z(63)),
     memra.InvalidArgError, "grouped_topk: e_score_correction_bias has shape (63,), want (64,)"),
    ("grouped_topk", lambda: (_z(4, 2), _z(4, 64), 2, True, 8, 2, "sigmoid", 1.0,
                              _z(64, dtype=torch.float64)), memra.InvalidArgError,
     "grouped_topk: e_score_correction_bias is torch.float64, want torch.float32 or "
     "torch.bfloat16 or torch.float16"),
    ("grouped_topk", lambda: (_z(4, 2), _z(4, 4, 64), 2, True, 8, 2), memra.InvalidArgError,
     "grouped_topk: gating_output must be [n_tokens, n_expert], not (4, 4, 64)"),
    ("fused_topk", lambda: (_z(4, 2), _z(4, 64), 2, True, torch.float32),
     memra.InvalidArgError, "fused_topk: indices_type is torch.float32, want None or one of"),
    ("route_tables", lambda: (_z(4, 64), 2, 0, [0, 0]), memra.InvalidArgError,
     "route_tables: bases must be three ints (gate, up, down), not 2"),
    ("route_tables", lambda: (_z(4, 64), 2, 0, [-1, 0, 0]), memra.InvalidArgError,
     "route_tables: bases[0] = -1 is outside [0, 18446744073709551616)"),
    ("route_tables", lambda: (_z(4, 64), 2, 0, *R0, "softmax", 1, 1, False, 1.0, None, "mean"),
     memra.InvalidArgError, "route_tables: group_scoring must be one of None, 'top2_sum', "
                            "'max', not 'mean'"),
    ("route_tables", lambda: (_z(4, 64), 2, 0, *R0, "softmax", 1, 1, False, 1.0, None, None,
                              _z(64, dtype=torch.int64), 4), memra.InvalidArgError,
     "route_tables: expert_map is torch.int64, want torch.int32"),
    ("vrows_tables", lambda: (_z(4, dtype=torch.int64), torch.ones(4), 8, 0),
     memra.InvalidArgError, "vrows_tables: sel is torch.int64, want torch.int32"),
    ("vrows_tables", lambda: (_z(4, dtype=torch.int32), torch.ones(3), 8, 0),
     memra.InvalidArgError, "vrows_tables: selw holds 3 elements, want 4 (sel's)"),
    ("vrows_tables_", lambda: (_z(4, dtype=torch.int32), torch.ones(4),
                               torch.empty(11, dtype=torch.int64), torch.empty(12), 8, 0),
     memra.InvalidArgError, "vrows_tables_: ptrs holds 11 elements, want 12"),
    ("vrows_tables_", lambda: (_z(4, dtype=torch.int32), torch.ones(4),
                               torch.empty(12, dtype=torch.int64), torch.empty(4, 3).t(), 8, 0),
     memra.InvalidArgError, "vrows_tables_: scl is not contiguous"),
    ("vrows_tables_", lambda: (_z(4, dtype=torch.int32), torch.ones(4),
                               torch.empty(12, dtype=torch.int32), torch.empty(12), 8, 0),
     memra.InvalidArgError, "vrows_tables_: ptrs is torch.int32, want torch.int64"),
    # the library's rules, in the caller's words
    ("grouped_topk", lambda: (_z(4, 2), _z(4, 64), 2, True, 0, 0), memra.InvalidArgError,
     "* grouped_topk: num_expert_group = 0 must be in [1, 32] and divide "
     "gating_output.shape[1] = 64"),
    ("grouped_topk", lambda: (_z(4, 2), _z(4, 64), 2, True, 7, 2), memra.InvalidArgError,
     "* grouped_topk: num_expert_group = 7 must be in [1, 32] and divide "
     "gating_output.shape[1] = 64"),
    ("grouped_topk", lambda: (_z(4, 2), _z(4, 64), 40, True, 8, 2), memra.InvalidArgError,
     "* grouped_topk: topk = 40 must be in [1, 32] and at most the 16 experts in play "
     "(topk_group * gating_output.shape[1] / num_expert_group)"),
    ("grouped_topk", lambda: (_z(4, 2), _z(4, 64), 2, True, 8, 9), memra.InvalidArgError,
     "* grouped_topk: topk_group = 9 is outside [1, 8]"),
    ("grouped_topk", lambda: (_z(4, 2), _z(4, 64), 2, True, 8, 2, "sigmoid", 0.0),
     memra.InvalidArgError,
     "* grouped_topk: routed_scaling_factor (bits 0x00000000) must be finite and > 0"),
    ("grouped_topk", lambda: (_z(4, 2), _z(4, 64), 2, True, 8, 2, "sigmoid", -0.0),
     memra.InvalidArgError,
     "* grouped_topk: routed_scaling_factor (bits 0x80000000) must be finite and > 0"),
    ("grouped_topk", lambda: (_z(4, 2), _z(4, 2048), 2, True, 8, 2), memra.InvalidArgError,
     "* grouped_topk: gating_output.shape[1] = 2048 is outside [1, 1024]"),
    ("route_tables", lambda: (_z(4, 64), 2, 0, [(1 << 63) - 1, 0, 0], [1 << 62, 0, 0]),
     memra.SlabOverflowError, "* route_tables: bases[0] (gate) 0x7fffffffffffffff + "
                              "(n_slots-1 = 63) * strides[0] 4611686018427387904 passes 2^64"),
    ("route_tables", lambda: (_z(4, 64), 2, 0, *R0, "softmax", 1, 1, False, 1.0, None, None,
                              _z(64, dtype=torch.int32), 0), memra.InvalidArgError,
     "* route_tables: n_local is 0 with an expert_map"),
    ("route_tables", lambda: (_z(4, 64), 2, 0, *R0, "softmax", 1, 1, False, 1.0, None, None,
                              None, 3), memra.InvalidArgError,
     "* route_tables: n_local = 3 without an expert_map"),
    ("route_tables", lambda: (_z(4, 64), 30, 0, *R0, "softmax", 1, 1, False, 1.0, None, None,
                              None, 0, 3), memra.InvalidArgError,
     "* route_tables: n_shared = 3: top_k + n_shared must be at most 32"),
    ("route_tables", lambda: (_z(4, 64), 2, 0, *R0, "softmax", 1, 1, False, 1.0, None, None,
                              None, 0, 1, float("inf")), memra.InvalidArgError,
     "* route_tables: shared_weight (bits 0x7f800000) is not finite"),
    ("vrows_tables", lambda: (_z(4, dtype=torch.int32), torch.ones(4), 0, 0),
     memra.InvalidArgError, "* vrows_tables: n_expert is 0"),
    ("vrows_tables", lambda: (_z(4, dtype=torch.int32), torch.ones(4), 8, 0, *R0, None, 2),
     memra.InvalidArgError, "* vrows_tables: n_local = 2 without an expert_map"),
]


def _refusals(name, make, cls):
    """The refusal of a bad call by the op (through the dispatcher), the
    memra.torch function (eager, no dispatcher) and the fake under
    FakeTensorMode: their messages."""
    op = getattr(torch.ops.memra, name).default
    got = []
    with pytest.raises(cls) as e:
        op(*make())
    got.append(str(e.value))
    with pytest.raises(cls) as e:
        getattr(mt, name)(*make())
    got.append(str(e.value))
    mode = _fake_mode()
    with mode:
        args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in make()]
        with pytest.raises(Exception) as e:
            op(*args)
    err = e.value
    while not isinstance(err, cls) and err.__cause__ is not None:
        err = err.__cause__
    assert isinstance(err, cls), repr(e.value)
    got.append(str(err))
    return got


@pytest.mark.parametrize("name,make,cls,words", BAD_CALLS,
                         ids=[f"{c[0]}-{c[3].lstrip('* ')[len(c[0]) + 2:][:28]}"
                              for c in BAD_CALLS])
def test_bad_arguments_are_refused_alike_by_op_and_fake(name, make, cls, words):
    """The op on CPU tensors, the dispatcher-free function, and the fake
    under FakeTensorMode refuse the same call with the same message, word
    for word; for the library's rules ("*"), the library's message, its
    fields named as the caller's arguments, from each of them."""
    mt.route_prepare_layer(0, None, device="cpu")
    mt.prepare_layer(0, None, device="cpu")
    op, direct, fake = _refusals(name, make, cls)
    assert op == direct == fake, (op, direct, fake)
    assert op.startswith(words.lstrip("* ")), op


def test_library_rules_are_the_host_arms():
    """The library's rules reach the NumPy host arm too, word for word but
    for the names: a refusal of the op is the host arm's refusal of the
    same call (route_tables_host names the library's fields)."""
    logits = np.zeros((4, 64), np.float32)
    for op_args, host_kw, host_words in [
        ((_z(4, 2), _z(4, 64), 40, True, 8, 2), dict(top_k=40, n_group=8, topk_group=2),
         "top_k = 40 must be in [1, 32] and at most the 16 experts in play"),
        ((_z(4, 2), _z(4, 64), 2, True, 7, 2), dict(top_k=2, n_group=7, topk_group=2),
         "n_group = 7 must be in [1, 32] and divide n_expert = 64"),
    ]:
        with pytest.raises(memra.InvalidArgError) as op_err:
            mt.grouped_topk(*op_args)
        kw = dict(host_kw)
        with pytest.raises(memra.InvalidArgError) as host_err:
            memra.route_tables_host(logits, kw.pop("top_k"), **kw)
        assert host_words in str(host_err.value)
        assert type(op_err.value) is type(host_err.value)


def test_layer_without_planes_is_the_librarys_call():
    """The library judges a layer index whatever the layer mirrors (it once
    let one out of range pass where there were no planes): layer 70000 is
    refused with planes and without, on the CPU as on a GPU."""
    # the op, the dispatcher-free function and torch.compile's fake alike
    assert _refusals("route_tables", lambda: (_z(4, 64), 2, 70000), memra.InvalidArgError) == [
        "route_tables: layer = 70000 is outside [0, 65536)"] * 3
    for planes in (None, torch.ones(3, 64)):
        with pytest.raises(memra.InvalidArgError) as e:
            mt.route_prepare_layer(70000, planes, device="cpu")
        assert str(e.value) == "route_prepare_layer: layer = 70000 is outside [0, 65536)"
    with pytest.raises(memra.InvalidArgError) as e:
        mt.prepare_layer(70000, None, device="cpu")  # the table op's prepare always judges it
    assert str(e.value) == "prepare_layer: layer = 70000 is outside [0, 65536)"


@pytest.mark.parametrize("layer", [-1, 65536, 70000])
def test_table_op_layer_is_judged_on_the_cpu_as_on_a_gpu(layer):
    """The table op on CPU tensors refuses a layer a GPU's call refuses (the
    host arm takes no layer, and once let -1 or 70000 pass where a GPU
    would refuse it): by the op, the function and the fake alike. An empty
    call is not judged by its layer, on either device."""
    def make():
        return (torch.arange(4, dtype=torch.int32), torch.ones(4), 8, layer)
    want = f"vrows_tables: layer = {layer} is outside [0, 65536)"
    assert _refusals("vrows_tables", make, memra.InvalidArgError) == [want] * 3
    ptrs, scl = mt.vrows_tables(torch.zeros(0, dtype=torch.int32), torch.ones(0), 8, layer)
    assert ptrs.numel() == 0 and scl.numel() == 0


def test_a_uint8_map_at_a_cached_int32_maps_address_is_refused():
    """The spec cache keys the map by its address: a map of another dtype
    at the same address (here a uint8 view of the cached int32 map's
    memory, of the right length) must be refused, not read as int32 past
    its end, by the op, the function and the fake alike."""
    E = 64
    m32 = torch.arange(E, dtype=torch.int32) % 32
    mt.route_prepare_layer(0, None, device="cpu")
    mt.route_tables(_z(4, E), 2, 0, expert_map=m32, n_local=32)  # cached
    m8 = m32.view(torch.uint8)[:E]
    assert m8.data_ptr() == m32.data_ptr() and m8.shape == (E,)

    def make():
        return (_z(4, E), 2, 0, *R0, "softmax", 1, 1, False, 1.0, None, None, m8, 32)
    got = _refusals("route_tables", make, memra.InvalidArgError)
    assert got == ["route_tables: expert_map is torch.uint8, want torch.int32"] * 3


def test_shared_weight_minus_zero_after_plus_zero_keeps_its_sign():
    """+0.0 and -0.0 are equal in Python and differ in their bits: the
    cached spec of one must not answer for the other."""
    mt.route_prepare_layer(0, None, device="cpu")
    x = logits_for(3, 16, 1)
    for w, want in ((0.0, 0x00000000), (-0.0, -0x80000000), (0.0, 0x00000000)):
        _, weights, _, _ = mt.route_tables(x, 2, 0, n_shared=1, shared_weight=w)
        assert (bits(weights[:, 2]) == want).all(), (w, bits(weights[:, 2]))
        _, weights, _, _ = torch.ops.memra.route_tables(x, 2, 0, n_shared=1, shared_weight=w)
        assert (bits(weights[:, 2]) == want).all(), (w, bits(weights[:, 2]))


@pytest.mark.parametrize("call,message", [
    (lambda: grouped_topk(_z(4, 2), _z(4, 64), 2, True, None, 2),
     "grouped_topk: num_expert_group must be an integer, not NoneType"),
    (lambda: grouped_topk(_z(4, 2), _z(4, 64), 2, "no", 8, 2),
     "grouped_topk: renormalize must be True or False, not 'no'"),
    (lambda: grouped_topk(_z(4, 2), _z(4, 64), 2, 2, 8, 2),
     "grouped_topk: renormalize must be True or False, not 2"),
    (lambda: fused_topk(_z(4, 2), _z(4, 64), "8", True),
     "fused_topk: topk must be an integer, not str"),
    (lambda: grouped_topk(_z(4, 2), _z(4, 64), 2, True, 8, 2, "sigmoid", None),
     "grouped_topk: routed_scaling_factor must be a number, not None"),
    (lambda: mt.route_tables(_z(4, 64), 2, 1 << 40),
     "route_tables: layer = 1099511627776 is outside [-2147483648, 2147483648)"),
])
def test_wrong_types_are_memra_errors(call, message):
    """A value of the wrong type is a memra.InvalidArgError naming the
    argument, never a raw TypeError or Python's truthiness ('no' is not
    True), eagerly and through the dispatcher (the types are checked before
    either)."""
    with pytest.raises(memra.InvalidArgError) as e:
        call()
    assert str(e.value) == message


def test_outputs_never_require_grad():
    """Routing is not differentiable: with vLLM's bias an nn.Parameter (and
    logits that require grad), the outputs do not require grad, eagerly,
    through the dispatcher, and compiled."""
    E = 64
    bias = torch.nn.Parameter(bias_for(E, 3))
    logits = logits_for(5, E, 3).requires_grad_()
    h = torch.zeros(5, 4)
    outs = [grouped_topk(h, logits, 4, True, 8, 2, "sigmoid", 2.5, bias),
            torch.ops.memra.grouped_topk(h, logits, 4, True, 8, 2, "sigmoid", 2.5, bias),
            fused_topk(h, logits, 4, True),
            mt.route_tables(logits, 4, 0, bias=bias, scoring="sigmoid")]
    from memra.torch.sglang import biased_grouped_topk
    outs.append(biased_grouped_topk(h, logits, bias, 4, True, 8, 2))
    for out in outs:
        for t in out:
            if t is not None:
                assert not t.requires_grad and t.grad_fn is None


# ---- opcheck and torch.compile ------------------------------------------------

def _opcheck_cases():
    T, E = 9, 64
    h = torch.randn(T, 16)
    x = logits_for(T, E, 8)
    bias = bias_for(E, 8)
    emap = torch.arange(E, dtype=torch.int32) % 40 - 8  # -8..-1 not local, then slots 0..31
    sel = torch.randint(0, E, (T, 4), dtype=torch.int32)
    selw = torch.rand(T, 4)
    return [
        ("grouped_topk", (h, x, 4, True, 8, 2, "sigmoid", 2.5, bias), {}),
        ("grouped_topk", (h, x.bfloat16(), 4, False, 8, 2), {}),
        ("grouped_topk", (h[:0], x[:0], 4, False, 8, 2), {}),
        ("fused_topk", (h, x.half(), 3, True), {}),
        ("fused_topk", (h, x, 3, False, torch.int64, "sigmoid"), {}),
        ("route_tables", (x.bfloat16(), 4, 0, BASES, STRIDES),
         {"scoring": "sigmoid", "bias": bias.bfloat16(), "n_group": 8, "topk_group": 4}),
        ("route_tables", (x, 4, 2, BASES, STRIDES),
         {"expert_map": emap, "n_local": 32, "n_shared": 1, "shared_weight": 1.0}),
        ("vrows_tables", (sel, selw, E, 0, BASES, STRIDES), {}),
        ("vrows_tables", (sel, selw, E, 2, BASES, STRIDES),
         {"expert_map": emap, "n_local": 32}),
        ("vrows_tables_", (sel.view(-1), selw.view(-1), torch.empty(3 * T * 4, dtype=torch.int64),
                           torch.empty(3 * T * 4), E, 0, BASES, STRIDES), {}),
    ]


@pytest.mark.parametrize("case", range(10))
def test_opcheck_on_cpu(case):
    mt.route_prepare_layer(0, torch.rand(3, 64) + 0.5, device="cpu")
    mt.route_prepare_layer(2, torch.rand(3, 33) + 0.5, device="cpu")
    mt.prepare_layer(0, torch.rand(3, 64) + 0.5, device="cpu")
    mt.prepare_layer(2, None, device="cpu")
    name, args, kw = _opcheck_cases()[case]
    torch.library.opcheck(getattr(torch.ops.memra, name).default, args, kw)


def test_compiled_fullgraph_equals_eager():
    """torch.compile(fullgraph=True) through vLLM's signatures and the fused
    op, token counts varying (dynamic shapes): the same bits as eager."""
    mt.route_prepare_layer(4, torch.rand(3, 256) + 0.5, device="cpu")
    bias = bias_for(256, 4)

    def step(hidden, logits):
        w, ids = grouped_topk(hidden, logits, 8, True, num_expert_group=8, topk_group=4,
                              scoring_func="sigmoid", routed_scaling_factor=2.5,
                              e_score_correction_bias=bias)
        fw, fids, _ = fused_topk(hidden, logits, 2, True)
        r = mt.route_tables(logits, 8, 4, BASES, STRIDES, scoring="sigmoid", n_group=8,
                            topk_group=4, renormalize=True, routed_scaling_factor=2.5, bias=bias)
        return w * 1.0, ids, fw, fids, r[2], r[3]

    from memra import _torch_ops
    _torch_ops._configs.clear()  # first seen under compile: built by the fake, not traced
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager", dynamic=True)
    for T in (1, 7, 64):
        logits = logits_for(T, 256, T, torch.bfloat16)
        hidden = torch.zeros(T, 4)
        got, want = compiled(hidden, logits), step(hidden, logits)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert torch.equal(g.view(torch.int32) if g.dtype == torch.float32 else g,
                               w.view(torch.int32) if w.dtype == torch.float32 else w)


def test_the_dispatcher_is_skipped_only_in_plain_eager():
    x = torch.zeros(2, 8)
    assert mt._direct(x, None)
    with _fake_mode() as m:
        assert not mt._direct(m.from_tensor(x))
    assert not mt._direct(torch.zeros(2, 8, device="meta"))

    class Sub(torch.Tensor):
        pass

    assert not mt._direct(x.as_subclass(Sub))
    assert mt._direct(torch.nn.Parameter(x, requires_grad=False))
    # The ops run below autograd (outputs never require grad): a parameter
    # that requires grad needs nothing of the dispatcher either.
    assert mt._direct(torch.nn.Parameter(x))


def test_gpu_file_runs_its_cpu_twins():
    """test_torch_gpu.py (run on the GPU machine) with its tests that have a
    CPU twin run on CPU tensors: the file itself is sound before a GPU sees
    it."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, MEMRA_TORCH_TEST_DEVICE="cpu")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        os.path.join(here, "test_torch_gpu.py")], capture_output=True,
                       text=True, env=env, cwd=here, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and " failed" not in r.stdout, r.stdout[-2000:]


def test_unprepared_layer_is_said_once(caplog):
    """A layer used without prepare_layer has no planes, and the "memra"
    logger says so once (a forgotten prepare must not scale silently)."""
    import logging
    sel = torch.arange(8, dtype=torch.int32)
    selw = torch.ones(8)
    with caplog.at_level(logging.WARNING, logger="memra"):
        mt.vrows_tables(sel, selw, 16, 4321, [0, 0, 0], [0, 0, 0], model="unprepared")
        mt.vrows_tables(sel, selw, 16, 4321, [0, 0, 0], [0, 0, 0], model="unprepared")
    said = [r for r in caplog.records if "never prepared" in r.getMessage()]
    assert len(said) == 1 and "4321" in said[0].getMessage()
    mt.prepare_layer(4322, None, "cpu", model="unprepared")
    with caplog.at_level(logging.WARNING, logger="memra"):
        mt.vrows_tables(sel, selw, 16, 4322, [0, 0, 0], [0, 0, 0], model="unprepared")
    assert not [r for r in caplog.records if "4322" in r.getMessage()]


def test_no_unprepared_warning_for_a_layer_the_library_refuses(caplog):
    """A layer outside [0, MAX_LAYERS) is the call's error, not a layer to
    prepare: the warning telling the user to prepare it came first, and
    misled."""
    import logging
    x = torch.randn(5, 256)
    for layer in (-1, memra.MAX_LAYERS, 70000):
        with caplog.at_level(logging.WARNING, logger="memra"):
            with pytest.raises(memra.InvalidArgError, match="layer"):
                mt.route_tables(x, 8, layer, model="refused-layer")
        assert not [r for r in caplog.records if "never prepared" in r.getMessage()]


@pytest.mark.parametrize("layer", [-1, 65536, 70000])
def test_fused_layout_op_layer_is_judged_on_the_cpu_as_on_a_gpu(layer):
    """route_tables_layout on CPU tensors refuses a layer a GPU's call
    refuses (it passed on the CPU, op, function and fake alike)."""
    want = f"route_tables_layout: layer = {layer} is outside [0, 65536)"
    assert _refusals("route_tables_layout", lambda: (_z(4, 8), 2, layer, 16),
                     memra.InvalidArgError) == [want] * 3


def test_fused_layout_with_too_many_shared_experts_gets_the_routings_reason():
    """n_shared so large that the layout's expert count (n_expert + n_shared)
    no uint32 holds was refused as "num_experts = ... is outside", an argument
    the op does not have; it is the routing's refusal, as route_tables says."""
    def make():
        return (_z(4, 8), 2, 1, 16, [0, 0, 0], [0, 0, 0], "softmax", 1, 1, False, 1.0, None,
                None, None, 0, 2**32 - 1)
    got = _refusals("route_tables_layout", make, memra.InvalidArgError)
    assert got == ["route_tables_layout: n_shared = 4294967295: top_k + n_shared must be at "
                   "most 32"] * 3, got


def test_planes_of_another_count_are_not_judged_on_an_empty_call():
    """Planes prepared for another expert count are refused where they would
    be read; an empty call reads none, and the library takes it (it was
    refused by the op and its fake alike)."""
    mt.prepare_layer(31, torch.ones(3, 4), "cpu", n_expert=4, model="empty-planes")
    mt.route_prepare_layer(31, torch.ones(3, 4), "cpu", model="empty-planes")
    ptrs, _ = mt.vrows_tables(torch.zeros(0, dtype=torch.int32), torch.ones(0), 8, 31,
                              model="empty-planes")
    assert ptrs.numel() == 0
    assert mt.route_tables(_z(0, 8), 2, 31, model="empty-planes")[0].shape == (0, 2)
    assert mt.route_tables_layout(_z(0, 8), 2, 31, 16, model="empty-planes")[0].shape == (0, 2)
    with pytest.raises(memra.InvalidArgError, match="planes hold 4 experts, this call has 8"):
        mt.vrows_tables(torch.zeros(2, dtype=torch.int32), torch.ones(2), 8, 31,
                        model="empty-planes")
    for call in (lambda: mt.route_tables(_z(3, 8), 2, 31, model="empty-planes"),
                 lambda: mt.route_tables_layout(_z(3, 8), 2, 31, 16, model="empty-planes")):
        with pytest.raises(memra.InvalidArgError, match="planes hold 4 experts, this call has 8"):
            call()


def test_the_librarys_refusal_comes_before_the_planes_count():
    """A call the library refuses gets the library's reason, not the
    planes' count it makes wrong (n_local without an expert map made the
    count 8 against planes of 4, and that was said instead)."""
    mt.prepare_layer(32, torch.ones(3, 4), "cpu", n_expert=4, model="first-reason")
    mt.route_prepare_layer(32, torch.ones(3, 4), "cpu", model="first-reason")
    sel, selw = torch.zeros(2, dtype=torch.int32), torch.ones(2)
    got = _refusals("vrows_tables", lambda: (sel, selw, 8, 32, [0, 0, 0], [0, 0, 0], None, 4, 0,
                                             "first-reason"), memra.InvalidArgError)
    assert all("n_local = 4" in g and "expert_map" in g for g in got), got
    for name, args in (("route_tables", (_z(3, 8), 2, 32)),
                       ("route_tables_layout", (_z(3, 8), 2, 32, 16))):
        with pytest.raises(memra.InvalidArgError) as e:
            getattr(mt, name)(*args, n_local=4, model="first-reason")
        assert "n_local" in str(e.value) and "planes hold" not in str(e.value), str(e.value)


def test_unprepared_warning_asks_the_library_about_the_layer(caplog, monkeypatch):
    """Whether a layer is one to prepare is the library's to say, not a copy
    of its rule in Python: with Python's constant changed under it, the
    warning still follows the library (layer 20 taken, 65536 refused)."""
    import logging
    from memra import _lib
    monkeypatch.setattr(_lib, "MAX_LAYERS", 10)
    sel = torch.arange(8, dtype=torch.int32)
    with caplog.at_level(logging.WARNING, logger="memra"):
        mt.vrows_tables(sel, torch.ones(8), 16, 20, model="asks-the-library")
        mt.route_tables(torch.randn(5, 256), 8, 20, model="asks-the-library")
    said = [r.getMessage() for r in caplog.records if "never prepared" in r.getMessage()]
    assert len(said) == 2 and all("layer 20 " in m for m in said), said


def test_device_scratch_grows_by_doubling_and_is_never_freed(monkeypatch):
    """The scratch the choice-only calls have the tables written to, on a
    device: memory of the engine's own (memra_alloc), kept for the reuse of
    later calls, grown by doubling when a call needs more and never freed
    (a captured graph keeps writing where it wrote). A stand-in engine and
    allocator record what is asked."""
    from memra import _torch_ops

    class Eng:
        def _ptr(self):
            return 1

    asked = []

    def alloc(eng, size, ref):
        asked.append(size)
        ref._obj.value = 0x10000 * len(asked)
        return 0

    monkeypatch.setattr(_torch_ops, "engine_at", lambda dev, model: Eng())
    monkeypatch.setattr(memra.lib(), "memra_alloc", alloc)
    s = _torch_ops._Scratch()
    a = s.device(0, "", 36 * 8)
    assert s.device(0, "", 36 * 100) == a and asked == [1 << 16]  # fits: the same buffer
    b = s.device(0, "", (1 << 16) + 4)
    assert b != a and asked == [1 << 16, 1 << 17]  # doubled
    c = s.device(0, "", 1 << 20)
    assert asked[-1] == 1 << 20 and s._kept == [a, b, c]  # what a call needs; none freed
    assert s.device(1, "", 8) != c and len(asked) == 4  # per device (and model)


def test_slabs_are_cached_by_bases_and_strides_apart():
    """Two bases and four strides are not the cached three and three."""
    mt.route_prepare_layer(0, None, device="cpu")
    mt.route_tables(_z(2, 8), 2, 0, [1, 2, 3], [4, 5, 6])  # cached
    with pytest.raises(memra.InvalidArgError, match="bases must be three ints"):
        mt.route_tables(_z(2, 8), 2, 0, [1, 2], [3, 4, 5, 6])
