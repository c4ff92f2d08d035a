"""The expert-sorted layout as PyTorch operators (docs/layout-sorted.md):
vLLM's moe_align_block_size (torch.ops.memra.moe_align_block_size),
sgl-kernel's out-parameter one (torch.ops.memra.sglang_moe_align_block_size),
and routing fused with the layout of its choice
(torch.ops.memra.route_tables_layout: memra_route_tables_ex, one launch at
decode sizes).

As every memra op (_torch_ops.py): a CUDA implementation (the library's
device arm on the current stream, capturable, never synchronising), a CPU
one (the host arm, the same bytes), and a fake that asks the library what
the call would refuse (memra_layout_check, memra_route_check_ex) and gives
outputs of the sizes the library gives (memra_layout_sizes). Python keeps
what only it can see: dtypes, devices, shapes, the tensors' lengths, and
the sizes of a symbolic token count (the one formula written here,
_symbolic_sizes, held to memra_layout_sizes by a test).

Sources of the shapes (as of the commits cited):
- vLLM: vllm/model_executor/layers/fused_moe/moe_align_block_size.py,
  moe_align_block_size(topk_ids, block_size, num_experts, expert_map=None,
  pad_sorted_ids=False, ignore_invalid_experts=False) -> (sorted_ids int32
  [max_num_tokens_padded], expert_ids int32 [cdiv(that, block_size)],
  num_tokens_post_pad int32 [1]); expert_map applied to expert_ids after
  the layout ("marks the experts_ids that are not in the current GPU rank
  as -1"), which is the library's labelling. ignore_invalid_experts=True
  (other ranks' pairs in no run, blocks labelled by local id, as vLLM's
  kernel lays them out when handed the map) is the layout of the ids
  through the map (local_ids), the library's rules unchanged.
- sgl-kernel: sgl-kernel/python/sgl_kernel/moe.py at sgl-project/sglang
  0c1e18c1056db02f0778e1514e944eb9348ab647: moe_align_block_size(topk_ids,
  num_experts, block_size, sorted_token_ids, experts_ids,
  num_tokens_post_pad, cumsum_buffer, pad_sorted_token_ids=False), writing
  into the caller's tensors; its caller,
  python/sglang/srt/layers/moe/fused_moe_triton/moe_align_block_size.py at
  f82ccc94b0e7c45d7e8e856b92eda8f0062a21c3, passes num_experts + 1 ("In EP,
  expert_ids for filtered experts are -1. We have num_experts + 1 ids in
  total.") and sizes sorted_token_ids for it.
"""
import ctypes
from typing import List, Optional

import torch

import memra
from memra import _lib
from memra._lib import CALLS, MAX_PAIRS, Layout, LayoutSpec
from memra._route import RouteConfig, _flag, _int, float_key, shared_fields

from . import _torch_ops as _ops
from ._torch_engines import current_stream, engine_at, host_faults

LIB = _ops.LIB
_U32 = 1 << 32
_STAND_IN = _ops._STAND_IN
_I32 = {torch.int32: 0}
_IDS = {torch.int32: 0, torch.int64: 1}  # topk_ids: int64 ids are taken as int32 (_ids)


class _Caller:
    """A layout op's name and its words for the library's (layout_spec->
    n_expert is the op's num_experts, ...)."""
    __slots__ = ("caller", "names")

    def __init__(self, caller, **names):
        self.caller, self.names = caller, names

    def refuse(self, status):
        memra.check(status, self.caller, self.names)


_VLLM = _Caller("moe_align_block_size", n_expert="num_experts", n_pairs="topk_ids.numel()",
                ids="topk_ids", block_size="block_size", pad_sorted_ids="pad_sorted_ids",
                expert_map="expert_map")
_SGL = _Caller("sglang.moe_align_block_size", n_expert="num_experts",
               n_pairs="topk_ids.numel()", ids="topk_ids", block_size="block_size",
               sorted_ids="sorted_token_ids", expert_ids="experts_ids",
               n_post_pad="num_tokens_post_pad", padded_offsets="cumsum_buffer")


# ---- what the library cannot see ------------------------------------------------

