"""SGLang's routing, transcribed for the tests to hold memra.torch.sglang to.

The functions below restate, operation for operation and without the
torch.compile decorators and the EPLB remapping (always None here),
SGLang's PyTorch routing code from sgl-project/sglang (Apache-2.0),

    python/sglang/srt/layers/moe/topk.py
    at commit 06c48ca8da0b2c8aac15df74a768e6a012444064:
    biased_grouped_topk_impl, grouped_topk_gpu, fused_topk_torch_native,
    _mask_topk_ids_padded_region

and the way SGLang's select_experts calls biased_grouped_topk (every
argument by keyword). sgl-kernel's moe_fused_gate is held to
biased_grouped_topk with renormalize=True, as sgl-kernel's own test does
(sgl-kernel/tests/test_moe_fused_gate.py at
150ab2c0014bd80ad612abf11effd525bcc5cd59). They run in float32, as SGLang
runs them; float32 rounding and torch.topk's order of equal scores make
them agree with memra on the expert sets wherever float64 sees no near
tie (routing_reference.route64's margins)."""
import torch

# name: (n_expert, routed top-k, num_expert_group, topk_group, routed_scaling_factor)
# (SGLang's topk counts the fused shared expert on top of the routed ones)
SGLANG_MODELS = {
    "deepseek-v3": (256, 8, 8, 4, 2.5),
    "glm-4.5": (160, 8, 1, 1, 2.5),
    "kimi-k2": (384, 8, 1, 1, 2.827),
}


def _shared_and_renormalize(topk_weights, topk_ids, num_experts, num_fused_shared_experts,
                            routed_scaling_factor, renormalize,
                            apply_routed_scaling_factor_on_output):
    """The tail every SGLang grouped router shares: the last column becomes
    a shared expert (an id drawn from [num_experts, num_experts + S), so
    num_experts for S = 1) weighted (routed sum) / routed_scaling_factor;
    then the renormalization by the routed sum, and the scaling on output
    inside it."""
    if num_fused_shared_experts:
        topk_ids[:, -1] = torch.randint(low=num_experts,
                                        high=num_experts + num_fused_shared_experts,
                                        size=(topk_ids.size(0),), dtype=topk_ids.dtype,
                                        device=topk_ids.device)
        if routed_scaling_factor is not None:
            topk_weights[:, -1] = topk_weights[:, :-1].sum(dim=-1) / routed_scaling_factor
    if renormalize:
        topk_weights_sum = (topk_weights.sum(dim=-1, keepdim=True)
                            if num_fused_shared_experts == 0
                            else topk_weights[:, :-1].sum(dim=-1, keepdim=True))
        topk_weights = topk_weights / topk_weights_sum
        if apply_routed_scaling_factor_on_output:
            topk_weights *= routed_scaling_factor
    return topk_weights.to(torch.float32), topk_ids.to(torch.int32)


def mask_topk_ids_padded_region(topk_ids, num_token_non_padded=None):
    """_mask_topk_ids_padded_region: rows from num_token_non_padded on get
    id -1 (their weights are left as computed)."""
    if num_token_non_padded is None:
        return
    indices = torch.arange(0, topk_ids.shape[0], device=topk_ids.device)
    topk_ids[indices >= num_token_non_padded, :] = -1


