"""SGLang's routing functions, argument for argument: swap the import.

    from memra.torch.sglang import biased_grouped_topk   # instead of SGLang's

    topk_weights, topk_ids = biased_grouped_topk(
        hidden_states=hidden_states, gating_output=router_logits,
        correction_bias=gate.e_score_correction_bias, topk=9, renormalize=True,
        num_expert_group=8, topk_group=4, num_fused_shared_experts=1,
        routed_scaling_factor=2.5, num_token_non_padded=num_token_non_padded,
        expert_location_dispatch_info=None,
        apply_routed_scaling_factor_on_output=False)      # DeepSeek-V3, fused shared expert

The signatures are SGLang's (python/sglang/srt/layers/moe/topk.py at
sgl-project/sglang 06c48ca8da0b2c8aac15df74a768e6a012444064, and its main
at 000328a8, which changed fused_topk's and the grouped functions'
positional order: both are taken) and sgl-kernel's (moe_fused_gate); the outputs too: topk_weights float32 [T,
topk], topk_ids int32 [T, topk], topk counting the fused shared experts
(ids n_expert + i, last). What differs is the arithmetic, memra's own and
the same on every GPU and the CPU (docs/routing.md), and the choices
where SGLang's own paths disagree (memra follows its CUDA kernel, but for
the last):

- a shared expert's weight is (sum of the routed scores) /
  routed_scaling_factor, 1.0 when routed_scaling_factor is None;
- with num_fused_shared_experts > 1 the shared experts are n_expert,
  n_expert + 1, ... (the kernel's), not one random id (the PyTorch path's);
- rows past num_token_non_padded get id -1 as in SGLang, and weight +0;
- fused_topk applies a correction_bias given with softmax scores (to
  choose), as SGLang's PyTorch path does; its CUDA path drops it.

A -inf logit masks its expert (score 0), as in SGLang; a token no score
can be made of (a NaN logit, a non-finite bias) is not routed: it gets
experts 0 ... topk-1 with weight +0, counted in
memra.torch.faults().nonfinite. A float16 bias (moe_fused_gate's, beside float16
logits) is read as a float32 copy of the same values.

expert_location_dispatch_info (EPLB's logical-to-physical remapping) must
be None. Each function is an operator (torch.ops.memra.sglang_*,
torch.ops.memra.moe_fused_gate) with a CPU implementation (the host arm,
the same bits as the GPU), a fake for torch.compile, and refusals that are
the library's, in these functions' argument names.
"""
from typing import Optional

import torch

from .. import _torch_layout as _layout
from .. import _torch_ops as _ops
from .. import _torch_sglang as _sgl
from .._route import _numpy_bool
from . import _direct, _is_compiling

__all__ = ["biased_grouped_topk", "grouped_topk", "fused_topk", "moe_fused_gate",
           "moe_align_block_size"]

_biased_op = torch.ops.memra.sglang_biased_grouped_topk.default
_grouped_op = torch.ops.memra.sglang_grouped_topk.default
_fused_op = torch.ops.memra.sglang_fused_topk.default
_gate_op = torch.ops.memra.moe_fused_gate.default
_align_op = torch.ops.memra.sglang_moe_align_block_size.default


def _no_dispatch_info(caller, info):
    if info is not None:
        _ops._refuse(caller, "expert_location_dispatch_info must be None: memra has no EPLB "
                             "logical-to-physical remapping (remap topk_ids after routing)")


def _main_order(caller, count, info, apply):
    """(num_token_non_padded, expert_location_dispatch_info, the flag) from
    the arguments after routed_scaling_factor in 06c48ca8's order, or main's,
    whose first there is the flag (a bool, NumPy's too; a count is a tensor
    or None). Main's order with the flag also given by keyword is refused,
    as both SGLangs refuse it (a TypeError there)."""
    if isinstance(count, bool) or _numpy_bool(count):
        if apply:
            _ops._refuse(caller, "apply_routed_scaling_factor_on_output is given twice (by "
                                 "position, after routed_scaling_factor, and by keyword)")
        return None, info, bool(count)
    return count, info, apply


