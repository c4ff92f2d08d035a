"""SGLang's routing functions as operators (torch.ops.memra.sglang_*,
torch.ops.memra.moe_fused_gate): their arguments mapped onto one
memra_route_spec, the rest as every memra op (_torch_ops.py).

The sources, as of sgl-project/sglang commit
06c48ca8da0b2c8aac15df74a768e6a012444064
(python/sglang/srt/layers/moe/topk.py), and sgl-kernel's moe_fused_gate
(sgl-kernel/python/sgl_kernel/moe.py at
0c1e18c1056db02f0778e1514e944eb9348ab647, its kernel
sgl-kernel/csrc/moe/moe_fused_gate.cu):

- biased_grouped_topk (DeepSeek-V3, GLM-4.5, Kimi-K2): sigmoid scores, a
  correction bias added for choosing only, groups scored by the sum of
  their two best biased scores, the best topk_group groups in play;
  grouped_topk (DeepSeek-V2): softmax, no bias, groups by their best;
  fused_topk (Qwen-MoE, Mixtral): softmax top-k.
- topk counts the fused shared experts: the routed experts are the best
  topk - num_fused_shared_experts; then the shared ones, ids n_expert + i,
  each weighted (sum of the routed scores) / routed_scaling_factor (1.0
  when None, as SGLang passes moe_fused_gate): the library's
  MEMRA_SHARED_ROUTED_SUM with shared_divisor = routed_scaling_factor.
  (SGLang's PyTorch fallback overwrites the last column alone, with a
  random id in [n_expert, n_expert + num_fused_shared_experts); for the 0
  or 1 shared expert of every model it serves, the same.)
- renormalize divides every weight, the shared ones included, by the
  routed sum, and then (only then) apply_routed_scaling_factor_on_output
  multiplies them by routed_scaling_factor: the spec's renormalize and
  routed_scaling_factor (1.0 otherwise). moe_fused_gate always
  renormalizes.
- num_token_non_padded: a device count of the real rows of a padded
  batch; SGLang gives the rows past it id -1: the spec's n_real, read in
  place by the kernel (the library also gives them weight +0).
- expert_location_dispatch_info (SGLang's EPLB remapping of logical to
  physical experts) has no counterpart: it must be None.
"""
from typing import Optional

import torch

from . import _torch_ops as _ops
from ._route import RouteConfig, float_key

LIB = _ops.LIB


def _words(logits, bias, S):
    """SGLang's names for the library's words (the routed count is topk
    less the shared experts)."""
    return _ops.words(logits=logits, n_tokens=f"{logits}.shape[0]", scoring="scoring_func",
                      n_expert=f"{logits}.shape[1]",
                      top_k="topk - num_fused_shared_experts" if S else "topk",
                      n_group="num_expert_group", n_shared="num_fused_shared_experts",
                      shared_divisor="routed_scaling_factor", bias_ptr=bias,
                      bias_dtype=f"{bias}.dtype", n_real="num_token_non_padded",
                      n_real_dtype="num_token_non_padded.dtype",
                      MEMRA_SHARED_ROUTED_SUM="num_fused_shared_experts > 0")


def _shared(caller, topk, S):
    """(routed top_k, S) as integers: topk counts the shared experts."""
    from ._route import _int
    S = _int(f"{caller}: num_fused_shared_experts", S, 0, 1 << 32)
    return _int(f"{caller}: topk", topk, 0, 1 << 63) - S, S


