"""The Python package's PyTorch tests on a GPU machine, as a meson test:
python/tests/test_torch_gpu.py (the ops on CUDA tensors, graphs, compile,
SGLang's call sites), test_torch_cpu.py (the same ops on CPU tensors,
against the routers of seven models) and test_torch_sglang.py (SGLang's
call sites on CPU tensors against SGLang's own code). Exit 77 (skipped) without pytest, torch or a CUDA device."""
import os
import sys

try:
    import pytest
    import torch
except ImportError as e:
    print(f"SKIP: {e}")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: torch sees no CUDA device")
    sys.exit(77)
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests")
sys.exit(pytest.main(["-q", "-rs", "-p", "no:cacheprovider",
                      os.path.join(here, "test_torch_gpu.py"),
                      os.path.join(here, "test_torch_cpu.py"),
                      os.path.join(here, "test_torch_sglang.py")]))
