"""Writes a C program that prints every number include/memra/memra.h gives
a binding: each enum's members (as "enum_type.MEMBER value", an anonymous
enum's as "MEMBER value") and each object-like MEMRA_* macro with a numeric
value (the limits, MEMRA_NO_FAULT), one per line:

    memra_status.MEMRA_OK 0
    ...
    MEMRA_MAX_PAIRS 268435456

The names come from the header itself and the values from the compiler, so
a member added there shows up in the bindings' checks (Python:
check_binding_constants.py) without touching this file.
Usage: abi_constants.py memra.h out.c"""
import re
import sys


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def enums(text):
    """(type name or None, [member names]) for each enum of the header."""
    for m in re.finditer(r"(typedef\s+)?enum\s*(\w*)\s*\{(.*?)\}\s*(\w*)\s*;", text, re.S):
        name = m.group(4) or m.group(2) or None
        members = [re.match(r"\s*(\w+)", part).group(1)
                   for part in m.group(3).split(",") if part.strip()]
        yield name if m.group(1) or m.group(4) else None, members


def numeric_macros(text):
    """Object-like MEMRA_* macros whose value is a number or a constant
    expression of numbers and other such macros (MEMRA_LAYOUT_MAX_EXPERT is
    MEMRA_ROUTE_MAX_EXPERT + MEMRA_ROUTE_MAX_TOP_K), not the include guard,
    MEMRA_API or the function-like X-macros."""
    numeric = set()
    for m in re.finditer(r"^#define\s+(MEMRA_\w+)[ \t]+([^\n]+)$", text, re.M):
        name, value = m.group(1), m.group(2).strip()
        bare = re.sub(r"\b(MEMRA_\w+)\b", lambda w: "0" if w.group(1) in numeric else "?", value)
        if re.fullmatch(r"[0-9A-Fa-fxXuUlL()<> +\-*|]+|UINT32_MAX|INT32_MAX", bare):
            numeric.add(name)
            yield name


def main():
    header, out = sys.argv[1], sys.argv[2]
    text = strip_comments(open(header).read())
    lines = ["#include <stdio.h>", "#include <memra/memra.h>", "", "int main(void)", "{"]
    for name, members in enums(text):
        for member in members:
            label = f"{name}.{member}" if name else member
            lines.append(f'    printf("{label} %lld\\n", (long long)({member}));')
    for name in numeric_macros(text):
        lines.append(f'    printf("{name} %lld\\n", (long long)({name}));')
    lines += ["    return 0;", "}", ""]
    open(out, "w").write("\n".join(lines))


if __name__ == "__main__":
    main()
