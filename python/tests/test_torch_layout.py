"""The expert-sorted layout in memra.torch, on CPU tensors (the host arm):
vLLM's moe_align_block_size against vLLM's golden definition
(layout_reference.py: the same runs and labels, each expert's pairs the
same set, and memra's own order, ascending, exactly), expert maps (vLLM's
default), sizes, a reference grouped matmul fed memra's layout and vLLM's
(shuffled as its atomics may leave it) giving the same result, the same
bytes call after call, sgl-kernel's out-parameter call as SGLang makes it,
routing fused with its layout, refusals alike from the op, the function and
the fake, opcheck and torch.compile. The CUDA twins are in
test_torch_gpu.py."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the memra.torch tests "
                            "need it (tools/test.sh installs it where it can)")

import memra  # noqa: E402
import memra.torch as mt  # noqa: E402
from memra.torch import sglang  # noqa: E402

from layout_reference import (expert_sets, grouped_matmul, sglang_style_align,  # noqa: E402
                              shuffled_in_runs, vllm_golden)


def topk_ids_for(m, topk, num_experts, seed):
    """vLLM's test inputs: each token's topk distinct experts."""
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(num_experts, generator=g)[:topk]
                        for _ in range(m)]).to(torch.int32)


def assert_vllm_layout(got, want, block_size, n_pairs, exact):
    """vLLM's test's criteria (num_tokens_post_pad and the used blocks'
    experts equal, each expert's pairs the same set), the blocks past the
    runs -1 (vLLM's golden: 0 there, which no GEMM reads), and with exact
    the same bytes as the golden's stable sort (memra's order)."""
    sorted_ids, expert_ids, post = (t.cpu() for t in got)
    w_sorted, w_eids, w_post = want
    assert sorted_ids.dtype == expert_ids.dtype == post.dtype == torch.int32
    assert sorted_ids.shape == w_sorted.shape and expert_ids.shape == w_eids.shape
    assert post.shape == (1,) and torch.equal(post, w_post)
    used = int(post) // block_size
    assert torch.equal(expert_ids[:used], w_eids[:used])
    assert (expert_ids[used:] == -1).all()
    assert expert_sets(sorted_ids, expert_ids, block_size, int(post), n_pairs) == \
        expert_sets(w_sorted, w_eids, block_size, int(post), n_pairs)
    if exact:
        assert torch.equal(sorted_ids, w_sorted)


def test_vllm_docstring_example():
    """vLLM's docstring: [[2, 3, 4], [1, 2, 4], [1, 3, 4], [1, 2, 3]], block 4."""
    ids = torch.tensor([[2, 3, 4], [1, 2, 4], [1, 3, 4], [1, 2, 3]], dtype=torch.int32)
    sorted_ids, expert_ids, post = mt.moe_align_block_size(ids, 4, 5)
    assert sorted_ids[:16].tolist() == [3, 6, 9, 12, 0, 4, 10, 12, 1, 7, 11, 12, 2, 5, 8, 12]
    assert (sorted_ids[16:] == 12).all() and sorted_ids.shape == (12 + 5 * 3,)
    assert expert_ids.tolist() == [1, 2, 3, 4, -1, -1, -1] and post.tolist() == [16]


@pytest.mark.parametrize("m,topk,num_experts,block_size,pad", [
    (1, 1, 32, 32, False), (3, 2, 160, 32, True), (256, 16, 32, 128, False),
    (256, 2, 257, 32, True), (2256, 8, 160, 128, False), (4096, 2, 32, 32, True),
    (3, 32, 256, 128, False), (17, 8, 256, 16, True),
])
def test_against_vllms_golden(m, topk, num_experts, block_size, pad):
    """vLLM's test_moe_align_block_size's inputs and criteria, and memra's
    own order exactly (the golden's stable sort is memra's order)."""
    ids = topk_ids_for(m, topk, num_experts, m * 7 + topk)
    got = mt.moe_align_block_size(ids, block_size, num_experts, pad_sorted_ids=pad)
    want = vllm_golden(ids, block_size, num_experts, pad_sorted_ids=pad)
    assert_vllm_layout(got, want, block_size, ids.numel(), exact=True)
    assert int(got[2]) % block_size == 0 and int(got[2]) >= ids.numel()
    assert (got[0] < ids.numel()).sum() == ids.numel()


@pytest.mark.parametrize("m,topk,num_experts", [(16, 2, 8), (32, 4, 8), (2048, 4, 64)])
def test_expert_map_is_vllms_default(m, topk, num_experts):
    """vLLM's EP case (even experts local, the odd ones another rank's):
    every expert laid out, each block labelled through the map (-1 for
    another rank's), as vLLM's moe_align_block_size does by default
    (ignore_invalid_experts=False)."""
    ids = topk_ids_for(m, topk, num_experts, m + topk)
    emap = torch.full((num_experts,), -1, dtype=torch.int32)
    emap[0::2] = torch.arange(num_experts // 2, dtype=torch.int32)
    got = mt.moe_align_block_size(ids, 64, num_experts, emap)
    assert_vllm_layout(got, vllm_golden(ids, 64, num_experts, emap), 64, ids.numel(), True)
    assert (got[1] == -1).any()
    assert torch.equal(got[0], mt.moe_align_block_size(ids, 64, num_experts, emap,
                                                       ignore_invalid_experts=False)[0])


@pytest.mark.parametrize("m,topk,num_experts,pad", [(16, 2, 8, False), (32, 4, 8, True),
                                                    (2048, 4, 64, False), (3, 2, 64, True)])
def test_ignore_invalid_experts_is_vllms_golden(m, topk, num_experts, pad):
    """ignore_invalid_experts=True: the other ranks' runs left out, each
    block labelled with its local id: vLLM's golden with the non-local runs
    dropped, byte for byte, at the same sizes."""
    ids = topk_ids_for(m, topk, num_experts, m + topk)
    emap = torch.full((num_experts,), -1, dtype=torch.int32)
    emap[0::2] = torch.arange(num_experts // 2, dtype=torch.int32)
    got = mt.moe_align_block_size(ids, 16, num_experts, emap, pad, ignore_invalid_experts=True)
    want = vllm_golden(ids, 16, num_experts, emap, pad, drop_non_local=True)
    assert_vllm_layout(got, want, 16, ids.numel(), True)
    used = int(got[2]) // 16
    assert not (got[1][:used] == -1).any()
    kept = int((emap[ids.long()] >= 0).sum())
    assert int((got[0] < ids.numel()).sum()) == kept
    assert int(got[2]) < int(mt.moe_align_block_size(ids, 16, num_experts, emap)[2])


def test_ignore_invalid_experts_runs_in_local_order():
    """vLLM's kernel counts a pair under its local id: with a map that
    reverses the experts, the runs go in local-id order (not the global
    one), the ids outside the experts and the other ranks' in no run."""
    ids = torch.tensor([[0, 5], [7, 1], [6, -1], [2, 9], [1, 0]], dtype=torch.int32)
    emap = torch.tensor([3, 2, 1, 0, -1, -1, -1, -1], dtype=torch.int32)
    sorted_ids, expert_ids, post = mt.moe_align_block_size(ids, 2, 8, emap,
                                                           ignore_invalid_experts=True)
    # local 0: none; 1: pair 6 (expert 2); 2: pairs 3, 8 (expert 1); 3: pairs 0, 9 (expert 0)
    assert post.tolist() == [6]
    assert sorted_ids[:6].tolist() == [6, 10, 3, 8, 0, 9]
    assert expert_ids[:3].tolist() == [1, 2, 3] and (expert_ids[3:] == -1).all()
    assert sorted_ids.shape == (10 + 8,) and (sorted_ids[6:] == 10).all()
    with pytest.raises(memra.InvalidArgError, match="ignore_invalid_experts must be True or False"):
        mt.moe_align_block_size(ids, 2, 8, emap, ignore_invalid_experts="no")
    with pytest.raises(memra.InvalidArgError, match="expert_map has shape"):
        mt.moe_align_block_size(ids, 2, 8, emap[:4], ignore_invalid_experts=True)
    # Without a map the option changes nothing (vLLM passes no map then).
    assert torch.equal(mt.moe_align_block_size(ids, 2, 8, ignore_invalid_experts=True)[0],
                       mt.moe_align_block_size(ids, 2, 8)[0])


def test_ids_outside_the_experts_are_in_no_run():
    """A padding row's -1 (and any id past num_experts) belongs to no
    expert: it is in no run and is not counted, as in vLLM's golden."""
    ids = torch.tensor([[0, 3], [-1, -1], [3, 9], [2, 0]], dtype=torch.int32)
    got = mt.moe_align_block_size(ids, 2, 4)
    assert_vllm_layout(got, vllm_golden(ids, 2, 4), 2, 8, exact=True)
    assert got[2].tolist() == [6] and got[1][:3].tolist() == [0, 2, 3]


def test_int64_ids_are_laid_out_as_int32():
    """vLLM's fused_topk(indices_type=torch.int64) feeds its align kernel
    int64 ids, and so may memra's own: taken, the same layout as int32; an
    id past int32's range (either sign) is in no run, as any id outside
    [0, num_experts)."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 16, (37, 4), generator=g, dtype=torch.int32)
    want = mt.moe_align_block_size(ids, 8, 16)
    got = mt.moe_align_block_size(ids.long(), 8, 16)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    far = ids.long()
    far[0, 0], far[1, 1], far[2, 2] = 1 << 40, -(1 << 40), (1 << 32) + 3
    near = ids.clone()
    near[0, 0], near[1, 1], near[2, 2] = -1, -1, -1
    got = mt.moe_align_block_size(far, 8, 16)
    want = mt.moe_align_block_size(near, 8, 16)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    _, fids, _ = mt.fused_topk(torch.empty(37, 1), torch.randn(37, 16, generator=g), 4, True,
                               indices_type=torch.int64)
    got = mt.moe_align_block_size(fids, 8, 16)
    want = mt.moe_align_block_size(fids.int(), 8, 16)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_sizes_formula_is_the_librarys():
    """The fakes' sizes for a symbolic pair count (_symbolic_sizes, the one
    size rule written in Python) against memra_layout_sizes."""
    import ctypes

    from memra import _lib, _torch_layout
    L = memra.lib()
    for n in (0, 1, 2, 5, 31, 32, 33, 100, 1000, 16385):
        for E in (1, 8, 33, 257, 1056):
            for bs in (1, 2, 16, 64, 128):
                for pad in (0, 1):
                    s = _lib.LayoutSpec(E, bs, pad, 0, 0)
                    length, blocks = ctypes.c_uint64(), ctypes.c_uint64()
                    assert L.memra_layout_sizes(n, ctypes.byref(s), ctypes.byref(length),
                                                ctypes.byref(blocks)) == 0
                    assert _torch_layout._symbolic_sizes(n, E, bs, pad) == \
                        (length.value, blocks.value), (n, E, bs, pad)


def test_the_same_bytes_every_call():
    """Deterministic: 100 calls, the same bytes (vLLM's own test asks 5)."""
    g = torch.Generator().manual_seed(42)
    ids = torch.randint(0, 32, (128, 2), generator=g, dtype=torch.int32)
    first = mt.moe_align_block_size(ids, 64, 32)
    for _ in range(100):
        again = mt.moe_align_block_size(ids, 64, 32)
        assert all(torch.equal(a, b) for a, b in zip(first, again))


@pytest.mark.parametrize("T,K,E,block_size", [(64, 4, 16, 16), (5, 8, 64, 16), (300, 2, 8, 64)])
def test_grouped_matmul_reads_memras_layout_as_vllms(T, K, E, block_size):
    """Issue #31's test: a reference grouped GEMM (a PyTorch loop over the
    blocks, as the fused MoE kernel reads them) fed memra's layout gives
    the same result as fed vLLM's (its golden, then each run shuffled as
    vLLM's atomics may leave it), and both the dense per-token result.
    Values are small integers and the weights powers of two, so every
    order of the arithmetic gives the same bits."""
    g = torch.Generator().manual_seed(T + K + E)
    D, N = 32, 24
    x = torch.randint(-4, 5, (T, D), generator=g).float()
    w = torch.randint(-4, 5, (E, N, D), generator=g).float()
    ids = topk_ids_for(T, K, E, T * K)
    weights = 2.0 ** torch.randint(-3, 3, (T, K), generator=g).float()

    def moe(layout):
        out = grouped_matmul(x, w, K, layout[0], layout[1], int(layout[2]), block_size)
        return (out.view(T, K, N) * weights[..., None]).sum(1)

    memra_layout = mt.moe_align_block_size(ids, block_size, E)
    golden = vllm_golden(ids, block_size, E)
    vllm_kernel = (shuffled_in_runs(golden[0], golden[1], int(golden[2]), block_size, T * K, 5),
                   golden[1], golden[2])
    assert not torch.equal(vllm_kernel[0], memra_layout[0]) or T * K <= E
    dense = torch.stack([sum(weights[t, k] * (x[t] @ w[ids[t, k]].T) for k in range(K))
                         for t in range(T)])
    got = moe(memra_layout)
    assert torch.equal(got, moe(vllm_kernel))
    assert torch.equal(got, moe(golden))
    assert torch.equal(got, dense)


def test_zero_pairs_give_the_empty_layout():
    ids = torch.empty(0, 8, dtype=torch.int32)
    sorted_ids, expert_ids, post = mt.moe_align_block_size(ids, 16, 64)
    assert sorted_ids.shape == (0,) and expert_ids.shape == (0,) and post.tolist() == [0]


# ---- sgl-kernel's shape -------------------------------------------------------

@pytest.mark.parametrize("m,topk,num_experts,block_size", [
    (1, 8, 256, 64), (64, 8, 256, 16), (700, 8, 256, 64), (33, 2, 8, 4)])
def test_sglang_call_site(m, topk, num_experts, block_size):
    """SGLang's fused MoE calling memra.torch.sglang.moe_align_block_size as
    it calls sgl-kernel's (num_experts + 1 ids, its buffer sizes, the fill
    fused or not): each run and label as vLLM's golden, in memra's order,
    the buffers' tails the sentinel, cumsum_buffer each run's start."""
    ids = topk_ids_for(m, topk, num_experts, m)
    sorted_ids, expert_ids, post, cumsum = sglang_style_align(
        sglang.moe_align_block_size, ids, block_size, num_experts)
    n = ids.numel()
    want = vllm_golden(ids, block_size, num_experts + 1)
    used = int(post) // block_size
    assert torch.equal(post, want[2]) and torch.equal(expert_ids[:used], want[1][:used])
    assert torch.equal(sorted_ids[:want[0].numel()], want[0])
    assert (sorted_ids[want[0].numel():] == n).all()
    counts = torch.bincount(ids.view(-1).long(), minlength=num_experts + 1)
    padded = (counts + block_size - 1) // block_size * block_size
    assert cumsum.tolist() == [0] + torch.cumsum(padded, 0).tolist()


def test_sglang_minus_one_ids_are_in_no_run():
    """SGLang gives other ranks' pairs id -1; sgl-kernel gathers them in a
    first run labelled -1 that its GEMM skips, memra in no run: the same
    pairs reach the GEMM, in fewer blocks."""
    ids = torch.tensor([[0, -1], [-1, 2], [2, 1]], dtype=torch.int32)
    sorted_ids, expert_ids, post, _ = sglang_style_align(sglang.moe_align_block_size, ids, 2, 3)
    assert post.tolist() == [6]
    assert expert_sets(sorted_ids, expert_ids, 2, 6, 6) == {0: [0], 1: [5], 2: [3, 4]}


def test_sglang_buffers_too_short_are_refused():
    ids = topk_ids_for(8, 2, 16, 1)
    ok = dict(sorted_token_ids=torch.empty(16 + 16 * 3, dtype=torch.int32),
              experts_ids=torch.empty(32, dtype=torch.int32),
              num_tokens_post_pad=torch.empty(1, dtype=torch.int32),
              cumsum_buffer=torch.empty(17, dtype=torch.int32))
    sglang.moe_align_block_size(ids, 16, 4, **ok)
    for name, t, message in [
        ("sorted_token_ids", torch.empty(63, dtype=torch.int32),
         "sorted_token_ids holds 63 elements; 64 are written"),
        ("experts_ids", torch.empty(15, dtype=torch.int32),
         "experts_ids holds 15 elements; 16 are written"),
        ("cumsum_buffer", torch.empty(16, dtype=torch.int32),
         "cumsum_buffer holds 16 elements; 17 are written"),
        ("num_tokens_post_pad", torch.empty(1, dtype=torch.int64),
         "num_tokens_post_pad is torch.int64, want torch.int32"),
        ("experts_ids", torch.empty(64, dtype=torch.int32)[::2],
         "experts_ids is not contiguous"),
    ]:
        args = dict(ok, **{name: t})
        got = _refusals("sglang_moe_align_block_size",
                        lambda: (ids, 16, 4, args["sorted_token_ids"], args["experts_ids"],
                                 args["num_tokens_post_pad"], args["cumsum_buffer"]),
                        memra.InvalidArgError, fn=sglang.moe_align_block_size)
        assert got == [f"sglang.moe_align_block_size: {message}"] * 3, got


# ---- routing fused with its layout ------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(), dict(scoring="sigmoid", n_group=8, topk_group=4, renormalize=True,
                 routed_scaling_factor=2.5, bias=torch.randn(64) * 0.05),
    dict(n_shared=1, shared_weight=1.0),
    dict(expert_map=(torch.arange(64, dtype=torch.int32) % 40 - 8), n_local=32, n_shared=2),
])
def test_route_tables_layout_is_route_tables_then_the_layout(kw):
    """The fused op's seven outputs: route_tables' four, bit for bit, and
    the layout of its ids over n_expert + n_shared experts, each block
    labelled through the routing's map as the tables place the pairs (a
    shared expert's label its slot n_local + i): moe_align_block_size with
    that map."""
    T, E, bs = 37, 64, 16
    g = torch.Generator().manual_seed(3)
    x = torch.randn(T, E, generator=g) * 2
    mt.route_prepare_layer(6, None, "cpu")
    got = mt.route_tables_layout(x, 4, 6, bs, **kw)
    want = mt.route_tables(x, 4, 6, **kw)
    for a, b in zip(got[:4], want):
        assert torch.equal(a.view(torch.int32) if a.dtype == torch.float32 else a,
                           b.view(torch.int32) if b.dtype == torch.float32 else b)
    S = kw.get("n_shared", 0)
    labels = None
    if "expert_map" in kw:
        labels = torch.cat([kw["expert_map"],
                            torch.arange(kw["n_local"], kw["n_local"] + S, dtype=torch.int32)])
    layout = mt.moe_align_block_size(got[0], bs, E + S, labels)
    for a, b in zip(got[4:], layout):
        assert torch.equal(a, b)


