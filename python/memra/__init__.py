"""memra: device-built MoE "verify rows" pointer and scale tables, bit-identical
to the host arithmetic, in one capturable launch.

A thin typed layer over the C library (ctypes; no extension module, so it
does not depend on PyTorch's C++ ABI). ``memra.torch`` adds the PyTorch ops
(``torch.ops.memra.vrows_tables_``); it is imported only when asked for.

    import memra
    ptrs, scl, faults = memra.vrows_tables_host(sel, selw, n_expert, planes, bases, strides)
    eng = memra.Engine(0)          # one GPU; shares PyTorch's primary context
"""
import ctypes
import logging
import os
import sys
import threading

from . import _lib
from ._errors import *  # noqa: F401,F403  (the exception classes)
from ._errors import Error, InvalidArgError, LibraryError, NullArgError
from ._lib import (LAYOUT_MAX_EXPERT, LAYOUT_ONE_LAUNCH, MAX_LAYERS,  # noqa: F401
                   MAX_PAIRS, NO_FAULT, ROUTE_MAX_EXPERT, ROUTE_MAX_GROUPS, ROUTE_MAX_TOP_K,
                   Faults, check, lib)
from ._nvrtc import wheel_nvrtc_paths
from ._route import _int

__version__ = _lib.VERSION

_U64 = 1 << 64
_I32 = 1 << 31

_nvrtc_offered = False
# Re-entrant: memra's warnings reach logging handlers on the thread that
# raised them, and a handler may call memra (nvrtc_candidates() runs this
# module's first-use step again) while this thread holds the lock.
_nvrtc_lock = threading.RLock()


def version():
    """The loaded library's version, "major.minor.patch"."""
    return lib().memra_version_string().decode()


def _fspath(name, path):
    """A path as the bytes the OS takes (str, bytes or os.PathLike, through
    os.fsencode, so a non-UTF-8 name round-trips); a NUL is refused, not cut."""
    try:
        raw = os.fsencode(path)
    except TypeError:
        raise InvalidArgError(f"{name} must be str, bytes or os.PathLike, not "
                              f"{type(path).__name__}") from None
    if b"\0" in raw:
        raise InvalidArgError(f"{name} holds a NUL byte: {raw!r}")
    return raw


def set_nvrtc_path(path):
    """Adds an NVRTC library (a file) for engines to choose from. A relative
    path is taken against the working directory now."""
    check(lib().memra_set_nvrtc_path(_fspath("path", path)))


def nvrtc_candidates():
    """Every NVRTC candidate in the order engines consider them, each a dict:
    path, origin (how it was found), state ("usable", "refused" or
    "not_tried"), why (when refused), version (1000*major + 10*minor) and
    archs (when usable)."""
    L = lib()
    if getattr(L, "memra_nvrtc_list", None) is None:
        raise LibraryError("this libmemra has no memra_nvrtc_list")
    _ensure_nvrtc()
    n = ctypes.c_int(0)
    check(L.memra_nvrtc_list(None, 0, ctypes.byref(n)))
    room = n.value + 8  # room for any found meanwhile
    arr = (_lib.NvrtcInfo * room)()
    check(L.memra_nvrtc_list(arr, room, ctypes.byref(n)))
    return [{"path": os.fsdecode(c.path), "origin": c.origin.decode(),
             "state": _lib.NVRTC_STATES.get(c.state, str(c.state)),
             "why": c.why.decode(errors="replace") if c.state == 1 else None,
             "version": c.version, "archs": list(c.archs[:c.n_archs])}
            for c in arr[:min(n.value, room)]]


def _ensure_nvrtc():
    """Once, before the first engine: every NVRTC the NVIDIA wheels on
    sys.path hold, in wheel_nvrtc_paths() order, for the library to choose
    from per device and driver (it loads one only when those before it
    cannot serve, so offering them all costs nothing)."""
    global _nvrtc_offered
    with _nvrtc_lock:
        if _nvrtc_offered:
            return
        _nvrtc_offered = True
        for p in wheel_nvrtc_paths():
            if lib().memra_set_nvrtc_path(os.fsencode(p)):
                logging.getLogger("memra").debug(
                    "NVRTC %s not offered: %s", p,
                    (lib().memra_last_error() or b"").decode(errors="replace"))


# ---- conversions: what reaches C is what was given, never truncated; the ----
# ---- rules are the library's, which refuses with a message naming them ----

