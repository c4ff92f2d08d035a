"""CPU tests of the package (CI runs them): the host arm against NumPy's own
arithmetic, bit for bit; every bad input a clear memra.Error naming the
argument; version; NVRTC discovery in wheel layouts."""
import os

import numpy as np
import pytest

import memra

BASES = (0x7F0000000000, 0x7F4000000000, 0x7F8000000000)
STRIDES = (24 << 20, 24 << 20, 48 << 20)


def special_floats(rng, n):
    """Subnormals, +/-0, +/-inf, NaNs with payloads and ordinary values."""
    kind = rng.integers(0, 6, n)
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    sign = bits & np.uint32(0x80000000)
    out = np.where(kind == 0, sign | (bits % np.uint32(0x7FFFFF) + 1), 0)
    out = np.where(kind == 1, sign, out)
    out = np.where(kind == 2, sign | np.uint32(0x7F800000), out)
    out = np.where(kind == 3, sign | np.uint32(0x7F800000) | (bits % np.uint32(0x7FFFFF) + 1), out)
    out = np.where(kind >= 4, sign | (np.uint32(0x3A000000) + bits % np.uint32(0x0A000000)), out)
    return out.astype(np.uint32).view(np.float32)


def reference(sel, selw, n_expert, planes, bases, strides):
    """The arithmetic in NumPy: uint64 addresses, float32 products
    (binary32 round to nearest even, subnormals kept), NaN canonical."""
    n = sel.shape[0]
    ok = (sel >= 0) & (sel < n_expert)
    ex = np.where(ok, sel, 0).astype(np.uint64)
    ptrs = np.concatenate([np.uint64(b) + ex * np.uint64(s) for b, s in zip(bases, strides)])
    one = np.ones(n, np.float32)
    g = planes[0][ex.astype(np.int64)] if planes is not None else one
    u = planes[1][ex.astype(np.int64)] if planes is not None else one
    d = planes[2][ex.astype(np.int64)] if planes is not None else one
    with np.errstate(all="ignore"):
        down = (selw.astype(np.float32) * d).astype(np.float32)
    scl = np.concatenate([g, u, down]).astype(np.float32)
    scl[np.tile(~ok, 3)] = 0.0
    bits = scl.view(np.uint32).copy()
    bits[np.isnan(scl)] = 0x7FC00000
    return ptrs, bits


@pytest.mark.parametrize("n,n_expert,with_planes", [(1, 1, False), (8, 256, True),
                                                    (4099, 300, True), (70001, 64, False)])
def test_host_arm_matches_numpy_bit_for_bit(n, n_expert, with_planes):
    rng = np.random.default_rng(n)
    sel = rng.integers(0, n_expert, n).astype(np.int32)
    sel[rng.random(n) < 0.02] = -3
    sel[rng.random(n) < 0.02] = n_expert + 5
    selw = special_floats(rng, n)
    planes = special_floats(rng, 3 * n_expert).reshape(3, n_expert) if with_planes else None
    ptrs, scl, faults = memra.vrows_tables_host(sel, selw, n_expert, planes, BASES, STRIDES)
    want_p, want_s = reference(sel, selw, n_expert, planes, BASES, STRIDES)
    assert ptrs.dtype == np.uint64 and scl.dtype == np.float32
    np.testing.assert_array_equal(ptrs, want_p)
    np.testing.assert_array_equal(scl.view(np.uint32), want_s)
    assert faults.bad_expert == int(((sel < 0) | (sel >= n_expert)).sum())


def test_ids_outside_int32_are_counted_as_the_library_counts_any_out_of_range_id():
    """An int64 id no int32 holds is out of range whatever n_expert is: a
    fault the library counts (expert 0's pointers, +0 scales), as for any
    id outside [0, n_expert), not a refusal (as memra.torch's int64 ids)."""
    sel = np.array([2**40, 1, -2**40, 2**31, 3], np.int64)
    ptrs, scl, f = memra.vrows_tables_host(sel, np.ones(5, np.float32), 4, None, BASES, STRIDES)
    want_p, want_s = reference(np.array([-1, 1, -1, -1, 3], np.int32), np.ones(5, np.float32), 4,
                               None, BASES, STRIDES)
    np.testing.assert_array_equal(ptrs, want_p)
    np.testing.assert_array_equal(scl.view(np.uint32), want_s)
    assert f.bad_expert == 3 and f.first_pair == 0


