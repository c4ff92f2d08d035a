#!/usr/bin/env bash
# The README's test command: set up what is missing, build, run every suite.
# GPU tests skip (exit 77) where there is no CUDA device.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/deps.sh
builddir=${MEMRA_BUILDDIR:-build}
if [ -f "$builddir/build.ninja" ]; then
  meson setup --reconfigure "$builddir" >/dev/null
else
  meson setup "$builddir"
fi
meson compile -C "$builddir"
meson test -C "$builddir" --print-errorlogs --num-processes "$(nproc)" "$@"