def test_route_tables_layout_padding_rows_are_in_no_run():
    """A padded batch (n_real): the rows past the count have id -1 and no run."""
    x = torch.randn(6, 16)
    mt.route_prepare_layer(6, None, "cpu")
    ids, _, _, _, sorted_ids, expert_ids, post = mt.route_tables_layout(
        x, 2, 6, 4, n_real=torch.tensor([4], dtype=torch.int32))
    assert (ids[4:] == -1).all()
    assert sorted(expert_sets(sorted_ids, expert_ids, 4, int(post), 12).values(), key=min) == \
        sorted(([p for p in range(8) if int(ids.view(-1)[p]) == e]
                for e in sorted(set(ids[:4].view(-1).tolist()))), key=min)


def test_route_tables_layout_zero_tokens():
    mt.route_prepare_layer(6, None, "cpu")
    out = mt.route_tables_layout(torch.empty(0, 16), 2, 6, 4)
    assert [tuple(t.shape) for t in out] == [(0, 2), (0, 2), (3, 0, 2), (3, 0, 2), (0,), (0,),
                                             (1,)]
    assert out[6].tolist() == [0]


# ---- refusals, opcheck, compile ---------------------------------------------------

def _fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    return FakeTensorMode()


def _refusals(name, make, cls, fn=None):
    """The refusal of a bad call by the op, the memra.torch function
    (dispatcher-free) and the fake under FakeTensorMode: their messages."""
    op = getattr(torch.ops.memra, name).default
    fn = fn or getattr(mt, name)
    got = []
    for call in (op, fn):
        with pytest.raises(cls) as e:
            call(*make())
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


