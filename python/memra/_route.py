"""The routing spec (memra_route_spec) and the routing host arm on NumPy
arrays. The rules are the library's (docs/routing.md); this module only
builds the spec, with vLLM's default for how a group is scored."""
import ctypes
import struct

from . import _lib
from ._errors import InvalidArgError
from ._lib import Faults, check, lib

MAX_PAIRS = 1 << 28
ROUTE_MAX_EXPERT = 1024
ROUTE_MAX_TOP_K = 32
ROUTE_MAX_GROUPS = 32
_U64 = 1 << 64

SCORINGS = {"softmax": 0, "sigmoid": 1}
# How a group is scored when n_group > 1: the sum of its two best choice
# scores (DeepSeek-V3, and vLLM's grouped_topk with a bias) or its best one
# (DeepSeek-V2, and vLLM's grouped_topk without a bias).
GROUP_SCORINGS = {"top2_sum": 1, "max": 2}
LOGITS_DTYPES = {"float32": 0, "bfloat16": 1, "float16": 2}
BIAS_DTYPES = {"float32": 0, "bfloat16": 1}


def _int(name, value, lo, hi):
    """An integer in [lo, hi), else InvalidArgError naming the argument."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise InvalidArgError(f"{name} must be an integer, not {type(value).__name__}")
    v = value.__index__()
    if not lo <= v < hi:
        raise InvalidArgError(f"{name} = {v} is outside [{lo}, {hi})")
    return v


def f32_bits(name, value):
    """A Python number as the binary32 the library receives (round to
    nearest, as ctypes and PyTorch's scalar arithmetic round it), and its
    bits; a value that overflows binary32 is refused, not made infinite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) and \
            not hasattr(value, "__float__"):
        raise InvalidArgError(f"{name} must be a number, not {type(value).__name__}")
    try:
        packed = struct.pack("<f", float(value))
    except OverflowError:
        raise InvalidArgError(f"{name} = {value!r} is outside binary32") from None
    return struct.unpack("<I", packed)[0]


def check_scale(name, value):
    """routed_scaling_factor: finite and > 0 as a binary32, judged by its
    bits as the library judges it (a subnormal is positive)."""
    b = f32_bits(name, value)
    if b & 0x80000000 or b == 0 or (b & 0x7F800000) == 0x7F800000:
        raise InvalidArgError(f"{name} = {value!r} must be finite and > 0 (binary32 bits "
                              f"0x{b:08x})")
    return b


def check_finite(name, value):
    b = f32_bits(name, value)
    if (b & 0x7F800000) == 0x7F800000:
        raise InvalidArgError(f"{name} = {value!r} is not finite")
    return b


def default_group_scoring(group_scoring, has_bias):
    """vLLM's rule when not given: with a bias, the sum of a group's two
    best; without, its best."""
    if group_scoring is None:
        return "top2_sum" if has_bias else "max"
    if group_scoring not in GROUP_SCORINGS:
        raise InvalidArgError(f"group_scoring must be 'top2_sum', 'max' or None (vLLM's "
                              f"default), not {group_scoring!r}")
    return group_scoring


_NAMES = {k: k for k in ("n_expert", "top_k", "n_group", "topk_group", "routed_scaling_factor",
                         "n_local", "n_shared", "shared_weight", "scoring")}


