"""The PyTorch operators (torch.ops.memra.*): schemas, argument checks, and
the implementations for CUDA tensors (one launch of the library's kernel on
the current stream) and CPU tensors (the library's host arm, the same bits).

Registered with torch.library.Library rather than torch.library.custom_op:
the dispatcher reaches a Library kernel in less than half of custom_op's
time (benchmarks/bench_torch.py measures both). Each op has a fake
implementation that runs the same argument checks as the real one, so
FakeTensor tracing, torch.compile(fullgraph=True) and opcheck refuse a wrong
dtype, shape or device exactly where the op would.

Nothing here synchronises, allocates through the library or reads a host
tensor on the hot path: the ops take device tensors and numbers only (the
macro planes are prepared beforehand, _torch_planes.py), so a step that
calls them can be captured in a CUDA graph, also by torch.compile's
mode="reduce-overhead"."""
import ctypes
from typing import List, Optional

import torch

import memra
from memra import _lib
from memra._route import MAX_PAIRS, check_spec, default_group_scoring, make_spec

from . import _torch_planes as planes
from ._torch_engines import current_stream, engine_at, host_faults

LIB = torch.library.Library("memra", "DEF")

_I63 = 1 << 63
_U32 = 1 << 32
_LOGITS = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
_BIAS = {torch.float32: "float32", torch.bfloat16: "bfloat16"}
_DEVICES = ("cuda", "cpu")


# ---- argument checks, shared by the real and the fake implementations ------

def _tensor(name, t, dtypes, device=None, what=None):
    """A tensor of one of `dtypes` on `device` (or on a CPU or CUDA device)."""
    if not isinstance(t, torch.Tensor):
        raise memra.InvalidArgError(f"{name} must be a tensor, not {type(t).__name__}")
    if t.dtype not in dtypes:
        want = " or ".join(str(d) for d in dtypes)
        raise memra.InvalidArgError(f"{name} is {t.dtype}, want {want}")
    if device is None:
        if t.device.type not in _DEVICES and t.device.type != "meta":
            raise memra.InvalidArgError(f"{name} is on {t.device}, not the CPU or a CUDA device")
    elif t.device != device:
        raise memra.InvalidArgError(f"{name} is on {t.device}, but {what} is on {device}")


def _vector(name, t, dtypes, n, device, what):
    """An optional 1-D contiguous tensor of n elements on `device`."""
    if t is None:
        return
    _tensor(name, t, dtypes, device, what)
    if t.dim() != 1 or t.shape[0] != n:
        raise memra.InvalidArgError(f"{name} has shape {tuple(t.shape)}, want ({n},)")
    if not t.is_contiguous():
        raise memra.InvalidArgError(f"{name} is not contiguous")


def _triples(bases, strides):
    for name, v in (("bases", bases), ("strides", strides)):
        if len(v) != 3:
            raise memra.InvalidArgError(f"{name} must be three ints (gate, up, down), not "
                                        f"{len(v)}")
        for k, x in enumerate(v):
            if not 0 <= x < _I63:
                raise memra.InvalidArgError(f"{name}[{k}] = {x} is outside [0, 2^63)")


def _slab_fits(bases, strides, n_slots):
    """The library's rule: the last slot's row is addressable (base +
    (n_slots - 1) * stride below 2^64)."""
    for k in range(3):
        if bases[k] + (n_slots - 1) * strides[k] >= 1 << 64:
            raise memra.SlabOverflowError(
                f"bases[{k}] {bases[k]:#x} + (n_slots - 1 = {n_slots - 1}) * strides[{k}] "
                f"{strides[k]} passes 2^64")


def _layer(layer):
    if not 0 <= layer < memra.MAX_LAYERS:
        raise memra.InvalidArgError(f"layer = {layer} is outside [0, {memra.MAX_LAYERS})")


_VLLM_NAMES = {"n_expert": "n_expert", "top_k": "topk", "n_group": "num_expert_group",
               "topk_group": "topk_group", "routed_scaling_factor": "routed_scaling_factor",
               "n_local": "n_local", "n_shared": "n_shared", "shared_weight": "shared_weight",
               "scoring": "scoring_func"}
