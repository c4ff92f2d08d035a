#!/usr/bin/env bash
# The README's main job: set up, build, then describe and check every GPU
# (the host arm alone, said plainly, where there is none).
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/deps.sh
builddir=${MEMRA_BUILDDIR:-build}
[ -f "$builddir/build.ninja" ] || meson setup "$builddir"
meson compile -C "$builddir"
"$builddir/tools/memra" info
"$builddir/tools/memra" check
