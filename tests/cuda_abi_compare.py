"""Runs the cuda_abi_values program built against memra's declarations
(src/driver/cuda_abi.h) and the one built against a CUDA toolkit's headers, and
fails on any line that differs: a value, size, alignment, signedness or
field offset that memra declares otherwise than the toolkit. Without a
toolkit (no second program) it skips (exit 77) and says so.

Usage: cuda_abi_compare.py MEMRA_PROGRAM [TOOLKIT_PROGRAM TOOLKIT_DIR]"""
import subprocess
import sys


def lines(exe):
    return subprocess.run([exe], check=True, capture_output=True, text=True,
                          timeout=60).stdout.splitlines()


def main():
    ours = lines(sys.argv[1])
    if len(sys.argv) < 3:
        print("SKIPPED: no CUDA toolkit headers (-Dtoolkit_dir): memra's declarations of the "
              f"CUDA ABI ({len(ours)} values and layouts) were not compared with a toolkit's")
        sys.exit(77)
    theirs = lines(sys.argv[2])
    bad = [f"  memra: {a}\n  {sys.argv[3]}: {b}" for a, b in zip(ours, theirs) if a != b]
    if len(ours) != len(theirs):
        bad.append(f"  {len(ours)} lines against {len(theirs)}")
    for b in bad:
        print("MISMATCH\n" + b)
    print(f"{len(ours)} values and layouts of src/driver/cuda_abi.h compared with {sys.argv[3]}: "
          f"{len(bad)} differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
