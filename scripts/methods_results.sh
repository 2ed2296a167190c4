#!/usr/bin/env bash
# The other selection methods (issue 17: expectedattention, obcache, pyramidkv, headkv, h2o,
# defensivekv, layer-defensivekv, duoattention) beside snapkv in docs/RESULTS.md's comparisons:
# Table 9 / Figure 4 in the paper's protocol, Figure 8 (Assumption 3.4) per method, and the
# accuracy table ("Answers under eviction"). Prints every number docs/RESULTS.md quotes for them.
#
#   scripts/methods_results.sh [MODEL]        # CKV=build/ckv OUT=out/methods THREADS=2 COUNT=100 LENGTHS=1024
#   SHARDS=2 STAGES=eval scripts/methods_results.sh   # the eval in 2 shards one after the other, then merged
#   SKIP_RUN=1 scripts/methods_results.sh     # only print the tables of an earlier run
#   STAGES="bound check" scripts/methods_results.sh   # a subset of the runs (bound check eval)
#
# Runs (default model SmolLM2-135M-Instruct Q4_1, snapkv window 32 / max pool 7):
#
#   bound  the 8 summary-style records of scripts/reproduce_paper.sh, --eval first-decode
#          --compress prompt, budgets 10/20/40 %, every method and its criticalkv(...) form
#          where it composes (Table 9, Figure 4; S1 per method: Figure 8)
#   check  `ckv check` with the same records and protocol for two methods, the cross-check
#          that bound's S1 is check's (Figure 8 per method is read from the bound file)
#   eval   `ckv eval` on the NIAH records of scripts/eval_results.sh (seed 11, 16 new tokens,
#          --compress prompt, budgets 5-40 %), the methods and their adakv/criticalkv forms
#
# DuoAttention needs a head pattern and none exists for the default model (DuoAttention's are
# trained per model): the script writes a stand-in, out/methods/duo_pattern.tsv, from the
# committed HeadKV retrieval profile (group mean of each KV head's query heads, so retrieval
# heads keep the full context), with --duo-sink 4 --duo-recent 32 (kvpress's on-the-fly 128 /
# 256 alone would keep more than the budget of these 1-3K-token prompts). Resumable: an
# interrupted run continues with the same command (--resume).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODEL="${1:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
CKV="${CKV:-$ROOT/build/ckv}"
OUT="${OUT:-$ROOT/out/methods}"   # out/ is git-ignored
THREADS="${THREADS:-2}"
COUNT="${COUNT:-100}"
LENGTHS="${LENGTHS:-1024}"
SHARDS="${SHARDS:-1}"
STAGES="${STAGES:-bound check eval}"
PY="${PYTHON:-/usr/bin/python3}"
PROFILE="$ROOT/data/headkv/SmolLM2-135M-Instruct.retrieval.json"
BOUND_METHODS='snapkv,criticalkv(snapkv),h2o,criticalkv(h2o),expectedattention,criticalkv(expectedattention),'\
'obcache,criticalkv(obcache),pyramidkv,criticalkv(pyramidkv),headkv,criticalkv(headkv),'\
'defensivekv,layer-defensivekv,duoattention'
CHECK_METHODS='expectedattention defensivekv'
EVAL_METHODS='expectedattention,adakv(expectedattention),criticalkv(expectedattention),'\
'obcache,adakv(obcache),criticalkv(obcache),headkv,criticalkv(headkv),'\
'defensivekv,layer-defensivekv,duoattention,pyramidkv'
METHOD_FLAGS=(--headkv-profile "$PROFILE" --duo-pattern "$OUT/duo_pattern.tsv" --duo-sink 4 --duo-recent 32)
mkdir -p "$OUT"
has() { [[ " $STAGES " == *" $1 "* ]]; }
resume_flag() {  # PREFIX: --resume when a finished or partial output exists
  if [ -e "$1.h5" ] || [ -e "$(dirname "$1")/.$(basename "$1").h5.partial" ]; then echo --resume; else echo --force; fi
}
exec 3>&1  # the script's stdout, for timed()'s line when a run's own output is redirected
timed() {  # NAME CMD...: run, print wall and CPU seconds (user + system) and the load
  local name=$1
  shift
  /usr/bin/time -f "%e %U %S" -o "$OUT/$name.time" "$@"
  read -r wall user sys < "$OUT/$name.time"
  echo "$name: wall ${wall} s, cpu $(python3 -c "print(round($user + $sys))") s; load $(cut -d' ' -f1 /proc/loadavg)" >&3
}

