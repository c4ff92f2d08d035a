"""Loading libmemra with ctypes, and its signatures.

The library is the one installed with this package (``libmemra.so`` in
``site-packages/.memra.mesonpy.libs``, where ``pip install`` puts it);
``MEMRA_LIB`` names another (a build folder's ``libmemra.so.2``). It is
opened once, RTLD_LOCAL, and its version is checked against this package's."""
import atexit
import ctypes
import logging
import os
import sys

from ._errors import LibraryError, refusal

VERSION = "0.4.0"  # the C API this package is written for (memra_version())

c_u32, c_u64, c_int, c_vp = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int, ctypes.c_void_p

# ---- memra.h's numbers --------------------------------------------------------
# Every limit and enum value the package passes or compares, in one place;
# tests/check_binding_constants.py holds each to the header (as compiled) and
# each enum's members to these tables, so a value the header changes fails
# a test here instead of reaching C as something else.
MAX_PAIRS = 1 << 28  # MEMRA_MAX_PAIRS
MAX_LAYERS = 65536  # MEMRA_MAX_LAYERS
NO_FAULT = 0xFFFFFFFF  # MEMRA_NO_FAULT
ROUTE_MAX_EXPERT = 1024  # MEMRA_ROUTE_MAX_EXPERT
ROUTE_MAX_TOP_K = 32  # MEMRA_ROUTE_MAX_TOP_K
ROUTE_MAX_GROUPS = 32  # MEMRA_ROUTE_MAX_GROUPS
LAYOUT_MAX_EXPERT = 1056  # MEMRA_LAYOUT_MAX_EXPERT
LAYOUT_ONE_LAUNCH = 16384  # MEMRA_LAYOUT_ONE_LAUNCH
SCORINGS = {"softmax": 0, "sigmoid": 1}  # memra_route_scoring
LOGITS_DTYPES = {"float32": 0, "bfloat16": 1, "float16": 2}  # memra_logits_dtype
# memra_group_scoring; None is MEMRA_GROUP_AUTO, vLLM's rule (the library
# decides: the top-2 sum with a bias, the best without).
GROUP_SCORINGS = {None: 0, "top2_sum": 1, "max": 2}
BIAS_DTYPES = {"float32": 0, "bfloat16": 1}  # memra_bias_dtype
COUNT_DTYPES = {"int32": 0, "int64": 1}  # memra_count_dtype
SHARED_RULES = {"constant": 0, "routed_sum": 1}  # memra_shared_rule
# memra_checked_call: which call memra_route_check(_ex) / memra_vrows_check /
# memra_layout_check judge
CALLS = {"route_tables": 0, "route_tables_host": 1, "route_prepare_layer": 2, "vrows_tables": 3,
         "vrows_tables_ex": 4, "vrows_tables_host": 5, "vrows_tables_host_ex": 6,
         "vrows_prepare_layer": 7, "layout_tables": 8, "layout_tables_host": 9,
         "route_tables_ex": 10, "route_tables_host_ex": 11}
NVRTC_STATES = {0: "usable", 1: "refused", 2: "not_tried"}  # memra_nvrtc_state


class Slabs(ctypes.Structure):
    _fields_ = [("base", c_u64 * 3), ("stride", c_u64 * 3)]


class Macros(ctypes.Structure):
    _fields_ = [("plane", c_vp * 3)]


class Faults(ctypes.Structure):
    _fields_ = [("bad_expert", c_u32), ("nonfinite", c_u32), ("first_pair", c_u32),
                ("not_local", c_u32), ("padded", c_u32)]

    def __repr__(self):
        return (f"Faults(bad_expert={self.bad_expert}, nonfinite={self.nonfinite}, "
                f"first_pair={self.first_pair}, not_local={self.not_local}, padded={self.padded})")


class VrowsOptions(ctypes.Structure):
    _fields_ = [("expert_map", c_u64), ("n_local", c_u32), ("n_shared", c_u32)]


class EngineInfo(ctypes.Structure):
    _fields_ = [("ordinal", c_int), ("name", ctypes.c_char * 256), ("sm", c_int),
                ("driver_version", c_int), ("nvrtc_version", c_int), ("kernel_ready", c_int),
                ("kernel_is_ptx", c_int), ("kernel_from_cache", c_int)]


class KernelOrigin(ctypes.Structure):
    _fields_ = [("ready", c_int), ("nvrtc_version", c_int), ("nvrtc_path", ctypes.c_char * 512),
                ("arch", c_int), ("is_ptx", c_int), ("from_cache", c_int)]


class SelfCheckReport(ctypes.Structure):
    _fields_ = [("cases", c_u32), ("failed", c_u32), ("entries", c_u64),
                ("first_failure", ctypes.c_char * 256)]


class NvrtcInfo(ctypes.Structure):
    _fields_ = [("path", ctypes.c_char * 512), ("origin", ctypes.c_char * 64), ("state", c_int),
                ("why", ctypes.c_char * 256), ("version", c_int), ("n_archs", c_int),
                ("archs", c_int * 128)]


