#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build and test memra:
# meson, ninja, pkg-config (and libcmocka-dev, libxxhash-dev, valgrind and
# clang for the sanitizer and fuzz runs, when apt can reach Debian).
# Where apt cannot, meson/ninja come from PyPI and cmocka/xxHash build from
# the tarballs vendored in subprojects/packagecache/, so nothing here is fatal
# as long as meson and ninja end up on PATH.
set -u
missing=()
command -v meson >/dev/null 2>&1 || missing+=(meson)
command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v flock >/dev/null 2>&1 || missing+=(util-linux)
command -v patch >/dev/null 2>&1 || missing+=(patch) # variants_apply: the benchmarks' own patching
dpkg -s libcmocka-dev >/dev/null 2>&1 || missing+=(libcmocka-dev)
dpkg -s libxxhash-dev >/dev/null 2>&1 || missing+=(libxxhash-dev)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
command -v cargo >/dev/null 2>&1 || missing+=(cargo)
# venv and pip for the Python package's tests (Debian splits them out)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv python3-pip)
# clang alone is not enough for the fuzz stage: libFuzzer's runtime is in
# libclang-rt-14-dev, which apt only pulls in as a Recommends.
memra_fuzzer_links() {
  command -v clang >/dev/null 2>&1 || return 1
  local d
  d=$(mktemp -d) || return 1
  printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$d/f.c"
  clang -fsanitize=fuzzer,address,undefined "$d/f.c" -o "$d/f" >/dev/null 2>&1
  local rc=$?
  rm -rf "$d"
  return $rc
}
command -v clang >/dev/null 2>&1 || missing+=(clang)
memra_fuzzer_links || missing+=(libclang-rt-14-dev)
if [ ${#missing[@]} -gt 0 ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "deps: installing ${missing[*]} with apt-get"
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"; } \
    >/tmp/memra-apt.log 2>&1 || echo "deps: apt-get failed (see /tmp/memra-apt.log); using fallbacks"
fi
if ! command -v meson >/dev/null 2>&1 || ! command -v ninja >/dev/null 2>&1; then
  echo "deps: meson/ninja from PyPI"
  python3 -m pip install -q --user meson ninja && export PATH="$HOME/.local/bin:$PATH"
fi
# The SASS check (tests/test_kernel_targets.c) reads every target's machine code with
# nvdisasm; where the toolkit has none, NVIDIA's wheel provides one.
if [ -z "${MEMRA_NVDISASM:-}" ] && ! command -v nvdisasm >/dev/null 2>&1 &&
  [ ! -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvdisasm" ]; then
  nvd_dir="${XDG_CACHE_HOME:-$HOME/.cache}/memra-tools/nvdisasm"
  if [ ! -x "$nvd_dir/nvidia/cu13/bin/nvdisasm" ]; then
    echo "deps: nvdisasm from PyPI (nvidia-cuda-nvdisasm)"
    python3 -m pip install -q --target "$nvd_dir" "nvidia-cuda-nvdisasm>=13,<14" >/tmp/memra-pip.log 2>&1 ||
      echo "deps: nvdisasm could not be installed (see /tmp/memra-pip.log); the SASS check will skip"
  fi
  [ -x "$nvd_dir/nvidia/cu13/bin/nvdisasm" ] && export MEMRA_NVDISASM="$nvd_dir/nvidia/cu13/bin/nvdisasm"
fi
command -v meson >/dev/null 2>&1 && command -v ninja >/dev/null 2>&1 || {
  echo "deps: meson and ninja are required" >&2
  exit 1
}
