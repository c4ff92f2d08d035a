"""Writes a C program that prints the layout of every public struct in
include/memra/memra.h (its size, then each field's offset), one per line:

    memra_faults 12
    memra_faults.bad_expert 0
    ...

The struct and field names come from the header itself, so a field added
there is checked against the Python and Rust copies without touching this
file. Usage: abi_layout.py memra.h out.c"""
import re
import sys


def structs(header):
    text = re.sub(r"/\*.*?\*/", " ", open(header).read(), flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        name, body = m.group(3), m.group(2)
        fields = []
        for decl in body.split(";"):
            decl = decl.strip()
            if not decl:
                continue
            # "const float *plane[3]", "uint32_t n_tokens, n_expert": the type is
            # everything before the first declarator.
            head, *rest = decl.split(",")
            first = re.search(r"(\w+)\s*(\[[^\]]*\])*\s*$", head)
            fields.append(first.group(1))
            fields.extend(re.match(r"\s*\**\s*(\w+)", r).group(1) for r in rest)
        yield name, fields


def main():
    header, out = sys.argv[1], sys.argv[2]
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <memra/memra.h>", "",
             "int main(void)", "{"]
    for name, fields in structs(header):
        lines.append(f'    printf("{name} %zu\\n", sizeof({name}));')
        for f in fields:
            lines.append(f'    printf("{name}.{f} %zu\\n", offsetof({name}, {f}));')
    lines += ["    return 0;", "}", ""]
    open(out, "w").write("\n".join(lines))


if __name__ == "__main__":
    main()
