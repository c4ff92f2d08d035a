"""vLLM's moe_align_block_size as vLLM's own tests define it, and SGLang's
way of calling sgl-kernel's, for the layout tests to hold memra to.

vllm_golden() computes what vLLM's golden PyTorch implementation,
torch_moe_align_block_size in vllm-project/vllm
tests/kernels/moe/test_moe_align_block_size.py at
d29a69a5f9eac41579524a0c22bcd68dd15b9ba7, computes; it is written here from
that definition, not copied (the code look-up tool it was read with keeps
fetched code out of commits). The definition:

- sizes: topk_ids.numel() + num_experts * (block_size - 1), rounded up to
  block_size with pad_sorted_ids, and topk_ids.numel() * block_size
  instead when topk_ids.numel() < num_experts;
- the flattened ids sorted by expert with a stable sort (so each expert's
  pairs in ascending pair index: the order memra defines, which vLLM's
  CUDA kernel does not keep: its test compares each expert's pairs as a
  set, expert_sets() below);
- for each expert in order, its pairs, then the sentinel topk_ids.numel()
  up to the next multiple of block_size; experts without pairs take no
  room; the rest of sorted_ids is the sentinel;
- expert_ids: each block's expert, 0 (torch.zeros) after the last run;
  num_tokens_post_pad: the padded total, int32 [1];
- expert_map: at that commit the golden leaves out the runs of experts the
  map sends to -1 and labels the others' blocks expert_map[e] (vLLM's
  moe_align_block_size with ignore_invalid_experts=True); vLLM's default
  (ignore_invalid_experts=False), as the golden at
  00e6fb6d7193804fd96d84c850fd6505574e8e0d and vllm/model_executor/layers/
  fused_moe/moe_align_block_size.py at
  c63201bac8a4c9fb08fd5e6cd4d58b00b3ca62d2 have it, lays every expert out
  and maps expert_ids afterwards (expert_map[expert_ids], the zeros after
  the last run included). drop_non_local picks.

sglang_style_align() calls an sgl-kernel-shaped moe_align_block_size the
way SGLang's fused MoE does (python/sglang/srt/layers/moe/fused_moe_triton/
moe_align_block_size.py at f82ccc94b0e7c45d7e8e856b92eda8f0062a21c3):
buffers sized for num_experts + 1 ids, num_experts + 1 passed, the list
filled with the sentinel by the kernel when it has at most 4096 entries and
by the caller beforehand otherwise.

grouped_matmul() is the consumer issue #31 names: a reference grouped GEMM
(a PyTorch loop over the blocks) that reads a layout as the fused MoE
Triton kernel reads it."""
import torch


def _cdiv(a, b):
    return -(-a // b)


def vllm_golden(topk_ids, block_size, num_experts, expert_map=None, pad_sorted_ids=False,
                drop_non_local=False):
    """(sorted_ids, expert_ids, num_tokens_post_pad) by vLLM's golden
    definition (the module's docstring), on the CPU."""
    flat = topk_ids.reshape(-1).to("cpu", torch.int64)
    n = flat.numel()
    size = n + num_experts * (block_size - 1)
    if pad_sorted_ids:
        size = _cdiv(size, block_size) * block_size
    if n < num_experts:
        size = n * block_size
    emap = None if expert_map is None else expert_map.to("cpu", torch.int64)
    by_expert = torch.sort(flat, stable=True).indices
    sorted_ids = torch.full((size,), n, dtype=torch.int32)
    expert_ids = torch.zeros(_cdiv(size, block_size), dtype=torch.int32)
    at = 0
    for e in range(num_experts):
        if drop_non_local and emap is not None and emap[e] == -1:
            continue
        pairs = by_expert[flat[by_expert] == e]
        if pairs.numel() == 0:
            continue
        sorted_ids[at:at + pairs.numel()] = pairs.to(torch.int32)
        first, blocks = at // block_size, _cdiv(pairs.numel(), block_size)
        expert_ids[first:first + blocks] = int(emap[e]) if drop_non_local and \
            emap is not None else e
        at += blocks * block_size
    if emap is not None and not drop_non_local:
        expert_ids = emap[expert_ids.long()].to(torch.int32)
    return sorted_ids, expert_ids, torch.tensor([at], dtype=torch.int32)


def expert_sets(sorted_ids, expert_ids, block_size, n_post_pad, n_pairs):
    """{block label: sorted list of the pairs in that label's blocks} over
    the first n_post_pad entries: vLLM's criterion for a kernel whose order
    inside an expert is free."""
    sorted_ids, expert_ids = sorted_ids.cpu(), expert_ids.cpu()
    sets = {}
    for b in range(n_post_pad // block_size):
        block = sorted_ids[b * block_size:(b + 1) * block_size]
        sets.setdefault(int(expert_ids[b]), []).extend(block[block < n_pairs].tolist())
    return {k: sorted(v) for k, v in sets.items()}


def shuffled_in_runs(sorted_ids, expert_ids, n_post_pad, block_size, n_pairs, seed):
    """The layout's sorted_ids with each run's pairs in another order, as
    vLLM's and sgl-kernel's kernels may place them (atomics). A run is the
    blocks of one label in a row; its pairs trade places among themselves."""
    out = sorted_ids.clone().cpu()
    labels = expert_ids.cpu()
    g = torch.Generator().manual_seed(seed)
    b, n_blocks = 0, n_post_pad // block_size
    while b < n_blocks:
        end = b
        while end < n_blocks and labels[end] == labels[b]:
            end += 1
        run = out[b * block_size:end * block_size]
        at = (run < n_pairs).nonzero().view(-1)
        run[at] = run[at][torch.randperm(at.numel(), generator=g)]
        b = end
    return out


def sglang_style_align(align, topk_ids, block_size, num_experts):
    """SGLang's call of sgl-kernel's moe_align_block_size (the module's
    docstring): (sorted_ids, expert_ids, num_tokens_post_pad, cumsum_buffer)."""
    n = topk_ids.numel()
    size = n + (num_experts + 1) * (block_size - 1)
    dev = topk_ids.device
    sorted_ids = torch.empty(size, dtype=torch.int32, device=dev)
    expert_ids = torch.empty(_cdiv(size, block_size), dtype=torch.int32, device=dev)
    post = torch.empty(1, dtype=torch.int32, device=dev)
    cumsum = torch.empty(num_experts + 2, dtype=torch.int32, device=dev)
    fused_fill = size <= 4096
    if not fused_fill:
        sorted_ids.fill_(n)
    align(topk_ids, num_experts + 1, block_size, sorted_ids, expert_ids, post, cumsum,
          fused_fill)
    return sorted_ids, expert_ids, post, cumsum


def grouped_matmul(x, w, top_k, sorted_ids, expert_ids, n_post_pad, block_size):
    """out[p] = x[p // top_k] @ w[e].T for each pair p of each block of
    expert e < the n_post_pad first entries, one matmul per block (rows of
    the sentinel and blocks labelled -1 skipped): [n_pairs, N] in pair
    order, what a fused MoE GEMM writes before the weighted sum."""
    n_pairs = x.shape[0] * top_k
    out = torch.zeros(n_pairs, w.shape[1], dtype=x.dtype)
    sorted_ids, expert_ids = sorted_ids.cpu().long(), expert_ids.cpu().long()
    for b in range(n_post_pad // block_size):
        e = int(expert_ids[b])
        if e < 0:
            continue
        rows = sorted_ids[b * block_size:(b + 1) * block_size]
        rows = rows[rows < n_pairs]
        out[rows] = x[rows // top_k] @ w[e].T
    return out
