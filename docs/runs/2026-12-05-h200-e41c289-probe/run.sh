#!/usr/bin/env bash
# one device call: build, the fixed GPU table test, the block kernel's probe with variants,
# then the peers' decode section as shipped and with the (threads, 1) launch bound.
set -uo pipefail
OUT=$1
b=/tmp/b
(meson setup $b >/dev/null && meson compile -C $b >/dev/null 2>&1) || { echo build failed; exit 3; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
meson test -C $b --suite gpu test_gpu_tables --print-errorlogs 2>&1 | tail -8 | tee $OUT/gpu_tables.log
export PYTHONUNBUFFERED=1
timeout 150 python3 benchmarks/route_probe.py --build $b --src .device/v_lb1 --src .device/v_nobounds \
  --src .device/v_smem512 --src .device/v_nolayout --json $OUT/probe.json 2>&1 | tee $OUT/probe.log | grep -E "^==|DeepSeek|Kimi|Qwen3-Next|empty"
nv=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
NVCC=$nv benchmarks/peers/build.sh $b /tmp/bench_peers > $OUT/peers-build.log 2>&1 || { tail -20 $OUT/peers-build.log; exit 4; }
timeout 120 /tmp/bench_peers --sections decode --budget-s 100 > $OUT/decode-shipped.log 2>&1
grep -E "^\| (DeepSeek|Kimi|GLM|Qwen|Mixtral)" $OUT/decode-shipped.log | head -24
cp .device/v_lb1/vrows_pair.cuh kernels_src/vrows_pair.cuh
meson compile -C $b >/dev/null 2>&1 || { echo rebuild failed; exit 5; }
timeout 120 /tmp/bench_peers --sections decode --budget-s 100 > $OUT/decode-lb1.log 2>&1
grep -E "^\| (DeepSeek|Kimi|GLM|Qwen|Mixtral)" $OUT/decode-lb1.log | head -24
