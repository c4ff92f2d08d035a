"""Runs the tests against the source tree's package (python/) unless an
installed one is asked for (MEMRA_TEST_INSTALLED=1); MEMRA_LIB names the
library to load (a build folder's libmemra.so.2). Says at the end whether
the PyTorch tests ran, and why not."""
import os
import sys

if os.environ.get("MEMRA_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def pytest_terminal_summary(terminalreporter):
    try:
        import torch
    except ImportError as e:
        terminalreporter.write_line(
            f"memra.torch: NOT TESTED here: torch cannot be imported ({e}); the tests of the "
            f"PyTorch ops skipped (tools/test.sh installs torch where it fits; "
            f"python/tests/install_torch_cpu.sh)")
        return
    cuda = torch.cuda.is_available()
    terminalreporter.write_line(
        f"memra.torch: tested with torch {torch.__version__} on CPU tensors"
        f"{' and CUDA' if cuda else ' (no CUDA device: the GPU tests skipped)'}")
