#!/usr/bin/env bash
# Build the GPU bundle: stripped release binaries (the `ember` CLI and the GPU test binary) with the
# Python reference scripts, in bundle/ (git-ignored). The bundle runs on a CUDA machine that has no
# Rust toolchain: `bash bundle/run.sh OUT_DIR`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p ember-cli
test_bin=$(cargo test --release -p ember-ops --test gpu --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "gpu":
        print(m["executable"])' | tail -1)
[ -n "$test_bin" ] || { echo "GPU test binary not found" >&2; exit 1; }
rm -rf bundle
mkdir -p bundle/bin bundle/bench
cp target/release/ember bundle/bin/ember
cp "$test_bin" bundle/bin/gpu-tests
strip bundle/bin/ember bundle/bin/gpu-tests
cp bench/*.py bundle/bench/
cp scripts/bundle_run.sh bundle/run.sh
cp scripts/bench_ab.sh scripts/ncu_profile.sh bundle/
# Ship the sm_90a kernel cache (Hopper; NVRTC 13.0 as on the GPU machine), so kernels load there
# without compiling. Needs libnvrtc here (.nvrtc/ as installed by .ci/run, or EMBER_CUDA_LIB_DIR).
# EMBER_BUNDLE_OPS="a b" limits the cache to those op families (the rest compile at first use).
if [ -d .nvrtc/nvidia/cu13/lib ]; then export LD_LIBRARY_PATH="$PWD/.nvrtc/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
ok=1
for op in ${EMBER_BUNDLE_OPS:-all}; do
  sel=(); [ "$op" = all ] || sel=(--op "$op")
  EMBER_CACHE_DIR="$PWD/bundle/kcache" bundle/bin/ember kernels --arch sm_90a --fill-cache "${sel[@]}" || ok=0
done
if [ "$ok" = 1 ]; then
  tar cJf bundle/kcache.tar.xz -C bundle kcache   # CUBINs compress ~9x
fi
rm -rf bundle/kcache
commit=$(git rev-parse --short=12 HEAD)
if ! git diff --quiet HEAD -- crates bench scripts; then commit="$commit+dirty"; fi
echo "$commit" > bundle/COMMIT
du -sh bundle
