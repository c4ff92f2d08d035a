#!/usr/bin/env bash
# `meson install` into a scratch root, then the installed `memra` run from
# there: it loads the installed libmemra.so.2 (not a build-tree copy, no
# build path left in it) and its benchmark program sits under libexec.
set -euo pipefail
builddir=$1 prefix=$2 bindir=$3 libdir=$4 libexecdir=$5
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
meson install -C "$builddir" --destdir "$root" --no-rebuild --quiet >/dev/null
abs() { case $1 in /*) echo "$root$1" ;; *) echo "$root$prefix/$1" ;; esac; }
tool=$(abs "$bindir")/memra
lib=$(abs "$libdir")/libmemra.so.2
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$tool" ] || fail "no $tool"
[ -x "$(abs "$libexecdir")/memra/memra-bench" ] || fail "no memra-bench under $libexecdir/memra"
if readelf -d "$tool" | grep -qE 'R(UN)?PATH'; then fail "the installed tool keeps a search path"; fi
readelf -d "$tool" | grep -q 'NEEDED.*\[libmemra\.so\.2\]' || fail "the tool does not link libmemra.so.2"
export LD_LIBRARY_PATH=$(dirname "$lib")
"$tool" --version | grep -q '^memra ' || fail "--version"
loaded=$(CUDA_VISIBLE_DEVICES= MEMRA_CACHE_DIR=off "$tool" info --json |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["memra"]["library"])')
[ "$(readlink -f "$loaded")" = "$(readlink -f "$lib")" ] || fail "info loaded $loaded, not $lib"
echo "installed memra runs against $lib"
