#!/usr/bin/env python3
"""Where a profiled kernel's instructions go, by source line: Nsight Compute's
per-SASS-instruction source counters (benchmarks/ncu_source.sh's
ncu-CONFIG.csv[.gz], `ncu --page source --print-source sass --csv`) read back
onto kernels_src/'s lines through the line table of the same module, built
with -lineinfo and kept by the probe (MEMRA_PROBE_CUBINS):

    python3 benchmarks/ncu_lines.py NCU.csv[.gz] CUBIN... [--per N] [--top N]
                                    [--nvdisasm PATH]

Each CUBIN is disassembled with its line table (`nvdisasm -g -c`); the one
whose instructions match the profile's, offset by offset, is used (a profile
names its kernel, and the probe may have built several). Prints the
instructions executed and the stall samples in all, then per source line
(the most first), each divided by --per (e.g. the warps the launch ran, for
warp instructions a token where a warp routes one), with the line's text
from --src (this checkout's kernels_src/ unless the CUBINs are another
tree's); a called subroutine without a line table (the IEEE division's slow
path) counts as "(no line)". A profile and a listing that do not match
(another build) are refused rather than read side by side."""
import argparse
import collections
import csv
import functools
import gzip
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KSRC = os.path.join(os.path.dirname(HERE), "kernels_src")


def opcode(text):
    """The instruction's opcode, without a predicate or modifiers."""
    t = re.sub(r"^@!?U?P\w+\s+", "", text.strip())
    return t.split()[0].split(".")[0] if t else ""


def read_profile(path):
    """(kernel name, [(offset, opcode, executed, samples, not-issued samples)])."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    kernel = next((r[1] for r in rows if len(r) > 1 and r[0] == "Kernel Name"), "")
    head = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if head is None:
        raise SystemExit("%s: no source-page table (no \"Address\" column)" % path)
    h = rows[head]
    names = ("Source", "Instructions Executed", "Warp Stall Sampling (All Samples)",
             "Warp Stall Sampling (Not-issued Samples)")
    missing = [n for n in names if n not in h]
    if missing:
        raise SystemExit("%s: no %s column (ncu --page source --print-source sass --csv)"
                         % (path, ", ".join(missing)))
    col = {name: h.index(name) for name in names}
    out = []
    for r in rows[head + 1:]:
        try:
            addr = int(r[0], 16)
            vals = [int(r[col[c]].replace(",", "") or 0) for c in list(col)[1:]]
        except (ValueError, IndexError):
            continue
        out.append((addr, opcode(r[col["Source"]]), *vals))
    if not out:
        raise SystemExit("%s: no instructions in the table" % path)
    base = out[0][0]
    return kernel, [(a - base, op, n, s, q) for a, op, n, s, q in out]


def read_listing(nvdisasm, cubin, kernel):
    """offset -> (file, line, opcode) for `kernel` in `cubin`."""
    run = subprocess.run([nvdisasm, "-g", "-c", cubin], capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit("%s %s: %s" % (nvdisasm, cubin, run.stderr.strip()[:200]))
    out, cur, here = {}, None, False
    for line in run.stdout.splitlines():
        m = re.match(r"\s*\.text\.(\S+?):?$", line) or re.match(r"\s*(\S+):$", line)
        if m and m.group(1) in (kernel, ".text." + kernel):
            here, cur = True, None
            continue
        if re.match(r"\s*\.section\s", line) or re.match(r"\s*\.text\.", line):
            here = False
        if m and not m.group(1).startswith(".L"):
            # another function's label (a subroutine the kernel calls, e.g. the
            # IEEE division's slow path, has no line table): its instructions
            # are no line's, not the last line's before it
            cur = None
            continue
        m = re.search(r'File "([^"]+)", line (\d+)', line)
        if m:
            cur = (os.path.basename(m.group(1)), int(m.group(2)))
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m and here:
            out[int(m.group(1), 16)] = (cur, opcode(m.group(2)))
    return out


@functools.lru_cache(maxsize=None)
def source_lines(path):
    """A source file's lines, read once however many of its lines are printed."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except OSError:
        return []


def source_line(where, src):
    if not where:
        return ""
    lines = source_lines(os.path.join(src, where[0]))
    return lines[where[1] - 1].strip() if 0 < where[1] <= len(lines) else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("cubins", nargs="+")
    ap.add_argument("--per", type=float, default=1.0, help="divide the counts by this")
    ap.add_argument("--top", type=int, default=50, help="lines to print")
    ap.add_argument("--nvdisasm", default=shutil.which("nvdisasm") or "/usr/local/cuda/bin/nvdisasm")
    ap.add_argument("--src", default=KSRC,
                    help="the kernel sources the CUBINs were built from, for the lines' text "
                         "(default: this checkout's kernels_src/)")
    a = ap.parse_args()
    kernel, prof = read_profile(a.profile)
    best = None
    for c in a.cubins:
        lst = read_listing(a.nvdisasm, c, kernel)
        if not lst:
            continue
        bad = sum(1 for off, op, *_ in prof if lst.get(off, (None, ""))[1] != op)
        if best is None or bad < best[0]:
            best = (bad, c, lst)
    if best is None:
        raise SystemExit("no CUBIN holds %s" % kernel)
    bad, cubin, lst = best
    if bad > len(prof) // 100:
        raise SystemExit("%s: %d of %d instructions differ from the profile's: another build"
                         % (cubin, bad, len(prof)))
    ex, smp = collections.Counter(), collections.Counter()
    for off, _, n, s, _q in prof:
        where = lst.get(off, (None, ""))[0]
        ex[where] += n
        smp[where] += s
    tot_n, tot_s = sum(ex.values()), sum(smp.values())
    tot_q = sum(q for *_, q in prof)
    print("%s (%s): %d SASS instructions, %.1f executed / %g, %d stall samples "
          "(%d while nothing issued)" % (kernel, os.path.basename(cubin), len(prof),
                                          tot_n / a.per, a.per, tot_s, tot_q))
    print("%10s %6s %7s  %s" % ("executed", "share", "samples", "line"))
    for where, n in sorted(ex.items(), key=lambda kv: -kv[1])[:a.top]:
        name = "%s:%d" % where if where else "(no line)"
        print("%10.1f %5.1f%% %6.1f%%  %s  %s" % (n / a.per, 100.0 * n / max(tot_n, 1),
                                               100.0 * smp[where] / max(tot_s, 1), name,
                                               source_line(where, a.src)[:70]))


if __name__ == "__main__":
    sys.exit(main())
