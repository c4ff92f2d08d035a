#!/usr/bin/env bash
# Builds bench_peers: memra (through its public API, from a meson build) beside the peer
# routing kernels, each compiled with its own framework's flags for sm_90a.
#
#   benchmarks/peers/build.sh BUILD_DIR OUT_BINARY
#
# BUILD_DIR is a memra build (meson setup BUILD_DIR && meson compile -C BUILD_DIR): the program
# links BUILD_DIR/src/libmemra.so with an rpath to it. NVCC (default: nvcc on PATH, else
# /usr/local/cuda/bin/nvcc) compiles everything. A peer whose entry point fails to compile is
# replaced by a stub (entry_stubs.cu) that makes its arm fail at run time with a message, so
# the others still build and run; the script says so and exits 0 (exit 3 when a peer was
# stubbed and BENCH_PEERS_STRICT=1). Objects and per-file logs go to OUT_BINARY.objs/.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR OUT_BINARY" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "$1" && pwd)
out=$2
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$nvcc" ] || { echo "build.sh: no nvcc ($nvcc)" >&2; exit 1; }
lib="$build/src/libmemra.so"
[ -e "$lib" ] || { echo "build.sh: $lib missing: build memra first (meson compile -C $build)" >&2; exit 1; }
[ -f "$build/include/memra/version.h" ] || { echo "build.sh: $build/include/memra/version.h missing" >&2; exit 1; }

objs="$out.objs"
rm -rf "$objs"
mkdir -p "$objs"
arch=(-gencode arch=compute_90a,code=sm_90a)
# Each framework's own flags (benchmarks/peers/README.md).
fi_flags=(-std=c++17 -use_fast_math -O3 -DNDEBUG -DENABLE_BF16)
vllm_flags=(-std=c++17 -O3 -DNDEBUG --expt-relaxed-constexpr)
sgl_flags=(-std=c++20 -O3 --expt-relaxed-constexpr)
bench_flags=(-std=c++17 -O2)
P="$here"
fi_inc=(-I "$P" -I "$P/shim/flashinfer" -I "$P/flashinfer/include" -I "$P/flashinfer/csrc/nv_internal"
        -I "$P/flashinfer/csrc/nv_internal/include" -I "$P/flashinfer/csrc")
# -I .../libtorch_stable: the vLLM file includes "../cub_helpers.h", which is csrc/cub_helpers.h
vllm_inc=(-I "$P" -I "$P/shim/vllm" -I "$P/vllm/csrc/libtorch_stable")
sgl_inc=(-I "$P" -I "$P/shim/sglang")

echo "build.sh: $("$nvcc" --version | tail -1)"
# The vendored peers are upstream's bytes (README.md): say so, or say loudly that they are not.
if command -v sha256sum >/dev/null; then
  if (cd "$P" && sha256sum --quiet -c SHA256SUMS >"$objs/sha256.log" 2>&1); then
    echo "build.sh: vendored peer sources match SHA256SUMS (unmodified)"
  else
    echo "build.sh: WARNING: vendored peer sources differ from SHA256SUMS:" >&2
    cat "$objs/sha256.log" >&2
  fi
fi
echo "build.sh: memra from $build, objects in $objs"

# compile NAME ARGS...: one object, its log kept, its status in NAME.rc; nonzero on failure.
compile() {
  local name=$1
  shift
  if "$nvcc" "$@" -o "$objs/$name.o" >"$objs/$name.log" 2>&1; then
    echo 0 >"$objs/$name.rc"
    return 0
  fi
  echo 1 >"$objs/$name.rc"
  echo "build.sh: $name FAILED to compile; the end of its log ($objs/$name.log):" >&2
  tail -30 "$objs/$name.log" >&2
  return 1
}

# The objects, in parallel, at most BENCH_PEERS_JOBS (default: the CPU count) at a time.
max_jobs=${BENCH_PEERS_JOBS:-$(nproc 2>/dev/null || echo 2)}
start() {
  while [ "$(jobs -rp | wc -l)" -ge "$max_jobs" ]; do sleep 0.2; done
  compile "$@" &
}
start fi_noaux "${arch[@]}" "${fi_flags[@]}" -diag-suppress 20012 "${fi_inc[@]}" \
  -c "$P/flashinfer/csrc/fused_moe/noAuxTcKernels.cu"
for c in envUtils logger stringUtils tllmException; do
  start "fi_$c" "${fi_flags[@]}" "${fi_inc[@]}" -c "$P/flashinfer/csrc/nv_internal/cpp/common/$c.cpp"
done
start entry_flashinfer "${arch[@]}" "${fi_flags[@]}" "${fi_inc[@]}" -c "$P/entry_flashinfer.cu"
start entry_vllm "${arch[@]}" "${vllm_flags[@]}" "${vllm_inc[@]}" -c "$P/entry_vllm.cu"
start entry_sglang "${arch[@]}" "${sgl_flags[@]}" "${sgl_inc[@]}" -c "$P/entry_sglang.cu"
start bench_peers "${arch[@]}" "${bench_flags[@]}" -I "$P" -I "$root/include" -I "$build/include" \
  -c "$P/bench_peers.cu"

wait || true
ok() { [ "$(cat "$objs/$1.rc" 2>/dev/null)" = 0 ]; }
link=()
stubs=()
ok bench_peers || { echo "build.sh: the benchmark itself did not compile" >&2; exit 1; }
link+=("$objs/bench_peers.o")
fi_ok=1
for n in fi_noaux fi_envUtils fi_logger fi_stringUtils fi_tllmException entry_flashinfer; do
  ok "$n" || fi_ok=0
done
if [ $fi_ok = 1 ]; then
  link+=("$objs"/fi_*.o "$objs/entry_flashinfer.o")
else
  stubs+=(-DSTUB_FLASHINFER)
fi
if ok entry_vllm; then link+=("$objs/entry_vllm.o"); else stubs+=(-DSTUB_VLLM); fi
if ok entry_sglang; then link+=("$objs/entry_sglang.o"); else stubs+=(-DSTUB_SGLANG); fi
if [ ${#stubs[@]} -gt 0 ]; then
  echo "build.sh: WARNING: stubbing ${stubs[*]}: those arms will fail at run time" >&2
  compile entry_stubs "${arch[@]}" -std=c++17 -O2 "${stubs[@]}" -I "$P" -c "$P/entry_stubs.cu" || exit 1
  link+=("$objs/entry_stubs.o")
fi
"$nvcc" "${arch[@]}" -o "$out" "${link[@]}" "$lib" -Xlinker -rpath -Xlinker "$build/src" -ldl -lpthread \
  >"$objs/link.log" 2>&1 || { echo "build.sh: link failed:" >&2; cat "$objs/link.log" >&2; exit 1; }
echo "build.sh: built $out${stubs[*]:+ (with stubs: ${stubs[*]})}"
if [ ${#stubs[@]} -gt 0 ] && [ "${BENCH_PEERS_STRICT:-0}" = 1 ]; then
  exit 3
fi
exit 0
