"""The Python package's GPU tests (python/tests/test_torch_gpu.py) as a meson
test: exit 77 (skipped) without pytest, torch or a CUDA device."""
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
here = os.path.dirname(os.path.abspath(__file__))
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider",
                      os.path.join(here, "..", "python", "tests", "test_torch_gpu.py")]))