def _triple(name, values, hi=_U64):
    try:
        vals = list(values)
    except TypeError:
        raise InvalidArgError(f"{name} must be three integers") from None
    if len(vals) != 3:
        raise InvalidArgError(f"{name} must be three integers (gate, up, down), got {len(vals)}")
    return [_int(f"{name}[{k}]", v, 0, hi) for k, v in enumerate(vals)]


def slabs(bases, strides):
    """Slab bases (device addresses) and strides (bytes per expert), gate/up/down."""
    s = _lib.Slabs()
    s.base[:] = _triple("bases", bases)
    s.stride[:] = _triple("strides", strides)
    return s


def _planes_numpy(planes, n_expert):
    """Three float32 planes of n_expert each (a [3, n_expert] array or three
    arrays), C-contiguous, kept alive by the caller; None for none."""
    if planes is None:
        return None, None
    import numpy as np
    arrs = [planes[k] for k in range(3)] if len(planes) == 3 else None
    if arrs is None:
        raise InvalidArgError("macros must be three planes (gate, up, down) or None")
    keep = []
    m = _lib.Macros()
    for k, a in enumerate(arrs):
        a = np.asarray(a)
        if a.dtype != np.float32:
            raise InvalidArgError(f"macros[{k}] is {a.dtype}, not float32 (no silent rounding)")
        if a.ndim != 1 or a.shape[0] != n_expert:
            raise InvalidArgError(f"macros[{k}] has shape {a.shape}, want ({n_expert},)")
        a = np.ascontiguousarray(a)
        keep.append(a)
        m.plane[k] = a.ctypes.data
    return m, keep


def vrows_options(n_expert, expert_map=None, n_local=0, n_shared=0):
    """(memra_vrows_options or None, n_slots, array kept alive): expert
    parallelism (expert_map: int32 per routed expert, its local slot or -1,
    as a NumPy array or an address in the arm's memory, with n_local slots)
    and fused shared experts (ids n_expert .. n_expert + n_shared - 1, whose
    slots follow the routed ones). n_slots: the experts the slabs and macro
    planes hold. The library judges the options when they are used."""
    from ._route import _array
    addr, keep = _array("expert_map", expert_map, n_expert, ("int32",))
    n_local = _int("n_local", n_local, 0, 1 << 32)
    n_shared = _int("n_shared", n_shared, 0, 1 << 32)
    n_slots = (n_local if addr else n_expert) + n_shared
    if not (addr or n_local or n_shared):
        return None, n_slots, None
    o = _lib.VrowsOptions()
    o.expert_map, o.n_local, o.n_shared = addr, n_local, n_shared
    return o, n_slots, keep


def vrows_tables_host(sel, selw, n_expert, macros=None, bases=(0, 0, 0), strides=(0, 0, 0), *,
                      expert_map=None, n_local=0, n_shared=0):
    """The reference arithmetic on NumPy arrays: returns (ptrs uint64[3n],
    scl float32[3n], faults). Out-of-range ids and non-finite scales are
    reported in faults (the tables are written in full), and so are pairs
    that expert parallelism sends to another rank (faults.not_local, not a
    fault: NULL pointers, +0 scales); argument errors raise a memra.Error
    subclass. macros: three planes of n_slots (see vrows_options). No pairs
    give empty tables."""
    import numpy as np
    sel = np.asarray(sel)
    selw = np.asarray(selw)
    if sel.dtype.kind not in "iu":
        raise InvalidArgError(f"sel is {sel.dtype}, not an integer array")
    if selw.dtype != np.float32:
        raise InvalidArgError(f"selw is {selw.dtype}, not float32 (no silent rounding)")
    if sel.ndim != 1 or selw.shape != sel.shape:
        raise InvalidArgError(f"sel {sel.shape} and selw {selw.shape} must be equal 1-D shapes")
    n = _int("n_pairs (sel.size)", sel.shape[0], 0, 1 << 32)
    n_expert = _int("n_expert", n_expert, 0, 1 << 32)
    if sel.size and (sel.min() < -(1 << 31) or sel.max() >= 1 << 31):
        # out of range whatever n_expert is, as the library counts it (a
        # fault, not a refusal): -1 keeps it so as an int32
        sel = np.where((sel < -(1 << 31)) | (sel >= 1 << 31), -1, sel)
    sel = np.ascontiguousarray(sel, dtype=np.int32)
    selw = np.ascontiguousarray(selw)
    o, n_slots, map_keep = vrows_options(n_expert, expert_map, n_local, n_shared)
    m, keep = _planes_numpy(macros, n_slots)
    s = slabs(bases, strides)
    mref, oref = ctypes.byref(m) if m else None, ctypes.byref(o) if o else None
    if n > MAX_PAIRS:  # the library refuses it: asked before 3n tables are allocated
        check(lib().memra_vrows_check(_lib.CALLS["vrows_tables_host_ex"], sel.ctypes.data,
                                      selw.ctypes.data, n, n_expert, 0, mref, ctypes.byref(s),
                                      oref, 64, 64), "vrows_tables_host", _VROWS_NAMES)
    ptrs = np.empty(3 * n, dtype=np.uint64)
    scl = np.empty(3 * n, dtype=np.float32)
    f = Faults()
    st = lib().memra_vrows_tables_host_ex(sel.ctypes.data, selw.ctypes.data, n, n_expert, mref,
                                          ctypes.byref(s), oref, ptrs.ctypes.data,
                                          scl.ctypes.data, ctypes.byref(f))
    del keep, map_keep
    if st not in (0, 5, 6):  # 5, 6: faults, reported in f
        check(st, "vrows_tables_host", _VROWS_NAMES)
    return ptrs, scl, f


