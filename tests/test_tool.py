"""The installed `memra` tool, run as a user runs it (docs/cli.md): help and
version on stdout with exit 0, usage errors on stderr with exit 2, the
JSON of info and check, exit 3 and one line when there is no GPU, bench
writing no file unless asked, a progress line only on a terminal, output
that cannot be written reported. "A GPU" here is the mock driver built as
a libcuda.so.1 (tests/fake_cuda) with a stand-in NVRTC; the benchmark is a
stand-in program (MEMRA_BENCH_PROGRAM), so the tool's own plumbing is
what is tested.

Usage: test_tool.py MEMRA FAKE_CUDA_DIR FAKE_NVRTC LIBMEMRA
"""
import json
import os
import pty
import select
import subprocess
import sys
import tempfile
import textwrap
import time

TOOL, FAKE_CUDA, FAKE_NVRTC, LIBMEMRA = (os.path.abspath(a) for a in sys.argv[1:5])
VERSION = os.environ["MEMRA_PROJECT_VERSION"]  # meson.build's, one place
BASE = {k: v for k, v in os.environ.items()
        if k not in ("MEMRA_NVRTC_PATH", "MEMRA_BENCH_PROGRAM", "LD_LIBRARY_PATH")}
# No device (and on a machine with one, none visible) and no disk cache.
NO_GPU = dict(BASE, CUDA_VISIBLE_DEVICES="", MEMRA_CACHE_DIR="off")
# The mock driver as the GPU, NVRTC 13.0 (a stand-in) to build for it.
GPU = dict(BASE, LD_LIBRARY_PATH=FAKE_CUDA, MEMRA_NVRTC_PATH=FAKE_NVRTC, MEMRA_CACHE_DIR="off")
failures = []
scratch = tempfile.mkdtemp(prefix="memra-tool-test-")


def run(args, env=NO_GPU, stdout=subprocess.PIPE, cwd=None):
    p = subprocess.run([TOOL] + args, stdout=stdout, stderr=subprocess.PIPE, env=env,
                       timeout=300, cwd=cwd or scratch)
    return (p.returncode, (p.stdout or b"").decode(errors="surrogateescape"),
            p.stderr.decode(errors="surrogateescape"))


