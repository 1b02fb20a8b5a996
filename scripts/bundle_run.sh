#!/usr/bin/env bash
# Entry script of the GPU bundle. Usage: bash run.sh OUT_DIR
#
# Runs: ember info; the GPU tests (every CUDA op vs the f64 CPU reference); compute-sanitizer
# memcheck and racecheck on the small cases; ember bench + the PyTorch reference + merge. Leaves
# OUT_DIR/results.tgz (everything) and OUT_DIR/summary.txt, and prints the summary last.
#
# Environment: EMBER_STEPS (default "info,test,sanitize,bench"), EMBER_OPS (space-separated op
# families; default all), EMBER_QUICK=1 (bench --quick), EMBER_TORCH_COMPILE (all|largest|none).
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: run.sh OUT_DIR}
mkdir -p "$out/work"
work="$out/work"
export EMBER_COMMIT=$(cat "$here/COMMIT")
export EMBER_CACHE_DIR=/tmp/ember-kernel-cache
# Kernels precompiled for sm_90a by build_bundle.sh (same NVRTC version: the cache key matches).
mkdir -p "$EMBER_CACHE_DIR"
[ -f "$here/kcache.tar.xz" ] && tar xJf "$here/kcache.tar.xz" -C "$EMBER_CACHE_DIR" --strip-components=1
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export PYTHONPATH="$here/bench${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
steps=${EMBER_STEPS:-info,test,sanitize,bench}
ops=${EMBER_OPS:-}
summary="$out/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
has() { [[ ",$steps," == *",$1,"* ]]; }

note "ember bundle $(cat "$here/COMMIT") on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
if has info; then
  "$here/bin/ember" info 2>&1 | tee "$work/info.txt"
fi

if has test; then
  t0=$(date +%s)
  if [ -z "$ops" ]; then
    "$here/bin/gpu-tests" --json "$work/gpu-tests.json" > "$work/gpu-tests.txt" 2> "$work/gpu-tests.err"; rc=$?
  else
    rc=0
    : > "$work/gpu-tests.txt"
    for op in $ops; do
      "$here/bin/gpu-tests" --op "$op" --json "$work/gpu-tests-$op.json" >> "$work/gpu-tests.txt" 2>> "$work/gpu-tests.err" || rc=1
    done
  fi
  fails=$(grep -c ' FAIL$' "$work/gpu-tests.txt")
  note "gpu tests: rc=$rc, $(grep -E '^[0-9]+ passed' "$work/gpu-tests.txt" | tr '\n' ' ') ($fails failing rows, $(( $(date +%s) - t0 )) s)"
  grep ' FAIL$' "$work/gpu-tests.txt" | head -20 | tee -a "$summary"
  tail -3 "$work/gpu-tests.err" | tee -a "$summary"
fi

