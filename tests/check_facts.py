"""Facts written in more than one place, held to the one that defines them:
- the version: meson.build's project version is the Rust crate's
  (Cargo.toml) and the Python package's (_lib.VERSION), and its major.minor
  the crate's WRITTEN_FOR_MAJOR/MINOR (the C structs it mirrors);
- the soname: meson.build's soversion is the `libmemra.so.N` the crate and
  the package load by name;
- the environment: every MEMRA_* variable the library reads (memra_env,
  memra_env_flag, the NVRTC search's own reader) has a row in the README's
  Environment table, and the table names none it does not read; the numbers
  the table and docs/cache.md quote (the cache's default cap, the
  specialised builds an engine keeps) are the headers';
- the model families: src/route/route_families.h lists them once; its rows
  read as the text readers (tests/meson.build, route_probe.py) read them, the
  mock's MOCK_SPEC_BUILDS is their number and one more (the first family's
  +layout build), and the flags tests/meson.build
  gives a family's spec build are abi.h's names, none of them a call's.
Usage: check_facts.py SOURCE_ROOT"""
import glob
import re
import sys

root = sys.argv[1]


def text(rel):
    with open(f"{root}/{rel}", encoding="utf-8") as f:
        return f.read()


bad = []
meson = text("meson.build")
version = re.search(r"version:\s*'(\d+\.\d+\.\d+)'", meson).group(1)
soversion = re.search(r"memra_soversion\s*=\s*'(\d+)'", meson).group(1)
major, minor, _ = (int(x) for x in version.split("."))

cargo = re.search(r'^version = "([^"]+)"', text("bindings/rust/Cargo.toml"), re.M).group(1)
if cargo != version:
    bad.append(f"bindings/rust/Cargo.toml says {cargo}, meson.build {version}")
py = re.search(r'^VERSION = "([^"]+)"', text("python/memra/_lib.py"), re.M).group(1)
if py != version:
    bad.append(f"python/memra/_lib.py's VERSION is {py}, meson.build's {version}")
ffi = text("bindings/rust/src/ffi.rs")
for name, want in (("WRITTEN_FOR_MAJOR", major), ("WRITTEN_FOR_MINOR", minor)):
    m = re.search(rf"pub const {name}: u32 = (\d+);", ffi)
    if not m or int(m.group(1)) != want:
        bad.append(f"ffi.rs's {name} is {m and m.group(1)}, meson.build's version {version}")

soname = f"libmemra.so.{soversion}"
for rel in ("bindings/rust/src/find.rs", "bindings/rust/build.rs", "python/memra/_lib.py"):
    for other in set(re.findall(r"libmemra\.so\.\d+", text(rel))):
        if other != soname:
            bad.append(f"{rel} names {other}, meson.build's soname is {soname}")

read = set()
for path in glob.glob(f"{root}/src/**/*.c", recursive=True):
    with open(path, encoding="utf-8") as f:
        src = f.read()
    read |= set(re.findall(r'(?:memra_env|memra_env_flag|path_var_locked)\(\s*"(MEMRA_\w+)"',
                           src))
readme = text("README.md")
table = readme.split("## Environment", 1)[1].split("\n\n", 2)[1]
documented = set(re.findall(r"^\| `(MEMRA_\w+)`", table, re.M))
for name in sorted(read - documented):
    bad.append(f"the library reads {name}, which README.md's Environment table lacks")
for name in sorted(documented - read):
    bad.append(f"README.md's Environment table names {name}, which the library never reads")
if not read:
    bad.append("no environment read found in src/: revisit this test's pattern")

# numbers the Environment table quotes: the cache's default cap
# (cache_env.h) and the specialised builds an engine keeps (engine.h)
cap = re.search(r"#define MEMRA_CACHE_DEFAULT_CAP \((\d+)ull << 20\)", text("src/jit/cache_env.h"))
specials = re.search(r"#define MEMRA_SPECIAL_MODULES (\d+)", text("src/engine/engine.h"))
if not cap or not specials:
    bad.append("MEMRA_CACHE_DEFAULT_CAP or MEMRA_SPECIAL_MODULES not found: revisit this test")