def biased_grouped_topk(hidden_states: torch.Tensor, gating_output: torch.Tensor,
                        correction_bias: torch.Tensor, topk: int, renormalize: bool,
                        num_expert_group: Optional[int] = None, topk_group: Optional[int] = None,
                        num_fused_shared_experts: int = 0,
                        routed_scaling_factor: Optional[float] = None,
                        num_token_non_padded: Optional[torch.Tensor] = None,
                        expert_location_dispatch_info=None,
                        apply_routed_scaling_factor_on_output: Optional[bool] = False):
    """SGLang's biased_grouped_topk (DeepSeek-V3, GLM-4.5, Kimi-K2): sigmoid
    scores plus correction_bias choose; groups by their two best; returns
    (topk_weights float32 [T, topk], topk_ids int32 [T, topk]). SGLang main
    dropped num_token_non_padded and expert_location_dispatch_info from this
    signature, so the argument after routed_scaling_factor (its tenth) is
    the flag: a bool there is taken as apply_routed_scaling_factor_on_output."""
    (num_token_non_padded, expert_location_dispatch_info,
     apply_routed_scaling_factor_on_output) = _main_order(
        "biased_grouped_topk", num_token_non_padded, expert_location_dispatch_info,
        apply_routed_scaling_factor_on_output)
    _no_dispatch_info("biased_grouped_topk", expert_location_dispatch_info)
    if _is_compiling():  # the operator, whose fake judges the call at trace time
        return _biased_op(hidden_states, gating_output, correction_bias, topk, renormalize,
                          num_expert_group, topk_group, num_fused_shared_experts,
                          routed_scaling_factor, num_token_non_padded,
                          apply_routed_scaling_factor_on_output)
    cfg = _sgl.biased_config(topk, renormalize, num_expert_group, topk_group,
                             num_fused_shared_experts, routed_scaling_factor,
                             apply_routed_scaling_factor_on_output)
    if correction_bias is None:
        _ops._refuse(cfg.caller, "correction_bias is None: biased_grouped_topk routes with a "
                                 "bias (grouped_topk routes without one)")
    if _direct(hidden_states, gating_output, correction_bias, num_token_non_padded):
        return _sgl.biased_grouped_topk_impl(
            hidden_states, gating_output, correction_bias, topk, renormalize, num_expert_group,
            topk_group, num_fused_shared_experts, routed_scaling_factor, num_token_non_padded,
            apply_routed_scaling_factor_on_output, cfg)
    return _biased_op(hidden_states, gating_output, correction_bias, topk, cfg.renormalize,
                      num_expert_group, topk_group, num_fused_shared_experts,
                      routed_scaling_factor, num_token_non_padded,
                      bool(apply_routed_scaling_factor_on_output))


def grouped_topk(hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int,
                 renormalize: bool, num_expert_group: Optional[int] = None,
                 topk_group: Optional[int] = None, num_fused_shared_experts: int = 0,
                 routed_scaling_factor: Optional[float] = None,
                 num_token_non_padded: Optional[torch.Tensor] = None,
                 expert_location_dispatch_info=None,
                 apply_routed_scaling_factor_on_output: Optional[bool] = False):
    """SGLang's grouped_topk (DeepSeek-V2): softmax scores, no bias, groups
    by their best; returns (topk_weights float32 [T, topk], topk_ids int32
    [T, topk]); a bool right after routed_scaling_factor (main's ninth
    positional) is the flag, as for biased_grouped_topk."""
    (num_token_non_padded, expert_location_dispatch_info,
     apply_routed_scaling_factor_on_output) = _main_order(
        "sglang.grouped_topk", num_token_non_padded, expert_location_dispatch_info,
        apply_routed_scaling_factor_on_output)
    _no_dispatch_info("sglang.grouped_topk", expert_location_dispatch_info)
    if _is_compiling():
        return _grouped_op(hidden_states, gating_output, topk, renormalize, num_expert_group,
                           topk_group, num_fused_shared_experts, routed_scaling_factor,
                           num_token_non_padded, apply_routed_scaling_factor_on_output)
    cfg = _sgl.grouped_config(topk, renormalize, num_expert_group, topk_group,
                              num_fused_shared_experts, routed_scaling_factor,
                              apply_routed_scaling_factor_on_output)
    if _direct(hidden_states, gating_output, num_token_non_padded):
        return _sgl.grouped_topk_impl(
            hidden_states, gating_output, topk, renormalize, num_expert_group, topk_group,
            num_fused_shared_experts, routed_scaling_factor, num_token_non_padded,
            apply_routed_scaling_factor_on_output, cfg)
    return _grouped_op(hidden_states, gating_output, topk, cfg.renormalize, num_expert_group,
                       topk_group, num_fused_shared_experts, routed_scaling_factor,
                       num_token_non_padded, bool(apply_routed_scaling_factor_on_output))