def _ids(m=4, k=2):
    return torch.zeros(m, k, dtype=torch.int32)


BAD_CALLS = [
    # what only Python can see
    ("moe_align_block_size", lambda: (_ids().short(), 16, 8), memra.InvalidArgError,
     "moe_align_block_size: topk_ids is torch.int16, want torch.int32 or torch.int64"),
    ("moe_align_block_size", lambda: (_ids(), 16, 8, torch.zeros(7, dtype=torch.int32)),
     memra.InvalidArgError, "moe_align_block_size: expert_map has shape (7,), want (8,)"),
    ("moe_align_block_size", lambda: (_ids(), 16, 8, torch.zeros(8)), memra.InvalidArgError,
     "moe_align_block_size: expert_map is torch.float32, want torch.int32"),
    # the library's rules, in the caller's words
    ("moe_align_block_size", lambda: (_ids(), 0, 8), memra.InvalidArgError,
     "moe_align_block_size: block_size = 0 is outside [1, 65536]"),
    ("moe_align_block_size", lambda: (_ids(), 65537, 8), memra.InvalidArgError,
     "moe_align_block_size: block_size = 65537 is outside [1, 65536]"),
    ("moe_align_block_size", lambda: (_ids(), 16, 0), memra.InvalidArgError,
     "moe_align_block_size: num_experts = 0 is outside [1, 1056]"),
    ("moe_align_block_size", lambda: (_ids(), 16, 2000), memra.InvalidArgError,
     "moe_align_block_size: num_experts = 2000 is outside [1, 1056]"),
    ("route_tables_layout", lambda: (torch.zeros(4, 64), 2, 0, 0), memra.InvalidArgError,
     "route_tables_layout: block_size = 0 is outside [1, 65536]"),
    # the routing is judged first, as the call judges it
    ("route_tables_layout", lambda: (torch.zeros(4, 64), 40, 0, 0), memra.InvalidArgError,
     "route_tables_layout: top_k = 40 must be in [1, 32]"),
    ("route_tables_layout", lambda: (torch.zeros(4, 64, dtype=torch.float64), 2, 0, 16),
     memra.InvalidArgError, "route_tables_layout: logits is torch.float64, want"),
]


