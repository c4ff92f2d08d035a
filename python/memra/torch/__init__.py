"""memra as PyTorch operators, shaped the way serving engines call routing.

    from memra.torch import grouped_topk, fused_topk   # vLLM's signatures
    topk_weights, topk_ids = grouped_topk(hidden_states, router_logits, 8, True,
                                          num_expert_group=8, topk_group=4,
                                          scoring_func="sigmoid",
                                          routed_scaling_factor=2.5,
                                          e_score_correction_bias=bias)

    from memra.torch.sglang import biased_grouped_topk  # SGLang's signatures

    import memra.torch as mt                             # routing and the tables, fused
    mt.route_prepare_layer(layer, macros, device)        # once per layer, before capture
    ids, weights, ptrs, scl = mt.route_tables(logits, 8, layer, bases, strides, ...)

Operators (torch.ops.memra.*, each with a CUDA implementation, one launch on
the current stream, and a CPU one, the host arm, bit-identical):

- ``grouped_topk`` and ``fused_topk``: vLLM's functions of the same names,
  argument for argument (names, order, defaults) and output for output
  (``topk_weights`` float32 [T, topk], ``topk_ids`` int32 [T, topk]; fused_topk
  also ``token_expert_indices``): swap the import, nothing else.
- ``memra.torch.sglang``: SGLang's ``biased_grouped_topk``, ``grouped_topk``
  and ``fused_topk`` and sgl-kernel's ``moe_fused_gate``, the same way
  (fused shared experts by SGLang's rule, padded batches).
- ``route_tables``: router logits to ``ids`` int32 [T, K], ``weights`` float32
  [T, K] and the tables ``ptrs`` int64 [3, T, K] (the uint64 pointer bits)
  and ``scl`` float32 [3, T, K] (gate, up, down), K = top_k + n_shared.
- ``vrows_tables_`` (in place) and ``vrows_tables``: the tables from a
  selection made elsewhere (``sel`` int32, ``selw`` float32, any shape).
- ``moe_align_block_size``: vLLM's function of the same name (the pairs
  grouped by expert for the expert GEMM, each expert's pairs in ascending
  index: the same bytes every call); ``sglang.moe_align_block_size``,
  sgl-kernel's out-parameter one; ``route_tables_layout``: route_tables and
  the layout of its ids in one call (one launch at decode sizes); call
  ``layout_prepare(device)`` before capturing a graph with layouts.

Logits are float32, bfloat16 or float16; a bias (``e_score_correction_bias``)
is float32 or bfloat16 on the logits' device, read in place, or float16
(read as a float32 copy made on the call's stream, the same values); zero tokens
give empty outputs. Group scoring follows vLLM unless given: the sum of a
group's two best scores with a bias, its best score without. Routing is not
differentiable: outputs never require grad.

Every rule of a call is the library's: a call it refuses raises the
library's message, with its field names replaced by the caller's argument
names, from the operator and from its fake alike (memra_route_check).

Layers: a layer's macro planes are given once, by ``route_prepare_layer``
(routing) or ``prepare_layer`` (the table op), per device and model; every
later call on the layer uses them (a layer never prepared has none). The
ops themselves take only device tensors and numbers, so a step that calls
them can be captured in a CUDA graph, by hand or by
torch.compile(mode="reduce-overhead"): prepare every layer before
capturing (None for a layer without planes), which also loads the kernels.

Faults (out-of-range ids, non-finite values) are counted, not raised: read
them with ``faults(device)``, on the current stream; for CPU tensors,
``faults("cpu")``.

Engines: one per (device, model), created once (a lock makes two threads'
first calls share one). Two models with the same layer indices (the draft
and the target of speculative decoding) pass different ``model`` names.

Eager calls of the functions here skip the dispatcher when nothing needs it
(no tracing, no compile, no mode, plain tensors) and call the
implementation the operator would reach; the result is the operator's.
"""
from typing import List, Optional

import torch

from .. import _torch_layout as _layout
from .. import _torch_ops as _ops
from .._torch_engines import engine, faults
from .._torch_layout import layout_prepare
from .._torch_planes import prepare_layer, route_prepare_layer

__all__ = ["fused_topk", "grouped_topk", "route_tables", "route_prepare_layer",
           "vrows_tables_", "vrows_tables", "prepare_layer", "engine", "faults", "sglang",
           "moe_align_block_size", "route_tables_layout", "layout_prepare"]

