"""NVRTC from the NVIDIA wheels: a pip-only PyTorch or vLLM install has it in
site-packages (nvidia/cu13/lib for CUDA 13 wheels, nvidia/cuda_nvrtc/lib for
CUDA 12 wheels), not on the loader path."""
import glob
import os
import sys

_SUBDIRS = (os.path.join("nvidia", "cu13", "lib"), os.path.join("nvidia", "cuda_nvrtc", "lib"))


def wheel_nvrtc_paths(paths=None):
    """libnvrtc.so.<major> files in the nvidia wheels on sys.path, newest
    major first."""
    found = []
    for base in (sys.path if paths is None else paths):
        for sub in _SUBDIRS:
            for f in glob.glob(os.path.join(base or ".", sub, "libnvrtc.so.*")):
                name = os.path.basename(f)
                # libnvrtc.so.13, not libnvrtc.so.13.0.88 or the builtins
                if name.count(".") == 2 and "builtins" not in name and f not in found:
                    found.append(f)
    return sorted(found, key=lambda f: -int(f.rsplit(".", 1)[1]))
