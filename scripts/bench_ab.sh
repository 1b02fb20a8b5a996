#!/usr/bin/env bash
# Same-run A/B of ember's measurement knobs, from the GPU bundle: runs `ember bench --op OP` once per
# setting, the settings alternated REPS times (so drift of the GPU's clocks or temperature lands on
# every setting alike), and prints one line per (shape, pass, setting) with the times of every
# repetition side by side.
# Usage: bash bench_ab.sh OUT_DIR OP REPS SETTING...
#   SETTING  space-separated VAR=VALUE assignments for one run ("-" for none), e.g.
#            bash bench_ab.sh out clifford 2 - "EMBER_CLIFFORD_WH_DB=3" "EMBER_CLIFFORD_WH_DB=1"
#            EMBER_AB_BIN=PATH in a setting runs that binary instead of bin/ember (e.g. a build of the
#            parent commit copied into the bundle), for A/Bs of code changes in one run.
# Extra environment for every run (e.g. EMBER_CLIFFORD_BENCH=fused, EMBER_FFTCONV_BENCH_L=256,1024)
# is taken from the caller. Raw outputs: OUT_DIR/ab-<setting index>-<rep>.txt; table: OUT_DIR/ab.txt.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=$1 op=$2 reps=$3
shift 3
mkdir -p "$out"
settings=("$@")
for rep in $(seq 1 "$reps"); do
  for i in "${!settings[@]}"; do
    s=${settings[$i]}
    envs=()
    [ "$s" = "-" ] || read -r -a envs <<< "$s"
    bin="$here/bin/ember"
    for e in "${envs[@]}"; do
      case $e in EMBER_AB_BIN=*) bin=${e#EMBER_AB_BIN=}; [[ $bin == /* ]] || bin="$here/$bin" ;; esac
    done
    env "${envs[@]}" "$bin" bench --op "$op" > "$out/ab-$i-$rep.txt" 2>&1 || echo "setting $i ($s), run $rep: rc=$?" >&2
  done
done
# Rows of the bench table: "op pass dtype shape... ms floor_ms floor% GB/s TFLOP/s"; the shape is
# everything between the dtype and the five numbers at the end.
python3 - "$out" "$reps" "${settings[@]}" <<'PY' | tee "$out/ab.txt"
import sys, re, collections
out, reps, settings = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
times = collections.OrderedDict()
for i, s in enumerate(settings):
    for rep in range(1, reps + 1):
        for line in open(f"{out}/ab-{i}-{rep}.txt", errors="replace"):
            f = line.split()
            if len(f) < 8 or f[0].startswith("[") or not re.fullmatch(r"[0-9.]+", f[-5]):
                continue
            key = (" ".join(f[1:-5]), i)
            times.setdefault(key, []).append(f[-5])
first = {}
for row, _ in times:
    first.setdefault(row, len(first))
for (row, i) in sorted(times, key=lambda k: (first[k[0]], k[1])):
    print(f"{row:<90} [{settings[i]}] {' '.join(times[(row, i)])}")
PY
