"""memra.torch.sglang on CPU tensors (the host arm), in CI: SGLang's call
sites run unchanged on memra's operators, against SGLang's own routing code
transcribed in sglang_reference.py (sgl-project/sglang
python/sglang/srt/layers/moe/topk.py at
06c48ca8da0b2c8aac15df74a768e6a012444064): DeepSeek-V3, GLM-4.5 and Kimi-K2
through biased_grouped_topk with num_fused_shared_experts 0 and 1,
apply_routed_scaling_factor_on_output both ways and padded batches
(num_token_non_padded int32 and int64); DeepSeek-V2 through grouped_topk,
Qwen3 and Mixtral through fused_topk, sgl-kernel's moe_fused_gate; the host
arm (memra.route_tables_host, SGLang's rule spelled in memra's spec) bit for
bit; refusals in SGLang's argument names, op and fake alike; opcheck and
torch.compile. The same on CUDA tensors: test_torch_gpu.py."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the memra.torch tests "
                            "need it (tools/test.sh installs it where it can)")

import memra  # noqa: E402
import memra.torch as mt  # noqa: E402
from memra.torch import sglang  # noqa: E402

from sglang_reference import (SGLANG_MODELS, assert_matches_sglang,  # noqa: E402
                              biased_grouped_topk_impl, fused_topk_torch_native,
                              grouped_topk_gpu, sglang_style_call_site)


def bits(t):
    return t.contiguous().view(torch.int32)


def logits_for(T, E, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(T, E, generator=g) * 2.0).to(dtype)


def bias_for(E, seed):
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randn(E, generator=g) * 0.05


def host_arm(logits, top_k, **spec):
    """memra.route_tables_host (NumPy) on the same call: (weights, ids)
    shaped [T, K]; a count tensor becomes an array of one."""
    for k in ("bias", "n_real"):
        if spec.get(k) is not None:
            spec[k] = spec[k].cpu().numpy()
    sel, selw, _, _, f = memra.route_tables_host(logits.cpu().numpy(), top_k, **spec)
    T = logits.shape[0]
    return (torch.from_numpy(selw).view(T, -1), torch.from_numpy(sel).view(T, -1), f)


def count_tensor(n, dtype):
    return None if dtype is None else torch.tensor(n, dtype=dtype)


@pytest.mark.parametrize("model", sorted(SGLANG_MODELS))
@pytest.mark.parametrize("S", [0, 1])
@pytest.mark.parametrize("apply", [False, True])
@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("padded", [None, torch.int32, torch.int64])
def test_biased_grouped_topk_call_site_against_sglang(model, S, apply, renormalize, padded):
    """SGLang's select_experts call of biased_grouped_topk, memra's imported:
    SGLang's shapes and dtypes, SGLang's choice and weights (shared expert
    included) and padding, and the host arm's bits."""
    E, K, n_group, topk_group, rsf = SGLANG_MODELS[model]
    T = 384
    logits = logits_for(T, E, 29 + S)
    bias = bias_for(E, 29)
    hidden = torch.zeros(T, 16)
    n_real = T - 37 if padded else None
    count = count_tensor(n_real, padded)
    got = sglang_style_call_site(sglang.biased_grouped_topk, hidden, logits, bias, K + S,
                                 renormalize, n_group, topk_group, S, rsf, count, apply)
    want = biased_grouped_topk_impl(hidden, logits, bias, K + S, renormalize, n_group,
                                    topk_group, S, rsf, count, None, apply)
    assert got[0].shape == (T, K + S) and got[1].dtype == torch.int32
    assert_matches_sglang(got, want, logits, bias, K, S, n_group, topk_group, "sigmoid",
                          "top2_sum", n_real, model)
    # SGLang's rule spelled in memra's spec, on the NumPy host arm: the same bits
    hw, hids, f = host_arm(logits, K, scoring="sigmoid", n_group=n_group,
                           topk_group=topk_group, renormalize=renormalize,
                           routed_scaling_factor=rsf if apply and renormalize else 1.0,
                           bias=bias, group_scoring="top2_sum", n_shared=S,
                           shared_divisor=rsf if S else None, n_real=count)
    assert torch.equal(hids, got[1]) and torch.equal(bits(hw), bits(got[0]))
    assert f.padded == (T - n_real) * (K + S) if padded else f.padded == 0