# The table calls' words for the host and engine methods here.
_VROWS_NAMES = {"n_pairs": "n_pairs (sel.size)", "slabs->base": "bases", "slabs->stride": "strides",
                "macros->plane": "macros", "options->expert_map": "expert_map",
                "options->n_local": "n_local", "options->n_shared": "n_shared", "il": "layer"}


def device_count():
    n = ctypes.c_int(0)
    check(lib().memra_device_count(ctypes.byref(n)))
    return n.value


def _stream(stream):
    """A CUstream as memra takes it: an int (0 is the legacy default stream,
    as CUDA and PyTorch mean it), passed through unchanged."""
    if stream is None:
        return None
    return _int("stream", stream, 0, _U64) or None


def _current_torch_stream(device):
    """PyTorch's current stream on `device` if torch is imported and has
    initialised CUDA, else 0 (the legacy default stream). Never imports or
    initialises torch itself."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            return torch.cuda.current_stream(device).cuda_stream
    except Exception:  # a torch without CUDA, or a broken one: the legacy stream
        pass
    return 0


class Engine:
    """One GPU. Retains the device's primary context, so it shares memory and
    streams with PyTorch. Close it (or use it as a context manager) after the
    CUDA graphs that captured its launches are gone."""

    def __init__(self, device=0):
        """device: an int, a torch.device, or a string as PyTorch spells one
        ("cuda", "cuda:1"); "cuda" and a device with no index are device 0."""
        if isinstance(device, str):  # (a str's .index is a method, not a device's)
            kind, sep, num = device.partition(":")
            if kind != "cuda" or (sep and not (num.isascii() and num.isdigit())):
                raise InvalidArgError(f"device {device!r} is not a CUDA device ('cuda', 'cuda:N' "
                                      "or an int)")
            index = int(num) if num else None
        else:
            if getattr(device, "type", "cuda") != "cuda":
                raise InvalidArgError(f"device {device} is not a CUDA device")
            index = getattr(device, "index", device)
        index = 0 if index is None else index
        # any int the C call takes: the library says which ordinals exist
        # (NoDeviceError for -1, as for one past the last)
        self.device = _int("device", index, -(1 << 31), 1 << 31)
        _ensure_nvrtc()
        self._h = ctypes.c_void_p()
        check(lib().memra_engine_create(self.device, ctypes.byref(self._h)))

    def close(self):
        if self._h:
            lib().memra_engine_destroy(self._h)
            self._h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _ptr(self):
        if not self._h:
            raise InvalidArgError("the engine is closed")
        return self._h

    def info(self):
        i = _lib.EngineInfo()
        check(lib().memra_engine_get_info(self._ptr(), ctypes.byref(i)))
        return {"ordinal": i.ordinal, "name": i.name.decode(), "sm": i.sm,
                "driver_version": i.driver_version, "nvrtc_version": i.nvrtc_version,
                "kernel_ready": bool(i.kernel_ready), "kernel_is_ptx": bool(i.kernel_is_ptx),
                "kernel_from_cache": bool(i.kernel_from_cache)}

    def kernel_origin(self):
        o = _lib.KernelOrigin()
        check(lib().memra_engine_kernel_origin(self._ptr(), ctypes.byref(o)))
        return {"ready": bool(o.ready), "nvrtc_version": o.nvrtc_version,
                "nvrtc_path": o.nvrtc_path.decode(), "arch": o.arch, "is_ptx": bool(o.is_ptx),
                "from_cache": bool(o.from_cache)}

    @property
    def stream(self):
        """The engine's own non-blocking stream, as an int."""
        s = ctypes.c_void_p()
        check(lib().memra_engine_stream(self._ptr(), ctypes.byref(s)))
        return s.value or 0

    def warmup(self):
        check(lib().memra_engine_warmup(self._ptr()))

    def self_check(self):
        """The seed gate on this GPU against the host arm; raises SelfCheckError
        when they differ. Returns the report as a dict."""
        r = _lib.SelfCheckReport()
        st = lib().memra_engine_self_check(self._ptr(), ctypes.byref(r))
        check(st)
        return {"cases": r.cases, "failed": r.failed, "entries": r.entries}

    def faults(self, stream=None, reset=False):
        """The engine's fault word, read after the work queued on `stream`
        (an int CUstream). By default that is PyTorch's current stream on
        this device when torch is in use (where the ops queue their launches),
        else the legacy default stream (0); the read returns when done."""
        if stream is None:
            stream = _current_torch_stream(self.device)
        f = Faults()
        check(lib().memra_engine_faults(self._ptr(), _stream(stream), ctypes.byref(f),
                                        int(bool(reset))))
        return f

    def vrows_prepare_layer(self, layer, n_expert, macros, stream=0, _planes=None):
        """memra_vrows_prepare_layer: mirrors layer `layer`'s macro planes (NumPy float32, three of
        n_expert) now: call before capturing a graph."""
        layer = _int("layer", layer, -_I32, _I32)
        n_expert = _int("n_expert", n_expert, 0, 1 << 32)
        m, keep = (_planes, None) if _planes is not None else _planes_numpy(macros, n_expert)
        check(lib().memra_vrows_prepare_layer(self._ptr(), layer, n_expert,
                                              ctypes.byref(m) if m else None, _stream(stream)),
              "vrows_prepare_layer", _VROWS_NAMES)
        del keep

    def vrows_tables(self, sel, selw, n_pairs, n_expert, layer, macros, slab, ptrs, scl,
                     stream=0, _planes=None, *, expert_map=0, n_local=0, n_shared=0):
        """memra_vrows_tables(_ex): one launch on `stream` (an int CUstream; 0 is the legacy default
        stream). sel, selw, ptrs, scl are device addresses (ints); macros are
        NumPy planes of n_slots or None; slab is memra.slabs(bases, strides);
        expert_map a device address (int32 per routed expert) or 0. No pairs
        is a valid no-op."""
        n_pairs = _int("n_pairs", n_pairs, 0, 1 << 32)
        n_expert = _int("n_expert", n_expert, 0, 1 << 32)
        layer = _int("layer", layer, -_I32, _I32)
        addrs = [_int(name, v, 0, _U64) for name, v in
                 (("sel", sel), ("selw", selw), ("ptrs", ptrs), ("scl", scl))]
        o, n_slots, _ = vrows_options(n_expert, _int("expert_map", expert_map, 0, _U64) or None,
                                      n_local, n_shared)
        m, keep = (_planes, None) if _planes is not None else _planes_numpy(macros, n_slots)
        check(lib().memra_vrows_tables_ex(
            self._ptr(), addrs[0], addrs[1], n_pairs, n_expert, layer,
            ctypes.byref(m) if m else None, ctypes.byref(slab), ctypes.byref(o) if o else None,
            addrs[2], addrs[3], _stream(stream)), "vrows_tables", _VROWS_NAMES)
        del keep


# ---- routing: memra_route_spec and the host arm (memra/_route.py) ----------

from ._lib import (BIAS_DTYPES, COUNT_DTYPES, GROUP_SCORINGS,  # noqa: E402,F401
                   LOGITS_DTYPES, SCORINGS, SHARED_RULES)
from ._route import route_spec, route_tables_host  # noqa: E402,F401
