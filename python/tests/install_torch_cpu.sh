#!/usr/bin/env bash
# Installs PyTorch into a virtual environment for the CPU tests of memra.torch
# (python/tests/test_torch_cpu.py), on a machine without a GPU, from PyPI.
#
#   python/tests/install_torch_cpu.sh VENV
#
# PyPI's Linux wheel of torch is its CUDA build (about 540 MB), whose
# dependencies are some 3 GB of NVIDIA wheels. CPU tensors need none of them
# at run time, but libtorch_cuda.so is loaded at `import torch` and needs its
# libraries present. So torch is installed without its dependencies, with
# its pure-Python ones, and with only the NVIDIA wheels that a machine with
# the CUDA toolkit (CI's) lacks or holds too old: cuFile, cuSPARSELt,
# NVSHMEM, NCCL (about 520 MB more). The rest (cudart, cuBLAS, cuDNN, ...)
# come from the toolkit on the loader path. Where `import torch` still fails,
# torch is removed again, and the torch tests skip, saying why; this script
# never fails the build for it. Bounded by MEMRA_TORCH_INSTALL_SECONDS
# (default 600).
set -uo pipefail
venv=${1:?usage: install_torch_cpu.sh VENV}
py="$venv/bin/python"
limit=${MEMRA_TORCH_INSTALL_SECONDS:-600}

# One set, known to import together: torch's own pins for its CUDA build.
TORCH=torch==2.15.0
NVIDIA=(nvidia-cufile==1.17.1.22 nvidia-cusparselt-cu13==0.8.1 nvidia-nvshmem-cu13==3.7.2
        nvidia-nccl-cu13==2.30.7)
PURE=(filelock "typing-extensions>=4.13.0" "setuptools>=77.0.3" "sympy>=1.13.3"
      "networkx>=2.5.1" jinja2 "fsspec>=0.8.5")

works() {
  "$py" -c 'import torch; torch.topk(torch.zeros(2, 8), 2); print(torch.__version__)' \
    >/dev/null 2>&1
}

if works; then
  echo "torch: $("$py" -c 'import torch; print(torch.__version__)') already usable in $venv"
  exit 0
fi
start=$SECONDS
if timeout "$limit" "$py" -m pip install -q --no-deps "$TORCH" "${NVIDIA[@]}" &&
   timeout "$limit" "$py" -m pip install -q "${PURE[@]}" && works; then
  echo "torch: installed for the CPU tests in $((SECONDS - start)) s"
  exit 0
fi
echo "torch: could not be installed and imported here (PyPI unreachable, or the CUDA" \
     "toolkit's libraries missing): the memra.torch tests will skip"
"$py" -m pip uninstall -q -y torch >/dev/null 2>&1
exit 0
