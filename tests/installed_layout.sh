#!/usr/bin/env bash
# Lays libmemra out as `meson install` does (real file, soname link, dev
# link) in a scratch prefix and runs the dlopen harness on the soname there,
# with no build-tree paths in the loader's search.
set -euo pipefail
lib=$1 harness=$2
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
mkdir -p "$prefix/lib"
real=$(basename "$(readlink -f "$lib")")
cp "$(readlink -f "$lib")" "$prefix/lib/$real"
ln -s "$real" "$prefix/lib/libmemra.so.2"
ln -s libmemra.so.2 "$prefix/lib/libmemra.so"
unset LD_LIBRARY_PATH
exec "$harness" "$prefix/lib/libmemra.so.2"
