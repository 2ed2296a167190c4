#!/usr/bin/env bash
# Behaviour unchanged (issue 25's goal): runs the main job's commands with two ckv binaries
# on the same inputs and compares what they wrote: HDF5 data and attributes, CSV, JSON,
# JSONL and the console output, byte for byte apart from provenance times (and the build's
# git commit). The comparison is scripts/check_unchanged.py.
#
#     scripts/check_unchanged.sh run BINARY DIR     # the commands, with BINARY, in DIR
#     scripts/check_unchanged.sh compare DIR_A DIR_B
#     scripts/check_unchanged.sh BEFORE_BINARY AFTER_BINARY [WORK]   # both, then compare
#
# DIR gets a link ./ckv to the binary, so the command lines in the provenance are the same
# for both runs. The model is $CKV_MODEL or models/SmolLM2-135M-Instruct.Q4_1.gguf; the
# tiny test models come from tests/data. About two minutes per run on two cores.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
model=${CKV_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
tiny=$root/tests/data/models/tiny_llama_gqa

run_commands() {
  local binary=$1 dir=$2
  rm -rf "$dir" && mkdir -p "$dir" && ln -s "$(realpath "$binary")" "$dir/ckv"
  cd "$dir"
  local n=0
  step() {  # step CMD...: its stdout and stderr and exit status, numbered in order
    n=$((n + 1))
    local name
    name=$(printf 'console_%02d' "$n")
    printf '%s\n' "$*" >"$name.cmd"
    set +e
    "$@" >"$name.out" 2>"$name.err"
    echo $? >"$name.rc"
    set -e
  }
  export CKV_MODEL=$model
  step ./ckv niah --length 200 --count 3 --seed 0 -o niah.jsonl
  step ./ckv dump --input niah.jsonl --out run.h5 --layers 0-3 --what q,k,v,attn,nu --dtype f16 -t 2
  step ./ckv bound --input niah.jsonl --layers 0-3 --budgets 0.1,0.2,0.4 -t 2 -o bound
  step ./ckv bound --dump run.h5 --layers 0-3 --budgets 0.2 -t 2 -o bound_dump
  step ./ckv check --input niah.jsonl --layers 0-3 --alpha 0.25,0.5 -t 2 -o check
  step ./ckv mask --input niah.jsonl --span-name needle --placebo 2 --layers 0-3 -t 2 -o mask.h5 --csv mask.csv
  step ./ckv mask --input niah.jsonl --method snapkv --budget 0.2 --compare 'criticalkv(snapkv)' -t 2 \
    -o mask_method.h5 --csv mask_method.csv
  step ./ckv mask --input niah.jsonl --method snapkv --keep 40 -t 2 -o mask_keep.h5
  step ./ckv eval --input niah.jsonl --methods 'snapkv,criticalkv(snapkv)' --budgets 0.1,0.2 \
    --max-new-tokens 4 -t 2 -o eval
  step ./ckv dump --input niah.jsonl --shard 0/2 --what q,k,v --layers 0-1 -t 2 --out shard-0.h5
  step ./ckv dump --input niah.jsonl --shard 1/2 --what q,k,v --layers 0-1 -t 2 --out shard-1.h5
  step ./ckv merge all.h5 shard-0.h5 shard-1.h5
  step ./ckv bound --input niah.jsonl --shard 0/2 --layers 0-1 --budgets 0.2 -t 2 -o bshard-0
  step ./ckv bound --input niah.jsonl --shard 1/2 --layers 0-1 --budgets 0.2 -t 2 -o bshard-1
  step ./ckv merge bmerged bshard-0.h5 bshard-1.h5
  step ./ckv profile -i niah.jsonl -o profile.json -t 2
  for i in $(seq 0 59); do printf '%d ' $(((i * 7 + 3) % 200)); done >ids.txt
  step ./ckv bound -m "$tiny" --tokens ids.txt --window 4 --budgets 0.3,0.5 \
    --methods 'snapkv,h2o,streaming,adakv(snapkv),criticalkv(adakv(snapkv))' --oracle -t 1 -o tiny_bound
  step ./ckv bound --budgets 0.2 --methods 'snapkv,criticalkv(snapkv)' --eval first-decode --compress prompt \
    --layers 0,5 -t 2 -o builtin
  step ./ckv mask -m "$tiny" --tokens ids.txt --context-end 50 --spans 10-20 --placebo 1 --match-tol 1 \
    --layers 0-1 -t 1 -o tiny_mask.h5 --csv tiny_mask.csv
  step ./ckv info run.h5
  step ./ckv info --json
  # Errors: the first line and the exit status.
  step ./ckv bound --dump run.h5 --layers 0-7 -o never
  step ./ckv mask --input niah.jsonl -o never.h5
  step ./ckv eval --input niah.jsonl --budgets 1.0 -o never
}

case ${1:-} in
  run) run_commands "$2" "$3" ;;
  compare) exec /usr/bin/python3 "$root/scripts/check_unchanged.py" "$2" "$3" ;;
  *)
    work=${3:-$(mktemp -d)}
    (run_commands "$1" "$work/before")
    (run_commands "$2" "$work/after")
    exec /usr/bin/python3 "$root/scripts/check_unchanged.py" "$work/before" "$work/after"
    ;;
esac