if [ -z "${SKIP_RUN:-}" ]; then
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
  python3 - "$PROFILE" "$OUT/duo_pattern.tsv" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
n_kv = 3  # the default model's KV heads
g = p["n_head"] // n_kv
with open(sys.argv[2], "w") as f:
    for row in p["scores"]:
        f.write("\t".join(repr(sum(row[k * g:(k + 1) * g]) / g) for k in range(n_kv)) + "\n")
EOF
  python3 "$ROOT/data/texts/make_texts.py" summary "$OUT/summary.jsonl"
  if has bound; then
    timed bound "$CKV" bound -m "$MODEL" -t "$THREADS" --input "$OUT/summary.jsonl" --methods "$BOUND_METHODS" \
      --budgets 0.1,0.2,0.4 --eval first-decode --compress prompt "${METHOD_FLAGS[@]}" \
      -o "$OUT/bound" "$(resume_flag "$OUT/bound")" > "$OUT/bound.txt" 2> "$OUT/bound.err"
  fi
  if has check; then
    for m in $CHECK_METHODS; do
      timed "check_$m" "$CKV" check -m "$MODEL" -t "$THREADS" --input "$OUT/summary.jsonl" --method "$m" \
        --budgets 0.1,0.2 --eval first-decode --compress prompt "${METHOD_FLAGS[@]}" \
        -o "$OUT/check_$m" "$(resume_flag "$OUT/check_$m")" > "$OUT/check_$m.txt" 2> "$OUT/check_$m.err"
    done
  fi
  if has eval; then
    for len in $LENGTHS; do
      "$CKV" niah -q --length "$len" --count "$COUNT" --seed 11 -o "$OUT/niah_$len.jsonl" --force
      shards=()
      for ((i = 0; i < SHARDS; i++)); do
        out="$OUT/eval_${len}_s$i"
        [ "$SHARDS" = 1 ] && out="$OUT/eval_$len"
        timed "$(basename "$out")" "$CKV" eval -q -m "$MODEL" -t "$THREADS" -i "$OUT/niah_$len.jsonl" \
          --methods "$EVAL_METHODS" --budgets 0.05,0.1,0.2,0.4 --compress prompt --max-new-tokens 16 \
          "${METHOD_FLAGS[@]}" --shard "$i/$SHARDS" -o "$out" "$(resume_flag "$out")"
        shards+=("$out.h5")
      done
      [ "$SHARDS" = 1 ] || "$CKV" merge -q "$OUT/eval_$len" "${shards[@]}" --force
    done
  fi
fi

cd "$ROOT"
echo
echo "== records"
grep '^record' "$OUT/bound.err" || true
echo
echo "== Table 9 / Figure 4, first-decode / prompt: every criticalkv(X) vs X, every nu_min reading (the paper's row first)"
"$PY" -m analysis.paper "$OUT/bound.h5" --budgets 10%,20%,40% --json "$OUT/table9.json"
echo "== Every method beside snapkv (first-decode / prompt, all 8 x 270 heads)"
shopt -s nullglob
checks=("$OUT"/check_*.json)
shopt -u nullglob
"$PY" - "$OUT/bound.h5" "${checks[@]}" <<'EOF'
import json
import sys

import numpy as np

from analysis.ckv_reader import open_ckv

