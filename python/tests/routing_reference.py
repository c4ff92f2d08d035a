"""Routers as serving engines write them in PyTorch (the shape of vLLM's
grouped_topk / fused_topk and of the models' own gates), in float64, for the
tests to hold memra's choices against; and the models' routing settings.

A float64 reference and memra's binary32 arithmetic agree on every choice
whose margin is wide: `margins` gives, per token, the smallest gap between a
chosen and a passed-over score (experts, and groups where groups are
ranked), so a test compares ids exactly where that gap is clear of
rounding."""
import torch

# name: (n_expert, top_k, scoring, n_group, topk_group, renormalize,
#        routed_scaling_factor, has bias)
MODELS = {
    "mixtral-8x7b": (8, 2, "softmax", 1, 1, True, 1.0, False),
    "qwen3-moe-30b-a3b": (128, 8, "softmax", 1, 1, True, 1.0, False),
    "deepseek-v2": (160, 6, "softmax", 8, 3, False, 16.0, False),
    "deepseek-v3": (256, 8, "sigmoid", 8, 4, True, 2.5, True),
    "glm-4.5": (160, 8, "sigmoid", 1, 1, True, 2.5, True),
    "kimi-k2": (384, 8, "sigmoid", 1, 1, True, 2.827, True),
    "llama-4-scout": (16, 1, "sigmoid", 1, 1, False, 1.0, False),
}


def scores64(logits, scoring):
    x = logits.double()
    return torch.softmax(x, dim=-1) if scoring == "softmax" else torch.sigmoid(x)


def _gap(g):
    """An exact tie (equal inputs: bfloat16 logits often are) is decided by
    the index in both arithmetics alike, so it counts as a wide margin; only
    a near tie does not."""
    return torch.where(g == 0, torch.full_like(g, float("inf")), g)


def route64(logits, top_k, scoring="softmax", n_group=1, topk_group=1, renormalize=False,
            routed_scaling_factor=1.0, bias=None, group_scoring=None):
    """(weights float64 [T, k], ids int64 [T, k] best first, margins
    float64 [T]; exact ties go to the lower index). group_scoring as
    memra's: None is vLLM's rule (the sum of a group's two best biased
    scores with a bias, its best without)."""
    if group_scoring is None:
        group_scoring = "top2_sum" if bias is not None else "max"
    s = scores64(logits, scoring)
    choice = s + bias.double() if bias is not None else s
    T, E = choice.shape
    margins = torch.full((T,), float("inf"), dtype=torch.float64)
    if n_group > 1:
        g = choice.view(T, n_group, E // n_group)
        if group_scoring == "top2_sum" and E // n_group >= 2:
            gs = g.topk(2, dim=-1).values.sum(-1)
        else:
            gs = g.max(dim=-1).values
        ranked = gs.sort(dim=-1, descending=True, stable=True)  # ties: the lower index
        if topk_group < n_group:
            margins = torch.minimum(margins, _gap(ranked.values[:, topk_group - 1] -
                                                  ranked.values[:, topk_group]))
        keep = torch.zeros(T, n_group, dtype=torch.bool)
        keep.scatter_(1, ranked.indices[:, :topk_group], True)
        choice = choice.masked_fill(~keep.repeat_interleave(E // n_group, dim=1), float("-inf"))
    order = choice.sort(dim=-1, descending=True, stable=True)
    ids = order.indices[:, :top_k]
    vals = order.values
    gaps = vals[:, :top_k] - vals[:, 1:top_k + 1] if top_k < E else None
    if gaps is not None:
        gaps = torch.where(torch.isfinite(gaps), gaps, torch.full_like(gaps, float("inf")))
        margins = torch.minimum(margins, _gap(gaps).min(dim=-1).values)
    w = s.gather(1, ids)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return w * routed_scaling_factor, ids, margins


def llama4_router64(logits, top_k=1):
    """Llama 4's gate: the top-k logits, each through a sigmoid."""
    vals, ids = logits.double().topk(top_k, dim=-1)
    return torch.sigmoid(vals), ids


def vllm_style_call_site(grouped_topk, hidden_states, router_logits, top_k, num_expert_group,
                         topk_group, renormalize, scoring_func, routed_scaling_factor,
                         e_score_correction_bias):
    """How vLLM's grouped-top-k router calls grouped_topk: every argument by
    keyword, the bias possibly None; `grouped_topk` is whichever function
    the engine imported."""
    topk_weights, topk_ids = grouped_topk(
        hidden_states=hidden_states,
        gating_output=router_logits,
        topk=top_k,
        renormalize=renormalize,
        num_expert_group=num_expert_group,
        topk_group=topk_group,
        scoring_func=scoring_func,
        routed_scaling_factor=routed_scaling_factor,
        e_score_correction_bias=e_score_correction_bias,
    )
    return topk_weights, topk_ids


def tables64(ids, weights, planes, bases, strides):
    """The verify-rows tables of a selection, in PyTorch's own integer and
    binary32 arithmetic: ptrs int64 [3, *ids.shape], scl float32."""
    s = ids.long()
    ptrs = torch.stack([b + s * st for b, st in zip(bases, strides)])
    if planes is None:
        one = torch.ones_like(weights)
        return ptrs, torch.stack([one, one, weights * one])
    p = planes.to(ids.device)
    return ptrs, torch.stack([p[0][s], p[1][s], weights * p[2][s]])
