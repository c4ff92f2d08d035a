"""NVRTC from the NVIDIA wheels: a pip-only PyTorch or vLLM install has it in
site-packages (nvidia/cu13/lib for CUDA 13 wheels, nvidia/cuda_nvrtc/lib for
CUDA 12 wheels, the folders NVIDIA's cuda-pathfinder knows), not on the
loader path. The package hands every one it finds to the library, which
loads one only when the candidates before it cannot serve, and chooses per
device and driver (docs/nvrtc.md)."""
import os
import re
import sys

_SUBDIRS = (("nvidia", "cu13", "lib"), ("nvidia", "cuda_nvrtc", "lib"))
# A soname as the loader names it: libnvrtc.so.13, libnvrtc.so.11.2. Not the
# file it links to (libnvrtc.so.13.0.88), the builtins library, or anything
# else that happens to start the same way (an editor's libnvrtc.so.13~).
_SONAME = re.compile(r"libnvrtc\.so\.([0-9]+)(?:\.([0-9]+))?\Z")


def wheel_nvrtc_paths(paths=None):
    """Every libnvrtc.so.<digits>[.<digits>] in the NVIDIA wheel folders under
    the entries of sys.path (or `paths`), as absolute paths, in this order:
    sys.path's (the order Python imports in), then nvidia/cu13/lib before
    nvidia/cuda_nvrtc/lib, then the newest version first within a folder.
    The same file reached twice (a repeated entry, a link) is listed once;
    anything that is not a regular file is left out."""
    found, seen = [], set()
    for base in (sys.path if paths is None else paths):
        for sub in _SUBDIRS:
            d = os.path.join(base or os.curdir, *sub)
            try:
                names = os.listdir(d)
            except OSError:
                continue
            hits = []
            for name in names:
                m = _SONAME.match(name)
                if m:
                    hits.append(((int(m.group(1)), int(m.group(2) or 0)), name))
            for _, name in sorted(hits, reverse=True):
                f = os.path.abspath(os.path.join(d, name))
                real = os.path.realpath(f)
                if real in seen or not os.path.isfile(f):
                    continue
                seen.add(real)
                found.append(f)
    return found