@pytest.mark.parametrize("name,make,cls,words", BAD_CALLS,
                         ids=[f"{c[0]}-{c[3][len(c[0]) + 2:][:30]}" for c in BAD_CALLS])
def test_bad_arguments_are_refused_alike_by_op_function_and_fake(name, make, cls, words):
    mt.route_prepare_layer(0, None, "cpu")
    op, direct, fake = _refusals(name, make, cls)
    assert op == direct == fake, (op, direct, fake)
    assert op.startswith(words), op


def test_wrong_types_are_memra_errors():
    for call, message in [
        (lambda: mt.moe_align_block_size(_ids(), 16.0, 8),
         "moe_align_block_size: block_size must be an integer, not float"),
        (lambda: mt.moe_align_block_size(_ids(), 16, 8, None, 2),
         "moe_align_block_size: pad_sorted_ids must be True or False, not 2"),
        (lambda: mt.moe_align_block_size([1, 2], 16, 8),
         "moe_align_block_size: topk_ids must be a tensor, not list"),
    ]:
        mt.moe_align_block_size(_ids(), 16, 8)  # cached: a float 16.0 must not hit it
        with pytest.raises(memra.InvalidArgError) as e:
            call()
        assert str(e.value) == message


def _opcheck_cases():
    ids = topk_ids_for(9, 4, 64, 1)
    emap = torch.arange(64, dtype=torch.int32) % 40 - 8
    x = torch.randn(9, 64)
    n = ids.numel()
    return [
        ("moe_align_block_size", (ids, 16, 64), {}),
        ("moe_align_block_size", (ids, 4, 64, emap, True), {}),
        ("moe_align_block_size", (ids[:0], 4, 64), {}),
        ("sglang_moe_align_block_size",
         (ids, 65, 16, torch.empty(n + 65 * 15, dtype=torch.int32),
          torch.empty(70, dtype=torch.int32), torch.empty(1, dtype=torch.int32),
          torch.empty(66, dtype=torch.int32), True), {}),
        ("route_tables_layout", (x, 4, 0, 16), {"scoring": "sigmoid", "n_group": 8,
                                                "topk_group": 4, "bias": torch.randn(64)}),
        ("route_tables_layout", (x.bfloat16(), 4, 0, 8),
         {"expert_map": emap, "n_local": 32, "n_shared": 1, "pad_sorted_ids": True}),
    ]