def test_serving_strides_do_not_wrap():
    sel = np.array([255, 0], np.int32)
    ptrs, _, _ = memra.vrows_tables_host(sel, np.ones(2, np.float32), 256, None, BASES, STRIDES)
    assert int(ptrs[4]) == 0x7F8000000000 + 255 * (48 << 20)  # 12 GiB into the down slab


@pytest.mark.parametrize("call,cls,words", [
    (lambda: memra.vrows_tables_host(np.zeros((2, 2), np.int32), np.ones((2, 2), np.float32), 4),
     memra.InvalidArgError, "1-D"),
    (lambda: memra.vrows_tables_host([0], np.ones(1, np.float64), 4),
     memra.InvalidArgError, "selw is float64"),
    (lambda: memra.vrows_tables_host(np.zeros(1, np.float32), np.ones(1, np.float32), 4),
     memra.InvalidArgError, "sel is float32"),
    (lambda: memra.vrows_tables_host([0, 1], np.ones(3, np.float32), 4),
     memra.InvalidArgError, "selw"),
    (lambda: memra.vrows_tables_host([0], np.ones(1, np.float32), 0),
     memra.InvalidArgError, "n_expert"),
    (lambda: memra.vrows_tables_host([0], np.ones(1, np.float32), 2**32 + 1),
     memra.InvalidArgError, "n_expert = 4294967297"),
    (lambda: memra.vrows_tables_host([0], np.ones(1, np.float32), 4, np.ones((3, 3), np.float32)),
     memra.InvalidArgError, "macros[0] has shape (3,)"),
    (lambda: memra.vrows_tables_host([0], np.ones(1, np.float32), 4, [np.ones(4, np.float64)] * 3),
     memra.InvalidArgError, "float64"),
    (lambda: memra.vrows_tables_host([0], np.ones(1, np.float32), 4, None, (2**64, 0, 0)),
     memra.InvalidArgError, "bases[0]"),
    (lambda: memra.vrows_tables_host([0], np.ones(1, np.float32), 4, None, (0, 0), (1, 1, 1)),
     memra.InvalidArgError, "bases must be three"),
    (lambda: memra.vrows_tables_host([0], np.ones(1, np.float32), 2, None, (2**64 - 1, 0, 0),
                                     (1, 1, 1)),
     memra.SlabOverflowError, "vrows_tables_host: bases[0] (gate)"),
])
def test_bad_input_is_a_clear_error(call, cls, words):
    with pytest.raises(cls) as e:
        call()
    assert isinstance(e.value, memra.Error)
    assert words in str(e.value), str(e.value)
    assert e.value.status == cls.status


def test_integers_are_range_checked_not_truncated():
    # ctypes would turn 2**32 + 1 into 1 without a word.
    with pytest.raises(memra.InvalidArgError, match="n_pairs = 4294967297"):
        memra._int("n_pairs", 2**32 + 1, 1, memra.MAX_PAIRS + 1)
    with pytest.raises(memra.InvalidArgError, match="layer = 65536"):
        memra._int("layer", 65536, 0, memra.MAX_LAYERS)
    with pytest.raises(memra.InvalidArgError, match="must be an integer"):
        memra._int("n_expert", 3.0, 1, 10)
    with pytest.raises(memra.InvalidArgError, match="must be an integer"):
        memra._int("n_expert", True, 1, 10)
    assert memra._stream(0) is None  # the legacy default stream reaches C as NULL
    assert memra._stream(0x1234) == 0x1234


def test_errors_carry_status_and_message():
    err = memra._errors.error_for(12, "memra_x: capturing")
    assert isinstance(err, memra.CaptureError) and err.status == 12
    assert err.status_name == "MEMRA_ERR_CAPTURE" and err.message == "memra_x: capturing"
    unknown = memra._errors.error_for(99, "new")
    assert type(unknown) is memra.Error and unknown.status == 99