def check_spec(n_expert, top_k, scoring, n_group, topk_group, routed_scaling_factor,
               n_local, n_shared, shared_weight, has_map, names=_NAMES):
    """Every rule the library applies to a spec, in Python, so a wrong
    argument is refused with its name (the caller's name for it, through
    `names`) before anything is allocated, by the PyTorch ops' fake
    implementations alike. Sizes may be symbolic (torch.SymInt) in the
    fakes: only comparisons and arithmetic here."""
    N = names
    if scoring not in SCORINGS:
        raise InvalidArgError(f"{N['scoring']} must be 'softmax' or 'sigmoid', not {scoring!r}")
    if not 1 <= n_expert <= ROUTE_MAX_EXPERT:
        raise InvalidArgError(f"{N['n_expert']} = {n_expert} (the logits' last dimension) is "
                              f"outside [1, {ROUTE_MAX_EXPERT}]")
    if not 1 <= n_group <= ROUTE_MAX_GROUPS or n_expert % n_group != 0:
        raise InvalidArgError(f"{N['n_group']} = {n_group} must be in [1, {ROUTE_MAX_GROUPS}] and "
                              f"divide the {n_expert} experts")
    if not 1 <= topk_group <= n_group:
        raise InvalidArgError(f"{N['topk_group']} = {topk_group} is outside [1, {N['n_group']} = "
                              f"{n_group}]")
    in_play = topk_group * (n_expert // n_group)
    if not 1 <= top_k <= ROUTE_MAX_TOP_K or top_k > in_play:
        raise InvalidArgError(f"{N['top_k']} = {top_k} must be in [1, {ROUTE_MAX_TOP_K}] and at "
                              f"most the {in_play} experts in play")
    check_scale(N["routed_scaling_factor"], routed_scaling_factor)
    if not 0 <= n_shared <= ROUTE_MAX_TOP_K - top_k:
        raise InvalidArgError(f"{N['n_shared']} = {n_shared}: {N['top_k']} + {N['n_shared']} "
                              f"must be at most {ROUTE_MAX_TOP_K}")
    check_finite(N["shared_weight"], shared_weight)
    if has_map and not 1 <= n_local <= ROUTE_MAX_EXPERT:
        raise InvalidArgError(f"{N['n_local']} = {n_local} must be in [1, {ROUTE_MAX_EXPERT}] "
                              f"with an expert_map")
    if not has_map and n_local != 0:
        raise InvalidArgError(f"{N['n_local']} = {n_local} without an expert_map (give the map, "
                              f"or 0)")


def make_spec(n_expert, top_k, scoring, n_group, topk_group, renormalize, scale, logits_dtype,
              group_scoring, bias_dtype, bias_ptr, expert_map, n_local, n_shared,
              shared_weight):
    """A RouteSpec from values already checked (check_spec)."""
    s = _lib.RouteSpec()
    s.n_expert, s.top_k, s.n_group, s.topk_group = n_expert, top_k, n_group, topk_group
    s.scoring = SCORINGS[scoring]
    s.logits_dtype = LOGITS_DTYPES[logits_dtype]
    s.renormalize = int(bool(renormalize))
    s.routed_scaling_factor = scale
    s.group_scoring = GROUP_SCORINGS[group_scoring]
    s.bias_dtype = BIAS_DTYPES[bias_dtype]
    s.bias_ptr = bias_ptr
    s.expert_map = expert_map
    s.n_local = n_local
    s.n_shared = n_shared
    s.shared_weight = shared_weight
    return s


def _array(name, value, n, dtypes):
    """(address, array kept alive) for a NumPy-able 1-D array of n elements
    of one of `dtypes` (names), or an integer address kept alive by the
    caller; (0, None) for None. Nothing is converted: no silent rounding."""
    if value is None:
        return 0, None
    if isinstance(value, int) and not isinstance(value, bool):
        return _int(name, value, 1, _U64), None
    import numpy as np
    a = np.asarray(value)
    if a.dtype.name not in dtypes:
        raise InvalidArgError(f"{name} is {a.dtype}, not {' or '.join(dtypes)} (no silent "
                              f"rounding)")
    if a.shape != (n,):
        raise InvalidArgError(f"{name} has shape {a.shape}, want ({n},)")
    a = np.ascontiguousarray(a)
    return a.ctypes.data, a


def route_spec(n_expert, top_k, scoring="softmax", n_group=1, topk_group=1, renormalize=False,
               routed_scaling_factor=1.0, bias=None, bf16=False, *, logits_dtype=None,
               group_scoring=None, bias_ptr=None, bias_dtype="float32", expert_map=None,
               n_local=0, n_shared=0, shared_weight=1.0):
    """A memra_route_spec for the host arm or a device call.

    bias: a float32 array of n_expert (host, checked finite by the library,
    mirrored per layer on the device), or an integer host address; bias_ptr:
    an address the arm that runs reads in place (bias_dtype "float32" or
    "bfloat16"). group_scoring: "top2_sum", "max" or None for vLLM's default
    (top2_sum with a bias, max without). expert_map: an int32 array of
    n_expert (global expert -> local slot or -1) or an address in the arm's
    memory, with n_local slots. The spec keeps the arrays it was given
    alive."""
    s_n_expert = _int("n_expert", n_expert, 1, 1 << 32)
    s_top_k = _int("top_k", top_k, 1, 1 << 32)
    s_n_group = _int("n_group", n_group, 1, 1 << 32)
    s_topk_group = _int("topk_group", topk_group, 1, 1 << 32)
    n_local = _int("n_local", n_local, 0, 1 << 32)
    n_shared = _int("n_shared", n_shared, 0, 1 << 32)
    if logits_dtype is None:
        logits_dtype = "bfloat16" if bf16 else "float32"
    if logits_dtype not in LOGITS_DTYPES:
        raise InvalidArgError(f"logits_dtype must be one of {sorted(LOGITS_DTYPES)}, not "
                              f"{logits_dtype!r}")
    if bias_dtype not in BIAS_DTYPES:
        raise InvalidArgError(f"bias_dtype must be 'float32' or 'bfloat16', not {bias_dtype!r}")
    bias_addr, bias_keep = _array("bias", bias, s_n_expert, ("float32",))
    bias_ptr = 0 if bias_ptr is None else _int("bias_ptr", bias_ptr, 0, _U64)
    if bias_addr and bias_ptr:
        raise InvalidArgError("bias and bias_ptr are both given; give one bias")
    map_addr, map_keep = _array("expert_map", expert_map, s_n_expert, ("int32",))
    check_spec(s_n_expert, s_top_k, scoring, s_n_group, s_topk_group, routed_scaling_factor,
               n_local, n_shared, shared_weight, bool(map_addr))
    gs = default_group_scoring(group_scoring, bool(bias_addr or bias_ptr))
    s = make_spec(s_n_expert, s_top_k, scoring, s_n_group, s_topk_group, renormalize,
                  float(routed_scaling_factor), logits_dtype, gs, bias_dtype, bias_ptr, map_addr,
                  n_local, n_shared, float(shared_weight))
    s.bias = bias_addr or None
    s._keep = (bias_keep, map_keep)
    return s


_NP_LOGITS = {"float32": "float32", "uint16": "bfloat16", "float16": "float16"}


def route_tables_host(logits, top_k, bases=(0, 0, 0), strides=(0, 0, 0), macros=None, **spec):
    """The routing host arm on a NumPy [n_tokens, n_expert] array of float32,
    float16, or uint16 holding bfloat16 bits: returns (sel int32, selw
    float32, ptrs uint64, scl float32, faults), sel and selw of n_tokens * K
    (K = top_k + n_shared), the tables 3 * n_tokens * K. Spec keywords as
    route_spec's; macros three planes of n_slots (or None). Zero tokens give
    empty outputs."""
    import numpy as np
    from . import _planes_numpy, slabs
    logits = np.ascontiguousarray(logits)
    if logits.ndim != 2:
        raise InvalidArgError(f"logits must be [n_tokens, n_expert], not {logits.shape}")
    dtype = _NP_LOGITS.get(logits.dtype.name)
    if dtype is None:
        raise InvalidArgError(f"logits are {logits.dtype}; want float32, float16 or uint16 "
                              f"bfloat16 bits")
    n_tokens, n_expert = logits.shape
    # Checked before anything is allocated: top_k = 2**32 - 1 must be an
    # error naming it, not a 96 GiB allocation.
    top_k = _int("top_k", top_k, 1, ROUTE_MAX_TOP_K + 1)
    _int("n_expert (logits.shape[1])", n_expert, 1, ROUTE_MAX_EXPERT + 1)
    n_tokens = _int("n_tokens", n_tokens, 0, 1 << 32)
    spec.pop("bf16", None)
    s = route_spec(n_expert, top_k, logits_dtype=dtype, **spec)
    K = s.top_k + s.n_shared
    if n_tokens * K > MAX_PAIRS:
        raise InvalidArgError(f"n_tokens * (top_k + n_shared) = {n_tokens * K} is more than "
                              f"{MAX_PAIRS}")
    n = n_tokens * K
    n_slots = (s.n_local if s.expert_map else n_expert) + s.n_shared
    m, keep = _planes_numpy(macros, n_slots)
    sl = slabs(bases, strides)
    sel = np.empty(n, np.int32)
    selw = np.empty(n, np.float32)
    ptrs = np.empty(3 * n, np.uint64)
    scl = np.empty(3 * n, np.float32)
    f = Faults()
    st = lib().memra_route_tables_host(logits.ctypes.data, n_tokens, ctypes.byref(s),
                                       ctypes.byref(m) if m else None, ctypes.byref(sl),
                                       sel.ctypes.data, selw.ctypes.data, ptrs.ctypes.data,
                                       scl.ctypes.data, ctypes.byref(f))
    del keep
    if st not in (0, 5, 6):  # 5, 6: faults, reported in f
        check(st)
    return sel, selw, ptrs, scl, f
