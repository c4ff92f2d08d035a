#!/usr/bin/env python3
"""Embed text files, concatenated in order, as one NUL-terminated C array (a
kernel module's source, which NVRTC compiles at run time), so the library
needs no file beside it. Each -DNAME (or -DNAME=VALUE) before the inputs
becomes a first line "#define NAME 1" ("#define NAME VALUE"): a module that
builds one kernel of a shared file. Each input begins with a #line marker,
so NVRTC's messages name the file and line, not the concatenation's.

usage: embed_source.py OUTPUT SYMBOL [-DNAME...] INPUT...
"""
import os
import sys


def main() -> int:
    out, symbol, srcs = sys.argv[1], sys.argv[2], sys.argv[3:]
    defines = [a[2:] for a in srcs if a.startswith("-D")]
    srcs = [a for a in srcs if not a.startswith("-D")]
    data = b"".join(f"#define {d.partition('=')[0]} {d.partition('=')[2] or '1'}\n".encode()
                    for d in defines)
    for src in srcs:
        with open(src, "rb") as f:
            part = f.read()
        if b"\0" in part:
            print(f"{src}: contains a NUL byte", file=sys.stderr)
            return 1
        data += f'#line 1 "{os.path.basename(src)}"\n'.encode()
        data += part if part.endswith(b"\n") else part + b"\n"
    names = ", ".join(os.path.basename(s) for s in srcs)
    lines = [f"/* Generated from {names} by embed_source.py: do not edit. */",
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