def _ids(c, topk_ids, fake=False):
    """topk_ids: an int32 or int64 tensor (any shape; its elements are the
    pairs, in order) on the CPU or a CUDA device. Returns it contiguous, as
    int32: the library reads int32 ids, and vLLM's and sgl-kernel's align
    kernels take either (fused_topk(indices_type=torch.int64) feeds them
    int64). An int64 id outside int32's range becomes one still outside
    [0, n_expert) (-1, or 2^31 - 1), so it stays in no run, as there."""
    _ops._code(c.caller, "topk_ids", topk_ids, _IDS)
    if not fake and not (topk_ids.is_cuda or topk_ids.is_cpu):
        _ops._refuse(c.caller, f"topk_ids is on {topk_ids.device}, not the CPU or a CUDA device")
    n = topk_ids.numel()
    if isinstance(n, int) and n >= _U32:
        _ops._refuse(c.caller, f"topk_ids holds {n} pairs, more than a uint32 holds")
    if topk_ids.dtype == torch.int64:
        topk_ids = topk_ids.clamp(-1, _ops._I32 - 1).to(torch.int32)
    return topk_ids if fake else topk_ids.contiguous()


def _out(c, name, t, ids, need):
    """An output tensor the caller gives (sgl-kernel's shape): int32,
    contiguous, beside topk_ids, of at least `need` elements."""
    _ops._code(c.caller, name, t, _I32)
    if t.device != ids.device:
        _ops._refuse(c.caller, f"{name} is on {t.device}, but topk_ids is on {ids.device}")
    if not t.is_contiguous():
        _ops._refuse(c.caller, f"{name} is not contiguous")
    if isinstance(need, int) and isinstance(t.numel(), int) and t.numel() < need:
        _ops._refuse(c.caller, f"{name} holds {t.numel()} elements; {need} are written")


# ---- the layout spec, cached by value ----------------------------------------------

_specs = {}


def _spec(c, num_experts, block_size, pad, emap_ptr):
    """ctypes.byref(memra_layout_spec) for the values as the C types (the
    library judges them). The map is keyed by its address only: its dtype,
    shape and device are checked on every call, before this."""
    # (the types too: 16.0 == 16, and a float is refused, never cached as an int)
    key = (type(num_experts), num_experts, type(block_size), block_size, pad, emap_ptr)
    ref = _specs.get(key)
    if ref is None:
        s = LayoutSpec()
        s.n_expert = _int(f"{c.caller}: num_experts", num_experts, 0, _U32)
        s.block_size = _int(f"{c.caller}: block_size", block_size, 0, _U32)
        s.pad_sorted_ids = _flag(f"{c.caller}: pad_sorted_ids", pad, True)
        s.expert_map = emap_ptr
        if len(_specs) >= _ops._CACHE_MAX:
            _specs.clear()
        ref = _specs[key] = ctypes.byref(s)
    return ref


def _sizes(c, n, spec):
    """(sorted_len, n_blocks) for n pairs: memra_layout_sizes, vLLM's sizes."""
    length, blocks = ctypes.c_uint64(), ctypes.c_uint64()
    st = _ops._L().memra_layout_sizes(n, spec, ctypes.byref(length), ctypes.byref(blocks))
    if st:
        c.refuse(st)
    return length.value, blocks.value


def _symbolic_sizes(n, n_expert, block_size, pad):
    """memra_layout_sizes for a symbolic pair count (torch.compile's dynamic
    shapes, which the library cannot take): n + n_expert * (block_size - 1),
    rounded up to block_size with pad, at most n * block_size (which, as
    the library's rule "when n < n_expert" does, changes it only then), and
    its blocks. tests hold it to the library for concrete counts."""
    length = n + n_expert * (block_size - 1)
    if pad:
        length = (length + block_size - 1) // block_size * block_size
    length = torch.sym_min(length, n * block_size)
    return length, (length + block_size - 1) // block_size


def _workspace(ids_device, n, spec):
    """Device workspace the three-launch path needs (memra_layout_workspace_bytes;
    none at decode sizes), as a tensor from PyTorch's allocator (its graph
    pool under capture): (tensor or None, address)."""
    nbytes = ctypes.c_uint64()
    _ops._L().memra_layout_workspace_bytes(n, spec, ctypes.byref(nbytes))
    if not nbytes.value:
        return None, 0
    ws = torch.empty(nbytes.value, dtype=torch.uint8, device=ids_device)
    return ws, ws.data_ptr()


