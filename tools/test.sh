#!/usr/bin/env bash
# The README's test command: set up what is missing, build, run every suite,
# then the host suite again under AddressSanitizer+UBSan, ThreadSanitizer
# (thread tests) and valgrind, and the libFuzzer target for a bounded time.
# GPU tests skip (exit 77) where there is no CUDA device.
#   MEMRA_QUICK=1 tools/test.sh    only the plain build and its tests
#   FUZZ_SECONDS=N                 fuzzing time (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/deps.sh
jobs=$(nproc)

# Quiet when it works; on failure the whole setup or compile log is printed,
# since ninja writes compiler errors to stdout.
setup() { # dir, options...
  local dir=$1
  shift
  local log="${TMPDIR:-/tmp}/memra-setup-$(basename "$dir").log"
  local reconf=()
  [ -f "$dir/build.ninja" ] && reconf=(--reconfigure)
  { meson setup "${reconf[@]}" "$dir" "$@" && meson compile -C "$dir"; } >"$log" 2>&1 || {
    cat "$log"
    echo "== FAILED: setup/compile of $dir (log above)" >&2
    return 1
  }
}

builddir=${MEMRA_BUILDDIR:-build}
echo "== build and test ($builddir)"
setup "$builddir"
meson test -C "$builddir" --print-errorlogs --num-processes "$jobs" "$@"

# The Rust client against the library just built (no registry needed).
if command -v cargo >/dev/null 2>&1; then
  echo "== Rust crate: cargo test --offline (bindings/rust, against $builddir/src/libmemra.so.2)"
  MEMRA_LIB="$PWD/$builddir/src/libmemra.so.2" CARGO_TARGET_DIR="$PWD/$builddir/rust-target" \
    MEMRA_ABI_LAYOUT="$PWD/$builddir/tests/abi_layout.txt" \
    MEMRA_ABI_CONSTANTS="$PWD/$builddir/tests/abi_constants.txt" \
    cargo test --offline --quiet --manifest-path bindings/rust/Cargo.toml
  # Its device tests (ignored without a GPU) on the mock driver: a
  # libcuda.so.1 that runs the kernel source on the host, with a stand-in
  # NVRTC, here with two devices (engines_apart needs them); the H200 runs
  # route_device's and layout_device's binaries against the real driver.
  # They take two minutes of the mock's emulated warps, mostly one thread's:
  # built here, run in the background beside the Python tests below.
  echo "== Rust crate: device tests on the mock driver (tests/route_device.rs, layout_device.rs, engines_apart.rs), beside the Python tests"
  rust_mock=(env LD_LIBRARY_PATH="$PWD/$builddir/tests/fake_cuda" FAKE_CUDA_DEVICES=2
    MEMRA_CACHE_DIR=off MEMRA_NVRTC_PATH="$PWD/$builddir/tests/fake_nvrtc/libnvrtc-fake-v13_0.so"
    MEMRA_LIB="$PWD/$builddir/src/libmemra.so.2" CARGO_TARGET_DIR="$PWD/$builddir/rust-target"
    cargo test --offline --quiet --manifest-path bindings/rust/Cargo.toml --test route_device
    --test layout_device --test engines_apart)
  "${rust_mock[@]}" --no-run
  rust_log="$PWD/$builddir/rust-mock-device.log"
  "${rust_mock[@]}" -- --ignored >"$rust_log" 2>&1 &
  rust_pid=$!
  # Not left running if a step below fails.
  trap 'kill "$rust_pid" 2>/dev/null || true' EXIT
else
  echo "== Rust crate SKIPPED: cargo is not installed and could not be installed"
fi
# The Python package: its CPU tests against the library just built, and a
# wheel built, installed and used in a fresh venv (pip install .).
echo "== Python package: pytest python/tests (CPU; GPU tests skip without a GPU)"
venv="$PWD/$builddir/py-venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q pytest numpy
# PyTorch for memra.torch's CPU tests (opcheck, compile, the vLLM call site):
# about a minute and 1 GB from PyPI; where it cannot be had, those tests skip
# and pytest's last line says why.
python/tests/install_torch_cpu.sh "$venv"
MEMRA_LIB="$PWD/$builddir/src/libmemra.so.2" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  python/tests
if [ -n "${rust_pid:-}" ]; then
  echo "== Rust crate: device tests on the mock driver (their output)"
  rust_rc=0
  wait "$rust_pid" || rust_rc=$?
  trap - EXIT
  cat "$rust_log"
  [ "$rust_rc" = 0 ] || { echo "== FAILED: the Rust crate's device tests on the mock driver" >&2; exit 1; }
fi
[ "${MEMRA_QUICK:-0}" = 1 ] && exit 0

echo "== host suite under AddressSanitizer + UndefinedBehaviorSanitizer"
setup "$builddir-asan" -Db_sanitize=address,undefined -Db_lundef=false
meson test -C "$builddir-asan" --setup asan --print-errorlogs --num-processes "$jobs"

# Built -O0 (buildtype=debug): the one debug build CI makes, at no extra
# compile, so a warning only -O0 raises (gcc's -Wformat-truncation cannot
# see a length checked before the call there) fails here, not on a user's
# debug build.
echo "== thread tests under ThreadSanitizer (a debug build)"
setup "$builddir-tsan" -Dbuildtype=debug -Db_sanitize=thread -Db_lundef=false
meson test -C "$builddir-tsan" --setup tsan --suite threads --print-errorlogs

if command -v valgrind >/dev/null 2>&1; then
  echo "== host suite under valgrind (leak check)"
  meson test -C "$builddir" --setup valgrind --print-errorlogs --num-processes "$jobs"
else
  echo "== valgrind: not installed, skipped"
fi

if memra_fuzzer_links; then
  echo "== libFuzzer over the host entry points (${FUZZ_SECONDS:-60} s)"
  CC=clang setup "$builddir-fuzz" -Dfuzzing=true -Db_sanitize=address,undefined -Db_lundef=false \
    -Dfuzz_seconds="${FUZZ_SECONDS:-60}"
  meson test -C "$builddir-fuzz" --suite fuzz --print-errorlogs
else
  echo "== fuzzing SKIPPED: clang with libFuzzer (clang, libclang-rt-14-dev) could not be installed"
fi
