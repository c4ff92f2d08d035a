"""Engines for memra.torch: one per (CUDA device, model), created once under
a lock; PyTorch's current stream as a raw handle; and the host arm's fault
word, so CPU tensors report faults the way a device does."""
import threading

import torch

import memra
from memra import _lib

_engines = {}
# Re-entrant: creating an engine may warn, and a logging handler on the
# "memra" logger runs on this thread and may ask for an engine itself.
_engines_lock = threading.RLock()


def engine(device, model: str = ""):
    """The memra engine for a CUDA device and a model name (created once,
    kept): a model's layers are its own, so a draft and a target model with
    the same layer indices pass different names."""
    device = torch.device(device)
    if device.type != "cuda":
        raise memra.InvalidArgError(f"device {device} is not a CUDA device (CPU tensors use the "
                                    f"host arm and need no engine)")
    index = device.index if device.index is not None else torch.cuda.current_device()
    return engine_at(index, model)


def engine_at(index: int, model: str):
    key = (index, model)
    eng = _engines.get(key)
    if eng is None:
        with _engines_lock:
            eng = _engines.get(key)
            if eng is None:
                eng = _engines[key] = memra.Engine(index)
    return eng


try:  # the raw handle, without building a torch.cuda.Stream (a few microseconds)
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - a torch without it
    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


def current_stream(index: int) -> int:
    """PyTorch's current stream on CUDA device `index`, as memra takes it."""
    return _raw_stream(index)


class HostFaults:
    """The host arm's fault word: what the CPU implementations of the ops
    found, kept as a device keeps its own (counts add up, first_pair is the
    lowest faulting pair of any call) until read with reset."""

    def __init__(self):
        self._lock = threading.Lock()
        self._f = _lib.Faults(0, 0, memra.NO_FAULT, 0, 0)

    def add(self, f):
        if not (f.bad_expert or f.nonfinite or f.not_local or f.padded):
            return
        with self._lock:
            w = self._f
            w.bad_expert = (w.bad_expert + f.bad_expert) & 0xFFFFFFFF
            w.nonfinite = (w.nonfinite + f.nonfinite) & 0xFFFFFFFF
            w.not_local = (w.not_local + f.not_local) & 0xFFFFFFFF
            w.padded = (w.padded + f.padded) & 0xFFFFFFFF
            w.first_pair = min(w.first_pair, f.first_pair)

    def read(self, reset):
        with self._lock:
            w = self._f
            out = _lib.Faults(w.bad_expert, w.nonfinite, w.first_pair, w.not_local, w.padded)
            if reset:
                self._f = _lib.Faults(0, 0, memra.NO_FAULT, 0, 0)
        return out


host_faults = HostFaults()


def faults(device=None, reset: bool = False, model: str = ""):
    """The fault word of `device`'s engine, read after the work queued on the
    current stream of `device` (where the ops launched), like a synchronous
    copy there. For device "cpu": what the host arm found in CPU tensors."""
    device = torch.device(device if device is not None else "cuda")
    if device.type == "cpu":
        return host_faults.read(bool(reset))
    eng = engine(device, model)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return eng.faults(stream=current_stream(index), reset=reset)
