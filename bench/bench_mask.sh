#!/usr/bin/env bash
# Overhead of `ckv mask` over the plain forward passes it needs (issue 5, docs/PERF.md):
# a masked run needs one unmasked and one masked forward per record (plus one per placebo),
# so the overhead is   mask time / ((2 + placebos) x prefill) - 1,
# with mask time = the `ckv mask` command's wall (or CPU) time minus the start-up of the
# same binary (model load), measured as `ckv forward`'s wall time minus its prefill.
#
#   bench/bench_mask.sh [BUILD_DIR] [LENGTHS] [REPEATS] [THREADS]
#   bench/bench_mask.sh build "2048 4096" 3 2
#
# Prompts: one `ckv niah` record per length (seed 0, depth 0.5); the forward pass runs on
# exactly the tokens `ckv mask` runs (prompt + answer, read back from its HDF5 output).
# Runs are interleaved (forward, needle, snapkv, placebo 8, forward, ...) and the best of
# REPEATS is kept; `uptime` is printed beside every line. Needs /usr/bin/python3 with h5py.
set -euo pipefail
BUILD=${1:-build}
LENGTHS=${2:-"2048 4096"}
REPEATS=${3:-3}
THREADS=${4:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CKV=$(cd "$ROOT" && realpath "$BUILD/ckv")
MODEL=${CKV_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}
WORK=${TMPDIR:-/tmp}/ckv_bench_mask.$$
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT

# Runs a command, appends "wall user+sys" (seconds) to $WORK/t, prints its stdout.
timed() {
  /usr/bin/time -f "%e %U %S" -o "$WORK/time" "$@" > "$WORK/out"
  read -r wall user sys < "$WORK/time"
  echo "$wall $(echo "$user + $sys" | bc -l)"
}

declare -A CASES=(
  [needle]="--span-name needle"
  [snapkv]="--method snapkv --budget 0.1"
  [placebo8]="--span-name needle --placebo 8 --match-tol 1000"
)
declare -A FORWARDS=([needle]=2 [snapkv]=2 [placebo8]=10)

for L in $LENGTHS; do
  "$CKV" niah -m "$MODEL" --length "$L" --count 1 --seed 0 --depths 0.5 -o "$WORK/niah$L.jsonl" --force
  "$CKV" mask -m "$MODEL" -t "$THREADS" -i "$WORK/niah$L.jsonl" --span-name needle -q -o "$WORK/ids.h5" --force
  /usr/bin/python3 -c "
import h5py, sys
f = h5py.File(sys.argv[1], 'r'); rec = f['records'][list(f['records'])[0]]
open(sys.argv[2], 'w').write(' '.join(map(str, rec['tokens'][:])))
print('tokens', len(rec['tokens']), 'context_end', rec.attrs['context_end'])" "$WORK/ids.h5" "$WORK/ids$L.txt"

  declare -A best_wall=() best_cpu=()
  best_prefill=999999 best_prefill_cpu=999999 best_start=999999 best_start_cpu=999999
  min() { echo "if ($1 < $2) $1 else $2" | bc -l; }
  for r in $(seq "$REPEATS"); do
    read -r w c < <(timed "$CKV" forward -m "$MODEL" -t "$THREADS" --tokens "$WORK/ids$L.txt" --timing-json --repeats 1)
    p=$(/usr/bin/python3 -c "import json; j = json.load(open('$WORK/out')); print(j['prefill_seconds'][0], j['prefill_cpu_seconds'][0])")
    read -r pw pc <<< "$p"
    echo "L=$L rep $r forward: wall $w s (prefill $pw s), cpu $c s (prefill $pc s)   load: $(uptime | sed 's/.*average: //')"
    best_prefill=$(min "$pw" "$best_prefill"); best_prefill_cpu=$(min "$pc" "$best_prefill_cpu")
    best_start=$(min "$(echo "$w - $pw" | bc -l)" "$best_start"); best_start_cpu=$(min "$(echo "$c - $pc" | bc -l)" "$best_start_cpu")
    for k in needle snapkv placebo8; do
      # shellcheck disable=SC2086
      read -r w c < <(timed "$CKV" mask -m "$MODEL" -t "$THREADS" -i "$WORK/niah$L.jsonl" ${CASES[$k]} -q -o "$WORK/m.h5" --force)
      echo "L=$L rep $r mask $k: wall $w s, cpu $c s   load: $(uptime | sed 's/.*average: //')"
      best_wall[$k]=$(min "$w" "${best_wall[$k]:-999999}"); best_cpu[$k]=$(min "$c" "${best_cpu[$k]:-999999}")
    done
  done
  printf 'L=%s best: prefill %.2f s wall / %.2f s cpu, start-up %.2f s wall / %.2f s cpu\n' \
    "$L" "$best_prefill" "$best_prefill_cpu" "$best_start" "$best_start_cpu"
  for k in needle snapkv placebo8; do
    n=${FORWARDS[$k]}
    ow=$(echo "(${best_wall[$k]} - $best_start) / ($n * $best_prefill) - 1" | bc -l)
    oc=$(echo "(${best_cpu[$k]} - $best_start_cpu) / ($n * $best_prefill_cpu) - 1" | bc -l)
    printf 'L=%s %-8s mask %6.2f s wall, %6.2f s cpu; %2d forwards %6.2f s wall, %6.2f s cpu; overhead %+5.1f%% wall, %+5.1f%% cpu\n' \
      "$L" "$k" "${best_wall[$k]}" "${best_cpu[$k]}" "$n" "$(echo "$n * $best_prefill" | bc -l)" \
      "$(echo "$n * $best_prefill_cpu" | bc -l)" "$(echo "100 * $ow" | bc -l)" "$(echo "100 * $oc" | bc -l)"
  done
  unset best_wall best_cpu
done