def biased_grouped_topk_impl(hidden_states, gating_output, correction_bias, topk, renormalize,
                             num_expert_group=None, topk_group=None, num_fused_shared_experts=0,
                             routed_scaling_factor=None, num_token_non_padded=None,
                             expert_location_dispatch_info=None,
                             apply_routed_scaling_factor_on_output=False):
    assert hidden_states.shape[0] == gating_output.shape[0], "Number of tokens mismatch"
    assert expert_location_dispatch_info is None
    scores = gating_output.sigmoid()
    num_token, num_experts = scores.shape
    scores_for_choice = scores.view(num_token, -1) + correction_bias.unsqueeze(0)
    group_scores = scores_for_choice.view(num_token, num_expert_group, -1).topk(
        2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores)
    group_mask.scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(
        num_token, num_expert_group, scores.shape[-1] // num_expert_group).reshape(num_token, -1)
    tmp_scores = scores_for_choice.masked_fill(~score_mask.bool(), float("-inf"))
    _, topk_ids = torch.topk(tmp_scores, k=topk, dim=-1,
                             sorted=num_fused_shared_experts > 0)
    topk_weights = scores.gather(1, topk_ids)
    topk_weights, topk_ids = _shared_and_renormalize(
        topk_weights, topk_ids, num_experts, num_fused_shared_experts, routed_scaling_factor,
        renormalize, apply_routed_scaling_factor_on_output)
    mask_topk_ids_padded_region(topk_ids, num_token_non_padded)
    return topk_weights, topk_ids


def grouped_topk_gpu(hidden_states, gating_output, topk, renormalize, num_expert_group=None,
                     topk_group=None, num_fused_shared_experts=0, routed_scaling_factor=None,
                     num_token_non_padded=None, expert_location_dispatch_info=None,
                     apply_routed_scaling_factor_on_output=False):
    assert hidden_states.shape[0] == gating_output.shape[0], "Number of tokens mismatch"
    assert expert_location_dispatch_info is None
    scores = torch.softmax(gating_output, dim=-1)
    num_token, num_experts = scores.shape
    group_scores = scores.view(num_token, num_expert_group, -1).max(dim=-1).values
    group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores)
    group_mask.scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(
        num_token, num_expert_group, scores.shape[-1] // num_expert_group).reshape(num_token, -1)
    tmp_scores = scores.masked_fill(~score_mask.bool(), 0.0)
    topk_weights, topk_ids = torch.topk(tmp_scores, k=topk, dim=-1,
                                        sorted=num_fused_shared_experts > 0)
    topk_weights, topk_ids = _shared_and_renormalize(
        topk_weights, topk_ids, num_experts, num_fused_shared_experts, routed_scaling_factor,
        renormalize, apply_routed_scaling_factor_on_output)
    mask_topk_ids_padded_region(topk_ids, num_token_non_padded)
    return topk_weights, topk_ids


def fused_topk_torch_native(hidden_states, gating_output, topk, renormalize,
                            num_token_non_padded=None):
    """fused_topk's PyTorch formulation (fused_topk_torch_native, no bias),
    with fused_topk's padding mask."""
    assert hidden_states.shape[0] == gating_output.shape[0], "Number of tokens mismatch"
    topk_weights = torch.softmax(gating_output.float(), dim=-1)
    topk_weights, topk_ids = torch.topk(topk_weights, topk, dim=-1)
    if renormalize:
        topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
    topk_ids = topk_ids.to(torch.int32)
    mask_topk_ids_padded_region(topk_ids, num_token_non_padded)
    return topk_weights, topk_ids


def sglang_style_call_site(biased_grouped_topk, hidden_states, router_logits, correction_bias,
                           top_k, renormalize, num_expert_group, topk_group,
                           num_fused_shared_experts, routed_scaling_factor,
                           num_token_non_padded, apply_routed_scaling_factor_on_output):
    """How SGLang's select_experts calls biased_grouped_topk: every argument
    by keyword; `biased_grouped_topk` is whichever function was imported."""
    topk_weights, topk_ids = biased_grouped_topk(
        hidden_states=hidden_states,
        gating_output=router_logits,
        correction_bias=correction_bias,
        topk=top_k,
        renormalize=renormalize,
        num_expert_group=num_expert_group,
        topk_group=topk_group,
        num_fused_shared_experts=num_fused_shared_experts,
        routed_scaling_factor=routed_scaling_factor,
        num_token_non_padded=num_token_non_padded,
        expert_location_dispatch_info=None,
        apply_routed_scaling_factor_on_output=apply_routed_scaling_factor_on_output,
    )
    return topk_weights, topk_ids


# ---- memra's outputs against these ------------------------------------------------

def _bits(t):
    return t.contiguous().view(torch.int32)


def assert_matches_sglang(got, want, logits, bias, routed_k, S, n_group, topk_group, scoring,
                          group_scoring, n_real, what, min_clear=0.8):
    """memra's (weights, ids) against SGLang's on CPU tensors: padding rows
    (from n_real on) id -1 in both and weight +0 in memra's; on the real
    rows whose float64 choice has no near tie (margin > 1e-6), the same
    routed expert set, listed best first by memra (SGLang's order is
    torch.topk's, unsorted without a shared expert), the same weight per
    expert within float32 rounding, and the shared experts n_expert + i,
    last, weighted as SGLang weights them."""
    from routing_reference import route64
    got_w, got_ids = (t.cpu() for t in got)
    want_w, want_ids = (t.cpu() for t in want)
    T, E = logits.shape
    real = T if n_real is None else max(0, min(T, int(n_real)))
    assert got_w.dtype == torch.float32 and got_ids.dtype == torch.int32, what
    assert got_ids.shape == want_ids.shape == (T, routed_k + S), what
    assert (got_ids[real:] == -1).all() and (want_ids[real:] == -1).all(), what
    assert (_bits(got_w[real:]) == 0).all(), what
    if real == 0:
        return
    _, ids64, margins = route64(logits[:real].cpu().float(), routed_k, scoring, n_group,
                                topk_group, bias=None if bias is None else bias.cpu().float(),
                                group_scoring=group_scoring)
    clear = margins > 1e-6
    assert clear.float().mean() >= min_clear, (what, clear.float().mean())
    g_ids, g_w = got_ids[:real, :routed_k][clear].long(), got_w[:real, :routed_k][clear]
    r_ids, r_w = want_ids[:real, :routed_k][clear].long(), want_w[:real, :routed_k][clear]
    assert torch.equal(g_ids, ids64[clear]), what  # best first
    g_sorted, g_at = g_ids.sort(dim=-1)
    r_sorted, r_at = r_ids.sort(dim=-1)
    assert torch.equal(g_sorted, r_sorted), what
    torch.testing.assert_close(g_w.gather(1, g_at), r_w.gather(1, r_at), rtol=2e-6, atol=0,
                               msg=what)
    if S:
        shared = torch.arange(E, E + S, dtype=torch.int32).expand(real, S)
        assert torch.equal(got_ids[:real, routed_k:], shared), what
        assert (want_ids[:real, routed_k:] >= E).all(), what
        torch.testing.assert_close(got_w[:real, routed_k:][clear],
                                   want_w[:real, -1:].expand(real, S)[clear], rtol=2e-6,
                                   atol=0, msg=what)