def _stand_in_layout(with_workspace=True, padded_offsets=False):
    """A memra_layout of stand-in addresses, for the fakes' question."""
    return ctypes.byref(Layout(_STAND_IN, _STAND_IN, _STAND_IN, 0,
                               _STAND_IN if padded_offsets else 0, 0, 0,
                               _STAND_IN if with_workspace else 0))


def _run(c, ids, n, spec, out, cuda):
    """The layout call itself on the arm of ids' device."""
    L = _ops._L()
    if cuda:
        dev = ids.get_device()
        st = L.memra_layout_tables(engine_at(dev, "")._h, ids.data_ptr(), n, spec,
                                   ctypes.byref(out), current_stream(dev))
    else:
        st = L.memra_layout_tables_host(ids.data_ptr(), n, spec, ctypes.byref(out))
    if st:
        c.refuse(st)


def layout_prepare(device=None, model: str = "") -> None:
    """Loads the layout kernels of `device`'s engine (for `model`) and its
    per-layer counts for route_tables_layout (memra_layout_prepare): call it
    before capturing a graph with layouts, whose first use loads them, which
    a capture refuses. Nothing to do on the CPU."""
    device = torch.device(device if device is not None else "cuda")
    if device.type == "cpu":
        return
    dev = _ops._dev_key(device)
    memra.check(_ops._L().memra_layout_prepare(engine_at(dev, str(model))._ptr()),
                "layout_prepare")


# ---- vLLM's moe_align_block_size -----------------------------------------------------

LIB.define(
    "moe_align_block_size(Tensor topk_ids, int block_size, int num_experts, "
    "Tensor? expert_map=None, bool pad_sorted_ids=False) -> (Tensor, Tensor, Tensor)")


def _vllm_inputs(topk_ids, block_size, num_experts, expert_map, pad_sorted_ids, fake):
    c = _VLLM
    ids = _ids(c, topk_ids, fake)
    E = _int(f"{c.caller}: num_experts", num_experts, 0, _U32)
    _ops._beside(c.caller, "expert_map", expert_map, _ops._MAP, E, ids, "topk_ids")
    return c, ids, E


def ignore_invalid(value):
    """vLLM's ignore_invalid_experts as a bool (True or False, or 0 or 1)."""
    return bool(_flag(f"{_VLLM.caller}: ignore_invalid_experts", value, True))


def local_ids(topk_ids, num_experts, expert_map):
    """vLLM's ignore_invalid_experts=True as a layout of other ids: each
    pair's id through expert_map (its local id; -1 for another rank's
    expert or an id outside [0, num_experts)). Laid out without a map,
    these give what vLLM's kernel gives when handed the map: only this
    rank's runs, in local-id order, each block labelled with its local id,
    at vLLM's sizes for num_experts. Plain tensor operations, so graphs and
    torch.compile take them as they are; the map is checked as for the
    default first."""
    c, ids, E = _vllm_inputs(topk_ids, 1, num_experts, expert_map, False,
                             not isinstance(topk_ids.numel(), int))
    if E == 0:
        return ids
    inside = (ids >= 0) & (ids < E)
    mapped = expert_map[ids.clamp(0, E - 1).long()]
    return torch.where(inside, mapped, mapped.new_full((), -1))


def moe_align_block_size_impl(topk_ids: torch.Tensor, block_size: int, num_experts: int,
                              expert_map: Optional[torch.Tensor] = None,
                              pad_sorted_ids: bool = False):
    c, ids, E = _vllm_inputs(topk_ids, block_size, num_experts, expert_map, pad_sorted_ids,
                             False)
    n = ids.numel()
    spec = _spec(c, E, block_size, pad_sorted_ids,
                 0 if expert_map is None else expert_map.data_ptr())
    length, blocks = _sizes(c, n, spec)
    device = ids.device
    sorted_ids = torch.empty(length, dtype=torch.int32, device=device)
    expert_ids = torch.empty(blocks, dtype=torch.int32, device=device)
    post = torch.empty(1, dtype=torch.int32, device=device)
    cuda = ids.is_cuda
    ws, ws_ptr = _workspace(device, n, spec) if cuda else (None, 0)
    out = Layout(sorted_ids.data_ptr(), expert_ids.data_ptr(), post.data_ptr(), 0, 0, 0, 0,
                 ws_ptr)
    _run(c, ids, n, spec, out, cuda)
    del ws  # (the stream orders its reuse after the launches, as for any tensor)
    return sorted_ids, expert_ids, post


