#!/usr/bin/env bash
set -uo pipefail
OUT=$1; shift
b=/tmp/b
(meson setup $b >/dev/null && meson compile -C $b >/dev/null 2>&1) || { echo build failed; exit 3; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
cat $OUT/env.txt
export PYTHONUNBUFFERED=1
srcs="${SRCS:-}"
for d in "$@"; do srcs="$srcs --src $d"; done
timeout 200 python3 benchmarks/route_probe.py --build $b $srcs --json $OUT/probe.json > $OUT/probe.log 2>&1
echo probe rc=$?
meson test -C $b --suite gpu test_gpu_route test_gpu_tables --print-errorlogs 2>&1 | tail -4 > $OUT/gpu_route.log
cat $OUT/gpu_route.log
