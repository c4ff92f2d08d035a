"""The `memra` console script: runs the C tool installed with the package
(`memra info`, `memra check`, `memra bench`; docs/cli.md). The tool is the
one the C build installs, linked to the library this package loads, so its
report describes that very library; nothing of it is re-implemented here."""
import os
import sys

from ._lib import bundled_dir


def tool_path():
    """The installed tool, or None when this package has none (a source
    checkout: use the build folder's cli/memra)."""
    d = bundled_dir()
    if d is None:
        return None
    path = os.path.join(d, "bin", "memra")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    path = tool_path()
    if path is None:
        sys.stderr.write("memra: this memra package has no tool installed (a source checkout?): "
                         "run the build folder's cli/memra\n")
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    # exec, not a child: signals, exit status and the terminal are the tool's.
    os.execv(path, ["memra"] + argv)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
