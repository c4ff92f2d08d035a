#!/usr/bin/env bash
# `meson install` into a scratch root, then the installed `memra` run from
# there as a user runs it, with no LD_LIBRARY_PATH: it finds and loads the
# installed libmemra.so.2 by its RUNPATH, which leads from the tool to
# libdir ($ORIGIN-relative, so the installed tree works wherever the
# prefix, or the scratch root, puts it) and names no build folder; its
# benchmark program sits under libexec.
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
case $libdir in
  /*) want=$libdir ;;
  *) case $bindir in
       /*) want=$prefix/$libdir ;;
       *) up=$(echo "$bindir" | tr '/' '\n' | grep -vcE '^\.?$' || true)
          want='$ORIGIN'$(printf '/..%.0s' $(seq "$up"))/$libdir ;;
     esac ;;
esac
runpath=$(readelf -d "$tool" | sed -n 's/.*R\(UN\)\{0,1\}PATH.*\[\(.*\)\]/\2/p')
[ "$runpath" = "$want" ] || fail "the installed tool's RUNPATH is '$runpath', want '$want'"
case $runpath in *"$builddir"*) fail "the installed tool's RUNPATH names the build folder" ;; esac
readelf -d "$tool" | grep -q 'NEEDED.*\[libmemra\.so\.2\]' || fail "the tool does not link libmemra.so.2"
unset LD_LIBRARY_PATH
"$tool" --version | grep -q '^memra ' || fail "--version (exit $?): the installed library not found"
loaded=$(CUDA_VISIBLE_DEVICES= MEMRA_CACHE_DIR=off "$tool" info --json |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["memra"]["library"])')
[ "$(readlink -f "$loaded")" = "$(readlink -f "$lib")" ] || fail "info loaded $loaded, not $lib"
echo "installed memra runs against $lib"