def test_shared_weight_is_the_routed_sum_over_the_factor_exactly():
    """Without renormalizing, SGLang's shared weight is the routed weights'
    sum divided by routed_scaling_factor: memra's, bit for bit, is the
    float32 sum of its routed weights in rank order over the factor (no
    constant could give it: it differs per token)."""
    E, K, n_group, topk_group, rsf = SGLANG_MODELS["deepseek-v3"]
    T = 200
    logits, bias = logits_for(T, E, 3), bias_for(E, 3)
    w, ids = sglang.biased_grouped_topk(torch.zeros(T, 1), logits, bias, K + 1, False, n_group,
                                        topk_group, 1, rsf)
    routed = w[:, :K].numpy()
    s = np.zeros(T, np.float32)
    for j in range(K):
        s = (s + routed[:, j]).astype(np.float32)
    want = (s / np.float32(rsf)).astype(np.float32)
    assert np.array_equal(w[:, K].numpy().view(np.uint32), want.view(np.uint32))
    assert len(set(want.tolist())) > T // 2  # per token, not a constant


@pytest.mark.parametrize("S", [0, 1])
@pytest.mark.parametrize("padded", [None, torch.int64])
def test_grouped_topk_deepseek_v2_against_sglang(S, padded):
    """SGLang's grouped_topk (DeepSeek-V2: softmax, no bias, groups by their
    best, routed_scaling_factor 16, renormalize off)."""
    E, K, n_group, topk_group, rsf = 160, 6, 8, 3, 16.0
    T = 300
    logits = logits_for(T, E, 11)
    hidden = torch.zeros(T, 4)
    n_real = 250 if padded else None
    count = count_tensor(n_real, padded)
    for renormalize, apply in ((False, False), (True, True)):
        got = sglang.grouped_topk(hidden, logits, K + S, renormalize, n_group, topk_group, S,
                                  rsf, count, None, apply)
        want = grouped_topk_gpu(hidden, logits, K + S, renormalize, n_group, topk_group, S, rsf,
                                count, None, apply)
        assert_matches_sglang(got, want, logits, None, K, S, n_group, topk_group, "softmax",
                              "max", n_real, f"deepseek-v2 renormalize={renormalize}")


@pytest.mark.parametrize("E,K", [(128, 8), (8, 2)])  # Qwen3-MoE, Mixtral
def test_fused_topk_against_sglang(E, K):
    T = 256
    logits = logits_for(T, E, E)
    hidden = torch.zeros(T, 4)
    count = torch.tensor(200, dtype=torch.int32)
    for renormalize in (True, False):
        got = sglang.fused_topk(hidden, logits, K, renormalize, count)
        want = fused_topk_torch_native(hidden, logits, K, renormalize, count)
        assert_matches_sglang(got, want, logits, None, K, 0, 1, 1, "softmax", None, 200,
                              f"fused_topk E={E}")


@pytest.mark.parametrize("S", [0, 1])
@pytest.mark.parametrize("apply", [False, True])
def test_moe_fused_gate_against_sglang(S, apply):
    """sgl-kernel's moe_fused_gate is biased_grouped_topk with renormalize
    on (sgl-kernel's own test holds it so)."""
    E, K, n_group, topk_group, rsf = SGLANG_MODELS["deepseek-v3"]
    T = 256
    logits, bias = logits_for(T, E, 5), bias_for(E, 5)
    got = sglang.moe_fused_gate(logits, bias, n_group, topk_group, K + S, S, rsf, apply)
    want = biased_grouped_topk_impl(logits, logits, bias, K + S, True, n_group, topk_group, S,
                                    rsf, None, None, apply)
    assert_matches_sglang(got, want, logits, bias, K, S, n_group, topk_group, "sigmoid",
                          "top2_sum", None, "moe_fused_gate")
    # the same call through biased_grouped_topk: the same bits
    b = sglang.biased_grouped_topk(logits, logits, bias, K + S, True, n_group, topk_group, S,
                                   rsf, None, None, apply)
    assert torch.equal(b[1], got[1]) and torch.equal(bits(b[0]), bits(got[0]))


