"""Runs the tests against the source tree's package (python/) unless an
installed one is asked for (MEMRA_TEST_INSTALLED=1); MEMRA_LIB names the
library to load (a build folder's libmemra.so.0)."""
import os
import sys

if os.environ.get("MEMRA_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
