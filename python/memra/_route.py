"""The routing spec (memra_route_spec): one object from a caller's
arguments to the library, and the routing host arm on NumPy arrays.

The library is the only judge of a spec (docs/routing.md's rules live in
src/route/route_spec.c): this module converts the caller's values to the C types
exactly (refusing what a C field cannot hold, a type that is not a number,
a name that is not one of the enum's) and asks the library
(memra_route_check) for everything else, its message in the caller's
words."""
import ctypes
import math

from . import _lib
from ._errors import InvalidArgError
from ._lib import (BIAS_DTYPES, CALLS, COUNT_DTYPES, GROUP_SCORINGS, LOGITS_DTYPES, MAX_PAIRS,
                   ROUTE_MAX_EXPERT, ROUTE_MAX_GROUPS, ROUTE_MAX_TOP_K, SCORINGS, SHARED_RULES,
                   Faults, RouteSpec, check, lib)

__all__ = ["ROUTE_MAX_EXPERT", "ROUTE_MAX_GROUPS", "ROUTE_MAX_TOP_K", "RouteConfig", "route_spec",
           "route_tables_host"]

_U32 = 1 << 32
_I32 = 1 << 31
_U64 = 1 << 64
_CACHE_MAX = 4096  # specs kept per configuration (a process that keeps making new biases)

# Every field of memra_route_spec, as the library names them in messages.
SPEC_FIELDS = tuple(f for f, _ in RouteSpec._fields_)


# ---- conversions: the caller's values as the C types, exactly --------------