def test_zero_tokens_and_all_padding():
    E, K, n_group, topk_group, rsf = SGLANG_MODELS["deepseek-v3"]
    bias = bias_for(E, 1)
    w, ids = sglang.biased_grouped_topk(torch.zeros(0, 4), torch.zeros(0, E), bias, K + 1, True,
                                        n_group, topk_group, 1, rsf)
    assert w.shape == (0, K + 1) and ids.shape == (0, K + 1)
    x = logits_for(5, E, 1)
    for n in (0, -3):  # a negative count is 0: every row is padding
        w, ids = sglang.biased_grouped_topk(torch.zeros(5, 4), x, bias, K + 1, True, n_group,
                                            topk_group, 1, rsf, torch.tensor(n))
        assert (ids == -1).all() and (bits(w) == 0).all()
    w, ids = sglang.biased_grouped_topk(torch.zeros(5, 4), x, bias, K + 1, True, n_group,
                                        topk_group, 1, rsf, torch.tensor(99))
    assert (ids >= 0).all()  # above the batch: every row is real


def test_padding_is_read_in_place():
    """The count is read in place on every call (as a CUDA graph replays
    it): change the tensor, not the call."""
    E, K, n_group, topk_group, rsf = SGLANG_MODELS["deepseek-v3"]
    x, bias = logits_for(8, E, 2), bias_for(E, 2)
    count = torch.tensor(8, dtype=torch.int32)
    for n in (8, 3, 0, 5):
        count.fill_(n)
        _, ids = sglang.biased_grouped_topk(torch.zeros(8, 1), x, bias, K, True, n_group,
                                            topk_group, 0, rsf, count)
        assert (ids[n:] == -1).all() and (ids[:n] >= 0).all(), n


def _fake_refusal(op, args):
    from torch._subclasses.fake_tensor import FakeTensorMode
    mode = FakeTensorMode()
    with mode:
        fake_args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        with pytest.raises(Exception) as e:
            op(*fake_args)
    err = e.value
    while not isinstance(err, memra.Error) and err.__cause__ is not None:
        err = err.__cause__
    return err


E3 = SGLANG_MODELS["deepseek-v3"][0]
SGL_BAD = [
    # (op, function, args, message)
    ("sglang_biased_grouped_topk", "biased_grouped_topk",
     lambda: (torch.zeros(4, 2), torch.zeros(4, E3), bias_for(E3, 0), 9, True, 8, 4, 1, 0.0),
     "biased_grouped_topk: routed_scaling_factor (bits 0x00000000) must be finite and > 0 "
     "with num_fused_shared_experts > 0"),
    ("sglang_biased_grouped_topk", "biased_grouped_topk",
     lambda: (torch.zeros(4, 2), torch.zeros(4, E3), bias_for(E3, 0), 9, True, 8, 9, 1, 2.5),
     "biased_grouped_topk: topk_group = 9 is outside [1, 8]"),
    ("sglang_biased_grouped_topk", "biased_grouped_topk",
     lambda: (torch.zeros(4, 2), torch.zeros(4, E3), bias_for(E3, 0), 1, True, 8, 4, 1, 2.5),
     "biased_grouped_topk: topk - num_fused_shared_experts = 0 must be in [1, 32]"),
    ("sglang_biased_grouped_topk", "biased_grouped_topk",
     lambda: (torch.zeros(4, 2), torch.zeros(4, E3), bias_for(E3, 0), 9, True, 8, 4, 1, 2.5,
              torch.tensor([3, 4])),
     "biased_grouped_topk: num_token_non_padded holds 2 elements, want one"),
    ("sglang_biased_grouped_topk", "biased_grouped_topk",
     lambda: (torch.zeros(4, 2), torch.zeros(4, E3), bias_for(E3, 0), 9, True, 8, 4, 1, 2.5,
              torch.tensor(3.0)),
     "biased_grouped_topk: num_token_non_padded is torch.float32, want torch.int32 or "
     "torch.int64"),
    ("sglang_biased_grouped_topk", "biased_grouped_topk",
     lambda: (torch.zeros(4, 2), torch.zeros(4, E3), bias_for(E3 - 1, 0), 9, True, 8, 4),
     "biased_grouped_topk: correction_bias has shape (255,), want (256,)"),
    ("sglang_grouped_topk", "grouped_topk",
     lambda: (torch.zeros(4, 2), torch.zeros(4, 160), 6, True, 7, 3),
     "sglang.grouped_topk: num_expert_group = 7 must be in [1, 32] and divide "
     "gating_output.shape[1] = 160"),
    ("sglang_fused_topk", "fused_topk",
     lambda: (torch.zeros(3, 2), torch.zeros(4, 8), 2, True),
     "sglang.fused_topk: Number of tokens mismatch"),
    ("moe_fused_gate", "moe_fused_gate",
     lambda: (torch.zeros(4, E3), bias_for(E3, 0), 8, 4, 9, 1),
     "moe_fused_gate: routed_scaling_factor (bits 0x00000000) must be finite and > 0 with "
     "num_fused_shared_experts > 0"),
    ("moe_fused_gate", "moe_fused_gate",
     lambda: (torch.zeros(4, E3), bias_for(E3, 0), 8, 4, 8, 0, 0.0, True),
     "moe_fused_gate: routed_scaling_factor (bits 0x00000000) must be finite and > 0"),
    ("moe_fused_gate", "moe_fused_gate",
     lambda: (torch.zeros(4, E3, dtype=torch.float64), bias_for(E3, 0), 8, 4, 8),
     "moe_fused_gate: input_tensor is torch.float64"),
]


