"""python -m memra: the `memra` tool (see memra._cli)."""
import sys

from ._cli import main

sys.exit(main())