def run_on_tty(args, env):
    """Runs with stdout on a pseudo-terminal; returns (exit, what it printed)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([TOOL] + args, stdout=slave, stderr=subprocess.PIPE, env=env,
                         cwd=scratch)
    os.close(slave)
    out, deadline = b"", time.time() + 300
    while time.time() < deadline:
        r, _, _ = select.select([master], [], [], 1)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the other end is closed
                break
            if not chunk:
                break
            out += chunk
        elif p.poll() is not None:
            break
    os.close(master)
    return p.wait(timeout=60), out.decode(errors="replace")


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}")
    if not ok:
        failures.append(f"{name}: {detail}")


def expect(name, args, code, out_has=(), err_has=(), env=NO_GPU, stdout=subprocess.PIPE):
    rc, out, err = run(args, env, stdout)
    ok = (rc == code if code is not None else rc != 0) and all(s in out for s in out_has) and \
        all(s in err for s in err_has)
    check(name, ok, f"exit {rc}, want {code}; stdout {out[:2000]!r}; stderr {err[:2000]!r}")
    return rc, out, err


# ---- help, version, usage errors ---------------------------------------------
for args in (["--help"], ["-h"], ["help"]):
    rc, out, err = expect(f"{' '.join(args)} prints the usage", args, 0, ["usage: memra"])
    check(f"{' '.join(args)}: nothing on stderr", err == "", err)
    check(f"{' '.join(args)}: names the exit codes", "Exit status" in out, out)
expect("--version", ["--version"], 0, [f"memra {VERSION} (libmemra {VERSION})"])
expect("-V", ["-V"], 0, [f"memra {VERSION}"])
for verb in ("info", "check", "bench"):
    for args in ([verb, "--help"], [verb, "-h"], ["help", verb]):
        rc, out, err = expect(f"{' '.join(args)}", args, 0, [f"usage: memra {verb}"])
        check(f"{' '.join(args)}: nothing on stderr", err == "", err)
expect("no command", [], 2, err_has=["usage: memra"])
# A usage error is one line and how to get help (docs/cli.md), not the whole
# usage text (the top level once printed all 21 lines of it).
for name, args, words in (("unknown command", ["frobnicate"], "unknown command 'frobnicate'"),
                          ("help for an unknown command", ["help", "frobnicate"],
                           "help: unknown command 'frobnicate'"),
                          ("unknown global option", ["--frobnicate"], "unrecognized option"),
                          ("--nvrtc without a file", ["--nvrtc"], "--nvrtc needs a file name")):
    rc, out, err = expect(name, args, 2, err_has=[words, "Try 'memra --help'."])
    check(f"{name}: two lines on stderr", err.count("\n") == 2 and err.startswith("memra: "), err)
expect("unknown option to info", ["info", "--verbose"], 2,
       err_has=["memra info: unrecognized option '--verbose'", "memra info --help"])
expect("extra word to check", ["check", "all"], 2,
       err_has=["memra check: unexpected argument 'all'"])
expect("unknown option to bench", ["bench", "--fast"], 2, err_has=["unrecognized option '--fast'"])
expect("--json without a file", ["bench", "--json"], 2, err_has=["--json needs a file name"])
expect("--json followed by an option", ["bench", "--json", "--quick"], 2,
       err_has=["--json needs a file name"])
expect("-o without a file", ["bench", "-o"], 2, err_has=["-o needs a file name"])
expect("--output= empty", ["bench", "--output="], 2, err_has=["--output needs a file name"])

# ---- the tool is a client of libmemra.so -------------------------------------
dyn = subprocess.run(["readelf", "-d", TOOL], capture_output=True, text=True).stdout
check("links libmemra.so.2", "Shared library: [libmemra.so.2]" in dyn, dyn)
defined = subprocess.run(["nm", "--defined-only", TOOL], capture_output=True,
                         text=True).stdout
check("holds no copy of the library", "memra_engine_create" not in defined and
      "memra_nvrtc_candidates" not in defined, "memra_* defined in the tool")
rc, out, err = run(["info", "--json"], NO_GPU)
lib = json.loads(out)["memra"]["library"] if rc == 0 else ""
check("info names the libmemra it loaded", os.path.realpath(lib) == os.path.realpath(LIBMEMRA),
      f"{lib} vs {LIBMEMRA}")

# ---- no GPU ---------------------------------------------------------------------
rc, out, err = expect("check without a GPU exits 3", ["check"], 3)
check("check without a GPU: one line, nothing on stdout",
      out == "" and err.count("\n") == 1 and "nothing was checked" in err, f"{out!r} {err!r}")
rc, out, err = expect("check --json without a GPU exits 3", ["check", "--json"], 3)
doc = json.loads(out) if out else {}
check("check --json without a GPU", doc.get("schema") == "memra.check/1" and
      doc.get("result") == "nothing_checked" and doc.get("devices") == [] and doc.get("reason"),
      out)
rc, out, err = expect("bench without a GPU exits 3", ["bench", "--quick"], 3)
check("bench without a GPU: one line", out == "" and err.count("\n") == 1 and
      "nothing was measured" in err, f"{out!r} {err!r}")
check("bench without a GPU writes no file", os.listdir(scratch) == [], os.listdir(scratch))
rc, out, err = expect("info without a GPU", ["info"], 0)
check("info says why there is no device",
      "driver: not available" in out or 'no CUDA device visible (CUDA_VISIBLE_DEVICES="")' in out,
      out)
rc, out, err = expect("info --json without a GPU", ["info", "--json"], 0)
doc = json.loads(out)
check("info --json schema", doc["schema"] == "memra.info/1" and doc["devices"] == [] and
      doc["memra"]["version"] == VERSION and isinstance(doc["nvrtc"], list) and
      doc["cache"] == {"enabled": False, "dir": None, "bytes": 0,
                       "max_bytes": doc["cache"]["max_bytes"]} and doc["no_device"], out)
# A path with a newline and a byte that is not UTF-8: one escaped text line,
# valid JSON that gives the bytes back.
odd = b"/no/such/\xffdir\nmemra: forged/libnvrtc.so.13"
env = dict(NO_GPU, MEMRA_NVRTC_PATH=os.fsdecode(odd))
rc, out, err = run(["info"], env)
line = [ln for ln in out.splitlines() if "(MEMRA_NVRTC_PATH)" in ln]
check("info escapes an odd path into one line",
      rc == 0 and len(line) == 1 and "\\nmemra: forged" in line[0] and
      not any(ln.startswith("memra: forged") for ln in out.splitlines()), out)
rc, out, err = run(["info", "--json"], env)
paths = [c["path"] for c in json.loads(out)["nvrtc"]] if rc == 0 else []
check("info --json keeps an odd path's bytes", [os.fsencode(p) for p in paths
                                                if p.startswith("/no/such")] == [odd], paths)
# C1 control characters (U+009B is CSI: a terminal obeys it like ESC [) and a
# lone 0x9b byte: escaped in the text, never written raw; \u009b in JSON.
c1 = b"/no/such/c1\xc2\x9b2J\x9b31m/libnvrtc.so.13"
env = dict(NO_GPU, MEMRA_NVRTC_PATH=os.fsdecode(c1))
p = subprocess.run([TOOL, "info"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                   timeout=120)
raw = p.stdout + p.stderr
check("info escapes C1 controls", p.returncode == 0 and
      b"c1\\xc2\\x9b2J\\x9b31m" in p.stdout and not any(0x80 <= c <= 0x9f for c in raw), raw)
rc, out, err = run(["info", "--json"], env)
check("info --json escapes C1 controls", rc == 0 and "c1\\u009b2J\\udc9b31m" in out, out)
# FIFOs named as NVRTC sonames on LD_LIBRARY_PATH (issue 30): "is one
# already loaded?" opened them and info never returned. Bounded: a hang is a
# failure here, not a hung suite.
fifo_dir = os.path.join(scratch, "fifo-llp")
os.mkdir(fifo_dir)
for name in ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2"):
    os.mkfifo(os.path.join(fifo_dir, name))
try:
    p = subprocess.run([TOOL, "info"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=dict(NO_GPU, LD_LIBRARY_PATH=fifo_dir), timeout=60, cwd=scratch)
    out = p.stdout.decode(errors="replace")
    # (whether the loader path is tried depends on the NVRTC before it here)
    check("info with FIFOs on LD_LIBRARY_PATH answers", p.returncode == 0 and
          "libnvrtc.so.12 (loader path)" in out, out)
except subprocess.TimeoutExpired:
    check("info with FIFOs on LD_LIBRARY_PATH answers", False, "memra info hung")
# A FIFO named libcuda.so.1 on LD_LIBRARY_PATH: loading the driver opened it
# and info (and every engine) never returned. Bounded as above.
cuda_fifo_dir = os.path.join(scratch, "fifo-cuda")
os.mkdir(cuda_fifo_dir)
os.mkfifo(os.path.join(cuda_fifo_dir, "libcuda.so.1"))
try:
    p = subprocess.run([TOOL, "info"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=dict(NO_GPU, LD_LIBRARY_PATH=cuda_fifo_dir), timeout=60, cwd=scratch)
    out = p.stdout.decode(errors="replace")
    check("info with a FIFO libcuda.so.1 on LD_LIBRARY_PATH answers and says why",
          p.returncode == 0 and "libcuda.so.1 in LD_LIBRARY_PATH is not a regular file (a FIFO)"
          in out, out)
except subprocess.TimeoutExpired:
    check("info with a FIFO libcuda.so.1 on LD_LIBRARY_PATH answers and says why", False,
          "memra info hung")
# --nvrtc: a candidate added as memra_set_nvrtc_path adds it (the pip console
# script passes the wheels' NVRTC this way)
rc, out, err = run(["--nvrtc", FAKE_NVRTC, "info", "--json"], NO_GPU)
cands = json.loads(out)["nvrtc"] if rc == 0 else []
check("--nvrtc adds a candidate", any(c["path"] == FAKE_NVRTC and
                                      c["origin"] == "memra_set_nvrtc_path" for c in cands),
      f"exit {rc}: {out[:2000]} {err}")
expect("--nvrtc without a file", ["--nvrtc"], 2, err_has=["--nvrtc needs a file name"])
expect("--nvrtc of a missing file", ["--nvrtc", "/no/such/libnvrtc.so.13", "info"], 1,
       err_has=["memra: --nvrtc: memra_set_nvrtc_path: /no/such/libnvrtc.so.13"])
if os.path.exists("/dev/full"):
    with open("/dev/full", "w") as full:
        expect("info to a full disk", ["info"], None, err_has=["writing standard output failed"],
               stdout=full)
        expect("info --json to a full disk", ["info", "--json"], None,
               err_has=["writing standard output failed"], stdout=full)

# ---- on a GPU (the mock driver) --------------------------------------------------
rc, out, err = expect("info on a GPU", ["info"], 0,
                      ["driver: CUDA 13.0", "device 0: Mock GPU 0, sm_90",
                       "kernel: compiled and loaded as sm_90 CUBIN"], env=GPU)
check("info on a GPU: no progress line on a pipe", "\r" not in out and "\x1b" not in out, out)
rc, out, err = expect("info --json on a GPU", ["info", "--json"], 0, env=GPU)
doc = json.loads(out)
dev = doc["devices"][0] if doc["devices"] else {}
check("info --json device", dev.get("name") == "Mock GPU 0" and dev.get("sm") == 90 and
      dev["kernel"]["loaded"] is True and dev["kernel"]["target"] == "sm_90" and
      dev["kernel"]["ptx"] is False and dev["kernel"]["nvrtc_version"] == 13000 and
      dev["kernel"]["nvrtc_path"] == FAKE_NVRTC and doc["driver"] == {
          "available": True, "version": 13000, "error": None} and doc["no_device"] is None, out)
first = doc["nvrtc"][0]
check("info --json NVRTC candidates", first["path"] == FAKE_NVRTC and
      first["origin"] == "MEMRA_NVRTC_PATH" and first["state"] == "usable" and
      first["version"] == 13000 and 90 in first["archs"] and
      all(c["state"] in ("usable", "refused", "not_tried") for c in doc["nvrtc"]), out)
rc, tty = run_on_tty(["info"], GPU)
check("info on a terminal shows, then clears, a progress line",
      rc == 0 and "loading the kernel" in tty and "\r\x1b[K" in tty, tty)

rc, out, err = expect("check --json on a GPU", ["check", "--json"], 0, env=GPU)
doc = json.loads(out)
dev = doc["devices"][0] if doc["devices"] else {}
check("check --json result", doc["schema"] == "memra.check/1" and doc["result"] == "exact" and
      len(doc["host_arm"]) == 4 and all(c["exact"] for c in doc["host_arm"]) and
      dev.get("self_check", {}).get("result") == "exact" and dev["self_check"]["cases"] > 0 and
      dev["batch"] == {"result": "exact", "message": None, "pairs": 1 << 20}, out)
check("check --json: no progress line", "\r" not in out and "\x1b" not in out, out)
rc, tty = run_on_tty(["check"], dict(GPU, FAKE_CUDA_CORRUPT="1"))
check("check on a broken GPU exits 1 and says where", rc == 1 and "MISMATCH" in tty and
      "memra check: FAILED" in tty, tty)
check("check on a terminal shows a progress line", "self check" in tty and "\r\x1b[K" in tty,
      tty)

# ---- bench: the tool's plumbing around the benchmark program ----------------------
stub = os.path.join(scratch, "..", os.path.basename(scratch) + "-bench-stub")
with open(stub, "w") as f:
    f.write(f"#!{sys.executable}\n" + textwrap.dedent("""
        import json, os, sys, time
        args = sys.argv[1:]
        print("memra bench stand-in, args:", " ".join(args))
        path = args[args.index("--json") + 1] if "--json" in args else None
        rows = [{"group": "g", "what": "row %d" % i, "value": i, "unit": "us"} for i in range(3)]
        for r in rows:
            print("  %-50s %10.3f us" % (r["what"], r["value"]))
            sys.stdout.flush()
            time.sleep(0.05)
        if path:
            with open(path, "w") as out:
                json.dump({"memra": "stand-in", "rows": rows}, out)
            print("\\nJSON: %s" % path)
        sys.exit(int(os.environ.get("STUB_RC", "0")))
    """))
os.chmod(stub, 0o755)
BENCH = dict(GPU, MEMRA_BENCH_PROGRAM=stub)
work = tempfile.mkdtemp(prefix="memra-bench-cwd-")
rc, out, err = run(["bench", "--quick"], BENCH, cwd=work)
check("bench --quick runs the benchmark", rc == 0 and "row 2" in out and
      "args: --quick" in out and "--json" not in out, f"{rc} {out!r} {err!r}")
check("bench without -o writes no file", os.listdir(work) == [], os.listdir(work))
check("bench without -o does not print a JSON line", "JSON:" not in out, out)
target = os.path.join(work, "out.json")
rc, out, err = run(["bench", "-o", target], BENCH, cwd=work)
check("bench -o FILE writes it", rc == 0 and json.load(open(target))["rows"][2]["value"] == 2 and
      f"JSON: {target}" in out, f"{rc} {out!r} {err!r}")
rc, out, err = run(["bench", "--json", target, "--quick"], BENCH, cwd=work)
check("bench --json FILE (the older spelling) is -o", rc == 0 and
      f"--json {target} --quick" in out, out)
rc, out, err = run(["bench", "--route", "--quick"], BENCH, cwd=work)
check("bench --route asks the benchmark for the routing section", rc == 0 and
      "args: --quick --route" in out, f"{rc} {out!r} {err!r}")
missing = os.path.join(work, "no-such-folder", "bench.json")
rc, out, err = run(["bench", "-o", missing], BENCH, cwd=work)
check("bench -o into a missing folder fails at once", rc == 1 and missing in err and
      "stand-in" not in out, f"{rc} {out!r} {err!r}")
rc, out, err = run(["bench"], dict(BENCH, STUB_RC="1"), cwd=work)
check("a failing benchmark is exit 1", rc == 1, f"{rc} {out!r}")
rc, tty = run_on_tty(["bench", "--quick"], BENCH)
check("bench on a terminal shows a progress line", rc == 0 and "memra bench: " in tty and
      "rows in" in tty and "\r\x1b[K" in tty, tty)
rc, out, err = run(["bench", "--quick"], dict(GPU, MEMRA_BENCH_PROGRAM="/no/such/bench"))
check("a missing benchmark program is said", rc == 1 and "/no/such/bench" in err, err)

subprocess.run(["rm", "-rf", scratch, work, stub])
if failures:
    print("\n".join(failures))
    sys.exit(1)