@pytest.mark.parametrize("case", range(6))
def test_opcheck_on_cpu(case):
    mt.route_prepare_layer(0, None, "cpu")
    name, args, kw = _opcheck_cases()[case]
    torch.library.opcheck(getattr(torch.ops.memra, name).default, args, kw)


def test_compiled_fullgraph_equals_eager():
    """torch.compile(fullgraph=True, dynamic=True): vLLM's call and the
    fused op with the token count varying (the fakes' sizes symbolic), the
    same bytes as eager."""
    mt.route_prepare_layer(5, None, "cpu")

    def step(logits):
        w, ids = mt.grouped_topk(logits, logits, 8, True, 8, 4, "sigmoid", 2.5,
                                 torch.zeros(256))
        layout = mt.moe_align_block_size(ids, 16, 256)
        emap = torch.arange(256, dtype=torch.int32).flip(0) - 128  # half local, reversed
        local = mt.moe_align_block_size(ids, 16, 256, emap.clamp(min=-1),
                                        ignore_invalid_experts=True)
        fused = mt.route_tables_layout(logits, 8, 5, 64, scoring="sigmoid", n_group=8,
                                       topk_group=4, pad_sorted_ids=True)
        return (w * 1.0, ids) + tuple(layout) + tuple(local) + tuple(fused[4:])

    from memra import _torch_layout, _torch_ops
    _torch_ops._configs.clear()
    _torch_layout._specs.clear()
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager", dynamic=True)
    for T in (1, 7, 64, 300):
        logits = torch.randn(T, 256)
        got, want = compiled(logits), step(logits)
        for g_, w_ in zip(got, want):
            assert g_.dtype == w_.dtype and g_.shape == w_.shape
            assert torch.equal(g_, w_)