def _config(tag, caller, logits, bias, scoring, group_scoring, topk, renormalize,
            num_expert_group, topk_group, S, rsf, apply_on_output, always_renormalize=False):
    # (anything but a str scoring misses the cache and is refused by the
    # configuration's own check, in the caller's words)
    key = (tag, scoring if isinstance(scoring, str) else object(), topk, renormalize,
           num_expert_group, topk_group, S, float_key(rsf), apply_on_output)

    def make():
        from ._route import _flag
        apply = _flag(f"{caller}: apply_routed_scaling_factor_on_output", apply_on_output, True)
        top_k, n_shared = _shared(caller, topk, S)
        renorm = True if always_renormalize else renormalize
        # Only a renormalized output is scaled on output (SGLang's `if
        # renormalize:` block); the shared experts' divisor is the factor,
        # or 1.0 for none, as SGLang passes it to moe_fused_gate.
        scale = rsf if apply and renorm and rsf is not None else 1.0
        return RouteConfig(
            caller, _words(logits, bias, n_shared), top_k=top_k, n_group=num_expert_group,
            topk_group=topk_group, scoring=scoring, renormalize=renorm,
            routed_scaling_factor=scale, group_scoring=group_scoring, n_shared=n_shared,
            shared_rule="routed_sum" if n_shared else "constant",
            shared_divisor=(1.0 if rsf is None else rsf) if n_shared else 0.0, schema=True)
    return _ops.config(key, make)


def biased_config(topk, renormalize, num_expert_group, topk_group, S, rsf, apply_on_output):
    return _config("sglang.biased_grouped_topk", "biased_grouped_topk", "gating_output",
                   "correction_bias", "sigmoid", "top2_sum", topk, renormalize,
                   num_expert_group, topk_group, S, rsf, apply_on_output)


def grouped_config(topk, renormalize, num_expert_group, topk_group, S, rsf, apply_on_output):
    return _config("sglang.grouped_topk", "sglang.grouped_topk", "gating_output", "bias",
                   "softmax", "max", topk, renormalize, num_expert_group, topk_group, S, rsf,
                   apply_on_output)


def fused_config(topk, renormalize, scoring_func="softmax"):
    return _config("sglang.fused_topk", "sglang.fused_topk", "gating_output",
                   "correction_bias", scoring_func, None, topk, renormalize, 1, 1, 0, None,
                   False)


def gate_config(num_expert_group, topk_group, topk, S, rsf, apply_on_output):
    return _config("moe_fused_gate", "moe_fused_gate", "input_tensor", "bias", "sigmoid",
                   "top2_sum", topk, True, num_expert_group, topk_group, S, rsf,
                   apply_on_output, always_renormalize=True)


def _choice(cfg, hidden_states, logits, bias, count, real):
    if hidden_states is not None and not _ops._tokens_match(hidden_states, logits):
        _ops._check_tokens(cfg.caller, hidden_states, logits)
    ids, weights, _, _ = (_ops.route if real else _ops.route_fake)(
        cfg, logits, bias, None, count, None, None, None, "", False)
    return weights, ids


# ---- biased_grouped_topk ----------------------------------------------------------

LIB.define(
    "sglang_biased_grouped_topk(Tensor hidden_states, Tensor gating_output, "
    "Tensor correction_bias, int topk, bool renormalize, int num_expert_group, int topk_group, "
    "int num_fused_shared_experts=0, float? routed_scaling_factor=None, "
    "Tensor? num_token_non_padded=None, bool apply_routed_scaling_factor_on_output=False) "
    "-> (Tensor, Tensor)")


def biased_grouped_topk_impl(hidden_states: torch.Tensor, gating_output: torch.Tensor,
                             correction_bias: torch.Tensor, topk: int, renormalize: bool,
                             num_expert_group: int, topk_group: int,
                             num_fused_shared_experts: int = 0,
                             routed_scaling_factor: Optional[float] = None,
                             num_token_non_padded: Optional[torch.Tensor] = None,
                             apply_routed_scaling_factor_on_output: bool = False, cfg=None,
                             real=True):
    cfg = cfg or biased_config(topk, renormalize, num_expert_group, topk_group,
                               num_fused_shared_experts, routed_scaling_factor,
                               apply_routed_scaling_factor_on_output)
    return _choice(cfg, hidden_states, gating_output, correction_bias, num_token_non_padded, real)


