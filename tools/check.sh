#!/usr/bin/env bash
# The README's main job: set up, build, then describe and check every GPU.
# Where there is none, `memra check` says that nothing was checked (exit 3):
# that is this job's answer on such a machine, not its failure.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/deps.sh
builddir=${MEMRA_BUILDDIR:-build}
[ -f "$builddir/build.ninja" ] || meson setup "$builddir"
meson compile -C "$builddir"
"$builddir/cli/memra" info
rc=0
"$builddir/cli/memra" check || rc=$?
[ "$rc" = 3 ] && exit 0
exit "$rc"