def _int(name, value, lo, hi):
    """An integer in [lo, hi), else InvalidArgError naming the argument: the
    range of the C type it goes to (a value C cannot hold never reaches
    it truncated)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise InvalidArgError(f"{name} must be an integer, not {type(value).__name__}")
    v = value.__index__()
    if not lo <= v < hi:
        raise InvalidArgError(f"{name} = {v} is outside [{lo}, {hi})")
    return v


def _numpy_bool(value):
    """A NumPy bool scalar (np.True_: what a comparison of arrays gives),
    which has no __index__."""
    t = type(value)
    return t.__module__ == "numpy" and t.__name__ in ("bool_", "bool")


def _flag(name, value, strict=False):
    """A bool, or an int (which the library judges: 0 and 1 are its flags);
    strict: a bool, or 0 or 1 (an operator's schema takes a bool)."""
    if isinstance(value, bool) or _numpy_bool(value):
        return int(value)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__index__") or \
            strict and value.__index__() not in (0, 1):
        raise InvalidArgError(f"{name} must be True or False, not {value!r}")
    return _int(name, value, -_I32, _I32)


def _number(name, value):
    """A real number as the float ctypes rounds to binary32 (the library
    judges the bits it receives: an overflow arrives as infinity)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__float__"):
        raise InvalidArgError(f"{name} must be a number, not {value!r}")
    return float(value)


def _choice(name, value, table):
    try:
        return table[value]
    except (KeyError, TypeError):
        raise InvalidArgError(f"{name} must be one of {', '.join(repr(k) for k in table)}, "
                              f"not {value!r}") from None


def float_key(x):
    """A float's key in a cache of specs: the value, with the sign of a zero
    (-0.0 == 0.0 in Python, yet the library receives other bits, and a
    cached +0.0 spec must not answer for -0.0)."""
    try:
        return x if x != 0 else (0, math.copysign(1.0, x))
    except TypeError:
        return x  # not a number: refused when the configuration is made


def shared_fields(shared_weight, shared_divisor):
    """The shared experts' rule as RouteConfig takes it, from the Python
    calls' two arguments: a constant weight (shared_weight, 1.0 unless
    given), or with shared_divisor SGLang's rule (the library wants the
    constant 0 then: shared_weight unless given). One rule for route_spec
    and the torch ops alike (the torch ops once defaulted shared_weight to
    1.0 and refused shared_divisor alone)."""
    routed_sum = shared_divisor is not None
    return dict(shared_rule="routed_sum" if routed_sum else "constant",
                shared_weight=(0.0 if routed_sum else 1.0) if shared_weight is None
                else shared_weight,
                shared_divisor=shared_divisor if routed_sum else 0.0)


# ---- one configuration, many calls ----------------------------------------

class RouteConfig:
    """A routing configuration as the library takes it: every scalar field
    of memra_route_spec in a template spec, K = top_k + n_shared, and the
    caller's words for the library's (messages name the caller's
    arguments). Made from a caller's arguments once and kept; immutable,
    shared by threads.

    A call brings what only it knows (the logits' dtype and expert count,
    the addresses of a bias, an expert map and a real-token count); spec()
    gives the finished memra_route_spec for those from a cache keyed by
    every one of them, so the library receives the struct a fresh build
    would give. Nothing here judges the values: the library does, on every
    call (or memra_route_check, for a call not made)."""

    __slots__ = ("template", "K", "top_k", "n_shared", "renormalize", "caller", "names",
                 "_specs")

    def __init__(self, caller, names, *, top_k, n_group=1, topk_group=1, scoring="softmax",
                 renormalize=False, routed_scaling_factor=1.0, group_scoring=None, n_local=0,
                 n_shared=0, shared_rule="constant", shared_weight=0.0, shared_divisor=0.0,
                 schema=False):
        """schema: the values come from an operator's caller and go to its
        schema too (renormalize a bool)."""
        def word(field):
            return f"{caller}: {names.get(field, field)}"
        t = RouteSpec()
        t.top_k = _int(word("top_k"), top_k, 0, _U32)
        t.n_group = _int(word("n_group"), n_group, 0, _U32)
        t.topk_group = _int(word("topk_group"), topk_group, 0, _U32)
        t.scoring = _choice(word("scoring"), scoring, SCORINGS)
        t.renormalize = _flag(word("renormalize"), renormalize, schema)
        self.renormalize = bool(t.renormalize) if schema else t.renormalize
        t.routed_scaling_factor = _number(word("routed_scaling_factor"), routed_scaling_factor)
        t.group_scoring = _choice(word("group_scoring"), group_scoring, GROUP_SCORINGS)
        t.n_local = _int(word("n_local"), n_local, 0, _U32)
        t.n_shared = _int(word("n_shared"), n_shared, 0, _U32)
        t.shared_rule = SHARED_RULES[shared_rule]
        t.shared_weight = _number(word("shared_weight"), shared_weight)
        t.shared_divisor = _number(word("shared_divisor"), shared_divisor)
        self.template = t
        self.top_k, self.n_shared = t.top_k, t.n_shared
        self.K = t.top_k + t.n_shared
        self.caller, self.names = caller, names
        self._specs = {}

    def spec(self, logits_dtype, n_expert, bias_dtype=0, bias_ptr=0, expert_map=0,
             count_dtype=0, count=0):
        """ctypes.byref(memra_route_spec) for a call: logits_dtype, bias_dtype,
        count_dtype are the library's enum values; the rest integers (the
        addresses those of the arm that runs, or stand-ins for a check)."""
        key = (logits_dtype, n_expert, bias_dtype, bias_ptr, expert_map, count_dtype, count)
        ref = self._specs.get(key)
        if ref is None:
            s = RouteSpec.from_buffer_copy(self.template)
            s.logits_dtype = logits_dtype
            s.n_expert = _int(f"{self.caller}: {self.names.get('n_expert', 'n_expert')}",
                              n_expert, 0, _U32)
            s.bias_dtype, s.bias_ptr = bias_dtype, bias_ptr
            s.expert_map = expert_map
            s.n_real_dtype, s.n_real = count_dtype, count
            if len(self._specs) >= _CACHE_MAX:
                self._specs.clear()
            ref = self._specs[key] = ctypes.byref(s)  # keeps s alive
        return ref

    def refuse(self, status, caller=None):
        """Raises the library's refusal that `status` reports, in the
        caller's words."""
        check(status, caller or self.caller, self.names)


# ---- the NumPy API --------------------------------------------------------------

# The library names a shared rule by its enum; the Python calls choose it
# by shared_divisor (shared_fields).
SHARED_RULE_WORDS = {"MEMRA_SHARED_ROUTED_SUM": "shared_divisor given",
                     "MEMRA_SHARED_CONSTANT": "shared_divisor None"}
# route_spec's keywords are the library's field names.
_SPEC_NAMES = dict({f: f for f in SPEC_FIELDS}, **SHARED_RULE_WORDS)