def moe_align_block_size_fake(topk_ids, block_size, num_experts, expert_map=None,
                              pad_sorted_ids=False):
    c, ids, E = _vllm_inputs(topk_ids, block_size, num_experts, expert_map, pad_sorted_ids,
                             True)
    n = ids.numel()
    concrete = isinstance(n, int)
    spec = _spec(c, E, block_size, pad_sorted_ids, 0 if expert_map is None else _STAND_IN)
    cuda = ids.device.type == "cuda"
    # A symbolic count is judged as 2 (torch.compile specializes 0 and 1).
    st = _ops._L().memra_layout_check(CALLS["layout_tables" if cuda else "layout_tables_host"],
                                      _STAND_IN, n if concrete else 2, spec,
                                      _stand_in_layout())
    if st:
        c.refuse(st)
    if concrete:
        length, blocks = _sizes(c, n, spec)
    else:
        length, blocks = _symbolic_sizes(n, E, spec._obj.block_size, spec._obj.pad_sorted_ids)
    return (ids.new_empty((length,), dtype=torch.int32),
            ids.new_empty((blocks,), dtype=torch.int32),
            ids.new_empty((1,), dtype=torch.int32))


# ---- sgl-kernel's moe_align_block_size ------------------------------------------------

LIB.define(
    "sglang_moe_align_block_size(Tensor topk_ids, int num_experts, int block_size, "
    "Tensor(a!) sorted_token_ids, Tensor(b!) experts_ids, Tensor(c!) num_tokens_post_pad, "
    "Tensor(d!) cumsum_buffer, bool pad_sorted_token_ids=False) -> ()")


def _sglang_inputs(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids,
                   num_tokens_post_pad, cumsum_buffer, pad_sorted_token_ids, fake):
    """The checks and the spec: sgl-kernel's num_experts is the library's
    n_expert as given (its ids 0 .. num_experts - 1; SGLang passes its
    expert count + 1), no map (SGLang maps before), no rounding of the
    list's length (sgl-kernel's pad_sorted_token_ids is whether its kernel
    fills the list with the sentinel, not vLLM's pad_sorted_ids)."""
    c = _SGL
    ids = _ids(c, topk_ids, fake)
    _flag(f"{c.caller}: pad_sorted_token_ids", pad_sorted_token_ids, True)
    n = ids.numel()
    E = _int(f"{c.caller}: num_experts", num_experts, 0, _U32)
    spec = _spec(c, E, block_size, False, 0)
    concrete = isinstance(n, int)
    cuda = ids.device.type == "cuda"
    st = _ops._L().memra_layout_check(
        CALLS["layout_tables" if cuda else "layout_tables_host"], _STAND_IN,
        n if concrete else 2, spec, _stand_in_layout(padded_offsets=True))
    if st:
        c.refuse(st)
    length, blocks = _sizes(c, n, spec) if concrete else (None, None)
    for name, t, need in (("sorted_token_ids", sorted_token_ids, length),
                          ("experts_ids", experts_ids, blocks),
                          ("num_tokens_post_pad", num_tokens_post_pad, 1),
                          ("cumsum_buffer", cumsum_buffer, E + 1)):
        _out(c, name, t, ids, need)
    return c, ids, n, spec, length