_PLAIN = (torch.Tensor, torch.nn.Parameter)
_is_compiling = torch.compiler.is_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
try:
    _functorch = torch._C._functorch.peek_interpreter_stack
except AttributeError:  # pragma: no cover
    def _functorch():
        return None


def _direct(*tensors):
    """Whether the dispatcher would hand these arguments straight to the
    CPU or CUDA implementation: not compiling (the functions here check that
    first, and go straight to the operator: building a configuration, with
    ctypes, is not traceable) or tracing, no dispatch or
    function mode, no functorch transform, plain tensors on the CPU or a
    CUDA device. (Autograd adds nothing: the ops run below it, their
    outputs never require grad, so a tensor that requires grad, as a bias
    that is an nn.Parameter does, changes nothing.)"""
    if _is_compiling() or _dispatch_modes() or _function_modes() or _functorch() is not None:
        return False
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN or not (t.is_cuda or t.is_cpu)):
            return False
    return True


_route_op = torch.ops.memra.route_tables.default
_grouped_op = torch.ops.memra.grouped_topk.default
_fused_op = torch.ops.memra.fused_topk.default
_vrows_inplace_op = torch.ops.memra.vrows_tables_.default
_vrows_op = torch.ops.memra.vrows_tables.default
_align_op = torch.ops.memra.moe_align_block_size.default
_route_layout_op = torch.ops.memra.route_tables_layout.default


def grouped_topk(hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int,
                 renormalize: bool, num_expert_group: int = 0, topk_group: int = 0,
                 scoring_func: str = "softmax", routed_scaling_factor: float = 1.0,
                 e_score_correction_bias: Optional[torch.Tensor] = None):
    """vLLM's grouped_topk (DeepSeek-V2/V3 routing): (topk_weights float32
    [T, topk], topk_ids int32 [T, topk]), experts listed best first."""
    if _is_compiling():  # the operator, whose fake judges the call at trace time
        return _grouped_op(hidden_states, gating_output, topk, renormalize, num_expert_group,
                           topk_group, scoring_func, routed_scaling_factor,
                           e_score_correction_bias)
    cfg = _ops.grouped_topk_config(topk, renormalize, num_expert_group, topk_group,
                                   scoring_func, routed_scaling_factor)
    if _direct(hidden_states, gating_output, e_score_correction_bias):
        return _ops.grouped_topk_impl(hidden_states, gating_output, topk, renormalize,
                                      num_expert_group, topk_group, scoring_func,
                                      routed_scaling_factor, e_score_correction_bias, cfg)
    return _grouped_op(hidden_states, gating_output, topk, cfg.renormalize, num_expert_group,
                       topk_group, scoring_func, routed_scaling_factor, e_score_correction_bias)


def fused_topk(hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int,
               renormalize: bool, indices_type: Optional[torch.dtype] = None,
               scoring_func: str = "softmax"):
    """vLLM's fused_topk: (topk_weights float32 [T, topk], topk_ids
    (indices_type, int32 by default) [T, topk], token_expert_indices int32
    [T, topk])."""
    if _is_compiling():
        return _fused_op(hidden_states, gating_output, topk, renormalize, indices_type,
                         scoring_func)
    cfg = _ops.fused_topk_config(topk, renormalize, scoring_func)
    if _direct(hidden_states, gating_output):
        return _ops.fused_topk_impl(hidden_states, gating_output, topk, renormalize,
                                    indices_type, scoring_func, cfg)
    return _fused_op(hidden_states, gating_output, topk, cfg.renormalize, indices_type,
                     scoring_func)


