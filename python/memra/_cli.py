"""The `memra` console script: runs the C tool installed with the package
(`memra info`, `memra check`, `memra bench`; docs/cli.md). The tool is the
one the C build installs, linked to the library this package loads, so its
report describes that very library; nothing of it is re-implemented here.
It is given the NVRTC of the NVIDIA wheels the package finds (--nvrtc, in
the package's order), so it sees the candidates the package's engines
see."""
import os
import sys

from ._lib import bundled_dir
from ._nvrtc import wheel_nvrtc_paths


def tool_path():
    """The installed tool, or None when this package has none (a source
    checkout: use the build folder's cli/memra)."""
    d = bundled_dir()
    if d is None:
        return None
    path = os.path.join(d, "bin", "memra")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def _flush(stream):
    """Flushes a standard stream that may be closed (None), broken (a reader
    gone) or full: the tool then reports it as it writes, like any CLI;
    Python must not die with a traceback first."""
    try:
        if stream is not None:
            stream.flush()
    except (OSError, ValueError):
        pass


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    path = tool_path()
    if path is None:
        if sys.stderr is not None:
            sys.stderr.write("memra: this memra package has no tool installed (a source "
                             "checkout?): run the build folder's cli/memra\n")
        return 127
    _flush(sys.stdout)
    _flush(sys.stderr)
    nvrtc = [arg for p in wheel_nvrtc_paths() for arg in ("--nvrtc", p)]
    # exec, not a child: signals, exit status and the terminal are the tool's.
    os.execv(path, ["memra"] + nvrtc + argv)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