def sglang_moe_align_block_size_impl(topk_ids: torch.Tensor, num_experts: int, block_size: int,
                                     sorted_token_ids: torch.Tensor, experts_ids: torch.Tensor,
                                     num_tokens_post_pad: torch.Tensor,
                                     cumsum_buffer: torch.Tensor,
                                     pad_sorted_token_ids: bool = False) -> None:
    c, ids, n, spec, length = _sglang_inputs(
        topk_ids, num_experts, block_size, sorted_token_ids, experts_ids, num_tokens_post_pad,
        cumsum_buffer, pad_sorted_token_ids, False)
    cuda = ids.is_cuda
    ws, ws_ptr = _workspace(ids.device, n, spec) if cuda else (None, 0)
    # cumsum_buffer: sgl-kernel's scratch, which ends holding each run's
    # start; here the library's padded_offsets, the same numbers.
    out = Layout(sorted_token_ids.data_ptr(), experts_ids.data_ptr(),
                 num_tokens_post_pad.data_ptr(), 0, cumsum_buffer.data_ptr(), 0, 0, ws_ptr)
    _run(c, ids, n, spec, out, cuda)
    del ws
    # The library writes the sentinel in the list's first `length` entries;
    # sgl-kernel's fill covers the caller's whole tensor.
    if pad_sorted_token_ids and sorted_token_ids.numel() > length:
        sorted_token_ids.view(-1)[length:].fill_(n)


def sglang_moe_align_block_size_fake(topk_ids, num_experts, block_size, sorted_token_ids,
                                     experts_ids, num_tokens_post_pad, cumsum_buffer,
                                     pad_sorted_token_ids=False):
    _sglang_inputs(topk_ids, num_experts, block_size, sorted_token_ids, experts_ids,
                   num_tokens_post_pad, cumsum_buffer, pad_sorted_token_ids, True)


# ---- routing fused with its layout -------------------------------------------------------

_ROUTE_LAYOUT_WORDS = _ops.words(logits="logits", n_tokens="logits.shape[0]",
                                 n_expert="logits.shape[1]", bias_ptr="bias",
                                 bias_dtype="bias.dtype", n_real="n_real",
                                 n_real_dtype="n_real.dtype", block_size="block_size",
                                 pad_sorted_ids="pad_sorted_ids")
_ROUTE_LAYOUT_WORDS["layout_spec->n_expert"] = "logits.shape[1] + n_shared"


def route_tables_layout_config(top_k, scoring, n_group, topk_group, renormalize,
                               routed_scaling_factor, group_scoring, n_local, n_shared,
                               shared_weight, shared_divisor):
    key = ("route_tables_layout", top_k, scoring, n_group, topk_group, renormalize,
           float_key(routed_scaling_factor), group_scoring, n_local, n_shared,
           float_key(shared_weight), float_key(shared_divisor))
    return _ops.config(key, lambda: RouteConfig(
        "route_tables_layout", _ROUTE_LAYOUT_WORDS, top_k=top_k, n_group=n_group,
        topk_group=topk_group, scoring=scoring, renormalize=renormalize,
        routed_scaling_factor=routed_scaling_factor, group_scoring=group_scoring,
        n_local=n_local, n_shared=n_shared,
        **shared_fields(shared_weight, shared_divisor), schema=True))


