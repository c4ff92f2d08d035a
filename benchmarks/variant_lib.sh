# shellcheck shell=bash
# Sourced by benchmarks/probe_variants.sh and benchmarks/ab_peers.sh: what a
# variant is (NAME=PATCH[+PATCH...], benchmarks/variants/README.md) and how its
# tree is made, in one place.

# variant_name_ok NAME: a plain name (no "..", no "/"), so that the folder made
# for it lies inside the caller's and nothing outside it is removed.
variant_name_ok() {
    case $1 in '' | .* | *[!A-Za-z0-9_.-]*) return 1 ;; esac
}

# variant_apply DIR PATCHES LOG: each of PATCHES ("+"-separated paths, as the
# caller gave them, not from inside DIR) applied in order in DIR with
# `patch -p1`; patch's output goes to LOG. Fails, saying which, on a missing
# patch or one that does not apply (or is applied already: --forward). The
# patch is named by -i: ab_peers.sh fed it on the subshell's stdin and then
# gave patch itself /dev/null there, so patch read an empty patch, changed
# nothing and succeeded (every variant of the twenty-fifth session's first
# A/B runs was the shipped library); stdin stays /dev/null so that patch
# never waits on a question.
variant_apply() {
    local dir=$1 log=$3 p pa list
    IFS=+ read -r -a list <<<"$2"
    for p in "${list[@]}"; do
        if ! pa=$(readlink -f "$p") || [ ! -f "$pa" ]; then
            echo "no patch $p" >&2
            return 1
        fi
        (cd "$dir" && patch -s -p1 --forward -i "$pa" </dev/null) >>"$log" 2>&1 ||
            { echo "$p does not apply ($log)" >&2; return 1; }
    done
}

# variant_changed ROOT DIR: whether DIR's copy of what a patch may touch
# (kernels_src/, src/, include/) differs from ROOT's. A variant that changed
# nothing measures nothing; ab_peers.sh and tests/variants_apply.sh refuse it.
variant_changed() {
    local d
    for d in kernels_src src include; do
        diff -rq "$1/$d" "$2/$d" >/dev/null || return 0
    done
    return 1
}
