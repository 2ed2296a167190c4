#!/usr/bin/env bash
# `ckv bound` at scale (issue 4): default model, a LENGTH-token NIAH prompt, all 30 layers
# x 9 heads, the four main methods (the default --methods) x five budgets (the default
# --budgets). Runs the forward pass alone (`ckv forward --timing-json`: model load + prefill
# of the same text) and the whole `ckv bound` (model load + prefill + analysis + outputs),
# interleaved REPEATS times with the same threads, and prints the best wall time of each,
# their difference (the analysis beyond the forward pass) and the peak RSS of each, with
# the load average before and after. CPU time (user + sys) is printed beside wall time: on a
# machine shared with other jobs it shows the work itself.
#   bench/bench_bound.sh [BUILD_DIR] [LENGTH] [THREADS] [REPEATS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
length=${2:-4096}
threads=${3:-2}
repeats=${4:-3}
ckv="$build/ckv"
model=${CKV_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
work=$(mktemp -d "${TMPDIR:-/tmp}/bench_bound.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$ckv" -q niah --length "$length" --count 1 --seed 0 -o "$work/prompt.jsonl"
# The same text for the forward pass: context + question (tokenized in one piece there, so
# the count may differ by a token at the seam; both counts are printed).
python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).readline()); open(sys.argv[2],"w").write(r["context"]+(r.get("question") or ""))' \
  "$work/prompt.jsonl" "$work/prompt.txt"

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
: > "$work/runs"
for ((i = 0; i < repeats; ++i)); do
  /usr/bin/time -f "%e %M %U %S" -o "$work/t_fwd" "$ckv" -q forward -m "$model" -t "$threads" \
    --prompt-file "$work/prompt.txt" --timing-json > "$work/fwd.json"
  /usr/bin/time -f "%e %M %U %S" -o "$work/t_bound" "$ckv" -q bound -m "$model" -t "$threads" \
    --input "$work/prompt.jsonl" -o "$work/bound" --force > "$work/bound.txt"
  echo "forward $(cat "$work/t_fwd") $(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['tokens'], j['prefill_seconds'][0])" "$work/fwd.json")" >> "$work/runs"
  echo "bound $(cat "$work/t_bound")" >> "$work/runs"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$work/runs" "$work/bound.h5" "$threads" "$repeats" "$load_before" "$load_after" <<'PY'
import sys
import h5py
runs, h5, threads, repeats, before, after = sys.argv[1:7]
fwd, bound = [], []
for line in open(runs):
    kind, *x = line.split()
    wall, rss, user, sys_ = float(x[0]), int(x[1]) / 1024, float(x[2]), float(x[3])
    (fwd if kind == "forward" else bound).append((wall, user + sys_, rss, *x[4:]))
with h5py.File(h5) as f:
    rec = f["records"][next(iter(f["records"]))].attrs
    n, n_eval = int(rec["n"]), len(rec["eval_rows"])
fw, fc = min(r[0] for r in fwd), min(r[1] for r in fwd)
bw, bc = min(r[0] for r in bound), min(r[1] for r in bound)
print(f"ckv bound: NIAH prompt of {n} tokens ({fwd[0][3]} for the forward), {n_eval} evaluation queries, "
      f"30 layers x 9 heads, 4 methods x 5 budgets; {threads} threads, best of {repeats} interleaved")
print(f"  forward alone  {fw:6.2f} s wall  {fc:6.2f} s CPU  (prefill {min(float(r[4]) for r in fwd):.2f} s)  "
      f"peak RSS {max(r[2] for r in fwd):5.0f} MiB")
print(f"  ckv bound      {bw:6.2f} s wall  {bc:6.2f} s CPU  peak RSS {max(r[2] for r in bound):5.0f} MiB")
print(f"  beyond the forward pass: {bw - fw:.2f} s wall, {bc - fc:.2f} s CPU "
      f"({(bc - fc) / int(threads):.2f} s on {threads} cores if it were all parallel)")
print(f"  load average before {before}, after {after}")
PY
