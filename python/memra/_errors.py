"""memra's statuses as Python exceptions: one class per MEMRA_ERR_*, all
subclasses of memra.Error, each carrying the status and memra_last_error()."""

import re

__all__ = ["Error"]


class Error(RuntimeError):
    """A failed memra call: ``status`` (the MEMRA_ERR_* value), ``status_name``,
    and ``message`` (memra_last_error(): it names the argument or driver call)."""

    status = -1
    status_name = "MEMRA_ERR"

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


def _make(name, status, doc, *bases):
    # NullArgError -> MEMRA_ERR_NULL_ARG: memra.h's name (a word per capital)
    c_name = "MEMRA_ERR_" + re.sub(r"(?<!^)(?=[A-Z])", "_", name[:-5]).upper()
    return type(name, (Error,) + bases, {"__doc__": doc, "status": status,
                                         "status_name": c_name})


NullArgError = _make("NullArgError", 1, "A required pointer or buffer is missing.", TypeError)
InvalidArgError = _make("InvalidArgError", 2, "A count, index or flag is out of its range.",
                        ValueError)
MisalignedError = _make("MisalignedError", 3, "A buffer is not aligned to its element.",
                        ValueError)
SlabOverflowError = _make("SlabOverflowError", 4, "base + (n_expert-1)*stride passes 2^64.",
                          ValueError)
ExpertRangeError = _make("ExpertRangeError", 5, "An expert id is outside [0, n_expert).")
NonfiniteScaleError = _make("NonfiniteScaleError", 6, "A NaN or infinite scale was produced.")
NoDriverError = _make("NoDriverError", 7, "The CUDA driver (libcuda) is not available.")
NoDeviceError = _make("NoDeviceError", 8, "No CUDA device at that ordinal.")
NvrtcError = _make("NvrtcError", 9, "No usable NVRTC, or the kernel failed to compile.")
ModuleLoadError = _make("ModuleLoadError", 10, "The compiled kernel could not be loaded.")
OutOfMemoryError = _make("OutOfMemoryError", 11, "Host or device allocation failed.",
                         MemoryError)
CaptureError = _make("CaptureError", 12,
                     "The call would allocate/copy/sync under stream capture: prepare first.")
DriverError = _make("DriverError", 13, "A CUDA driver call failed.")
ContextResetError = _make("ContextResetError", 14,
                          "The device's primary context was reset under the engine.")
SelfCheckError = _make("SelfCheckError", 15, "The device arm differs from the host arm here.")
LibraryError = _make("LibraryError", -1,
                     "libmemra could not be loaded, or is not the version this package needs.",
                     ImportError)

_BY_STATUS = {c.status: c for c in (
    NullArgError, InvalidArgError, MisalignedError, SlabOverflowError, ExpertRangeError,
    NonfiniteScaleError, NoDriverError, NoDeviceError, NvrtcError, ModuleLoadError,
    OutOfMemoryError, CaptureError, DriverError, ContextResetError, SelfCheckError)}


def error_for(status, message):
    """The exception for a status (Error itself for one newer than this package)."""
    cls = _BY_STATUS.get(status)
    return cls(message) if cls else Error(message, status)


# "memra_route_tables_host: " opening a library message; and the words in it
# that name a call's argument or field ("spec->top_k", "slabs->base",
# "n_tokens"): a struct prefix, then an identifier.
_C_CALL = re.compile(r"^memra_\w+: ")
_C_WORD = re.compile(r"\b(?:\w+->)?(\w+)\b")


def refusal(status, message, caller=None, names=None):
    """The exception for a refusal by the library, in the words of the
    function the user called: the library names its own entry point and
    its fields (memra_route_tables_host: spec->top_k = 40 ...); `caller`
    replaces the first, and `names` maps the second to the caller's
    argument names ({"top_k": "topk", "logits": "gating_output", ...}),
    looked up by the whole word ("slabs->base") and then by the field
    ("top_k"). The rule and the numbers are the library's, untouched."""
    if caller:
        message = _C_CALL.sub(caller + ": ", message, count=1)
    if names:
        message = _C_WORD.sub(
            lambda m: names.get(m.group(0)) or names.get(m.group(1)) or m.group(0), message)
    return error_for(status, message)


__all__ += [c.__name__ for c in _BY_STATUS.values()] + ["LibraryError"]