def route_tables(logits: torch.Tensor, top_k: int, layer: int, bases: List[int] = (0, 0, 0),
                 strides: List[int] = (0, 0, 0), scoring: str = "softmax", n_group: int = 1,
                 topk_group: int = 1, renormalize: bool = False,
                 routed_scaling_factor: float = 1.0, bias: Optional[torch.Tensor] = None,
                 group_scoring: Optional[str] = None, expert_map: Optional[torch.Tensor] = None,
                 n_local: int = 0, n_shared: int = 0, shared_weight: Optional[float] = None,
                 model: str = "", shared_divisor: Optional[float] = None,
                 n_real: Optional[torch.Tensor] = None):
    """Router logits [T, n_expert] to (ids int32 [T, K], weights float32 [T,
    K], ptrs int64 [3, T, K], scl float32 [3, T, K]), K = top_k + n_shared,
    in one launch on the current stream (CUDA) or by the host arm (CPU).

    layer: whose planes (route_prepare_layer) the tables use; no default, so
    it never shares a layer index with the table op by accident. bases,
    strides: the gate/up/down slabs (device addresses, bytes per expert).
    group_scoring: "top2_sum", "max", or None for vLLM's rule. bias: float32
    or bfloat16 [n_expert] on the logits' device. expert_map: int32
    [n_expert] on the logits' device, global expert -> local slot or -1
    (NULL pointers, +0 scales, counted in faults().not_local), with n_local
    slots. n_shared fused shared experts (ids n_expert + i) follow the routed
    ones with weight shared_weight (1.0 unless given), or, with
    shared_divisor, by SGLang's rule: the routed scores' sum /
    shared_divisor, renormalized and scaled as the routed weights. n_real:
    the count of real tokens of a padded batch (one int32 or int64 on the
    logits' device, read in place): rows past it get id -1, weight +0, NULL
    pointers and +0 scales (faults().padded counts them)."""
    if _is_compiling():
        return _route_op(logits, top_k, layer, list(bases), list(strides), scoring, n_group,
                         topk_group, renormalize, routed_scaling_factor, bias, group_scoring,
                         expert_map, n_local, n_shared, shared_weight, model, shared_divisor,
                         n_real)
    cfg = _ops.route_tables_config(top_k, scoring, n_group, topk_group, renormalize,
                                   routed_scaling_factor, group_scoring, n_local, n_shared,
                                   shared_weight, shared_divisor)
    if _direct(logits, bias, expert_map, n_real):
        return _ops.route(cfg, logits, bias, expert_map, n_real, layer, list(bases),
                          list(strides), model, True)
    return _route_op(logits, top_k, layer, list(bases), list(strides), scoring, n_group,
                     topk_group, cfg.renormalize, routed_scaling_factor, bias, group_scoring,
                     expert_map, n_local, n_shared, shared_weight, model, shared_divisor, n_real)


def vrows_tables_(sel: torch.Tensor, selw: torch.Tensor, ptrs: torch.Tensor, scl: torch.Tensor,
                  n_expert: int, layer: int, bases: List[int] = (0, 0, 0),
                  strides: List[int] = (0, 0, 0), expert_map: Optional[torch.Tensor] = None,
                  n_local: int = 0, n_shared: int = 0, model: str = "") -> None:
    """Builds the tables of sel (int32) and selw (float32), any shape, n
    pairs, into ptrs (int64, 3n) and scl (float32, 3n), plane-major (gate,
    up, down), with layer `layer`'s planes (prepare_layer)."""
    if _direct(sel, selw, ptrs, scl, expert_map):
        return _ops.vrows(_ops._VROWS["vrows_tables_"], sel, selw, ptrs, scl, n_expert, layer,
                          list(bases), list(strides), expert_map, n_local, n_shared, model)
    return _vrows_inplace_op(sel, selw, ptrs, scl, n_expert, layer, list(bases), list(strides),
                             expert_map, n_local, n_shared, model)


def vrows_tables(sel: torch.Tensor, selw: torch.Tensor, n_expert: int, layer: int,
                 bases: List[int] = (0, 0, 0), strides: List[int] = (0, 0, 0),
                 expert_map: Optional[torch.Tensor] = None, n_local: int = 0, n_shared: int = 0,
                 model: str = ""):
    """Functional form: returns (ptrs int64 [3, *sel.shape], scl float32 [3,
    *sel.shape])."""
    if _direct(sel, selw, expert_map):
        return _ops.vrows_tables_impl(sel, selw, n_expert, layer, list(bases), list(strides),
                                      expert_map, n_local, n_shared, model)
    return _vrows_op(sel, selw, n_expert, layer, list(bases), list(strides), expert_map,
                     n_local, n_shared, model)


