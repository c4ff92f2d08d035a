#!/usr/bin/env bash
# Runs the fuzzer for a bounded time over the seed corpus; new inputs go to a
# scratch folder in the build tree, never into the repository.
set -euo pipefail
fuzzer=$1 seeds=$2 scratch=$3 seconds=${4:-60}
mkdir -p "$scratch"
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  "$scratch" "$seeds"
