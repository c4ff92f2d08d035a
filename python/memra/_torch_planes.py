"""A layer's macro planes, given once (prepare_layer, route_prepare_layer)
and read by every later call of the ops on that layer.

The ops take no host tensor: a CPU tensor argument keeps torch.compile's
CUDA graphs (mode="reduce-overhead") from capturing the step, and comparing
planes on every call costs time. Instead a layer's planes are prepared once
per (device, model, kind, layer): copied here (later changes to the caller's
tensor do nothing until prepared again), and on a CUDA device mirrored by
the library at once, so the ops launch without an upload, also under
capture. A layer never prepared has no planes. The table op ("vrows") and routing ("route") keep separate planes
for one layer index, as the library keeps separate mirror slots."""
import ctypes
import logging
import threading
from typing import NamedTuple, Optional

import torch

import memra
from memra import _lib
from memra._lib import CALLS, ROUTE_MAX_EXPERT, ROUTE_MAX_TOP_K
from memra._route import _int

from ._torch_engines import current_stream, engine_at


class Prepared(NamedTuple):
    n_slots: int            # the experts the planes hold; 0: the layer has no planes
    macros: Optional[object]  # ctypes.byref(memra_vrows_macros) (keeps it alive), or None
    keep: Optional[torch.Tensor]  # the planes' host copy, alive while referenced


_prepared = {}
# Orders prepares of one key with their registration. Re-entrant: a prepare
# may load a kernel and warn, and a logging handler on the "memra" logger
# (on this thread) may prepare a layer itself.
_lock = threading.RLock()
_I32 = 1 << 31
_WORDS = {"il": "layer", "macros->plane": "macros"}


def device_key(device: torch.device) -> int:
    """-1 for the host arm, else the CUDA device index."""
    if device.type == "cpu":
        return -1
    if device.type != "cuda":
        raise memra.InvalidArgError(f"device {device} is neither CPU nor CUDA")
    return device.index if device.index is not None else torch.cuda.current_device()


def _host_planes(macros, n_slots):
    """A private contiguous CPU float32 [3, n_slots] copy of the planes (a CPU
    or CUDA tensor; no dtype conversion: no silent rounding)."""
    if not isinstance(macros, torch.Tensor):
        raise memra.InvalidArgError(f"macros must be a float32 tensor [3, n_slots] or None, not "
                                    f"{type(macros).__name__}")
    if macros.dtype != torch.float32:
        raise memra.InvalidArgError(f"macros is {macros.dtype}, want torch.float32 (no silent "
                                    f"rounding)")
    if macros.dim() != 2 or macros.shape[0] != 3 or \
            (n_slots is not None and macros.shape[1] != n_slots):
        want = f"(3, {n_slots})" if n_slots is not None else "(3, n_slots)"
        raise memra.InvalidArgError(f"macros has shape {tuple(macros.shape)}, want {want}")
    if macros.device.type not in ("cpu", "cuda"):
        raise memra.InvalidArgError(f"macros is on {macros.device}, not the CPU or a CUDA device")
    host = macros.detach().to("cpu", copy=True).contiguous()
    m = _lib.Macros()
    base, row = host.data_ptr(), host.shape[1] * 4
    m.plane[:] = [base, base + row, base + 2 * row]
    return host, m


NO_PLANES = Prepared(0, None, None)


_warned = set()


def _preparable(kind: str, layer: int) -> bool:
    """Whether the library takes `layer` in the prepare call the warning
    advises (with no planes): asked of the library, the one judge, rather
    than judged here by a copy of its rule."""
    L = memra.lib()
    if kind == "route":
        spec = memra.route_spec(1, 1)
        return L.memra_route_check(CALLS["route_prepare_layer"], 0, 0, ctypes.byref(spec),
                                   layer, None, None, 0, 0, 0, 0) == 0
    return L.memra_vrows_check(CALLS["vrows_prepare_layer"], 0, 0, 0, 0, layer, None, None,
                               None, 0, 0) == 0


def lookup(key_dev: int, model: str, kind: str, layer: int) -> Prepared:
    """The layer's prepared planes; a layer never prepared has none (scales
    1, as the library's macros = NULL), said once per layer as a warning on
    the "memra" logger, since a forgotten prepare would otherwise scale
    silently by 1 (prepare it with None to say it has no planes). On a CUDA
    device its kernel loads at its first eager call (under capture that is
    the library's CaptureError: prepare every layer before capturing)."""
    key = (key_dev, model, kind, layer)
    entry = _prepared.get(key)
    if entry is not None:
        return entry
    # A layer whose prepare the library would refuse is not warned about
    # (the advice would fail): the call's own error says what is wrong.
    if key not in _warned and _preparable(kind, layer):
        _warned.add(key)
        logging.getLogger("memra").warning(
            "layer %d of model %r was never prepared for %s: it has no macro planes (every "
            "scale 1); call memra.torch.%s(%d, planes or None) to say which", layer, model,
            "routing" if kind == "route" else "the table op",
            "route_prepare_layer" if kind == "route" else "prepare_layer", layer)
    return NO_PLANES


