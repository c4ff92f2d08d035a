"""The Python package's ctypes copies of the public structs against the C
layout (the output of the abi_layout program, generated from memra.h): every
ctypes structure whose C counterpart exists (memra_<snake> for CamelCase,
with memra_vrows_ tried too) has the C size and every C field, in order, at
the C offset. Usage: check_binding_layout.py layout.txt python_dir"""
import ctypes
import re
import sys


def c_layout(path):
    sizes, fields = {}, {}
    for line in open(path):
        name, value = line.split()
        if "." in name:
            s, f = name.split(".")
            fields.setdefault(s, []).append((f, int(value)))
        else:
            sizes[name] = int(value)
    return sizes, fields


def c_name(cls_name, sizes):
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", cls_name).lower()
    for cand in (f"memra_{snake}", f"memra_vrows_{snake}"):
        if cand in sizes:
            return cand
    return None


def main():
    sizes, fields = c_layout(sys.argv[1])
    sys.path.insert(0, sys.argv[2])
    from memra import _lib
    checked, errors = 0, []
    for cls in vars(_lib).values():
        if not (isinstance(cls, type) and issubclass(cls, ctypes.Structure)):
            continue
        name = c_name(cls.__name__, sizes)
        if name is None:
            errors.append(f"{cls.__name__}: no public C struct of that name in memra.h")
            continue
        checked += 1
        if ctypes.sizeof(cls) != sizes[name]:
            errors.append(f"{cls.__name__}: {ctypes.sizeof(cls)} bytes, {name} has {sizes[name]}")
        py = [(f[0], getattr(cls, f[0]).offset) for f in cls._fields_]
        if py != fields[name]:
            errors.append(f"{cls.__name__}: fields {py}, {name} has {fields[name]}")
    if checked == 0:
        errors.append("no ctypes structures found in memra._lib")
    for e in errors:
        print("MISMATCH", e)
    print(f"{checked} ctypes structures checked against memra.h")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
