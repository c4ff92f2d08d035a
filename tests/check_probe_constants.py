"""benchmarks/route_probe.py launches the routing kernels itself (it needs
no library), so it carries copies of the launch ABI: the flag bits, the
parameter block's size, the team kernels' block size. Each copy against
its definition (kernels_src/abi.h, src/route/route_abi.h), and the probe's
flag rule against memra_route_flags' (src/route/route.c): a spec without a
bias takes the group-max bit there, so the probe must too, or its spec
builds are ones the library never makes.
Usage: check_probe_constants.py SOURCE_ROOT"""
import re
import sys

root = sys.argv[1]


def text(rel):
    with open(f"{root}/{rel}", encoding="utf-8") as f:
        return f.read()


defines = {}
for rel in ("kernels_src/abi.h", "src/route/route_abi.h"):
    for name, value in re.findall(r"^#define (MEMRA_\w+) (\d+)u?\b", text(rel), re.M):
        defines[name] = int(value)

probe = text("benchmarks/route_probe.py")
names = re.search(r"^(F_\w+(?:, F_\w+)*) = ([\d, ]+)$", probe, re.M)
assert names, "route_probe.py's flag line (F_... = ...) not found"
flags = dict(zip(names.group(1).split(", "), (int(v) for v in names.group(2).split(", "))))
bad = []
for short, value in flags.items():
    c = "MEMRA_ROUTE_FLAG_" + short[2:]
    if defines.get(c) != value:
        bad.append(f"{short} = {value}, but {c} is {defines.get(c)}")
for short, c in (("PARAM_BYTES", "MEMRA_ROUTE_PARAM_BYTES"),
                 ("TEAM_THREADS", "MEMRA_ROUTE_TEAM_THREADS")):
    m = re.search(rf"^{short} = (\d+)", probe, re.M)
    if not m or int(m.group(1)) != defines.get(c):
        bad.append(f"{short} = {m and m.group(1)}, but {c} is {defines.get(c)}")
# the flag rule: memra_route_flags sets GROUP_MAX for a spec without a bias
# (the benchmark's softmax families), so the probe's rule names F_GROUP_MAX
if "MEMRA_ROUTE_FLAG_GROUP_MAX" not in text("src/route/route.c"):
    bad.append("memra_route_flags no longer names MEMRA_ROUTE_FLAG_GROUP_MAX: revisit this test")
rule = re.search(r"self\.flags = (.*)$", probe, re.M)
if not rule or "F_GROUP_MAX" not in rule.group(1):
    bad.append("route_probe.py's flag rule leaves out F_GROUP_MAX (memra_route_flags sets it "
               "for a spec without a bias)")
for b in bad:
    print("route_probe.py:", b)
sys.exit(1 if bad else 0)