def _where(fn, layer, model, device):
    """A prepare call's layer (an int32), model (a str) and device key."""
    layer = _int(fn + ": layer", layer, -_I32, _I32)
    return layer, str(model), device_key(torch.device(device if device is not None else "cuda"))


def prepare_layer(layer: int, macros: Optional[torch.Tensor], device=None, n_expert=None,
                  model: str = "") -> None:
    """Gives layer `layer` of `model` its macro planes for the table op
    (vrows_tables_ / vrows_tables) on `device`: a float32 [3, n_slots] tensor
    (gate, up, down; n_slots = n_expert, or n_local + n_shared with expert
    parallelism) or None for none. On a CUDA device the planes are mirrored
    now, on the current stream, and the kernel is loaded: call it for every
    layer before capturing a graph, and again whenever the planes change."""
    layer, model, dev = _where("prepare_layer", layer, model, device)
    with _lock:
        if macros is None:
            entry = Prepared(0, None, None)
        else:
            host, m = _host_planes(macros, n_expert)
            entry = Prepared(host.shape[1], ctypes.byref(m), host)
        L = memra.lib()
        if dev >= 0:
            eng = engine_at(dev, model)  # (no planes: the kernel is loaded all the same)
            memra.check(L.memra_vrows_prepare_layer(eng._ptr(), layer, entry.n_slots,
                                                    entry.macros,
                                                    memra._stream(current_stream(dev))),
                        "prepare_layer", _WORDS)
        else:
            # The host arm has no layers: what the device call would refuse
            # is refused here too, so a layer prepared on the CPU is one a
            # GPU would take.
            memra.check(L.memra_vrows_check(CALLS["vrows_prepare_layer"], 0, 0, 0,
                                            entry.n_slots, layer, entry.macros, None, None, 0, 0),
                        "prepare_layer", _WORDS)
        _prepared[(dev, model, "vrows", layer)] = entry


_ROUTE_MAX_SLOTS = ROUTE_MAX_EXPERT + ROUTE_MAX_TOP_K - 1  # 1024 routed + 31 shared


def route_prepare_layer(layer: int, macros: Optional[torch.Tensor] = None, device=None,
                        model: str = "") -> None:
    """Gives layer `layer` of `model` its macro planes for routing
    (route_tables) on `device`: a float32 [3, n_slots] tensor (n_slots =
    n_expert + n_shared, or n_local + n_shared with an expert map) or None.
    On a CUDA device the planes are mirrored now, on the current stream, and
    the routing kernels are loaded: call it for every layer before capturing
    a graph, and again whenever the planes change. The bias and the expert
    map are device tensors read in place by each call: they need nothing
    prepared."""
    layer, model, dev = _where("route_prepare_layer", layer, model, device)
    with _lock:
        if macros is None:
            entry = Prepared(0, None, None)
            n_slots = 1
        else:
            host, m = _host_planes(macros, None)
            n_slots = host.shape[1]
            if not 1 <= n_slots <= _ROUTE_MAX_SLOTS:
                raise memra.InvalidArgError(
                    f"macros has {n_slots} slots: routing's planes hold 1 to {_ROUTE_MAX_SLOTS} "
                    f"(n_expert + n_shared, at most {ROUTE_MAX_EXPERT} + "
                    f"{ROUTE_MAX_TOP_K - 1})")
            entry = Prepared(n_slots, ctypes.byref(m), host)
        # The mirror is sized by the planes alone: a spec whose slots are
        # n_slots (routed, then shared) mirrors them for any launch spec with
        # that many slots.
        routed = min(n_slots, ROUTE_MAX_EXPERT)
        spec = memra.route_spec(routed, 1, n_shared=n_slots - routed)
        L = memra.lib()
        if dev >= 0:
            eng = engine_at(dev, model)
            memra.check(L.memra_route_prepare_layer(eng._ptr(), layer, ctypes.byref(spec),
                                                    entry.macros,
                                                    memra._stream(current_stream(dev))),
                        "route_prepare_layer", _WORDS)
        else:  # as for the table op's planes: the device call's refusals
            memra.check(L.memra_route_check(CALLS["route_prepare_layer"], 0, 0,
                                            ctypes.byref(spec), layer, entry.macros, None, 0, 0,
                                            0, 0), "route_prepare_layer", _WORDS)
        _prepared[(dev, model, "route", layer)] = entry
