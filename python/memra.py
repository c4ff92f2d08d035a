"""memra from Python: a ctypes client, no build step.

Loads libmemra.so (``MEMRA_LIB`` names the file; else the soname ``libmemra.so.0``
from the loader's path) and wraps the C API. Device buffers are passed as
integers (``tensor.data_ptr()``), streams as integers (``torch.cuda.current_stream().cuda_stream``),
so it works with PyTorch, CuPy or any other owner of device memory.
"""
import ctypes
import os

MEMRA_NO_FAULT = 0xFFFFFFFF


class MemraError(RuntimeError):
    def __init__(self, status, name, message):
        super().__init__(f"{name}: {message}")
        self.status = status


class Slabs(ctypes.Structure):
    _fields_ = [("base", ctypes.c_uint64 * 3), ("stride", ctypes.c_uint64 * 3)]


class Macros(ctypes.Structure):
    _fields_ = [("plane", ctypes.c_void_p * 3)]


class Faults(ctypes.Structure):
    _fields_ = [("bad_expert", ctypes.c_uint32), ("nonfinite", ctypes.c_uint32),
                ("first_pair", ctypes.c_uint32)]


class EngineInfo(ctypes.Structure):
    _fields_ = [("ordinal", ctypes.c_int), ("name", ctypes.c_char * 256), ("sm", ctypes.c_int),
                ("driver_version", ctypes.c_int), ("nvrtc_version", ctypes.c_int),
                ("kernel_ready", ctypes.c_int), ("kernel_is_ptx", ctypes.c_int),
                ("kernel_from_cache", ctypes.c_int)]


_lib = None


def lib():
    """The loaded library, opened once (RTLD_LOCAL, as a serving process would)."""
    global _lib
    if _lib is None:
        path = os.environ.get("MEMRA_LIB", "libmemra.so.0")
        L = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        u64, u32, i32, vp = ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int, ctypes.c_void_p
        sigs = {
            "memra_version": (u32, []),
            "memra_status_string": (ctypes.c_char_p, [i32]),
            "memra_last_error": (ctypes.c_char_p, []),
            "memra_engine_create": (i32, [i32, ctypes.POINTER(vp)]),
            "memra_engine_destroy": (None, [vp]),
            "memra_engine_get_info": (i32, [vp, ctypes.POINTER(EngineInfo)]),
            "memra_engine_warmup": (i32, [vp]),
            "memra_engine_faults": (i32, [vp, vp, ctypes.POINTER(Faults), i32]),
            "memra_vrows_prepare_layer": (i32, [vp, i32, u32, ctypes.POINTER(Macros), vp]),
            "memra_moe_vrows_tables_from_sel": (
                i32, [vp, u64, u64, u32, u32, i32, ctypes.POINTER(Macros), ctypes.POINTER(Slabs),
                      u64, u64, vp]),
            "memra_vrows_tables_host": (
                i32, [vp, vp, u32, u32, ctypes.POINTER(Macros), ctypes.POINTER(Slabs), vp, vp,
                      ctypes.POINTER(Faults)]),
        }
        for name, (res, args) in sigs.items():
            fn = getattr(L, name)
            fn.restype, fn.argtypes = res, args
        _lib = L
    return _lib


def _check(status, name):
    if status != 0:
        L = lib()
        raise MemraError(status, L.memra_status_string(status).decode(),
                         L.memra_last_error().decode())


def version():
    return lib().memra_version()


def slabs(bases, strides):
    s = Slabs()
    for k in range(3):
        s.base[k], s.stride[k] = int(bases[k]), int(strides[k])
    return s


def macros(planes):
    """planes: three C-contiguous float32 numpy arrays (kept alive by the caller), or None."""
    if planes is None:
        return None
    m = Macros()
    for k in range(3):
        assert planes[k].dtype.name == "float32" and planes[k].flags["C_CONTIGUOUS"]
        m.plane[k] = planes[k].ctypes.data
    return m


def _ref(x):
    return ctypes.byref(x) if x is not None else None


class Engine:
    """One GPU. Shares the device's primary context with PyTorch."""

    def __init__(self, ordinal=0):
        self._h = ctypes.c_void_p()
        _check(lib().memra_engine_create(ordinal, ctypes.byref(self._h)), "memra_engine_create")

    def close(self):
        if self._h:
            lib().memra_engine_destroy(self._h)
            self._h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def info(self):
        i = EngineInfo()
        _check(lib().memra_engine_get_info(self._h, ctypes.byref(i)), "memra_engine_get_info")
        return i

    def warmup(self):
        _check(lib().memra_engine_warmup(self._h), "memra_engine_warmup")

    def prepare_layer(self, il, n_expert, macro_planes, stream=0):
        _check(lib().memra_vrows_prepare_layer(self._h, il, n_expert, _ref(macros(macro_planes)),
                                               stream or None), "memra_vrows_prepare_layer")

    def tables_from_sel(self, sel, selw, n_pairs, n_expert, il, macro_planes, slab, ptrs, scl,
                        stream=0):
        """sel, selw, ptrs, scl: device addresses (ints); stream: a CUstream as an int."""
        m = macros(macro_planes)
        _check(lib().memra_moe_vrows_tables_from_sel(self._h, sel, selw, n_pairs, n_expert, il,
                                                     _ref(m), ctypes.byref(slab), ptrs, scl,
                                                     stream or None),
               "memra_moe_vrows_tables_from_sel")

    def faults(self, stream=0, reset=False):
        f = Faults()
        _check(lib().memra_engine_faults(self._h, stream or None, ctypes.byref(f), int(reset)),
               "memra_engine_faults")
        return f


def tables_host(sel, selw, n_expert, macro_planes, slab):
    """The host arm on numpy arrays: returns (ptrs uint64[3n], scl float32[3n], status, faults)."""
    import numpy as np
    sel = np.ascontiguousarray(sel, dtype=np.int32)
    selw = np.ascontiguousarray(selw, dtype=np.float32)
    n = sel.shape[0]
    ptrs = np.empty(3 * n, dtype=np.uint64)
    scl = np.empty(3 * n, dtype=np.float32)
    f = Faults()
    st = lib().memra_vrows_tables_host(sel.ctypes.data, selw.ctypes.data, n, n_expert,
                                       _ref(macros(macro_planes)), ctypes.byref(slab),
                                       ptrs.ctypes.data, scl.ctypes.data, ctypes.byref(f))
    return ptrs, scl, st, f