@pytest.mark.parametrize("op,fn,make,message", SGL_BAD, ids=[c[3][:40] for c in SGL_BAD])
def test_refusals_in_sglang_words_op_and_fake_alike(op, fn, make, message):
    """A bad call is refused by the library in SGLang's argument names, by
    the operator, the function and the fake alike."""
    o = getattr(torch.ops.memra, op).default
    got = []
    for call in (o, getattr(sglang, fn)):
        with pytest.raises(memra.Error) as e:
            call(*make())
        got.append(str(e.value))
    got.append(str(_fake_refusal(o, make())))
    assert got[0] == got[1] == got[2], got
    assert got[0].startswith(message), got[0]


@pytest.mark.parametrize("call,message", [
    (lambda: sglang.biased_grouped_topk(torch.zeros(4, 1), torch.zeros(4, E3), bias_for(E3, 0),
                                        8, True),
     "biased_grouped_topk: num_expert_group must be an integer, not NoneType"),
    (lambda: sglang.biased_grouped_topk(torch.zeros(4, 1), torch.zeros(4, E3), None, 8, True,
                                        8, 4),
     "biased_grouped_topk: correction_bias is None"),
    (lambda: sglang.biased_grouped_topk(torch.zeros(4, 1), torch.zeros(4, E3), bias_for(E3, 0),
                                        8, True, 8, 4, expert_location_dispatch_info=object()),
     "biased_grouped_topk: expert_location_dispatch_info must be None"),
    (lambda: sglang.biased_grouped_topk(torch.zeros(4, 1), torch.zeros(4, E3), bias_for(E3, 0),
                                        8, "yes", 8, 4),
     "biased_grouped_topk: renormalize must be True or False, not 'yes'"),
    (lambda: sglang.moe_fused_gate(torch.zeros(4, E3), bias_for(E3, 0), 8, 4, 2, 3, 2.5),
     "moe_fused_gate: topk - num_fused_shared_experts = -1 is outside [0, 4294967296)"),
])
def test_wrong_types_in_sglang_words(call, message):
    with pytest.raises(memra.InvalidArgError) as e:
        call()
    assert str(e.value).startswith(message), str(e.value)


