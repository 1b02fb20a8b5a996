#!/usr/bin/env bash
# Profile one kernel of one ember bench row with Nsight Compute, from the GPU bundle.
# Usage: bash ncu_profile.sh OUT_DIR NAME KERNEL_REGEX SKIP -- ENV=VALUE... -- EMBER_ARGS...
#   NAME          file stem of the report (OUT_DIR/NAME.ncu-rep, NAME-details.txt, NAME-sass.csv)
#   KERNEL_REGEX  ncu's --kernel-name regex (e.g. 'gs_fwd_rot')
#   SKIP          launches of that kernel to skip first (warm-up, the ceiling measurements)
# The full section set with PC sampling (stall reasons per SASS instruction); clocks as the GPU
# runs them (--clock-control none), so durations compare with the bench's event times.
# The report itself goes to $NCU_REP_DIR (default OUT_DIR).
# Example: bash ncu_profile.sh out gf_fwd gs_fwd_rot 3 -- EMBER_GRADFEAT_BENCH_ONLY="V=524288 fwd=packed" \
#            -- bench --op gradfeat --quick
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=$1 name=$2 regex=$3 skip=$4
shift 4
[ "$1" = "--" ] && shift
envs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
rep=${NCU_REP_DIR:-$out}
mkdir -p "$out" "$rep"
env "${envs[@]}" ncu --kernel-name "regex:$regex" --launch-skip "$skip" --launch-count 1 --set full \
  --import-source no --clock-control none -f -o "$rep/$name" "$here/bin/ember" "$@" > "$rep/$name-run.txt" 2>&1
echo "ncu $name: rc=$? $(grep -c "==PROF==" "$rep/$name-run.txt") profiler lines"
ncu -i "$rep/$name.ncu-rep" --page details --print-details all > "$out/$name-details.txt" 2>&1
ncu -i "$rep/$name.ncu-rep" --page source --csv --print-source sass > "$out/$name-sass.csv" 2>&1
# The headline numbers, for the reply.
grep -E "^  [a-z_]+.*\(|Duration|Registers Per|Achieved Occupancy|Executed Ipc A|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput" \
  "$out/$name-details.txt" | head -12