def test_version_matches_the_library():
    assert memra.__version__ == memra.version()
    v = memra.lib().memra_version()
    assert [v // 10000, v // 100 % 100, v % 100] == [int(x) for x in memra.__version__.split(".")]


def test_no_gpu_is_a_clear_error():
    if memra.device_count() if _has_driver() else False:
        pytest.skip("a GPU is present: the GPU tests cover engines")
    with pytest.raises((memra.NoDriverError, memra.NoDeviceError)) as e:
        memra.Engine(0)
    assert len(str(e.value)) > 20


def test_engine_device_as_pytorch_spells_it():
    """A string device is read as PyTorch reads one ('cuda', 'cuda:N'); any
    other is refused naming it (its .index, a str method, was once taken
    for the index: "device must be an integer, not builtin_function_or_method")."""
    for bad in ("x", "cpu", "cuda:", "cuda:one", "cuda:-1", "cuda:1:2"):
        with pytest.raises(memra.InvalidArgError, match="is not a CUDA device") as e:
            memra.Engine(bad)
        assert repr(bad) in str(e.value)
    if _has_driver() and memra.device_count():
        pytest.skip("a GPU is present: the GPU tests cover engines")
    for good in ("cuda", "cuda:0", "cuda:3"):  # parsed: the refusal is the driver's
        with pytest.raises((memra.NoDriverError, memra.NoDeviceError)):
            memra.Engine(good)


def test_engine_ordinal_is_the_librarys_to_judge():
    """A negative ordinal (a CPU tensor's get_device() is -1) is refused by
    the library as one past the last is: NoDeviceError (NoDriverError first
    with no driver), never a Python InvalidArgError that code catching
    NoDeviceError misses."""
    for bad in (-1, -(1 << 31)):
        with pytest.raises((memra.NoDriverError, memra.NoDeviceError)) as e:
            memra.Engine(bad)
        if isinstance(e.value, memra.NoDeviceError):
            assert f"ordinal {bad}" in str(e.value)
    with pytest.raises(memra.InvalidArgError, match="device"):
        memra.Engine(1 << 31)  # no C int holds it


def test_numpy_bools_are_flags():
    """np.True_ (what an array comparison gives) is a flag like True: it was
    refused as "must be True or False"."""
    a = memra.route_spec(64, 4, renormalize=np.True_)
    b = memra.route_spec(64, 4, renormalize=True)
    assert a.renormalize == b.renormalize == 1
    assert memra.route_spec(64, 4, renormalize=np.False_).renormalize == 0


def test_address_zero_is_none_as_the_library_reads_it():
    """0 for an optional address is "none" in the C API: route_spec's bias
    and expert_map and the host arm's expert_map take it as None (they
    refused it as outside [1, 2^64))."""
    s = memra.route_spec(8, 2, bias=0, expert_map=0)
    assert not s.bias and s.expert_map == 0
    sel = np.array([0, 3], np.int32)
    want = memra.vrows_tables_host(sel, np.ones(2, np.float32), 4, None, BASES, STRIDES)
    got = memra.vrows_tables_host(sel, np.ones(2, np.float32), 4, None, BASES, STRIDES,
                                  expert_map=0)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1].view(np.uint32), want[1].view(np.uint32))


def test_n_real_array_and_a_different_dtype_are_refused():
    """An n_real array read as another dtype would be read past its end (an
    int32 of 4 bytes as int64's 8): refused, naming both; the same dtype is
    taken."""
    with pytest.raises(memra.InvalidArgError, match="n_real is int32.*int64"):
        memra.route_spec(8, 2, n_real=np.array([3], np.int32), n_real_dtype="int64")
    s = memra.route_spec(8, 2, n_real=np.array([3], np.int64), n_real_dtype="int64")
    assert s.n_real_dtype == memra._lib.COUNT_DTYPES["int64"]


def _has_driver():
    try:
        memra.device_count()
        return True
    except memra.NoDriverError:
        return False


def test_wheel_nvrtc_layouts_are_found(tmp_path):
    for sub, name in (("nvidia/cu13/lib", "libnvrtc.so.13"),
                      ("nvidia/cuda_nvrtc/lib", "libnvrtc.so.12")):
        d = tmp_path / sub
        d.mkdir(parents=True)
        (d / name).write_bytes(b"")
        (d / (name + ".0.88")).write_bytes(b"")  # the versioned file is not the soname
        (d / "libnvrtc-builtins.so.13.0").write_bytes(b"")
    found = memra.wheel_nvrtc_paths([str(tmp_path), "/nonexistent"])
    assert [os.path.basename(f) for f in found] == ["libnvrtc.so.13", "libnvrtc.so.12"]


def test_route_top_k_is_checked_before_allocating():
    logits = np.zeros((4, 8), np.float32)
    with pytest.raises(memra.InvalidArgError, match="top_k = 4294967295"):
        memra.route_tables_host(logits, 2**32 - 1)
    with pytest.raises(memra.InvalidArgError, match="top_k"):
        memra.route_tables_host(logits, 33)