f = open_ckv(sys.argv[1])
ix = f.metric_index
mm = np.stack([r.metrics_mean for r in f.records])   # [rec, method, budget, layer, head, metric]
kc = np.stack([r.kept_count for r in f.records])     # [rec, method, budget, layer, kv_head]
b_kept = np.stack([r.budgets for r in f.records])    # [rec, budget] uniform kept per KV head
labels = f.budget_labels
snap = f.method_index("snapkv")
L = mm[..., ix("L1")]                                # [rec, method, budget, layer, head]
S1 = mm[..., ix("S1")]
hat = mm[..., ix("theta_hat")]
print("Actual L (mean L1 over all heads), its ratio to snapkv's, the share of the 270 (layer, head) whose")
print("mean L over records is below snapkv's (Figure 4's statistic against snapkv), Our bound theta_hat over")
print("the heads with S1 >= 1/2 (their share), and kept entries per KV head / the uniform budget b.")
print("| method | budget | kept / b | Actual L | vs snapkv | heads below snapkv | theta_hat (S1>=1/2) | S1>=1/2 |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for m in f.methods:
    mi = f.method_index(m)
    for bi, lab in enumerate(labels):
        kept = kc[:, mi, bi].mean(axis=(1, 2)) / b_kept[:, bi]          # per record: mean kept / b
        ok = S1[:, mi, bi] >= 0.5
        below = np.mean(L[:, mi, bi].mean(axis=0) < L[:, snap, bi].mean(axis=0))
        print(f"| {m} | {lab} | {kept.mean():.3f} | {L[:, mi, bi].mean():.4g} | "
              f"{L[:, mi, bi].mean() / L[:, snap, bi].mean():.3f} | {100 * below:.1f} % | "
              f"{hat[:, mi, bi][ok].mean():.4g} | {100 * ok.mean():.1f} % |")
print()
print("Figure 8 per method: share of (record, layer, head) with S1 >= 1/2 (stage 1 = the method's top")
print("floor(alpha b) by its own score; defensivekv / layer-defensivekv: their own stage 1; duoattention: its kept set)")
print("| method | budget | all layers | layers >= 1 | layer 0 |")
print("|---|---|---:|---:|---:|")
layers = list(f.layers)
for m in f.methods:
    if m.startswith("criticalkv("):
        continue                                    # its stage 1 is its base's
    mi = f.method_index(m)
    for bi, lab in enumerate(labels):
        ok = S1[:, mi, bi] >= 0.5                    # [rec, layer, head]
        l0 = ok[:, layers.index(0)].mean() if 0 in layers else float("nan")
        rest = ok[:, [i for i, l in enumerate(layers) if l != 0]].mean()
        print(f"| {m} | {lab} | {100 * ok.mean():.1f} % | {100 * rest:.1f} % | {100 * l0:.1f} % |")
print()
for path in sys.argv[2:]:
    j = json.load(open(path))
    m = j["settings"]["method"]
    for r in j["results"]:
        lab = f"{100 * r['fraction']:g}%"
        bi = labels.index(lab)
        mine = np.mean(S1[:, f.method_index(m), bi] >= 0.5)
        print(f"cross-check: ckv check --method {m} {lab}: S1 >= 1/2 in {100 * r['fraction_holds']:.2f} % of "
              f"{r['heads']} heads; from bound's S1: {100 * mine:.2f} %")
EOF
for len in $LENGTHS; do
  echo
  [ -e "$OUT/eval_$len.json" ] || { echo "(no $OUT/eval_$len.json: run the eval stage)"; continue; }
  SKIP_RUN=1 OUT="$OUT" LENGTHS="$len" COUNT="$COUNT" "$ROOT/scripts/eval_results.sh"
done
echo
echo "== CPU time of the runs (user + system s; wall s on this machine, which may have been shared)"
for t in "$OUT"/*.time; do
  [ -s "$t" ] && read -r wall user sys < "$t" && echo "$(basename "$t" .time): cpu $(python3 -c "print(round($user + $sys))") s, wall $wall s"
done
