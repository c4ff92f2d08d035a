#!/usr/bin/env bash
# Where a team (prefill) kernel's instructions go: Nsight Compute's source
# counters (instructions executed, warp stall samples, per SASS instruction)
# for one configuration's kernel compiled with its spec as constants, over
# N tokens, on the GPU machine:
#
#   benchmarks/ncu_source.sh BUILD OUTDIR N CONFIG...
#
# Writes OUTDIR/ncu-CONFIG.csv.gz (ncu --page source --print-source sass),
# OUTDIR/ncu-CONFIG.log and OUTDIR/ncu-CONFIG-lines.txt (the counts by
# source line, warp instructions a token: benchmarks/ncu_lines.py, from the
# probe's modules built with -lineinfo, kept in OUTDIR/cubins-CONFIG/).
# route_probe.py --prefill --reps 1 --no-generic launches the spec build
# alone (timed, then again for its bytes): the first launch is the one
# profiled. (Counting launches past the generic kernel's
# broke once when the probe's order changed, and profiled the generic.)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 4 ] || { sed -n '2,16p' "$0" >&2; exit 2; }
build=$1 out=$2 n=$3
shift 3
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for cfg in "$@"; do
    case $cfg in '' | *[!A-Za-z0-9.-]*) echo "bad configuration name: $cfg" >&2; exit 2 ;; esac
    rep=/tmp/memra-ncu-$cfg
    cubins=$out/cubins-$cfg
    [ -L "$cubins" ] && { echo "$cubins is a symbolic link: not following it" >&2; exit 2; }
    rm -rf "$cubins" && mkdir -p "$cubins"
    # a failed run must not leave an earlier run's report to be read as its own
    rm -f "$rep.ncu-rep"
    MEMRA_PROBE_CUBINS=$cubins "$ncu" --section SourceCounters --kernel-name regex:memra_route_ --launch-skip 0 \
        --launch-count 1 -f -o "$rep" python3 "$here/route_probe.py" --build "$build" \
        --prefill "$n" --reps 1 --no-generic --configs "$cfg" --spec-src shipped >"$out/ncu-$cfg.log" 2>&1
    echo "ncu $cfg: rc $?"
    "$ncu" -i "$rep.ncu-rep" --page source --print-source sass --csv >"$out/ncu-$cfg.csv" 2>>"$out/ncu-$cfg.log"
    "$ncu" -i "$rep.ncu-rep" --page details >>"$out/ncu-$cfg.log" 2>&1
    echo "ncu $cfg source page: $(wc -l <"$out/ncu-$cfg.csv") lines"
    gzip -f "$out/ncu-$cfg.csv"
    if compgen -G "$cubins/*.cubin" >/dev/null; then
        python3 "$here/ncu_lines.py" "$out/ncu-$cfg.csv.gz" "$cubins"/*.cubin --per "$n" \
            >"$out/ncu-$cfg-lines.txt" 2>&1
        echo "ncu $cfg by line: rc $? ($(head -1 "$out/ncu-$cfg-lines.txt"))"
    else
        echo "ncu $cfg by line: the probe kept no CUBIN (ncu-$cfg.log)"
    fi
done