class RouteSpec(ctypes.Structure):
    _fields_ = [("n_expert", c_u32), ("top_k", c_u32), ("n_group", c_u32),
                ("topk_group", c_u32), ("scoring", c_int), ("logits_dtype", c_int),
                ("renormalize", c_int), ("routed_scaling_factor", ctypes.c_float),
                ("bias", c_vp),
                # since 0.3; zero is 0.2's behaviour
                ("group_scoring", c_int), ("bias_dtype", c_int), ("bias_ptr", c_u64),
                ("expert_map", c_u64), ("n_local", c_u32), ("n_shared", c_u32),
                ("shared_weight", ctypes.c_float),
                # since 0.4
                ("shared_rule", c_int), ("shared_divisor", ctypes.c_float),
                ("n_real_dtype", c_int), ("n_real", c_u64)]


class LayoutSpec(ctypes.Structure):
    _fields_ = [("n_expert", c_u32), ("block_size", c_u32), ("pad_sorted_ids", c_int),
                ("load_dtype", c_int), ("expert_map", c_u64)]


class Layout(ctypes.Structure):
    _fields_ = [("sorted_ids", c_u64), ("expert_ids", c_u64), ("n_post_pad", c_u64),
                ("offsets", c_u64), ("padded_offsets", c_u64), ("counts", c_u64),
                ("expert_load", c_u64), ("workspace", c_u64)]


P = ctypes.POINTER
_SIGNATURES = {
    "memra_version": (c_u32, []),
    "memra_version_string": (ctypes.c_char_p, []),
    "memra_status_string": (ctypes.c_char_p, [c_int]),
    "memra_last_error": (ctypes.c_char_p, []),
    "memra_set_nvrtc_path": (c_int, [ctypes.c_char_p]),
    "memra_nvrtc_available": (c_int, [P(c_int)]),
    "memra_device_count": (c_int, [P(c_int)]),
    "memra_engine_create": (c_int, [c_int, P(c_vp)]),
    "memra_engine_destroy": (None, [c_vp]),
    "memra_engine_get_info": (c_int, [c_vp, P(EngineInfo)]),
    "memra_engine_kernel_origin": (c_int, [c_vp, P(KernelOrigin)]),
    "memra_engine_stream": (c_int, [c_vp, P(c_vp)]),
    "memra_engine_warmup": (c_int, [c_vp]),
    "memra_engine_self_check": (c_int, [c_vp, P(SelfCheckReport)]),
    "memra_engine_faults": (c_int, [c_vp, c_vp, P(Faults), c_int]),
    "memra_vrows_prepare_layer": (c_int, [c_vp, c_int, c_u32, P(Macros), c_vp]),
    "memra_vrows_tables": (
        c_int, [c_vp, c_u64, c_u64, c_u32, c_u32, c_int, P(Macros), P(Slabs), c_u64, c_u64,
                c_vp]),
    "memra_route_prepare_layer": (c_int, [c_vp, c_int, P(RouteSpec), P(Macros), c_vp]),
    "memra_route_tables": (
        c_int, [c_vp, c_u64, c_u32, P(RouteSpec), c_int, P(Macros), P(Slabs), c_u64, c_u64, c_u64,
                c_u64, c_vp]),
    "memra_route_tables_host": (
        c_int, [c_vp, c_u32, P(RouteSpec), P(Macros), P(Slabs), c_vp, c_vp, c_vp, c_vp,
                P(Faults)]),
    "memra_vrows_tables_host": (
        c_int, [c_vp, c_vp, c_u32, c_u32, P(Macros), P(Slabs), c_vp, c_vp, P(Faults)]),
    "memra_vrows_tables_host_ex": (
        c_int, [c_vp, c_vp, c_u32, c_u32, P(Macros), P(Slabs), P(VrowsOptions), c_vp, c_vp,
                P(Faults)]),
    "memra_vrows_tables_ex": (
        c_int, [c_vp, c_u64, c_u64, c_u32, c_u32, c_int, P(Macros), P(Slabs), P(VrowsOptions),
                c_u64, c_u64, c_vp]),
    "memra_engine_set_pdl": (c_int, [c_vp, c_int, P(c_int)]),
    "memra_alloc": (c_int, [c_vp, ctypes.c_size_t, P(c_u64)]),  # memra.torch's kept scratch
    # since 0.4: a call's refusal without the call (the fakes' judge)
    "memra_route_check": (
        c_int, [c_int, c_u64, c_u32, P(RouteSpec), c_int, P(Macros), P(Slabs), c_u64, c_u64,
                c_u64, c_u64]),
    "memra_vrows_check": (
        c_int, [c_int, c_u64, c_u64, c_u32, c_u32, c_int, P(Macros), P(Slabs), P(VrowsOptions),
                c_u64, c_u64]),
    "memra_route_check_ex": (
        c_int, [c_int, c_u64, c_u32, P(RouteSpec), c_int, P(Macros), P(Slabs), c_u64, c_u64,
                c_u64, c_u64, P(LayoutSpec), P(Layout)]),
    "memra_layout_check": (c_int, [c_int, c_u64, c_u32, P(LayoutSpec), P(Layout)]),
    # since 0.4: the expert-sorted layout
    "memra_layout_sizes": (c_int, [c_u32, P(LayoutSpec), P(c_u64), P(c_u64)]),
    "memra_layout_workspace_bytes": (c_int, [c_u32, P(LayoutSpec), P(c_u64)]),
    "memra_layout_prepare": (c_int, [c_vp]),
    "memra_layout_tables_host": (c_int, [c_u64, c_u32, P(LayoutSpec), P(Layout)]),
    "memra_layout_tables": (c_int, [c_vp, c_u64, c_u32, P(LayoutSpec), P(Layout), c_vp]),
    "memra_route_tables_ex": (
        c_int, [c_vp, c_u64, c_u32, P(RouteSpec), c_int, P(Macros), P(Slabs), c_u64, c_u64, c_u64,
                c_u64, P(LayoutSpec), P(Layout), c_vp]),
    "memra_route_tables_host_ex": (
        c_int, [c_vp, c_u32, P(RouteSpec), P(Macros), P(Slabs), c_vp, c_vp, c_vp, c_vp,
                P(Faults), P(LayoutSpec), P(Layout)]),
}
# Newer than the first 0.2 libraries: used when present.
_LOG_FN = ctypes.CFUNCTYPE(None, c_int, ctypes.c_char_p, c_vp)
_OPTIONAL = {
    "memra_set_log_callback": (c_int, [c_vp, c_vp]),  # a _LOG_FN as an address, or None
    "memra_nvrtc_list": (c_int, [P(NvrtcInfo), c_int, P(c_int)]),
}