@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_fused_topk_takes_sglang_mains_signature(scoring, with_bias):
    """SGLang main's select_experts calls fused_topk(..., correction_bias=,
    scoring_func=) (it raised TypeError: memra took only 06c48ca8's
    signature): softmax or sigmoid, a bias choosing and the unbiased scores
    weighing (topk_sigmoid's rule), bit for bit the host arm's answer to the
    same spec; the old positional order (a count fifth) still works."""
    T, E, K = 64, 128, 8
    x, b = logits_for(T, E, 11), bias_for(E, 11) if with_bias else None
    h = torch.zeros(T, 4)
    w, ids = sglang.fused_topk(hidden_states=h, gating_output=x, topk=K, renormalize=True,
                               correction_bias=b, scoring_func=scoring)
    want_w, want_ids, _ = host_arm(x, K, scoring=scoring, renormalize=True, bias=b)
    assert torch.equal(ids, want_ids) and torch.equal(bits(w), bits(want_w))
    w2, ids2 = sglang.fused_topk(h, x, K, True, b, scoring)  # positionally
    assert torch.equal(ids2, ids) and torch.equal(bits(w2), bits(w))
    count = torch.tensor(40, dtype=torch.int32)
    w3, ids3 = sglang.fused_topk(h, x, K, True, count, None)  # 06c48ca8's order
    w4, ids4 = sglang.fused_topk(h, x, K, True)
    assert torch.equal(ids3[:40], ids4[:40]) and bool((ids3[40:] == -1).all())
    with pytest.raises(memra.InvalidArgError, match="scoring_func"):
        sglang.fused_topk(h, x, K, True, None, "tanh")
    # 06c48ca8's order with nothing padded: (None, None) is no count, no
    # dispatch info (a None sixth argument was once read as a scoring name)
    w5, ids5 = sglang.fused_topk(h, x, K, True, None, None)
    assert torch.equal(ids5, ids4) and torch.equal(bits(w5), bits(w4))
    with pytest.raises(memra.InvalidArgError, match="expert_location_dispatch_info"):
        sglang.fused_topk(h, x, K, True, None, object())


@pytest.mark.parametrize("fn", ["biased_grouped_topk", "grouped_topk"])
def test_grouped_functions_take_sglang_mains_positional_order(fn):
    """SGLang main dropped num_token_non_padded and
    expert_location_dispatch_info: its tenth positional argument is
    apply_routed_scaling_factor_on_output (a bool there was refused as a
    count)."""
    E, K, n_group, topk_group, rsf = SGLANG_MODELS["deepseek-v3"]
    h, x, b = torch.zeros(7, 4), logits_for(7, E, 12), bias_for(E, 12)
    head = (h, x, b) if fn == "biased_grouped_topk" else (h, x)
    f = getattr(sglang, fn)
    main = f(*head, K + 1, True, n_group, topk_group, 1, rsf, True)
    pinned = f(*head, K + 1, True, n_group, topk_group, 1, rsf, None, None, True)
    plain = f(*head, K + 1, True, n_group, topk_group, 1, rsf)
    assert torch.equal(main[1], pinned[1]) and torch.equal(bits(main[0]), bits(pinned[0]))
    assert not torch.equal(bits(main[0]), bits(plain[0]))  # the flag was taken
    numpy_flag = f(*head, K + 1, True, n_group, topk_group, 1, rsf, np.True_)
    assert torch.equal(bits(numpy_flag[0]), bits(main[0]))
    with pytest.raises(memra.InvalidArgError, match="given twice"):
        f(*head, K + 1, True, n_group, topk_group, 1, rsf, False,
          apply_routed_scaling_factor_on_output=True)


def test_opcheck_sglang_ops():
    E, K, n_group, topk_group, rsf = SGLANG_MODELS["deepseek-v3"]
    T = 9
    h, x, bias = torch.zeros(T, 4), logits_for(T, E, 4), bias_for(E, 4)
    O = torch.ops.memra
    for op, args in [
        (O.sglang_biased_grouped_topk, (h, x, bias, K + 1, True, n_group, topk_group, 1, rsf,
                                        torch.tensor(7, dtype=torch.int32), True)),
        (O.sglang_biased_grouped_topk, (h, x.bfloat16(), bias.bfloat16(), K, False, n_group,
                                        topk_group)),
        (O.sglang_grouped_topk, (h, x, 6, True, 8, 3, 1, 16.0, torch.tensor(5))),
        (O.sglang_fused_topk, (h, x[:, :64], 6, True, torch.tensor(5))),
        (O.sglang_fused_topk, (h, x[:, :64], 6, True, None, bias[:64], "sigmoid")),
        (O.moe_fused_gate, (x, bias, n_group, topk_group, K + 1, 1, rsf, True)),
        (O.moe_fused_gate, (x[:0], bias, n_group, topk_group, K)),
    ]:
        torch.library.opcheck(op.default, args)