def test_float64_bias_is_refused_like_other_float64_inputs():
    logits = np.zeros((4, 8), np.float32)
    with pytest.raises(memra.InvalidArgError, match="bias is float64"):
        memra.route_tables_host(logits, 2, bias=np.zeros(8, np.float64))
    with pytest.raises(memra.InvalidArgError, match="bias is float64"):
        memra.route_spec(8, 2, bias=np.zeros(8))
    with pytest.raises(memra.InvalidArgError, match="bias has shape"):
        memra.route_spec(8, 2, bias=np.zeros(7, np.float32))


def test_a_bias_address_off_a_float_is_refused_not_read():
    """bias may be an integer host address: one off a float's alignment
    (1 is no float's) was read by the check and killed the interpreter; the
    library refuses it before reading."""
    logits = np.zeros((2, 8), np.float32)
    good = np.zeros(9, np.float32)
    for addr in (1, good.ctypes.data + 1):
        with pytest.raises(memra.MisalignedError, match=r"bias = 0x[0-9a-f]+ is not aligned to a float"):
            memra.route_tables_host(logits, 2, bias=addr)


def test_route_spec_takes_a_bias_array():
    """As documented: the spec points at the array and keeps it alive."""
    import gc
    bias = np.arange(8, dtype=np.float32) * np.float32(0.25)
    spec = memra.route_spec(8, 2, scoring="sigmoid", bias=bias)
    assert spec.bias == bias.ctypes.data
    del bias
    gc.collect()
    logits = np.zeros((1, 8), np.float32)
    sel, selw = np.empty(2, np.int32), np.empty(2, np.float32)
    ptrs, scl = np.empty(6, np.uint64), np.empty(6, np.float32)
    sl = memra.slabs((0, 0, 0), (0, 0, 0))
    import ctypes
    memra.check(memra.lib().memra_route_tables_host(
        logits.ctypes.data, 1, ctypes.byref(spec), None, ctypes.byref(sl), sel.ctypes.data,
        selw.ctypes.data, ptrs.ctypes.data, scl.ctypes.data, None))
    assert sel.tolist() == [7, 6]  # equal scores: the bias decides
    want = memra.route_tables_host(logits, 2, scoring="sigmoid",
                                   bias=np.arange(8, dtype=np.float32) * np.float32(0.25))
    assert want[0].tolist() == [7, 6]


def test_route_host_deepseek_config():
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((16, 256)).astype(np.float32)
    bias = (rng.standard_normal(256) * 0.01).astype(np.float32)
    sel, selw, ptrs, scl, f = memra.route_tables_host(
        logits, 8, BASES, STRIDES, scoring="sigmoid", n_group=8, topk_group=4,
        renormalize=True, routed_scaling_factor=2.5, bias=bias)
    assert sel.shape == (128,) and f.nonfinite == 0
    sel = sel.reshape(16, 8)
    # the chosen experts lie in 4 groups of 32 and are listed best first
    for t in range(16):
        assert len(set(sel[t] // 32)) <= 4
        c = 1 / (1 + np.exp(-logits[t].astype(np.float64))) + bias
        assert all(c[sel[t][j]] >= c[sel[t][j + 1]] for j in range(7))
    # renormalised and scaled: each token's weights sum to 2.5 (within rounding)
    np.testing.assert_allclose(selw.reshape(16, 8).sum(1), 2.5, rtol=1e-5)
    with pytest.raises(memra.InvalidArgError, match="n_group"):
        memra.route_tables_host(logits, 8, n_group=3)


def test_route_host_zero_tokens_is_empty():
    logits = np.zeros((0, 64), np.float32)
    sel, selw, ptrs, scl, f = memra.route_tables_host(logits, 8, BASES, STRIDES)
    assert sel.shape == (0,) and scl.shape == (0,) and f.nonfinite == 0


def test_route_host_group_scoring_defaults_as_vllm():
    """Without a bias a group scores its best expert (vLLM's grouped_topk,
    DeepSeek-V2); with one, its two best (DeepSeek-V3); either may be asked
    for."""
    logits = np.full((1, 16), -4.0, np.float32)
    logits[0, 0] = 4.0               # group 0: one strong expert
    logits[0, 4:6] = 3.5             # group 1: two good ones
    best = memra.route_tables_host(logits, 1, n_group=4, topk_group=1)[0]
    top2 = memra.route_tables_host(logits, 1, n_group=4, topk_group=1,
                                   group_scoring="top2_sum")[0]
    assert best.tolist() == [0] and top2.tolist() == [4]
    biased = memra.route_tables_host(logits, 1, n_group=4, topk_group=1,
                                     bias=np.zeros(16, np.float32))[0]
    assert biased.tolist() == [4]
    # The rule is the library's (MEMRA_GROUP_AUTO): the spec says only "vLLM's".
    assert memra.route_spec(16, 1).group_scoring == memra.GROUP_SCORINGS[None] == 0
    assert memra.route_spec(16, 1, group_scoring="max").group_scoring == 2
    with pytest.raises(memra.InvalidArgError, match="group_scoring must be"):
        memra.route_spec(16, 1, group_scoring="sum")


def test_route_host_fp16_logits_and_shared_experts():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 32)).astype(np.float16)
    sel, selw, ptrs, scl, f = memra.route_tables_host(x, 4, n_shared=2, shared_weight=0.25)
    assert sel.shape == (30,)
    ref = memra.route_tables_host(x.astype(np.float32), 4)[0].reshape(5, 4)  # fp16 -> f32 exact
    assert np.array_equal(sel.reshape(5, 6)[:, :4], ref)
    assert np.array_equal(sel.reshape(5, 6)[:, 4:], np.tile([32, 33], (5, 1)))
    assert np.all(selw.reshape(5, 6)[:, 4:] == np.float32(0.25))


