#!/usr/bin/env bash
# Compare kernel variants made from patch files in one process of the phase
# probe (route_probe.py), on the GPU machine:
#
#   benchmarks/probe_variants.sh BUILD JSON [--prefill N | --batch N,N,...] [--configs LIST] VARIANT...
#
# VARIANT is NAME=PATCH[+PATCH...] (a copy of kernels_src/ with the patches
# applied in order, `patch -p1` from the repository root, measured beside the
# shipped kernel), spec:NAME=PATCH[+PATCH...] (the same, compiled once per
# configuration with its spec as constants), or spec:shipped. The copies go
# to BUILD/probe-variants/NAME, made afresh. --prefill N measures the team
# kernel (prefill) over N tokens instead of the block kernel's decode
# probe; --batch N,N,... the block kernel against the team kernel at those
# decode batch sizes (each alone and beside bench_peers' consumer, spec-compiled);
# --configs names the families (src/route/route_families.h) to measure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
# shellcheck source=benchmarks/variant_lib.sh
. "$here/variant_lib.sh"
[ $# -ge 2 ] || { sed -n '2,/^set /p' "$0" | sed '$d' >&2; exit 2; }
build=$1 json=$2
shift 2
args=()
while [ $# -ge 2 ]; do
    case $1 in
    --prefill | --batch | --configs) args+=("$1" "$2") && shift 2 ;;
    *) break ;;
    esac
done
root_v=$build/probe-variants
[ -L "$root_v" ] && { echo "$root_v is a symbolic link: not following it" >&2; exit 2; }
for v in "$@"; do
    kind=--src
    case $v in spec:*) kind=--spec-src v=${v#spec:} ;; esac
    if [ "$v" = shipped ]; then
        args+=("$kind" shipped)
        continue
    fi
    name=${v%%=*} patches=${v#*=}
    variant_name_ok "$name" || { echo "bad variant name: $name" >&2; exit 2; }
    dir=$root_v/$name
    rm -rf "$dir"
    mkdir -p "$dir/kernels_src"
    cp "$root"/kernels_src/* "$dir/kernels_src/"
    variant_apply "$dir" "$patches" "$root_v/$name.patch.log" || exit 2
    args+=("$kind" "$dir/kernels_src")
done
exec python3 "$here/route_probe.py" --build "$build" --json "$json" "${args[@]}"
