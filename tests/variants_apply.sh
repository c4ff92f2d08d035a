#!/usr/bin/env bash
# Every patch in benchmarks/variants/ still applies to kernels_src/ (or src/, include/), alone
# (or on the patches its preamble says it stacks on) and as each line of benchmarks/variants/queue,
# queue-prefill, queue-batch and queue-ab combines them, so the next
# GPU run (MEMRA_STAGES=variants) measures what the queue names. Skips (77)
# without git or outside a git checkout.
set -euo pipefail
src=$1
command -v git >/dev/null && git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || {
    echo "SKIPPED: no git checkout at $src"
    exit 77
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
n=0
# A fresh copy of what a patch may touch.
copy_tree() { # dir
    rm -rf "$1" && mkdir -p "$1" && cp -r "$src/kernels_src" "$src/src" "$src/include" "$1/"
}
try() { # what, patch paths from the repository root...
    local what=$1
    shift
    copy_tree "$work/t"
    git -C "$work/t" init -q
    for p in "$@"; do
        [ -f "$src/$p" ] || { echo "FAIL: $what: no $p" >&2; exit 1; }
        git -C "$work/t" apply "$src/$p" || { echo "FAIL: $what: $p does not apply" >&2; exit 1; }
    done
    n=$((n + 1))
}
# The tools' own way (benchmarks/variant_lib.sh, which ab_peers.sh and
# probe_variants.sh use) applied too, and the copy must then differ from the
# tree: ab_peers.sh once gave patch an empty input, changed nothing and
# succeeded, so that every "variant" it measured was the shipped library.
# shellcheck source=benchmarks/variant_lib.sh
. "$src/benchmarks/variant_lib.sh"
have_patch=0
command -v patch >/dev/null && have_patch=1
[ $have_patch = 1 ] || echo "note: no patch(1) here (tools/deps.sh installs it): the tools' own patching not tried"
tool() { # what, patch paths from the repository root...
    local what=$1 joined
    shift
    [ $have_patch = 1 ] || return 0
    copy_tree "$work/v"
    joined=$(IFS=+; echo "$*")
    (cd "$src" && variant_apply "$work/v" "$joined" "$work/v.log") ||
        { echo "FAIL: $what: variant_apply failed" >&2; cat "$work/v.log" >&2; exit 1; }
    if ! variant_changed "$src" "$work/v"; then
        echo "FAIL: $what: variant_apply changed nothing" >&2
        exit 1
    fi
}
# A patch made on top of others names them in its preamble ("# stacks on:
# PATH ..."), which git apply and patch skip.
shopt -s nullglob # an empty queue is a state too: nothing waits for a GPU
for p in "$src"/benchmarks/variants/*.patch; do
    base=()
    read -r -a base < <(sed -n 's/^# stacks on: //p' "$p") || true
    try "${p#"$src"/}" "${base[@]}" "${p#"$src"/}"
    tool "${p#"$src"/}" "${base[@]}" "${p#"$src"/}"
done
# Each queue's line is probe_variants.sh's arguments (queue, queue-prefill: one
# variant; queue-batch: a whole probe's): its variants are the words that are
# neither an option nor an option's value.
for q in queue queue-prefill queue-batch; do
    while read -r -a words; do
        case ${words[0]:-#} in '#'*) continue ;; esac
        skip=0
        for w in "${words[@]}"; do
            if [ $skip = 1 ]; then skip=0; continue; fi
            case $w in --batch | --configs | --prefill) skip=1; continue ;; esac
            v=${w#spec:}
            [ "$v" = shipped ] && continue
            IFS=+ read -r -a list <<<"${v#*=}"
            try "$q: $w" "${list[@]}"
        done
    done <"$src/benchmarks/variants/$q"
done
# queue-ab's lines (benchmarks/ab_peers.sh): the variants before "--", whose patches may
# touch the launcher (src/) as well as the kernels.
while read -r -a words; do
    case ${words[0]:-#} in '#'*) continue ;; esac
    for w in "${words[@]}"; do
        [ "$w" = -- ] && break
        IFS=+ read -r -a list <<<"${w#*=}"
        try "queue-ab: $w" "${list[@]}"
    done
done <"$src/benchmarks/variants/queue-ab"
echo "ok: $n variants apply"