def test_vrows_host_expert_map_and_zero_pairs():
    sel = np.array([0, 1, 2, 3, 4], np.int32)
    emap = np.array([1, -1, 0, -1], np.int32)
    ptrs, scl, f = memra.vrows_tables_host(sel, np.ones(5, np.float32), 4, None, BASES, STRIDES,
                                           expert_map=emap, n_local=2, n_shared=1)
    assert f.not_local == 2 and f.bad_expert == 0 and f.first_pair == memra.NO_FAULT
    gate = ptrs[:5].astype(object)
    assert gate[0] == BASES[0] + STRIDES[0] and gate[2] == BASES[0]
    assert gate[1] == 0 and gate[3] == 0                    # on another rank: NULL, +0
    assert gate[4] == BASES[0] + 2 * STRIDES[0]             # the shared expert: slot n_local
    assert scl.view(np.uint32)[[1, 3, 6, 8, 11, 13]].tolist() == [0] * 6
    p0, s0, f0 = memra.vrows_tables_host(np.zeros(0, np.int32), np.zeros(0, np.float32), 4)
    assert p0.shape == (0,) and s0.shape == (0,)
    with pytest.raises(memra.InvalidArgError, match="n_local is 0 with an expert_map"):
        memra.vrows_tables_host(sel, np.ones(5, np.float32), 4, expert_map=emap)


def test_engine_table_call_converts_before_reaching_the_device():
    """Engine.vrows_tables converts its arguments before the device (an
    engine object without a device handle stands in); the library judges
    the options in the call (vrows_tables_host and tests/test_check.c show
    its rules)."""
    import ctypes
    eng = object.__new__(memra.Engine)
    eng._h = ctypes.c_void_p()
    sl = memra.slabs(BASES, STRIDES)
    with pytest.raises(memra.InvalidArgError, match="the engine is closed"):
        eng.vrows_tables(0x1000, 0x2000, 4, 64, 0, None, sl, 0x3000, 0x4000)
    with pytest.raises(memra.InvalidArgError, match="the engine is closed"):
        eng.vrows_tables(0x1000, 0x2000, 4, 64, 0, None, sl, 0x3000, 0x4000,
                         expert_map=0x5000, n_local=8, n_shared=1)
    with pytest.raises(memra.InvalidArgError, match="n_local = -1 is outside"):
        eng.vrows_tables(0x1000, 0x2000, 4, 64, 0, None, sl, 0x3000, 0x4000,
                         expert_map=0x5000, n_local=-1)


def test_engine_names_its_calls_as_the_library_does():
    """One name per operation: the Engine's table calls are memra_vrows_*'s,
    the pre-0.3 name is gone."""
    assert callable(memra.Engine.vrows_tables) and callable(memra.Engine.vrows_prepare_layer)
    for old in ("tables_from_sel", "prepare_layer"):
        assert not hasattr(memra.Engine, old), old