def _array(name, value, n, dtypes):
    """(address, array kept alive) for a NumPy-able 1-D array of n elements
    of one of `dtypes` (names), or an integer address kept alive by the
    caller; (0, None) for None or address 0, as the library reads 0: none.
    Nothing is converted: no silent rounding."""
    if value is None:
        return 0, None
    if isinstance(value, int) and not isinstance(value, bool):
        return _int(name, value, 0, _U64), None
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
               n_local=0, n_shared=0, shared_weight=None, shared_divisor=None, n_real=None,
               n_real_dtype=None):
    """A memra_route_spec for the host arm or a device call, judged by the
    library when made (memra_route_check), so a wrong one is refused here
    with the library's message.

    bias: a float32 array of n_expert (host, checked finite by the library,
    mirrored per layer on the device), or an integer host address; bias_ptr:
    an address the arm that runs reads in place (bias_dtype "float32" or
    "bfloat16"). group_scoring: "top2_sum", "max" or None for vLLM's rule
    (the library's MEMRA_GROUP_AUTO: top2_sum with a bias, max without).
    expert_map: an int32 array of n_expert (global expert -> local slot or
    -1) or an address in the arm's memory, with n_local slots. n_shared
    fused shared experts get shared_weight (1.0 unless given), or with
    shared_divisor SGLang's rule: the routed weights' sum / shared_divisor,
    renormalized and scaled as they are. n_real: the real-token count of a
    padded batch, read in place by the arm that runs: an address, or a
    NumPy array of one int32 or int64 (n_real_dtype "int32" or "int64" for
    an address). The spec keeps the arrays it was given alive."""
    if logits_dtype is None:
        logits_dtype = "bfloat16" if bf16 else "float32"
    cfg = RouteConfig(
        "route_spec", _SPEC_NAMES, top_k=top_k, n_group=n_group, topk_group=topk_group,
        scoring=scoring, renormalize=renormalize, routed_scaling_factor=routed_scaling_factor,
        group_scoring=group_scoring, n_local=n_local, n_shared=n_shared,
        **shared_fields(shared_weight, shared_divisor))
    E = _int("n_expert", n_expert, 0, _U32)
    bias_addr, bias_keep = _array("bias", bias, E, ("float32",))
    map_addr, map_keep = _array("expert_map", expert_map, E, ("int32",))
    count_addr, count_keep = 0, None
    if n_real is not None and not isinstance(n_real, int):
        import numpy as np
        count_keep = np.ascontiguousarray(n_real)
        if count_keep.dtype.name not in COUNT_DTYPES or count_keep.size != 1:
            raise InvalidArgError(f"n_real must be one int32 or int64 (an array of one), not "
                                  f"{count_keep.dtype} {count_keep.shape}")
        count_addr = count_keep.ctypes.data
        if n_real_dtype is not None and n_real_dtype != count_keep.dtype.name:
            # the arm would read n_real_dtype's bytes from this array
            raise InvalidArgError(f"n_real is {count_keep.dtype}, but n_real_dtype is "
                                  f"{n_real_dtype!r} (give it for an address only)")
        n_real_dtype = count_keep.dtype.name
    elif n_real is not None:
        count_addr = _int("n_real", n_real, 0, _U64)
    ref = cfg.spec(_choice("logits_dtype", logits_dtype, LOGITS_DTYPES), E,
                   _choice("bias_dtype", bias_dtype, BIAS_DTYPES),
                   0 if bias_ptr is None else _int("bias_ptr", bias_ptr, 0, _U64), map_addr,
                   _choice("n_real_dtype", n_real_dtype or "int32", COUNT_DTYPES), count_addr)
    s = ref._obj
    s.bias = bias_addr or None
    # The spec alone: an empty call of the host arm checks nothing else.
    st = lib().memra_route_check(CALLS["route_tables_host"], 0, 0, ref, 0, None, None, 0, 0, 0, 0)
    if st:
        cfg.refuse(st)
    s._keep = (bias_keep, map_keep, count_keep)
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
    n_tokens = _int("n_tokens (logits.shape[0])", n_tokens, 0, _U32)
    spec.pop("bf16", None)
    s = route_spec(n_expert, top_k, logits_dtype=dtype, **spec)
    K = s.top_k + s.n_shared
    n_slots = (s.n_local if s.expert_map else n_expert) + s.n_shared
    m, keep = _planes_numpy(macros, n_slots)
    sl = slabs(bases, strides)
    mref = ctypes.byref(m) if m else None
    L = lib()
    if n_tokens * K > MAX_PAIRS:
        # Refused by the library: asked before the outputs are allocated
        # (stand-in addresses: only the count is wrong).
        check(L.memra_route_check(CALLS["route_tables_host"], logits.ctypes.data, n_tokens,
                                  ctypes.byref(s), 0, mref, ctypes.byref(sl), 64, 64, 64, 64),
              "route_tables_host")
    n = n_tokens * K
    sel = np.empty(n, np.int32)
    selw = np.empty(n, np.float32)
    ptrs = np.empty(3 * n, np.uint64)
    scl = np.empty(3 * n, np.float32)
    f = Faults()
    st = L.memra_route_tables_host(logits.ctypes.data, n_tokens, ctypes.byref(s), mref,
                                   ctypes.byref(sl), sel.ctypes.data, selw.ctypes.data,
                                   ptrs.ctypes.data, scl.ctypes.data, ctypes.byref(f))
    del keep
    if st not in (0, 5, 6):  # 5, 6: faults, reported in f
        check(st, "route_tables_host")
    return sel, selw, ptrs, scl, f