def _route_layout_inputs(cfg, logits, bias, emap, count, layer, bases, strides, model,
                         block_size, pad, fake):
    """What route() takes, for the fused call: the spec, layer, slabs and
    planes, and the layout's spec (its experts the routing's n_expert +
    n_shared; the routing's map labels the blocks), and the bias the spec
    points at (a float16 bias's float32 copy, which the caller holds until
    its launch)."""
    lc, bc, cc, bias = _ops._route_tensors(cfg, logits, bias, emap, count, fake)
    T, E = logits.shape
    E = int(E)
    if isinstance(T, int) and T >= _U32:
        _ops._refuse(cfg.caller, f"{cfg.names['n_tokens']} = {T} is more than a uint32 holds")
    if fake:
        spec = cfg.spec(lc, E, bc, 0 if bias is None else _STAND_IN,
                        0 if emap is None else _STAND_IN, cc, 0 if count is None else _STAND_IN)
    else:
        spec = cfg.spec(lc, E, bc, 0 if bias is None else bias.data_ptr(),
                        0 if emap is None else emap.data_ptr(), cc,
                        0 if count is None else count.data_ptr())
    il = _ops._layer(cfg, layer)
    slab = _ops._slab_ref(cfg.caller, bases, strides)
    n_slots = (cfg.template.n_local if emap is not None else E) + cfg.n_shared
    n_tokens = T if isinstance(T, int) else 2
    if E + cfg.n_shared >= _U32:
        # the layout's expert count no uint32 holds: the routing's own
        # refusal (too many shared experts) says why, in the call's words
        cfg.refuse(_ops._L().memra_route_check(CALLS["route_tables"], _STAND_IN, n_tokens, spec,
                                               il, None, slab, _STAND_IN, _STAND_IN, _STAND_IN,
                                               _STAND_IN))
    lspec = _spec(cfg, E + cfg.n_shared, block_size, pad, 0)

    def judge(macros):
        """The call's refusal, in its order (the routing's checks, then the
        layout's), from the device call's judge on either device: the op
        always names a layer, which the host arm would take out of range
        where a GPU refuses it (as the routing and table ops)."""
        cfg.refuse(_ops._L().memra_route_check_ex(
            CALLS["route_tables_ex"], _STAND_IN, n_tokens, spec, il, macros, slab, _STAND_IN,
            _STAND_IN, _STAND_IN, _STAND_IN, lspec, _stand_in_layout()))
    macros = _ops._planes_of(cfg.caller, _ops._dev_key(logits.device), model, "route", layer,
                             n_slots, n_tokens == 0, judge)
    return T, E, spec, il, slab, macros, lspec, bias, judge


def route_layout(cfg, logits, bias, emap, count, layer, bases, strides, model, block_size, pad):
    """Routing, its tables and the layout of its choice in one call
    (memra_route_tables_ex: one launch up to MEMRA_LAYOUT_ONE_LAUNCH pairs):
    route()'s four outputs, then sorted_ids, expert_ids, num_tokens_post_pad
    as moe_align_block_size gives them for ids."""
    T, E, spec, il, slab, macros, lspec, bias, judge = _route_layout_inputs(
        cfg, logits, bias, emap, count, layer, bases, strides, model, block_size, pad, False)
    cuda = logits.is_cuda
    K = cfg.K
    n = T * K
    if n > MAX_PAIRS:  # refused by the library: asked before anything is allocated
        judge(macros)
    length, blocks = ctypes.c_uint64(), ctypes.c_uint64()
    if _ops._L().memra_layout_sizes(n, lspec, ctypes.byref(length), ctypes.byref(blocks)):
        # The layout is wrong; the routing may be too, and the call says
        # the routing's first: its judge gives the call's refusal.
        judge(macros)
    device = logits.device
    ids = torch.empty(T, K, dtype=torch.int32, device=device)
    weights = torch.empty(T, K, dtype=torch.float32, device=device)
    ptrs = torch.empty(3, T, K, dtype=torch.int64, device=device)
    scl = torch.empty(3, T, K, dtype=torch.float32, device=device)
    sorted_ids = torch.empty(length.value, dtype=torch.int32, device=device)
    expert_ids = torch.empty(blocks.value, dtype=torch.int32, device=device)
    post = torch.empty(1, dtype=torch.int32, device=device)
    ws, ws_ptr = _workspace(device, n, lspec) if cuda else (None, 0)
    out = ctypes.byref(Layout(sorted_ids.data_ptr(), expert_ids.data_ptr(), post.data_ptr(), 0,
                              0, 0, 0, ws_ptr))
    logits = logits.contiguous()
    L = _ops._L()
    if cuda:
        dev = logits.get_device()
        st = L.memra_route_tables_ex(engine_at(dev, model)._h, logits.data_ptr(), T, spec, il,
                                     macros, slab, ids.data_ptr(), weights.data_ptr(),
                                     ptrs.data_ptr(), scl.data_ptr(), lspec, out,
                                     current_stream(dev))
        if st:
            cfg.refuse(st)
    else:
        # the layer, as a GPU's call judges it (the host arm takes none)
        judge(macros)
        f = _ops._host_faults_struct()
        st = L.memra_route_tables_host_ex(logits.data_ptr(), T, spec, macros, slab,
                                          ids.data_ptr(), weights.data_ptr(), ptrs.data_ptr(),
                                          scl.data_ptr(), ctypes.byref(f), lspec, out)
        if st and st != 5 and st != 6:  # faults: counted, the outputs all written
            cfg.refuse(st)
        host_faults.add(f)
    del ws
    return ids, weights, ptrs, scl, sorted_ids, expert_ids, post


