"""How the package hands NVRTC to the library, and where memra's warnings
go. The wheel set runs in a child process on the mock driver (the test
build's libcuda.so.1, tests/fake_cuda) with stand-in NVRTC libraries
(tests/fake_nvrtc), so the library's real choice is what is checked."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import memra

PKG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def _build_dir():
    """The build folder whose library the tests load (MEMRA_LIB is
    <build>/src/libmemra.so.2), for its test-only fakes."""
    d = os.environ.get("MEMRA_TEST_BUILDDIR")
    if d:
        return d
    lib = os.environ.get("MEMRA_LIB")
    return os.path.dirname(os.path.dirname(os.path.abspath(lib))) if lib else None


def _fakes():
    b = _build_dir()
    cuda = os.path.join(b, "tests", "fake_cuda") if b else None
    nv = os.path.join(b, "tests", "fake_nvrtc") if b else None
    if not cuda or not os.path.exists(os.path.join(cuda, "libcuda.so.1")):
        pytest.skip("the mock driver (tests/fake_cuda) is not built here")
    return cuda, nv


def _child(script, env_extra, tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MEMRA_NVRTC_PATH", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
                        "PYTHONPATH")}
    env.update(env_extra, PYTHONPATH=PKG, MEMRA_CACHE_DIR="off")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                       text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def _wheel(site, sub, name, lib):
    d = site.joinpath(*sub.split("/"))
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(lib, d / name)
    return str(d / name)


def test_wheel_order_and_names(tmp_path):
    """sys.path order first, then cu13 before cuda_nvrtc, newest first in a
    folder; only libnvrtc.so.<digits>[.<digits>] names."""
    a, b = tmp_path / "a", tmp_path / "b"
    made = {}
    for site, sub, name in ((a, "nvidia/cuda_nvrtc/lib", "libnvrtc.so.12"),
                            (a, "nvidia/cu13/lib", "libnvrtc.so.13"),
                            (a, "nvidia/cu13/lib", "libnvrtc.so.13.1"),
                            (a, "nvidia/cuda_nvrtc/lib", "libnvrtc.so.11.2"),
                            (b, "nvidia/cu13/lib", "libnvrtc.so.99")):
        d = site.joinpath(*sub.split("/"))
        d.mkdir(parents=True, exist_ok=True)
        (d / name).write_bytes(b"")
        made[(site, name)] = str(d / name)
    for stray in ("libnvrtc.so.13~", "libnvrtc.so.13.0.88", "libnvrtc.so.x", "libnvrtc.so.",
                  "libnvrtc-builtins.so.13.0", "libnvrtc.so.13.bak", "libnvrtc.so.1a"):
        (a / "nvidia" / "cu13" / "lib" / stray).write_bytes(b"")
    os.mkfifo(a / "nvidia" / "cu13" / "lib" / "libnvrtc.so.14")  # not a regular file
    got = memra.wheel_nvrtc_paths([str(a), str(b), str(a)])
    assert got == [made[(a, "libnvrtc.so.13.1")], made[(a, "libnvrtc.so.13")],
                   made[(a, "libnvrtc.so.12")], made[(a, "libnvrtc.so.11.2")],
                   made[(b, "libnvrtc.so.99")]]
    assert memra.wheel_nvrtc_paths([str(b), str(a)])[0] == made[(b, "libnvrtc.so.99")]


def test_wheel_set_on_a_cuda_12_8_driver(tmp_path):
    """Both the CUDA 13 and the 12.x wheels installed, a stray name beside
    them and a libnvrtc.so.99 in a later sys.path entry, driver 12.8: every
    wheel NVRTC is offered, NVRTC 13 is refused (newer than the driver),
    the 12.9 one builds the kernel, and the .99 one is never loaded."""
    cuda, nv = _fakes()
    site1, site2 = tmp_path / "site1", tmp_path / "site2"
    p13 = _wheel(site1, "nvidia/cu13/lib", "libnvrtc.so.13",
                 os.path.join(nv, "libnvrtc-fake-v13_0.so"))
    _wheel(site1, "nvidia/cu13/lib", "libnvrtc.so.13~", os.path.join(nv, "libnvrtc-fake-v13_0.so"))
    p12 = _wheel(site1, "nvidia/cuda_nvrtc/lib", "libnvrtc.so.12",
                 os.path.join(nv, "libnvrtc-fake-v12_9.so"))
    p99 = _wheel(site2, "nvidia/cu13/lib", "libnvrtc.so.99",
                 os.path.join(nv, "libnvrtc-fake-v12_8.so"))
    r = _child(f"""
        import json, sys
        sys.path[:0] = [{str(site1)!r}, {str(site2)!r}]
        import memra
        found = memra.wheel_nvrtc_paths()
        with memra.Engine(0) as e:
            e.warmup()
            origin = e.kernel_origin()
        print(json.dumps({{"found": found, "origin": origin,
                          "cands": memra.nvrtc_candidates()}}))
    """, {"LD_LIBRARY_PATH": cuda, "FAKE_CUDA_DRIVER_VERSION": "12080"}, tmp_path)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["found"] == [p13, p12, p99]
    o = out["origin"]
    assert o["ready"] and o["nvrtc_path"] == p12 and o["nvrtc_version"] == 12090, o
    assert not o["is_ptx"] and o["arch"] == 90
    states = {c["path"]: c for c in out["cands"]}
    assert states[p13]["state"] == "usable" and states[p13]["version"] == 13000
    assert states[p12]["state"] == "usable"
    assert states[p99]["state"] == "not_tried"
    assert all(c["origin"] == "memra_set_nvrtc_path" for c in out["cands"]
               if c["path"] in (p13, p12, p99))


def test_warnings_go_to_logging(tmp_path):
    """Logger "memra", level WARNING, one line with control characters
    escaped; nothing on stderr then."""
    r = _child("""
        import logging, memra
        got = []
        class Keep(logging.Handler):
            def emit(self, rec):
                got.append((rec.name, rec.levelno, rec.getMessage()))
        logging.getLogger("memra").addHandler(Keep())
        memra.nvrtc_candidates()
        assert len(got) == 1, got
        name, level, msg = got[0]
        assert name == "memra" and level == logging.WARNING, got
        assert "MEMRA_NVRTC_PATH=rel/libnvrtc.so.13\\\\nmemra: warning: forged is not an absolute" \\
            in msg, msg
        print("ok")
    """, {"MEMRA_NVRTC_PATH": "rel/libnvrtc.so.13\nmemra: warning: forged"}, tmp_path)
    assert "memra: warning" not in r.stderr, r.stderr


def test_set_nvrtc_path_arguments(tmp_path):
    """str, bytes and os.PathLike name the same file; a NUL is refused, not
    cut; a non-UTF-8 name reaches the library as it is."""
    missing = tmp_path / "no-such" / "libnvrtc.so.12"
    for form in (str(missing), os.fsencode(str(missing)), missing):
        with pytest.raises(memra.NvrtcError) as e:
            memra.set_nvrtc_path(form)
        assert f"{missing} cannot be opened" in str(e.value), str(e.value)
        assert "b'" not in str(e.value)
    for bad in ("a\0b", b"/x\0/y"):
        with pytest.raises(memra.InvalidArgError, match="NUL"):
            memra.set_nvrtc_path(bad)
    with pytest.raises(memra.InvalidArgError, match="str, bytes or os.PathLike"):
        memra.set_nvrtc_path(12)
    with pytest.raises(memra.NvrtcError) as e:
        memra.set_nvrtc_path(os.fsencode(str(tmp_path)) + b"/\xff\xfe-libnvrtc.so.12")
    assert "cannot be opened" in str(e.value)
    fifo = tmp_path / "libnvrtc.so.13"
    os.mkfifo(fifo)
    with pytest.raises(memra.NvrtcError, match="not a regular file"):
        memra.set_nvrtc_path(fifo)


def test_log_handler_may_call_memra(tmp_path):
    """A logging.Handler on the "memra" logger that calls memra: the warning
    (a relative MEMRA_NVRTC_PATH) was sent while the library held its
    discovery lock, and the handler's nvrtc_candidates() waited for that lock
    for ever. In a child, bounded: a hang fails this test, not the suite."""
    script = """
        import logging
        import memra
        seen = []
        class CallsMemra(logging.Handler):
            def emit(self, record):
                seen.append((record.getMessage(), len(memra.nvrtc_candidates())))
        logging.getLogger("memra").addHandler(CallsMemra())
        memra.nvrtc_candidates()
        assert len(seen) == 1, seen
        assert "MEMRA_NVRTC_PATH=rel/libnvrtc.so.13 is not an absolute path" in seen[0][0], seen
        assert seen[0][1] >= 1, seen  # the handler's own call listed the refusal
        print("handled")
    """
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH", "PYTHONPATH")}
    env.update(PYTHONPATH=PKG, MEMRA_CACHE_DIR="off", MEMRA_NVRTC_PATH="rel/libnvrtc.so.13")
    try:
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True,
                           text=True, env=env, cwd=str(tmp_path), timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the handler's call into memra hung (the warning was sent under a lock)")
    assert r.returncode == 0 and "handled" in r.stdout, r.stdout + r.stderr