def fused_topk(hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int,
               renormalize: bool, correction_bias: Optional[torch.Tensor] = None,
               scoring_func: str = "softmax",
               num_token_non_padded: Optional[torch.Tensor] = None,
               expert_location_dispatch_info=None):
    """SGLang's fused_topk (Qwen-MoE, Mixtral; sigmoid: topk_sigmoid's
    models): softmax or sigmoid scores (plus correction_bias, where given,
    to choose; the weights are the unbiased scores), top-k, renormalized if
    asked; returns (topk_weights float32 [T, topk], topk_ids int32 [T,
    topk]). Both SGLang signatures: main's (..., renormalize,
    correction_bias=None, scoring_func="softmax") and 06c48ca8's (...,
    renormalize, num_token_non_padded=None, expert_location_dispatch_info=
    None), whose fifth and sixth arguments, given by position, are told
    apart by type (a count is an integer tensor, a bias a float one)."""
    if (not isinstance(scoring_func, str) or
            isinstance(correction_bias, torch.Tensor) and not correction_bias.is_floating_point()) \
            and num_token_non_padded is None and expert_location_dispatch_info is None:
        # 06c48ca8's order: (num_token_non_padded, expert_location_dispatch_info),
        # told by a sixth argument that is no scoring name (None, a dispatch
        # info) or a fifth that is an integer count
        num_token_non_padded, correction_bias = correction_bias, None
        if not isinstance(scoring_func, str):
            expert_location_dispatch_info, scoring_func = scoring_func, "softmax"
    _no_dispatch_info("sglang.fused_topk", expert_location_dispatch_info)
    if _is_compiling():
        return _fused_op(hidden_states, gating_output, topk, renormalize, num_token_non_padded,
                         correction_bias, scoring_func)
    cfg = _sgl.fused_config(topk, renormalize, scoring_func)
    if _direct(hidden_states, gating_output, num_token_non_padded, correction_bias):
        return _sgl.fused_topk_impl(hidden_states, gating_output, topk, renormalize,
                                    num_token_non_padded, correction_bias, scoring_func, cfg)
    return _fused_op(hidden_states, gating_output, topk, cfg.renormalize, num_token_non_padded,
                     correction_bias, scoring_func)


def moe_fused_gate(input_tensor: torch.Tensor, bias: torch.Tensor, num_expert_group: int,
                   topk_group: int, topk: int, num_fused_shared_experts: int = 0,
                   routed_scaling_factor: float = 0,
                   apply_routed_scaling_factor_on_output: bool = False):
    """sgl-kernel's moe_fused_gate: biased_grouped_topk with renormalize
    always on (and no power-of-two or 32-experts-a-group limit); returns
    (topk_weights float32 [T, topk], topk_ids int32 [T, topk])."""
    if _is_compiling():
        return _gate_op(input_tensor, bias, num_expert_group, topk_group, topk,
                        num_fused_shared_experts, routed_scaling_factor,
                        apply_routed_scaling_factor_on_output)
    cfg = _sgl.gate_config(num_expert_group, topk_group, topk, num_fused_shared_experts,
                           routed_scaling_factor, apply_routed_scaling_factor_on_output)
    if _direct(input_tensor, bias):
        return _sgl.moe_fused_gate_impl(input_tensor, bias, num_expert_group, topk_group, topk,
                                        num_fused_shared_experts, routed_scaling_factor,
                                        apply_routed_scaling_factor_on_output, cfg)
    return _gate_op(input_tensor, bias, num_expert_group, topk_group, topk,
                    num_fused_shared_experts, routed_scaling_factor,
                    bool(apply_routed_scaling_factor_on_output))


def moe_align_block_size(topk_ids: torch.Tensor, num_experts: int, block_size: int,
                         sorted_token_ids: torch.Tensor, experts_ids: torch.Tensor,
                         num_tokens_post_pad: torch.Tensor, cumsum_buffer: torch.Tensor,
                         pad_sorted_token_ids: bool = False) -> None:
    """sgl-kernel's moe_align_block_size (sgl-kernel/python/sgl_kernel/moe.py),
    writing into the caller's int32 tensors: the pairs of topk_ids (int32)
    with ids 0 .. num_experts - 1 grouped by expert, each run padded to
    block_size with the sentinel topk_ids.numel(), inside a run in
    ascending pair index (sgl-kernel: whatever order its atomics give);
    sorted_token_ids (at least topk_ids.numel() + num_experts * (block_size
    - 1) entries, or topk_ids.numel() * block_size when fewer pairs than
    experts, as SGLang sizes it), experts_ids (each block's expert, -1
    after the last run), num_tokens_post_pad (1), cumsum_buffer (at least
    num_experts + 1: each run's start, then the padded total).
    pad_sorted_token_ids: also fill the rest of sorted_token_ids with the
    sentinel (the library always fills the part it sizes), as sgl-kernel's
    kernel does when asked. SGLang passes its expert count + 1 as
    num_experts and gives the pairs of other ranks' experts id -1;
    sgl-kernel gathers those into a first run of blocks labelled -1 that its
    GEMM skips, memra leaves them out of every run: the same GEMM result,
    num_tokens_post_pad smaller by that run."""
    if _is_compiling() or not _direct(topk_ids, sorted_token_ids, experts_ids,
                                      num_tokens_post_pad, cumsum_buffer):
        return _align_op(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids,
                         num_tokens_post_pad, cumsum_buffer, pad_sorted_token_ids)
    _layout.sglang_moe_align_block_size_impl(
        topk_ids, num_experts, block_size, sorted_token_ids, experts_ids, num_tokens_post_pad,
        cumsum_buffer, pad_sorted_token_ids)
