#!/usr/bin/env bash
# The library as `pip install .` builds it (-Dpython_package=true
# -Dtests=false), configured with a toolkit folder that does not exist and
# no include path from the environment: it must configure and build, export
# memra_*, and none of the headers its objects were compiled from may be a
# CUDA toolkit's (cuda.h, cudaTypedefs.h, nvrtc.h, or anything under
# /usr/local/cuda). Usage: build_without_toolkit.sh SOURCE_ROOT MESON
set -euo pipefail
src=$1 meson=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/memra-no-toolkit-XXXXXX")
trap 'rm -rf -- "$work"' EXIT
unset CPATH C_INCLUDE_PATH CUDA_HOME CUDA_PATH
log="$work/build.log"
if ! { "$meson" setup "$work/b" "$src" -Dtoolkit_dir=/nonexistent -Dpython_package=true \
         -Dtests=false && "$meson" compile -C "$work/b"; } >"$log" 2>&1; then
  cat "$log"
  echo "FAILED: the build without a toolkit (log above)"
  exit 1
fi
lib=$(find "$work/b/src" -maxdepth 1 -name 'libmemra*.so*' -type f | head -n 1)
[ -n "$lib" ] || { echo "FAILED: no libmemra built"; exit 1; }
syms=$(nm -D --defined-only "$lib")
grep -Eq ' T memra_route_tables_host(@|$)' <<<"$syms" ||
  { echo "FAILED: $lib does not export memra_route_tables_host"; exit 1; }
deps=$(ninja -C "$work/b" -t deps)
n=$(grep -c '^    ' <<<"$deps" || true)
[ "$n" -gt 20 ] || { echo "FAILED: ninja lists only $n header dependencies"; exit 1; }
if grep -E '(/cuda\.h|/cudaTypedefs\.h|/nvrtc\.h|^ *(/usr/local/cuda|/opt/cuda)/)' <<<"$deps"; then
  echo "FAILED: the build without a toolkit compiled a toolkit header (above)"
  exit 1
fi
echo "built $(basename "$lib") with -Dtoolkit_dir=/nonexistent; none of its $n header" \
  "dependencies is a CUDA toolkit's"
