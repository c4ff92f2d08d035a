"""The Python package's numbers against memra.h's (the output of the
abi_constants program, generated from the header): every limit the package
uses, every status its exception classes carry, and every member of each
enum it passes or compares, value for value; and no member of those enums
in the header that the package lacks, so a value the header adds or
changes fails here rather than reaching C as something else.
Usage: check_binding_constants.py constants.txt python_dir"""
import sys

# C limit -> the package's name for it (in memra._lib, re-exported by memra).
LIMITS = {"MEMRA_MAX_PAIRS": "MAX_PAIRS", "MEMRA_MAX_LAYERS": "MAX_LAYERS",
          "MEMRA_NO_FAULT": "NO_FAULT", "MEMRA_ROUTE_MAX_EXPERT": "ROUTE_MAX_EXPERT",
          "MEMRA_ROUTE_MAX_TOP_K": "ROUTE_MAX_TOP_K", "MEMRA_ROUTE_MAX_GROUPS": "ROUTE_MAX_GROUPS",
          "MEMRA_LAYOUT_MAX_EXPERT": "LAYOUT_MAX_EXPERT",
          "MEMRA_LAYOUT_ONE_LAUNCH": "LAYOUT_ONE_LAUNCH"}

# C enum -> (the package's table in memra._lib, {C member: the table's key},
# whether the table maps keys to values (else values to keys)).
ENUMS = {
    "memra_route_scoring": ("SCORINGS", {"MEMRA_ROUTE_SOFTMAX": "softmax",
                                         "MEMRA_ROUTE_SIGMOID": "sigmoid"}),
    "memra_logits_dtype": ("LOGITS_DTYPES", {"MEMRA_LOGITS_F32": "float32",
                                             "MEMRA_LOGITS_BF16": "bfloat16",
                                             "MEMRA_LOGITS_F16": "float16"}),
    "memra_group_scoring": ("GROUP_SCORINGS", {"MEMRA_GROUP_AUTO": None,
                                               "MEMRA_GROUP_TOP2_SUM": "top2_sum",
                                               "MEMRA_GROUP_MAX": "max"}),
    "memra_shared_rule": ("SHARED_RULES", {"MEMRA_SHARED_CONSTANT": "constant",
                                           "MEMRA_SHARED_ROUTED_SUM": "routed_sum"}),
    "memra_count_dtype": ("COUNT_DTYPES", {"MEMRA_COUNT_I32": "int32",
                                           "MEMRA_COUNT_I64": "int64"}),
    "memra_bias_dtype": ("BIAS_DTYPES", {"MEMRA_BIAS_F32": "float32",
                                         "MEMRA_BIAS_BF16": "bfloat16"}),
    "memra_checked_call": ("CALLS", {
        "MEMRA_CALL_ROUTE_TABLES": "route_tables",
        "MEMRA_CALL_ROUTE_TABLES_HOST": "route_tables_host",
        "MEMRA_CALL_ROUTE_PREPARE_LAYER": "route_prepare_layer",
        "MEMRA_CALL_VROWS_TABLES": "vrows_tables",
        "MEMRA_CALL_VROWS_TABLES_EX": "vrows_tables_ex",
        "MEMRA_CALL_VROWS_TABLES_HOST": "vrows_tables_host",
        "MEMRA_CALL_VROWS_TABLES_HOST_EX": "vrows_tables_host_ex",
        "MEMRA_CALL_VROWS_PREPARE_LAYER": "vrows_prepare_layer",
        "MEMRA_CALL_LAYOUT_TABLES": "layout_tables",
        "MEMRA_CALL_LAYOUT_TABLES_HOST": "layout_tables_host",
        "MEMRA_CALL_ROUTE_TABLES_EX": "route_tables_ex",
        "MEMRA_CALL_ROUTE_TABLES_HOST_EX": "route_tables_host_ex"}),
}
# Tables keyed by the C value (value -> the package's word).
BY_VALUE = {
    "memra_nvrtc_state": ("NVRTC_STATES", {"MEMRA_NVRTC_USABLE": "usable",
                                           "MEMRA_NVRTC_REFUSED": "refused",
                                           "MEMRA_NVRTC_NOT_TRIED": "not_tried"}),
    "memra_log_level": ("LOG_LEVELS", None),  # values -> logging levels, every member
}


def read(path):
    flat, enums = {}, {}
    for line in open(path):
        name, value = line.split()
        value = int(value)
        if "." in name:
            enum, member = name.split(".")
            enums.setdefault(enum, {})[member] = value
            flat[member] = value
        else:
            flat[name] = value
    return flat, enums


def main():
    flat, enums = read(sys.argv[1])
    sys.path.insert(0, sys.argv[2])
    import memra
    from memra import _errors, _lib
    errors, checked = [], 0

    def expect(what, got, want):
        nonlocal checked
        checked += 1
        if got != want:
            errors.append(f"{what}: the package has {got!r}, memra.h {want!r}")

    for c, py in LIMITS.items():
        expect(f"_lib.{py} ({c})", getattr(_lib, py), flat[c])
        expect(f"memra.{py}", getattr(memra, py, None), flat[c])
    for enum, (table, members) in ENUMS.items():
        got = getattr(_lib, table)
        for member, value in enums[enum].items():
            if member not in members:
                errors.append(f"{enum}.{member} = {value} is in memra.h but not in _lib.{table}")
                continue
            expect(f"_lib.{table}[{members[member]!r}] ({member})", got.get(members[member]),
                   value)
        extra = set(got) - set(members.values())
        if extra:
            errors.append(f"_lib.{table} has {sorted(map(repr, extra))}, which memra.h lacks")
    for enum, (table, members) in BY_VALUE.items():
        got = getattr(_lib, table)
        for member, value in enums[enum].items():
            checked += 1
            if value not in got:
                errors.append(f"{enum}.{member} = {value} has no entry in _lib.{table}")
            elif members is not None and got[value] != members.get(member):
                errors.append(f"_lib.{table}[{value}] is {got[value]!r}, want "
                              f"{members.get(member)!r} ({member})")
    # statuses: one exception class per MEMRA_ERR_*, named and numbered as C
    status = dict(enums["memra_status"])
    assert status.pop("MEMRA_OK") == 0
    status.pop("MEMRA_STATUS_COUNT")
    classes = {c.status_name: c.status for c in _errors._BY_STATUS.values()}
    for member, value in status.items():
        expect(f"the exception class for {member}", classes.get(member), value)
    for name in set(classes) - set(status):
        errors.append(f"{name} has an exception class but is not in memra.h")
    for e in errors:
        print("MISMATCH", e)
    print(f"{checked} numbers of the package checked against memra.h")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