else:
    for rel, doc in (("README.md", readme), ("docs/cache.md", text("docs/cache.md"))):
        said = re.findall(r"default (\d+) MiB", doc)
        if not said or any(int(x) != int(cap.group(1)) for x in said):
            bad.append(f"{rel} gives the cache's default cap as {said} MiB, cache_env.h "
                       f"{cap.group(1)} MiB")
    said = re.findall(r"(\d+) such builds an engine", table)
    if said != [specials.group(1)]:
        bad.append(f"README.md's MEMRA_ROUTE_SPECIALIZE row says {said} builds an engine, "
                   f"engine.h's MEMRA_SPECIAL_MODULES is {specials.group(1)}")

# the model families: src/route/route_families.h lists them once, and the C
# code takes the rows through its X-macro; what still needs holding is what
# reads them as text (tests/meson.build's mock spec builds, route_probe.py)
# and the numbers written beside them
flag = {m.group(1): int(m.group(2)) for m in re.finditer(
    r"#define (MEMRA_ROUTE_FLAG_\w+) (\d+)u", text("kernels_src/abi.h"))}
families = text("src/route/route_families.h")
macro = re.search(r"#define MEMRA_ROUTE_FAMILIES\(X\)((?:.*\\\n)*.*)", families)
written = re.findall(r"\bX\(", macro.group(1)) if macro else []
# a row as route_probe.py's parser and meson's (one a line) read it
rows = re.findall(r'^ *X\("[^"()]+", \d+, \d+, \d+, \d+, [01], [0-9.]+f, [01], [01]\)', families,
                  re.M)
builds = re.search(r"#define MOCK_SPEC_BUILDS (\d+)", text("tests/mock/mock_internal.h"))
if not macro or not rows or len(rows) != len(written):
    bad.append(f"src/route/route_families.h: {len(written)} rows in MEMRA_ROUTE_FAMILIES, "
               f"{len(rows)} of them one a line with plain literals, as route_probe.py and "
               "tests/meson.build read them")
# a build a family, and the first family's +layout build (tests/meson.build)
if not builds or int(builds.group(1)) != len(written) + 1:
    bad.append(f"tests/mock/mock_internal.h's MOCK_SPEC_BUILDS is {builds and builds.group(1)}, "
               f"route_families.h has {len(written)} families (mock/modules.c: a build each, "
               "and the first one's +layout build)")
tests_meson = text("tests/meson.build")
mapping = re.search(r"family_flags = \{\s*'1': '([\w|]+)',\s*'0': '([\w|]+)',\s*\}", tests_meson)
of_call = re.search(r"#define MEMRA_ROUTE_FLAGS_OF_CALL\s*\\?\s*\(([^)]*)\)",
                    text("kernels_src/abi.h"))
if not mapping or not flag or not of_call:
    bad.append("tests/meson.build's family_flags or abi.h's MEMRA_ROUTE_FLAG_* not found: "
               "revisit this test")
else:
    # the spec builds' flags: abi.h's names (an unknown name in the mock's
    # #if would read as 0), none of them a flag of one call, which no spec
    # build holds (mock/modules.c masks them off a launch's flags)
    per_call = set(re.findall(r"MEMRA_ROUTE_FLAG_\w+", of_call.group(1)))
    for sig, names in zip("10", mapping.groups()):
        for n in names.split("|"):
            if n not in flag or n in per_call:
                bad.append(f"tests/meson.build's family_flags for sigmoid={sig} names {n}, "
                           f"{'a flag of one call' if n in per_call else 'which abi.h lacks'}")
if "mock_specs = [\n" in tests_meson:
    bad.append("tests/meson.build writes the families' spec builds out again: read them from "
               "route_families.h")

for b in bad:
    print(b)
sys.exit(1 if bad else 0)