def route_layout_fake(cfg, logits, bias, emap, count, layer, bases, strides, model, block_size,
                      pad):
    T, E, spec, il, slab, macros, lspec, bias, judge = _route_layout_inputs(
        cfg, logits, bias, emap, count, layer, bases, strides, model, block_size, pad, True)
    concrete = isinstance(T, int)
    judge(macros)
    K = cfg.K
    n = T * K
    if concrete:
        length, blocks = _sizes(cfg, n, lspec)
    else:
        length, blocks = _symbolic_sizes(n, E + cfg.n_shared, lspec._obj.block_size,
                                         lspec._obj.pad_sorted_ids)
    return (logits.new_empty((T, K), dtype=torch.int32),
            logits.new_empty((T, K), dtype=torch.float32),
            logits.new_empty((3, T, K), dtype=torch.int64),
            logits.new_empty((3, T, K), dtype=torch.float32),
            logits.new_empty((length,), dtype=torch.int32),
            logits.new_empty((blocks,), dtype=torch.int32),
            logits.new_empty((1,), dtype=torch.int32))


LIB.define(
    "route_tables_layout(Tensor logits, int top_k, int layer, int block_size, "
    "int[] bases=[0, 0, 0], int[] strides=[0, 0, 0], str scoring='softmax', int n_group=1, "
    "int topk_group=1, bool renormalize=False, float routed_scaling_factor=1.0, "
    "Tensor? bias=None, str? group_scoring=None, Tensor? expert_map=None, int n_local=0, "
    "int n_shared=0, float? shared_weight=None, str model='', float? shared_divisor=None, "
    "Tensor? n_real=None, bool pad_sorted_ids=False) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")


def route_tables_layout_impl(logits: torch.Tensor, top_k: int, layer: int, block_size: int,
                             bases: List[int] = (0, 0, 0), strides: List[int] = (0, 0, 0),
                             scoring: str = "softmax", n_group: int = 1, topk_group: int = 1,
                             renormalize: bool = False, routed_scaling_factor: float = 1.0,
                             bias: Optional[torch.Tensor] = None,
                             group_scoring: Optional[str] = None,
                             expert_map: Optional[torch.Tensor] = None, n_local: int = 0,
                             n_shared: int = 0, shared_weight: Optional[float] = None,
                             model: str = "",
                             shared_divisor: Optional[float] = None,
                             n_real: Optional[torch.Tensor] = None, pad_sorted_ids: bool = False):
    cfg = route_tables_layout_config(top_k, scoring, n_group, topk_group, renormalize,
                                     routed_scaling_factor, group_scoring, n_local, n_shared,
                                     shared_weight, shared_divisor)
    return route_layout(cfg, logits, bias, expert_map, n_real, layer, bases, strides, model,
                        block_size, pad_sorted_ids)


def route_tables_layout_fake(logits, top_k, layer, block_size, bases=(0, 0, 0),
                             strides=(0, 0, 0), scoring="softmax", n_group=1, topk_group=1,
                             renormalize=False, routed_scaling_factor=1.0, bias=None,
                             group_scoring=None, expert_map=None, n_local=0, n_shared=0,
                             shared_weight=None, model="", shared_divisor=None, n_real=None,
                             pad_sorted_ids=False):
    cfg = route_tables_layout_config(top_k, scoring, n_group, topk_group, renormalize,
                                     routed_scaling_factor, group_scoring, n_local, n_shared,
                                     shared_weight, shared_divisor)
    return route_layout_fake(cfg, logits, bias, expert_map, n_real, layer, bases, strides,
                             model, block_size, pad_sorted_ids)


for _name, _impl, _fake in (
        ("moe_align_block_size", moe_align_block_size_impl, moe_align_block_size_fake),
        ("sglang_moe_align_block_size", sglang_moe_align_block_size_impl,
         sglang_moe_align_block_size_fake),
        ("route_tables_layout", route_tables_layout_impl, route_tables_layout_fake)):
    _ops.register(_name, _impl, _fake)
