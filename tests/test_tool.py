"""The installed `memra` tool's command line: wrong verbs and flags are refused
with the usage on stderr and exit 2; output that cannot be written is a
failure with a message, never a silent success.

Usage: test_tool.py PATH_TO_MEMRA
"""
import os
import subprocess
import sys
import tempfile

TOOL = sys.argv[1]
# No device and no disk cache: every case is quick and touches nothing.
ENV = dict(os.environ, CUDA_VISIBLE_DEVICES="", MEMRA_CACHE_DIR="off")
failures = []


def run(args, stdout=subprocess.PIPE):
    p = subprocess.run([TOOL] + args, stdout=stdout, stderr=subprocess.PIPE, env=ENV,
                       timeout=120)
    return p.returncode, (p.stdout or b"").decode(), p.stderr.decode()


def expect(name, args, code, stderr_has=(), stdout=subprocess.PIPE):
    rc, out, err = run(args, stdout)
    ok = (rc == code if code is not None else rc != 0) and all(s in err for s in stderr_has)
    print(f"{'ok  ' if ok else 'FAIL'} {name}: exit {rc}")
    if not ok:
        failures.append(f"{name}: exit {rc}, want {code}; stderr: {err!r}")


usage = "usage: memra"
expect("no verb", [], 2, [usage])
expect("unknown verb", ["frobnicate"], 2, ["unknown command 'frobnicate'", usage])
expect("unknown flag to info", ["info", "--verbose"], 2, ["unknown argument '--verbose'", usage])
expect("extra word to check", ["check", "all"], 2, ["unknown argument 'all'", usage])
expect("unknown flag to bench", ["bench", "--fast"], 2, ["unknown argument '--fast'"])
expect("--json without a file", ["bench", "--json"], 2, ["--json needs a file name"])
expect("--json followed by a flag", ["bench", "--json", "--quick"], 2,
       ["--json needs a file name"])
with tempfile.TemporaryDirectory() as d:
    missing = os.path.join(d, "no-such-folder", "bench.json")
    expect("--json into a missing folder", ["bench", "--json", missing], 1, [missing])
    good = os.path.join(d, "bench.json")
    expect("--json that works", ["bench", "--quick", "--json", good], 0)
    if not os.path.getsize(good):
        failures.append("bench --json wrote an empty file")
if os.path.exists("/dev/full"):
    with open("/dev/full", "w") as full:
        expect("info to a full disk", ["info"], None, ["writing standard output failed"], full)
        expect("check to a full disk", ["check"], None, ["writing standard output failed"], full)
    expect("--json to a full disk", ["bench", "--json", "/dev/full"], 1, ["/dev/full"])
expect("info works", ["info"], 0)
expect("check works", ["check"], 0)
# No visible device is said as such, not as a driver error.
for verb in ("info", "check"):
    rc, out, err = run([verb])
    if "driver: not available" not in out and "no CUDA device visible" not in out:
        failures.append(f"{verb} with CUDA_VISIBLE_DEVICES='': no 'no CUDA device' line:\n{out}")
    if "no CUDA device visible" in out and 'CUDA_VISIBLE_DEVICES=""' not in out:
        failures.append(f"{verb}: the no-device line does not name CUDA_VISIBLE_DEVICES:\n{out}")

if failures:
    print("\n".join(failures))
    sys.exit(1)
