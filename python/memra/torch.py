"""memra as PyTorch ops: ``torch.ops.memra.vrows_tables_`` (in place) and the
functional ``vrows_tables``, on the current CUDA stream, inside
``torch.cuda.graph`` and under ``torch.compile(fullgraph=True)``.

    import memra.torch as mt
    mt.prepare_layer(layer, planes, device)          # before graph capture
    torch.ops.memra.vrows_tables_(sel, selw, ptrs, scl, n_expert, layer, planes,
                                  bases, strides)

Tensors: ``sel`` int32 [n_pairs] and ``selw`` float32 [n_pairs] on one CUDA
device, ``ptrs`` int64 [3 * n_pairs] (the uint64 pointer bits) and ``scl``
float32 [3 * n_pairs] on the same device, all contiguous; ``planes`` a CPU
float32 tensor [3, n_expert] (gate, up, down macro scales) or None; ``bases``
and ``strides`` three ints each in [0, 2^63).

Engines: one per (device, model), created once (a lock makes two threads'
first calls share one). Layers are keyed by index per engine, so two models
with the same layer indices (the draft and the target of speculative
decoding) pass different ``model`` names. The table op and routing keep
separate slots for one layer index, so both can use it in one graph.
"""
import ctypes
import threading
from typing import List, Optional

import torch

import memra
from memra import InvalidArgError

__all__ = ["vrows_tables_", "vrows_tables", "prepare_layer", "engine", "route_tables",
           "faults"]

_engines = {}
_engines_lock = threading.Lock()


