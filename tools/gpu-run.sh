#!/usr/bin/env bash
# One device-machine session: build, the whole suite (GPU gate included), the
# rig setup, memra info/check, and the benchmark. Logs go to $1 (default out/).
set -uo pipefail
cd "$(dirname "$0")/.."
dest=${1:-out}
out=/tmp/memra-logs
rm -rf "$out"; mkdir -p "$out" "$dest"
# The device tool returns at most 8 files: pack every log into one archive.
trap 'tar czf "$dest/logs.tgz" -C "$out" . && cp "$out/bench.json" "$dest/" 2>/dev/null' EXIT
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: ${MEMRA_COMMIT:-$(git rev-parse --verify -q HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
  echo "kernel: $(uname -r)"
} | tee "$out/env.txt"
b=/tmp/memra-build
meson setup "$b" >"$out/setup.log" 2>&1 || { tail -40 "$out/setup.log"; exit 1; }
meson compile -C "$b" >"$out/compile.log" 2>&1 || { tail -40 "$out/compile.log"; exit 1; }
meson test -C "$b" --print-errorlogs 2>&1 | tee "$out/test.log" | grep -E '^ *[0-9]+/[0-9]+|^(Ok|Fail|Skipped):'
# The inherited environment is the machine's, not ours: leave it out.
sed '/^Inherited environment:/d' "$b/meson-logs/testlog.txt" >"$out/testlog.txt"
meson test -C "$b" --setup rig --suite gpu 2>&1 | grep -E '^ *[0-9]+/[0-9]+' | tee "$out/rig.log"
"$b/tools/memra" info 2>&1 | tee "$out/info.log"
"$b/tools/memra" check 2>&1 | tee "$out/check.log"
if [ "${MEMRA_SKIP_BENCH:-0}" != 1 ]; then
  "$b/tools/memra" bench --json "$out/bench.json" 2>&1 | tee "$out/bench.log"
fi
