"""pip install . in a fresh venv: the wheel builds with the project's own
meson.build, is tagged for any CPython 3 (py3-none-<platform>: it holds no
extension module), installs a `memra` package, the library and the `memra`
tool (a console script), imports outside the source tree, and runs the host
arm."""
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.mark.skipif(os.environ.get("MEMRA_SKIP_PACKAGING") == "1",
                    reason="MEMRA_SKIP_PACKAGING=1 (no package index here)")
def test_wheel_builds_installs_and_runs(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("MEMRA_LIB", "PYTHONPATH")}
    wheels = tmp_path / "wheels"
    r = subprocess.run([py, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), ROOT],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = list(wheels.glob("memra-*.whl"))
    # any CPython 3, this platform only (the wheel holds a native library)
    assert "-py3-none-" in whl.name and not whl.name.endswith("-any.whl"), whl.name
    # one build of each native file (the library is built once, not once
    # more only to be left out), all in the bundled libs folder
    import zipfile
    names = zipfile.ZipFile(whl).namelist()
    native = sorted(n for n in names if os.path.basename(n) in ("libmemra.so", "memra", "memra-bench"))
    assert native == [".memra.mesonpy.libs/bin/memra", ".memra.mesonpy.libs/bin/memra-bench",
                      ".memra.mesonpy.libs/libmemra.so"], native
    r = subprocess.run([py, "-m", "pip", "install", "-q", str(whl), "numpy"],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    script = textwrap.dedent("""
        import os, numpy as np, memra
        assert "site-packages" in memra.__file__, memra.__file__
        from memra import _lib
        assert _lib._path().endswith(".memra.mesonpy.libs/libmemra.so"), _lib._path()
        assert memra.version() == memra.__version__
        pkg = os.path.dirname(memra.__file__)  # memra.torch is a package (torch not needed here)
        for f in ("torch/__init__.py", "torch/sglang.py", "_torch_ops.py", "_torch_sglang.py",
                  "_torch_layout.py"):
            assert os.path.isfile(os.path.join(pkg, f)), f
        ptrs, scl, f = memra.vrows_tables_host(np.array([0, 7, 3], np.int32),
                                               np.array([1, .5, .25], np.float32), 8,
                                               None, (1 << 40, 2 << 40, 3 << 40),
                                               (1 << 33, 1 << 33, 1 << 34))
        assert int(ptrs[1]) == (1 << 40) + 7 * (1 << 33)
        assert scl.tolist()[6:] == [1.0, 0.5, 0.25] and f.bad_expert == 0
        print("installed memra", memra.__version__, "ok")
    """)
    r = subprocess.run([py, "-c", script], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "installed memra" in r.stdout
    # the console script runs the C tool, linked to the package's library
    for cmd in ([str(venv / "bin" / "memra"), "--version"], [py, "-m", "memra", "--version"]):
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(tmp_path),
                           timeout=60)
        assert r.returncode == 0 and r.stdout.startswith("memra "), (cmd, r.stdout, r.stderr)
    r = subprocess.run([str(venv / "bin" / "memra"), "info", "--json"], capture_output=True,
                       text=True, env=env, cwd=str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    import json
    info = json.loads(r.stdout)
    assert info["memra"]["library"].endswith("libmemra.so"), info["memra"]
    assert ".memra.mesonpy.libs" in info["memra"]["library"]
    r = subprocess.run([str(venv / "bin" / "memra"), "nonsense"], capture_output=True,
                       text=True, env=env, cwd=str(tmp_path), timeout=60)
    assert r.returncode == 2 and r.stderr, (r.returncode, r.stderr)  # the tool's usage error
