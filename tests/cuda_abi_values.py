"""Section 2 of src/driver/cuda_abi.h (memra's declarations of the CUDA values and
structs it uses) as a C program that prints, one per line, the value of
every enumerator and macro, the size, alignment and signedness of every
enum, and the size and alignment of every struct and union with the offset
and size of each field. Built once against cuda_abi.h and once against a
toolkit's cuda.h and nvrtc.h (-DMEMRA_CUDA_ABI_TOOLKIT), the two outputs
must be equal (cuda_abi_compare.py).

Every statement of section 2 must be one this script knows (a typedef'd
enum, struct or union, or a #define with a value); anything else is an
error, so nothing declared there escapes the comparison.

Usage: cuda_abi_values.py cuda_abi.h out.c"""
import re
import sys


def section2(text):
    m = re.search(r"\(section-2-begin\)[^\n]*\n(.*?)/\* \(section-2-end\) \*/", text, re.S)
    if not m:
        sys.exit("cuda_abi_values.py: no (section-2-begin) ... (section-2-end) in the header")
    return m.group(1)


def fields(body):
    out = []
    for decl in body.split(";"):
        decl = decl.strip()
        if not decl:
            continue
        decl = re.sub(r"_Alignas\s*\([^)]*\)", " ", decl)
        # The declarator's name: the last identifier outside brackets.
        head = re.sub(r"\[[^\]]*\]", "", decl)
        name = re.findall(r"[A-Za-z_]\w*", head)[-1]
        out.append(name)
    return out


def parse(sec):
    sec = re.sub(r"/\*.*?\*/", " ", sec, flags=re.S)
    macros, enums, records = [], [], []
    code = []
    for line in sec.split("\n"):
        s = line.strip()
        if s.startswith("#"):
            m = re.match(r"#define\s+([A-Za-z_]\w*)\s+(\S.*)$", s)
            if not m:
                sys.exit(f"cuda_abi_values.py: a preprocessor line it does not check: {s}")
            macros.append(m.group(1))
        else:
            code.append(line)
    code = " ".join(code)
    # Top-level statements: split at ';' outside braces.
    depth, cur, stmts = 0, "", []
    for ch in code:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == ";" and depth == 0:
            stmts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        sys.exit(f"cuda_abi_values.py: trailing text: {cur.strip()}")
    for st in stmts:
        m = re.fullmatch(r"typedef\s+(enum|struct|union)\s+\w+\s*\{(.*)\}\s*([A-Za-z_]\w*)", st,
                         re.S)
        if not m:
            sys.exit(f"cuda_abi_values.py: a declaration it does not check: {st}")
        kind, body, name = m.groups()
        if kind == "enum":
            names = [re.match(r"\s*([A-Za-z_]\w*)\s*=", e).group(1)
                     for e in body.split(",") if e.strip()]
            enums.append((name, names))
        else:
            records.append((name, fields(body)))
    return macros, enums, records


def main():
    header, out = sys.argv[1], sys.argv[2]
    macros, enums, records = parse(section2(open(header).read()))
    p = ["#include <stddef.h>", "#include <stdint.h>", "#include <stdio.h>",
         "#ifdef MEMRA_CUDA_ABI_TOOLKIT", "#include <cuda.h>", "#include <nvrtc.h>", "#else",
         '#include "driver/cuda_abi.h"', "#endif", "", "int main(void)", "{"]
    for m in macros:
        p.append(f'    printf("{m} %lld\\n", (long long)(intptr_t)({m}));')
    for t, names in enums:
        p.append(f'    printf("enum {t} size %zu align %zu unsigned %d\\n", sizeof({t}), '
                 f'_Alignof({t}), (int)(({t})-1 > ({t})0));')
        for n in names:
            p.append(f'    printf("{n} %lld\\n", (long long)({n}));')
    for t, fs in records:
        p.append(f'    printf("{t} size %zu align %zu\\n", sizeof({t}), _Alignof({t}));')
        for f in fs:
            p.append(f'    printf("{t}.{f} offset %zu size %zu\\n", offsetof({t}, {f}), '
                     f'sizeof((({t} *)0)->{f}));')
    p += ["    return 0;", "}", ""]
    open(out, "w").write("\n".join(p))


if __name__ == "__main__":
    main()
