#!/usr/bin/env bash
# The paper's Table 9 and Figures 4, 6 and 8 in the paper's protocol, on any model ckv
# loads, with the sweep of every protocol choice (docs/BOUND.md "Protocol") beside the
# paper's numbers; docs/RESULTS.md is written around its output.
#
#   scripts/reproduce_paper.sh MODEL [DATA.jsonl]
#   CKV=build/ckv OUT=out/paper THREADS=2 scripts/reproduce_paper.sh models/SmolLM2-135M-Instruct.Q4_1.gguf
#   SKIP_RUN=1 scripts/reproduce_paper.sh MODEL      # tables and figures only, from OUT
#
# DATA.jsonl: {id, context, question} records; default: the summary-style records cut from
# data/texts/ (`make_texts.py summary`: MultiNews-like "write a summary" prompts, 1.2-2.2K
# tokens of the default model). Runs (all layers, criticalkv(attn) vs attn and
# criticalkv(snapkv) vs snapkv, snapkv window 32 / max pool 7):
#
#   paper   --eval first-decode --compress prompt, budgets 2.5-40 %   (Table 9, Figures 4, 6)
#   sweep   the other --eval / --compress choices at 20 %, 40 %        (the sweep table)
#   check   ckv check, first-decode / prompt, 10 %, 20 %               (Figure 8)
#
# Every --nu-min reading is a column of every run, so the sweep covers them without a run
# each. Needs python3 with h5py and numpy (and matplotlib for the figures: /usr/bin/python3
# on Debian with python3-matplotlib). Prints, per run, the wall time, the CPU time (user +
# system: what an idle machine would need, divided by the cores used) and the load
# average, so a time measured on a shared machine can be read.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODEL="${1:?usage: scripts/reproduce_paper.sh MODEL [DATA.jsonl]}"
CKV="${CKV:-$ROOT/build/ckv}"
OUT="${OUT:-$ROOT/out/paper}"   # out/ is git-ignored
THREADS="${THREADS:-2}"
PY="${PYTHON:-/usr/bin/python3}"
METHODS='attn,criticalkv(attn),snapkv,criticalkv(snapkv)'
mkdir -p "$OUT"
DATA="${2:-$OUT/summary.jsonl}"
[ -n "${2:-}" ] || python3 "$ROOT/data/texts/make_texts.py" summary "$DATA"
start=$(date +%s)
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
cpu_total=0

# A model with sliding-window layers (Gemma 3: five local layers to each global one): the
# paper's runs take the full-attention layers, and the local layers, which hold only their
# window, get a paper run of their own (paper_local), reported apart (docs/MODELS.md
# "Sliding-window attention"). LAYERS=... overrides the choice for every run.
read -r GLOBAL LOCAL < <("$CKV" info "$MODEL" --json | python3 -c '
import json, sys
j = json.load(sys.stdin)
local = set(j.get("sliding_layers", []))
ranges = lambda ids: ",".join(map(str, ids)) or "-"
print(ranges([l for l in range(j["n_layer"]) if l not in local]), ranges(sorted(local)))')
if [ -n "${LAYERS:-}" ]; then GLOBAL=$LAYERS; LOCAL=-
elif [ "$LOCAL" = - ]; then GLOBAL=; fi
[ -z "$GLOBAL" ] || echo "layers: full attention $GLOBAL; sliding window ${LOCAL/-/none} (reported apart)"

run() {  # NAME LAYERS ckv-ARGS...: one ckv run, timed (wall, user, system seconds); LAYERS may be empty
  local name=$1 layers=$2
  shift 2
  local layer_args=()
  [ -z "$layers" ] || layer_args=(--layers "$layers")
  /usr/bin/time -f "%e %U %S" -o "$OUT/$name.time" "$CKV" "$@" "${layer_args[@]}" -m "$MODEL" -t "$THREADS" \
    --input "$DATA" --force -o "$OUT/$name" > "$OUT/$name.txt" 2> "$OUT/$name.err"
  read -r wall user sys < "$OUT/$name.time"
  cpu_total=$(python3 -c "print(round($cpu_total + $user + $sys))")
  echo "$name: wall ${wall} s, cpu $(python3 -c "print(round($user + $sys))") s; load $(cut -d' ' -f1 /proc/loadavg)"
}

if [ -z "${SKIP_RUN:-}" ]; then
  run paper "$GLOBAL" bound --methods "$METHODS" --budgets 0.025,0.05,0.1,0.2,0.4 --eval first-decode --compress prompt
  run first_decode_context "$GLOBAL" bound --methods "$METHODS" --budgets 0.2,0.4 --eval first-decode --compress context
  run last_prompt "$GLOBAL" bound --methods "$METHODS" --budgets 0.2,0.4 --eval last --compress prompt
  run question_context "$GLOBAL" bound --methods "$METHODS" --budgets 0.2,0.4 --eval question --compress context
  run check "$GLOBAL" check --budgets 0.1,0.2 --eval first-decode --compress prompt
  if [ -n "$GLOBAL" ] && [ "$LOCAL" != - ]; then
    run paper_local "$LOCAL" bound --methods "$METHODS" --budgets 0.025,0.05,0.1,0.2,0.4 --eval first-decode \
      --compress prompt
  fi
  echo "runs: cpu ${cpu_total} s in all (about $(( cpu_total / THREADS )) s of wall time on $THREADS idle cores)"
fi

echo
echo "== records"
grep '^record' "$OUT/paper.err" || true
echo
echo "== Table 9 and Figure 4 in the paper's protocol (first decoding token, prompt compression)"
sed -n '/^Table 9/,/^Kept entries/p' "$OUT/paper.txt" | grep -v '^Kept entries'
if [ -f "$OUT/paper_local.txt" ] && [ -n "$GLOBAL" ] && [ "$LOCAL" != - ]; then
  echo "== The same on the sliding-window layers $LOCAL (each holds only its window: budgets above it keep all)"
  sed -n '/^Table 9/,/^Kept entries/p' "$OUT/paper_local.txt" | grep -v '^Kept entries'
fi
echo "== Figure 8 (Assumption 3.4, first decoding token)"
grep -v '^  record' "$OUT/check.txt" | grep -v '^ *L[0-9]\|per layer' || true
echo
echo "== Sweep: every protocol choice at 20 % / 40 % beside the paper (Llama-3.1-8B, MultiNews)"
cd "$ROOT"
"$PY" -m analysis.paper "$OUT/paper.h5" "$OUT/first_decode_context.h5" "$OUT/last_prompt.h5" \
  "$OUT/question_context.h5" --json "$OUT/sweep.json"
if "$PY" -c 'import matplotlib' 2>/dev/null; then
  "$PY" -m analysis.report --bound "$OUT/paper.h5" --check "$OUT/check.h5" -o "$OUT/report" > /dev/null
  echo "figures (Figure 4 heatmaps, Figure 6, Figure 8) and Table 9: $OUT/report/report.md"
else
  echo "(no matplotlib for $PY: figures skipped)"
fi
echo "elapsed $(( $(date +%s) - start )) s; load after: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