_MEMRA_NAMES = {k: k for k in _VLLM_NAMES}


def _check_route(logits, top_k, scoring, n_group, topk_group, scale, bias, group_scoring,
                 expert_map, n_local, n_shared, shared_weight, names=_MEMRA_NAMES,
                 logits_name="logits", bias_name="bias"):
    """Checks a routing call; returns (n_tokens, n_expert, K, group scoring)."""
    _tensor(logits_name, logits, _LOGITS)
    if logits.dim() != 2:
        raise memra.InvalidArgError(f"{logits_name} must be [n_tokens, n_expert], not "
                                    f"{tuple(logits.shape)}")
    n_tokens, n_expert = logits.shape
    _vector(bias_name, bias, _BIAS, n_expert, logits.device, logits_name)
    _vector("expert_map", expert_map, (torch.int32,), n_expert, logits.device, logits_name)
    check_spec(n_expert, top_k, scoring, n_group, topk_group, scale, n_local, n_shared,
               shared_weight, expert_map is not None, names)
    K = top_k + n_shared
    if n_tokens >= _U32 or n_tokens * K > MAX_PAIRS:
        raise memra.InvalidArgError(f"{logits_name} has {n_tokens} tokens: n_tokens * "
                                    f"({names['top_k']} + n_shared) must be at most {MAX_PAIRS}")
    gs = default_group_scoring(group_scoring, bias is not None)
    return n_tokens, n_expert, K, gs


def _tokens_match(hidden_states, gating_output):
    return (isinstance(hidden_states, torch.Tensor) and isinstance(gating_output, torch.Tensor)
            and hidden_states.dim() >= 1 and gating_output.dim() >= 1 and
            hidden_states.shape[0] == gating_output.shape[0] and
            hidden_states.device == gating_output.device)


def _check_tokens(hidden_states, gating_output):
    """vLLM's check: one row of hidden states per row of router logits."""
    _tensor("gating_output", gating_output, _LOGITS)
    if not isinstance(hidden_states, torch.Tensor):
        raise memra.InvalidArgError(f"hidden_states must be a tensor, not "
                                    f"{type(hidden_states).__name__}")
    if hidden_states.device != gating_output.device:
        raise memra.InvalidArgError(f"hidden_states is on {hidden_states.device}, but "
                                    f"gating_output is on {gating_output.device}")
    if hidden_states.dim() < 1 or gating_output.dim() < 1 or \
            hidden_states.shape[0] != gating_output.shape[0]:
        raise memra.InvalidArgError(
            f"Number of tokens mismatch: hidden_states {tuple(hidden_states.shape)}, "
            f"gating_output {tuple(gating_output.shape)}")


# ---- the launch (CUDA) or the host arm (CPU) -------------------------------

_configs = {}
_slabs = {}
_ZERO_SLAB = (0, 0, 0)
_CACHE_MAX = 4096  # bounded: a process that keeps making new biases or maps


def _config(logits, top_k, scoring, n_group, topk_group, renormalize, scale, bias, group_scoring,
            expert_map, n_local, n_shared, shared_weight, names, logits_name, bias_name):
    """(K, ctypes.byref(memra_route_spec)) for a call, from a cache keyed by
    every field of the spec, the bias's and the map's addresses included: a
    cached spec is never changed (threads share it), and a configuration is
    checked once, when first seen. The tensors' own properties that the key
    does not hold are checked on every call."""
    bias_ptr = 0 if bias is None else bias.data_ptr()
    map_ptr = 0 if expert_map is None else expert_map.data_ptr()
    key = (logits.dtype, logits.shape[1], top_k, scoring, n_group, topk_group, renormalize,
           scale, None if bias is None else bias.dtype, bias_ptr, group_scoring, map_ptr,
           n_local, n_shared, shared_weight)
    hit = _configs.get(key)
    if hit is None:
        _, E, K, gs = _check_route(logits, top_k, scoring, n_group, topk_group, scale, bias,
                                   group_scoring, expert_map, n_local, n_shared,
                                   shared_weight, names, logits_name, bias_name)
        spec = make_spec(E, top_k, scoring, n_group, topk_group, renormalize, float(scale),
                         _LOGITS[logits.dtype], gs, _BIAS[bias.dtype] if bias is not None
                         else "float32", bias_ptr, map_ptr, n_local, n_shared,
                         float(shared_weight))
        if len(_configs) >= _CACHE_MAX:
            _configs.clear()
        hit = _configs[key] = (K, ctypes.byref(spec))
        return hit
    # What the key does not pin down: the bias's and the map's shape, device
    # and layout (a cached dtype and address says nothing of them).
    for t in (bias, expert_map):
        if t is not None and (t.dim() != 1 or t.shape[0] != key[1] or
                              t.device != logits.device or not t.is_contiguous()):
            _check_route(logits, top_k, scoring, n_group, topk_group, scale, bias,
                         group_scoring, expert_map, n_local, n_shared, shared_weight, names,
                         logits_name, bias_name)
    return hit