def test_compiled_fullgraph_with_padding_equals_eager():
    """torch.compile(fullgraph=True, dynamic=True) over SGLang's call site
    with a padded batch: the same bits as eager, token counts varying."""
    E, K, n_group, topk_group, rsf = SGLANG_MODELS["deepseek-v3"]
    bias = bias_for(E, 6)

    def step(hidden, logits, count):
        w, ids = sglang_style_call_site(sglang.biased_grouped_topk, hidden, logits, bias, K + 1,
                                        True, n_group, topk_group, 1, rsf, count, True)
        g = sglang.moe_fused_gate(logits, bias, n_group, topk_group, K, 0, rsf, True)
        return w * 1.0, ids, g[0], g[1]

    from memra import _torch_ops
    _torch_ops._configs.clear()  # first seen under compile: built by the fake, not traced
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager", dynamic=True)
    for T in (2, 7, 64):
        logits = logits_for(T, E, T)
        count = torch.tensor(T - 1, dtype=torch.int64)
        got, want = compiled(torch.zeros(T, 4), logits, count), step(torch.zeros(T, 4), logits,
                                                                    count)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert torch.equal(g.view(torch.int32) if g.dtype == torch.float32 else g,
                               w.view(torch.int32) if w.dtype == torch.float32 else w)
        assert (got[1][T - 1:] == -1).all()


def test_route_tables_takes_sglangs_rule_and_padding():
    """memra's own route_tables with SGLang's shared rule (shared_divisor)
    and a padded batch: the tables of padding rows are NULL and +0, counted
    in faults('cpu').padded; the choice is biased_grouped_topk's."""
    E, K, n_group, topk_group, rsf = SGLANG_MODELS["deepseek-v3"]
    T = 12
    x, bias = logits_for(T, E, 8), bias_for(E, 8)
    count = torch.tensor(9, dtype=torch.int32)
    mt.route_prepare_layer(7, None, device="cpu", model="sgl")
    mt.faults("cpu", reset=True)
    ids, w, ptrs, scl = mt.route_tables(
        x, K, 7, [1 << 40] * 3, [1 << 20] * 3, scoring="sigmoid", n_group=n_group,
        topk_group=topk_group, renormalize=True, routed_scaling_factor=rsf, bias=bias,
        n_shared=1, shared_weight=0.0, shared_divisor=rsf, n_real=count, model="sgl")
    f = mt.faults("cpu", reset=True)
    assert f.padded == 3 * (K + 1) and f.nonfinite == 0 and f.first_pair == memra.NO_FAULT
    assert (ids[9:] == -1).all() and (ptrs[:, 9:] == 0).all() and (bits(scl[:, 9:]) == 0).all()
    gw, gids = sglang.biased_grouped_topk(torch.zeros(T, 1), x, bias, K + 1, True, n_group,
                                          topk_group, 1, rsf, count, None, True)
    assert torch.equal(gids, ids) and torch.equal(bits(gw), bits(w))


def test_float16_bias_beside_float16_logits():
    """sgl-kernel's moe_fused_gate takes a float16 bias beside float16
    logits: taken (as its float32 copy, the same values), by
    biased_grouped_topk too; the bits of the float32 bias's call."""
    E, K, n_group, topk_group, rsf = SGLANG_MODELS["deepseek-v3"]
    T = 64
    x, bias = logits_for(T, E, 9, torch.float16), bias_for(E, 9).half()
    got = sglang.moe_fused_gate(x, bias, n_group, topk_group, K, 0, rsf)
    want = sglang.moe_fused_gate(x, bias.float(), n_group, topk_group, K, 0, rsf)
    assert torch.equal(got[1], want[1]) and torch.equal(bits(got[0]), bits(want[0]))
    got = sglang.biased_grouped_topk(x, x, bias, K, True, n_group, topk_group)
    want = sglang.biased_grouped_topk(x, x, bias.float(), K, True, n_group, topk_group)
    assert torch.equal(got[1], want[1]) and torch.equal(bits(got[0]), bits(want[0]))


def test_a_call_is_judged_alike_whatever_came_before():
    """8.0 == 8 and True == 1 in Python: a configuration cached for topk=8
    answered for topk=8.0, which alone is refused; so whether a call was
    accepted depended on the calls before it."""
    E, K, n_group, topk_group, rsf = SGLANG_MODELS["deepseek-v3"]
    x, bias = logits_for(4, E, 10), bias_for(E, 10)
    h = torch.empty(4, 1)
    for good, bad in [(K, float(K)), (1, True)]:
        mt.grouped_topk(h, x, good, True, n_group, topk_group, "sigmoid", rsf, bias)
        with pytest.raises(memra.InvalidArgError, match="topk must be an integer"):
            mt.grouped_topk(h, x, bad, True, n_group, topk_group, "sigmoid", rsf, bias)
    sglang.biased_grouped_topk(h, x, bias, K + 1, True, n_group, topk_group, 1, rsf)
    with pytest.raises(memra.InvalidArgError, match="num_fused_shared_experts must be an integer"):
        sglang.biased_grouped_topk(h, x, bias, K + 1, True, n_group, topk_group, 1.0, rsf)


