"""The `memra` console script (memra._cli): it runs the C tool with the
NVRTC of the NVIDIA wheels the package finds (so `memra info` lists the
candidates the package's engines have), and a closed or broken standard
output is the tool's to report, never a Python traceback. A stand-in tool
records its arguments."""
import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(tmp_path, close_stdout=False, stdout=subprocess.PIPE):
    tool = tmp_path / "tool"
    record = tmp_path / "argv"
    tool.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {record}\nexit 0\n")
    tool.chmod(0o755)
    wheel = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    wheel.mkdir(parents=True)
    (wheel / "libnvrtc.so.13").write_bytes(b"")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.join(HERE, "..")!r})
        sys.path.insert(0, {str(tmp_path / "site")!r})
        import memra._cli as c
        c.tool_path = lambda: {str(tool)!r}
        raise SystemExit(c.main(["info", "--json"]))
    """)
    p = subprocess.run([sys.executable, "-c", script], stdout=stdout, stderr=subprocess.PIPE,
                       text=True, timeout=60,
                       preexec_fn=(lambda: os.close(1)) if close_stdout else None)
    args = record.read_text().split("\n")[:-1] if record.exists() else None
    return p, args, str(wheel / "libnvrtc.so.13")


def test_the_tool_gets_the_wheels_nvrtc(tmp_path):
    p, args, nvrtc = _run(tmp_path)
    assert p.returncode == 0, p.stderr
    assert args == ["--nvrtc", nvrtc, "info", "--json"], args


def test_closed_stdout_is_no_traceback(tmp_path):
    p, args, _ = _run(tmp_path, close_stdout=True, stdout=None)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 0 and args[-2:] == ["info", "--json"], (p.returncode, p.stderr)


def test_broken_stdout_is_no_traceback(tmp_path):
    r, w = os.pipe()
    os.close(r)  # the reader is gone: writes fail with EPIPE
    try:
        p, args, _ = _run(tmp_path, stdout=w)
    finally:
        os.close(w)
    assert "Traceback" not in p.stderr, p.stderr
    assert args is not None and args[-2:] == ["info", "--json"]
