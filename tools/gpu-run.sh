#!/usr/bin/env bash
# One device-machine session: build, the whole suite (GPU gate included), the
# rig setup, memra info/check, the Rust crate's gate (a test binary built
# elsewhere and carried in .device/), the Python package's CPU tests, NVRTC
# from an unusual folder (throwaway machines only), and the benchmarks.
# Logs go to $1 (default out/).
#   MEMRA_STAGES="test rig check rust pytest elsewhere bench"  the stages to run (default all;
#                 "peers" runs only bench's peer benchmark, benchmarks/peers/; "route" only
#                 `memra-bench --route`; "torch-bench" only benchmarks/bench_torch.py;
#                 "variants" the phase probe of benchmarks/variants/queue's kernels,
#                 queue-prefill's team kernels over 64, 4,096 and 65,536 tokens, and
#                 queue-batch's probes at decode batch sizes; "ab" benchmarks/variants/queue-ab's
#                 library variants beside the shipped one in bench_peers, benchmarks/ab_peers.sh;
#                 "ncu" Nsight Compute's counts by source line of the team kernel over
#                 MEMRA_NCU_TOKENS (default 4096) tokens for MEMRA_NCU_CONFIGS (default
#                 DeepSeek-V3,Kimi-K2), benchmarks/ncu_source.sh)
#   MEMRA_SUITE=gpu  the test stage runs only that meson suite (default: the whole suite)
#   MEMRA_PEERS_BUDGET_S=S  bench_peers' --budget-s (default 300)
#   MEMRA_PEERS_SECTIONS=decode  bench_peers' --sections (default all)
#   MEMRA_PEERS_CONFIGS=Mixtral,DeepSeek-V3  bench_peers' --configs (default all);
#                 memra-bench --route takes the same list (MEMRA_BENCH_ROUTE_CONFIGS)
# The logs are packed after every stage as well as at exit, so a command killed at the
# device tool's limit (SIGKILL: no trap runs) still brings back what was done.
set -uo pipefail
cd "$(dirname "$0")/.."
dest=${1:-out}
stages=" ${MEMRA_STAGES:-test rig check rust pytest elsewhere bench} "
has() { [[ "$stages" == *" $1 "* ]]; }
out=/tmp/memra-logs
rm -rf "$out"; mkdir -p "$out" "$dest"
# The device tool returns at most 8 files: pack every log into one archive,
# and beside it no more than six JSON files (the ab stage writes one a run:
# all eight of one call's came back and the archive did not).
pack() {
  tar czf "$dest/logs.tgz" -C "$out" . &&
    { find "$out" -maxdepth 1 -name '*.json' -type f | LC_ALL=C sort | head -n 6 |
        while IFS= read -r f; do cp "$f" "$dest/"; done; }
}
trap pack EXIT
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  # The device machine's copy of the tree may carry an older .git than the
  # files (its `git rev-parse HEAD` named a commit sessions earlier): the
  # commit is the caller's to state, and the files' own digest (the same
  # command here gives the same line for a clean checkout) says what ran.
  echo "commit: ${MEMRA_COMMIT:-not given (set MEMRA_COMMIT)}"
  echo "sources: $(find kernels_src src include benchmarks tools cli -type f ! -name '*.pyc' -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
  nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
  echo "kernel: $(uname -r)"
  echo "stages:$stages"
  echo "MEMRA_ROUTE_SPECIALIZE=${MEMRA_ROUTE_SPECIALIZE:-}"
} | tee -a "$out/env.txt"
b=/tmp/memra-build
[ -f "$b/build.ninja" ] || meson setup "$b" >"$out/setup.log" 2>&1 || { tail -40 "$out/setup.log"; exit 1; }
meson compile -C "$b" >"$out/compile.log" 2>&1 || { tail -40 "$out/compile.log"; exit 1; }
lib="$b/src/libmemra.so.2"
pack
if has test; then
  meson test -C "$b" --print-errorlogs ${MEMRA_SUITE:+--suite "$MEMRA_SUITE"} 2>&1 | tee "$out/test.log" | grep -E '^ *[0-9]+/[0-9]+|^(Ok|Fail|Skipped):'
  # The inherited environment is the machine's, not ours: leave it out.
  sed '/^Inherited environment:/d' "$b/meson-logs/testlog.txt" >"$out/testlog.txt"