def test_route_tables_takes_shared_divisor_alone():
    """route_tables with shared_divisor and shared_weight left unset takes
    SGLang's rule, as memra.route_spec does (it once defaulted shared_weight
    to 1.0 and refused the call, which the host arm accepts)."""
    E, K, n_group, topk_group, rsf = SGLANG_MODELS["deepseek-v3"]
    T = 8
    x, bias = logits_for(T, E, 11), bias_for(E, 11)
    mt.route_prepare_layer(9, None, device="cpu", model="sgl-div")
    ids, w, _, _ = mt.route_tables(
        x, K, 9, scoring="sigmoid", n_group=n_group, topk_group=topk_group, renormalize=True,
        routed_scaling_factor=rsf, bias=bias, n_shared=1, shared_divisor=rsf, model="sgl-div")
    hw, hids, _ = host_arm(x, K, scoring="sigmoid", n_group=n_group, topk_group=topk_group,
                           renormalize=True, routed_scaling_factor=rsf, bias=bias, n_shared=1,
                           shared_divisor=rsf)
    assert torch.equal(ids, hids) and torch.equal(bits(w), bits(hw))
    with pytest.raises(memra.InvalidArgError, match="shared_weight"):  # a constant as well
        mt.route_tables(x, K, 9, scoring="sigmoid", n_group=n_group, topk_group=topk_group,
                        bias=bias, n_shared=1, shared_weight=1.0, shared_divisor=rsf,
                        model="sgl-div")


def test_minus_inf_masks_an_expert_as_in_sglang():
    """An engine masks experts with -inf logits: scored 0 and routed as
    SGLang's own code routes them (a new user's report: memra once left
    such a token unrouted, experts 0..k-1 with weight 0)."""
    E, K, n_group, topk_group, rsf = SGLANG_MODELS["deepseek-v3"]
    T = 16
    x, bias = logits_for(T, E, 12), bias_for(E, 12)
    x[:, 200:] = float("-inf")
    x[3, :100] = float("-inf")
    mt.faults("cpu", reset=True)
    for S in (0, 1):
        got = sglang.biased_grouped_topk(x, x, bias, K + S, True, n_group, topk_group, S, rsf)
        want = biased_grouped_topk_impl(x, x, bias, K + S, True, n_group, topk_group, S, rsf,
                                        None, None, False)
        assert_matches_sglang(got, want, x, bias, K, S, n_group, topk_group, "sigmoid",
                              "top2_sum", None, "biased_grouped_topk")
    assert mt.faults("cpu", reset=True).nonfinite == 0
    # softmax (fused_topk): a masked expert is never chosen over a live one
    y = logits_for(T, 64, 13)
    y[:, ::2] = float("-inf")
    w, ids = sglang.fused_topk(y, y, 4, True)
    assert bool((ids % 2 == 1).all()) and bool((w > 0).all())



def test_refusals_name_no_library_enum():
    """A refusal of SGLang's shared rule is said in SGLang's words, not the
    library's enum (it said "with MEMRA_SHARED_ROUTED_SUM")."""
    E, K, n_group, topk_group, rsf = SGLANG_MODELS["deepseek-v3"]
    x, bias = logits_for(4, E, 14), bias_for(E, 14)
    with pytest.raises(memra.InvalidArgError) as e:
        sglang.moe_fused_gate(x, bias, n_group, topk_group, K + 1, 1)  # sgl-kernel's rsf 0
    assert "num_fused_shared_experts > 0" in str(e.value) and "MEMRA_" not in str(e.value)
    with pytest.raises(memra.InvalidArgError) as e:
        mt.route_tables(x, K, 0, n_shared=1, shared_weight=1.0, shared_divisor=rsf)
    assert "shared_divisor given" in str(e.value) and "MEMRA_" not in str(e.value)
