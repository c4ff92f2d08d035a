#!/usr/bin/env bash
# NVRTC where a pip-only install puts it: copied to an unusual folder, named
# by MEMRA_NVRTC_PATH, with none left on the loader path or in CUDA_HOME;
# then with no NVRTC at all and a warm kernel cache. Runs `memra info`,
# `memra check` and the GPU gate each way. Logs go to $2 (default out/).
#
# It moves the system's libnvrtc files aside while it runs (and puts them
# back on exit), so it only runs on a throwaway machine:
#   MEMRA_THROWAWAY_MACHINE=1 tools/gpu-nvrtc-elsewhere.sh BUILD_DIR [LOG_DIR]
set -uo pipefail
[ "${MEMRA_THROWAWAY_MACHINE:-0}" = 1 ] || {
  echo "refusing: this moves the system's NVRTC aside; set MEMRA_THROWAWAY_MACHINE=1" >&2
  exit 2
}
b=${1:?build dir}
dest=${2:-out}
mkdir -p "$dest"
stash=$(mktemp -d /tmp/memra-nvrtc-stash-XXXXXX)
unusual=$(mktemp -d /tmp/memra-unusual-folder-XXXXXX)
# Everything the loader could find: ld.so.cache, LD_LIBRARY_PATH, the toolkits.
mapfile -t libs < <({
  ldconfig -p | awk '/libnvrtc\.so/ {print $NF}'
  for d in ${LD_LIBRARY_PATH//:/ } /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib; do
    ls "$d"/libnvrtc.so* 2>/dev/null
  done
} | grep -v builtins | xargs -r realpath | sort -u)
restore() {
  for f in "$stash"/*; do [ -e "$f" ] && mv "$f" "$(cat "$f.where" 2>/dev/null || echo /nonexistent)" 2>/dev/null; done
  ldconfig
}
trap restore EXIT
for f in "${libs[@]}"; do
  cp -a "$f" "$unusual/"
  echo "$f" >"$stash/$(basename "$f").where"
  mv "$f" "$stash/$(basename "$f")"
  for l in "$(dirname "$f")"/libnvrtc.so*; do # the soname links too
    [ -L "$l" ] && case "$l" in *builtins*) ;; *) rm -f "$l" ;; esac
  done
done
(cd "$unusual" && for f in libnvrtc.so.*.*; do ln -sf "$f" "$(echo "$f" | sed -E 's/(\.so\.[0-9]+)\..*/\1/')"; done)
ldconfig
{
  echo "moved aside: ${libs[*]}"
  echo "loader path now: $(ldconfig -p | grep -c 'libnvrtc\.so' || true) libnvrtc entries (builtins only)"
  ls -l "$unusual"
} | tee "$dest/nvrtc-elsewhere-setup.log"
nv=$(ls "$unusual"/libnvrtc.so.1[0-9] | head -1)
cache=$(mktemp -d /tmp/memra-elsewhere-cache-XXXXXX)
run() { # label, env...
  local label=$1
  shift
  {
    echo "== $label"
    env -u CUDA_HOME -u CUDA_PATH MEMRA_CACHE_DIR="$cache" "$@" "$b/cli/memra" info
    env -u CUDA_HOME -u CUDA_PATH MEMRA_CACHE_DIR="$cache" "$@" "$b/cli/memra" check
    env -u CUDA_HOME -u CUDA_PATH MEMRA_CACHE_DIR="$cache" "$@" "$b/tests/test_gpu_tables"
    echo "== $label: exit $?"
  } 2>&1 | tee -a "$dest/nvrtc-elsewhere.log"
}
rm -f "$dest/nvrtc-elsewhere.log"
run "MEMRA_NVRTC_PATH=$nv, nothing on the loader path" MEMRA_NVRTC_PATH="$nv"
run "no NVRTC anywhere, the kernel cache warm" MEMRA_NVRTC_PATH=