def biased_grouped_topk_fake(*args, **kwargs):
    return biased_grouped_topk_impl(*args, **kwargs, real=False)


# ---- grouped_topk (no bias) ---------------------------------------------------------

LIB.define(
    "sglang_grouped_topk(Tensor hidden_states, Tensor gating_output, int topk, "
    "bool renormalize, int num_expert_group, int topk_group, int num_fused_shared_experts=0, "
    "float? routed_scaling_factor=None, Tensor? num_token_non_padded=None, "
    "bool apply_routed_scaling_factor_on_output=False) -> (Tensor, Tensor)")


def grouped_topk_impl(hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int,
                      renormalize: bool, num_expert_group: int, topk_group: int,
                      num_fused_shared_experts: int = 0,
                      routed_scaling_factor: Optional[float] = None,
                      num_token_non_padded: Optional[torch.Tensor] = None,
                      apply_routed_scaling_factor_on_output: bool = False, cfg=None, real=True):
    cfg = cfg or grouped_config(topk, renormalize, num_expert_group, topk_group,
                                num_fused_shared_experts, routed_scaling_factor,
                                apply_routed_scaling_factor_on_output)
    return _choice(cfg, hidden_states, gating_output, None, num_token_non_padded, real)


def grouped_topk_fake(*args, **kwargs):
    return grouped_topk_impl(*args, **kwargs, real=False)


# ---- fused_topk ---------------------------------------------------------------------

LIB.define(
    "sglang_fused_topk(Tensor hidden_states, Tensor gating_output, int topk, bool renormalize, "
    "Tensor? num_token_non_padded=None, Tensor? correction_bias=None, "
    "str scoring_func='softmax') -> (Tensor, Tensor)")


def fused_topk_impl(hidden_states: torch.Tensor, gating_output: torch.Tensor, topk: int,
                    renormalize: bool, num_token_non_padded: Optional[torch.Tensor] = None,
                    correction_bias: Optional[torch.Tensor] = None,
                    scoring_func: str = "softmax", cfg=None, real=True):
    cfg = cfg or fused_config(topk, renormalize, scoring_func)
    return _choice(cfg, hidden_states, gating_output, correction_bias, num_token_non_padded,
                   real)


def fused_topk_fake(*args, **kwargs):
    return fused_topk_impl(*args, **kwargs, real=False)


# ---- sgl-kernel's moe_fused_gate ------------------------------------------------------

LIB.define(
    "moe_fused_gate(Tensor input_tensor, Tensor bias, int num_expert_group, int topk_group, "
    "int topk, int num_fused_shared_experts=0, float routed_scaling_factor=0.0, "
    "bool apply_routed_scaling_factor_on_output=False) -> (Tensor, Tensor)")


def moe_fused_gate_impl(input_tensor: torch.Tensor, bias: torch.Tensor, num_expert_group: int,
                        topk_group: int, topk: int, num_fused_shared_experts: int = 0,
                        routed_scaling_factor: float = 0.0,
                        apply_routed_scaling_factor_on_output: bool = False, cfg=None,
                        real=True):
    cfg = cfg or gate_config(num_expert_group, topk_group, topk, num_fused_shared_experts,
                             routed_scaling_factor, apply_routed_scaling_factor_on_output)
    return _choice(cfg, None, input_tensor, bias, None, real)


def moe_fused_gate_fake(*args, **kwargs):
    return moe_fused_gate_impl(*args, **kwargs, real=False)


for _name, _impl, _fake in (
        ("sglang_biased_grouped_topk", biased_grouped_topk_impl, biased_grouped_topk_fake),
        ("sglang_grouped_topk", grouped_topk_impl, grouped_topk_fake),
        ("sglang_fused_topk", fused_topk_impl, fused_topk_fake),
        ("moe_fused_gate", moe_fused_gate_impl, moe_fused_gate_fake)):
    _ops.register(_name, _impl, _fake)