def moe_align_block_size(topk_ids: torch.Tensor, block_size: int, num_experts: int,
                         expert_map: Optional[torch.Tensor] = None, pad_sorted_ids: bool = False,
                         ignore_invalid_experts: bool = False):
    """vLLM's moe_align_block_size, argument for argument: the pairs of
    topk_ids (int32 or int64, any shape, pair p its p-th element) grouped by expert,
    each expert's run padded to block_size with the sentinel
    topk_ids.numel(): (sorted_ids int32 [topk_ids.numel() + num_experts *
    (block_size - 1)], rounded up to block_size with pad_sorted_ids, at most
    topk_ids.numel() * block_size; expert_ids int32 [cdiv(that,
    block_size)], each block's expert, through expert_map (int32
    [num_experts], -1: another rank's) when given, -1 past the last run;
    num_tokens_post_pad int32 [1]). Inside an expert, pairs in ascending
    index: the same bytes every call, on the GPU and the CPU. Ids outside
    [0, num_experts) (a padding row's -1) are in no run.
    ignore_invalid_experts=True (vLLM's option; with expert_map only): other
    ranks' pairs are in no run and each block is labelled with its local
    id, the runs in local-id order, as vLLM's kernel lays them out when
    handed the map (the sizes stay num_experts'). A map value outside
    [-1, num_experts) puts its pairs in no run (vLLM's kernel would index
    past its counts)."""
    if _layout.ignore_invalid(ignore_invalid_experts) and expert_map is not None:
        topk_ids, expert_map = _layout.local_ids(topk_ids, num_experts, expert_map), None
    if _is_compiling():  # the operator, whose fake judges the call at trace time
        return _align_op(topk_ids, block_size, num_experts, expert_map, pad_sorted_ids)
    if _direct(topk_ids, expert_map) or not isinstance(topk_ids, torch.Tensor):
        return _layout.moe_align_block_size_impl(topk_ids, block_size, num_experts, expert_map,
                                                 pad_sorted_ids)
    return _align_op(topk_ids, block_size, num_experts, expert_map, pad_sorted_ids)


def route_tables_layout(logits: torch.Tensor, top_k: int, layer: int, block_size: int,
                        bases: List[int] = (0, 0, 0), strides: List[int] = (0, 0, 0),
                        scoring: str = "softmax", n_group: int = 1, topk_group: int = 1,
                        renormalize: bool = False, routed_scaling_factor: float = 1.0,
                        bias: Optional[torch.Tensor] = None, group_scoring: Optional[str] = None,
                        expert_map: Optional[torch.Tensor] = None, n_local: int = 0,
                        n_shared: int = 0, shared_weight: Optional[float] = None, model: str = "",
                        shared_divisor: Optional[float] = None,
                        n_real: Optional[torch.Tensor] = None, pad_sorted_ids: bool = False):
    """route_tables and the expert-sorted layout of its choice in one call
    (one launch at decode sizes, memra_route_tables_ex's rule; the layout's
    own launches after the routing's above): (ids, weights, ptrs, scl) as
    route_tables gives them, then (sorted_ids, expert_ids,
    num_tokens_post_pad) as moe_align_block_size(ids, block_size, n_expert +
    n_shared, pad_sorted_ids=pad_sorted_ids) gives them, with expert_ids
    through expert_map as the tables place the pairs (other ranks' blocks
    -1, a shared expert's its slot n_local + i); padding rows (n_real) are
    in no run. Arguments as route_tables', block_size the expert GEMM's
    BLOCK_SIZE_M. On a GPU a layer's calls must not overlap in time (one
    step after another, as a model's are): the engine keeps a count per
    layer that the launch's blocks share; call layout_prepare(device) before
    capturing a graph."""
    if _is_compiling():
        return _route_layout_op(logits, top_k, layer, block_size, list(bases), list(strides),
                                scoring, n_group, topk_group, renormalize, routed_scaling_factor,
                                bias, group_scoring, expert_map, n_local, n_shared,
                                shared_weight, model, shared_divisor, n_real, pad_sorted_ids)
    cfg = _layout.route_tables_layout_config(top_k, scoring, n_group, topk_group, renormalize,
                                             routed_scaling_factor, group_scoring, n_local,
                                             n_shared, shared_weight, shared_divisor)
    if _direct(logits, bias, expert_map, n_real):
        return _layout.route_layout(cfg, logits, bias, expert_map, n_real, layer, list(bases),
                                    list(strides), model, block_size, pad_sorted_ids)
    return _route_layout_op(logits, top_k, layer, block_size, list(bases), list(strides),
                            scoring, n_group, topk_group, cfg.renormalize, routed_scaling_factor,
                            bias, group_scoring, expert_map, n_local, n_shared, shared_weight,
                            model, shared_divisor, n_real, pad_sorted_ids)


from . import sglang  # noqa: E402  (SGLang's shapes; registers their operators)