def engine(device, model: str = ""):
    """The memra engine for a CUDA device and a model name (created once,
    kept): a model's layers are its own, so a draft and a target model with
    the same layer indices pass different names."""
    device = torch.device(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    key = (index, str(model))
    eng = _engines.get(key)
    if eng is None:
        with _engines_lock:
            eng = _engines.get(key)
            if eng is None:
                eng = _engines[key] = memra.Engine(index)
    return eng


def faults(device=None, reset: bool = False, model: str = ""):
    """The engine's fault word, read after the work queued on the current
    stream of `device` (where the ops launched), like a synchronous copy
    there."""
    device = torch.device(device if device is not None else "cuda")
    eng = engine(device, model)
    return eng.faults(stream=torch.cuda.current_stream(device).cuda_stream, reset=reset)


_I63 = 1 << 63


def _check_tensor(name, t, dtype, numel, device):
    if not isinstance(t, torch.Tensor):
        raise InvalidArgError(f"{name} must be a tensor, not {type(t).__name__}")
    if t.device.type != "cuda":
        raise InvalidArgError(f"{name} is on {t.device}, not a CUDA device")
    if device is not None and t.device != device:
        raise InvalidArgError(f"{name} is on {t.device}, but sel is on {device}")
    if t.dtype != dtype:
        raise InvalidArgError(f"{name} is {t.dtype}, want {dtype}")
    if not t.is_contiguous():
        raise InvalidArgError(f"{name} is not contiguous")
    if numel is not None and t.numel() != numel:
        raise InvalidArgError(f"{name} holds {t.numel()} elements, want {numel}")


def _planes(macros, n_expert):
    """A CPU float32 [3, n_expert] tensor as memra's three host planes."""
    if macros is None:
        return None
    if not isinstance(macros, torch.Tensor):
        raise InvalidArgError("macros must be a CPU float32 tensor [3, n_expert] or None")
    if macros.device.type != "cpu":
        raise InvalidArgError(f"macros is on {macros.device}; memra mirrors host planes, pass "
                              f"a CPU tensor")
    if macros.dtype != torch.float32:
        raise InvalidArgError(f"macros is {macros.dtype}, want torch.float32")
    if tuple(macros.shape) != (3, n_expert):
        raise InvalidArgError(f"macros has shape {tuple(macros.shape)}, want (3, {n_expert}) "
                              f"for n_expert = {n_expert}")
    if not macros.is_contiguous():
        raise InvalidArgError("macros is not contiguous")
    m = memra._lib.Macros()
    base, row = macros.data_ptr(), n_expert * 4
    m.plane[:] = [base, base + row, base + 2 * row]
    return m


def _slab(bases, strides):
    for name, v in (("bases", bases), ("strides", strides)):
        if len(v) != 3:
            raise InvalidArgError(f"{name} must be three ints (gate, up, down)")
    return memra.slabs([memra._int(f"bases[{k}]", b, 0, _I63) for k, b in enumerate(bases)],
                       [memra._int(f"strides[{k}]", s, 0, _I63) for k, s in enumerate(strides)])


@torch.library.custom_op("memra::vrows_tables_", mutates_args=("ptrs", "scl"))
def vrows_tables_(sel: torch.Tensor, selw: torch.Tensor, ptrs: torch.Tensor, scl: torch.Tensor,
                  n_expert: int, layer: int, macros: Optional[torch.Tensor], bases: List[int],
                  strides: List[int], model: str = "") -> None:
    """Builds the verify-rows tables into ptrs and scl (one launch on the
    current stream of sel's device; never synchronises)."""
    _check_tensor("sel", sel, torch.int32, None, None)
    n_pairs = memra._int("n_pairs (sel's length)", sel.numel(), 1, memra.MAX_PAIRS + 1)
    _check_tensor("selw", selw, torch.float32, n_pairs, sel.device)
    _check_tensor("ptrs", ptrs, torch.int64, 3 * n_pairs, sel.device)
    _check_tensor("scl", scl, torch.float32, 3 * n_pairs, sel.device)
    n_expert = memra._int("n_expert", n_expert, 1, 1 << 32)
    layer = memra._int("layer", layer, 0, memra.MAX_LAYERS)
    planes = _planes(macros, n_expert)
    slab = _slab(bases, strides)
    eng = engine(sel.device, model)
    stream = torch.cuda.current_stream(sel.device).cuda_stream
    eng.tables_from_sel(sel.data_ptr(), selw.data_ptr(), n_pairs, n_expert, layer, None, slab,
                        ptrs.data_ptr(), scl.data_ptr(), stream=stream, _planes=planes)


@vrows_tables_.register_fake
def _(sel, selw, ptrs, scl, n_expert, layer, macros, bases, strides, model=""):
    return None


def vrows_tables(sel: torch.Tensor, selw: torch.Tensor, n_expert: int, layer: int,
                 macros: Optional[torch.Tensor], bases: List[int], strides: List[int],
                 model: str = ""):
    """Functional form: allocates and returns (ptrs int64 [3n], scl float32 [3n])."""
    n = sel.numel()
    ptrs = torch.empty(3 * n, dtype=torch.int64, device=sel.device)
    scl = torch.empty(3 * n, dtype=torch.float32, device=sel.device)
    torch.ops.memra.vrows_tables_(sel, selw, ptrs, scl, n_expert, layer, macros, bases, strides,
                                  model)
    return ptrs, scl


def prepare_layer(layer: int, macros: Optional[torch.Tensor], device=None, n_expert=None,
                  model: str = ""):
    """Mirrors layer `layer`'s planes to the device now, on the current stream
    (and loads the kernel): call for every layer before capturing a graph."""
    device = torch.device(device if device is not None else "cuda")
    eng = engine(device, model)
    stream = torch.cuda.current_stream(device).cuda_stream
    if macros is None:
        eng.warmup()
        return
    n_expert = macros.shape[-1] if n_expert is None else n_expert
    eng.prepare_layer(layer, n_expert, None, stream=stream, _planes=_planes(macros, n_expert))


def route_tables(logits: torch.Tensor, top_k: int, layer: int,
                 macros: Optional[torch.Tensor] = None, bases=(0, 0, 0), strides=(0, 0, 0),
                 scoring: str = "softmax", n_group: int = 1, topk_group: int = 1,
                 renormalize: bool = False, routed_scaling_factor: float = 1.0,
                 bias: Optional[torch.Tensor] = None, model: str = ""):
    """Router logits ([n_tokens, n_expert], float32 or bfloat16, CUDA,
    contiguous) to (sel int32, selw float32, ptrs int64, scl float32) in one
    launch on the current stream: memra_moe_route_tables. bias: a CPU float32
    tensor [n_expert] (the score-correction bias, for choosing only)."""
    if not isinstance(logits, torch.Tensor) or logits.device.type != "cuda":
        raise InvalidArgError("logits must be a CUDA tensor")
    if logits.dtype not in (torch.float32, torch.bfloat16):
        raise InvalidArgError(f"logits are {logits.dtype}, want float32 or bfloat16")
    if logits.dim() != 2 or not logits.is_contiguous():
        raise InvalidArgError("logits must be a contiguous [n_tokens, n_expert] tensor")
    n_tokens, n_expert = logits.shape
    if bias is not None:
        if bias.device.type != "cpu" or bias.dtype != torch.float32 or \
                tuple(bias.shape) != (n_expert,) or not bias.is_contiguous():
            raise InvalidArgError(f"bias must be a contiguous CPU float32 tensor [{n_expert}]")
    spec = memra.route_spec(n_expert, top_k, scoring, n_group, topk_group, renormalize,
                            routed_scaling_factor,
                            bias.data_ptr() if bias is not None else None,
                            logits.dtype == torch.bfloat16)
    n = memra._int("n_tokens", n_tokens, 1, 1 << 32) * spec.top_k
    planes = _planes(macros, n_expert)
    sel = torch.empty(n, dtype=torch.int32, device=logits.device)
    selw = torch.empty(n, dtype=torch.float32, device=logits.device)
    ptrs = torch.empty(3 * n, dtype=torch.int64, device=logits.device)
    scl = torch.empty(3 * n, dtype=torch.float32, device=logits.device)
    eng = engine(logits.device, model)
    stream = torch.cuda.current_stream(logits.device).cuda_stream
    memra.check(memra.lib().memra_moe_route_tables(
        eng._ptr(), logits.data_ptr(), n_tokens, ctypes.byref(spec),
        memra._int("layer", layer, 0, memra.MAX_LAYERS), ctypes.byref(planes) if planes else None,
        ctypes.byref(_slab(bases, strides)), sel.data_ptr(), selw.data_ptr(), ptrs.data_ptr(),
        scl.data_ptr(), memra._stream(stream)))
    return sel, selw, ptrs, scl
