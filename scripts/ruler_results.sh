#!/usr/bin/env bash
# RULER under eviction in the paper's layout (its Table 1 / Figure 1a; docs/RULER.md "Under
# eviction"): `ckv ruler` writes each of RULER's 13 tasks for MODEL's own tokenizer, `ckv eval`
# answers them with the full cache and each method at each budget (each task with its own
# generation budget, RULER's tokens_to_generate), and analysis/ruler.py prints the table per
# task and the average, with the loss against the full cache, and writes a report with the
# figure.
#
#   scripts/ruler_results.sh [MODEL]        # default: the default model; CKV=build/ckv OUT=out/ruler
#                                           # THREADS=2 COUNT=20 LENGTH=4096 COMPRESS=context
#   COUNT=5 LENGTH=1024 TASKS="niah_single_1 vt" scripts/ruler_results.sh
#   METHODS='snapkv,criticalkv(snapkv)' BUDGETS=0.2,0.5 scripts/ruler_results.sh
#   SHARDS=4 SHARD=2 scripts/ruler_results.sh   # only shard 2 of 4 of every task (a Slurm array
#                                               # task: SHARD=$SLURM_ARRAY_TASK_ID), then MERGE=4
#   MERGE=4 scripts/ruler_results.sh        # ckv merge the 4 shards of every task, then the tables
#   SKIP_RUN=1 scripts/ruler_results.sh     # only the tables of an earlier run
#
# The default methods are the paper's and kvpress's: snapkv, adakv(snapkv), their criticalkv
# versions, defensivekv, layer-defensivekv, headkv (with a retrieval-head profile: the
# committed one of the default model, else made by `ckv profile` from NIAH records) and
# streaming; the default budgets the paper's 10/20/40 % and kvpress's leaderboard's kept
# shares 75/50/25/12.5 %. COMPRESS=context is kvpress's pipeline (the question is fed after
# compression); COMPRESS=prompt the paper's code. Resumable: an interrupted run continues
# with the same command (--resume). Hours on 2 cores at the defaults: see docs/RESULTS.md.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CKV="${CKV:-$ROOT/build/ckv}"
MODEL="${1:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
OUT="${OUT:-$ROOT/out/ruler}"   # out/ is git-ignored
THREADS="${THREADS:-2}"
COUNT="${COUNT:-20}"
LENGTH="${LENGTH:-4096}"
COMPRESS="${COMPRESS:-context}"
SEED="${SEED:-0}"
TASKS="${TASKS:-niah_single_1 niah_single_2 niah_single_3 niah_multikey_1 niah_multikey_2 niah_multikey_3 niah_multivalue niah_multiquery vt cwe fwe qa_1 qa_2}"
METHODS="${METHODS:-snapkv,adakv(snapkv),criticalkv(snapkv),criticalkv(adakv(snapkv)),defensivekv,layer-defensivekv,headkv,streaming}"
BUDGETS="${BUDGETS:-0.1,0.125,0.2,0.25,0.4,0.5,0.75}"
SHARDS="${SHARDS:-1}"
SHARD="${SHARD:-}"
log() { printf '[ruler_results] %s\n' "$*" >&2; }
# Runs "$@" to make the file $1 unless it exists, under a lock of its own: the shards of one
# run (started together, SHARD=0..N-1) share their inputs, and the first writes each while
# the others wait (ckv refuses a second writer of one output).
make_once() {
  local file=$1; shift
  [ -e "$file" ] && return 0
  (
    flock 9
    [ -e "$file" ] || "$@"
  ) 9>"$(dirname "$file")/.$(basename "$file").lock"
}
[ -f "$MODEL" ] || [ -d "$MODEL" ] || { echo "ruler_results.sh: model $MODEL not found" >&2; exit 2; }
mkdir -p "$OUT"

method_flags=()
if [[ $METHODS == *headkv* ]]; then
  profile="$ROOT/data/headkv/SmolLM2-135M-Instruct.retrieval.json"
  if [ "$MODEL" != "$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    profile="$OUT/headkv_profile.json"
    if [ ! -e "$profile" ] && [ -z "${SKIP_RUN:-}" ]; then
      log "retrieval-head profile for headkv: ckv profile over 8 NIAH records"
      make_once "$OUT/profile_niah.jsonl" \
        "$CKV" niah -q -m "$MODEL" --length 1024 --count 8 --seed 3 -o "$OUT/profile_niah.jsonl"
      make_once "$profile" \
        "$CKV" profile -q -m "$MODEL" -t "$THREADS" -i "$OUT/profile_niah.jsonl" -o "$profile"
    fi
  fi
  method_flags+=(--headkv-profile "$profile")
fi

if [ -z "${SKIP_RUN:-}" ]; then
  for task in $TASKS; do
    records="$OUT/ruler_$task.jsonl"
    make_once "$records" "$CKV" ruler -q -m "$MODEL" --task "$task" --length "$LENGTH" --count "$COUNT" \
                              --seed "$SEED" -o "$records"
    # RULER's generation budget of the task, as the records carry it.
    budget=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["ruler"]["tokens_to_generate"])' "$records")
    if [ -n "${MERGE:-}" ]; then
      shards=()
      for ((i = 0; i < MERGE; i++)); do shards+=("$OUT/eval_${task}_s$i.h5"); done
      "$CKV" merge -q "$OUT/eval_$task" "${shards[@]}" --force
      continue
    fi
    shard_flags=() out="$OUT/eval_$task"
    if [ -n "$SHARD" ]; then
      shard_flags=(--shard "$SHARD/$SHARDS")
      out="$OUT/eval_${task}_s$SHARD"
    fi
    resume=
    [ -e "$out.h5" ] && { log "$task: $out.h5 is complete"; continue; }
    [ -e "$(dirname "$out")/.$(basename "$out").h5.partial" ] && resume=--resume
    log "$task: $COUNT records of $LENGTH tokens, generation budget $budget tokens"
    "$CKV" eval -q -m "$MODEL" -t "$THREADS" -i "$records" --methods "$METHODS" --budgets "$BUDGETS" \
      --compress "$COMPRESS" --max-new-tokens "$budget" "${method_flags[@]}" "${shard_flags[@]}" \
      -o "$out" $resume
  done
fi
[ -n "$SHARD" ] && { log "shard $SHARD/$SHARDS done; run MERGE=$SHARDS $0 once every shard is"; exit 0; }
cd "$ROOT" && /usr/bin/python3 -m analysis.ruler "$OUT"   # Debian's matplotlib (scripts/setup.sh)