def _slab_ref(bases, strides, n_slots):
    key = (*bases, *strides, n_slots)
    ref = _slabs.get(key)
    if ref is None:
        _triples(bases, strides)
        _slab_fits(bases, strides, n_slots)
        s = _lib.Slabs()
        s.base[:] = bases
        s.stride[:] = strides
        if len(_slabs) >= _CACHE_MAX:
            _slabs.clear()
        ref = _slabs[key] = ctypes.byref(s)
    return ref


def _empty(like, shape, dtype):
    return torch.empty(shape, dtype=dtype, device=like.device)


def route(logits, top_k, layer, bases, strides, scoring, n_group, topk_group, renormalize,
          scale, bias, group_scoring, expert_map, n_local, n_shared, shared_weight, model,
          names=_MEMRA_NAMES, logits_name="logits", bias_name="bias"):
    """Routes and builds the tables: (ids int32 [T, K], weights float32 [T,
    K], ptrs int64 [3, T, K], scl float32 [3, T, K]). layer None: no macro
    planes, zero slabs, and the tables written to one scratch buffer and
    dropped ((ids, weights, None, None)), for the callers that want only the
    choice."""
    if not (isinstance(logits, torch.Tensor) and logits.dtype in _LOGITS and
            logits.dim() == 2 and (logits.is_cuda or logits.is_cpu)):
        _check_route(logits, top_k, scoring, n_group, topk_group, scale, bias, group_scoring,
                     expert_map, n_local, n_shared, shared_weight, names, logits_name,
                     bias_name)
    K, spec = _config(logits, top_k, scoring, n_group, topk_group, renormalize, scale, bias,
                      group_scoring, expert_map, n_local, n_shared, shared_weight, names,
                      logits_name, bias_name)
    T = logits.shape[0]
    if T * K > MAX_PAIRS:
        _check_route(logits, top_k, scoring, n_group, topk_group, scale, bias, group_scoring,
                     expert_map, n_local, n_shared, shared_weight, names, logits_name,
                     bias_name)
    cuda = logits.is_cuda
    dev = logits.get_device() if cuda else -1
    if layer is None:
        macros, il = None, 0
        slab = _slab_ref(_ZERO_SLAB, _ZERO_SLAB, 1)
    else:
        _layer(layer)
        entry = planes.lookup(dev, model, "route", layer)
        n_slots = (n_local if expert_map is not None else logits.shape[1]) + n_shared
        if entry.n_slots and entry.n_slots != n_slots:
            raise memra.InvalidArgError(
                f"layer {layer}'s planes hold {entry.n_slots} experts, this call has {n_slots} "
                f"(n_expert or n_local, plus n_shared): prepare the layer with its planes "
                f"for this configuration")
        slab = _slab_ref(bases, strides, n_slots)
        macros, il = entry.macros, layer
    ids = _empty(logits, (T, K), torch.int32)
    weights = _empty(logits, (T, K), torch.float32)
    n = T * K
    if layer is None:
        # ptrs (8 bytes a pair and plane) then scl (4): one allocation.
        ptrs = scl = None
        scratch = _empty(logits, (3 * n + (3 * n + 1) // 2,), torch.int64)
        p_ptrs = scratch.data_ptr()
        p_scl = p_ptrs + 24 * n
    else:
        ptrs = _empty(logits, (3, T, K), torch.int64)
        scl = _empty(logits, (3, T, K), torch.float32)
        p_ptrs, p_scl = ptrs.data_ptr(), scl.data_ptr()
    if T == 0:
        return ids, weights, ptrs, scl
    logits = logits.contiguous()
    L = memra.lib()
    if cuda:
        st = L.memra_route_tables(engine_at(dev, model)._ptr(), logits.data_ptr(), T, spec,
                                      il, macros, slab, ids.data_ptr(), weights.data_ptr(),
                                      p_ptrs, p_scl, current_stream(dev))
        if st:
            memra.check(st)
    else:
        f = _lib.Faults()
        st = L.memra_route_tables_host(logits.data_ptr(), T, spec, macros, slab, ids.data_ptr(),
                                       weights.data_ptr(), p_ptrs, p_scl, ctypes.byref(f))
        if st not in (0, 5, 6):  # 5, 6: faults, counted as the device counts them
            memra.check(st)
        host_faults.add(f)
    return ids, weights, ptrs, scl


def route_fake(logits, top_k, layer, bases, strides, scoring, n_group, topk_group,
               renormalize, scale, bias, group_scoring, expert_map, n_local, n_shared,
               shared_weight, model, names=_MEMRA_NAMES, logits_name="logits",
               bias_name="bias"):
    T, E, K, _ = _check_route(logits, top_k, scoring, n_group, topk_group, scale, bias,
                              group_scoring, expert_map, n_local, n_shared, shared_weight,
                              names, logits_name, bias_name)
    if layer is not None:
        _layer(layer)
        _triples(bases, strides)
        _slab_fits(bases, strides, (n_local if expert_map is not None else E) + n_shared)
    return (logits.new_empty((T, K), dtype=torch.int32),
            logits.new_empty((T, K), dtype=torch.float32),
            logits.new_empty((3, T, K), dtype=torch.int64),
            logits.new_empty((3, T, K), dtype=torch.float32))


def _check_vrows(sel, selw, ptrs, scl, n_expert, layer, bases, strides, expert_map, n_local,
                 n_shared):
    """Checks a table call; returns (n_pairs, n_slots)."""
    _tensor("sel", sel, (torch.int32,))
    n = sel.numel()
    if n > MAX_PAIRS:
        raise memra.InvalidArgError(f"sel holds {n} pairs, more than {MAX_PAIRS}")
    _tensor("selw", selw, (torch.float32,), sel.device, "sel")
    if selw.numel() != n:
        raise memra.InvalidArgError(f"selw holds {selw.numel()} elements, want {n} (sel's)")
    for name, t, dtype in (("ptrs", ptrs, torch.int64), ("scl", scl, torch.float32)):
        if t is None:
            continue
        _tensor(name, t, (dtype,), sel.device, "sel")
        if t.numel() != 3 * n:
            raise memra.InvalidArgError(f"{name} holds {t.numel()} elements, want {3 * n}")
        if not t.is_contiguous():
            raise memra.InvalidArgError(f"{name} is not contiguous")
    if not 1 <= n_expert < _U32:
        raise memra.InvalidArgError(f"n_expert = {n_expert} is outside [1, 2^32)")
    _layer(layer)
    _vector("expert_map", expert_map, (torch.int32,), n_expert, sel.device, "sel")
    has_map = expert_map is not None
    if has_map and not 1 <= n_local < 1 << 31:
        raise memra.InvalidArgError(f"n_local = {n_local} must be in [1, 2^31) with an "
                                    f"expert_map")
    if not has_map and n_local != 0:
        raise memra.InvalidArgError(f"n_local = {n_local} without an expert_map (give the map, "
                                    f"or 0)")
    base = n_local if has_map else n_expert
    if not 0 <= n_shared or n_expert + n_shared >= 1 << 31 or base + n_shared >= 1 << 31:
        raise memra.InvalidArgError(f"n_shared = {n_shared}: the ids and slots of the shared "
                                    f"experts pass 2^31 - 1")
    n_slots = base + n_shared
    _triples(bases, strides)
    _slab_fits(bases, strides, n_slots)
    return n, n_slots


def vrows(sel, selw, ptrs, scl, n_expert, layer, bases, strides, expert_map, n_local, n_shared,
          model):
    """The table op into ptrs and scl (3 * n elements each)."""
    n, n_slots = _check_vrows(sel, selw, ptrs, scl, n_expert, layer, bases, strides,
                              expert_map, n_local, n_shared)
    cuda = sel.is_cuda
    dev = sel.get_device() if cuda else -1
    entry = planes.lookup(dev, model, "vrows", layer)
    if entry.n_slots and entry.n_slots != n_slots:
        raise memra.InvalidArgError(
            f"layer {layer}'s planes hold {entry.n_slots} experts, this call has {n_slots} "
            f"(n_expert or n_local, plus n_shared): prepare the layer with its planes for "
            f"this configuration")
    if n == 0:
        return
    sel, selw = sel.contiguous(), selw.contiguous()
    slab = _slab_ref(bases, strides, n_slots)
    opts = None
    if expert_map is not None or n_shared:
        o = _lib.VrowsOptions()
        o.expert_map = expert_map.data_ptr() if expert_map is not None else 0
        o.n_local, o.n_shared = n_local, n_shared
        opts = ctypes.byref(o)
    L = memra.lib()
    if cuda:
        eng = engine_at(dev, model)
        st = L.memra_vrows_tables_ex(eng._ptr(), sel.data_ptr(), selw.data_ptr(), n,
                                         n_expert, layer, entry.macros, slab, opts,
                                         ptrs.data_ptr(), scl.data_ptr(), current_stream(dev))
        if st:
            memra.check(st)
    else:
        f = _lib.Faults()
        st = L.memra_vrows_tables_host_ex(sel.data_ptr(), selw.data_ptr(), n, n_expert,
                                          entry.macros, slab, opts, ptrs.data_ptr(),
                                          scl.data_ptr(), ctypes.byref(f))
        if st not in (0, 5, 6):
            memra.check(st)
        host_faults.add(f)


# ---- the operators -----------------------------------------------------------

LIB.define(
    "route_tables(Tensor logits, int top_k, int layer, int[] bases=[0, 0, 0], "
    "int[] strides=[0, 0, 0], str scoring='softmax', int n_group=1, int topk_group=1, "
    "bool renormalize=False, float routed_scaling_factor=1.0, Tensor? bias=None, "
    "str? group_scoring=None, Tensor? expert_map=None, int n_local=0, int n_shared=0, "
    "float shared_weight=1.0, str model='') -> (Tensor, Tensor, Tensor, Tensor)")


def route_tables_impl(logits: torch.Tensor, top_k: int, layer: int,
                      bases: List[int] = (0, 0, 0), strides: List[int] = (0, 0, 0),
                      scoring: str = "softmax", n_group: int = 1, topk_group: int = 1,
                      renormalize: bool = False, routed_scaling_factor: float = 1.0,
                      bias: Optional[torch.Tensor] = None, group_scoring: Optional[str] = None,
                      expert_map: Optional[torch.Tensor] = None, n_local: int = 0,
                      n_shared: int = 0, shared_weight: float = 1.0, model: str = ""):
    return route(logits, top_k, layer, bases, strides, scoring, n_group, topk_group,
                 renormalize, routed_scaling_factor, bias, group_scoring, expert_map, n_local,
                 n_shared, shared_weight, model)


def route_tables_fake(logits, top_k, layer, bases=(0, 0, 0), strides=(0, 0, 0),
                      scoring="softmax", n_group=1, topk_group=1, renormalize=False,
                      routed_scaling_factor=1.0, bias=None, group_scoring=None, expert_map=None,
                      n_local=0, n_shared=0, shared_weight=1.0, model=""):
    return route_fake(logits, top_k, layer, bases, strides, scoring, n_group, topk_group,
                      renormalize, routed_scaling_factor, bias, group_scoring, expert_map,
                      n_local, n_shared, shared_weight, model)


# vLLM's grouped_topk, argument for argument (names, order, defaults, return
# dtypes): vllm/model_executor/layers/fused_moe/router/grouped_topk_router.py,
# grouped_topk(hidden_states, gating_output, topk, renormalize,
# num_expert_group=0, topk_group=0, scoring_func="softmax",
# routed_scaling_factor=1.0, e_score_correction_bias=None) ->
# (topk_weights float32 [T, topk], topk_ids int32 [T, topk]). As there, a
# group scores the sum of its two best biased scores with a bias and its
# best score without one.
LIB.define(
    "grouped_topk(Tensor hidden_states, Tensor gating_output, int topk, bool renormalize, "
    "int num_expert_group=0, int topk_group=0, str scoring_func='softmax', "
    "float routed_scaling_factor=1.0, Tensor? e_score_correction_bias=None) "
    "-> (Tensor, Tensor)")


def grouped_topk_impl(hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int,
                      renormalize: bool, num_expert_group: int = 0, topk_group: int = 0,
                      scoring_func: str = "softmax", routed_scaling_factor: float = 1.0,
                      e_score_correction_bias: Optional[torch.Tensor] = None):
    if not _tokens_match(hidden_states, gating_output):
        _check_tokens(hidden_states, gating_output)
    ids, weights, _, _ = route(gating_output, topk, None, None, None, scoring_func,
                               num_expert_group, topk_group, renormalize,
                               routed_scaling_factor, e_score_correction_bias, None, None, 0, 0,
                               1.0, "", _VLLM_NAMES, "gating_output", "e_score_correction_bias")
    return weights, ids


def grouped_topk_fake(hidden_states, gating_output, topk, renormalize, num_expert_group=0,
                      topk_group=0, scoring_func="softmax", routed_scaling_factor=1.0,
                      e_score_correction_bias=None):
    _check_tokens(hidden_states, gating_output)
    ids, weights, _, _ = route_fake(gating_output, topk, None, None, None, scoring_func,
                                    num_expert_group, topk_group, renormalize,
                                    routed_scaling_factor, e_score_correction_bias, None, None,
                                    0, 0, 1.0, "", _VLLM_NAMES, "gating_output",
                                    "e_score_correction_bias")
    return weights, ids


# vLLM's fused_topk, argument for argument:
# vllm/model_executor/layers/fused_moe/router/fused_topk_router.py,
# fused_topk(hidden_states, gating_output, topk, renormalize, indices_type=None,
# scoring_func="softmax") -> (topk_weights float32 [T, topk], topk_ids
# (indices_type, int32 by default) [T, topk], token_expert_indices int32
# [T, topk]), token_expert_indices[t, k] = k * T + t as vLLM's topk_softmax
# kernel writes it (source_rows).
LIB.define(
    "fused_topk(Tensor hidden_states, Tensor gating_output, int topk, bool renormalize, "
    "ScalarType? indices_type=None, str scoring_func='softmax') -> (Tensor, Tensor, Tensor)")

# vLLM's all-to-all backends ask for int64 (DeepEP) or uint32 (pplx) ids.
_INDICES = (torch.int32, torch.int64) + ((torch.uint32,) if hasattr(torch, "uint32") else ())


def _check_indices_type(indices_type):
    if indices_type is not None and indices_type not in _INDICES:
        raise memra.InvalidArgError(f"indices_type is {indices_type}, want None or one of "
                                    f"{', '.join(str(d) for d in _INDICES)}")


def _token_expert_indices(like, T, K):
    return torch.arange(T * K, dtype=torch.int32, device=like.device).view(K, T).t().contiguous()


def fused_topk_impl(hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int,
                    renormalize: bool, indices_type: Optional[torch.dtype] = None,
                    scoring_func: str = "softmax"):
    if not _tokens_match(hidden_states, gating_output):
        _check_tokens(hidden_states, gating_output)
    _check_indices_type(indices_type)
    ids, weights, _, _ = route(gating_output, topk, None, None, None, scoring_func, 1, 1,
                               renormalize, 1.0, None, None, None, 0, 0, 1.0, "", _VLLM_NAMES,
                               "gating_output")
    if indices_type is not None and indices_type != torch.int32:
        ids = ids.to(indices_type)
    return weights, ids, _token_expert_indices(gating_output, ids.shape[0], topk)


def fused_topk_fake(hidden_states, gating_output, topk, renormalize, indices_type=None,
                    scoring_func="softmax"):
    _check_tokens(hidden_states, gating_output)
    _check_indices_type(indices_type)
    ids, weights, _, _ = route_fake(gating_output, topk, None, None, None, scoring_func, 1, 1,
                                    renormalize, 1.0, None, None, None, 0, 0, 1.0, "",
                                    _VLLM_NAMES, "gating_output")
    if indices_type is not None:
        ids = ids.new_empty(ids.shape, dtype=indices_type)
    return weights, ids, ids.new_empty(ids.shape, dtype=torch.int32)


LIB.define(
    "vrows_tables_(Tensor sel, Tensor selw, Tensor(a!) ptrs, Tensor(b!) scl, int n_expert, "
    "int layer, int[] bases=[0, 0, 0], int[] strides=[0, 0, 0], Tensor? expert_map=None, "
    "int n_local=0, int n_shared=0, str model='') -> ()")


def vrows_tables__impl(sel: torch.Tensor, selw: torch.Tensor, ptrs: torch.Tensor,
                       scl: torch.Tensor, n_expert: int, layer: int,
                       bases: List[int] = (0, 0, 0), strides: List[int] = (0, 0, 0),
                       expert_map: Optional[torch.Tensor] = None, n_local: int = 0,
                       n_shared: int = 0, model: str = "") -> None:
    vrows(sel, selw, ptrs, scl, n_expert, layer, bases, strides, expert_map, n_local, n_shared,
          model)


def vrows_tables__fake(sel, selw, ptrs, scl, n_expert, layer, bases=(0, 0, 0),
                       strides=(0, 0, 0), expert_map=None, n_local=0, n_shared=0, model=""):
    _check_vrows(sel, selw, ptrs, scl, n_expert, layer, bases, strides, expert_map, n_local,
                 n_shared)


LIB.define(
    "vrows_tables(Tensor sel, Tensor selw, int n_expert, int layer, int[] bases=[0, 0, 0], "
    "int[] strides=[0, 0, 0], Tensor? expert_map=None, int n_local=0, int n_shared=0, "
    "str model='') -> (Tensor, Tensor)")


def vrows_tables_impl(sel: torch.Tensor, selw: torch.Tensor, n_expert: int, layer: int,
                      bases: List[int] = (0, 0, 0), strides: List[int] = (0, 0, 0),
                      expert_map: Optional[torch.Tensor] = None, n_local: int = 0,
                      n_shared: int = 0, model: str = ""):
    _tensor("sel", sel, (torch.int32,))
    ptrs = _empty(sel, (3, *sel.shape), torch.int64)
    scl = _empty(sel, (3, *sel.shape), torch.float32)
    vrows(sel, selw, ptrs, scl, n_expert, layer, bases, strides, expert_map, n_local, n_shared,
          model)
    return ptrs, scl


def vrows_tables_fake(sel, selw, n_expert, layer, bases=(0, 0, 0), strides=(0, 0, 0),
                      expert_map=None, n_local=0, n_shared=0, model=""):
    _check_vrows(sel, selw, None, None, n_expert, layer, bases, strides, expert_map, n_local,
                 n_shared)
    return (sel.new_empty((3, *sel.shape), dtype=torch.int64),
            sel.new_empty((3, *sel.shape), dtype=torch.float32))


for _name, _impl, _fake in (("route_tables", route_tables_impl, route_tables_fake),
                            ("grouped_topk", grouped_topk_impl, grouped_topk_fake),
                            ("fused_topk", fused_topk_impl, fused_topk_fake),
                            ("vrows_tables_", vrows_tables__impl, vrows_tables__fake),
                            ("vrows_tables", vrows_tables_impl, vrows_tables_fake)):
    LIB.impl(_name, _impl, "CUDA")
    LIB.impl(_name, _impl, "CPU")
    torch.library.register_fake(f"memra::{_name}", _fake, lib=LIB)
