#!/usr/bin/env python3
"""Embed a text file as a NUL-terminated C array (the kernel source that NVRTC
compiles at run time), so the library needs no file beside it.

usage: embed_source.py INPUT OUTPUT SYMBOL
"""
import os
import sys


def main() -> int:
    src, out, symbol = sys.argv[1:4]
    with open(src, "rb") as f:
        data = f.read()
    if b"\0" in data:
        print(f"{src}: contains a NUL byte", file=sys.stderr)
        return 1
    lines = [f"/* Generated from {os.path.basename(src)} by embed_source.py: do not edit. */",
             "#include <stddef.h>",
             f"const char {symbol}[] = {{"]
    for i in range(0, len(data), 16):
        lines.append("    " + ", ".join(f"0x{b:02x}" for b in data[i:i + 16]) + ",")
    lines.append("    0x00};")
    lines.append(f"const size_t {symbol}_len = {len(data)};")
    try:
        with open(out, "w") as f:
            f.write("\n".join(lines) + "\n")
    except BaseException:
        # A half-written file would be taken as up to date by the next build.
        if os.path.exists(out):
            os.remove(out)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
