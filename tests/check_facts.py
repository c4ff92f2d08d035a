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
- the model families: the routing benchmarks' list
  (benchmarks/route_configs.h) is the family cases' of src/route/route_cases.h
  (whose spec builds tests/kernel_budgets.inc budgets) and the mock's spec
  builds' (tests/meson.build's mock_specs, flags as abi.h defines them).
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

# the model families, listed three times for three build layers
flag = {m.group(1): int(m.group(2)) for m in re.finditer(
    r"#define MEMRA_ROUTE_FLAG_(\w+) (\d+)u", text("kernels_src/abi.h"))}
configs = re.findall(r'X\("([^"]+)", (\d+), (\d+), (\d+), (\d+), ([01]), ([0-9.]+)f\)',
                     text("benchmarks/route_configs.h"))
cases = text("src/route/route_cases.h")
mock = re.findall(r"\['(\d+)', '(\d+)', '(\d+)', '(\d+)', '(\d+)'\],\s*# (\S+)",
                  text("tests/meson.build"))
family_list = re.search(r"families\[\] = \{([^}]*)\}", cases)
prefixes = re.findall(r'"([^"]+)"', family_list.group(1)) if family_list else []
if len(configs) != 6 or len(mock) != 6 or len(prefixes) != 6 or not flag:
    bad.append("the family lists (route_configs.h, route_cases.h, mock_specs) not found whole: "
               "revisit this test")
for name, E, K, NG, TG, sig, rsf in configs:
    pre = [p for p in prefixes if p.split(":")[0] == name]
    entry = re.search(r'\{"' + re.escape(pre[0]) + r'[^"]*",\s*\{ROUTE_SPEC\(([^)]*)\)([^}]*)\},'
                      r"\s*(ROUTE_BIAS_\w+)", cases) if pre else None
    if not entry:
        bad.append(f"route_cases.h has no family case for route_configs.h's {name}")
        continue
    spec = [x.strip() for x in entry.group(1).split(",")]
    scoring = "MEMRA_ROUTE_SIGMOID" if sig == "1" else "MEMRA_ROUTE_SOFTMAX"
    want = [E, K, NG, TG, scoring, "MEMRA_LOGITS_F32", "1", rsf + "f"]
    biased = entry.group(3) != "ROUTE_BIAS_NONE" and "MEMRA_BIAS_BF16" not in entry.group(2)
    if spec != want or "group_scoring" in entry.group(2) or biased != (sig == "1"):
        bad.append(f"route_cases.h's {name} case is ROUTE_SPEC({', '.join(spec)}){entry.group(2)} "
                   f"{entry.group(3)}; the benchmark's is ROUTE_SPEC({', '.join(want)}), "
                   f"{'an f32 bias' if sig == '1' else 'no bias'}, vLLM's group scoring")
    row = [m for m in mock if m[5] == name]
    flags = (flag["SIGMOID"] | flag["BIAS"] if sig == "1" else flag["GROUP_MAX"]) | flag["RENORM"]
    if not row or list(row[0][:5]) != [E, NG, TG, K, str(flags)]:
        bad.append(f"tests/meson.build's mock_specs row for {name} is {row and list(row[0][:5])}, "
                   f"the benchmark's spec builds as {[E, NG, TG, K, str(flags)]}")

for b in bad:
    print(b)
sys.exit(1 if bad else 0)
