#!/usr/bin/env bash
# Kernel variants measured by the benchmark of record: bench_peers run with the
# shipped library and with libraries built from patched copies of the tree, the
# arms taking turns, on the GPU machine:
#
#   benchmarks/ab_peers.sh BENCH_PEERS BUILD OUTDIR ROUNDS NAME=PATCH[+PATCH...] ... -- ARGS...
#
# BENCH_PEERS is a bench_peers binary (benchmarks/peers/build.sh) linked against
# BUILD's library; each variant NAME is the tree with its patches applied in order
# (`patch -p1` from the repository root; the first line of a stacked patch says
# so, as in benchmarks/variants/), built library-only in OUTDIR/ab-NAME.build.
# The library is swapped by LD_PRELOAD (same soname, so the binary's own link
# resolves to it, whatever its rpath). ROUNDS rounds, each running "shipped" and
# every variant with bench_peers' ARGS (e.g. --sections prefill --configs
# Mixtral), each round starting one arm further on: the card's clock drifts
# over a call and its first run reads slower, so no arm's numbers all come
# from one end of it or from the first place. Each run's log and JSON: OUTDIR/runs/NAME-rR.{log,json}
# (the folder emptied first: no earlier call's run is read as this one's). The
# kernel text is the library's own (embedded at build time), and the disk cache
# keys on it, so no arm can run another's kernels. AB_RUN_S bounds each run
# (default 240 s). Exits 1 when a variant could not be built or a run failed.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
# shellcheck source=benchmarks/variant_lib.sh
. "$here/variant_lib.sh"
[ $# -ge 5 ] || { sed -n '2,20p' "$0" >&2; exit 2; }
bench=$1 build=$2 out=$3 rounds=$4
shift 4
variants=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    variants+=("$1")
    shift
done
[ "${1:-}" = -- ] && shift
case $rounds in '' | *[!0-9]*) echo "ROUNDS is not a number: $rounds" >&2; exit 2 ;; esac
[ -x "$bench" ] || { echo "no bench_peers at $bench" >&2; exit 2; }
for d in "$out" "$out/runs"; do
    [ -L "$d" ] && { echo "$d is a symbolic link: not following it" >&2; exit 2; }
done
mkdir -p "$out"
rm -rf "$out/runs"
mkdir "$out/runs"
failed=0
declare -A lib
lib[shipped]=$(readlink -f "$build/src/libmemra.so.2")
names=(shipped)
for v in "${variants[@]}"; do
    name=${v%%=*} patches=${v#*=}
    { variant_name_ok "$name" && [ "$name" != shipped ]; } || { echo "bad variant name: $name" >&2; exit 2; }
    [ -n "${lib[$name]:-}" ] && { echo "variant $name named twice" >&2; exit 2; }
    tree=$out/ab-$name.tree vb=$out/ab-$name.build
    for d in "$tree" "$vb"; do
        [ -L "$d" ] && { echo "$d is a symbolic link: not following it" >&2; exit 2; }
    done
    rm -rf "$tree" "$vb" "$out/ab-$name".*.log
    mkdir -p "$tree"
    # What the library's build reads; no build folders, no .git.
    (cd "$root" && tar cf - --exclude='./build*' --exclude=./.git --exclude=./bindings \
        --exclude=./docs --exclude=./python . ) | (cd "$tree" && tar xf -)
    ok=1
    variant_apply "$tree" "$patches" "$out/ab-$name.patch.log" || { echo "$name: not made" >&2; ok=0; }
    # A variant whose tree is the shipped one measures nothing (the first A/B
    # calls ran so, unseen).
    if [ $ok = 1 ] && ! variant_changed "$root" "$tree"; then
        echo "$name: the patches left the tree as it was" >&2
        ok=0
    fi
    if [ $ok = 1 ] && ! meson setup "$vb" "$tree" -Dtests=false >"$out/ab-$name.setup.log" 2>&1; then
        echo "$name: meson setup failed (ab-$name.setup.log)" >&2
        tail -20 "$out/ab-$name.setup.log" >&2
        ok=0
    fi
    if [ $ok = 1 ] && ! meson compile -C "$vb" src/memra:shared_library >"$out/ab-$name.compile.log" 2>&1; then
        echo "$name: the build failed (ab-$name.compile.log)" >&2
        tail -20 "$out/ab-$name.compile.log" >&2
        ok=0
    fi
    [ $ok = 1 ] || { failed=1; continue; }
    lib[$name]=$(readlink -f "$vb/src/libmemra.so.2")
    names+=("$name")
done
n_arms=${#names[@]}
for r in $(seq 1 "$rounds"); do
    # Round r starts at arm r - 1 (round 1 with "shipped"): the first run of a
    # call read slower copies as well as slower kernels (the twenty-fifth
    # session's A/B: Mixtral's copy 3.01 µs in the first arm's turns, 2.76-2.85
    # in the others'), so the first place goes round the arms.
    for k in $(seq 0 $((n_arms - 1))); do
        n=${names[$(((r - 1 + k) % n_arms))]}
        # --foreground: in the caller's process group, so a timeout around this
        # script stops the benchmark too
        timeout --foreground -k 10 "${AB_RUN_S:-240}" env LD_PRELOAD="${lib[$n]}" "$bench" \
            --json "$out/runs/$n-r$r.json" "$@" >"$out/runs/$n-r$r.log" 2>&1
        rc=$?
        echo "round $r, $n: rc $rc (runs/$n-r$r.log)"
        [ $rc = 0 ] || failed=1
    done
done
exit $failed
