#!/usr/bin/env bash
# Writes the seed corpora of the fuzz targets that read ckv's own inputs and outputs into
# the git-ignored fuzz/corpus/ (scripts/fuzz.sh runs it when fuzz/corpus/templates is
# missing). Real outputs of small ckv runs, a few KB each:
#   templates/      outputs of dump, bound, check and mask: of the tiny model of tests/data
#                   (tiny-*: single records, usable by `bound --dump` with that model) and,
#                   when the default model is present, 2-record shard pairs of it
#                   (default-*-shard0.h5 / -shard1.h5); the edit templates of h5_mutate
#   h5_info/ h5_merge/ h5_bound_dump/ h5_mutate/   seeds of each target
#   records/        JSONL batches with spans (`ckv niah` output and hand-written edge cases)
#   selection_file/ selection files of both formats (mask's and bound's)
#   headkv_profile/ HeadKV profiles: the committed one of the default model and tiny-model ones
#   cli/, cli.dict  argv of typical commands (NUL-separated words) and every flag name
#   scripts/fuzz_corpus.sh          (needs $CKV_BINARY, else build/ckv)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ckv=${CKV_BINARY:-$root/build/ckv}
[[ -x $ckv ]] || { echo "fuzz_corpus.sh: no ckv binary at $ckv (build it, or set CKV_BINARY)" >&2; exit 1; }
model=${CKV_MODEL:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
tiny=$root/tests/data/loaders/tiny_llama.gguf  # 2 layers, 4 heads, 2 KV heads, vocab 32
corpus=$root/fuzz/corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$corpus"/{templates,h5_info,h5_merge,h5_bound_dump,h5_mutate,records,selection_file,headkv_profile,cli}
t=$corpus/templates
run() { "$ckv" -q "$@" >/dev/null; }

# --- tiny model: one 16-token record ------------------------------------------------------
echo '1 5 9 13 17 21 25 29 3 7 11 15 19 23 27 31' >"$tmp/tokens.txt"
tk=(-m "$tiny" --tokens "$tmp/tokens.txt")
run dump "${tk[@]}" --what q,k,v,attn,nu,attn_out,resid,logits --window 4 --compress 0 -o "$t/tiny-dump-all.h5" --force
run dump "${tk[@]}" --what q,k,v --dtype f32 --compress 0 -o "$t/tiny-dump-qkv.h5" --force
run dump "${tk[@]}" --what q,k,v --layers 1 --compress 1 -o "$t/tiny-dump-layer1.h5" --force
run bound "${tk[@]}" --window 2 --budgets 0.25,0.5 -o "$tmp/tiny-bound" --force && cp "$tmp/tiny-bound.h5" "$t/"
run check "${tk[@]}" --window 2 --budgets 0.5 -o "$tmp/tiny-check" --force && cp "$tmp/tiny-check.h5" "$t/"
run mask "${tk[@]}" --context-end 12 --spans 3-6 -o "$t/tiny-mask.h5" --force

# --- default model: 2 records, shards 0/2 and 1/2 ------------------------------------------
if [[ -f $model ]]; then
  printf '%s\n' '{"id": "r0", "context": "The harbour master of Vell is Ilse Varga. She repairs nets in the evening.", "question": " Who is the harbour master?", "answer": "Ilse Varga", "spans": {"needle": [[0, 41]]}}' \
    '{"id": "r1", "context": "The lighthouse on the southern cape was painted green in 1931.", "question": " What colour is it?", "answer": "green", "spans": {"needle": [[4, 14], [48, 53]]}}' >"$tmp/two.jsonl"
  dm=(-m "$model" -i "$tmp/two.jsonl")
  for s in 0 1; do
    run dump "${dm[@]}" --layers 0 --what q,k,v,attn --shard $s/2 -o "$t/default-dump-shard$s.h5" --force
    run bound "${dm[@]}" --layers 0 --window 4 --budgets 0.5 --shard $s/2 -o "$tmp/b$s" --force
    cp "$tmp/b$s.h5" "$t/default-bound-shard$s.h5"
    run mask "${dm[@]}" --layers 0 --span-name needle --shard $s/2 -o "$t/default-mask-shard$s.h5" --force
  done
  cp "$tmp/two.jsonl" "$corpus/records/two.jsonl"
  run niah -m "$model" --length 256 --count 3 --seed 0 -o "$corpus/records/niah.jsonl" --force
else
  echo "fuzz_corpus.sh: no default model at $model: tiny-model seeds only" >&2
fi

cp "$t"/*.h5 "$corpus/h5_info/"
cp "$t"/*.h5 "$corpus/h5_merge/"
cp "$t"/tiny-dump-*.h5 "$corpus/h5_bound_dump/"
# h5_mutate: the first byte picks the template (modulo their number), the rest the edits.
n=0
for f in "$t"/*.h5; do
  { printf "\\x$(printf %02x $n)"; head -c 63 /dev/urandom; } >"$corpus/h5_mutate/seed$n"
  n=$((n + 1))
done

# --- JSONL records -------------------------------------------------------------------------
r=$corpus/records
printf '%s\n' '{"id": "a", "context": "The key is 42. Noise noise.", "question": " What is the key?", "answer": "42", "spans": {"needle": [[0, 14]], "distractor": [[15, 27]]}}' \
  '{"context": "x y z", "question": null}' >"$r/basic.jsonl"
printf '%s\n' '{"id": "t", "context": "héllo wörld ✓ 𝄞 end", "spans": {"needle": [[6, 11], [14, 15]]}, "span_unit": "char"}' >"$r/unicode.jsonl"
printf '%s\n' '{"id": "u", "context": "one two three four", "question": "?", "spans": {"n": [[1, 3]]}, "span_unit": "token"}' >"$r/token.jsonl"
printf '%s\n\n%s\n' '{"id": "d", "context": "c"}' '{"id": "d", "context": "again"}' >"$r/duplicate.jsonl"

# --- selection files -----------------------------------------------------------------------
sf=$corpus/selection_file
echo '{"format": "ckv.selection", "format_version": 1, "c": 20, "layers": {"0": {"kept": [[0, 1, 5, 19], [2, 3]]}, "1": {"evicted": [[4, 5], []]}}}' >"$sf/mask.json"
echo '{"0": [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]], "1": [[10, 11, 12, 13, 14], [15, 16, 17, 18, 19]]}' >"$sf/bound.json"
echo '{"0": [[0], [1]]}' >"$sf/bound-one.json"

# --- HeadKV profiles (--headkv-profile) ----------------------------------------------------
hp=$corpus/headkv_profile
cp "$root/data/headkv/SmolLM2-135M-Instruct.retrieval.json" "$hp/default.json"
echo '{"format": "ckv.headkv_profile", "format_version": 1, "score": "retrieval", "n_layer": 2, "n_head": 4, "scores": [[0.5, 0, 0.25, 1], [0, 0, 0.125, 0]]}' >"$hp/tiny-query-heads.json"
echo '{"format": "ckv.headkv_profile", "format_version": 1, "n_layer": 2, "n_head": 2, "scores": [[1e-300, 2], [3.5, 1e300]]}' >"$hp/tiny-kv-heads.json"
if [[ -f $model ]] && [[ -f $corpus/records/niah.jsonl ]]; then
  run profile -m "$model" -i "$corpus/records/niah.jsonl" -o "$hp/default-niah.json" --force || true
fi

# --- command lines -------------------------------------------------------------------------
argv() { local name=$1; shift; printf '%s\0' "$@" >"$corpus/cli/$name"; }
argv dump dump -m model.gguf -i in.jsonl --layers 0-3,10 --heads all --what q,k,v,attn,nu --attn-rows window --window 32 --max-bytes 512MB --dtype f16 --compress 4 --shard 1/4 -o out.h5 --resume
argv bound bound --prompt "some text" --question "q?" --budgets 0.025,0.05 --keep 3 --layers all --window 8 --pool avg --kernel 7 --methods "criticalkv(adakv(snapkv)),attn" --alpha 0.5 --oracle --oracle-max-n 128 -o b --force
argv check check --dump d.h5 --alpha 0.25,0.5 --method attn --max-list 3 --budgets 0.1 --gqa-reduce max -o c -t 4
argv mask mask --tokens t.txt --context-end 12 --spans 3-6,8 --placebo 2 --match-tol 0.1 --seed 1 --generate 4 --csv m.csv -o m.h5 --resume -q
argv mask-method mask --input in.jsonl --method "criticalkv(snapkv)" --compare snapkv --budget 0.2 --layers 0 --heads 0-1 --sinks 4
argv niah niah --length 4096 --count 10 --seed 0 --value-type uuids --keys 3 --values 2 --queries 2 --depths 0,0.5,1 --distractors 2 --tolerance 0.05 --id-prefix n -o n.jsonl
argv merge merge --csv m.csv --allow-missing --force out.h5 "$t/tiny-mask.h5" "$t/tiny-dump-qkv.h5"
argv forward forward -p hello --top 5 -n 3 --repeats 2 --timing-json --record-all --device cpu --threads 2 --progress
argv info info --json x.h5
argv help --help
for sub in info forward dump mask niah merge bound check; do "$ckv" "$sub" --help 2>/dev/null; done |
  grep -o -- ' --\?[a-zA-Z][a-zA-Z0-9-]*' | sed 's/^ //' | sort -u | sed 's/.*/"&"/' >"$corpus/cli.dict"
printf '"%s"\n' info forward dump mask niah merge bound check >>"$corpus/cli.dict"
echo "fuzz_corpus.sh: seeds in $corpus ($(ls "$t" | wc -l) templates)"