if has sanitize; then
  # No kernel-name filter: with compute-sanitizer 2025.3 any --kernel-name/--kernel-name-exclude
  # filter made racecheck fail inside cuBLAS's GEMMs ("failed to handle a hardware exception",
  # CUBLAS_STATUS_EXECUTION_FAILED) even when it matched no kernel. Hazards inside cuBLAS's own
  # kernels (names starting "nvjet") are counted apart in the summary instead.
  # The buffer cache off (EMBER_CUDA_CACHE_MB=0): every buffer exactly its tensor's size and freed
  # when dropped, so memcheck sees an access past a tensor's end or into a dropped one.
  export EMBER_CUDA_CACHE_MB=0
  race_filter=()
  for tool in memcheck racecheck; do
    filter=()
    [ "$tool" = racecheck ] && filter=("${race_filter[@]}")
    [ ${#filter[@]} -gt 0 ] && note "sanitizer $tool: ${filter[*]}"
    if [ -n "$ops" ]; then
      : > "$work/sanitizer-$tool.txt"
      for op in $ops; do
        compute-sanitizer --tool "$tool" "${filter[@]}" --error-exitcode 9 "$here/bin/gpu-tests" --small --op "$op" >> "$work/sanitizer-$tool.txt" 2>&1
        echo "rc=$?" >> "$work/sanitizer-$tool.txt"
      done
    else
      compute-sanitizer --tool "$tool" "${filter[@]}" --error-exitcode 9 "$here/bin/gpu-tests" --small > "$work/sanitizer-$tool.txt" 2>&1
      echo "rc=$?" >> "$work/sanitizer-$tool.txt"
    fi
    note "sanitizer $tool: $(grep -E 'ERROR SUMMARY' "$work/sanitizer-$tool.txt" | sort | uniq -c | tr '\n' ';') $(grep -E '^rc=' "$work/sanitizer-$tool.txt" | tr '\n' ' ')"
    [ "$tool" = racecheck ] && note "racecheck hazard reports outside cuBLAS's nvjet kernels: $(grep -E 'Race reported' "$work/sanitizer-$tool.txt" | grep -vc nvjet)"
  done
fi

if has bench; then
  quick=(); [ "${EMBER_QUICK:-0}" = 1 ] && quick=(--quick)
  if [ -z "$ops" ]; then
    "$here/bin/ember" bench "${quick[@]}" --json "$work/ember-bench.json" > "$work/bench.txt" 2> "$work/bench.err"
  else
    # One bench run per op; merged into one file for the reference and merge steps.
    for op in $ops; do
      "$here/bin/ember" bench "${quick[@]}" --op "$op" --json "$work/ember-bench-$op.json" >> "$work/bench.txt" 2>> "$work/bench.err"
    done
    python3 -c '
import json, sys
docs = [json.load(open(p)) for p in sys.argv[2:]]
out = docs[0]
for d in docs[1:]:
    out["rows"] += d["rows"]
    out["ceilings"]["gemm_other_tflops"].update(d["ceilings"].get("gemm_other_tflops", {}))
json.dump(out, open(sys.argv[1], "w"), indent=1)' "$work/ember-bench.json" $(for op in $ops; do echo "$work/ember-bench-$op.json"; done)
  fi
  tail -4 "$work/bench.err" | tee -a "$summary"
  python3 "$here/bench/torch_ref.py" "$work/ember-bench.json" "$work/torch.json" --compile "${EMBER_TORCH_COMPILE:-all}" 2> "$work/torch.err"
  tail -2 "$work/torch.err"
  python3 "$here/bench/merge.py" "$work/ember-bench.json" "$work/torch.json" "$work/results" 2>&1 | tail -5
  for j in "$work"/results/*/clifford.json; do
    [ -f "$j" ] && python3 "$here/bench/plot_clifford_heatmap.py" "$j" "$(dirname "$j")/clifford-heatmap.png" 2>&1 | tee -a "$summary"
  done
  for j in "$work"/results/*/gradfeat.json; do
    [ -f "$j" ] && python3 "$here/bench/plot_gradfeat.py" "$j" "$(dirname "$j")/gradfeat-tflops.png" 2>&1 | tee -a "$summary"
  done
  python3 - "$work" <<'PY' | tee -a "$summary"
import json, sys, glob, os
work = sys.argv[1]
for p in sorted(glob.glob(os.path.join(work, "results", "*", "*.json"))):
    d = json.load(open(p))
    for r in d["rows"]:
        shape = " ".join(f"{k}={v}" for k, v in r["shape"].items())
        e = r["torch_eager_ms"]; c = r["torch_compile_ms"]
        print(f"{r['op']:<10} {r['pass']:<8} {r['dtype']:<5} {shape[:38]:<38} {r['ms']:9.4f} ms {100*r['floor_frac']:5.1f}% "
              f"{r['tflops']:6.1f} TF  eager {('%.4f' % e) if e else '—':>8}  compile {('%.4f' % c) if c else '—':>8}")
PY
fi
tar czf "$out/results.tgz" -C "$work" .
echo "=== summary ==="
cat "$summary"
