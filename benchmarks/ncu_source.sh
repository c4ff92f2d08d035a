#!/usr/bin/env bash
# Where a team (prefill) kernel's instructions go: Nsight Compute's source
# counters (instructions executed, warp stall samples, per SASS instruction)
# for one configuration's kernel compiled with its spec as constants, over
# N tokens, on the GPU machine:
#
#   benchmarks/ncu_source.sh BUILD OUTDIR N CONFIG...
#
# Writes OUTDIR/ncu-CONFIG.csv.gz (ncu --page source --print-source sass) and
# OUTDIR/ncu-CONFIG.log. route_probe.py --prefill --reps 1 launches the
# generic kernel twice, then the spec build twice: the third launch is the
# one profiled.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 4 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
build=$1 out=$2 n=$3
shift 3
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for cfg in "$@"; do
    case $cfg in '' | *[!A-Za-z0-9.-]*) echo "bad configuration name: $cfg" >&2; exit 2 ;; esac
    rep=/tmp/memra-ncu-$cfg
    "$ncu" --section SourceCounters --kernel-name regex:memra_route_ --launch-skip 2 \
        --launch-count 1 -f -o "$rep" python3 "$here/route_probe.py" --build "$build" \
        --prefill "$n" --reps 1 --configs "$cfg" --spec-src shipped >"$out/ncu-$cfg.log" 2>&1
    echo "ncu $cfg: rc $?"
    "$ncu" -i "$rep.ncu-rep" --page source --print-source sass --csv >"$out/ncu-$cfg.csv" 2>>"$out/ncu-$cfg.log"
    "$ncu" -i "$rep.ncu-rep" --page details >>"$out/ncu-$cfg.log" 2>&1
    echo "ncu $cfg source page: $(wc -l <"$out/ncu-$cfg.csv") lines"
    gzip -f "$out/ncu-$cfg.csv"
done
