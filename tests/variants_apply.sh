#!/usr/bin/env bash
# Every patch in benchmarks/variants/ still applies to kernels_src/, alone
# and combined as that folder's README combines them, so the next GPU run
# measures what the README names. Skips (77) without git or outside a git
# checkout.
set -euo pipefail
src=$1
command -v git >/dev/null && git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || {
    echo "SKIPPED: no git checkout at $src"
    exit 77
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0
try() { # name, patches...
    local name=$1
    shift
    rm -rf "$work/t" && mkdir -p "$work/t" && cp -r "$src/kernels_src" "$work/t/"
    git -C "$work/t" init -q
    for p in "$@"; do
        git -C "$work/t" apply "$src/benchmarks/variants/$p" ||
            { echo "FAIL: $name: $p does not apply" >&2; exit 1; }
    done
    n=$((n + 1))
}
for p in "$src"/benchmarks/variants/*.patch; do
    try "$(basename "$p")" "$(basename "$p")"
done
for base in final-rank-warp0.patch final-rank-hybrid.patch rank-in-warp.patch; do
    try "$base + softmax-local" "$base" softmax-local.patch no-grid-wait.patch
done
echo "ok: $n combinations apply"