# memra's warnings go to the `logging` module, logger "memra", at the level
# the library gives (all are warnings today); keys: memra_log_level.
LOG_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}


def _to_logging(level, message, user):
    try:
        logging.getLogger("memra").log(LOG_LEVELS.get(level, logging.WARNING), "%s",
                                       (message or b"").decode(errors="replace"))
    except Exception:  # noqa: BLE001 - nothing may propagate into C
        pass


_log_callback = _LOG_FN(_to_logging)  # kept alive for the library's life


def _unhook(L):
    """At exit, before the interpreter goes: warnings back to stderr."""
    L.memra_set_log_callback(None, None)

_lib = None


_BUNDLED = ".memra.mesonpy.libs"  # where the wheel puts the library and the tool


def bundled_dir():
    """The folder the wheel installed the library (and the `memra` tool) in:
    beside the package in site-packages, or in another entry of sys.path
    where purelib and platlib differ; None in a source checkout."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for base in [here] + [p for p in sys.path if p and os.path.abspath(p) != here]:
        d = os.path.join(base, _BUNDLED)
        if os.path.isfile(os.path.join(d, "libmemra.so")):
            return d
    return None


def _path():
    env = os.environ.get("MEMRA_LIB")
    if env:
        return env
    d = bundled_dir()
    if d is not None:
        return os.path.join(d, "libmemra.so")
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libmemra.so")
    return here if os.path.exists(here) else "libmemra.so.2"


def lib():
    """The loaded library (opened on first use)."""
    global _lib
    if _lib is not None:
        return _lib
    path = _path()
    try:
        L = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as e:
        raise LibraryError(f"{path} could not be loaded ({e}); set MEMRA_LIB to libmemra's "
                           f"path") from None
    for name, (res, args) in _SIGNATURES.items():
        try:
            fn = getattr(L, name)
        except AttributeError:
            raise LibraryError(f"{path} lacks {name}: older than memra {VERSION}") from None
        fn.restype, fn.argtypes = res, args
    for name, (res, args) in _OPTIONAL.items():
        fn = getattr(L, name, None)
        if fn is not None:
            fn.restype, fn.argtypes = res, args
    v = L.memra_version()
    want = [int(x) for x in VERSION.split(".")]
    have = [v // 10000, v // 100 % 100, v % 100]
    if have[:2] != want[:2]:
        raise LibraryError(f"{path} is memra {'.'.join(map(str, have))}, this package is "
                           f"{VERSION}: install matching versions")
    if getattr(L, "memra_set_log_callback", None) is not None:
        L.memra_set_log_callback(ctypes.cast(_log_callback, c_vp), None)
        atexit.register(_unhook, L)
    _lib = L
    return L


def last_error(status):
    """This thread's message for the call that just returned `status` (the
    status's own description where the library left none)."""
    L = lib()
    msg = (L.memra_last_error() or b"").decode(errors="replace")
    return msg or L.memra_status_string(status).decode()


def check(status, caller=None, names=None):
    """Raises the memra.Error subclass for a non-zero status, with the
    library's message in the caller's words (see _errors.refusal)."""
    if status:
        raise refusal(status, last_error(status), caller, names)