fi
pack
if has rig; then
  meson test -C "$b" --setup rig test_gpu_tables 2>&1 | grep -E '^ *[0-9]+/[0-9]+' | tee "$out/rig.log"
fi
pack
if has check; then
  "$b/cli/memra" info 2>&1 | tee "$out/info.log"
  "$b/cli/memra" check 2>&1 | tee "$out/check.log"
fi
pack
if has rust; then
  # The crate's GPU tests (built elsewhere with `cargo test --no-run`, carried in .device/):
  # the seed's gate and the routing tests on caller-owned device memory, under the rig lock.
  found=0
  for t in .device/*; do
    [ -x "$t" ] || continue
    found=1
    echo "== $(basename "$t") --ignored, under the rig lock" | tee -a "$out/rust-gate.log"
    flock /tmp/memra-5090.lock env MEMRA_LIB="$lib" "$t" --ignored --test-threads=1 --nocapture \
      2>&1 | tee -a "$out/rust-gate.log"
  done
  [ $found = 1 ] || echo "rust: no test binaries carried in .device/" | tee "$out/rust-gate.log"
fi
pack
if has pytest; then
  MEMRA_LIB="$lib" MEMRA_SKIP_PACKAGING=1 python3 -m pytest -q -p no:cacheprovider python/tests \
    --ignore=python/tests/test_torch_gpu.py 2>&1 | tee "$out/pytest-cpu.log" | tail -3
fi
pack
if has elsewhere && [ "${MEMRA_THROWAWAY_MACHINE:-0}" = 1 ]; then
  tools/gpu-nvrtc-elsewhere.sh "$b" "$out" >/dev/null 2>&1
  grep -E '^== |memra check:|kernel:|PASSED|FAILED' "$out/nvrtc-elsewhere.log"
fi
pack
if has bench; then
  "$b/cli/memra" bench -o "$out/bench.json" 2>&1 | tee "$out/bench.log"
fi
pack
if has route; then
  # The routing section and first use alone (the full `memra bench` holds them too).
  MEMRA_BENCH_ROUTE_CONFIGS="${MEMRA_PEERS_CONFIGS:-}" "$b/cli/memra-bench" --route --json "$out/bench-route.json" 2>&1 | tee "$out/bench-route.log"
fi
pack
if has bench || has torch-bench; then
  MEMRA_LIB="$lib" PYTHONUNBUFFERED=1 python3 benchmarks/bench_torch.py --json "$out/bench-torch.json" 2>&1 | tee "$out/bench-torch.log"
fi
pack
if has variants; then
  # The kernels' changes waiting for a GPU, beside the shipped kernels in one process: the
  # decode (block) kernel's (queue), then the team kernel's over 64, 4,096 and 65,536
  # tokens (queue-prefill); MEMRA_PEERS_CONFIGS, where given, names the families.
  cfgs=(${MEMRA_PEERS_CONFIGS:+--configs "$MEMRA_PEERS_CONFIGS"})
  mapfile -t queue < <(grep -v '^#' benchmarks/variants/queue | grep .)
  if [ ${#queue[@]} -gt 0 ]; then
    timeout 420 benchmarks/probe_variants.sh "$b" "$out/probe-variants.json" "${cfgs[@]}" \
      "${queue[@]}" >"$out/probe-variants.log" 2>&1
    echo "variants: rc $? (probe-variants.log)"
    grep -E '^== |router' "$out/probe-variants.log" | cut -c1-100
    pack
  fi
  mapfile -t pqueue < <(grep -v '^#' benchmarks/variants/queue-prefill | grep .)
  for n in 64 4096 65536; do
    [ ${#pqueue[@]} -gt 0 ] || break
    timeout 300 benchmarks/probe_variants.sh "$b" "$out/probe-prefill-$n.json" --prefill "$n" \
      "${cfgs[@]}" "${pqueue[@]}" >"$out/probe-prefill-$n.log" 2>&1
    echo "prefill variants, $n tokens: rc $? (probe-prefill-$n.log)"
    grep -E '^== |prefill' "$out/probe-prefill-$n.log" | cut -c1-120
    pack
  done
  # Decode batches (queue-batch): a probe a line, its own sizes and families.
  i=0
  while read -r line; do
    case $line in '' | '#'*) continue ;; esac
    i=$((i + 1))
    read -r -a bargs <<<"$line"
    timeout 300 benchmarks/probe_variants.sh "$b" "$out/probe-batch-$i.json" "${bargs[@]}" \
      >"$out/probe-batch-$i.log" 2>&1 </dev/null
    echo "batch variants $i: rc $? (probe-batch-$i.log)"
    grep -E ' tokens, ' "$out/probe-batch-$i.log" | cut -c1-160
    pack
  done <benchmarks/variants/queue-batch
fi
if has ncu; then
  # Where a prefill miss's instructions go, by kernels_src/ line (ncu-CONFIG-lines.txt).
  IFS=, read -r -a ncfgs <<<"${MEMRA_NCU_CONFIGS:-DeepSeek-V3,Kimi-K2}"
  timeout 240 benchmarks/ncu_source.sh "$b" "$out" "${MEMRA_NCU_TOKENS:-4096}" "${ncfgs[@]}" 2>&1 |
    tee "$out/ncu.log"
  for f in "$out"/ncu-*-lines.txt; do [ -f "$f" ] && head -25 "$f"; done
fi
pack
# bench_peers (memra beside the peer routers: FlashInfer, vLLM, SGLang), built with nvcc where
# there is one, once a call (a warm machine's binary may be an earlier tree's); 0 when built.
peers_built=
build_peers() {
  [ -n "$peers_built" ] && return "$peers_built"
  local nv
  nv=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  [ -x "$nv" ] && NVCC="$nv" benchmarks/peers/build.sh "$b" /tmp/bench_peers >"$out/bench-peers-build.log" 2>&1
  peers_built=$?
  return "$peers_built"
}
if has bench || has peers; then
  if build_peers; then
    /tmp/bench_peers --json "$out/bench-peers.json" --budget-s "${MEMRA_PEERS_BUDGET_S:-300}" \
      ${MEMRA_PEERS_SECTIONS:+--sections "$MEMRA_PEERS_SECTIONS"} \
      ${MEMRA_PEERS_CONFIGS:+--configs "$MEMRA_PEERS_CONFIGS"} 2>&1 | tee "$out/bench-peers.log"
  else
    echo "bench_peers: not built (no nvcc, or the build failed: bench-peers-build.log)" | tee "$out/bench-peers.log"
    tail -30 "$out/bench-peers-build.log" 2>/dev/null
  fi
fi
pack
if has ab; then
  # Changes measured by the benchmark of record (benchmarks/ab_peers.sh): a line of
  # benchmarks/variants/queue-ab each (VARIANT... -- bench_peers' arguments), MEMRA_AB_ROUNDS
  # rounds (default 2) of the shipped library and each variant's in turn; MEMRA_AB_LINES
  # picks lines by number (the queue's non-comment lines, from 1).
  i=0
  build_peers || { echo "ab: bench_peers not built (bench-peers-build.log)"; i=-1; }
  while [ $i -ge 0 ] && read -r line; do
    case $line in '' | '#'*) continue ;; esac
    i=$((i + 1))
    # MEMRA_AB_LINES="1 3": those lines only (a line of four families, two rounds, took
    # about 80 s on the H100)
    [ -z "${MEMRA_AB_LINES:-}" ] || [[ " $MEMRA_AB_LINES " == *" $i "* ]] || continue
    read -r -a aargs <<<"$line"
    timeout 500 benchmarks/ab_peers.sh /tmp/bench_peers "$b" "/tmp/memra-ab/$i" \
      "${MEMRA_AB_ROUNDS:-2}" "${aargs[@]}" >"$out/ab-$i.log" 2>&1 </dev/null
    echo "ab $i: rc $? (ab-$i.log)"
    # this call's runs only (ab_peers.sh empties runs/ first)
    for f in /tmp/memra-ab/$i/runs/*; do
      [ -f "$f" ] && cp "$f" "$out/ab$i-${f##*/}"
    done
    # each arm's table rows (memra's and the peers'), round by round
    grep -H -E '^\| [A-Za-z0-9.-]+ \| [0-9]+ \|' "$out"/ab$i-*-r*.log | cut -c1-140
    pack
  done <benchmarks/variants/queue-ab
fi
